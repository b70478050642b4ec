"""The linear cross-entropy gradient through the tiled path (local buffers, tiled GEMMs) on
both shipped targets: numerics against the reference, hand-set tiles, and capacity errors."""

from pathlib import Path

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close

from npugrad import ops
from npugrad.compiler import CompileError, Pipeline
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.launch import using

OP = "fused_linear_cross_entropy_loss_grad"


def _operands(rng, bt, h, v, dtype, hp, packed):
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h),
              "target_mask": ((bt + 7) // 8,) if packed else (bt,), "masked_target": (bt,)}
    shapes |= {"softmax": (bt, v)} if hp else {"logits_max": (bt,), "sum_exp_logits": (bt,)}
    dts = {k: np.dtype(np.float32) for k in shapes} | {"input": dtype, "weight": dtype,
           "target_mask": np.dtype(np.uint8 if packed else np.bool_), "masked_target": np.dtype(np.int64)}
    return harness.random_operands(OP, shapes, dts, {}, rng)


def _call(a):
    return ops.fused_linear_cross_entropy_loss_grad(
        a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"], 0.0,
        a.get("logits_max"), a.get("sum_exp_logits"), a.get("softmax"))


@pytest.mark.parametrize("target", ["host", "npu-a2"])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("hp", [False, True], ids=["memory-saving", "high-performance"])
def test_tiled_matches_reference(rng, target, dtype, hp):
    a = _operands(rng, 150, 70, 300, dtype, hp, packed=hp)
    with using(Pipeline(target=target)):
        gi, gw = _call(a)
    want = harness.expected(OP, a, {})
    assert_close(gi, want["input_grad_out"])
    assert_close(gw, want["weight_grad_out"])


@pytest.mark.parametrize("target", ["host", "npu-a2"])
def test_one_and_two_threads_agree_bit_for_bit(rng, target):
    a = _operands(rng, 90, 40, 200, np.dtype(np.float32), False, False)
    before = pool.threads()
    try:
        with using(Pipeline(target=target)):
            pool.set_threads(1)
            one = _call(a)
            pool.set_threads(2)
            two = _call(a)
    finally:
        pool.set_threads(before)
    for x, y in zip(one, two):
        np.testing.assert_array_equal(x, y)


def test_hand_set_tiles_that_do_not_fit_are_rejected():
    from npugrad.compiler import parse

    text = (Path(__file__).parent.parent / "examples" / "flce_grad_fused.mlir").read_text()
    with pytest.raises(CompileError, match=r"check-capacity: local buffer %gemm\d_\w+ .* does not fit level 'l0\w' of target npu-a2"):
        Pipeline(target="npu-a2").lower(parse(text, "flce_grad_fused.mlir"), "tiled")
