"""npugrad/tools/peak.py: the instruction-peak loops are shaped by the target, compute what their
IR says (so no chain is dead or folded away), and report the instructions a CPU lacks. No speed is
asserted: the bench prints the rates."""

import math

import numpy as np
import pytest

from npugrad.lowering.emulation import emulating
from npugrad.targets import get
from npugrad.tools import peak

INPUTS = "tests/lit/Inputs"


@pytest.mark.parametrize("toml, lanes, chains", [("avx2.toml", 8, 12), ("avx512.toml", 16, 28),
                                                 ("avx512bf16.toml", 16, 28)])
def test_the_loop_is_shaped_by_the_target(toml, lanes, chains):
    cpu = get(f"{INPUTS}/{toml}")
    assert cpu.vector_bits == 32 * lanes and cpu.vector_registers - 4 == chains
    for kind in peak.KINDS:
        assert peak.shape_for(cpu, kind) == peak.Shape(lanes, chains)
    ir = peak.loop_ir("fma", peak.shape_for(cpu, "fma"))
    assert ir.count(f"call <{lanes} x float> @llvm.fma.v{lanes}f32") == chains


def test_the_fma_loop_computes_its_recurrence():
    """acc <- fma(acc, x, y) from 1, n times, in each of the chains; lane 0 of their sum."""
    shape = peak.Shape(lanes=4, chains=5)
    fn = peak.compiled("fma", shape)
    x, y = np.float32(0.99998), np.float32(1e-4)
    for n in (1, 7, 1000):
        acc = np.float32(1.0)
        for _ in range(n):
            acc = np.float32(np.float64(acc) * np.float64(x) + np.float64(y))  # exact product, one rounding
        total = np.float32(0)
        for _ in range(shape.chains):
            total = np.float32(total + acc)
        assert fn(n) == pytest.approx(float(total), rel=1e-6)


def test_the_dot_loop_computes_its_recurrence():
    """vdpbf16ps adds 2 * 2^-7 * 2^-7 per iteration into each lane (emulated where the CPU lacks
    the instruction): exact in float32 for these n."""
    shape = peak.Shape(lanes=16, chains=3)
    with emulating("avx512bf16"):
        fn = peak.compiled("dot_bf16", shape)
    for n in (1, 5, 4096):
        assert fn(n) == shape.chains * (1.0 + n * 2.0**-13)


def test_an_instruction_the_cpu_lacks_is_not_measured():
    r = peak.measure("dot_bf16", threads=1, seconds=0.01, repeats=1, cpu=f"{INPUTS}/avx2.toml")
    assert r.gflops is None and "lacks avx512bf16" in r.text()


def test_a_measured_peak_is_a_rate():
    r = peak.measure("fma", threads=1, seconds=0.01, repeats=1)
    assert r.gflops is not None and math.isfinite(r.gflops) and r.gflops > 0
    assert "GFLOP/s" in r.text()


def test_an_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown kind 'fp8'"):
        peak.loop_ir("fp8", peak.Shape(4, 1))


def test_the_command_prints_both_peaks_and_rejects_bad_options(capsys):
    from npugrad.tools.main import main

    main(["peak", "--threads", "1", "--seconds", "0.01"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("float32 FMA = ") and lines[1].startswith("bf16 dot product")
    with pytest.raises(SystemExit, match="--seconds > 0"):
        main(["peak", "--seconds", "0"])
