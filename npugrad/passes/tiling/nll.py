"""Tiling of train.nll_loss_backward: `out` in rows × c tiles, dealt round-robin to the blocks;
each tile is zeroed in local memory, gets −w[y]·scale where one of its rows' targets falls in
its columns, and is copied out.

    train.nll_loss_backward grad_output(%g : memref<f32>) ... target(%t : memref<?xi64>)
        weight(%w : memref<?xf32>) ... -> out(%o : memref<?x?xf32>)
        {reduction = 1 : i64, tile_sizes = #train.tiles<rows = 4, c = 4096>}
becomes (target npu-a2)
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %out_tile = npu.alloc_local {double_buffer} : memref<4x4096xf32, #npu.mem<ub>>
    %target_tile = npu.alloc_local {double_buffer} : memref<4xi64, #npu.mem<ub>>
    %weight_tile = npu.alloc_local {double_buffer} : memref<4096xf32, #npu.mem<ub>>
    %s = −(%g[] / %total_weight[0])                   once, as the untiled lowering computes it
    scf.for %tile = %bid to %ntiles step %nblk {      rows [r0, r0 + rn), columns [c0, c0 + cn)
      %out_tile[:rn, :cn] = 0
      npu.copy %t[r0:rn], %target_tile[:rn]
      npu.copy %w[c0:cn], %weight_tile[:cn]
      scf.for %i < rn {
        y = %target_tile[i]
        if y != ignore_index && y − c0 <u cn { %out_tile[i, y − c0] = %weight_tile[y − c0]·%s }
      }
      npu.copy %out_tile[:rn, :cn], %o[r0:rn, c0:cn]
    } {train.tiles = #train.tiles<rows = 4, c = 4096>}

With reduction none (2-D self) the rows' grad_output comes in as one more tile; 1-D self is one
row of C: tiles of c columns, and its one target a 0-D tile. Every element gets the value, and
the rounding, of the untiled lowering, so results are bit-identical for any tiles and blocks.

The same module sizes the tiles (choose_tile_sizes, footprint) and splits the untiled op over
cores by whole rows (distribute_nll).
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType, i64
from xdsl.ir import SSAValue

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, budget, clamp, fits, largest, round_down, vector_elements
from npugrad.dialect import NLLLossBackwardOp
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import AllocLocalOp, CopyOp, element_bytes, local_type
from npugrad.ir import IRBuilder, index, static_shape
from npugrad.lowering.fills import zero_fill
from npugrad.lowering.train_to_loops.nll import load_scalar, load_target
from npugrad.passes.tiling.blocks import (
    MIN_ELEMENTS,
    block_part,
    block_range,
    record_tile_sizes,
    rows_for_min_elements,
    tile_count,
    tile_sizes,
)
from npugrad.passes.tiling.elementwise import tile_op
from npugrad.targets import Target


def footprint(op: NLLLossBackwardOp, sizes: dict[str, int], target: Target) -> list[TileBuffer]:
    """A rows × c tile of `out`, the rows' targets (and upstream gradients for reduction none),
    the c weights: all copied, so all double-buffered where the target says so."""
    b, tb = element_bytes(op.out.type.element_type), element_bytes(op.target.type.element_type)  # type: ignore[attr-defined]
    two_d = op.out.type.get_num_dims() == 2  # type: ignore[attr-defined]
    rows, c = (sizes["rows"] if two_d else 1), sizes["c"]
    per_sample = two_d and op.prop_int("reduction") == 0
    tiles = [rows * c * b, rows * tb, c * b] + ([rows * b] if per_sample else [])
    return [TileBuffer("vector", n, target.double_buffer) for n in tiles]


def load(op: NLLLossBackwardOp, sizes: dict[str, int], target: Target) -> list[Load]:
    """The busiest core's row tiles (whole rows per block), each c columns at a time: the rows'
    targets in once per column tile, the columns' weights once per row tile, out written once;
    about 4 vector operations per element of out."""
    shape = [d or 1024 for d in static_shape(op.out.type)]  # type: ignore[arg-type]
    rows_total, c_total = (shape[0], shape[-1]) if len(shape) == 2 else (1, shape[0])
    rows, c = min(sizes["rows"], rows_total) if len(shape) == 2 else 1, min(sizes["c"], c_total)
    b, tb = element_bytes(op.out.type.element_type), element_bytes(op.target.type.element_type)  # type: ignore[attr-defined]
    row_tiles, col_tiles = -(-rows_total // rows), -(-c_total // c)
    mine = -(-row_tiles // target.cores)
    g, vec = target.global_level.name, target.role("vector").name
    one = Load()
    one.add_move((g, vec), mine * col_tiles * (rows * tb + c * b), 2 * mine * col_tiles)
    one.add_move((vec, g), mine * rows * c_total * b, mine * col_tiles)
    one.add_work("vector", "f32", mine * rows * c_total * 4, mine * col_tiles, 0)
    one.total_work[("vector", "f32")] = rows_total * c_total * 4
    one.global_bytes = row_tiles * col_tiles * (rows * tb + c * b) + rows_total * c_total * b
    one.extents = {"rows": rows_total, "c": c_total}
    return [one]


def choose_tile_sizes(op: NLLLossBackwardOp, target: Target) -> dict[str, int]:
    """c takes up to a quarter of the vector level; rows fill the rest."""
    b = element_bytes(op.out.type.element_type)  # type: ignore[attr-defined]
    shape = static_shape(op.out.type)  # type: ignore[arg-type]
    two_d = len(shape) == 2
    c_total = shape[-1]
    quarter = budget(target, "vector") // (4 * b)
    if c_total is not None and c_total <= quarter:
        c = max(1, c_total)
    else:
        c = round_down(min(quarter, c_total or 4096), vector_elements(target, b))
    if not two_d:
        return {"rows": 1, "c": c}
    rows = largest(lambda r: fits(footprint(op, {"rows": r, "c": c}, target), target), clamp(4096, shape[0]))
    return {"rows": rows, "c": c}


def distribute_nll(op: NLLLossBackwardOp, e: IRBuilder) -> bool:
    """Whole rows per block, enough of them for MIN_ELEMENTS of `out` each; each block zeroes and
    fills its own rows. 1-D self, or fewer than two blocks' worth of `out`: left on one block."""
    out_t = op.out.type
    assert isinstance(out_t, MemRefType)
    if out_t.get_num_dims() != 2:
        return False
    n = static_product(static_shape(out_t))
    if n is not None and n < 2 * MIN_ELEMENTS:
        return False
    bid, nblk = block_range(e)
    rows, c = e.dim(op.out, 0), e.dim(op.out, 1)
    with block_part(e, bid, nblk, rows, rows_for_min_elements(e, c)) as (r0, rn):
        windows = {
            "self": e.subview(op.self, [r0, 0], [rn, e.dim(op.self, 1)]),
            "target": e.subview(op.target, [r0], [rn]),
            "out": e.subview(op.out, [r0, 0], [rn, c]),
        }
        if op.prop_int("reduction") == 0:
            windows["grad_output"] = e.subview(op.grad_output, [r0], [rn])
        e.emit(tile_op(op, windows))
    e.erase(op)
    return True


