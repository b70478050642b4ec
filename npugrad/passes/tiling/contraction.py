"""Tile a three-dimensional `linalg.generic` contraction (two parallel dims, one reduction) into
local buffers: the accumulator tile stays in the accumulator level across the reduction, the
two operand tiles are brought into the matrix levels for each step of it.

    linalg.generic {maps (d0,d1,d2) -> A(..), B(..), C(..)} ins(%a, %b) outs(%c)
becomes
    %A = npu.alloc_local : memref<..., #npu.mem<l0a>>  (same for B in l0b, C in l0c)
    scf.for %p0 ... { scf.for %p1 ... {                 // parallel dims, in tiles
      npu.copy %c[tile] -> %C
      scf.for %r ... { npu.copy %a[tile] -> %A; npu.copy %b[tile] -> %B
                       linalg.generic ins(%A, %B) outs(%C) }   // the same body
      npu.copy %C -> %c[tile] } }
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import SSAValue
from xdsl.rewriter import InsertPoint

from npugrad.dialect.npu import AllocLocalOp, CopyOp, local_type
from npugrad.ir import IRBuilder, enclosing_function
from npugrad.targets import Target


def _dims_of(gen: GenericOp) -> list[list[int]]:
    """For each operand, the loop dimension each of its indices walks."""
    return [[r.position for r in m.data.results] for m in gen.indexing_maps.data]  # type: ignore[attr-defined]


def tile_contraction(gen: GenericOp, sizes: list[int], target: Target, double_buffer: bool, name: str,
                     buffers: dict[str, SSAValue], e: IRBuilder) -> None:
    """Tile `gen` with `sizes` (one per loop dimension) into the matrix_a / matrix_b /
    accumulator levels of `target`. Its local buffers, `<name>_lhs`, `_rhs`, `_acc`, are
    allocated at the function's entry, or taken from `buffers` when a contraction of the same
    name was tiled before (the same buffers serve every copy of a contraction). `e` emits before
    `gen`."""
    a, b = gen.inputs
    (c,) = gen.outputs
    operand_dims = _dims_of(gen)
    extents: dict[int, SSAValue] = {}
    for value, dims in zip((a, b, c), operand_dims):
        for axis, d in enumerate(dims):
            extents.setdefault(d, e.dim(value, axis))
    kinds = [str(it.data) for it in gen.iterator_types.data]  # type: ignore[attr-defined]
    reduction = kinds.index("reduction")
    parallel = [d for d in range(3) if d != reduction]
    roles = ("matrix_a", "matrix_b", "accumulator")
    locals_ = []
    entry = enclosing_function(gen).body.block
    for value, dims, role, suffix in zip((a, b, c), operand_dims, roles, ("lhs", "rhs", "acc")):
        key = f"{name}_{suffix}"
        if key not in buffers:
            t = value.type
            assert isinstance(t, MemRefType)
            alloc = AllocLocalOp(local_type(t.element_type, [sizes[d] for d in dims], target.role(role).name), double_buffer)
            alloc.location = gen.location
            alloc.result.name_hint = key
            e.rewriter.insert(alloc, InsertPoint.at_start(entry))
            buffers[key] = alloc.result
        locals_.append(buffers[key])

    offsets: dict[int, SSAValue] = {}
    counts: dict[int, SSAValue] = {}

    def window(value: SSAValue, dims: list[int]):
        return e.subview(value, [offsets[d] for d in dims], [counts[d] for d in dims])

    def local_window(buf: SSAValue, dims: list[int]):
        return e.subview(buf, [0] * len(dims), [counts[d] for d in dims])

    def step(d: int, iv: SSAValue) -> None:
        offsets[d] = iv
        counts[d] = e.emit(arith.MinSIOp(e.idx(sizes[d]), e.emit(arith.SubiOp(extents[d], iv))))

    with e.loop(extents[parallel[0]], step=e.idx(sizes[parallel[0]])) as i0:
        step(parallel[0], i0)
        with e.loop(extents[parallel[1]], step=e.idx(sizes[parallel[1]])) as i1:
            step(parallel[1], i1)
            c_global = window(c, operand_dims[2])
            c_local = local_window(locals_[2], operand_dims[2])
            e.emit(CopyOp(c_global, c_local))
            with e.loop(extents[reduction], step=e.idx(sizes[reduction])) as r:
                step(reduction, r)
                a_local = local_window(locals_[0], operand_dims[0])
                b_local = local_window(locals_[1], operand_dims[1])
                e.emit(CopyOp(window(a, operand_dims[0]), a_local))
                e.emit(CopyOp(window(b, operand_dims[1]), b_local))
                body = gen.body.clone()
                e.emit(GenericOp([a_local, b_local], [c_local], body,
                                gen.indexing_maps, gen.iterator_types, doc=gen.doc))
            e.emit(CopyOp(c_local, c_global))
    e.erase(gen)
