"""Dialects defined by npugrad."""

from npugrad.dialect.grad import (
    OPS,
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedLinearCrossEntropyLossGradOp,
    Grad,
    GradOp,
    NLLLossBackwardOp,
)

__all__ = [
    "OPS",
    "ApplyFusedEmaAdamOp",
    "BinaryCrossEntropyGradOp",
    "EmbeddingDenseBackwardOp",
    "FusedLinearCrossEntropyLossGradOp",
    "Grad",
    "GradOp",
    "NLLLossBackwardOp",
]
