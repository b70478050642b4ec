"""npugrad in PyTorch: importing this module registers every kernel as a PyTorch operator
(`torch.ops.npugrad.<op>`, kernels.py, made from the ops' recipes), losses and layers whose
backward is a kernel, with their autograd formulas (functional.py), and an optimizer whose step
is the EMA-Adam kernel (optim.py). PyTorch is an optional dependency: `pip install npugrad[torch]`.

    import npugrad.torch as nt
    h = nt.embedding(tokens, emb)                              # backward: embedding_dense_backward
    loss = nt.linear_cross_entropy(h.bfloat16(), head.bfloat16(), targets)   # backward: FLCE grad
    loss.backward()
    nt.FusedEmaAdam([emb, head], lr=1e-3).step()              # apply_fused_ema_adam

The plain API functions (`npugrad.ops.*`) take and return tensors too, without a copy.
"""

from npugrad.torch.functional import binary_cross_entropy, embedding, linear_cross_entropy, nll_loss
from npugrad.torch.kernels import KERNELS
from npugrad.torch.optim import FusedEmaAdam

__all__ = ["KERNELS", "FusedEmaAdam", "binary_cross_entropy", "embedding", "linear_cross_entropy", "nll_loss"]
