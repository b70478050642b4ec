"""The forward nests of the linear cross-entropy over cores and in local memory, and the tile sizes
they take: the nest fuse-linear-online-max-sum made (marked `train.fused`), and the loss op.

Over cores, the forward nest is split by token rows: block b takes the contiguous rows
[b·BT/P, (b+1)·BT/P) (rounded down), in token tiles of the nest's step from its first row, of
every vocabulary tile (each packs the W tile it reads itself), and the running statistics of its
rows are its own; the mask is written by contiguous ranges of bytes. No row's statistics are
touched by two blocks, and every one sums its vocabulary tiles in the same order (a row's logits
do not depend on the token tile it is in): results are bit-identical for any number of blocks,
with the FLOPs of one block. The rows are even to one row whatever the step: token tiles dealt
to the blocks (b, b + P, ...) gave the block with the last, short tile fewer rows (BT = 4096,
steps of 174: 2088 and 2008 rows, 4 % apart; the time is the busier block's).

    scf.for %t0 = 0 to BT step tb { ... min(tb, BT − t0) rows ... }  {train.role = #train.role<token_loop>}
    scf.for %t { m[t] = -inf ... }                  {train.role = #train.role<statistics_init>}
become
    %rows_lo = bid·BT / nblk ; %rows_hi = (bid + 1)·BT / nblk
    scf.for %t0 = %rows_lo to %rows_hi step tb { ... min(tb, %rows_hi − t0) rows ... }
    scf.for %t = %rows_lo to %rows_hi { m[t] = -inf ... }
"""

from __future__ import annotations

import functools

from xdsl.dialects import arith, memref, scf
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import InsertPoint

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer
from npugrad.diagnostics import PassFailure
from npugrad.dialect import FusedCrossEntropyLossWithMaxSumOp
from npugrad.dialect.attributes import CONTRACTION, FUSED, ROLE, NestRole
from npugrad.dialect.npu import PROMOTE, BlockDimOp, BlockIdxOp, element_bytes
from npugrad.ir import IRBuilder, enclosing_function, index
from npugrad.passes.tiling.blocks import TokenLoop, block_part, block_share, nest_role
from npugrad.passes.tiling.contraction import staged, tile_contraction
from npugrad.passes.tiling.elementwise import tile_op
from npugrad.passes.tiling.flce import (
    complete_tiles,
    gemm_shape,
    largest_fitting_tiles,
    logit_tiles,
    promote,
    read_weight_in_place,
    spread,
    spread_totals,
)
from npugrad.passes.vectorize_contractions import panel_level
from npugrad.targets import Target


def footprint_bytes(bt: int, v: int, h: int, b: int, stage: bool) -> dict[str, int]:
    """Bytes per role of the tiled forward nest: GEMM 1's accumulator (float32) and operand tiles
    (and their staging tiles where `stage`), and the vector-level logit tile."""
    return {"accumulator": bt * v * 4, "matrix_a": bt * h * b, "matrix_b": h * v * b, "vector": bt * v * 4,
            **({"stage": (bt * h + v * h) * b} if stage else {})}


def footprint(op, sizes: dict[str, int], target: Target) -> list[TileBuffer]:
    b = gemm_shape(op).b
    return [TileBuffer(role, n, target.double_buffer)
            for role, n in footprint_bytes(sizes["bt"], sizes["v"], sizes["h"], b, staged(target, "matrix_b")).items()]