def tile_nll_loss_backward(op: NLLLossBackwardOp, target: Target, e: IRBuilder) -> None:
    out_t = op.out.type
    assert isinstance(out_t, MemRefType)
    rank = out_t.get_num_dims()
    two_d = rank == 2
    reduction = op.prop_int("reduction")
    per_sample = reduction == 0 and two_d
    shape = [None if d < 0 else d for d in out_t.get_shape()]
    sizes = tile_sizes(op, {"rows": shape[0], "c": shape[1]} if two_d else {"c": shape[0]})
    c_tile = sizes["c"]
    row_tile = [sizes["rows"]] if two_d else []  # the sample dimension, absent for 1-D self
    level = target.role("vector").name


    def local(name: str, element, tile_shape: list[int]) -> SSAValue:
        # Every tile moves by DMA, so each is double-buffered where the target overlaps them.
        buf = e.emit(AllocLocalOp(local_type(element, tile_shape, level), target.double_buffer))
        buf.name_hint = name
        return buf

    bid, nblk = block_range(e)
    out_l = local("out_tile", out_t.element_type, [*row_tile, c_tile])
    target_l = local("target_tile", op.target.type.element_type, row_tile)  # type: ignore[attr-defined]
    grad_l = local("grad_output_tile", out_t.element_type, row_tile) if per_sample else None
    weight_l = local("weight_tile", out_t.element_type, [c_tile])
    if grad_l is None:
        scale = load_scalar(e, op.grad_output)
        if reduction == 1:
            # total_weight as given: the forward pass defined it, and 0 follows IEEE rules.
            scale = e.emit(arith.DivfOp(scale, load_scalar(e, op.total_weight)))
        neg_scale = e.emit(arith.NegfOp(scale))
    ignore = e.const(op.prop_int("ignore_index"), i64)

    c = e.dim(op.out, rank - 1)
    col_tiles = tile_count(e, op.out, rank - 1, c_tile)
    tiles = e.emit(arith.MuliOp(tile_count(e, op.out, 0, row_tile[0]), col_tiles)) if two_d else col_tiles
    # Tiles numbered row-major over (row tile, column tile).
    with e.loop(tiles, lb=bid, step=nblk) as tile:
        record_tile_sizes(e, tile, sizes)
        c0 = e.emit(arith.MuliOp(e.emit(arith.RemUIOp(tile, col_tiles)), e.idx(c_tile)))
        cn = e.emit(arith.MinSIOp(e.idx(c_tile), e.emit(arith.SubiOp(c, c0))))
        r0: list[SSAValue] = []  # [first row of the tile], [] for 1-D self
        rn: list[SSAValue] = []  # [rows in the tile]
        if two_d:
            r0 = [e.emit(arith.MuliOp(e.emit(arith.DivUIOp(tile, col_tiles)), e.idx(row_tile[0])))]
            rn = [e.emit(arith.MinSIOp(e.idx(row_tile[0]), e.emit(arith.SubiOp(e.dim(op.out, 0), r0[0]))))]
        out_tile = e.subview(out_l, [0] * rank, [*rn, cn])
        zero_fill(e, out_tile)
        if two_d:
            e.emit(CopyOp(e.subview(op.target, r0, rn), e.subview(target_l, [0], rn)))
        else:
            e.emit(CopyOp(op.target, target_l))
        if grad_l is not None:
            e.emit(CopyOp(e.subview(op.grad_output, r0, rn), e.subview(grad_l, [0], rn)))
        e.emit(CopyOp(e.subview(op.weight, [c0], [cn]), e.subview(weight_l, [0], [cn])))

        def one_sample(sample: list[SSAValue]) -> None:
            y = load_target(e, target_l, sample)
            col = e.emit(arith.SubiOp(e.emit(arith.IndexCastOp(y, index)), c0))
            # Unsigned: a target left of the tile (or negative) wraps to a huge value, so one
            # compare keeps every store inside the tile.
            in_tile = e.emit(arith.CmpiOp(col, cn, "ult"))
            with e.if_(e.emit(arith.AndIOp(e.emit(arith.CmpiOp(y, ignore, "ne")), in_tile))):
                s = e.emit(arith.NegfOp(e.load_f32(grad_l, sample))) if grad_l is not None else neg_scale
                e.store_f32(e.emit(arith.MulfOp(e.load_f32(weight_l, [col]), s)), out_l, [*sample, col])

        if two_d:
            with e.loop(rn[0]) as i:
                one_sample([i])
        else:
            one_sample([])
        e.emit(CopyOp(out_tile, e.subview(op.out, [*r0, c0], [*rn, cn])))
    e.erase(op)
