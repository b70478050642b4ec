"""Tiling of grad.nll_loss_backward: `out` in rows × c tiles, dealt round-robin to the blocks;
each tile is zeroed in local memory, gets −w[y]·scale where one of its rows' targets falls in
its columns, and is copied out.

    grad.nll_loss_backward grad_output(%g : memref<f32>) ... target(%t : memref<?xi64>)
        weight(%w : memref<?xf32>) ... -> out(%o : memref<?x?xf32>)
        {reduction = 1 : i64, tile_sizes = {rows = 4 : i64, c = 4096 : i64}}
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
    } {tile_sizes = {rows = 4 : i64, c = 4096 : i64}}

With reduction none (2-D self) the rows' grad_output comes in as one more tile; 1-D self is one
row of C: tiles of c columns, and its one target a 0-D tile. Every element gets the value, and
the rounding, of the untiled lowering, so results are bit-identical for any tiles and blocks.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType, i64
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter

from npugrad.dialect import NLLLossBackwardOp
from npugrad.dialect.npu import AllocLocalOp, CopyOp, local_type
from npugrad.lowering.emit import Emitter, index
from npugrad.lowering.grad_to_loops.nll import _load_scalar, _load_target
from npugrad.passes.tiling.blocks import block_range, record_tile_sizes, tile_count, tile_sizes
from npugrad.passes.tiling.registry import TILINGS
from npugrad.targets import Target


def tile_nll_loss_backward(op: NLLLossBackwardOp, target: Target) -> None:
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

    e = Emitter.before(op)

    def local(name: str, element, tile_shape: list[int]) -> SSAValue:
        # Every tile moves by DMA, so each is double-buffered where the target overlaps them.
        buf = e.add(AllocLocalOp(local_type(element, tile_shape, level), target.double_buffer))
        buf.name_hint = name
        return buf

    bid, nblk = block_range(e)
    out_l = local("out_tile", out_t.element_type, [*row_tile, c_tile])
    target_l = local("target_tile", op.target.type.element_type, row_tile)  # type: ignore[attr-defined]
    grad_l = local("grad_output_tile", out_t.element_type, row_tile) if per_sample else None
    weight_l = local("weight_tile", out_t.element_type, [c_tile])
    if grad_l is None:
        scale = _load_scalar(e, op.grad_output)
        if reduction == 1:
            # total_weight as given: the forward pass defined it, and 0 follows IEEE rules.
            scale = e.divf(scale, _load_scalar(e, op.total_weight))
        neg_scale = e.add(arith.NegfOp(scale))
    ignore = e.const(op.prop_int("ignore_index"), i64)

    c = e.dim(op.out, rank - 1)
    col_tiles = tile_count(e, op.out, rank - 1, c_tile)
    tiles = e.muli(tile_count(e, op.out, 0, row_tile[0]), col_tiles) if two_d else col_tiles
    # Tiles numbered row-major over (row tile, column tile).
    with e.loop(tiles, lb=bid, step=nblk) as tile:
        record_tile_sizes(tile, sizes)
        c0 = e.muli(e.add(arith.RemUIOp(tile, col_tiles)), e.idx(c_tile))
        cn = e.minsi(e.idx(c_tile), e.subi(c, c0))
        r0: list[SSAValue] = []  # [first row of the tile], [] for 1-D self
        rn: list[SSAValue] = []  # [rows in the tile]
        if two_d:
            r0 = [e.muli(e.add(arith.DivUIOp(tile, col_tiles)), e.idx(row_tile[0]))]
            rn = [e.minsi(e.idx(row_tile[0]), e.subi(e.dim(op.out, 0), r0[0]))]
        out_tile = e.subview(out_l, [0] * rank, [*rn, cn])
        e.zeros(out_tile)
        if two_d:
            e.add(CopyOp(e.subview(op.target, r0, rn), e.subview(target_l, [0], rn)))
        else:
            e.add(CopyOp(op.target, target_l))
        if grad_l is not None:
            e.add(CopyOp(e.subview(op.grad_output, r0, rn), e.subview(grad_l, [0], rn)))
        e.add(CopyOp(e.subview(op.weight, [c0], [cn]), e.subview(weight_l, [0], [cn])))

        def one_sample(sample: list[SSAValue]) -> None:
            y = _load_target(e, target_l, sample)
            col = e.subi(e.add(arith.IndexCastOp(y, index)), c0)
            # Unsigned: a target left of the tile (or negative) wraps to a huge value, so one
            # compare keeps every store inside the tile.
            in_tile = e.cmpi(col, cn, "ult")
            with e.if_(e.andi(e.cmpi(y, ignore, "ne"), in_tile)):
                s = e.add(arith.NegfOp(e.load_f32(grad_l, sample))) if grad_l is not None else neg_scale
                e.store_f32(e.mulf(e.load_f32(weight_l, [col]), s), out_l, [*sample, col])

        if two_d:
            with e.loop(rn[0]) as i:
                one_sample([i])
        else:
            one_sample([])
        e.add(CopyOp(out_tile, e.subview(op.out, [*r0, c0], [*rn, cn])))
    Rewriter.erase_op(op)


TILINGS[NLLLossBackwardOp] = tile_nll_loss_backward
