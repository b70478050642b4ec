"""Kernels shaped for a CPU with AVX512-BF16 (tests/lit/Inputs/avx512bf16.toml: 512-bit vectors,
32 registers, vdpbf16ps), run on whatever CPU the tests run on: the instruction emulated in
generic IR where the host lacks it (lowering/emulation.py), the host's own where it has it. The
pair packing, the odd-K pairs, the masked column tails and the token-tile schedule of the
dot-product kernels are then checked by running them, on every machine, not only as assembly."""

import ctypes
from pathlib import Path

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
from conftest import assert_close
from test_flce import _operands
from test_jit import DOT_BF16

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.lowering import emulation
from npugrad.lowering.machine_code import JitError
from npugrad.passes.vectorize_contractions import dot_bf16
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.jit import JitModule
from npugrad.runtime.launch import using
from npugrad.targets import get as get_target

AVX512BF16 = str(Path(__file__).parent / "lit" / "Inputs" / "avx512bf16.toml")
BF16 = ml_dtypes.bfloat16


def _flush(x: np.ndarray) -> np.ndarray:
    """Denormals to zero, keeping the sign (DAZ on inputs, FTZ on results)."""
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def dpbf16ps_model(acc: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intel's VDPBF16PS per lane j: acc += a[2j+1]·b[2j+1], then acc += a[2j]·b[2j], each a
    fused multiply-add rounded once (the product of two bfloat16 is exact in float64, and so is
    its sum with a float32 for the values used here), denormals in as zero and out as zero."""
    a, b = (_flush(v.astype(np.float32)).astype(np.float64).reshape(-1, 2) for v in (a, b))
    s = _flush(acc)
    with np.errstate(invalid="ignore", over="ignore"):
        s = _flush((s.astype(np.float64) + a[:, 1] * b[:, 1]).astype(np.float32))
        return _flush((s.astype(np.float64) + a[:, 0] * b[:, 0]).astype(np.float32))


def _dot_module(lanes: int) -> JitModule:
    text = DOT_BF16.replace("<16 x float>", f"<{lanes} x float>").replace("<32 x bfloat>", f"<{2 * lanes} x bfloat>")
    text = text.replace("dpbf16ps.512", f"dpbf16ps.{32 * lanes}")
    with emulation.emulating("avx512bf16"):
        return JitModule(text)


def _dot(module: JitModule, acc, a, b) -> np.ndarray:
    acc = np.array(acc, np.float32)
    a, b = (np.ascontiguousarray(v, BF16) for v in (a, b))
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(module.address("dot"))
    fn(acc.ctypes.data, a.ctypes.data, b.ctypes.data)
    return acc


@pytest.mark.parametrize("lanes", [4, 8, 16])
def test_emulated_dot_product_is_the_instruction(rng, lanes):
    """Random lanes, and lanes built to tell the order and the flushing apart: the odd pair is
    added first (1 + 2^-24 + ... rounds differently the other way), a bfloat16 denormal factor
    reads as zero, a denormal accumulator reads as zero, a denormal result flushes to a signed
    zero, infinities and NaNs propagate."""
    module = _dot_module(lanes)
    acc = rng.standard_normal(lanes).astype(np.float32)
    a = rng.standard_normal(2 * lanes).astype(BF16)
    b = rng.standard_normal(2 * lanes).astype(BF16)
    np.testing.assert_array_equal(_dot(module, acc, a, b), dpbf16ps_model(acc, a, b))

    tiny_bf16 = float(np.float32(2.0**-130))  # a bfloat16 denormal
    special = [  # (acc, a_even, b_even, a_odd, b_odd)
        (1.0, 2.0**-24, 1.0, 2.0**-24, 1.0),  # odd first: 1 + 2^-24 ties to 1, then again: 1
        (2.0**-24, 1.0, 1.0, -1.0, 1.0),  # odd first: 2^-24 - 1 = -(1 - 2^-24), + 1 = 2^-24
        (1.0, tiny_bf16, 2.0**100, 0.0, 0.0),  # a denormal factor is zero: 1, not 1 + 2^-30
        (float(np.float32(2.0**-140)), 1.0, 0.0, 0.0, 0.0),  # a denormal accumulator reads as 0
        (0.0, 2.0**-70, 2.0**-70, 0.0, 0.0),  # 2^-140 is denormal: flushed to zero
        (-0.0, -(2.0**-70), 2.0**-70, 0.0, 0.0),  # flushed to -0
        (1.0, float("inf"), 1.0, 1.0, 1.0),
        (1.0, float("nan"), 1.0, 1.0, 1.0),
    ]
    got, want = [], []
    for start in range(0, len(special), lanes):  # every special case, `lanes` at a time
        chunk = (special[start:start + lanes] + special * lanes)[:lanes]
        acc = np.array([s[0] for s in chunk], np.float32)
        a = np.array([[s[1], s[3]] for s in chunk], np.float32).reshape(-1).astype(BF16)
        b = np.array([[s[2], s[4]] for s in chunk], np.float32).reshape(-1).astype(BF16)
        got.append(_dot(module, acc, a, b))
        want.append(dpbf16ps_model(acc, a, b))
    got, want = np.concatenate(got)[:len(special)], np.concatenate(want)[:len(special)]
    number = ~np.isnan(want)
    np.testing.assert_array_equal(got.view(np.uint32)[number], want.view(np.uint32)[number])
    assert np.isnan(got[7]) and np.isnan(want[7]) and got[6] == np.inf
    # What the model says is what the instruction's definition says:
    assert got[0] == 1.0 and got[1] == np.float32(2.0**-24) and got[2] == 1.0 and got[3] == 0.0
    assert got[4] == 0.0 and not np.signbit(got[4]) and got[5] == 0.0 and np.signbit(got[5])


def test_without_emulation_the_module_is_refused_on_a_cpu_without_the_instruction(monkeypatch):
    real = llvm.get_host_cpu_features()

    class Without(dict):  # the host's features, AVX512-BF16 taken out (a CPU without it)
        def flatten(self):
            return real.flatten()

    features = Without(real)
    features["avx512bf16"] = False
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: features)
    with pytest.raises(JitError, match="NPUGRAD_EMULATE=avx512bf16"):
        JitModule(DOT_BF16)
    monkeypatch.setenv(emulation.ENV, "avx512bf16")
    JitModule(DOT_BF16)  # the environment variable asks for it as well


def test_unknown_features_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="no emulation of avx512fp16"), emulation.emulating("avx512fp16"):
        pass
    monkeypatch.setenv(emulation.ENV, "avx512bf16, amx-tile")
    with pytest.raises(ValueError, match="NPUGRAD_EMULATE: no emulation of amx-tile"):
        emulation.requested()


def test_a_module_without_the_instruction_is_unchanged():
    assert emulation.emulate("define void @f() {\n  ret void\n}\n", ["avx512bf16"]) == "define void @f() {\n  ret void\n}\n"
    assert emulation.emulate(DOT_BF16, []) == DOT_BF16


@pytest.fixture
def dot_kernels():
    """Compile the calls inside for the AVX512-BF16 CPU, emulating what this one lacks."""
    assert dot_bf16(get_target(AVX512BF16))
    with emulation.emulating("avx512bf16"), using(Pipeline(cpu=AVX512BF16)):
        yield


@pytest.mark.parametrize("mode", ["memory-saving", "high-performance"])
@pytest.mark.parametrize("bt, h, v", [(37, 45, 131), (7, 1, 129), (100, 33, 300), (13, 1025, 140), (200, 130, 500),
                                      (700, 600, 300)])
def test_flce_gradient_on_dot_product_kernels(rng, dot_kernels, mode, bt, h, v):
    """The bfloat16 gradient's three GEMMs on vdpbf16ps (H odd and even, below and above a
    reduction chunk; rows and columns off the 6 x 4 block), against the reference, and bit for
    bit the same on 1, 2 and 3 threads. 700 x 600 x 300 is split over blocks, its token loop in
    phases (tiling/flce_groups.py): GEMM 1's reduction there goes in chunks of its own, which
    must fall on the dot-product kernel's (512 steps of pairs on this target's 1 MiB L2, where
    float32's are 256), or its logits sum in another association on 2 threads than on 1."""
    check_bf16_gradient_on_1_2_3_threads(_operands(rng, bt, h, v, dtype=BF16, mode=mode))


