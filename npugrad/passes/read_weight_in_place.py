"""read-weight-in-place: GEMM 1 of a fused linear nest (fuse-linear-cross-entropy-grad,
fuse-linear-online-max-sum) reads W's vocabulary tile as it is stored (v × h), where the fuse
pass copied it transposed with scalar loops (#train.role<weight_pack>). A CPU's micro-kernel then
packs its panels from the tile, transposing lanes × lanes blocks in registers
(vectorize-contractions); an NPU tiling transposes it on the way into the matrix level
(npu.copy {transpose}).

    scf.for %j { scf.for %k { %p[k, j] = %w_t[j, k] } } {train.role = #train.role<weight_pack>}
    linalg.generic {maps (t,h,v) -> (t,h), (h,v), (t,v)} ins(%x_t, %p) outs(%z)
becomes
    linalg.generic {maps (t,h,v) -> (t,h), (v,h), (t,v)} ins(%x_t, %w_t) outs(%z)

tile-for-target and distribute-over-cores do this first of all; the pipeline runs the pass by
itself where neither runs (one core, `distribute=False`): there the copy was 12 % of a one-core
forward's samples (Zen 3, 372 × 4096 × 16000 float32), the micro-kernel's transposing pack 5 %.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.dialect.attributes import FUSED
from npugrad.ir import IRBuilder
from npugrad.passes.tiling.flce import read_weight_in_place


class ReadWeightInPlace(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, nest: scf.ForOp, rewriter: PatternRewriter) -> None:
        if FUSED.on(nest):
            read_weight_in_place(nest, IRBuilder(rewriter, nest))


@dataclass(frozen=True)
class ReadWeightInPlacePass(ModulePass):
    name = "read-weight-in-place"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ReadWeightInPlace(), apply_recursively=False).rewrite_module(op)
