"""fused_linear_cross_entropy_loss_grad (aclnnFusedLinearCrossEntropyLossGrad)."""

from __future__ import annotations

import numpy as np

from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.dialect.checks import SignatureError
from npugrad.ops.common import (
    SpreadInput,
    all_in_range,
    allocate,
    as_input,
    flag,
    integer,
    output,
    real,
    reject_overlap,
    spread_rows,
)
from npugrad.reference import unpack_target_mask
from npugrad.runtime.launch import Call, check, two_phase

OP = "fused_linear_cross_entropy_loss_grad"
OUTPUTS = ("input_grad_out", "weight_grad_out")
_BOOL = np.dtype(np.bool_)
# Under NumPy's __array_function__ dispatch: the dispatch costs more than counting a few rows.
_count_nonzero = getattr(np.count_nonzero, "_implementation", np.count_nonzero)


@two_phase(replay=True)
def fused_linear_cross_entropy_loss_grad(
    grad, input, weight, target_mask, masked_target, label_smoothing=0.0,
    logits_max=None, sum_exp_logits=None, softmax=None, *, vocab_size=0, z_loss=0.0, softcap=0.0,
    accumulate=False, softmax_is_logits=False, logits_block=0, softmax_block_max=None, float32_input_grad=False,
    input_grad_out=None, weight_grad_out=None,
):
    """Backward of a vocabulary-parallel LM head + cross entropy on one tensor-parallel rank;
    returns (input_grad (BT, H), weight_grad (V, H)), in input's dtype unless outputs are given.

    Given `softmax` (high-performance mode) the statistics are ignored; otherwise P is recomputed
    from `logits_max` and `sum_exp_logits`. This kernel leaves `softmax` intact, but the vendor
    kernel overwrites it: callers must not rely on its contents after the call. No output may
    share memory with an input (softmax included) or with the other output.

    Extensions (FORWARD.md §4; 0 keeps the vendor's semantics): `label_smoothing` α over the
    global vocabulary of `vocab_size` rows; `z_loss` λ and `softcap` c (memory-saving mode only:
    they need the logits). Rows whose `grad` is 0 contribute nothing and are not computed.

    `accumulate` (beyond the vendor): the gradients are added to what `input_grad_out` and
    `weight_grad_out` hold, both required (PyTorch's .grad accumulation; a caller summing over
    token chunks or micro-batches needs no second weight-sized buffer).

    `softmax_is_logits` (beyond the vendor): `softmax` holds the logits the forward kept
    (float32, or in the input's dtype), and P = exp(softmax − logits_max)/sum_exp_logits is made
    in the kernel, as memory-saving mode makes it: both statistics are then required. With
    `logits_block` B > 0 too, they are the compact logits the forward keeps with the same B
    (fused_linear_online_max_sum): `softmax` E = exp(Z − C) in float16 and `softmax_block_max`
    C (BT, ceil(V/B)) float32, and P = (E·exp(C − logits_max))/sum_exp_logits.

    `float32_input_grad` (beyond the vendor): input_grad comes in float32 whatever the input's
    dtype, unrounded: for a caller that sums several shards' dX and rounds once."""
    label_smoothing = real(OP, "label_smoothing", label_smoothing)
    extensions = {"label_smoothing": label_smoothing, "vocab_size": integer(OP, "vocab_size", vocab_size),
                  "z_loss": real(OP, "z_loss", z_loss, float32=True), "softcap": real(OP, "softcap", softcap, float32=True),
                  "accumulate": flag(OP, "accumulate", accumulate),
                  "softmax_is_logits": flag(OP, "softmax_is_logits", softmax_is_logits),
                  "logits_block": integer(OP, "logits_block", logits_block, "a non-negative integer", 0),
                  "float32_input_grad": flag(OP, "float32_input_grad", float32_input_grad)}
    if extensions["accumulate"]:
        missing = [n for n, a in zip(OUTPUTS, (input_grad_out, weight_grad_out)) if a is None]
        if missing:
            raise SignatureError(f"{OP}: parameter 'accumulate' adds into the outputs: give {' and '.join(map(repr, missing))}")
    x = as_input(OP, "input", input)
    arrays = {
        "grad": as_input(OP, "grad", grad),
        "input": x,
        "weight": as_input(OP, "weight", weight),
        "target_mask": as_input(OP, "target_mask", target_mask),
        "masked_target": as_input(OP, "masked_target", masked_target),
        "logits_max": None if logits_max is None else as_input(OP, "logits_max", logits_max),
        "sum_exp_logits": None if sum_exp_logits is None else as_input(OP, "sum_exp_logits", sum_exp_logits),
        "softmax": None if softmax is None else as_input(OP, "softmax", softmax),
        "softmax_block_max": None if softmax_block_max is None else as_input(OP, "softmax_block_max", softmax_block_max),
    }
    w = arrays["weight"]
    bt = x.shape[0] if x.ndim == 2 else 0
    h = x.shape[1] if x.ndim == 2 else 0
    v = w.shape[0] if w.ndim == 2 else 0
    arrays["input_grad_out"] = output(OP, "input_grad_out", input_grad_out, (bt, h),
                                      np.dtype(np.float32) if extensions["float32_input_grad"] else x.dtype,
                                      "parameter 'input'")
    arrays["weight_grad_out"] = output(OP, "weight_grad_out", weight_grad_out, (v, h), x.dtype, "parameter 'weight'")
    props = check(FusedLinearCrossEntropyLossGradOp, arrays, extensions)
    reject_overlap(OP, arrays, OUTPUTS)
    fresh = allocate(OP, arrays, OUTPUTS, mapped=True)  # the wavefront's blocks first touch dW out of order
    if softmax is not None and not extensions["softmax_is_logits"]:
        arrays["logits_max"] = arrays["sum_exp_logits"] = None  # ignored by the spec in this mode
    return _RowsThatCount(FusedLinearCrossEntropyLossGradOp, arrays, props,
                          (arrays["input_grad_out"], arrays["weight_grad_out"]),
                          lambda a: _check_targets(a["target_mask"], a["masked_target"], bt, v), fresh=fresh)


