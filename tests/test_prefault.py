"""ops.common.prefault: a fresh large array's pages mapped before a kernel touches them (outputs the
API allocates, the loss's gradients and buffers), its values unchanged."""

from __future__ import annotations

import os

import numpy as np
import pytest

from npugrad.ops.common import HUGE_PAGE_BYTES, aligned_empty, prefault


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmRSS from /proc/self/status")
@pytest.mark.parametrize("madvise", [True, False], ids=["madvise", "writes"])
def test_a_fresh_array_is_resident_after_prefault_and_keeps_its_zeros(monkeypatch, madvise):
    """Through madvise(MADV_POPULATE_WRITE), and through the fallback's writes where a system
    has no such advice."""
    from npugrad.ops import common

    if not madvise:
        monkeypatch.setattr(common, "_madvise", False)
    n = 64 << 20  # 64 MiB: an mmap of its own, whatever malloc's thresholds
    a = np.zeros(n // 4, np.float32)
    before = _rss_kib()
    assert prefault(a) is a
    grown = _rss_kib() - before
    assert grown >= 0.9 * n / 1024, f"only {grown} KiB of {n // 1024} made resident"
    assert not a.any()


def test_values_are_kept_and_small_or_read_only_arrays_are_left_alone(rng):
    a = rng.standard_normal(3 * HUGE_PAGE_BYTES // 8)  # float64, three huge pages
    want = a.copy()
    prefault(a)
    assert np.array_equal(a, want)
    b = rng.standard_normal((4096, 300)).astype(np.float32)[:, ::3]  # strided view
    want_b = b.copy()
    prefault(b)
    assert np.array_equal(b, want_b)
    small = np.ones(10)
    assert prefault(small) is small
    frozen = np.zeros(HUGE_PAGE_BYTES)
    frozen.flags.writeable = False
    assert prefault(frozen) is frozen and not frozen.any()


def test_api_allocated_outputs_are_correct(rng):
    """The API's own outputs (prefaulted when large) hold the results: FLCE with no out=."""
    from npugrad import ops

    bt, h, v = 64, 32, 20000  # dW of 2.4 MiB: above a huge page
    x = rng.standard_normal((bt, h), dtype=np.float32) * 0.2
    w = rng.standard_normal((v, h), dtype=np.float32) * 0.2
    t = rng.integers(0, v, bt)
    g = rng.random(bt, dtype=np.float32)
    z = x.astype(np.float64) @ w.T.astype(np.float64)
    lm = z.max(1).astype(np.float32)
    se = np.exp(z - lm[:, None]).sum(1).astype(np.float32)
    mask = np.zeros(bt, np.bool_)
    dx, dw = ops.fused_linear_cross_entropy_loss_grad(g, x, w, mask, t, logits_max=lm, sum_exp_logits=se)
    p = np.exp(z - lm[:, None]) / se[:, None]
    p[np.arange(bt), t] -= 1
    p *= g[:, None]
    np.testing.assert_allclose(dx, p @ w, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, p.T @ x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(186, 4096), (3, 5), (7,), (0, 4)], ids=str)
@pytest.mark.parametrize("dtype", [np.float32, np.uint16, np.float64], ids=str)
def test_aligned_empty_starts_on_the_boundary(shape, dtype):
    """aligned_empty: C-contiguous, writable, the shape and dtype asked for, its first element on
    a 64-byte boundary (NumPy's large arrays start 16 bytes into a page), or another power of two."""
    for alignment in (64, 4096):
        a = aligned_empty(shape, dtype, alignment)
        assert a.shape == shape and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        if a.size:
            assert a.ctypes.data % alignment == 0
            a[...] = 1
            assert a.sum() == a.size
