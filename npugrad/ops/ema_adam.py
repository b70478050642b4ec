"""apply_fused_ema_adam (work in progress)."""


def apply_fused_ema_adam(*args, **kwargs):
    raise NotImplementedError("apply_fused_ema_adam is not lowered yet")
