"""The default pipeline spreads each op over the cores (distribute-over-cores): at sizes large
enough to be split, results match the reference and are bit for bit the same for 1, 2 and 3
threads and for the one-core pipeline (`distribute=False`) — for the FLCE wavefront also with
more blocks than token tiles, for the embedding gradient rows of out per block; the IR shows
what each block does.
Large zero fills stream past the caches (Emitter.zeros_flat): checked on outputs whose start is
not 64-byte aligned and whose length is not a multiple of a cache line."""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from test_nll import _call as _nll
from test_nll import _operands as _nll_operands
from test_nll import _want as _nll_want
from test_tiled_elementwise import STATES, _bce, _bce_operands, _ema, _ema_operands, assert_same_bits
from test_tiled_flce import _call as _flce
from test_tiled_flce import _operands as _flce_operands

from npugrad.compiler import Pipeline, parse
from npugrad.dialect.npu import BlockIdxOp
from npugrad.lowering.fills import STREAM_BYTES
from npugrad.passes.tiling.blocks import MIN_ELEMENTS
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.launch import using

THREADS = (1, 2, 3)
LIT_INPUTS = Path(__file__).parent / "lit" / "Inputs"


@pytest.fixture
def threads():
    before = pool.threads()
    yield pool.set_threads
    pool.set_threads(before)


def _per_thread_count(threads, run):
    """run() under the default pipeline for each thread count, then on one core undistributed."""
    results = []
    for n in THREADS:
        threads(n)
        results.append(run())
    with using(Pipeline(distribute=False)):
        results.append(run())
    return results