def check_bf16_gradient_on_1_2_3_threads(a: dict) -> None:
    """The bfloat16 gradient of operands `a` against the reference, and bit for bit the same on
    1, 2 and 3 threads (the kernels the calls compile are the caller's: a `using` around it)."""
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    before = pool.threads()
    results = []
    try:
        for n in (1, 2, 3):
            pool.set_threads(n)
            results.append(ops.fused_linear_cross_entropy_loss_grad(**a))
    finally:
        pool.set_threads(before)
    for got, name in zip(results[0], ("input_grad_out", "weight_grad_out")):
        assert got.dtype == BF16
        assert_close(got, want[name])
    for other in results[1:]:
        for g, o in zip(results[0], other):
            np.testing.assert_array_equal(g.view(np.uint16), o.view(np.uint16))


@pytest.mark.parametrize("shards", [3])
def test_whole_loss_on_dot_product_kernels(rng, dot_kernels, shards):
    """Forward (online max and sum) and gradient of the whole loss, bfloat16, on the dot-product
    kernels, against the same call on this CPU's own kernels (float32 FMAs on widened operands):
    the same sums in another order, within bfloat16's tolerance."""
    bt, h, v = 53, 67, 389
    x = (rng.standard_normal((bt, h)) * 0.5).astype(BF16)
    w = (rng.standard_normal((v, h)) * 0.5).astype(BF16)
    y = rng.integers(0, v, bt).astype(np.int64)
    y[::7] = -100
    got = ops.linear_cross_entropy(x, w, y, shards=shards, label_smoothing=0.1)
    with using(Pipeline()):  # the host CPU's own kernels
        own = ops.linear_cross_entropy(x, w, y, shards=shards, label_smoothing=0.1)
    assert abs(float(got.loss) - float(own.loss)) <= 1e-2 * max(1.0, abs(float(own.loss)))
    assert_close(got.input_grad, own.input_grad.astype(np.float32))
    assert_close(got.weight_grad, own.weight_grad.astype(np.float32))



