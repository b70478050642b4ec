"""The memory of large allocated outputs, kept for the next call (npugrad/runtime/memory.py): reused
only once no array refers to it, never for outputs that must start as zeros, and bounded."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from npugrad import ops
from npugrad.reference import ops as ref
from npugrad.runtime import memory

N = 3 << 20  # float32 elements: 12 MiB, past memory.MIN_BYTES


@pytest.fixture(autouse=True)
def empty_pool(monkeypatch):
    monkeypatch.delenv("NPUGRAD_OUTPUT_POOL", raising=False)
    memory.release()
    yield
    gc.collect()
    memory.release()


def _bce(rng, n=N, **kw):
    x = rng.uniform(0.05, 0.95, n).astype(np.float32)
    y = rng.uniform(0, 1, n).astype(np.float32)
    d = np.ones(1, np.float32)
    return ops.binary_cross_entropy_grad(x, y, d, **kw), (x, y, d)


def test_an_output_is_made_again_in_the_memory_of_one_that_died(rng):
    dx, _ = _bce(rng)
    address = dx.ctypes.data
    assert memory.kept_bytes() == 0  # in use
    del dx
    assert memory.kept_bytes() >= N * 4
    again, (x, y, d) = _bce(rng)
    assert again.ctypes.data == address and memory.kept_bytes() == 0
    np.testing.assert_allclose(again, ref.binary_cross_entropy_grad(x, y, d, None, reduction=1), rtol=1e-5)


def test_a_view_or_a_tensor_keeps_the_memory_from_the_next_output(rng):
    dx, _ = _bce(rng)
    view = dx[::3]
    before = view.copy()
    del dx
    assert memory.kept_bytes() == 0  # the view still refers to it
    other, _ = _bce(rng)
    assert not np.shares_memory(other, view) and np.array_equal(view, before)
    torch = pytest.importorskip("torch")
    tensor = torch.from_numpy(other)
    del other, view
    assert memory.kept_bytes() >= N * 4  # the view's block; the tensor's is held
    third, _ = _bce(rng)
    assert not np.shares_memory(third, tensor.numpy())
    del tensor


def test_outputs_that_start_as_zeros_take_kept_memory_and_write_their_zeros(rng):
    """An output that starts as zeros (NLL's backward) of the pool's size takes a kept block,
    which holds what the last output left (7s here): its kernel is not told out_zeroed and writes
    the zeros itself (ops/common.plan_zeroed), so the result is the same as over fresh pages."""
    dx, _ = _bce(rng, n=N)
    dx[:] = 7.0
    del dx
    kept = memory.kept_bytes()
    n, c = N // 1000, 1000
    logp = rng.standard_normal((n, c)).astype(np.float32)
    target = rng.integers(0, c, n)
    w = np.ones(c, np.float32)
    out = ops.nll_loss_backward(np.array(1.0, np.float32), logp, target, w, 1, -100, np.array([float(n)], np.float32))
    assert kept > 0 and memory.kept_bytes() == 0  # it took the block of 7s
    want = np.zeros((n, c), np.float32)
    want[np.arange(n), target] = -1.0 / n
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_the_pool_is_bounded_and_can_be_emptied(rng, monkeypatch):
    outputs = [_bce(rng)[0] for _ in range(3)]
    one = memory.kept_bytes()
    assert one == 0
    monkeypatch.setenv("NPUGRAD_OUTPUT_POOL", str(2 * N * 4 + (4 << 20)))  # two blocks fit, not three
    outputs.clear()
    kept = memory.kept_bytes()
    assert 2 * N * 4 <= kept <= 2 * N * 4 + (4 << 20)  # the oldest unmapped
    assert memory.release() == kept and memory.kept_bytes() == 0
    monkeypatch.setenv("NPUGRAD_OUTPUT_POOL", "0")  # none kept: every output a fresh mapping
    dx, _ = _bce(rng)
    assert dx.base is None or type(dx.base) is not memory._Block
    del dx
    assert memory.kept_bytes() == 0


def test_a_small_output_is_numpys_own(rng):
    dx, _ = _bce(rng, n=1000)
    assert dx.flags.owndata


def test_a_malformed_pool_size_is_named(rng, monkeypatch):
    monkeypatch.setenv("NPUGRAD_OUTPUT_POOL", "lots")
    with pytest.raises(ValueError, match=r"^NPUGRAD_OUTPUT_POOL must be a size in bytes .* got 'lots'$"):
        _bce(rng)
    # An output below the pool's least size used to skip the variable, so the mistake went unsaid.
    with pytest.raises(ValueError, match=r"^NPUGRAD_OUTPUT_POOL must be a size in bytes .* got 'lots'$"):
        _bce(rng, n=1000)
    monkeypatch.setenv("NPUGRAD_OUTPUT_POOL", "64MiB")
    assert memory.limit() == 64 << 20


@pytest.mark.parametrize("refusing", ["mmap", "numpy"])
def test_an_output_the_process_cannot_have_is_a_memory_error_naming_it(rng, monkeypatch, refusing):
    """A fresh output refused (ENOMEM: an address-space limit, `ulimit -v`, or overcommit), on a
    planned call and on a replayed one. From the pool it was mmap's bare OSError, naming neither
    the op nor the output; from NumPy (the pool off, a small output) its MemoryError, naming
    neither either."""
    import errno

    _bce(rng)  # the call planned once: the next ones of this signature are replayed
    gc.collect()
    memory.release()

    def refused(*_args):
        if refusing == "mmap":
            raise OSError(errno.ENOMEM, "Cannot allocate memory")
        raise MemoryError("Unable to allocate 12.0 MiB for an array with shape (3145728,) and data type float32")

    monkeypatch.setattr(memory, "_new_block" if refusing == "mmap" else "empty", refused)
    for _ in range(2):
        with pytest.raises(MemoryError, match=r"^binary_cross_entropy_grad: output 'out' of shape \(3145728,\) "
                                              r"\(float32\) needs 12.00 MiB, which this process cannot allocate$"):
            _bce(rng)
    monkeypatch.undo()
    dx, (x, y, d) = _bce(rng)
    np.testing.assert_allclose(dx, ref.binary_cross_entropy_grad(x, y, d, None, reduction=1), rtol=1e-5)
