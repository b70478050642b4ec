"""Dialects defined by npugrad: `grad` (the operators) and `npu` (memory levels, local buffers,
DMA, blocks), with the attributes passes hand each other (see attributes.py)."""

from npugrad.dialect.attributes import GRAD_DISCARDABLE, Discardable, verify_discardable
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
from npugrad.dialect.npu import NPU_DISCARDABLE, Npu

# Every discardable attribute npugrad's passes use, by name.
DISCARDABLE: dict[str, Discardable] = {d.name: d for d in (*GRAD_DISCARDABLE, *NPU_DISCARDABLE)}
PREFIXES = ("grad.", "npu.")


def verify_attributes(op) -> None:
    """`op`'s grad.* and npu.* attributes are declared and well typed (VerifyException if not)."""
    verify_discardable(op, DISCARDABLE, PREFIXES)


__all__ = [
    "DISCARDABLE",
    "OPS",
    "ApplyFusedEmaAdamOp",
    "BinaryCrossEntropyGradOp",
    "EmbeddingDenseBackwardOp",
    "FusedLinearCrossEntropyLossGradOp",
    "Grad",
    "GradOp",
    "NLLLossBackwardOp",
    "Npu",
    "verify_attributes",
]
