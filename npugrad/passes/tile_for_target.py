"""tile-for-target{target=...}: tile every op for the target's memory hierarchy, reading only
each op's `tile_sizes` (see choose-tile-sizes): tiles live in `npu.alloc_local` buffers of the
levels the target assigns to them, move with `npu.copy`, and the outer tile loop is spread over
the cores by block index (`for tile = block_idx to tiles step block_dim`).

The per-op transformations are in passes/tiling/.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from npugrad.dialect import GradOp
from npugrad.passes.fuse_linear_cross_entropy_grad import TILE_ATTR
from npugrad.passes.tiling import TILINGS
from npugrad.passes.tiling.flce import tile_fused_flce
from npugrad.targets import Target, get


@dataclass(frozen=True)
class TileForTargetPass(ModulePass):
    name = "tile-for-target"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target: Target = get(self.target)
        for g in [o for o in op.walk() if isinstance(o, GradOp)]:
            tile: Callable | None = TILINGS.get(type(g))
            if tile is not None:
                tile(g, target)
        # The linear cross-entropy gradient is already a fused loop nest by now.
        for nest in [o for o in op.walk() if isinstance(o, scf.ForOp) and TILE_ATTR in o.attributes]:
            tile_fused_flce(nest, target)
