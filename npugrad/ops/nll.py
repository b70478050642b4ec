"""nll_loss_backward (work in progress)."""


def nll_loss_backward(*args, **kwargs):
    raise NotImplementedError("nll_loss_backward is not lowered yet")
