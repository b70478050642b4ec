"""Pieces the tilings of nll_loss_backward and embedding_dense_backward share: their tile sizes,
tile counts, the block range the tiles are dealt over, and the record of the sizes in the IR."""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.ir import SSAValue

from npugrad.diagnostics import PassFailure
from npugrad.dialect import GradOp
from npugrad.dialect.npu import BlockDimOp, BlockIdxOp
from npugrad.lowering.emit import Emitter
from npugrad.passes.choose_tile_sizes import tile_sizes_attr


def tile_sizes(op: GradOp, dims: dict[str, int | None]) -> dict[str, int]:
    """The op's tile sizes for `dims` (name → static extent or None), each at most its extent:
    a tile never needs more local memory than the whole operand (choose-tile-sizes clamps the
    same way, so its footprint model is what is allocated)."""
    given = op.tiles() or {}
    if missing := [d for d in dims if d not in given]:
        raise PassFailure(op, f"no tile size for {', '.join(missing)} (run choose-tile-sizes first, or set tile_sizes)")
    return {d: given[d] if extent is None else max(1, min(given[d], extent)) for d, extent in dims.items()}


def tile_count(e: Emitter, ref: SSAValue, axis: int, tile: int) -> SSAValue:
    """How many tiles of `tile` cover dimension `axis` of `ref` (the last one partial)."""
    extent = ref.type.get_shape()[axis]  # type: ignore[attr-defined]
    if extent >= 0:
        return e.idx(-(-extent // tile))
    return e.add(arith.CeilDivUIOp(e.dim(ref, axis), e.idx(tile)))


def block_range(e: Emitter) -> tuple[SSAValue, SSAValue]:
    """(npu.block_idx, npu.block_dim): tile t of a loop dealt round-robin goes to block t mod nblk."""
    bid, nblk = e.add(BlockIdxOp()), e.add(BlockDimOp())
    bid.name_hint, nblk.name_hint = "bid", "nblk"
    return bid, nblk


def record_tile_sizes(tile: SSAValue, sizes: dict[str, int]) -> None:
    """Put the sizes used on the loop over tiles (whose variable is `tile`): the tiled IR then
    says what it was tiled for, once the op that carried them is gone."""
    tile.name_hint = "tile"
    loop = tile.owner.parent_op()  # type: ignore[union-attr]
    assert loop is not None
    loop.attributes["tile_sizes"] = tile_sizes_attr(sizes)
