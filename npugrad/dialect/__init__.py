"""Dialects defined by npugrad."""

from npugrad.dialect.grad import (
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedLinearCrossEntropyLossGradOp,
    Grad,
    GradOp,
    NLLLossBackwardOp,
    OPS,
)

__all__ = [
    "ApplyFusedEmaAdamOp",
    "BinaryCrossEntropyGradOp",
    "EmbeddingDenseBackwardOp",
    "FusedLinearCrossEntropyLossGradOp",
    "Grad",
    "GradOp",
    "NLLLossBackwardOp",
    "OPS",
]
