"""`accumulate` on the linear cross-entropy gradient (beyond the vendor: out += grad, as PyTorch
accumulates .grad): on every pipeline, both modes, every dtype, the outputs end as what they held
plus the gradient a plain call returns; rows whose upstream gradient is 0 keep what they held."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_reference

from npugrad import ops
from npugrad.compiler import CompileError, Pipeline
from npugrad.dialect.checks import SignatureError
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.launch import using

OP = "fused_linear_cross_entropy_loss_grad"
PIPELINES = {"fused": Pipeline(), "unfused": Pipeline(fuse=False), "host": Pipeline(target="host"),
             "npu-a2": Pipeline(target="npu-a2")}


def _operands(rng, bt, h, v, dtype, hp):
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": ((bt + 7) // 8,), "masked_target": (bt,)}
    shapes |= {"softmax": (bt, v)} if hp else {"logits_max": (bt,), "sum_exp_logits": (bt,)}
    dts = {k: np.dtype(np.float32) for k in shapes} | {"input": dtype, "weight": dtype,
           "target_mask": np.dtype(np.uint8), "masked_target": np.dtype(np.int64)}
    a = harness.random_operands(OP, shapes, dts, {}, rng)
    a["grad"][::7] = 0  # rows that count for nothing
    return a


def _call(a, **out):
    return ops.fused_linear_cross_entropy_loss_grad(
        a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"], 0.0,
        a.get("logits_max"), a.get("sum_exp_logits"), a.get("softmax"), **out)


def _started(rng, shape, dtype):
    return (rng.standard_normal(shape) * 0.1).astype(dtype)


@pytest.mark.parametrize("pipeline", list(PIPELINES))
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("hp", [False, True], ids=["memory-saving", "high-performance"])
def test_accumulate_adds_the_gradient_to_the_outputs(rng, pipeline, dtype, hp):
    bt, h, v = 150, 70, 300
    a = _operands(rng, bt, h, v, dtype, hp)
    gx0, gw0 = _started(rng, (bt, h), dtype), _started(rng, (v, h), dtype)
    gx, gw = gx0.copy(), gw0.copy()
    narrow = np.dtype(dtype) != np.float32
    with using(PIPELINES[pipeline]):
        if pipeline == "npu-a2" and narrow:  # its copies out add in float32 only: said, not wrong
            with pytest.raises(CompileError, match="accumulate into a bfloat16/float16 output"):
                _call(a, accumulate=True, input_grad_out=gx, weight_grad_out=gw)
            return
        plain = _call(a)
        _call(a, accumulate=True, input_grad_out=gx, weight_grad_out=gw)
    f32 = np.float32
    # One rounding of (start + gradient) against two (the gradient, then the sum) where narrow.
    tol = {"rtol": 2e-2, "atol": 2e-2} if narrow else {"rtol": 1e-5, "atol": 1e-6}
    np.testing.assert_allclose(np.asarray(gx, f32), np.asarray(gx0, f32) + np.asarray(plain[0], f32), **tol)
    np.testing.assert_allclose(np.asarray(gw, f32), np.asarray(gw0, f32) + np.asarray(plain[1], f32), **tol)
    skipped = a["grad"] == 0
    np.testing.assert_array_equal(np.asarray(gx, f32)[skipped], np.asarray(gx0, f32)[skipped])
    # Against the reference: starting from zeros, accumulating is the plain gradient.
    zx, zw = np.zeros((bt, h), dtype), np.zeros((v, h), dtype)
    with using(PIPELINES[pipeline]):
        _call(a, accumulate=True, input_grad_out=zx, weight_grad_out=zw)
    assert_reference(OP, a, {}, {"input_grad_out": zx, "weight_grad_out": zw})


@pytest.mark.parametrize("pipeline", ["fused", "npu-a2"])
def test_accumulating_is_bit_identical_for_any_thread_count(rng, pipeline):
    a = _operands(rng, 90, 40, 200, np.dtype(np.float32), False)
    gx0, gw0 = _started(rng, (90, 40), np.float32), _started(rng, (200, 40), np.float32)
    results = []
    before = pool.threads()
    try:
        with using(PIPELINES[pipeline]):
            for threads in (1, 2, 3):
                pool.set_threads(threads)
                gx, gw = gx0.copy(), gw0.copy()
                _call(a, accumulate=True, input_grad_out=gx, weight_grad_out=gw)
                results.append((gx, gw))
    finally:
        pool.set_threads(before)
    for gx, gw in results[1:]:
        np.testing.assert_array_equal(gx, results[0][0])
        np.testing.assert_array_equal(gw, results[0][1])


def test_accumulate_needs_both_outputs(rng):
    a = _operands(rng, 16, 8, 130, np.dtype(np.float32), False)
    gx = np.zeros((16, 8), np.float32)
    with pytest.raises(SignatureError, match="'accumulate' adds into the outputs: give 'weight_grad_out'"):
        _call(a, accumulate=True, input_grad_out=gx)
    assert not gx.any()
    with pytest.raises(TypeError, match="accumulate"):
        _call(a, accumulate="yes", input_grad_out=gx, weight_grad_out=np.zeros((130, 8), np.float32))
