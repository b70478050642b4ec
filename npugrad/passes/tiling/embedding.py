"""Tiling of grad.embedding_dense_backward: row tiles of `out` dealt round-robin to the blocks;
each block sorts the indices of its own rows into buckets (a stable counting sort, as the untiled
lowering, restricted to those rows), then sums each row's bucket in float32, in index order, in a
local accumulator tile, one d-chunk at a time, and copies the rounded tile out.

    grad.embedding_dense_backward grad(%g : memref<?x?xf16>) indices(%k : memref<?xi32>)
        -> out(%o : memref<32000x?xf16>) {num_weights = 32000 : i64, tile_sizes = {rows = 7 : i64, d = 3072 : i64}}
becomes (target npu-a2)
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %acc = npu.alloc_local : memref<7x3072xf32, #npu.mem<ub>>
    %out_tile = npu.alloc_local {double_buffer} : memref<7x3072xf16, #npu.mem<ub>>
    %grad_row = npu.alloc_local {double_buffer} : memref<1x3072xf16, #npu.mem<ub>>
    %off = memref.alloc(...) : memref<?xindex>        buckets of this block's rows only
    counting sort of the indices k with (k / 7) mod %nblk = %bid into %off, %perm
    scf.for %tile = %bid to 4572 step %nblk {                  rows [r0, r0 + rn)
      scf.for %j0 = 0 to D step 3072 {                         columns [j0, j0 + dn)
        scf.for %i < rn {
          %acc[i, :dn] = 0
          scf.for %p in bucket(r0 + i) { npu.copy %g[perm[p], j0:dn], %grad_row[0, :dn];  %acc[i, :dn] += %grad_row[0, :dn] }
        }
        %out_tile[:rn, :dn] = trunc %acc[:rn, :dn]
        npu.copy %out_tile[:rn, :dn], %o[r0:rn, j0:dn]
      }
    }

Every element of `out` is the same float32 sum, in the same order, as in the untiled kernel,
whichever block computes it: results are bit-identical for any number of blocks. Sorting only a
block's own rows costs each block one read of the indices, and scratch for its share of the rows
and indices rather than a whole table. A float32 `out` is copied out from the accumulator itself.
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, f32, i64
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter

from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import AllocLocalOp, CopyOp, local_type
from npugrad.lowering.emit import Emitter, index
from npugrad.lowering.grad_to_loops.embedding import _delinearize, _if
from npugrad.passes.tiling.nll import block_range, tile_sizes
from npugrad.passes.tiling.registry import TILINGS
from npugrad.targets import Target


def tile_embedding_dense_backward(op: EmbeddingDenseBackwardOp, target: Target) -> None:
    num_weights = op.prop_int("num_weights")
    padding = op.prop_int("padding_idx")
    scale = op.prop_bool("scale_grad_by_freq")
    g_type, k_type, out_type = op.grad.type, op.indices.type, op.out.type
    assert isinstance(g_type, MemRefType) and isinstance(k_type, MemRefType) and isinstance(out_type, MemRefType)
    g_shape, k_shape = ([None if s == DYNAMIC_INDEX else s for s in t.get_shape()] for t in (g_type, k_type))
    if g_shape[-1] == 0:
        Rewriter.erase_op(op)  # out is (num_weights, 0): nothing to write
        return
    sizes = tile_sizes(op, {"rows": num_weights, "d": g_shape[-1]})
    rows, d_tile = sizes["rows"], sizes["d"]
    f32_out = out_type.element_type == f32
    level = target.role("vector").name

    e = Emitter.before(op)
    g_dims, k_dims = e.dims(op.grad), e.dims(op.indices)
    lead, d = g_dims[:-1], g_dims[-1]
    one, c_rows = e.idx(1), e.idx(rows)

    def local(name: str, element, shape: list[int], moved: bool) -> SSAValue:
        # Tiles that take part in a DMA are double-buffered where the target overlaps them.
        buf = e.add(AllocLocalOp(local_type(element, shape, level), moved and target.double_buffer))
        buf.name_hint = name
        return buf

    bid, nblk = block_range(e)
    acc = local("acc", f32, [rows, d_tile], moved=f32_out)
    out_l = None if f32_out else local("out_tile", out_type.element_type, [rows, d_tile], moved=True)
    # grad's row chunk keeps grad's rank (leading 1s): a window of grad with a dynamic length
    # cannot drop dimensions.
    unit = [1] * len(lead)
    grad_l = local("grad_row", g_type.element_type, [*unit, d_tile], moved=True)

    def each_valid_index(body: Callable[[list[SSAValue], SSAValue], None]) -> None:
        """body(position in indices, row) for each index in [0, num_weights) other than padding_idx, in order."""
        with e.loop_nest(k_dims) as ivs:
            k = e.load(op.indices, ivs)
            if k.type != i64:
                k = e.add(arith.ExtSIOp(k, i64))
            # Unsigned: a negative index is a huge unsigned one, so one compare bounds both ends.
            valid = e.cmpi(k, e.const(num_weights, i64), "ult")
            if 0 <= padding < num_weights:
                valid = e.andi(valid, e.cmpi(k, e.const(padding, i64), "ne"))
            with e.if_(valid):
                body(ivs, e.add(arith.IndexCastOp(k, index)))

    def each_own_index(body: Callable[[list[SSAValue], SSAValue], None]) -> None:
        """body(position in indices, slot) for the valid indices whose row is in one of this
        block's tiles; slot numbers the block's rows: (its tile count so far)·rows + row in tile."""

        def own(ivs: list[SSAValue], row: SSAValue) -> None:
            tile = e.add(arith.DivUIOp(row, c_rows))
            with e.if_(e.cmpi(e.add(arith.RemUIOp(tile, nblk)), bid, "eq")):
                mine = e.add(arith.DivUIOp(tile, nblk))
                body(ivs, e.addi(e.muli(mine, c_rows), e.add(arith.RemUIOp(row, c_rows))))

        each_valid_index(own)

    def count(ivs: list[SSAValue], slot: SSAValue) -> None:
        at = e.addi(slot, e.idx(2))
        e.store(e.addi(e.load(off, [at]), one), off, [at])

    def place(ivs: list[SSAValue], slot: SSAValue) -> None:
        flat = e.idx(0)
        for i, (iv, size) in enumerate(zip(ivs, k_dims)):
            flat = iv if i == 0 else e.addi(e.muli(flat, size), iv)
        at = e.addi(slot, one)
        pos = e.load(off, [at])
        e.store(flat, perm, [pos])
        e.store(e.addi(pos, one), off, [at])

    row_tiles = e.idx(-(-num_weights // rows))
    # With D = 0 nothing is read or written, and num_weights need not be backed by any memory.
    with _if(e, None if g_shape[-1] is not None else e.cmpi(d, e.idx(0), "ne")):
        # Counts go to off[s + 2]; the prefix sum makes off[s + 1] the start of bucket s; placing
        # advances it to the bucket's end, so bucket s is [off[s], off[s + 1]).
        own_tiles = e.add(arith.DivUIOp(e.addi(row_tiles, e.subi(nblk, one)), nblk))
        slots = e.muli(own_tiles, c_rows)
        n_off = e.addi(slots, e.idx(2))
        off = e.alloc([n_off], index)
        with e.loop(n_off) as s:
            e.store(e.idx(0), off, [s])
        # n != indices.numel is rejected before launch; never index grad past its end regardless.
        n_lead = static_product(g_shape[:-1])
        same = None if n_lead is not None and n_lead == static_product(k_shape) else e.cmpi(
            e.product(lead), e.product(k_dims), "eq"
        )
        with _if(e, same):
            each_own_index(count)
        with e.loop(e.addi(slots, one)) as s:
            nxt = e.addi(s, one)
            e.store(e.addi(e.load(off, [nxt]), e.load(off, [s])), off, [nxt])
        perm = e.alloc([e.load(off, [e.addi(slots, one)])], index)
        with _if(e, same):
            each_own_index(place)

        zero = e.f32(0.0)
        with e.loop(row_tiles, lb=bid, step=nblk) as tile:
            r0 = e.muli(tile, c_rows)
            rn = e.minsi(c_rows, e.subi(e.idx(num_weights), r0))
            first_slot = e.muli(e.add(arith.DivUIOp(tile, nblk)), c_rows)
            with e.loop(d, step=e.idx(d_tile)) as j0:
                dn = e.minsi(e.idx(d_tile), e.subi(d, j0))
                with e.loop(rn) as i:
                    with e.loop(dn) as j:
                        e.store(zero, acc, [i, j])
                    slot = e.addi(first_slot, i)
                    lo = e.load(off, [slot])
                    hi = e.load(off, [e.addi(slot, one)])
                    if scale:
                        cnt = e.index_to_f32(e.subi(hi, lo))
                    with e.loop(hi, lo) as p:
                        at = _delinearize(e, e.load(perm, [p]), lead)
                        e.add(CopyOp(e.subview(op.grad, [*at, j0], [*unit, dn]), e.subview(grad_l, [0] * len(g_dims), [*unit, dn])))
                        with e.loop(dn) as j:
                            g = e.load_f32(grad_l, [*[e.idx(0)] * len(lead), j])
                            if scale:
                                g = e.divf(g, cnt)
                            e.store(e.addf(e.load(acc, [i, j]), g), acc, [i, j])
                if out_l is not None:
                    with e.loop(rn) as i, e.loop(dn) as j:
                        e.store_f32(e.load(acc, [i, j]), out_l, [i, j])
                e.add(CopyOp(e.subview(out_l or acc, [0, 0], [rn, dn]), e.subview(op.out, [r0, j0], [rn, dn])))
        e.dealloc(perm)
        e.dealloc(off)
    Rewriter.erase_op(op)


TILINGS[EmbeddingDenseBackwardOp] = tile_embedding_dense_backward
