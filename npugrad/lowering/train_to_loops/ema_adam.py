"""train.apply_fused_ema_adam → per-call scalars, then one loop nest updating var, m, v, s in place.

    train.apply_fused_ema_adam grad(%g : memref<?xbf16>) step(%k : memref<1xi64>)
        -> var(%p : ...) m(%m : ...) v(%v : ...) s(%s : ...)
becomes
    %kf = arith.sitofp %k0 : i64 to f32    %c1 = arith.subf %one, (math.powf %beta1, %kf) ...
    scf.for %i = %c0 to %n step %c1 {
      %g = memref.load %g[%i] ... %p1 = arith.subf %p, (%lr * %u) ... memref.store (truncf %p1), %p[%i] ...
    }
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import f32

from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.ir import IRBuilder
from npugrad.ir.expr import Float


def _hyperparameters(op: ApplyFusedEmaAdamOp, e: IRBuilder) -> dict[str, Float]:
    """Float32 lr, ema_decay, beta1, beta2, eps, weight_decay: run-time values when the operand is
    present (loaded once, before the loop), else the properties as constants."""
    order = op.HYPERPARAMETER_ORDER
    if op.hyperparameters is None:
        return {name: Float(e, e.f32(op.prop_float(name))) for name in order}
    return {name: Float(e, e.load(op.hyperparameters, [e.idx(i)])) for i, name in enumerate(order)}


def lower_apply_fused_ema_adam(op: ApplyFusedEmaAdamOp, e: IRBuilder) -> None:
    mode = op.prop_int("mode")
    bias_correction = op.prop_bool("bias_correction")
    h = _hyperparameters(op, e)
    lr, decay, beta1, beta2, eps, wd = (h[n] for n in op.HYPERPARAMETER_ORDER)
    # Per-call scalars, in the reference's float32 operation order (so results agree bit for bit).
    one_minus_beta1 = 1.0 - beta1
    one_minus_beta2 = 1.0 - beta2
    one_minus_decay = 1.0 - decay
    if bias_correction:
        zeros = [e.idx(0)] * op.step.type.get_num_dims()  # type: ignore[attr-defined]
        k = e.emit(arith.SIToFPOp(e.load(op.step, zeros), f32))
        c1 = 1.0 - beta1.pow(k)
        c2 = 1.0 - beta2.pow(k)

    with e.loop_nest(e.dims(op.grad)) as ivs:
        g = Float(e, e.load_f32(op.grad, ivs))
        p = Float(e, e.load_f32(op.var, ivs))
        if mode == 0:
            g = g + wd * p
        m = beta1 * Float(e, e.load_f32(op.m, ivs)) + one_minus_beta1 * g
        v = beta2 * Float(e, e.load_f32(op.v, ivs)) + one_minus_beta2 * g * g
        # Without bias correction c1 = c2 = 1, and x/1 = x exactly: no division needed.
        m_hat = m / c1 if bias_correction else m
        v_hat = v / c2 if bias_correction else v
        u = m_hat / (v_hat.sqrt() + eps)
        if mode == 1:
            u = u + wd * p
        p_new = p - lr * u
        s_new = decay * Float(e, e.load_f32(op.s, ivs)) + one_minus_decay * p_new
        for value, ref in ((p_new, op.var), (m, op.m), (v, op.v), (s_new, op.s)):
            e.store_f32(value.value, ref, ivs)
