"""grad.fused_linear_cross_entropy_loss_grad → loops (work in progress)."""


def lower_fused_linear_cross_entropy_loss_grad(op, e) -> None:
    raise NotImplementedError("grad.fused_linear_cross_entropy_loss_grad has no lowering yet")
