"""Per-op tiling transformations used by tile-for-target. Each module registers
`TILINGS[OpClass] = tile` where `tile(op, target)` rewrites one grad op into a block-distributed
loop over tiles in local buffers (see passes/tile_for_target.py)."""

from __future__ import annotations

# Importing a module registers its tilings.
from npugrad.passes.tiling import elementwise, embedding, flce, nll  # noqa: F401
from npugrad.passes.tiling.registry import TILINGS

__all__ = ["TILINGS"]
