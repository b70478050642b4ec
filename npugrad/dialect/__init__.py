"""Dialects defined by npugrad: `train` (the training-time operators) and `npu` (memory levels, local buffers,
DMA, blocks), with the attributes passes hand each other (see attributes.py)."""

from npugrad.dialect.attributes import TRAIN_DISCARDABLE, Discardable, verify_discardable
from npugrad.dialect.npu import NPU_DISCARDABLE, Npu
from npugrad.dialect.train import (
    OPS,
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedCrossEntropyLossWithMaxSumOp,
    FusedLinearCrossEntropyLossGradOp,
    FusedLinearOnlineMaxSumOp,
    NLLLossBackwardOp,
    Train,
    TrainOp,
)

# Every discardable attribute npugrad's passes use, by name.
DISCARDABLE: dict[str, Discardable] = {d.name: d for d in (*TRAIN_DISCARDABLE, *NPU_DISCARDABLE)}
PREFIXES = ("train.", "npu.")


def verify_attributes(op) -> None:
    """`op`'s train.* and npu.* attributes are declared and well typed (VerifyException if not)."""
    verify_discardable(op, DISCARDABLE, PREFIXES)


__all__ = [
    "DISCARDABLE",
    "OPS",
    "ApplyFusedEmaAdamOp",
    "BinaryCrossEntropyGradOp",
    "EmbeddingDenseBackwardOp",
    "FusedCrossEntropyLossWithMaxSumOp",
    "FusedLinearCrossEntropyLossGradOp",
    "FusedLinearOnlineMaxSumOp",
    "NLLLossBackwardOp",
    "Npu",
    "Train",
    "TrainOp",
    "verify_attributes",
]
