"""npugrad/tools/peak.py: the instruction-peak loops are shaped by the target, compute what their
IR says (so no chain is dead or folded away), and report the instructions a CPU lacks; the
micro-kernels (float32, and bfloat16 on vdpbf16ps) add what their IR says. No speed is
asserted: the bench prints the rates."""

import math

import numpy as np
import pytest

from npugrad.dtypes import BFLOAT16
from npugrad.lowering.emulation import emulating
from npugrad.passes.vectorize_contractions import dot_bf16
from npugrad.targets import get
from npugrad.tools import peak

INPUTS = "tests/lit/Inputs"


@pytest.mark.parametrize("toml, lanes, chains", [("avx2.toml", 8, 12), ("avx512.toml", 16, 28),
                                                 ("avx512bf16.toml", 16, 28)])
def test_the_loop_is_shaped_by_the_target(toml, lanes, chains):
    cpu = get(f"{INPUTS}/{toml}")
    assert cpu.vector_bits == 32 * lanes and cpu.vector_registers - 4 == chains
    for kind in ("fma", "dot_bf16"):
        assert peak.shape_for(cpu, kind) == peak.Shape(lanes, chains)
    assert peak.shape_for(cpu, "tile_bf16") == peak.Shape(16, 6)  # AMX's 8 tile registers, 2 for operands
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


def test_the_tile_loop_is_six_carried_accumulator_tiles():
    """tdpbf16ps of two loop-invariant tiles into six accumulators carried over the loop (phis of
    x86_amx: tile registers), each adding 32·2^-7·2^-7 per iteration; run where the CPU has AMX."""
    ir = peak.loop_ir("tile_bf16", peak.Shape(16, 6))
    assert ir.count("@llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64") == 6
    assert ir.count("phi x86_amx") == 6
    if not (get("host").has_feature("amx-tile") and get("host").has_feature("amx-bf16")):
        r = peak.measure("tile_bf16", threads=1, seconds=0.01, repeats=1)
        assert r.gflops is None and "lacks amx-bf16" in r.text()
        return
    fn = peak.compiled("tile_bf16", peak.Shape(16, 6))
    for n in (1, 5, 4096):
        assert fn(n) == 6 * n * 32 * 2.0**-14
    r = peak.measure("tile_bf16", threads=1, seconds=0.01, repeats=1)
    assert r.gflops is not None and r.gflops > 0 and "16 x 16 accumulator tiles" in r.text()


def test_an_instruction_the_cpu_lacks_is_not_measured():
    r = peak.measure("dot_bf16", threads=1, seconds=0.01, repeats=1, cpu=f"{INPUTS}/avx2.toml")
    assert r.gflops is None and "lacks avx512bf16" in r.text()


def test_a_measured_peak_is_a_rate():
    r = peak.measure("fma", threads=1, seconds=0.01, repeats=1)
    assert r.gflops is not None and math.isfinite(r.gflops) and r.gflops > 0
    assert "GFLOP/s" in r.text()


@pytest.mark.parametrize("toml, dtype, block", [("avx2.toml", "float32", (6, 16, 186)),
                                               ("avx512.toml", "float32", (6, 64, 86)),
                                               ("avx512bf16.toml", "bfloat16", (6, 64, 174))])
def test_the_micro_kernel_is_the_targets_block_on_half_its_l1(toml, dtype, block):
    """vectorize-contractions' MR x NR·lanes block, and the longest even K whose A rows and packed
    B panel take half the L1: 32 KiB, 6 + 16 float32 columns: 186; 48 KiB, 6 + 64: 86; bfloat16
    (2 bytes an element): 174."""
    cpu = get(f"{INPUTS}/{toml}")
    shape = peak.microkernel_shape(cpu, dtype)
    assert (shape.mr, shape.n, shape.k, shape.dtype) == (*block, dtype)
    size = np.dtype(np.float32).itemsize if dtype == "float32" else 2
    smallest = min(lv.capacity for lv in cpu.local_levels())
    assert size * shape.k * (shape.mr + shape.n) <= smallest // 2 < size * (shape.k + 2) * (shape.mr + shape.n)


