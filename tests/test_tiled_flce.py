"""The linear cross-entropy gradient through the tiled path (local buffers, tiled GEMMs) on
both shipped targets: numerics against the reference, hand-set tiles, and capacity errors."""

from pathlib import Path

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close, assert_reference

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
    assert_reference(OP, a, {}, {"input_grad_out": gi, "weight_grad_out": gw})


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

    # A 100 x 512 float32 accumulator tile (200 KiB: bt = 256 is the example's 100 rows) cannot
    # fit npu-a2's 128 KiB L0C.
    text = (Path(__file__).parent.parent / "examples" / "flce_grad_fused.mlir").read_text()
    text = text.replace("bt = 32, v = 128", "bt = 256, v = 512")
    with pytest.raises(CompileError, match=r"check-capacity: local buffer %gemm\w+ .* does not fit level 'l0\w' of target npu-a2"):
        Pipeline(target="npu-a2").lower(parse(text, "flce_grad_fused.mlir"), "tiled")


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype("bfloat16")], ids=str)
def test_npu_a2_phased_schedule_is_the_same_on_any_number_of_blocks(rng, dtype):
    """npu-a2 runs the gradient in vocabulary slabs (passes/tiling/flce_phased.py): G's slab in a
    shared workspace, GEMMs 2 and 3 as tiles dealt over the blocks, dX's float32 partial sums
    added by the copy out after the first slab. Every tile is summed in one order whatever the
    number of blocks: 1, 2, 3 and 7 threads agree bit for bit, and with the reference. 300
    vocabulary rows no tile divides: several slabs, the last one partial."""
    import ml_dtypes

    a = _operands(rng, 90, 40, 300, dtype, False, False)
    if dtype != np.float32:
        a = {k: v.astype(ml_dtypes.bfloat16) if k in ("input", "weight") else v for k, v in a.items()}
    before = pool.threads()
    results = []
    try:
        with using(Pipeline(target="npu-a2")):
            for n in (1, 2, 3, 7):
                pool.set_threads(n)
                results.append(_call(a))
    finally:
        pool.set_threads(before)
    for other in results[1:]:
        for x, y in zip(results[0], other):
            np.testing.assert_array_equal(np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8))
    assert_reference(OP, a, {}, {"input_grad_out": results[0][0], "weight_grad_out": results[0][1]})


def test_npu_a2_whole_loss_with_every_extension_matches_the_host(rng):
    """The extensions (label smoothing, z-loss, softcap, ignored rows) live in the G computation,
    which the npu-a2 schedule moves into its phase 1 row blocks: the whole loss through
    npu-a2's kernels equals the host's (checked against PyTorch and the references in
    test_forward.py) within bf16's tolerance, on 2 uneven shards."""
    import ml_dtypes

    x = rng.standard_normal((70, 40)).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((300, 40)) * 0.3).astype(ml_dtypes.bfloat16)
    y = rng.integers(0, 300, size=70)
    y[::5] = -100
    opts = {"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 15.0, "shards": 2}
    got = {}
    for target in ("npu-a2", "host"):
        with using(Pipeline(target=target)):
            got[target] = ops.linear_cross_entropy(x, w, y, **opts)
    a, b = got["npu-a2"], got["host"]
    assert_close(np.float32(a.loss), np.float32(b.loss))
    assert_close(a.input_grad, b.input_grad)
    assert_close(a.weight_grad, b.weight_grad)


@pytest.mark.parametrize("target", ["host", "npu-a2"])
@pytest.mark.parametrize("hp", [False, True], ids=["memory-saving", "high-performance"])
def test_balanced_token_tiles_through_either_tiling(rng, target, hp):
    """A nest fused with balanced token tiles (a loop over tile indices, linear_nests.TokenTiles)
    tiled for a target: the wavefront (host) and the slab schedule (npu-a2) read the tiles'
    rows from the loop (tiling.blocks.TokenLoop); BT = 151 is no multiple of any tile."""
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
    from npugrad.passes.fuse_linear_online_max_sum import FuseLinearOnlineMaxSumPass

    a = _operands(rng, 151, 70, 300, np.dtype(np.float32), hp, packed=False)
    fused = [FuseLinearOnlineMaxSumPass(), FuseLinearCrossEntropyGradPass(balance_blocks=3)]
    before = pool.threads()
    got = []
    try:
        for threads in (1, 2):
            pool.set_threads(threads)
            with using(Pipeline(target=target, fused_passes=fused)):
                got.append(_call(a))
    finally:
        pool.set_threads(before)
    assert_reference(OP, a, {}, {"input_grad_out": got[0][0], "weight_grad_out": got[0][1]})
    for x, y in zip(*got):
        np.testing.assert_array_equal(x, y)
