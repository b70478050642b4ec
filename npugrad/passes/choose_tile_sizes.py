"""choose-tile-sizes{target=...}: the one place tile sizes are decided. For every train op, ask its
recipe for sizes whose tiles (double-buffered where the target says so) fit the memory levels the
target assigns to them, and write them on the op:

    train.binary_cross_entropy_grad ...                          (target npu-a2: UB of 192 KiB)
becomes
    train.binary_cross_entropy_grad ... {tile_sizes = #train.tiles<n = 4096>}

Sizes written by hand are kept. The passes that tile read only the attribute; the footprint of
what they allocate is proven to fit by check-capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import TileSizesAttr
from npugrad.recipes import recipe_of
from npugrad.targets import Target, get


@dataclass(frozen=True)
class ChooseTiles(RewritePattern):
    target: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TrainOp, rewriter: PatternRewriter) -> None:
        given = op.tiles() or {}
        if set(op.TILE_DIMS) <= set(given):
            return
        chosen = recipe_of(op).choose_tile_sizes(op, self.target)
        op.tile_sizes = TileSizesAttr({**chosen, **given})
        rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class ChooseTileSizesPass(ModulePass):
    name = "choose-tile-sizes"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ChooseTiles(get(self.target)), apply_recursively=False).rewrite_module(op)
