"""grad.nll_loss_backward → loops (work in progress)."""


def lower_nll_loss_backward(op, e) -> None:
    raise NotImplementedError("grad.nll_loss_backward has no lowering yet")