def load(op, sizes: dict[str, int], target: Target) -> list[Load]:
    """The busiest core: its token tiles of every vocabulary tile (logit_tiles)."""
    shape = gemm_shape(op)
    BT, V, H = shape.bt, shape.v, shape.h
    bt, v, h = (min(sizes[d], n) for d, n in zip(("bt", "v", "h"), (BT, V, H)))
    nt, nv = -(-BT // bt), -(-V // v)
    tb = -(-nt // target.cores)
    one = Load()
    logit_tiles(one, tb * nv, (bt, v, h), op, target)
    spread_totals(one, nt / tb, 0, target)
    one.extents = {"bt": BT, "v": V, "h": H}
    return [one]


def choose_tile_sizes(op, target: Target) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) whose tiles fit every level at once; bt a
    multiple of 8, so that token tiles own whole bytes of the bit-packed mask."""
    return largest_fitting_tiles(footprint_bytes, element_bytes(op.input.type.element_type), target)


def own_tile_rows(loop: scf.ForOp, e: IRBuilder, bid: SSAValue, nblk: SSAValue, tb: SSAValue) -> None:
    """`for t in [0, n)` → the same body for the rows of this block's token tiles (of `tb` rows,
    the token loop's step, dealt round-robin) only."""
    e = e.at(loop)
    n = loop.ub
    body = Block(arg_types=[index])
    outer = scf.ForOp(e.emit(arith.MuliOp(bid, tb)), n, e.emit(arith.MuliOp(nblk, tb)), [], body)
    e.emit(outer)
    end = scf.YieldOp()
    e.rewriter.insert(end, InsertPoint.at_end(body))
    inside = e.at(end)
    t0 = body.args[0]
    count = inside.emit(arith.MinSIOp(tb, inside.emit(arith.SubiOp(n, t0))))
    loop.detach()
    e.rewriter.insert(loop, InsertPoint.before(end))
    iv = loop.body.block.args[0]
    row = arith.AddiOp(t0, iv)
    e.rewriter.insert(row, InsertPoint.before(loop.body.block.first_op))  # type: ignore[arg-type]
    iv.replace_uses_with_if(row.result, lambda use: use.operation is not row)
    loop.operands = [loop.lb, count, loop.step, *loop.iter_args]
    ROLE.set(outer, ROLE.get(loop))  # type: ignore[arg-type]
    ROLE.remove(loop)


def own_rows(loop: scf.ForOp, lo: SSAValue, hi: SSAValue, e: IRBuilder) -> None:
    """`for t in [0, n)` → the same loop over this block's rows [lo, hi) only."""
    loop.operands = [lo, hi, loop.step, *loop.iter_args]
    e.modified(loop)


def _own_token_rows(tokens: scf.ForOp, lo: SSAValue, hi: SSAValue, e: IRBuilder) -> None:
    """The token loop `for t0 = 0 to BT step tb` (each tile min(tb, BT − t0) rows) → over this
    block's rows [lo, hi), each tile min(tb, hi − t0) rows."""
    token_loop = TokenLoop(tokens)
    rows = token_loop.rows_left
    if rows is None:
        raise PassFailure(tokens, "the forward's token loop runs over rows (its tile min(step, BT - t0))")
    rows.operands = [hi, token_loop.first_row]
    e.modified(rows)
    tokens.operands = [lo, hi, tokens.step, *tokens.iter_args]
    e.modified(tokens)


def _split_masks(loop: scf.ForOp, e: IRBuilder, bid: SSAValue, nblk: SSAValue) -> None:
    """The loop over mask bytes → this block's contiguous range of bytes."""
    e = e.at(loop)
    n = loop.ub
    first, count = block_share(e, bid, nblk, n, e.idx(1), 1)
    last = e.emit(arith.MinUIOp(n, e.emit(arith.AddiOp(first, count))))
    loop.operands = [first, e.emit(arith.MaxUIOp(first, last)), loop.step, *loop.iter_args]
    e.modified(loop)


def row_alignment(cpu: Target) -> int:
    """The rows the forward's blocks start at a multiple of on `cpu` (distribute_fused's
    `align`): AMX's 32-row blocks where its bfloat16 GEMMs run on tiles, else 1 (even rows)."""
    from npugrad.passes.vectorize_contractions import AMX_BLOCK, amx_bf16

    return AMX_BLOCK if amx_bf16(cpu) else 1


def distribute_fused(nest: scf.ForOp, e: IRBuilder, by_rows: bool = True, align: int = 1) -> None:
    """Token rows over blocks (module docstring); GEMM 1 reads the W tile in place, as in the
    gradient's nest (flce.distribute_fused_flce). `by_rows=False` (a target whose matrix unit
    wants whole tiles, as its cost model assumed): whole token tiles dealt round-robin, tile t to
    block t mod nblk, instead. `align` > 1: every block but the last starts and ends at a
    multiple of it (row_alignment: a CPU whose GEMMs run whole 32-row blocks on AMX tiles and
    the rows after them on vectors, which sum in another order: a row must take the same path
    on any number of blocks for the results to stay bit-identical)."""
    read_weight_in_place(nest, e)
    fused = FUSED.get(nest)
    assert fused is not None
    tokens = next(o for o in nest.walk() if nest_role(o) is NestRole.TOKEN_LOOP)
    assert isinstance(tokens, scf.ForOp)
    top = nest.parent
    at = e.at(nest)
    bid, nblk = at.emit(BlockIdxOp()), at.emit(BlockDimOp())
    # The block ops must come before every part they restrict: move them to the top.
    first = top.first_op
    for op in (bid.owner, nblk.owner):
        op.detach()
        e.rewriter.insert(op, InsertPoint.before(first))
    bt, tb = tokens.ub, tokens.step  # both before the nest and the statistics' loops (fuse-linear-online-max-sum)
    if by_rows:
        assert isinstance(bt.owner, Operation)
        start = e.at(bt.owner.next_op)  # type: ignore[arg-type]
        def boundary(b: SSAValue, last: bool) -> SSAValue:
            row = start.emit(arith.DivUIOp(start.emit(arith.MuliOp(b, bt)), nblk))
            if align == 1:
                return row
            row = start.emit(arith.MuliOp(start.emit(arith.DivUIOp(row, start.idx(align))), start.idx(align)))
            # The last block ends at BT, whatever BT is a multiple of.
            return start.emit(arith.SelectOp(start.emit(arith.CmpiOp(b, nblk, "eq")), bt, row)) if last else row

        lo, hi = boundary(bid, False), boundary(start.emit(arith.AddiOp(bid, start.idx(1))), True)
        lo.name_hint, hi.name_hint = "rows_lo", "rows_hi"
        _own_token_rows(tokens, lo, hi, e)
    else:
        spread(tokens, bid, nblk, e)
    for op in list(top.ops):
        role = nest_role(op)
        if role is NestRole.TARGET_MASKS:
            _split_masks(op, e, bid, nblk)  # type: ignore[arg-type]
        elif role in (NestRole.STATISTICS_INIT, NestRole.STATISTICS_FINAL):
            if by_rows:
                own_rows(op, lo, hi, e)  # type: ignore[arg-type]
            else:
                own_tile_rows(op, e, bid, nblk, tb)  # type: ignore[arg-type]


def tile_fused(nest: scf.ForOp, target: Target, e: IRBuilder) -> None:
    """Over the blocks as distribute_fused; GEMM 1 into the matrix and accumulator levels; the
    logits tile into the vector level."""
    fused = FUSED.get(nest)
    assert fused is not None
    tiles = complete_tiles(nest, fused.tiles.as_dict(), target, functools.partial(largest_fitting_tiles, footprint_bytes))
    f = enclosing_function(nest)
    distribute_fused(nest, e, by_rows=panel_level(target) is not None,  # GEMM 1 reads W's tile in place first
                     align=row_alignment(target))
    buffers: dict = {}
    gens = [o for o in nest.walk() if CONTRACTION.get(o) is not None]
    for alloc in [o for o in f.walk() if isinstance(o, memref.AllocOp) and PROMOTE.on(o)]:
        promote(alloc, target, e)
    for gen in gens:
        attr = CONTRACTION.get(gen)
        tile_contraction(gen, [tiles[n] for n in attr.loop_dims], target, target.double_buffer, "gemm1",  # type: ignore[union-attr]
                         buffers, e.at(gen))


# -- the loss op ---------------------------------------------------------------------------------

ROWS = ("logits_max", "sum_exp_logits", "predicted_logits", "sum_logits", "target", "loss_out")


def loss_rows(op: FusedCrossEntropyLossWithMaxSumOp) -> list[str]:
    """The loss op's operands with one value per row (every operand but the logits and softmax)."""
    return [n for n in ROWS if getattr(op, n) is not None]


def distribute_loss_rows(op: FusedCrossEntropyLossWithMaxSumOp, e: IRBuilder) -> bool:
    """With a shard's logits (BT × V softmax to write), rows over blocks, contiguous ranges of at
    least 64 rows; without, the op is O(BT): left on one block."""
    if op.vocab_parallel_logits is None:
        return False
    bid, nblk = e.emit(BlockIdxOp()), e.emit(BlockDimOp())
    rows = e.dim(op.logits_max, 0)
    with block_part(e, bid, nblk, rows, e.idx(64)) as (r0, rn):
        windows = {n: e.subview(getattr(op, n), [r0], [rn]) for n in loss_rows(op)}
        for n in ("vocab_parallel_logits", "softmax_out"):
            ref = getattr(op, n)
            windows[n] = e.subview(ref, [r0, 0], [rn, e.dim(ref, 1)])
        e.emit(tile_op(op, windows))
    e.erase(op)
    return True


__all__ = ["choose_tile_sizes", "distribute_fused", "distribute_loss_rows", "footprint", "loss_rows",
           "tile_fused"]
