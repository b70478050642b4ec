"""Tiling of train.embedding_dense_backward: row tiles of `out` dealt round-robin to the blocks.
Each block sorts the indices of its own rows into buckets (the untiled lowering's stable counting
sort, restricted to those rows), then, one d-chunk at a time, sums each row's bucket in float32,
in index order, in a local accumulator tile, and copies the tile out, rounded once.

    train.embedding_dense_backward grad(%g : memref<?x?xf16>) indices(%k : memref<?xi32>)
        -> out(%o : memref<32000x?xf16>) {num_weights = 32000 : i64, tile_sizes = #train.tiles<rows = 7, d = 1024>}
becomes (target npu-a2)
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %acc = npu.alloc_local : memref<7x1024xf32, #npu.mem<ub>>
    %out_tile = npu.alloc_local {double_buffer} : memref<7x1024xf16, #npu.mem<ub>>
    %grad_row = npu.alloc_local {double_buffer} : memref<1x1024xf16, #npu.mem<ub>>
    %off, %perm = memref.alloc ...      the buckets of this block's rows (counting sort of %k)
    scf.for %tile = %bid to 4572 step %nblk {                       rows [r0, r0 + rn)
      scf.for %j0 = 0 to D step 1024 {                              columns [j0, j0 + dn)
        scf.for %i < rn {
          %acc[i, :dn] = 0
          scf.for %p in the bucket of row r0 + i {
            npu.copy %g[%perm[p], j0:dn], %grad_row[0, :dn]
            %acc[i, :dn] += %grad_row[0, :dn]                       (÷ count with scale_grad_by_freq)
          }
        }
        %out_tile[:rn, :dn] = truncf %acc[:rn, :dn]
        npu.copy %out_tile[:rn, :dn], %o[r0:rn, j0:dn]
      }
    } {train.tiles = #train.tiles<rows = 7, d = 1024>}

A float32 `out` is copied out of the accumulator itself. Every element of `out` is the same
float32 sum, in the same order, as in the untiled kernel, whichever block computes it: results
are bit-identical for any tiles and any number of blocks. No block waits for another: each reads
all the indices, but its scratch holds only its share of the rows and of the indices.

The same module sizes the tiles (choose_tile_sizes, footprint).
"""

from __future__ import annotations

from collections.abc import Callable

from xdsl.dialects import arith
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, f32
from xdsl.ir import SSAValue

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, budget, clamp, fits, largest, round_down, vector_elements
from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import AllocLocalOp, CopyOp, element_bytes, local_type
from npugrad.ir import IRBuilder, index, static_shape
from npugrad.lowering.train_to_loops.embedding import (
    count_index,
    delinearize,
    if_known,
    load_index,
    lower_embedding_dense_backward,
    place_index,
)
from npugrad.passes.tiling.blocks import (
    MIN_ELEMENTS,
    block_part,
    block_range,
    record_tile_sizes,
    rows_for_min_elements,
    tile_sizes,
)
from npugrad.targets import Target


def footprint(op: EmbeddingDenseBackwardOp, sizes: dict[str, int], target: Target) -> list[TileBuffer]:
    """A rows × d float32 accumulator (copied out itself, so double-buffered, when `out` is
    float32), else also a rows × d tile of `out`, and a d-chunk of one grad row; the copied ones
    double-buffered where the target says so."""
    rows, d = sizes["rows"], sizes["d"]
    b_out, b_in = element_bytes(op.out.type.element_type), element_bytes(op.grad.type.element_type)  # type: ignore[attr-defined]
    f32_out = op.out.type.element_type == f32  # type: ignore[attr-defined]
    db = target.double_buffer
    buffers = [TileBuffer("vector", rows * d * 4, db and f32_out), TileBuffer("vector", d * b_in, db)]
    return buffers + ([] if f32_out else [TileBuffer("vector", rows * d * b_out, db)])


