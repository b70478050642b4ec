"""Per-op tiling transformations used by tile-for-target: `tile(op, target)` rewrites one grad
op into a block-distributed loop over tiles in local buffers."""

from __future__ import annotations

TILINGS: dict = {}
