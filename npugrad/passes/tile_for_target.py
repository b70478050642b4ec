"""tile-for-target{target=...}: tile every op for the target's memory hierarchy, reading only
each op's `tile_sizes` (see choose-tile-sizes): tiles live in `npu.alloc_local` buffers of the
levels the target assigns to them, move with `npu.copy`, and the outer tile loop is spread over
the cores by block index (`for tile = block_idx to tiles step block_dim`).

Each op is tiled by its recipe (the transformations are in passes/tiling/); a loop nest that a
fusion pass made (marked `train.fused`) by the recipe of the op it computes. An op whose recipe
declares it cannot be tiled is left as it is, on global memory (the report says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    op_type_rewrite_pattern,
)

from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import FUSED
from npugrad.dialect.npu import level_of, spread_over_blocks
from npugrad.ir import IRBuilder, enclosing_function
from npugrad.passes.source_op import record_source
from npugrad.recipes import recipe_of
from npugrad.targets import Target, get


@dataclass(frozen=True)
class TileOp(RewritePattern):
    target: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TrainOp, rewriter: PatternRewriter) -> None:
        recipe = recipe_of(op)
        # A tile instance (an op on local buffers, as a tiling emits it) is a tile already.
        if recipe.supports("tile") and all(level_of(v.type) is None for v in op.operands):
            record_source(op, rewriter)
            recipe.tile(op, self.target, IRBuilder(rewriter, op, label=op.short_name()))  # its loops named (line tables)


@dataclass(frozen=True)
class TileFusedNest(RewritePattern):
    target: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: scf.ForOp, rewriter: PatternRewriter) -> None:
        fused = FUSED.get(op)
        # A nest that works on local buffers is tiled already (a `tiled` stage read back in), one
        # spread over blocks (distribute-over-cores' wavefront) is no longer the fuse pass's nest.
        if fused is not None and not any(level_of(v.type) is not None for o in op.walk() for v in o.operands) \
                and not spread_over_blocks(enclosing_function(op)):
            nest = recipe_of(fused.op.data).fused
            assert nest is not None, f"{fused.op.data} has no fused nest"
            nest.tile(op, self.target, IRBuilder(rewriter, op))


@dataclass(frozen=True)
class TileForTargetPass(ModulePass):
    name = "tile-for-target"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target: Target = get(self.target)
        patterns = GreedyRewritePatternApplier([TileOp(target), TileFusedNest(target)])
        PatternRewriteWalker(patterns, apply_recursively=False).rewrite_module(op)
