"""The Python API: one function per op, with the names and parameters of the spec's reference.

Arrays in, arrays out. Outputs are allocated unless passed (`out=`; `input_grad_out=` and
`weight_grad_out=` for the linear cross-entropy gradient); `apply_fused_ema_adam` updates its
arrays in place. Every call checks the spec's rules first and raises ValueError/TypeError naming
the op and the parameter; nothing is written when a call is rejected.
"""

from __future__ import annotations

import numpy as np

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.dialect.checks import SignatureError
from npugrad.runtime.launch import as_input, check, launch

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def _output(op: str, name: str, given, shape, dtype) -> np.ndarray:
    if given is None:
        return np.empty(shape, dtype)
    if not isinstance(given, np.ndarray):
        raise TypeError(f"{op}: parameter '{name}' must be a numpy array, got {type(given).__name__}")
    if not given.flags.writeable:
        raise SignatureError(f"{op}: parameter '{name}' is read-only")
    return given


def binary_cross_entropy_grad(input_x, input_y, dloss, weight=None, reduction=REDUCTION_MEAN, *, out=None):
    """dL/dx of binary cross entropy (Phytium Binarycrossentropygrad); returns `out` (shape of input_x)."""
    op = "binary_cross_entropy_grad"
    x = as_input(op, "input_x", input_x)
    arrays = {
        "input_x": x,
        "input_y": as_input(op, "input_y", input_y),
        "dloss": as_input(op, "dloss", dloss),
        "weight": None if weight is None else as_input(op, "weight", weight),
    }
    if reduction == REDUCTION_NONE and arrays["dloss"].shape != x.shape and arrays["dloss"].size == x.size:
        arrays["dloss"] = arrays["dloss"].reshape(x.shape)  # the vendor API takes it flat
    arrays["dx"] = _output(op, "out", out, x.shape, x.dtype)
    props = check(BinaryCrossEntropyGradOp, arrays, {"reduction": int(reduction)})
    launch(BinaryCrossEntropyGradOp, arrays, props)
    return arrays["dx"]
