"""The console scripts' entry points: `npugrad-opt` and `npugrad` as the short-lived processes
they are (one per lit RUN line). Most of such a process's second or two is Python's own work:

- importing xDSL's dialects and npugrad's, which leaves about 95,000 objects for the cyclic
  garbage collector to track, and it runs over them again and again as they accumulate;
- the collections during the command, which keep visiting all of them;
- the interpreter's teardown at exit, which frees them one by one (about 0.3 s).

So these entry points import the command's module with the collector off, then freeze what the
imports made (`gc.freeze`: later collections skip it) and turn the collector back on; and once
the command has returned and stdout and stderr are flushed, they end the process with
`os._exit`. Nothing is lost by the early exit: the disk caches write whole files and rename them
into place before the call that wrote them returns, and npugrad registers no `atexit` work.
A command that raises anything but SystemExit is left to the interpreter (its traceback, its
usual exit). Called in-process (tests, `python -m npugrad.tools.opt`), the commands' `main`
functions keep the interpreter's usual behaviour.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from collections.abc import Callable
from typing import NoReturn


def opt() -> NoReturn:
    """`npugrad-opt`."""
    _run(_imported("npugrad.tools.opt"))


def npugrad() -> NoReturn:
    """`npugrad`."""
    _run(_imported("npugrad.tools.main"))


def _imported(module: str) -> Callable[[], object]:
    """`module`'s main, imported with the collector off, then frozen out of its reach."""
    gc.disable()
    try:
        main = importlib.import_module(module).main
    finally:
        gc.freeze()
        gc.enable()
    return main


def _run(main: Callable[[], object]) -> NoReturn:
    try:
        main()
        code = 0
    except SystemExit as e:
        code = exit_status(e)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (the reader stopped) or a closed stream
            code = code or 1
    os._exit(code)


def exit_status(e: SystemExit) -> int:
    """The status the interpreter would exit with for `e`, printing a message code as it does."""
    if e.code is None:
        return 0
    if isinstance(e.code, int):
        return e.code & 0xFF
    print(e.code, file=sys.stderr)
    return 1


if __name__ == "__main__":
    # This module holds the console scripts' entry points; run as a module, it has no command of
    # its own to pick, so it says which ones there are rather than doing nothing.
    sys.exit("npugrad.tools.command is the entry module of the `npugrad` and `npugrad-opt` scripts: "
             "run one of them, or python -m npugrad.tools.main / python -m npugrad.tools.opt")
