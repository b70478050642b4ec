"""Every printed stage of every example is read by the upstream tool of its level (Debian's
MLIR/LLVM 22: `apt-get install mlir-22-tools llvm-22`): mlir-opt for `loops` to `llvm-dialect`,
opt and llc for `llvm-ir`; the harness (`--emit-harness`) runs the `llvm-ir` stage in lli and
its outputs match the reference; `--print-pipeline`'s commands reproduce the stages.
Run by scripts/test-upstream; skipped, with the reason, where the tools are not installed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from npugrad.compiler import Pipeline, make_context, parse
from npugrad.runtime.executable import block_kernels
from npugrad.tools import harness
from npugrad.tools import run as runner

SUFFIX = "-22"
TOOLS = ("mlir-opt", "mlir-translate", "opt", "llc", "lli", "llvm-link")
MISSING = [t + SUFFIX for t in TOOLS if shutil.which(t + SUFFIX) is None]
pytestmark = pytest.mark.skipif(
    bool(MISSING), reason=f"upstream tools not installed ({', '.join(MISSING)}): "
    "apt-get install --no-install-recommends mlir-22-tools llvm-22")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.mlir"))
# Hand-written tiles for the host's caches, too large for npu-a2's local memories (check-capacity says so).
HOST_ONLY = {"flce_grad_fused.mlir"}
# 4096×4096×8192: minutes of lli's unoptimised single-threaded run; its stages are still read.
TOO_LARGE_TO_RUN = {"flce_grad_4096x4096x8192.mlir"}

LEVEL = {  # stage -> the tool that reads it
    "loops": ["mlir-opt"],
    "vectorized": ["mlir-opt"],
    "llvm-dialect": ["mlir-opt"],
    "llvm-ir": ["opt", "llc"],
}


def _tool(name: str, *args: str, text: str | bytes = "", cwd: Path | None = None) -> subprocess.CompletedProcess:
    binary = isinstance(text, bytes)
    result = subprocess.run([name + SUFFIX, *args], input=text, capture_output=True, text=not binary, cwd=cwd,
                            timeout=600)
    assert result.returncode == 0, f"{name}{SUFFIX} {' '.join(args)}: {result.stderr!s:.2000}"
    return result


def _stage(path: Path, stage: str, target: str | None = None) -> str:
    ctx = make_context()
    result = Pipeline(target=target).lower(parse(path.read_text(), str(path), ctx), stage, ctx)
    return result if isinstance(result, str) else str(result)


CASES = [(p, stage, None) for p in EXAMPLES for stage in LEVEL] + [
    (p, stage, "npu-a2") for p in EXAMPLES if p.name not in HOST_ONLY for stage in ("loops", "vectorized")]


@pytest.mark.parametrize("path, stage, target", CASES,
                         ids=[f"{p.stem}-{s}{'-' + t if t else ''}" for p, s, t in CASES])
def test_every_stage_is_read_by_the_upstream_tool_of_its_level(path, stage, target):
    text = _stage(path, stage, target)
    for tool in LEVEL[stage]:
        if tool == "mlir-opt":
            out = _tool("mlir-opt", "--verify-each", text=text).stdout
            assert "func.func" in out or "llvm.func" in out
        elif tool == "opt":
            _tool("opt", "-S", "-passes=verify", "-o", "/dev/null", text=text)
        else:  # for the CPU it was vectorized for, as --print-pipeline's llc does (AVX512-BF16's dot products)
            # -O0 is quickest, but LLVM 22's -O0 lowering of AMX tiles (kept in memory, not
            # configured registers) makes invalid calls of a tile carried over a loop (a phi of
            # x86_amx: vectorize-contractions' amx_block), "Call parameter type does not match
            # function signature"; -O1 and up (llvmlite's O3, --print-pipeline's llc -O3) compile it.
            level = "-O1" if "x86_amx" in text else "-O0"
            assert "_mlir_ciface_" in _tool("llc", level, "-mcpu=native", "-o", "-", text=text).stdout


def test_the_loops_stage_holds_no_npu_op():
    text = _stage(ROOT / "examples" / "bce_grad.mlir", "loops", "npu-a2")
    tiled = _stage(ROOT / "examples" / "bce_grad.mlir", "tiled", "npu-a2")
    assert "npu.alloc_local" in tiled and "npu.copy" in tiled
    assert "npu." not in text.replace("npu.blocks", "")  # a discardable attribute upstream keeps as it is


RUNNABLE = [p for p in EXAMPLES if p.name not in TOO_LARGE_TO_RUN]


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.stem for p in RUNNABLE])
def test_the_harness_runs_the_llvm_ir_stage_in_lli_and_matches_the_reference(path, tmp_path):
    ctx = make_context()
    module = parse(path.read_text(), str(path), ctx)
    entry, specs, arrays, found = runner.prepare_inputs(module, None, None, seed=3)
    llvm_ir = Pipeline().lower(module, "llvm-ir", ctx)
    harness.write(tmp_path, entry, specs, arrays, llvm_ir, entry in block_kernels(module))
    _tool("llvm-link", "kernel.ll", "harness.ll", "-o", "prog.bc", cwd=tmp_path)
    _tool("lli", "prog.bc", str(tmp_path), cwd=tmp_path)
    outputs = harness.read_outputs(tmp_path, specs, [a.shape for a in arrays])
    want = runner.expected(found, arrays)
    assert want, f"{path.name}: no reference to compare with"
    report = runner.compare(specs, [outputs[s.name] for s in specs], found, want)
    assert report.ok, str(report)
    written = {found[1][n] for n in want}
    for i, (spec, before) in enumerate(zip(specs, arrays)):  # what the op only reads comes back as it went in
        if i not in written:
            assert outputs[spec.name].tobytes() == np.ascontiguousarray(before).tobytes(), spec.name


def test_the_harness_builds_with_clang_into_a_program_that_matches_the_reference(tmp_path):
    if shutil.which("clang" + SUFFIX) is None:
        pytest.skip(f"clang{SUFFIX} not installed (apt-get install clang-22); lli runs the harness above")
    path = ROOT / "examples" / "flce_forward.mlir"  # a block kernel, uint8 and int64 outputs
    ctx = make_context()
    module = parse(path.read_text(), str(path), ctx)
    entry, specs, arrays, found = runner.prepare_inputs(module, None, None, seed=4)
    harness.write(tmp_path, entry, specs, arrays, Pipeline().lower(module, "llvm-ir", ctx), entry in block_kernels(module))
    _tool("clang", "-O2", "-Wno-override-module", "kernel.ll", "harness.ll", "-o", "prog", "-lm", cwd=tmp_path)
    subprocess.run([str(tmp_path / "prog"), str(tmp_path)], check=True, timeout=60)
    outputs = harness.read_outputs(tmp_path, specs, [a.shape for a in arrays])
    report = runner.compare(specs, [outputs[s.name] for s in specs], found, runner.expected(found, arrays))
    assert report.ok, str(report)


def test_a_harness_without_its_input_files_says_which_file_is_missing(tmp_path):
    path = ROOT / "examples" / "bce_grad.mlir"
    ctx = make_context()
    module = parse(path.read_text(), str(path), ctx)
    entry, specs, arrays, _ = runner.prepare_inputs(module, None, None, seed=0)
    harness.write(tmp_path, entry, specs, arrays, Pipeline().lower(module, "llvm-ir", ctx), False)
    (tmp_path / f"{specs[1].name}.bin").unlink()
    _tool("llvm-link", "kernel.ll", "harness.ll", "-o", "prog.bc", cwd=tmp_path)
    result = subprocess.run(["lli" + SUFFIX, "prog.bc", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 1
    assert f"harness: cannot open {tmp_path}/{specs[1].name}.bin" in result.stdout


def _driver(*args: str, cwd: Path = ROOT) -> str:
    result = subprocess.run([str(Path(shutil.which("npugrad-opt") or ROOT / ".venv/bin/npugrad-opt")), *args],
                            capture_output=True, text=True, cwd=cwd, timeout=600)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _runnable(commands: str) -> str:
    """--print-pipeline's shell pipeline with Debian's tool names."""
    for tool in ("mlir-opt", "mlir-translate", "opt", "llc"):
        commands = commands.replace(f"| {tool} ", f"| {tool}{SUFFIX} ")
    return commands


@pytest.mark.parametrize("stage, target", [("loops", "npu-a2"), ("llvm-ir", None)])
def test_print_pipeline_prints_commands_that_produce_the_stage(stage, target, tmp_path):
    options = ["--target", target] if target else []
    commands = _driver("examples/flce_forward.mlir", "--stage", stage, *options, "--print-pipeline")
    assert commands.startswith("npugrad-opt examples/flce_forward.mlir")
    assert "fuse-linear-online-max-sum" in commands and "lower-npu-to-cpu" in commands
    produced = subprocess.run(_runnable(commands), shell=True, capture_output=True, text=True, cwd=ROOT,
                              env={"PATH": f"{Path(shutil.which('npugrad-opt') or ROOT / '.venv/bin/x').parent}:/usr/bin:/bin"})
    assert produced.returncode == 0, produced.stderr
    if stage == "loops":  # the xDSL part is the stage itself
        assert produced.stdout == _driver("examples/flce_forward.mlir", "--stage", stage, *options)
    else:  # LLVM 22's translation of the same module: the kernel and its C interface
        assert "define void @_mlir_ciface_flce_forward(" in produced.stdout
        _tool("opt", "-S", "-passes=verify", "-o", "/dev/null", text=produced.stdout)