def load(op: EmbeddingDenseBackwardOp, sizes: dict[str, int], target: Target) -> list[Load]:
    """The busiest core's row tiles: each index's grad row copied in d columns at a time (one
    copy per chunk), out written once per tile; a scan of all indices per block (scalar)."""
    num_weights = op.prop_int("num_weights")
    g_shape = [d or 1024 for d in static_shape(op.grad.type)]  # type: ignore[arg-type]
    D = g_shape[-1]
    n = static_product(g_shape[:-1]) or 1024
    rows, d = min(sizes["rows"], num_weights), min(sizes["d"], D)
    b_out, b_in = element_bytes(op.out.type.element_type), element_bytes(op.grad.type.element_type)  # type: ignore[attr-defined]
    tiles = -(-num_weights // rows)
    mine = -(-tiles // target.cores)
    share = min(1.0, mine * rows / num_weights)  # of the indices, when they spread evenly
    chunks = -(-D // d)
    g, vec = target.global_level.name, target.role("vector").name
    one = Load()
    one.add_move((g, vec), share * n * D * b_in, share * n * chunks)
    one.add_move((vec, g), mine * rows * D * b_out, mine * chunks)
    one.add_work("vector", "f32", share * n * D * 3 + mine * rows * D * 2, mine * chunks, 0)
    one.add_work("scalar", "f32", n * 8, 1, 0)
    one.total_work[("vector", "f32")] = n * D * 3 + num_weights * D * 2
    one.total_work[("scalar", "f32")] = n * 8 * target.cores
    one.global_bytes = n * D * b_in + num_weights * D * b_out
    one.extents = {"rows": num_weights, "d": D}
    return [one]


def choose_tile_sizes(op: EmbeddingDenseBackwardOp, target: Target) -> dict[str, int]:
    """d: all of D when a quarter of the vector level holds its buffers, else a multiple of a
    float32 vector; rows fill the level."""
    d_total = static_shape(op.grad.type)[-1]  # type: ignore[arg-type]
    b_out, b_in = element_bytes(op.out.type.element_type), element_bytes(op.grad.type.element_type)  # type: ignore[attr-defined]
    most = budget(target, "vector") // (4 * (4 + b_out + b_in))
    if d_total is not None and d_total <= most:
        d = max(1, d_total)
    else:
        d = round_down(min(most, d_total or 1024), vector_elements(target, 4))
    rows = largest(lambda r: fits(footprint(op, {"rows": r, "d": d}, target), target),
                   clamp(256, op.prop_int("num_weights")))
    return {"rows": rows, "d": d}


def _own_buckets(
    e: IRBuilder, op: EmbeddingDenseBackwardOp, rows: int, bid: SSAValue, nblk: SSAValue
) -> tuple[SSAValue, SSAValue]:
    """(off, perm): the positions in `indices` of the rows of this block's tiles, by row. The
    block's rows are numbered by slot, (its tile's rank among the block's tiles)·rows + row in
    the tile; the bucket of slot s is perm[off[s]:off[s + 1]], positions in increasing order."""
    num_weights = op.prop_int("num_weights")
    g_type, k_type = op.grad.type, op.indices.type
    assert isinstance(g_type, MemRefType) and isinstance(k_type, MemRefType)
    k_dims = e.dims(op.indices)
    one, c_rows = e.idx(1), e.idx(rows)

    def each_own_index(body: Callable[[list[SSAValue], SSAValue], None]) -> None:
        """body(position in indices, slot) for each index in [0, num_weights) other than
        padding_idx whose row is this block's, in order."""
        with e.loop_nest(k_dims) as ivs:
            row, valid = load_index(e, op, ivs)
            with e.if_(valid):
                tile = e.emit(arith.DivUIOp(row, c_rows))
                with e.if_(e.emit(arith.CmpiOp(e.emit(arith.RemUIOp(tile, nblk)), bid, "eq"))):
                    rank = e.emit(arith.DivUIOp(tile, nblk))
                    body(ivs, e.emit(arith.AddiOp(e.emit(arith.MuliOp(rank, c_rows)), e.emit(arith.RemUIOp(row, c_rows)))))

    def count(ivs: list[SSAValue], slot: SSAValue) -> None:
        count_index(e, off, slot)

    def place(ivs: list[SSAValue], slot: SSAValue) -> None:
        place_index(e, off, perm, ivs, k_dims, slot)

    # Counts go to off[s + 2]; the prefix sum makes off[s + 1] the start of bucket s; placing
    # advances it to the bucket's end, so bucket s is [off[s], off[s + 1]).
    slots = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(e.idx(-(-num_weights // rows)), nblk)), c_rows))
    n_off = e.emit(arith.AddiOp(slots, e.idx(2)))
    off = e.alloc([n_off], index)
    off.name_hint = "off"
    with e.loop(n_off) as s:
        e.store(e.idx(0), off, [s])
    # n != indices.numel is rejected before launch; never index grad past its end regardless.
    g_shape, k_shape = ([None if d == DYNAMIC_INDEX else d for d in t.get_shape()] for t in (g_type, k_type))
    n_lead = static_product(g_shape[:-1])
    same = n_lead is not None and n_lead == static_product(k_shape)
    agree = None if same else e.emit(arith.CmpiOp(e.product(e.dims(op.grad)[:-1]), e.product(k_dims), "eq"))
    with if_known(e, agree):
        each_own_index(count)
    last = e.emit(arith.AddiOp(slots, one))
    with e.loop(last) as s:
        nxt = e.emit(arith.AddiOp(s, one))
        e.store(e.emit(arith.AddiOp(e.load(off, [nxt]), e.load(off, [s]))), off, [nxt])
    perm = e.alloc([e.load(off, [last])], index)
    perm.name_hint = "perm"
    with if_known(e, agree):
        each_own_index(place)
    return off, perm


def tile_embedding_dense_backward(op: EmbeddingDenseBackwardOp, target: Target, e: IRBuilder) -> None:
    num_weights = op.prop_int("num_weights")
    scale = op.prop_bool("scale_grad_by_freq")
    g_type, out_type = op.grad.type, op.out.type
    assert isinstance(g_type, MemRefType) and isinstance(out_type, MemRefType)
    d_extent = g_type.get_shape()[-1]
    if d_extent == 0:
        e.erase(op)  # out is (num_weights, 0): nothing to write
        return
    sizes = tile_sizes(op, {"rows": num_weights, "d": None if d_extent == DYNAMIC_INDEX else d_extent})
    rows, d_tile = sizes["rows"], sizes["d"]
    f32_out = out_type.element_type == f32
    level = target.role("vector").name

    g_dims = e.dims(op.grad)
    lead, d = g_dims[:-1], g_dims[-1]
    one, c_rows = e.idx(1), e.idx(rows)

    def local(name: str, element, shape: list[int], moved: bool) -> SSAValue:
        # Tiles that take part in a DMA are double-buffered where the target overlaps them.
        buf = e.emit(AllocLocalOp(local_type(element, shape, level), moved and target.double_buffer))
        buf.name_hint = name
        return buf

    bid, nblk = block_range(e)
    acc = local("acc", f32, [rows, d_tile], moved=f32_out)
    out_l = acc if f32_out else local("out_tile", out_type.element_type, [rows, d_tile], moved=True)
    # grad's row chunk keeps grad's rank (leading 1s): a window of grad with a dynamic length
    # cannot drop dimensions.
    unit = [1] * len(lead)
    grad_l = local("grad_row", g_type.element_type, [*unit, d_tile], moved=True)

    # With D = 0 nothing is read or written, and num_weights need not be backed by any memory.
    with if_known(e, None if d_extent != DYNAMIC_INDEX else e.emit(arith.CmpiOp(d, e.idx(0), "ne"))):
        off, perm = _own_buckets(e, op, rows, bid, nblk)
        zero = e.f32(0.0)
        with e.loop(e.idx(-(-num_weights // rows)), lb=bid, step=nblk) as tile:
            record_tile_sizes(e, tile, sizes)
            r0 = e.emit(arith.MuliOp(tile, c_rows))
            rn = e.emit(arith.MinSIOp(c_rows, e.emit(arith.SubiOp(e.idx(num_weights), r0))))
            first_slot = e.emit(arith.MuliOp(e.emit(arith.DivUIOp(tile, nblk)), c_rows))
            with e.loop(d, step=e.idx(d_tile)) as j0:
                dn = e.emit(arith.MinSIOp(e.idx(d_tile), e.emit(arith.SubiOp(d, j0))))
                with e.loop(rn) as i:
                    with e.loop(dn) as j:
                        e.store(zero, acc, [i, j])
                    slot = e.emit(arith.AddiOp(first_slot, i))
                    lo = e.load(off, [slot])
                    hi = e.load(off, [e.emit(arith.AddiOp(slot, one))])
                    if scale:
                        cnt = e.index_to_f32(e.emit(arith.SubiOp(hi, lo)))
                    with e.loop(hi, lo) as p:
                        src = e.subview(op.grad, [*delinearize(e, e.load(perm, [p]), lead), j0], [*unit, dn])
                        e.emit(CopyOp(src, e.subview(grad_l, [0] * len(g_dims), [*unit, dn])))
                        with e.loop(dn) as j:
                            g = e.load_f32(grad_l, [*[e.idx(0)] * len(lead), j])
                            if scale:
                                g = e.emit(arith.DivfOp(g, cnt))
                            e.store(e.emit(arith.AddfOp(e.load(acc, [i, j]), g)), acc, [i, j])
                if out_l is not acc:
                    with e.loop(rn) as i, e.loop(dn) as j:
                        e.store_f32(e.load(acc, [i, j]), out_l, [i, j])
                e.emit(CopyOp(e.subview(out_l, [0, 0], [rn, dn]), e.subview(op.out, [r0, j0], [rn, dn])))
        e.dealloc(perm)
        e.dealloc(off)
    e.erase(op)


def distribute_embedding(op: EmbeddingDenseBackwardOp, e: IRBuilder) -> bool:
    """Untiled, over the cores (distribute-over-cores): one contiguous range of `out`'s rows per
    block, enough of them for MIN_ELEMENTS of `out` each. Each block scans all the indices and
    sorts those of its own rows (8 bytes an index, against D elements written per row), then
    sums and writes its rows as the untiled lowering does (lower_embedding_dense_backward's
    share): every row the same sum in the same order, bit-identical for any number of blocks.
    Fewer than two blocks' worth of `out`, known at compile time: left on one block."""
    out_t = op.out.type
    assert isinstance(out_t, MemRefType)
    n = static_product(static_shape(out_t))
    if n is not None and n < 2 * MIN_ELEMENTS:
        return False
    bid, nblk = block_range(e)
    rows = e.idx(op.prop_int("num_weights"))
    with block_part(e, bid, nblk, rows, rows_for_min_elements(e, e.dim(op.out, 1))) as share:
        lower_embedding_dense_backward(op, e, share)
    e.erase(op)
    return True
