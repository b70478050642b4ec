"""The console scripts' process (npugrad/tools/command.py): they end with os._exit once the
command returns, so what must hold is that nothing is lost by it (the whole output, the exit
status, the diagnostics) and that the collector is back on, with the imports frozen."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from npugrad.tools import command
from npugrad.tools.opt import main as opt_main

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
FLCE = ROOT / "examples" / "flce_grad.mlir"


def test_the_console_scripts_start_through_the_command_module():
    scripts = {e.name: e.value for e in entry_points(group="console_scripts") if e.name.startswith("npugrad")}
    assert scripts == {"npugrad": "npugrad.tools.command:npugrad", "npugrad-opt": "npugrad.tools.command:opt"}


def test_the_command_module_run_as_a_module_names_the_commands():
    # It used to do nothing and exit 0: `python -m npugrad.tools.command demo` looked like success.
    run = subprocess.run([sys.executable, "-m", "npugrad.tools.command", "demo"], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.returncode == 1
    assert "run one of them, or python -m npugrad.tools.main / python -m npugrad.tools.opt" in run.stderr
    assert run.stdout == ""


def test_an_output_many_pipe_buffers_long_arrives_whole(capsys):
    """The vectorized FLCE gradient (hundreds of KiB, several times a pipe's buffer) read from
    the command is the text main() prints in this process."""
    with pytest.raises(SystemExit) as e:
        opt_main([str(FLCE), "--stage", "vectorized"])
    assert e.value.code == 0
    want = capsys.readouterr().out
    assert len(want) > 2 * 65536
    result = subprocess.run([str(BIN / "npugrad-opt"), str(FLCE), "--stage", "vectorized"],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout == want


def test_an_output_file_is_written_whole(tmp_path, capsys):
    with pytest.raises(SystemExit):
        opt_main([str(FLCE), "--stage", "vectorized"])
    want = capsys.readouterr().out
    out = tmp_path / "vectorized.mlir"
    result = subprocess.run([str(BIN / "npugrad-opt"), str(FLCE), "--stage", "vectorized", "-o", str(out)],
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0 and result.stdout == "", result.stderr
    assert out.read_text() == want


def test_a_failing_command_keeps_its_status_and_diagnostic(tmp_path):
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f() {\n  func.return %undefined : i32\n}\n")
    result = subprocess.run([str(BIN / "npugrad-opt"), str(bad)], capture_output=True, text=True, timeout=300,
                            check=False)
    assert result.returncode == 1
    assert f"{bad}:2:" in result.stderr and "error:" in result.stderr and "Traceback" not in result.stderr


def test_a_reader_that_stops_early_ends_the_console_script_quietly(tmp_path):
    """`npugrad cache | head -0` through the console script: status 141, no traceback."""
    p = subprocess.Popen([str(BIN / "npugrad"), "cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "NPUGRAD_CACHE_DIR": str(tmp_path)})
    p.stdout.close()
    stderr = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr, stderr


@pytest.mark.parametrize(("code", "status", "message"), [(None, 0, ""), (0, 0, ""), (3, 3, ""), (256 + 7, 7, ""),
                                                         ("npugrad bench: needs a source checkout", 1,
                                                          "npugrad bench: needs a source checkout\n")])
def test_exit_status_is_the_interpreters(code, status, message, capsys):
    assert command.exit_status(SystemExit(code)) == status
    assert capsys.readouterr().err == message


def test_the_imports_are_frozen_and_the_collector_is_back_on():
    code = ("import gc; from npugrad.tools import command; "
            "main = command._imported('npugrad.tools.opt'); "
            "print(gc.isenabled(), gc.get_freeze_count(), main.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    enabled, frozen, module = out.split()
    assert enabled == "True" and int(frozen) > 10_000 and module == "npugrad.tools.opt"


@pytest.mark.parametrize("args, says", [
    (["demo", "--seed", "-1"], "npugrad demo: error: argument --seed: must be >= 0, got -1"),
    (["peak", "--seconds", "inf"], "npugrad peak: --threads must be from 0 to 4096 and --seconds a finite number > 0"),
    (["peak", "--threads", "100000"], "npugrad peak: --threads must be from 0 to 4096"),
    (["calibrate", "-o", "/nonexistent-dir/x.toml"], "npugrad calibrate: error: argument -o/--output: directory "
                                                     "/nonexistent-dir does not exist"),
    (["calibrate", "-o", "{tmp}"], "npugrad calibrate: error: argument -o/--output: {tmp} is a directory"),
    (["calibrate", "-o", ""], "npugrad calibrate: error: argument -o/--output: names no file"),
    (["calibrate", "--seconds", "0"], "npugrad calibrate: error: argument --seconds: must be a positive number"),
    (["calibrate", "--seconds", "nan"], "npugrad calibrate: error: argument --seconds: must be a positive number"),
    (["bench", "--quick", "--threads", "0"], "npugrad bench: --threads must be from 1 to 4096"),
    (["bench", "--quick", "--timeout", "-5"], "npugrad bench: --timeout must be a number of seconds >= 0"),
    (["bench", "--quick", "--ops", ","], "npugrad bench: --ops names no op"),
    (["bench", "--quick", "--predicted-limit", "-5"], "npugrad bench: --predicted-limit must be a number of seconds"),
    (["bench", "--quick", "--predicted-limit", "nan"], "npugrad bench: --predicted-limit must be a number of seconds"),
])
def test_a_bad_argument_is_a_one_line_error_before_any_work(tmp_path, args, says):
    """Each was a traceback, an exit 0 with every row failed, or (calibrate) a traceback after
    minutes of measuring: now an error up front, naming the argument."""
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    result = subprocess.run([str(BIN / "npugrad"), *args], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert says.replace("{tmp}", str(tmp_path)) in result.stderr, result.stderr


def test_the_cache_command_says_what_it_cannot_read_or_delete(tmp_path):
    env = {**os.environ, "NPUGRAD_CACHE_DIR": str(tmp_path / "a-file")}
    (tmp_path / "a-file").write_text("")
    result = subprocess.run([str(BIN / "npugrad"), "cache"], capture_output=True, text=True, timeout=120, env=env,
                            check=False)
    assert result.returncode == 1
    assert result.stderr.strip() == (f"npugrad cache: error: {tmp_path / 'a-file'}: cannot be read (Not a directory); "
                                     "NPUGRAD_CACHE_DIR names another directory, =off turns the cache off")


def test_clearing_the_cache_counts_only_what_it_deleted(tmp_path, monkeypatch):
    from npugrad.runtime import object_cache

    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(tmp_path))
    kept, gone = tmp_path / ("a" * 64 + ".o"), tmp_path / ("b" * 64 + ".o")
    kept.write_bytes(b"x" * 10)
    gone.write_bytes(b"y" * 20)
    real = os.unlink

    def unlink(path, *a, **k):
        if str(path) == str(kept):
            raise PermissionError(13, "Permission denied")
        return real(path, *a, **k)

    monkeypatch.setattr(os, "unlink", unlink)
    count, size, failed = object_cache.clear()
    assert (count, size) == (1, 20) and failed == [f"{kept}: Permission denied"]
    assert kept.exists() and not gone.exists()


@pytest.mark.parametrize("command, variable, value, says", [
    (["demo", "--quick"], "NPUGRAD_THREADS", "0", "npugrad demo: error: NPUGRAD_THREADS must be a positive integer"),
    (["demo", "--quick"], "NPUGRAD_VERIFY_EACH", "yes", "npugrad demo: error: NPUGRAD_VERIFY_EACH must be 1 (on)"),
    (["demo", "--quick"], "NPUGRAD_PROGRESS", "yes", "npugrad demo: error: NPUGRAD_PROGRESS must be 1 (always)"),
    (["peak", "--seconds", "0.01"], "NPUGRAD_THREADS", "abc", "npugrad peak: error: NPUGRAD_THREADS must be a "
                                                              "positive integer, got 'abc'"),
    (["peak", "--seconds", "0.01"], "NPUGRAD_EMULATE", "foo", "npugrad peak: error: NPUGRAD_EMULATE: no emulation "
                                                              "of foo"),
    (["bench", "--quick", "--ops", "bce", "--paired", "0", "-q"], "NPUGRAD_OUTPUT_POOL", "maybe",
     "npugrad bench: error: NPUGRAD_OUTPUT_POOL must be a size in bytes"),
    (["bench", "--quick", "--ops", "bce", "--paired", "0", "-q"], "NPUGRAD_LINE_TABLES", "true",
     "npugrad bench: error: NPUGRAD_LINE_TABLES must be 1 (on)"),
])
def test_a_bad_environment_variable_is_a_one_line_error_before_any_work(command, variable, value, says):
    """Each was a traceback (demo, peak with NPUGRAD_EMULATE), a micro-kernel 'not measured' and
    exit 0 (peak with NPUGRAD_THREADS) or every row 'failed' and exit 0 (bench)."""
    env = {**os.environ, variable: value}
    result = subprocess.run([str(BIN / "npugrad"), *command], capture_output=True, text=True, timeout=120, env=env,
                            check=False)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(says), result.stderr
    assert result.stdout == ""


def test_an_op_named_twice_in_bench_ops_is_benchmarked_once():
    """--ops bce,bce compiled bce twice and printed its compile row twice."""
    result = subprocess.run([str(BIN / "npugrad"), "bench", "--quick", "--ops", "bce,bce", "--repeats", "1",
                             "--rounds", "1", "--paired", "0", "-q"], capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    compile_rows = [line for line in result.stdout.splitlines() if re.match(r"bce +float32 +\d", line)]
    assert len(compile_rows) == 1, result.stdout


def test_clearing_the_cache_deletes_a_dangling_link_named_like_an_entry(tmp_path, monkeypatch):
    """os.path.getsize followed it (FileNotFoundError, taken for an entry another process had
    deleted): `npugrad cache` listed it again after every --clear."""
    from npugrad.runtime import object_cache

    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(tmp_path))
    link = tmp_path / ("b" * 64 + ".ll")
    link.symlink_to(tmp_path / "nowhere")
    count, _, failed = object_cache.clear()
    assert (count, failed) == (1, []) and not os.path.lexists(link)
    assert object_cache.entries() == []
