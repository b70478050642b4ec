"""The Python API: one function per op, with the names and parameters of the spec's reference.

Arrays in, arrays out. Outputs are allocated unless passed (`out=`; `input_grad_out=` and
`weight_grad_out=` for the linear cross-entropy gradient); `apply_fused_ema_adam` updates its
arrays in place. Every call checks the spec's rules first and raises ValueError/TypeError naming
the op and the parameter; nothing is written when a call is rejected.
"""

from npugrad.ops.bce import binary_cross_entropy_grad
from npugrad.ops.common import REDUCTION_MEAN, REDUCTION_NONE, REDUCTION_SUM
from npugrad.ops.ema_adam import apply_fused_ema_adam
from npugrad.ops.embedding import embedding_dense_backward
from npugrad.ops.flce import fused_linear_cross_entropy_loss_grad
from npugrad.ops.forward import OnlineMaxSum, fused_cross_entropy_loss_with_max_sum, fused_linear_online_max_sum
from npugrad.ops.loss import LinearCrossEntropy, linear_cross_entropy
from npugrad.ops.nll import nll_loss_backward

__all__ = [
    "REDUCTION_MEAN",
    "REDUCTION_NONE",
    "REDUCTION_SUM",
    "LinearCrossEntropy",
    "OnlineMaxSum",
    "apply_fused_ema_adam",
    "binary_cross_entropy_grad",
    "embedding_dense_backward",
    "fused_cross_entropy_loss_with_max_sum",
    "fused_linear_cross_entropy_loss_grad",
    "fused_linear_online_max_sum",
    "linear_cross_entropy",
    "nll_loss_backward",
]
