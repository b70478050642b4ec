"""Arrays whose rows are contiguous but a pitch apart that is not their width (views of some
rows or columns of a larger array, padded row pitches): the runtime specialises them to a
unit last stride (strided<[?, 1]>), so their kernels are the vectorised ones, and every op gives
on such views bit for bit what it gives on contiguous copies. A view with a last stride other
than one element keeps every stride dynamic."""

from __future__ import annotations

import numpy as np
import pytest

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.runtime.specialize import OperandClass

PAD = 16  # elements past each row of the padded views


def padded(a: np.ndarray) -> np.ndarray:
    """A copy of `a` (2-D) whose rows lie PAD elements further apart than their width."""
    base = np.full((a.shape[0], a.shape[1] + PAD), 7, a.dtype)
    view = base[:, :a.shape[1]]
    view[...] = a
    assert not view.flags.c_contiguous and view.strides[1] == a.itemsize
    return view


@pytest.mark.parametrize("static", [False, True])
def test_views_with_contiguous_rows_are_classed_unit_last_stride(static):
    a = np.zeros((6, 10), np.float32)
    assert not OperandClass.of(a, static).strided
    rows = OperandClass.of(padded(a), static)
    assert rows.strided and rows.unit_rows
    assert "strided<[?, 1], offset: ?>" in str(rows.memref_type())
    every_other = OperandClass.of(np.zeros((6, 20), np.float32)[:, ::2], static)
    assert every_other.strided and not every_other.unit_rows
    assert "strided<[?, ?], offset: ?>" in str(every_other.memref_type())
    assert OperandClass.of(padded(a), static) != OperandClass.of(a[:, ::2], static)


@pytest.mark.parametrize("dtype", [np.float32, BFLOAT16], ids=["float32", "bfloat16"])
def test_flce_forward_and_gradient_on_padded_rows(rng, dtype):
    bt, h, v = 70, 40, 600
    x = (rng.standard_normal((bt, h)) * h ** -0.5).astype(dtype)
    w = (rng.standard_normal((v, h)) * 0.05).astype(dtype)
    t = rng.integers(0, v, bt)
    dense = ops.fused_linear_online_max_sum(x, w, t, 0, v)
    strided = ops.fused_linear_online_max_sum(padded(x), padded(w), t, 0, v)
    for name in ("logits_max", "sum_exp_logits", "predicted_logits"):
        np.testing.assert_array_equal(getattr(strided, name), getattr(dense, name))
    g = rng.uniform(0.5, 1.5, bt).astype(np.float32) / bt
    mask = np.zeros(bt, np.bool_)
    stats = {"logits_max": dense.logits_max, "sum_exp_logits": dense.sum_exp_logits}
    gx, gw = ops.fused_linear_cross_entropy_loss_grad(g, x, w, mask, t, **stats)
    out_x, out_w = padded(np.zeros((bt, h), dtype)), padded(np.zeros((v, h), dtype))
    got = ops.fused_linear_cross_entropy_loss_grad(g, padded(x), padded(w), mask, t, **stats,
                                                    input_grad_out=out_x, weight_grad_out=out_w)
    np.testing.assert_array_equal(got[0], gx)
    np.testing.assert_array_equal(got[1], gw)
    pads = (out_x.base[:, h:], out_w.base[:, h:])
    assert all((p == 7).all() for p in pads), "the padding past each row is not written"


def test_elementwise_and_row_ops_on_padded_rows(rng):
    n, c = 37, 45
    x = rng.uniform(0.05, 0.95, (n, c)).astype(np.float32)
    y = rng.uniform(0, 1, (n, c)).astype(np.float32)
    d = np.array([0.7], np.float32)
    np.testing.assert_array_equal(ops.binary_cross_entropy_grad(padded(x), padded(y), d),
                                  ops.binary_cross_entropy_grad(x, y, d))
    logp = rng.standard_normal((n, c)).astype(np.float32)
    target = rng.integers(0, c, n)
    total = np.array(float(n), np.float32)
    np.testing.assert_array_equal(ops.nll_loss_backward(d[0:1].reshape(()), padded(logp), target, None, 1, -100, total),
                                  ops.nll_loss_backward(d[0:1].reshape(()), logp, target, None, 1, -100, total))
    grad = rng.standard_normal((n, c)).astype(np.float32)
    idx = rng.integers(0, 11, n)
    np.testing.assert_array_equal(ops.embedding_dense_backward(padded(grad), idx, 11),
                                  ops.embedding_dense_backward(grad, idx, 11))