def _bfloat16_operands(rng, shape):
    return tuple(rng.standard_normal(s, dtype=np.float32).astype(BFLOAT16) for s in ((shape.mr, shape.k), (shape.k, shape.n)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_the_micro_kernel_adds_its_product_each_repeat_with_b_packed_once(dtype):
    """C += A·B `repeats` times, B's panel packed before the repeat loop (what lets the operands
    stay in the L1), C alternating between two tiles (so that no compiler keeps it in registers
    across the repeats): the vectorized IR allocates the panels before the loop, and tile 0 ends
    as c0 + 2·A·B, tile 1 as c1 + A·B after three repeats, to float32's rounding (bfloat16 on
    vdpbf16ps where the CPU has it, widened to float32 FMAs where not)."""
    from npugrad.compiler import Pipeline, make_context, parse

    shape = peak.microkernel_shape(get("host"), dtype)
    ctx = make_context()
    text = peak.microkernel_text(shape, 3)
    vectorized = str(Pipeline(fuse=False, distribute=False).lower(parse(text, "m.mlir", ctx), "vectorized", ctx))
    assert 0 <= vectorized.index("b_panels") < vectorized.index("scf.for")
    kernel = peak.microkernel(shape, 3)
    rng = np.random.default_rng(7)
    if dtype == "float32":
        a = rng.standard_normal((shape.mr, shape.k), dtype=np.float32)
        b = rng.standard_normal((shape.k, shape.n), dtype=np.float32)
    else:
        a, b = _bfloat16_operands(rng, shape)
    c = rng.standard_normal((2, shape.mr, shape.n), dtype=np.float32)
    product = a.astype(np.float64) @ b.astype(np.float64)
    expected = c.astype(np.float64) + np.stack([2 * product, product])
    kernel(a, b, c)
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-4 * np.sqrt(shape.k))


def test_a_measured_micro_kernel_is_a_rate_beside_the_fma_loops():
    shape, threads, gflops, fma = peak.measure_microkernel(threads=1, seconds=0.01, repeats=1)
    assert threads == 1 and shape == peak.microkernel_shape(get("host"))
    assert math.isfinite(gflops) and gflops > 0 and math.isfinite(fma) and fma > 0
    assert "% of the FMA loop's" in shape.text(gflops, threads, fma)


@pytest.mark.skipif(not dot_bf16(get("host")), reason="the host CPU lacks AVX512-BF16 (vdpbf16ps)")
def test_a_measured_bfloat16_micro_kernel_is_a_rate_beside_the_dot_loops():
    shape, threads, gflops, dot = peak.measure_microkernel(threads=1, seconds=0.01, repeats=1, dtype="bfloat16")
    assert threads == 1 and shape == peak.microkernel_shape(get("host"), "bfloat16") and shape.peak_kind == "dot_bf16"
    assert math.isfinite(gflops) and gflops > 0 and math.isfinite(dot) and dot > 0
    assert shape.text(gflops, threads, dot).startswith("bfloat16 micro-kernel (") and "vdpbf16ps loop's" in \
        shape.text(gflops, threads, dot)


def test_a_bfloat16_micro_kernel_without_vdpbf16ps_is_not_measured():
    with pytest.raises(ValueError, match="runs on vdpbf16ps, which the CPU lacks"):
        peak.measure_microkernel(threads=1, seconds=0.01, repeats=1, cpu=f"{INPUTS}/avx2.toml", dtype="bfloat16")
    with pytest.raises(ValueError, match="unknown micro-kernel dtype 'float16'"):
        peak.microkernel_shape(get("host"), "float16")


def test_an_unknown_kind_is_rejected():
    with pytest.raises(ValueError, match="unknown kind 'fp8'"):
        peak.loop_ir("fp8", peak.Shape(4, 1))


def test_the_command_prints_both_peaks_and_rejects_bad_options(capsys):
    from npugrad.tools.main import main

    main(["peak", "--threads", "1", "--seconds", "0.01"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5 and lines[0].startswith("float32 FMA = ") and lines[1].startswith("bf16 dot product")
    assert lines[2].startswith("bf16 tile product (AMX tdpbf16ps)")
    assert lines[3].startswith("float32 micro-kernel (vectorize-contractions, ") and "% of the FMA loop's" in lines[3]
    if dot_bf16(get("host")):
        assert lines[4].startswith("bfloat16 micro-kernel (vectorize-contractions, ") and "vdpbf16ps loop's" in lines[4]
    else:
        assert lines[4].startswith("bfloat16 micro-kernel: not measured: ") and "lacks" in lines[4]
    with pytest.raises(SystemExit, match="--seconds a finite number > 0"):
        main(["peak", "--seconds", "0"])
