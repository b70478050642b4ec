"""grad.apply_fused_ema_adam → loops (work in progress)."""


def lower_apply_fused_ema_adam(op, e) -> None:
    raise NotImplementedError("grad.apply_fused_ema_adam has no lowering yet")