_ROW_OPERANDS = ("grad", "input", "masked_target", "logits_max", "sum_exp_logits", "softmax", "softmax_block_max")


class _RowsThatCount(SpreadInput):
    """The call, with the rows whose upstream gradient is 0 left out of the kernel: such a row
    contributes nothing (FORWARD.md §4: its input_grad row is 0, whatever it holds, NaN or Inf
    included), so the kernel runs on the other rows, gathered, and time follows the rows that
    count."""

    def run(self):
        a = self.arrays
        grad = a["grad"]
        if _count_nonzero(grad) == grad.size:  # no row to leave out (NaN counts as non-zero)
            return super().run()
        skip = grad == 0
        if self.value_check is not None:
            self.value_check(a)
        keep = np.flatnonzero(~skip)
        compact = {k: (x[keep] if k in _ROW_OPERANDS and x is not None else x) for k, x in a.items()}
        compact["target_mask"] = _rows_of_mask(a["target_mask"], keep, skip.size)
        gx = a["input_grad_out"]
        accumulate = self.props.get("accumulate", False)
        compact["input_grad_out"] = gx[keep] if accumulate else np.empty((keep.size, gx.shape[1]), gx.dtype)
        spread = spread_rows(compact["input"])
        if spread is not None:
            compact["input"] = spread
        Call(self.op_cls, compact, self.props, None, static_shapes=self.static_shapes).run()
        if not accumulate:  # accumulating, the skipped rows add 0: they keep what they hold
            gx[skip] = 0
        gx[keep] = compact["input_grad_out"]
        return self.result


def _rows_of_mask(target_mask: np.ndarray, keep: np.ndarray, bt: int) -> np.ndarray:
    """The target mask of rows `keep`, in the form it came in (bool, or bit-packed with padding 1)."""
    if target_mask.dtype == np.bool_:
        return target_mask[keep]
    bits = np.ones(-(-keep.size // 8) * 8, np.uint8)
    bits[:keep.size] = np.unpackbits(target_mask, bitorder="little")[:bt][keep]
    return np.packbits(bits, bitorder="little")


def _check_targets(target_mask: np.ndarray, masked_target: np.ndarray, bt: int, v: int) -> None:
    """0 ≤ masked_target[t] < V on every row whose target is in this shard (the device faults)."""
    if target_mask.dtype == _BOOL and not _count_nonzero(target_mask):
        targets = masked_target  # the common case: every row's target is in this shard
    else:
        targets = masked_target[_in_shard(target_mask, bt)]
    if all_in_range(targets, v):
        return
    rows = np.flatnonzero(_in_shard(target_mask, bt))
    targets = masked_target[rows]
    t = int(rows[np.flatnonzero((targets < 0) | (targets >= v))[0]])
    raise ValueError(
        f"{OP}: parameter 'masked_target' must be in [0, V = {v}) on rows whose target_mask bit is 0, "
        f"got {int(masked_target[t])} at row {t}"
    )


def _in_shard(target_mask: np.ndarray, bt: int) -> np.ndarray:
    """The rows whose target is in this shard (mask bit 0), as a bool (BT,) array."""
    if target_mask.dtype == _BOOL:  # as unpack_target_mask reads it, without its float copy
        return ~target_mask
    return unpack_target_mask(target_mask, bt) == 0
