"""Pieces the tilings and splits over cores share: their tile sizes, tile counts, the block range
tiles are dealt over, the record of the sizes in the IR, and the linear nests' token loop
(TokenLoop)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX
from xdsl.dialects.linalg.ops import FillOp
from xdsl.ir import Block, Operation, SSAValue

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


def mixed_offsets(view: memref.SubviewOp) -> list:
    """A subview's offsets: an int where static, the operand where dynamic."""
    dynamic = iter(view.offsets)
    return [next(dynamic) if d == DYNAMIC_INDEX else d for d in view.static_offsets.get_values()]


def body_closure(roots: list[Operation], body: Block) -> set[Operation]:
    """The roots and every op of `body` whose results they use, through the ops nested in them
    too: what a copy of `body` must keep for the roots to compute the same values."""
    keep: set[Operation] = set()
    pending = list(roots)
    while pending:
        op = pending.pop()
        if op in keep:
            continue
        keep.add(op)
        for inner in op.walk():
            pending += [v.owner for v in inner.operands if isinstance(v.owner, Operation) and v.owner.parent_block() is body]
    return keep


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


@contextmanager
def block_part(e: IRBuilder, bid: SSAValue, nblk: SSAValue, n: SSAValue, min_units: SSAValue,
               line: int = 1) -> Iterator[tuple[SSAValue, SSAValue]]:
    """Inside `scf.if first < n`: (first, size) of this block's range of [0, n) (block_share),
    its size cut at n, for the code that works on that range."""
    first, chunk = block_share(e, bid, nblk, n, min_units, line)
    with e.if_(e.emit(arith.CmpiOp(first, n, "ult"))):
        yield first, e.emit(arith.MinSIOp(chunk, e.emit(arith.SubiOp(n, first))))


def rows_for_min_elements(e: IRBuilder, row_elements: SSAValue) -> SSAValue:
    """The rows of `row_elements` each (0 counts as 1) that hold MIN_ELEMENTS: a block's least
    share of a row-split op."""
    return e.emit(arith.CeilDivUIOp(e.idx(MIN_ELEMENTS), e.emit(arith.MaxUIOp(row_elements, e.idx(1)))))


class TokenLoop:
    """A fused nest's loop over token tiles (#train.role<token_loop>), in either form the fuse
    passes build it (linear_nests.TokenTiles): over rows, `for t0 = 0 to BT step tb` (tile t the
    rows [t·tb, min((t + 1)·tb, BT))), or over tile indices, `for i = 0 to count`, the first row
    of tile i computed in the body from i (and values from outside the loop) by the op marked
    #train.role<token_start>, `arith.minsi %row, %BT`. A pass splitting the loop over blocks asks
    for the first row of any tile index (start) and gives the loop a range of tiles (take)."""

    def __init__(self, loop: scf.ForOp):
        self.loop = loop
        body = loop.body.block
        self.marked = next((o for o in body.ops if nest_role(o) is NestRole.TOKEN_START), None)
        if self.marked is not None and not isinstance(self.marked, arith.MinSIOp):
            raise PassFailure(self.marked, f"#train.role<token_start> marks the first row of a token tile, "
                                           f"'arith.minsi %row, %BT', not '{self.marked.name}'")
        self.index = body.args[0]
        self.first_row: SSAValue = self.index if self.marked is None else self.marked.result
        # Over rows: the op giving the rows left from the tile's first, BT − t0 (min'd with the step).
        self.rows_left = None if self.marked is not None else next(
            (o for o in body.ops if isinstance(o, arith.SubiOp) and o.lhs is loop.ub and o.rhs is self.index), None)
        if self.marked is None and self.rows_left is None:
            # A loop over tile indices that lost its mark (a pass that drops discardable
            # attributes) must not be read as a loop over rows.
            raise PassFailure(loop, "the token loop is neither over rows (its tile min(step, BT - t0)) nor marks "
                                    "the first row of its tile (#train.role<token_start>)")

    @property
    def rows(self) -> SSAValue:
        """BT."""
        return self.loop.ub if self.marked is None else self.marked.rhs

    def count(self, e: IRBuilder) -> SSAValue:
        """How many token tiles."""
        return e.emit(arith.CeilDivUIOp(self.loop.ub, self.loop.step)) if self.marked is None else self.loop.ub

    def start(self, e: IRBuilder, tile: SSAValue) -> SSAValue:
        """The first row of token tile `tile` (BT for tile `count`): the body's computation of
        its own first row, cloned with `tile` for the loop's index."""
        if self.marked is None:
            return e.emit(arith.MinSIOp(e.emit(arith.MuliOp(tile, self.loop.step)), self.loop.ub))
        body = self.loop.body.block
        needed = body_closure([self.marked], body)
        mapping: dict[SSAValue, SSAValue] = {self.index: tile}
        for op in [o for o in body.ops if o in needed]:
            clone = op.clone(value_mapper=mapping)
            ROLE.remove(clone)  # the marked op is the body's own first row
            e.emit(clone)
        return mapping[self.marked.result]

    def tile_rows(self, e: IRBuilder, tile: SSAValue, first: SSAValue) -> SSAValue:
        """How many rows token tile `tile`, whose first row is `first`, has."""
        if self.marked is None:
            return e.emit(arith.MinSIOp(self.loop.step, e.emit(arith.SubiOp(self.loop.ub, first))))
        return e.emit(arith.SubiOp(self.start(e, e.emit(arith.AddiOp(tile, e.idx(1)))), first))

    def local(self, e: IRBuilder, first_tile: SSAValue, first_row: SSAValue) -> SSAValue:
        """In the body: the tile's position among the tiles the loop runs from `first_tile`
        (whose first row is `first_row`) on: 0 for the first it runs."""
        if self.marked is None:
            return e.emit(arith.DivUIOp(e.emit(arith.SubiOp(self.index, first_row)), self.loop.step))
        return e.emit(arith.SubiOp(self.index, first_tile))

    def take(self, e: IRBuilder, tiles: tuple[SSAValue, SSAValue], rows: tuple[SSAValue, SSAValue]) -> None:
        """Make the loop run over token tiles [first, end) = `tiles` only, whose rows are `rows`
        ([start(first), start(end)))."""
        bounds = rows if self.marked is None else tiles
        self.loop.operands = [*bounds, self.loop.step, *self.loop.iter_args]
        e.modified(self.loop)


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


def given_or(dim: str, given: Mapping[str, int], candidates: tuple[int, ...]) -> tuple[int, ...]:
    """A tile-size search's candidates for `dim`: the one size `given` has for it, else `candidates`."""
    return (given[dim],) if dim in given else candidates
