"""embedding_dense_backward (Ascend aclnnEmbeddingDenseBackward, aten::embedding_dense_backward)."""

from __future__ import annotations

import numpy as np

from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.ops.common import (
    all_in_range,
    allocate,
    as_input,
    flag,
    integer,
    output,
    plan_zeroed,
    reject_overlap,
    reserve_scratch,
)
from npugrad.runtime import pool
from npugrad.runtime.launch import Call, check, two_phase

OP = "embedding_dense_backward"
NO_PADDING = -1
# Index dtypes the vendor converts to integers before its kernel (OPS.md 2.1, the reference too):
# narrower integers and bool widen, floating point truncates toward zero.
CONVERTED_INDICES = frozenset(map(np.dtype, (np.int8, np.int16, np.uint8, np.bool_, np.float16, np.float32, np.float64)))


def _padding(padding_idx, num_weights: int) -> int:
    """padding_idx as the kernel's property: the row it names, or -1 for "no padding"."""
    pad = integer(OP, "padding_idx", padding_idx, "an integer (int64, or uint64 as torch_npu passes -1)",
                  -(1 << 63), (1 << 64) - 1)
    if pad >= 1 << 63:
        pad -= 1 << 64  # uint64 two's complement, as torch_npu passes -1
    # Every value that names no row is the same kernel.
    return pad if 0 <= pad < num_weights else NO_PADDING


@two_phase(replay=True)
def embedding_dense_backward(grad, indices, num_weights, padding_idx=-1, scale_grad_by_freq=False, *, out=None):
    """Sum the rows of grad (*, D) into the rows of `out` (num_weights, D) that `indices` name.

    indices may have any shape with prod(grad.shape[:-1]) elements, int32 or int64, or (converted,
    as the vendor does) int8, int16, uint8, bool or floating point, truncated toward zero. Rows equal to padding_idx
    contribute nothing; with scale_grad_by_freq each row is divided by its index's count. Sums
    are float32 in index order (deterministic), rounded once to out's dtype (default: grad's)."""
    nw = integer(OP, "num_weights", num_weights)
    props = {
        "num_weights": nw,
        "padding_idx": _padding(padding_idx, nw),
        "scale_grad_by_freq": flag(OP, "scale_grad_by_freq", scale_grad_by_freq),
    }
    g = as_input(OP, "grad", grad)
    given = as_input(OP, "indices", indices)
    # The kernel reads int32 or int64; another dtype the vendor takes is converted on every run
    # (in the value check: the two-phase form converts what the array holds in phase two).
    idx = np.empty(given.shape, np.int64) if given.dtype in CONVERTED_INDICES else given
    d = g.shape[-1] if g.ndim else 0
    arrays = {"grad": g, "indices": idx,
              "out": output(OP, "out", out, (max(nw, 0), d), g.dtype, f"parameter 'num_weights' = {nw}")}
    props["out_zeroed"] = plan_zeroed(arrays["out"])  # allocated here: the rows no index names are not written
    props = check(EmbeddingDenseBackwardOp, arrays, props, {"out": "out"})
    reject_overlap(OP, arrays, ("out",))
    fresh = allocate(OP, arrays, ("out",))

    def value_check(a) -> None:
        if idx is not given:
            _convert_indices(a["grad"], given, idx, nw)
        _check_indices(a["grad"], a["indices"], nw)
        if d:  # the kernel's counting sort: an index-sized (8-byte) position per index, and the bucket
            # offsets, in each block that runs at once (distribute_embedding: each sorts all of them)
            per_block = 8 * (a["indices"].size + max(nw, 0) + 2)
            reserve_scratch(OP, per_block * pool.threads(), f"parameter 'indices' ({a['indices'].size} entries)")

    return Call(EmbeddingDenseBackwardOp, arrays, props, arrays["out"], value_check, fresh=fresh,
                replayable=idx is given)


def _convert_indices(g: np.ndarray, given: np.ndarray, idx: np.ndarray, nw: int) -> None:
    """idx (int64) = `given` converted as the vendor does: a float truncated toward zero, checked
    in range as it was given (NaN and infinities name themselves, not what a cast made of them)."""
    if given.shape != idx.shape:  # resized in place since phase one of the two-phase form
        raise ValueError(f"{OP}: parameter 'indices' changed shape since the call was planned: {given.shape}, "
                         f"was {idx.shape}")
    if given.dtype.kind != "f":
        idx[...] = given
        return
    whole = np.trunc(given.astype(np.float64))
    valid = (whole >= 0) & (whole < nw)  # NaN fails both
    if g.size and given.size and not valid.all():
        where = np.unravel_index(int(np.argmin(valid)), given.shape)
        raise ValueError(f"{OP}: parameter 'indices' must lie in [0, num_weights) = [0, {nw}) once truncated to "
                         f"integers, got {given[where]} at position {tuple(map(int, where))}")
    idx[...] = np.where(valid, whole, 0)


def _check_indices(g: np.ndarray, idx: np.ndarray, nw: int) -> None:
    # Like the reference, indices are only read when there is something to scatter.
    if g.size and idx.size and not all_in_range(idx, nw):
        bad = (idx < 0) | (idx >= nw)
        if bad.any():
            where = np.unravel_index(int(np.argmax(bad)), idx.shape)
            raise ValueError(
                f"{OP}: parameter 'indices' must lie in [0, num_weights) = [0, {nw}), "
                f"got {idx[where]} at position {tuple(map(int, where))}"
            )
