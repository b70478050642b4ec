"""nll_loss_backward (aclnnNLLLossBackward, aten::nll_loss_backward)."""

from __future__ import annotations

import numpy as np

from npugrad.dialect import NLLLossBackwardOp
from npugrad.ops.common import (
    REDUCTION,
    Planned,
    allocate,
    as_input,
    first_bad_id,
    integer,
    output,
    plan_zeroed,
    reject_overlap,
)
from npugrad.runtime.launch import Call, check, two_phase

OP = "nll_loss_backward"


def _check_targets(target: np.ndarray, ignore_index: int, c: int) -> None:
    """The value precondition no metadata check can see: non-ignored targets index a class."""
    bad = first_bad_id(target, ignore_index, c)
    if bad is not None:
        at = f" at position {bad}" if target.ndim else ""
        raise ValueError(
            f"{OP}: parameter 'target' has value {target.reshape(-1)[bad]}{at}, outside [0, C={c}) "
            f"and not ignore_index ({ignore_index})"
        )


@two_phase(replay=True)
def nll_loss_backward(grad_output, self, target, weight, reduction, ignore_index, total_weight, *, out=None):
    """Gradient of NLL loss w.r.t. the log-probabilities `self`; returns `out` (shape and dtype of self).

    self (N, C) with target (N,), or (C,) with a 0-D target. weight (C,) or None for ones(C).
    grad_output is (N,) for reduction 0 (none) with 2-D self, one element otherwise;
    total_weight (one element) divides it for reduction 1 (mean) and is used as given."""
    props = {
        "reduction": integer(OP, "reduction", reduction, REDUCTION),
        "ignore_index": integer(OP, "ignore_index", ignore_index, "an integer"),
    }
    s = as_input(OP, "self", self)
    if weight is None:  # what torch_npu passes when PyTorch has none
        weight = Planned(s.shape[-1:], s.dtype, "parameter 'self'", fill=1)
    else:
        weight = as_input(OP, "weight", weight)
    arrays = {
        "grad_output": as_input(OP, "grad_output", grad_output),
        "self": s,
        "target": as_input(OP, "target", target),
        "weight": weight,
        "total_weight": as_input(OP, "total_weight", total_weight),
        "out": output(OP, "out", out, s.shape, s.dtype, "parameter 'self'"),
    }
    props["out_zeroed"] = plan_zeroed(arrays["out"])  # allocated here: only the samples' elements are written
    props = check(NLLLossBackwardOp, arrays, props)
    reject_overlap(OP, arrays, ("out",))
    fresh = allocate(OP, arrays, ("weight", "out"))
    c, ignore_index = s.shape[-1], props["ignore_index"]
    return Call(NLLLossBackwardOp, arrays, props, arrays["out"], lambda a: _check_targets(a["target"], ignore_index, c),
                fresh=fresh)
