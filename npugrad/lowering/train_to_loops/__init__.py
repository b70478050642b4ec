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
What a contraction or a part of a nest was stays in its location, as a label (a NameLoc, as
IRBuilder.labelled makes: `logits`, `weight_grad_final`): the micro-kernels vectorize-contractions
makes of a contraction are named after it, and line tables carry the names to the machine code.
What a train op lowers to is labelled with its name (`binary_cross_entropy_grad`).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, NameLoc
from xdsl.ir import Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from npugrad.diagnostics import PassFailure
from npugrad.dialect import DISCARDABLE, TrainOp
from npugrad.dialect.attributes import CONTRACTION, ROLE, NestRole
from npugrad.ir import IRBuilder, defined_functions
from npugrad.ir.builder import labelled_location
from npugrad.passes.source_op import record_lowered_source
from npugrad.recipes import recipe_of


class LowerTrainOp(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TrainOp, rewriter: PatternRewriter) -> None:
        # Its loops named after it (line tables), parts within by their own labels.
        recipe_of(op).lower(op, IRBuilder(rewriter, op, label=op.short_name()))
        rewriter.erase(op)


@dataclass(frozen=True)
class ConvertTrainToLoopsPass(ModulePass):
    name = "convert-train-to-loops"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in defined_functions(op):
            record_lowered_source(f)
        PatternRewriteWalker(LowerTrainOp(), apply_recursively=False).rewrite_module(op)
        left = next((o for o in op.walk() if isinstance(o, TrainOp)), None)
        if left is not None:
            raise PassFailure(left, f"'{left.name}' was not lowered to loops")
        grad_level = [d for d in DISCARDABLE.values() if not d.after_lowering]
        for o in op.walk():
            _keep_label(o)
            for d in grad_level:
                d.remove(o)


# Parts of a fused nest named by their #train.role: those that compute something of their own
# (the token loops hold everything, the masks' loop is its own op's code).
_LABELLED_ROLES = {NestRole.INPUT_GRAD_INIT, NestRole.INPUT_GRAD_FINAL, NestRole.WEIGHT_GRAD_INIT,
                   NestRole.WEIGHT_GRAD_FINAL, NestRole.STATISTICS_INIT, NestRole.STATISTICS_FINAL,
                   NestRole.WEIGHT_PACK, NestRole.TARGET_MASKS}


def _keep_label(o: Operation) -> None:
    """A contraction's kind, or a labelled part's role, as the label of its ops' locations
    (every op inside a part not labelled already: an inner part keeps its own)."""
    contraction = CONTRACTION.get(o)
    if contraction is not None:
        o.location = labelled_location(contraction.contraction.value, o.location)
        return
    role = ROLE.get(o)
    if role is not None and role.data in _LABELLED_ROLES:
        for inner in o.walk():
            if not isinstance(inner.location, NameLoc):
                inner.location = labelled_location(role.data.value, inner.location)