def _all_same(results) -> None:
    first = results[0]
    for other in results[1:]:
        for x, y in zip(first, other, strict=True):
            assert_same_bits(x, y)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_bce_split_over_blocks(rng, threads, dtype, reduction):
    n = 3 * MIN_ELEMENTS + 77  # three blocks' worth, not a whole number of cache lines
    a = _bce_operands(rng, (n // 7, 7), dtype, reduction, weighted=reduction == 1)
    results = _per_thread_count(threads, lambda: (_bce(a, reduction),))
    _all_same(results)
    want = harness.expected("binary_cross_entropy_grad", a, {"reduction": reduction})["dx"]
    assert_close(results[0][0], want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", [0, 1])
def test_ema_adam_split_over_blocks(rng, threads, dtype, mode):
    a = _ema_operands(rng, (2 * MIN_ELEMENTS + 5,), dtype)
    props = {"lr": 0.01, "ema_decay": 0.99, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "mode": mode, "weight_decay": 0.1}
    results = _per_thread_count(threads, lambda: tuple(_ema(a, props)[k] for k in STATES))
    _all_same(results)
    want = harness.expected("apply_fused_ema_adam", a, props)
    for k, got in zip(STATES, results[0], strict=True):
        assert_close(got, want[k])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_rows_split_over_blocks(rng, threads, dtype, reduction):
    # float32 out: each of three blocks' rows is past STREAM_BYTES (a streamed zero fill).
    c = 1003
    n = 3 * STREAM_BYTES // (4 * c) + 11
    a = _nll_operands(rng, n, c, dtype, reduction=reduction)
    results = _per_thread_count(threads, lambda: (_nll(a, reduction),))
    _all_same(results)
    assert_close(results[0][0], _nll_want(a, reduction))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("scale, padding", [(False, -1), (True, 7)])
def test_embedding_rows_split_over_blocks(rng, threads, dtype, scale, padding):
    """Each block sorts the indices of its own rows of out and writes them: three blocks' worth
    of rows (out 3 x MIN_ELEMENTS elements and more), repeated indices, a padding row."""
    from npugrad import ops

    rows, d = 389, 3 * MIN_ELEMENTS // 389 + 3
    grad = rng.standard_normal((2, 301, d)).astype(dtype)
    idx = rng.integers(0, rows, (2, 301))
    idx[0, :40] = 11  # one row from many tokens

    def run():
        return (ops.embedding_dense_backward(grad, idx, rows, padding, scale),)

    results = _per_thread_count(threads, run)
    _all_same(results)
    want = harness.expected("embedding_dense_backward", {"grad": grad, "indices": idx},
                            {"num_weights": rows, "padding_idx": padding, "scale_grad_by_freq": scale})["out"]
    assert_close(results[0][0], want)


@pytest.mark.parametrize("offset", [0, 1, 13])
def test_streamed_zero_fill_of_unaligned_output(rng, threads, offset):
    """An `out=` view starting `offset` floats into its buffer (not on a cache line), with a
    guard before and after it: every element of out is written, nothing around it."""
    c = 517
    n = 2 * STREAM_BYTES // (4 * c) + 3  # each of two blocks' rows past STREAM_BYTES
    a = _nll_operands(rng, n, c, np.dtype(np.float32), reduction=2)
    threads(2)
    buf = np.full(n * c + offset + 64, 7.0, np.float32)
    out = buf[offset:offset + n * c].reshape(n, c)
    _nll(a, 2, out=out)
    assert_close(out, _nll_want(a, 2))
    assert (buf[:offset] == 7.0).all() and (buf[offset + n * c:] == 7.0).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("hp", [False, True], ids=["memory-saving", "high-performance"])
def test_flce_wavefront_over_blocks(rng, threads, dtype, hp):
    bt, v = 300, 2 * MIN_ELEMENTS // 24 + 37  # weight past kernel.SMALL; not multiples of the tiles
    a = _flce_operands(rng, bt, 24, v, dtype, hp, packed=not hp)
    results = _per_thread_count(threads, lambda: _flce(a))
    _all_same(results)
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(results[0][0], want["input_grad_out"])
    assert_close(results[0][1], want["weight_grad_out"])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_flce_wavefront_with_more_blocks_than_token_tiles(rng, threads, dtype):
    """7 blocks, 2 token tiles: five blocks own no tokens but still pass every step on to the
    next (their flags), block 0 starts every dW tile and block 6, which owns no tokens, rounds it
    (a ring of 10 slots for a bfloat16/float16 dW); bit for bit the one-core result."""
    a = _flce_operands(rng, 70, 24, 5500, dtype, False, packed=True)  # weight past kernel.SMALL
    threads(7)
    many = _flce(a)
    with using(Pipeline(distribute=False)):
        one = _flce(a)
    _all_same([many, one])
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(many[0], want["input_grad_out"])
    assert_close(many[1], want["weight_grad_out"])


@pytest.mark.parametrize(("dtype", "hp"), [(FLOAT_DTYPES[0], False), (FLOAT_DTYPES[1], True), (FLOAT_DTYPES[2], False)],
                         ids=lambda p: "high-performance" if p is True else "memory-saving" if p is False else str(p))
def test_flce_token_groups_and_weight_chunks(rng, threads, dtype, hp):
    """The token loop in phases over groups of token tiles (tiling/flce_groups.py), H = 1100:
    GEMM 1 in chunks of the reduction chunk (512 on a 512 KiB L2, 1024 on a 1 MiB one: at least
    two chunks, the last partial), GEMM 2 in chunks of dX's columns, the first up to dX's first
    cache line and the next from a line (NumPy's arrays start 16 bytes past one), and groups of
    2 H = 2200 rows' worth of token tiles (12 tiles of 186 on a Zen 3): on 2 threads each
    block's 2350 rows make two groups, the second of about 120 rows, whose stash entries the
    first group's tiles used. Bit for bit the one-core result (the nest as fused, no groups),
    and the reference's."""
    a = _flce_operands(rng, 4700, 1100, 700, dtype, hp, packed=not hp)
    results = []
    for n in (2, 3):
        threads(n)
        results.append(_flce(a))
    with using(Pipeline(distribute=False)):
        results.append(_flce(a))
    _all_same(results)
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(results[0][0], want["input_grad_out"])
    assert_close(results[0][1], want["weight_grad_out"])


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("hp", [False, True], ids=["memory-saving", "high-performance"])
def test_flce_stash_over_many_token_and_vocabulary_tiles(rng, threads, dtype, hp):
    """Tiles of 12 rows x 16 vocabulary columns: 9 token tiles (BT = 100), 2 to 5 per block on
    2, 3 and 4 threads, and 344 vocabulary tiles: each block's stash (one entry per token tile
    of its group, tiling/flce_groups.py) is written and read again at every step, hundreds of
    times. Bit for bit the one-core result."""
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
    from npugrad.passes.fuse_linear_online_max_sum import FuseLinearOnlineMaxSumPass

    a = _flce_operands(rng, 100, 24, 5500, dtype, hp, packed=not hp)  # weight past kernel.SMALL
    fused = [FuseLinearOnlineMaxSumPass(), FuseLinearCrossEntropyGradPass(tile_bt=12, tile_v=16)]
    results = []
    for n in (2, 3, 4):
        threads(n)
        with using(Pipeline(fused_passes=fused)):
            results.append(_flce(a))
    with using(Pipeline(distribute=False, fused_passes=fused)):
        results.append(_flce(a))
    _all_same(results)
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(results[0][0], want["input_grad_out"])
    assert_close(results[0][1], want["weight_grad_out"])


def _zen3_with_l2(tmp_path, size: str) -> str:
    """Inputs/zen3.toml with an L2 of `size` (a target size, e.g. "64KiB") instead of 512 KiB."""
    cpu = tmp_path / f"zen3_l2_{size}.toml"
    cpu.write_text((LIT_INPUTS / "zen3.toml").read_text().replace('"512KiB"', f'"{size}"'))
    return str(cpu)


def test_flce_group_cap_from_the_accumulator_level(tmp_path):
    """A group holds as many token tiles as the level of the accumulator tiles holds stash
    entries of, 1024 rows' worth at least (tiling/flce_groups.group_cap): on a 512 KiB L2
    three 186 x 176 float32 entries fit but six make 1024 rows; on a 2 MiB one four entries of
    384 x 320; an entry larger than the level still gets a group of one."""
    from npugrad.passes.tiling.flce_groups import group_cap
    from npugrad.targets import get as get_target

    zen3 = get_target(str(LIT_INPUTS / "zen3.toml"))
    assert group_cap(zen3, 186 * 176 * 4, 186) == 6
    assert group_cap(zen3, 12 * 16 * 4, 12) == 512 * 1024 // (12 * 16 * 4)
    big = get_target(_zen3_with_l2(tmp_path, "2MiB"))
    assert group_cap(big, 384 * 320 * 4, 384) == 4
    assert group_cap(big, 4 * 1024 * 1024, 2048) == 1  # one entry over the level: still one


@pytest.mark.parametrize(("dtype", "hp"), [(FLOAT_DTYPES[0], False), (FLOAT_DTYPES[1], True)],
                         ids=lambda p: "high-performance" if p is True else "memory-saving" if p is False else str(p))
def test_flce_groups_cut_down_to_the_level_and_split_evenly(tmp_path, rng, threads, dtype, hp):
    """A CPU whose L2 holds 64 KiB: token tiles of at most 100 x 16 (6400-byte stash entries) go
    11 to a group at most (1024 rows' worth; the level holds 10) where max(2·H, 2048) rows asked
    for 21. BT = 4500 makes 46 tiles (even over the CPU's 2 cores): on 2 threads each block's 23
    split evenly over 3 groups, 8 + 8 + 7 (not 11 + 11 + 1); on 3 threads 16, 15 and 15, two
    groups each. Bit for bit the one-core result, and the reference's."""
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
    from npugrad.passes.fuse_linear_online_max_sum import FuseLinearOnlineMaxSumPass

    cpu = _zen3_with_l2(tmp_path, "64KiB")
    a = _flce_operands(rng, 4500, 40, 300, dtype, hp, packed=not hp)
    fused = [FuseLinearOnlineMaxSumPass(), FuseLinearCrossEntropyGradPass(tile_bt=100, tile_v=16)]
    results = []
    for n in (2, 3):
        threads(n)
        with using(Pipeline(cpu=cpu, fused_passes=fused)):
            results.append(_flce(a))
    with using(Pipeline(cpu=cpu, distribute=False, fused_passes=fused)):
        results.append(_flce(a))
    _all_same(results)
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(results[0][0], want["input_grad_out"])
    assert_close(results[0][1], want["weight_grad_out"])


BCE_IR = """
func.func @bce(%x: memref<?x?xf32>, %y: memref<?x?xf32>, %d: memref<1xf32>, %dx: memref<?x?xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?x?xf32>) input_y(%y : memref<?x?xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<?x?xf32>) {reduction = 1 : i64}
  func.return
}
"""


def _blocks(text: str, pipeline: Pipeline) -> int:
    return sum(isinstance(o, BlockIdxOp) for o in pipeline.lower(parse(text), "tiled").walk())


def test_tiled_stage_shows_the_split_and_opting_out_keeps_one_block():
    assert _blocks(BCE_IR, Pipeline()) == 1
    assert _blocks(BCE_IR, Pipeline(distribute=False)) == 0
    # Static sizes too small to be worth a second thread stay on one block.
    small = BCE_IR.replace("?x?", "8x10")
    assert _blocks(small, Pipeline()) == 0


def test_two_ops_in_one_function_are_not_split():
    """Blocks do not wait for each other: a function whose second op could read what the first
    wrote keeps both on one block."""
    body = BCE_IR.split("func.return")[0].split("{\n", 1)[1]
    two = BCE_IR.replace("  func.return", body + "  func.return")
    assert _blocks(two, Pipeline()) == 0


@pytest.mark.parametrize("pipeline", [Pipeline(), Pipeline(distribute=False)], ids=["distributed", "one-core"])
def test_small_inputs_still_right(rng, pipeline):
    """Below the split sizes every block but the first has nothing to do."""
    a = _bce_operands(rng, (5, 3), np.dtype(np.float32), 1, weighted=False)
    with using(pipeline) if pipeline else contextlib.nullcontext():
        got = _bce(a, 1)
    assert_close(got, harness.expected("binary_cross_entropy_grad", a, {"reduction": 1})["dx"])
