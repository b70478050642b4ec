"""NumPy references for the five operators, written from the spec (float32 arithmetic).

They validate their inputs like the spec's reference (ValueError/TypeError) and are what every
numerical test and `npugrad demo` compares the compiled kernels with.
"""

from npugrad.reference.ops import (
    apply_fused_ema_adam,
    binary_cross_entropy_grad,
    embedding_dense_backward,
    fused_linear_cross_entropy_loss_grad,
    nll_loss_backward,
    pack_target_mask,
    round_to,
    unpack_target_mask,
)

__all__ = [
    "apply_fused_ema_adam",
    "binary_cross_entropy_grad",
    "embedding_dense_backward",
    "fused_linear_cross_entropy_loss_grad",
    "nll_loss_backward",
    "pack_target_mask",
    "round_to",
    "unpack_target_mask",
]
