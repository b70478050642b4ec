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
