"""Progress on stderr for work that takes more than a couple of seconds (a cold compile of the
linear cross-entropy kernels, a benchmark), for a person watching: when stderr is a terminal
(NPUGRAD_PROGRESS=1: always, e.g. into a log file; 0: never), and never after `set_quiet()`
(npugrad-opt --quiet, npugrad bench --quiet). So pipes, files and FileCheck tests see nothing.

    with progress.slow("npugrad-opt: compiling x.mlir to llvm-ir"):   # said after 2 s, if still running
        ...
    # npugrad-opt: compiling x.mlir to llvm-ir ...
    # npugrad-opt: compiling x.mlir to llvm-ir: done in 6.1 s
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_quiet = False


def set_quiet(quiet: bool = True) -> None:
    global _quiet
    _quiet = quiet


def delay() -> float:
    """Seconds a piece of work runs before it is announced (NPUGRAD_PROGRESS_DELAY, default 2;
    inf: never). Anything but a number >= 0 is an error naming the variable."""
    text = os.environ.get("NPUGRAD_PROGRESS_DELAY", "2")
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not seconds >= 0:
        raise ValueError(f"NPUGRAD_PROGRESS_DELAY must be a number of seconds >= 0, got {text!r}")
    return min(seconds, threading.TIMEOUT_MAX)  # a longer wait overflows the timer's thread


def enabled() -> bool:
    forced = os.environ.get("NPUGRAD_PROGRESS", "").strip()
    if forced not in ("", "0", "1"):  # `yes` taken for unset would be a setting silently not taken
        raise ValueError(f"NPUGRAD_PROGRESS must be 1 (always), 0 (never) or unset (on a terminal), "
                         f"got {os.environ['NPUGRAD_PROGRESS']!r}")
    return not _quiet and forced != "0" and (forced == "1" or sys.stderr.isatty())


def say(message: str) -> None:
    if enabled():
        print(message, file=sys.stderr, flush=True)


@contextmanager
def slow(what: str) -> Iterator[None]:
    """Says `what ...` if the block still runs after `delay()` seconds, and then how long it took."""
    if not enabled():
        yield
        return
    start = time.perf_counter()
    said = threading.Event()

    def announce() -> None:
        said.set()
        say(f"{what} ...")

    timer = threading.Timer(delay(), announce)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        if said.is_set():
            say(f"{what}: done in {time.perf_counter() - start:.1f} s")