def _flce_case(bt: int, h: int, v: int, dtype, seed: int = 3):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((bt, h), dtype=np.float32) * np.float32(h**-0.5)).astype(dtype)
    w = (rng.standard_normal((v, h), dtype=np.float32) * np.float32(0.05)).astype(dtype)
    t = rng.integers(0, v, bt)
    g = (rng.random(bt, dtype=np.float32) + np.float32(0.5)) / np.float32(bt)
    z = x.astype(np.float32) @ w.astype(np.float32).T
    lm = z.max(1)
    se = np.exp(z - lm[:, None]).sum(1).astype(np.float32)
    return g, x, w, np.zeros(bt, np.bool_), t, lm, se


def test_flce_spreads_rows_a_page_apart_only_where_they_are():
    """ops/common.spread_rows: a 2-byte X whose rows are a multiple of a page apart and which
    outgrows the L2 is copied with its rows a line further apart; the copy holds X's values.
    float32, rows not such a multiple apart, and inputs within the L2 are read in place."""
    from npugrad.ops.common import WAY_BYTES, spread_rows
    from npugrad.ops.loss import _cpu

    l2 = _cpu().role("vector").capacity
    h = WAY_BYTES  # 2-byte rows of 8 KiB
    rows = l2 // (2 * h) + 8
    x = np.random.default_rng(0).standard_normal((rows, h), dtype=np.float32).astype(BFLOAT16)
    spread = spread_rows(x)
    assert spread is not None and spread.shape == x.shape and spread.strides[0] % WAY_BYTES != 0
    assert spread.strides[0] > x.strides[0] and spread.strides[1] == x.itemsize
    assert np.array_equal(spread.view(np.uint16), x.view(np.uint16))
    assert spread_rows(x.astype(np.float32)) is None
    assert spread_rows(x[: l2 // (2 * h) // 2]) is None  # within the L2
    assert spread_rows(np.ascontiguousarray(x[:, : h - 8])) is None  # rows not a page multiple apart
    assert spread_rows(padded(x)) is None  # not C-contiguous: the caller's pitch is kept


@pytest.mark.parametrize("skip_rows", [False, True])
def test_flce_gradient_on_spread_rows_matches_x_read_in_place(skip_rows):
    """The bfloat16 gradient over an X that spread_rows copies gives, bit for bit, what it gives
    over the same X padded by the caller (read in place, never copied), with rows whose upstream
    gradient is 0 left out or not."""
    from npugrad.ops.common import spread_rows
    from npugrad.ops.loss import _cpu

    h = 2048
    bt = max(64, _cpu().role("vector").capacity // (2 * h) + 40)
    g, x, w, mask, t, lm, se = _flce_case(bt, h, 96, BFLOAT16)
    if skip_rows:
        g[::5] = 0
    assert spread_rows(x) is not None
    got = ops.fused_linear_cross_entropy_loss_grad(g, x, w, mask, t, logits_max=lm, sum_exp_logits=se)
    want = ops.fused_linear_cross_entropy_loss_grad(g, padded(x), w, mask, t, logits_max=lm, sum_exp_logits=se)
    for a, b in zip(got, want):
        assert np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert not np.any(got[0][::5].view(np.uint16)) if skip_rows else np.any(got[0].view(np.uint16))


def test_forward_statistics_on_spread_rows_match_x_read_in_place():
    """fused_linear_online_max_sum over a bfloat16 X that spread_rows copies gives, bit for bit,
    what it gives over the same X padded by the caller (read in place)."""
    from npugrad.ops.common import spread_rows
    from npugrad.ops.loss import _cpu

    h = 2048
    bt = max(64, _cpu().role("vector").capacity // (2 * h) + 40)
    _, x, w, _, t, _, _ = _flce_case(bt, h, 200, BFLOAT16)
    assert spread_rows(x) is not None
    got = ops.fused_linear_online_max_sum(x, w, t, 0, 200)
    want = ops.fused_linear_online_max_sum(padded(x), w, t, 0, 200)
    for a, b in zip(got, want):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
    assert np.all(np.isfinite(got[0])) and np.all(got[1] >= 1)


def test_spread_rows_copies_nothing_inside_rows_in_place():
    """ops/loss.py's schedules run within rows_in_place: their memory budgets hold no copy of X,
    in the caller's thread or in the pool's tasks."""
    from npugrad.ops.common import rows_in_place, spread_rows
    from npugrad.ops.loss import _cpu
    from npugrad.runtime import pool

    h = 2048
    x = np.zeros((_cpu().role("vector").capacity // (2 * h) + 8, h), BFLOAT16)
    assert spread_rows(x) is not None
    with rows_in_place():
        assert spread_rows(x) is None
        assert pool.run_tasks([lambda: spread_rows(x), lambda: spread_rows(x)]) == [None, None]
    assert spread_rows(x) is not None