def _first_case_per_op_and_dtype():
    from npugrad.tools.demo import first_cases

    return {(case.op, case.dtype.name): case for case in first_cases()}


@pytest.mark.parametrize("key", list(_first_case_per_op_and_dtype()), ids="-".join)
def test_every_op_on_kernels_shaped_for_an_avx512_bf16_cpu(rng, dot_kernels, key):
    """Each op in each dtype (its first example signature) compiled for a CPU with 512-bit
    vectors, 32 registers and vdpbf16ps, where the host may have 256-bit ones (LLVM splits the
    vectors) and no vdpbf16ps (emulated): 16-lane tails and masks, 6 x 4 blocks of 16 lanes, the
    dot products; every result against the reference."""
    case = _first_case_per_op_and_dtype()[key]
    for name, (got, want, magnitude) in case.run(rng).items():
        err = harness.max_error(got, want, magnitude)
        assert err <= harness.tolerance(got.dtype), f"{case.op} {case.label} {name}: max error {err:.2e}"


def test_chunked_loss_schedule_counts_x_pack_as_the_kernels_hold_it():
    """ops/loss.py's chunk rows count each lane's pack of X's rows as GEMM 3 holds it: none where
    bfloat16 runs on the CPU's dot product (pairs packed per call), float32 panels otherwise."""
    from npugrad.ops import loss as loss_mod

    with using(Pipeline(cpu=AVX512BF16)):
        assert loss_mod._x_pack_bytes(BF16) == 0
        assert loss_mod._x_pack_bytes(np.float16) == 4
    with using(Pipeline(cpu=str(Path(__file__).parent / "lit" / "Inputs" / "avx2.toml"))):
        assert loss_mod._x_pack_bytes(BF16) == 4
