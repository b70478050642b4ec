"""binary_cross_entropy_grad (Phytium DSP Binarycrossentropygrad)."""

from __future__ import annotations

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.ops.common import (
    REDUCTION,
    REDUCTION_MEAN,
    REDUCTION_NONE,
    allocate,
    as_input,
    integer,
    output,
    reject_overlap,
)
from npugrad.runtime.launch import Call, check, two_phase

OP = "binary_cross_entropy_grad"
DISPLAY = {"dx": "out"}


@two_phase(replay=True)
def binary_cross_entropy_grad(input_x, input_y, dloss, weight=None, reduction=REDUCTION_MEAN, *, out=None):
    """dL/dx of binary cross entropy; returns `out` (the shape and dtype of input_x).

    dloss holds one value per element for reduction 0 (none; flat or shaped like input_x), one
    value otherwise."""
    reduction = integer(OP, "reduction", reduction, REDUCTION)
    x = as_input(OP, "input_x", input_x)
    arrays = {
        "input_x": x,
        "input_y": as_input(OP, "input_y", input_y),
        "dloss": as_input(OP, "dloss", dloss),
        "weight": None if weight is None else as_input(OP, "weight", weight),
    }
    dl = arrays["dloss"]
    if reduction == REDUCTION_NONE and dl.shape != x.shape and dl.size == x.size and dl.ndim <= 1:
        arrays["dloss"] = dl.reshape(x.shape)  # the vendor API takes it flat
    arrays["dx"] = output(OP, "out", out, x.shape, x.dtype, "parameter 'input_x'")
    props = check(BinaryCrossEntropyGradOp, arrays, {"reduction": reduction}, DISPLAY)
    reject_overlap(OP, arrays, ("dx",), DISPLAY)
    fresh = allocate(OP, arrays, ("dx",), DISPLAY)
    return Call(BinaryCrossEntropyGradOp, arrays, props, arrays["dx"], fresh=fresh)
