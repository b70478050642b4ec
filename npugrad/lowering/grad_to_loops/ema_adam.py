"""grad.apply_fused_ema_adam → per-call scalars, then one loop nest updating var, m, v, s in place.

    grad.apply_fused_ema_adam grad(%g : memref<?xbf16>) step(%k : memref<1xi64>)
        -> var(%p : ...) m(%m : ...) v(%v : ...) s(%s : ...)
becomes
    %kf = arith.sitofp %k0 : i64 to f32    %c1 = arith.subf %one, (math.powf %beta1, %kf) ...
    scf.for %i = %c0 to %n step %c1 {
      %g = memref.load %g[%i] ... %p1 = arith.subf %p, (%lr * %u) ... memref.store (truncf %p1), %p[%i] ...
    }
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.dialects.builtin import f32
from xdsl.ir import SSAValue

from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.lowering.emit import Emitter


def _hyperparameters(op: ApplyFusedEmaAdamOp, e: Emitter) -> dict[str, SSAValue]:
    """Float32 lr, ema_decay, beta1, beta2, eps, weight_decay: run-time values when the operand is
    present (loaded once, before the loop), else the properties as constants."""
    order = op.HYPERPARAMETER_ORDER
    if op.hyperparameters is None:
        return {name: e.f32(op.prop_float(name)) for name in order}
    return {name: e.load(op.hyperparameters, [e.idx(i)]) for i, name in enumerate(order)}


def lower_apply_fused_ema_adam(op: ApplyFusedEmaAdamOp, e: Emitter) -> None:
    mode = op.prop_int("mode")
    bias_correction = op.prop_bool("bias_correction")
    h = _hyperparameters(op, e)
    lr, decay, beta1, beta2, eps, wd = (h[n] for n in op.HYPERPARAMETER_ORDER)
    one = e.f32(1.0)
    # Per-call scalars, in the reference's float32 operation order (so results agree bit for bit).
    one_minus_beta1 = e.subf(one, beta1)
    one_minus_beta2 = e.subf(one, beta2)
    one_minus_decay = e.subf(one, decay)
    if bias_correction:
        zeros = [e.idx(0)] * op.step.type.get_num_dims()  # type: ignore[attr-defined]
        k = e.add(arith.SIToFPOp(e.load(op.step, zeros), f32))
        c1 = e.subf(one, e.add(math.PowFOp(beta1, k)))
        c2 = e.subf(one, e.add(math.PowFOp(beta2, k)))

    with e.loop_nest(e.dims(op.grad)) as ivs:
        g = e.load_f32(op.grad, ivs)
        p = e.load_f32(op.var, ivs)
        if mode == 0:
            g = e.addf(g, e.mulf(wd, p))
        m = e.addf(e.mulf(beta1, e.load_f32(op.m, ivs)), e.mulf(one_minus_beta1, g))
        v = e.addf(e.mulf(beta2, e.load_f32(op.v, ivs)), e.mulf(e.mulf(one_minus_beta2, g), g))
        # Without bias correction c1 = c2 = 1, and x/1 = x exactly: no division needed.
        m_hat = e.divf(m, c1) if bias_correction else m
        v_hat = e.divf(v, c2) if bias_correction else v
        u = e.divf(m_hat, e.addf(e.sqrt(v_hat), eps))
        if mode == 1:
            u = e.addf(u, e.mulf(wd, p))
        p_new = e.subf(p, e.mulf(lr, u))
        s_new = e.addf(e.mulf(decay, e.load_f32(op.s, ivs)), e.mulf(one_minus_decay, p_new))
        for value, ref in ((p_new, op.var), (m, op.m), (v, op.v), (s_new, op.s)):
            e.store_f32(value, ref, ivs)
