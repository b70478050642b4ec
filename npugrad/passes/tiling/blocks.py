"""Pieces the tilings and splits over cores share: their tile sizes, tile counts, the block range
tiles are dealt over, and the record of the sizes in the IR."""

from __future__ import annotations

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.dialects.linalg import FillOp
from xdsl.ir import Operation, SSAValue

from npugrad.diagnostics import PassFailure
from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import CONTRACTION, ROLE, TILES, Contraction, NestRole, NestRoleAttr, TileSizesAttr
from npugrad.dialect.npu import BlockDimOp, BlockIdxOp
from npugrad.ir import IRBuilder
from npugrad.lowering.fills import widen_into

MIN_ELEMENTS = 1 << 16  # per block, for the memory-bound ops: below this a thread costs more than it saves
LINE = 64  # elements per block range are a multiple of this: no cache line is shared by two blocks


def nest_role(op) -> NestRole | None:
    """The #train.role a fused nest marks `op` with, if any."""
    attr = ROLE.get(op)
    return attr.data if attr is not None else None


def contraction_of(op) -> Contraction | None:
    """Which of a fused nest's contractions `op` is (#train.contraction), if any."""
    attr = CONTRACTION.get(op)
    return attr.contraction if attr is not None else None


def mixed_sizes(view: memref.SubviewOp) -> list:
    """A subview's sizes: an int where static, the operand where dynamic."""
    dynamic = iter(view.sizes)
    return [next(dynamic) if d == DYNAMIC_INDEX else d for d in view.static_sizes.get_values()]


def tile_sizes(op: TrainOp, dims: dict[str, int | None]) -> dict[str, int]:
    """The op's tile sizes for `dims` (name → static extent or None), each at most its extent:
    a tile never needs more local memory than the whole operand (choose-tile-sizes clamps the
    same way, so its footprint model is what is allocated)."""
    given = op.tiles() or {}
    if missing := [d for d in dims if d not in given]:
        raise PassFailure(op, f"no tile size for {', '.join(missing)} (run choose-tile-sizes first, or set tile_sizes)")
    return {d: given[d] if extent is None else max(1, min(given[d], extent)) for d, extent in dims.items()}


def tile_count(e: IRBuilder, ref: SSAValue, axis: int, tile: int) -> SSAValue:
    """How many tiles of `tile` cover dimension `axis` of `ref` (the last one partial)."""
    extent = ref.type.get_shape()[axis]  # type: ignore[attr-defined]
    if extent >= 0:
        return e.idx(-(-extent // tile))
    return e.emit(arith.CeilDivUIOp(e.dim(ref, axis), e.idx(tile)))


def block_range(e: IRBuilder) -> tuple[SSAValue, SSAValue]:
    """(npu.block_idx, npu.block_dim): tile t of a loop dealt round-robin goes to block t mod nblk."""
    bid, nblk = e.emit(BlockIdxOp()), e.emit(BlockDimOp())
    bid.name_hint, nblk.name_hint = "bid", "nblk"
    return bid, nblk


def block_share(e: IRBuilder, bid: SSAValue, nblk: SSAValue, n: SSAValue, min_units: SSAValue,
                line: int) -> tuple[SSAValue, SSAValue]:
    """(first, count) of this block's contiguous range of [0, n): as many blocks as have
    `min_units` each, counts a multiple of `line`; `first < n` says whether the block has any."""
    wanted = e.emit(arith.MaxUIOp(e.idx(1), e.emit(arith.CeilDivUIOp(n, min_units))))
    active = e.emit(arith.MinSIOp(nblk, wanted))
    per_block = e.emit(arith.CeilDivUIOp(n, active))
    if line > 1:
        lines = e.emit(arith.CeilDivUIOp(per_block, e.idx(line)))
        per_block = e.emit(arith.MuliOp(lines, e.idx(line)))
    return e.emit(arith.MuliOp(bid, per_block)), per_block


def record_tile_sizes(e: IRBuilder, tile: SSAValue, sizes: dict[str, int]) -> None:
    """Put the sizes used on the loop over tiles (whose variable is `tile`): the tiled IR then
    says what it was tiled for, once the op that carried them is gone."""
    tile.name_hint = "tile"
    loop = tile.owner.parent_op()  # type: ignore[union-attr]
    assert loop is not None
    TILES.set(loop, TileSizesAttr(sizes))


def started(init) -> tuple:
    """(the accumulator a nest's INIT op starts, the output it widens into it; None: it zeroes)."""
    if isinstance(init, FillOp):
        return init.outputs[0], None
    load = next(o for o in init.walk() if isinstance(o, memref.LoadOp))
    store = next(o for o in init.walk() if isinstance(o, memref.StoreOp))
    return store.memref, load.memref


def start_accumulator(e: IRBuilder, acc: SSAValue, out: SSAValue | None, accumulate: bool,
                      role: NestRole) -> Operation | None:
    """The float32 accumulator's first value: 0 (a linalg.fill), or, with `accumulate`, what the
    output `out` holds, widened (a loop nest; None: acc is the float32 output itself, which then
    needs nothing). Returns the op, marked with `role` (None when there is none)."""
    if not accumulate:
        op = e.fill(0.0, acc)
    elif out is None:
        return None
    else:
        op = widen_into(e, out, acc)
    ROLE.set(op, NestRoleAttr(role))
    return op
