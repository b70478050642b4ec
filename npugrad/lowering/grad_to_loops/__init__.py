"""convert-grad-to-loops: every `grad` op becomes `scf.for` nests over `memref` loads and stores,
with `arith`/`math` bodies computing in float32 and rounding once to the output type.

    grad.binary_cross_entropy_grad input_x(%x : memref<?xf32>) ... -> dx(%dx : memref<?xf32>)
becomes
    scf.for %i = %c0 to %n step %c1 {
      %x = memref.load %x[%i] ... %dx = arith.divf ... memref.store %dx, %out[%i]
    }
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from npugrad.dialect import (
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedLinearCrossEntropyLossGradOp,
    GradOp,
    NLLLossBackwardOp,
)
from npugrad.lowering.emit import Emitter
from npugrad.lowering.grad_to_loops.bce import lower_binary_cross_entropy_grad
from npugrad.lowering.grad_to_loops.ema_adam import lower_apply_fused_ema_adam
from npugrad.lowering.grad_to_loops.embedding import lower_embedding_dense_backward
from npugrad.lowering.grad_to_loops.flce import lower_fused_linear_cross_entropy_loss_grad
from npugrad.lowering.grad_to_loops.nll import lower_nll_loss_backward

LOWERINGS: dict[type[GradOp], Callable[..., None]] = {
    FusedLinearCrossEntropyLossGradOp: lower_fused_linear_cross_entropy_loss_grad,
    EmbeddingDenseBackwardOp: lower_embedding_dense_backward,
    NLLLossBackwardOp: lower_nll_loss_backward,
    ApplyFusedEmaAdamOp: lower_apply_fused_ema_adam,
    BinaryCrossEntropyGradOp: lower_binary_cross_entropy_grad,
}


class LowerGradOp(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: GradOp, rewriter: PatternRewriter) -> None:
        lower = LOWERINGS.get(type(op))
        if lower is None:
            return
        lower(op, Emitter.before(op))
        rewriter.erase(op)


@dataclass(frozen=True)
class ConvertGradToLoopsPass(ModulePass):
    name = "convert-grad-to-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerGradOp(), apply_recursively=False).rewrite_module(op)
