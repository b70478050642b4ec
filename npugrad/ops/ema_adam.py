"""apply_fused_ema_adam (aclnnApplyFusedEmaAdam): one Adam/AdamW step plus the parameter EMA, in place."""

from __future__ import annotations

import numbers

import numpy as np

from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.dialect.checks import SignatureTypeError
from npugrad.ops.common import as_input, flag, integer, output, real, reject_overlap
from npugrad.runtime.launch import Call, check, two_phase

OP = "apply_fused_ema_adam"
STATES = ("var", "m", "v", "s")
MODE = "0 (L2, Adam) or 1 (decoupled decay, AdamW)"


def _step(step) -> np.ndarray:
    # A plain integer is the common caller's counter; the kernel takes an int64 (1,) tensor.
    if type(step) is int or isinstance(step, numbers.Integral) and not isinstance(step, bool | np.bool_):
        return np.array([integer(OP, "step", step, "an int64 step count")], np.int64)
    return as_input(OP, "step", step)


def _hyperparameters(lr, ema_decay, beta1, beta2, eps, weight_decay) -> dict[str, float]:
    hyper = {"lr": lr, "ema_decay": ema_decay, "beta1": beta1, "beta2": beta2, "eps": eps, "weight_decay": weight_decay}
    # The kernel computes in float32: each must stay finite there.
    return {k: real(OP, k, x, float32=True) for k, x in hyper.items()}


def _made_per_call(step, lr=1e-3, ema_decay=0.9999, beta1=0.9, beta2=0.999, eps=1e-8,
                   weight_decay=0.0) -> dict | None:
    """The operands a call makes of its step count and hyper-parameters, which change from call
    to call without changing the kernel: made again by every replayed call (two_phase's per_call).
    None where a hyper-parameter is out of the op's range (ApplyFusedEmaAdamOp.HYPERPARAMETERS):
    the call is then planned anew, and the op's check rejects it."""
    hyper = _hyperparameters(lr, ema_decay, beta1, beta2, eps, weight_decay)
    if not all(ok(hyper[name]) for name, (_, ok) in ApplyFusedEmaAdamOp.HYPERPARAMETERS.items()):
        return None
    return {"step": _step(step),
            "hyperparameters": np.array([hyper[n] for n in ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER], np.float32)}


@two_phase(replay=True, per_call=_made_per_call)
def apply_fused_ema_adam(grad, var, m, v, s, step, lr=1e-3, ema_decay=0.9999, beta1=0.9, beta2=0.999,
                         eps=1e-8, mode=1, bias_correction=True, weight_decay=0.0):
    """Update var, m, v, s (same shape and dtype as grad) in place and return them as a tuple.

    step is the 1-based step count (an int64 (1,) array or an int), not incremented. The float
    hyper-parameters are passed to the kernel at run time, so changing them never recompiles."""
    hyper = _hyperparameters(lr, ema_decay, beta1, beta2, eps, weight_decay)
    mode = integer(OP, "mode", mode, MODE)
    bias_correction = flag(OP, "bias_correction", bias_correction)
    arrays = {"grad": as_input(OP, "grad", grad), "step": _step(step)}
    for name, given in zip(STATES, (var, m, v, s)):
        if given is None:  # `output` would plan a fresh array; a state must be the caller's array
            raise SignatureTypeError(f"{OP}: parameter '{name}' must be a numpy array, got None")
        arrays[name] = output(OP, name, given, None, None)
    check(ApplyFusedEmaAdamOp, arrays, {"mode": mode, "bias_correction": bias_correction, **hyper})
    # Each state is read and written element by element: it may not share memory with another.
    reject_overlap(OP, arrays, STATES, skip=() if arrays["step"] is step else ("step",))
    arrays["hyperparameters"] = np.array([hyper[n] for n in ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER], np.float32)

    def check_step(a) -> None:
        k = a["step"].item(0)  # its one element (the rules checked that), as a Python int
        if bias_correction and k < 1:
            raise ValueError(f"{OP}: parameter 'step' must be >= 1 when bias_correction is on, got {k}")

    # Only mode and bias_correction shape the code; the float properties keep their defaults in the cache key.
    return Call(ApplyFusedEmaAdamOp, arrays, {"mode": mode, "bias_correction": bias_correction},
                (arrays["var"], arrays["m"], arrays["v"], arrays["s"]), check_step)
