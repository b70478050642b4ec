"""npugrad on CPUs this machine is not, under QEMU's user-mode emulation (`qemu-x86_64 -cpu MODEL`,
Debian's qemu-user; scripts/test-cpus installs it). The emulated process reads the model's CPUID:
llvmlite names that CPU and its features, the `host` target is derived from them (targets.host),
and every kernel is compiled for it. An instruction the model lacks (AVX-512 on an AVX2 CPU)
stops the process with SIGILL: QEMU's TCG runs none past the model's CPUID. (Before the float16
support functions, every float16 kernel crashed at address 0 on the two models without F16C.)

`npugrad demo --quick` (each op in each dtype, on its first example signature) checks every
result against the reference, first here, then on each model, all with one disk cache of
compiled kernels: its entries are keyed by the CPU and its features (runtime/object_cache.py,
ir_cache.py), so a model must compile its own kernels, not load this machine's.

About 80 s a model on a Zen 5 (TCG runs the interpreter and LLVM some 40x slower).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from npugrad.tools.demo import first_cases

QEMU = shutil.which("qemu-x86_64")
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Model:
    qemu: str  # QEMU's name for the CPU
    llvm_cpu: str  # LLVM's
    vector_bits: int  # the host target's vectors there
    openblas: str | None = None  # OPENBLAS_CORETYPE: NumPy's OpenBLAS picks a kernel the model
    # lacks there (SIGILL at the first matmul, before npugrad runs): its own kernel instead


# One of each instruction-set class below AVX-512 (so none has vdpbf16ps):
MODELS = [
    # x86-64-v2 (SSE4.2; no AVX, FMA or F16C): 128-bit vectors, float16 through __extendhfsf2
    # and __truncsfhf2 (lowering/machine_code.py), FMAs through libm's fmaf
    Model("Nehalem", "nehalem", 128, "Nehalem"),
    # AVX without FMA, AVX2 or F16C: 256-bit float vectors, integer ones split in two
    Model("SandyBridge", "sandybridge", 256, "Sandybridge"),
    # AVX2, FMA and F16C: the class the kernels' ymm shapes are for (a Zen 2 or 3 core too)
    Model("Haswell-v4", "haswell", 256),
]

pytestmark = pytest.mark.skipif(
    QEMU is None or sys.platform != "linux" or os.uname().machine != "x86_64",
    reason="needs qemu-x86_64 on an x86-64 Linux (scripts/test-cpus installs Debian's qemu-user)")


def _demo(cache: Path, *emulator: str, openblas: str | None = None) -> subprocess.CompletedProcess:
    command = [*emulator, sys.executable, str(BIN / "npugrad"), "demo", "--quick", "--seed", "0"]
    env = {**os.environ, "NPUGRAD_CACHE_DIR": str(cache)}
    if openblas:
        env["OPENBLAS_CORETYPE"] = openblas
    return subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env, check=False)


def _checked(result: subprocess.CompletedProcess) -> list[str]:
    """The demo's lines, once it passed: a row per case, each within its tolerance."""
    assert result.returncode == 0, f"exit status {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    lines = result.stdout.splitlines()
    assert lines[-1] == "all results within tolerance"
    rows = [line for line in lines if line.endswith("  ok")]
    assert len(rows) == len(first_cases())
    return lines


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """One disk cache, filled by the demo on this machine first."""
    where = tmp_path_factory.mktemp("cache")
    _checked(_demo(where))
    return where


@pytest.mark.parametrize("model", MODELS, ids=[m.qemu for m in MODELS])
def test_every_op_runs_on_an_emulated_cpu_with_kernels_compiled_for_it(cache, model):
    before = set(os.listdir(cache))
    lines = _checked(_demo(cache, QEMU, "-cpu", model.qemu, openblas=model.openblas))  # type: ignore[arg-type]
    assert lines[0].startswith(f"host: {model.llvm_cpu}, {model.vector_bits}-bit vectors, 16 vector registers, ")
    assert lines[0].endswith("bfloat16 contractions: widened to float32")
    # Its own kernels: machine code and LLVM IR for each case, none of them this machine's.
    added = set(os.listdir(cache)) - before
    assert len([f for f in added if f.endswith(".o")]) >= len(first_cases())
