"""train.embedding_dense_backward → a stable counting sort of the indices, then one pass per row.

    train.embedding_dense_backward grad(%g : memref<?x?xf16>) indices(%k : memref<?xi32>)
        -> out(%o : memref<10x?xbf16>) {num_weights = 10 : i64, scale_grad_by_freq = true}
becomes
    %off = memref.alloc() : memref<12xindex>      %perm = memref.alloc(%n) : memref<?xindex>
    scf.for %i { k = sext(%k[%i]); if k <u 10 (and k != padding_idx) { %off[k+2] += 1 } }  // counts
    scf.for %r { %off[r+1] += %off[r] }                                                     // offsets
    scf.for %i { k = ...; if valid { %perm[%off[k+1]] = i; %off[k+1] += 1 } }               // buckets
    scf.for %r {
      lo, hi = %off[r], %off[r+1]
      scf.if lo != hi { acc = 0 + g[perm[lo]] / cnt } else { acc = 0 }     // the first addition
      scf.for %p = min(lo + 1, hi) to hi { acc += g[perm[p]] / cnt }
      %o[r] = trunc acc
    }
With `out_zeroed` (out holds zeros already: a fresh mapping the API allocated) a row whose bucket
is empty is skipped: `scf.if %off[r] != %off[r+1]` around the row's body.

Why a sort rather than a float32 (num_weights, D) scratch that the rows of grad are added into:
the scratch would cost 4·num_weights·D bytes (a second copy of a vocabulary-sized gradient) and
scatter read-modify-writes over it; the sort needs 8·(num_weights + n) bytes, reads each row of
grad once, and writes each element of `out` once, rounded once from a float32 row accumulator (a
D-element scratch, whatever out's type: `out` is then only written, never read, a stream
vectorize-elementwise-loops writes past the caches when it is large). A bucket lists its positions in
increasing i, so every sum runs in the fixed order i = 0, 1, ... (the reference's order), and the
bucket's length is the frequency count. Padding and out-of-range indices never enter a bucket.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from xdsl.dialects import arith
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, f32, i64
from xdsl.ir import SSAValue

from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.dialect.checks import static_product
from npugrad.ir import IRBuilder, index


def delinearize(e: IRBuilder, flat: SSAValue, dims: Sequence[SSAValue]) -> list[SSAValue]:
    """Row-major coordinates of `flat` in `dims` (the first coordinate takes the quotient)."""
    ivs: list[SSAValue] = []
    for d in reversed(dims[1:]):
        ivs.append(e.emit(arith.RemUIOp(flat, d)))
        flat = e.emit(arith.DivUIOp(flat, d))
    return [flat, *reversed(ivs)] if dims else []


@contextmanager
def if_known(e: IRBuilder, cond: SSAValue | None) -> Iterator[None]:
    """`scf.if cond`, or nothing when the condition is known to hold at compile time (None)."""
    if cond is None:
        yield
    else:
        with e.if_(cond):
            yield


def load_index(e: IRBuilder, op: EmbeddingDenseBackwardOp, ivs) -> tuple[SSAValue, SSAValue]:
    """(indices[ivs] as an index, whether it names a row that receives gradient: inside
    [0, num_weights) and not padding_idx)."""
    num_weights, padding = op.prop_int("num_weights"), op.prop_int("padding_idx")
    k = e.load(op.indices, ivs)
    if k.type != i64:
        k = e.emit(arith.ExtSIOp(k, i64))
    # Unsigned: a negative index is a huge unsigned one, so one compare bounds both ends.
    valid = e.emit(arith.CmpiOp(k, e.const(num_weights, i64), "ult"))
    if 0 <= padding < num_weights:
        valid = e.emit(arith.AndIOp(valid, e.emit(arith.CmpiOp(k, e.const(padding, i64), "ne"))))
    return e.emit(arith.IndexCastOp(k, index)), valid


def count_index(e: IRBuilder, off: SSAValue, slot: SSAValue) -> None:
    """Counting-sort step 1: one more index in bucket `slot` (counts live at off[slot + 2])."""
    at = e.emit(arith.AddiOp(slot, e.idx(2)))
    e.store(e.emit(arith.AddiOp(e.load(off, [at]), e.idx(1))), off, [at])


def place_index(e: IRBuilder, off: SSAValue, perm: SSAValue, ivs, k_dims, slot: SSAValue) -> None:
    """Counting-sort step 3: append the flat position of `ivs` to bucket `slot` (after the
    prefix sum, off[slot + 1] is the bucket's next free place)."""
    flat = e.idx(0)
    for i, (iv, size) in enumerate(zip(ivs, k_dims)):
        flat = iv if i == 0 else e.emit(arith.AddiOp(e.emit(arith.MuliOp(flat, size)), iv))
    at = e.emit(arith.AddiOp(slot, e.idx(1)))
    pos = e.load(off, [at])
    e.store(flat, perm, [pos])
    e.store(e.emit(arith.AddiOp(pos, e.idx(1))), off, [at])


def lower_embedding_dense_backward(op: EmbeddingDenseBackwardOp, e: IRBuilder,
                                   share: tuple[SSAValue, SSAValue] | None = None) -> None:
    """The loops above; with `share` = (r0, rn), only rows [r0, r0 + rn) of `out` (a block's:
    passes/tiling/embedding.distribute_embedding): the sort keeps the indices of those rows, in
    buckets numbered from r0, and only those rows are written."""
    num_weights = op.prop_int("num_weights")
    scale = op.prop_bool("scale_grad_by_freq")
    g_type, k_type, out_type = op.grad.type, op.indices.type, op.out.type
    assert isinstance(g_type, MemRefType) and isinstance(k_type, MemRefType) and isinstance(out_type, MemRefType)
    g_shape, k_shape = ([None if s == DYNAMIC_INDEX else s for s in t.get_shape()] for t in (g_type, k_type))
    if g_shape[-1] == 0:
        return  # out is (num_weights, 0): nothing to write
    g_dims, k_dims = e.dims(op.grad), e.dims(op.indices)
    lead, d = g_dims[:-1], g_dims[-1]
    one = e.idx(1)

    # The rows written: all of them, or the share's, bucket r for row first + r.
    first, n_rows = (e.idx(0), e.idx(num_weights)) if share is None else share

    def each_valid_index(body: Callable[[list[SSAValue], SSAValue], None]) -> None:
        """body(position in indices, bucket) for each index in [0, num_weights) other than
        padding_idx (and in the share's rows), in order."""
        with e.loop_nest(k_dims) as ivs:
            row, valid = load_index(e, op, ivs)
            if share is not None:
                row = e.emit(arith.SubiOp(row, first))  # below first: a huge unsigned value
                valid = e.emit(arith.AndIOp(valid, e.emit(arith.CmpiOp(row, n_rows, "ult"))))
            with e.if_(valid):
                body(ivs, row)

    def count(ivs: list[SSAValue], row: SSAValue) -> None:
        count_index(e, off, row)

    def place(ivs: list[SSAValue], row: SSAValue) -> None:
        place_index(e, off, perm, ivs, k_dims, row)

    # With D = 0 nothing is read or written, and num_weights need not be backed by any memory.
    with if_known(e, None if g_shape[-1] is not None else e.emit(arith.CmpiOp(d, e.idx(0), "ne"))):
        n_k = e.product(k_dims)
        # Counts go to off[r + 2]; the prefix sum makes off[r + 1] the start of bucket r; placing
        # advances it to the bucket's end, so bucket r is [off[r], off[r + 1]).
        slots = num_weights + 2 if share is None else e.emit(arith.AddiOp(n_rows, e.idx(2)))
        off = e.alloc([slots], index)
        perm = e.alloc([n_k], index)
        with e.loop(e.idx(slots) if isinstance(slots, int) else slots) as r:
            e.store(e.idx(0), off, [r])
        # n != indices.numel is rejected before launch; never index grad past its end regardless.
        n_lead = static_product(g_shape[:-1])
        same = n_lead is not None and n_lead == static_product(k_shape)
        with if_known(e, None if same else e.emit(arith.CmpiOp(e.product(lead), n_k, "eq"))):
            each_valid_index(count)
            with e.loop(e.idx(num_weights + 1) if share is None else e.emit(arith.AddiOp(n_rows, one))) as r:
                nxt = e.emit(arith.AddiOp(r, one))
                e.store(e.emit(arith.AddiOp(e.load(off, [nxt]), e.load(off, [r]))), off, [nxt])
            each_valid_index(place)

        # The float32 accumulator of one row, in the caches; `out` is only written, a row at a time.
        buf = e.alloc([d], f32)
        zero = e.f32(0.0)
        zeroed = op.prop_bool("out_zeroed")
        with e.loop(n_rows) as r:
            lo = e.load(off, [r])
            hi = e.load(off, [e.emit(arith.AddiOp(r, one))])
            used = e.emit(arith.CmpiOp(lo, hi, "ne"))
            with if_known(e, used if zeroed else None):
                if scale:
                    cnt = e.index_to_f32(e.emit(arith.SubiOp(hi, lo)))

                def add_row(p: SSAValue, into: SSAValue | None) -> None:
                    """acc (+)= grad's row of the bucket's position p (0 + that for the first
                    one: the sum's first addition, without a pass that zeroes acc first)."""
                    rows = delinearize(e, e.load(perm, [p]), lead)
                    with e.loop(d) as j:
                        g = e.load_f32(op.grad, [*rows, j])
                        if scale:
                            g = e.emit(arith.DivfOp(g, cnt))
                        e.store(e.emit(arith.AddfOp(into or e.load(buf, [j]), g)), buf, [j])

                def zero_row() -> None:
                    with e.loop(d) as j:
                        e.store(zero, buf, [j])

                if zeroed:
                    add_row(lo, zero)
                else:
                    e.if_else(used, lambda: add_row(lo, zero), zero_row)
                # The bucket's other positions: from lo + 1, or none when it is empty.
                with e.loop(hi, e.emit(arith.MinUIOp(e.emit(arith.AddiOp(lo, one)), hi))) as p:
                    add_row(p, None)
                row = r if share is None else e.emit(arith.AddiOp(first, r))
                with e.loop(d) as j:
                    e.store_f32(e.load(buf, [j]), op.out, [row, j])
        for scratch in (buf, perm, off):
            e.dealloc(scratch)
