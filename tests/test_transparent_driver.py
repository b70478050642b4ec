"""npugrad-opt shows what it does: --time-passes and --print-between-passes with --stage, --help
with npugrad's passes and options first and apart from xDSL's, --version naming npugrad, progress
on stderr for slow work (to a terminal only, never with --quiet)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from npugrad.compiler import Pipeline, parse
from npugrad.passes import ALL_PASSES
from npugrad.tools.opt import main

ROOT = Path(__file__).resolve().parent.parent
BCE = ROOT / "examples" / "bce_grad.mlir"


def _opt(capsys, *args: str) -> tuple[str, str]:
    with pytest.raises(SystemExit) as stop:
        main([*args])
    out, err = capsys.readouterr()
    assert stop.value.code == 0, err
    return out, err


def test_version_names_npugrad_and_the_xdsl_it_is_built_on(capsys):
    out, _ = _opt(capsys, "--version")
    assert out.strip() == f"npugrad-opt (npugrad {version('npugrad')}), built on xDSL {version('xdsl')}"


def test_help_lists_npugrads_options_and_passes_first_apart_from_xdsls(capsys):
    out, _ = _opt(capsys, "--help")
    ours, passes, theirs = (out.index(h) for h in ("npugrad's options:", "npugrad's passes", "xdsl-opt's options"))
    assert ours < passes < theirs
    listed = out[passes:theirs]
    for name, factory in ALL_PASSES.items():
        assert f"\n    {name}\n" in listed, name
    assert "tile_bt=0: tokens per tile" in listed and "target=host: the hardware: host, npu-a2" in listed
    assert "cpu=host: the CPU whose caches size the tiles" in listed
    assert "--stage {" in out[ours:passes] and "--stage {" not in out[theirs:]
    assert "-p PASSES, --passes PASSES" in out[theirs:]
    xdsl_passes = out[theirs:].split("or xDSL's:")[1]
    assert "convert-scf-to-cf" in xdsl_passes.replace("\n", "").replace(" ", "")
    assert "convert-train-to-loops" not in xdsl_passes.replace("\n", "").replace(" ", "")


def test_time_passes_with_stage_times_every_pass_of_the_stage(capsys):
    out, _ = _opt(capsys, str(BCE), "--stage", "llvm-ir", "--time-passes")
    timed = [line.split()[1] for line in out.splitlines() if line.startswith("Pass ")]
    xdsl = [p.name for p in Pipeline().passes_to("vectorized")]
    assert timed == [*xdsl, "upstream", "translation"]
    assert out.split("\n", len(timed))[-1].lstrip().startswith("; ModuleID")  # then the stage's IR


def test_print_between_passes_with_stage_prints_the_ir_after_every_pass_but_the_last(capsys):
    out, _ = _opt(capsys, str(BCE), "--stage", "loops", "--target", "npu-a2", "--print-between-passes")
    names = [p.name for p in Pipeline(target="npu-a2").passes_to("loops")]
    dumps = out.split("IR after ")[1:]
    assert [d.split(":", 1)[0] for d in dumps] == names[:-1]
    # Each dump is a module; the one after convert-train-to-loops still has the npu ops, the output none.
    after_loops = dumps[names.index("convert-train-to-loops")].split(":", 1)[1]
    module = after_loops.split("\n\n\n")[0]
    parse(module)
    assert "npu.alloc_local" in module
    final = dumps[-1].split("\n\n\n", 1)[1]
    assert "npu.alloc_local" not in final and "scf.for" in final


def _with_terminal(*args: str, env: dict[str, str]) -> tuple[str, str]:
    """npugrad-opt with stderr on a pseudo-terminal: (stdout, stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([str(Path(sys.executable).parent / "npugrad-opt"), *args], stdout=subprocess.PIPE,
                            stderr=follower, text=True, env={**os.environ, **env})
    os.close(follower)
    out = proc.stdout.read()
    proc.wait(timeout=300)
    err = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the terminal's other end is closed: all read
            break
        if not chunk:
            break
        err += chunk
    os.close(leader)
    assert proc.returncode == 0, err
    return out, err.decode()


@pytest.mark.parametrize("delay", ["abc", "-1", "nan"])
def test_a_progress_delay_that_is_no_number_of_seconds_is_an_error_naming_it(delay):
    """Not float()'s 'could not convert string to float', which names nothing."""
    env = {**os.environ, "NPUGRAD_PROGRESS": "1", "NPUGRAD_PROGRESS_DELAY": delay, "NPUGRAD_CACHE_DIR": "off"}
    result = subprocess.run([str(Path(sys.executable).parent / "npugrad-opt"), str(BCE), "--stage", "llvm-ir"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1
    assert f"error: NPUGRAD_PROGRESS_DELAY must be a number of seconds >= 0, got '{delay}'" in result.stderr


@pytest.mark.parametrize("forced", ["yes", "true", "2"])
def test_a_progress_setting_other_than_1_or_0_is_an_error_naming_it(forced):
    """It was taken for unset (progress on a terminal only): a setting silently not taken."""
    env = {**os.environ, "NPUGRAD_PROGRESS": forced, "NPUGRAD_CACHE_DIR": "off"}
    result = subprocess.run([str(Path(sys.executable).parent / "npugrad-opt"), str(BCE), "--stage", "llvm-ir"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 1
    assert f"error: NPUGRAD_PROGRESS must be 1 (always), 0 (never) or unset (on a terminal), got '{forced}'" in \
        result.stderr


def test_an_infinite_progress_delay_says_nothing_and_does_not_break_the_timer():
    """inf: never announced (a wait that long overflowed the timer's thread, a traceback)."""
    env = {**os.environ, "NPUGRAD_PROGRESS": "1", "NPUGRAD_PROGRESS_DELAY": "inf", "NPUGRAD_CACHE_DIR": "off"}
    result = subprocess.run([str(Path(sys.executable).parent / "npugrad-opt"), str(BCE), "--stage", "llvm-ir"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stderr == ""


def test_slow_work_says_so_on_a_terminal_and_not_with_quiet_or_to_a_pipe():
    fast = {"NPUGRAD_PROGRESS_DELAY": "0"}  # anything is slow
    out, err = _with_terminal(str(BCE), "--stage", "llvm-ir", env=fast)
    assert f"npugrad-opt: compiling {BCE} to llvm-ir ..." in err
    assert f"npugrad-opt: compiling {BCE} to llvm-ir: done in " in err
    assert "npugrad-opt" not in out and out.startswith("; ModuleID")
    _, err = _with_terminal(str(BCE), "--stage", "llvm-ir", "--quiet", env=fast)
    assert err == ""
    piped = subprocess.run([str(Path(sys.executable).parent / "npugrad-opt"), str(BCE), "--stage", "llvm-ir"],
                           capture_output=True, text=True, env={**os.environ, **fast}, timeout=300)
    assert piped.returncode == 0 and piped.stderr == ""
