"""convert-train-to-loops: every `train` op becomes `scf.for` nests over `memref` loads and stores,
with `arith`/`math` bodies computing in float32 and rounding once to the output type. Each op is
lowered by its recipe (the lowerings are the modules of this package).

    train.binary_cross_entropy_grad input_x(%x : memref<?xf32>) ... -> dx(%dx : memref<?xf32>)
becomes
    scf.for %i = %c0 to %n step %c1 {
      %x = memref.load %x[%i] ... %dx = arith.divf ... memref.store %dx, %out[%i]
    }

The `train` dialect is illegal after this pass, as in MLIR's dialect conversion: an op left over
is an error at its location, never passed on to fail later in the upstream lowering. So are the
attributes that described train ops and their fused nests (#train.tiles, #train.role, ...): the pass
drops them; the markers later passes and the runtime read (train.distributed, npu.blocks) stay.
"""

from __future__ import annotations

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

from npugrad.diagnostics import PassFailure
from npugrad.dialect import DISCARDABLE, TrainOp
from npugrad.ir import IRBuilder
from npugrad.recipes import recipe_of


class LowerTrainOp(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TrainOp, rewriter: PatternRewriter) -> None:
        recipe_of(op).lower(op, IRBuilder(rewriter, op))
        rewriter.erase(op)


@dataclass(frozen=True)
class ConvertTrainToLoopsPass(ModulePass):
    name = "convert-train-to-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(LowerTrainOp(), apply_recursively=False).rewrite_module(op)
        left = next((o for o in op.walk() if isinstance(o, TrainOp)), None)
        if left is not None:
            raise PassFailure(left, f"'{left.name}' was not lowered to loops")
        grad_level = [d for d in DISCARDABLE.values() if not d.after_lowering]
        for o in op.walk():
            for d in grad_level:
                d.remove(o)
