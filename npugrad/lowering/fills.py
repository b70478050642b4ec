"""Zero fills as the lowerings emit them: codegen policy, kept out of the IR builder. Also the
other way a float32 accumulator starts: from an output, widened (`widen_into`).

A fill of contiguous memory is one flat loop (LLVM makes it a memset: the lines stay in cache for
whoever reads them next). A fill so large that no cache could keep it anyway (STREAM_BYTES and
up) is written with non-temporal stores, which skip reading each line before overwriting it: half
the memory traffic, then a store fence. A window whose rows are not contiguous (known only at run
time for a strided memref) is filled row by row.

The non-temporal store and the fence are built here for every loop that writes past the caches
(vectorize-elementwise-loops' streamed stores too): `streaming_store`, `store_fence`.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import arith, llvm, memref, vector
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    BoolAttr,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    StridedLayoutAttr,
    VectorType,
)
from xdsl.ir import Operation, SSAValue

from npugrad.ir import IRBuilder, unit_innermost_stride
from npugrad.targets.target import x86_64

LINE_BYTES = 64  # a cache line
STREAM_BYTES = 8 << 20  # zero fills at least this large bypass the caches


def streaming_store(value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue], alignment: int) -> vector.StoreOp:
    """vector.store past the caches (upstream's `nontemporal` property) at an address that is a
    multiple of `alignment` bytes (upstream's `alignment` attribute): LLVM emits x86's
    non-temporal store (vmovntps) only for an aligned vector, a plain store otherwise."""
    store = vector.StoreOp(value, ref, list(indices), nontemporal=BoolAttr.from_bool(True))
    store.attributes["alignment"] = IntegerAttr(alignment, 64)  # upstream's vector.store attribute
    return store


def store_fence(e: IRBuilder) -> None:
    """x86's sfence: the non-temporal stores before it are seen by every core before any store
    after it (they are weakly ordered: without it, a flag set after them, a plain release
    store on x86, could be seen before they are). Nothing on another machine, where LLVM
    orders its non-temporal stores as it does others."""
    if x86_64():
        e.emit(llvm.CallIntrinsicOp("llvm.x86.sse.sfence", [], []))


def zero_fill(e: IRBuilder, ref: SSAValue) -> None:
    """ref = 0. Rows that follow each other in memory are zeroed as one flat range."""
    t = ref.type
    assert isinstance(t, MemRefType)
    rank = t.get_num_dims()
    if rank == 1 and unit_innermost_stride(t):
        zero_fill_flat(e, ref, e.dim(ref, 0))
        return
    if rank >= 2 and isinstance(t.layout, NoneAttr):
        flat = e.collapse(ref)
        zero_fill_flat(e, flat, e.dim(flat, 0))
        return
    if rank < 2 or not unit_innermost_stride(t):
        _zero_nest(e, ref)
        return
    meta = memref.ExtractStridedMetaDataOp(ref)
    e.emit(meta)
    sizes, strides = list(meta.sizes), list(meta.strides)
    dense = e.emit(arith.CmpiOp(strides[-2], sizes[-1], "eq"))
    for a in range(rank - 3, -1, -1):
        outer = e.emit(arith.MuliOp(strides[a + 1], sizes[a + 1]))
        dense = e.emit(arith.AndIOp(dense, e.emit(arith.CmpiOp(strides[a], outer, "eq"))))
    flat_t = MemRefType(t.element_type, [DYNAMIC_INDEX], StridedLayoutAttr([1], None), t.memory_space)

    def as_one_range() -> None:
        n = e.product(sizes)
        view = memref.ReinterpretCastOp.from_dynamic(meta.base_buffer, [meta.offset], [n], [1], flat_t)
        zero_fill_flat(e, e.emit(view), n)

    e.if_else(dense, as_one_range, lambda: _zero_nest(e, ref))


def _zero_nest(e: IRBuilder, ref: SSAValue) -> None:
    zero = e.const(0.0, ref.type.element_type)  # type: ignore[attr-defined]
    with e.loop_nest(e.dims(ref)) as ivs:
        e.store(zero, ref, ivs)


def zero_fill_flat(e: IRBuilder, ref: SSAValue, n: SSAValue) -> None:
    """The n elements of a unit-stride 1-D memref = 0: a plain loop up to STREAM_BYTES; above,
    scalar stores up to the first 64-byte boundary, aligned 64-byte non-temporal vector stores,
    scalar tail."""
    t = ref.type
    assert isinstance(t, MemRefType)
    zero = e.const(0.0, t.element_type)
    width = t.element_type.bitwidth // 8  # type: ignore[attr-defined]
    lanes = LINE_BYTES // width

    def plain() -> None:
        with e.loop(n) as i:
            e.store(zero, ref, [i])

    if LINE_BYTES % width:
        plain()
        return

    def stream() -> None:
        head = e.line_head(ref, n, width, LINE_BYTES)
        lines = e.emit(arith.DivUIOp(e.emit(arith.SubiOp(n, head)), e.idx(lanes)))
        body_end = e.emit(arith.AddiOp(head, e.emit(arith.MuliOp(lines, e.idx(lanes)))))
        with e.loop(head) as i:
            e.store(zero, ref, [i])
        zeros = e.const(0.0, VectorType(t.element_type, [lanes]))
        with e.loop(body_end, lb=head, step=e.idx(lanes)) as i:
            e.emit(streaming_store(zeros, ref, [i], LINE_BYTES))
        with e.loop(n, lb=body_end) as i:
            e.store(zero, ref, [i])
        store_fence(e)

    known = e.static_value(n)
    if known is None:
        e.if_else(e.emit(arith.CmpiOp(n, e.idx(STREAM_BYTES // width), "uge")), stream, plain)
    else:
        (stream if known * width >= STREAM_BYTES else plain)()


def widen_into(e: IRBuilder, src: SSAValue, acc: SSAValue) -> Operation:
    """acc = src, each element widened to acc's float32 (an accumulator that starts from what an
    output holds); returns the outermost loop."""
    with e.loop_nest(e.dims(acc)) as ivs:
        e.store(e.load_f32(src, ivs), acc, ivs)
    return ivs[0].owner.parent_op()  # type: ignore[union-attr, return-value]
