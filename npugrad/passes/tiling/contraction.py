"""Tile a three-dimensional `linalg.generic` contraction (two parallel dims, one reduction) into
local buffers: the accumulator tile stays in the accumulator level across the reduction (zeroed
there when the contraction's output was just zeroed, else copied in), the two operand tiles are
brought into the matrix levels for each step of it, in the matrix unit's layouts (A as m × k, B as
k × n: an operand stored the other way round is transposed by its copy), through the staging
level where the target has no direct path from global memory (npu-a2: gm -> l1 -> l0a/l0b).

    linalg.generic {maps (m,k,n) -> A(m,k), B(n,k), C(m,n)} ins(%a, %w) outs(%c)   // after a fill of %c with 0
becomes (npu-a2)
    %A = npu.alloc_local : memref<m x k, #npu.mem<l0a>>   %B = ... memref<k x n, #npu.mem<l0b>>
    %A1 = npu.alloc_local : memref<m x k, #npu.mem<l1>>   %B1 = ... memref<n x k, #npu.mem<l1>>
    scf.for %p0 ... { scf.for %p1 ... {                  // parallel dims, in tiles
      linalg.fill 0 -> %C                                  // %C in l0c, resident across k
      scf.for %r ... { npu.copy %a[tile] -> %A1; npu.copy %A1 -> %A
                       npu.copy %w[tile] -> %B1; npu.copy %B1 -> %B {transpose}
                       linalg.generic ins(%A, %B) outs(%C) }   // the same body, canonical maps
      npu.copy %C -> %c[tile] } }
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr, FloatAttr, MemRefType
from xdsl.dialects.linalg.ops import FillOp, GenericOp
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.rewriter import InsertPoint

from npugrad.dialect.npu import AllocLocalOp, CopyOp, level_of, local_type
from npugrad.ir import IRBuilder, enclosing_function, iterator_kinds
from npugrad.ir import operand_dims as dims_of
from npugrad.targets import Target


def _canonical(operand_dims: list[list[int]], reduction: int) -> list[list[int]]:
    """The layouts the matrix unit takes: A as [m, k], B as [k, n], the accumulator as [m, n]."""
    m = next(d for d in operand_dims[0] if d != reduction)
    n = next(d for d in operand_dims[1] if d != reduction)
    return [[m, reduction], [reduction, n], [m, n]]


def _zero_fill(gen: GenericOp, c: SSAValue) -> FillOp | None:
    """The fill with zeros of `c` right before `gen`, if there is one: the accumulator then
    starts at zero in its level instead of being copied in."""
    prev = gen.prev_op
    if not isinstance(prev, FillOp) or prev.outputs[0] is not c:
        return None
    value = prev.inputs[0].owner
    if isinstance(value, arith.ConstantOp) and isinstance(value.value, FloatAttr) and value.value.value.data == 0.0:
        return prev
    return None


def staged(target: Target, role: str) -> bool:
    """Whether tiles of `role` come from global memory through the staging level (the target
    has no direct path into the role's level)."""
    return not target.has_path(target.global_level.name, target.role(role).name) and target.has_path(
        target.global_level.name, target.role("stage").name)


def tile_contraction(gen: GenericOp, sizes: list[int], target: Target, double_buffer: bool, name: str,
                     buffers: dict[str, SSAValue], e: IRBuilder) -> None:
    """Tile `gen` with `sizes` (one per loop dimension) into the matrix_a / matrix_b /
    accumulator levels of `target`. Its local buffers, `<name>_lhs`, `_rhs`, `_acc` (and
    `_lhs_stage`, `_rhs_stage` where operands are staged), are allocated at the function's entry,
    or taken from `buffers` when a contraction of the same name was tiled before (the same
    buffers serve every copy of a contraction). Local tiles are in the matrix unit's layouts
    (_canonical): an operand stored the other way round is transposed by its copy. `e` emits
    before `gen`."""
    a, b = gen.inputs
    (c,) = gen.outputs
    zero = _zero_fill(gen, c)
    operand_dims = dims_of(gen)
    extents: dict[int, SSAValue] = {}
    for value, dims in zip((a, b, c), operand_dims):
        for axis, d in enumerate(dims):
            extents.setdefault(d, e.dim(value, axis))
    kinds = iterator_kinds(gen)
    reduction = kinds.index("reduction")
    parallel = [d for d in range(3) if d != reduction]
    canonical = _canonical(operand_dims, reduction)
    flipped = []
    for dims, canon in zip(operand_dims, canonical):
        if dims not in (canon, canon[::-1]):
            raise NotImplementedError(f"{gen.name}: operand indexed by dims {dims}, neither {canon} nor its transpose")
        flipped.append(dims != canon)
    roles = ("matrix_a", "matrix_b", "accumulator")
    entry = enclosing_function(gen).body.block

    def local(key: str, t, shape: list[int], level: str) -> SSAValue:
        if key not in buffers:
            alloc = AllocLocalOp(local_type(t.element_type, shape, level), double_buffer)
            alloc.location = gen.location
            alloc.result.name_hint = key
            e.rewriter.insert(alloc, InsertPoint.at_start(entry))
            buffers[key] = alloc.result
        return buffers[key]

    locals_, stages = [], []
    for value, dims, canon, role, suffix in zip((a, b, c), operand_dims, canonical, roles, ("lhs", "rhs", "acc")):
        t = value.type
        assert isinstance(t, MemRefType)
        locals_.append(local(f"{name}_{suffix}", t, [sizes[d] for d in canon], target.role(role).name))
        stage = role != "accumulator" and level_of(t) is None and staged(target, role)
        stages.append(local(f"{name}_{suffix}_stage", t, [sizes[d] for d in dims], target.role("stage").name)
                      if stage else None)
    if zero is not None:
        e.erase(zero)

    offsets: dict[int, SSAValue] = {}
    counts: dict[int, SSAValue] = {}

    def window(value: SSAValue, dims: list[int]):
        return e.subview(value, [offsets[d] for d in dims], [counts[d] for d in dims])

    def local_window(buf: SSAValue, dims: list[int]):
        return e.subview(buf, [0] * len(dims), [counts[d] for d in dims])

    def bring(i: int, value: SSAValue) -> SSAValue:
        """Operand i's tile into its level (through the staging level where it is staged)."""
        source = window(value, operand_dims[i])
        if stages[i] is not None:
            staging = local_window(stages[i], operand_dims[i])
            e.emit(CopyOp(source, staging))
            source = staging
        tile = local_window(locals_[i], canonical[i])
        e.emit(CopyOp(source, tile, transpose=flipped[i]))
        return tile

    def step(d: int, iv: SSAValue) -> None:
        offsets[d] = iv
        counts[d] = e.emit(arith.MinSIOp(e.idx(sizes[d]), e.emit(arith.SubiOp(extents[d], iv))))

    maps = ArrayAttr([AffineMapAttr(AffineMap(3, 0, tuple(AffineExpr.dimension(d) for d in dims))) for dims in canonical])
    with e.loop(extents[parallel[0]], step=e.idx(sizes[parallel[0]])) as i0:
        step(parallel[0], i0)
        with e.loop(extents[parallel[1]], step=e.idx(sizes[parallel[1]])) as i1:
            step(parallel[1], i1)
            c_global = window(c, operand_dims[2])
            c_local = local_window(locals_[2], canonical[2])
            if zero is not None:
                e.fill(0.0, c_local)  # the accumulator starts at zero where it stays
            else:
                e.emit(CopyOp(c_global, c_local, transpose=flipped[2]))
            with e.loop(extents[reduction], step=e.idx(sizes[reduction])) as r:
                step(reduction, r)
                a_local = bring(0, a)
                b_local = bring(1, b)
                body = gen.body.clone()
                e.emit(GenericOp([a_local, b_local], [c_local], body, maps, gen.iterator_types, doc=gen.doc))
            e.emit(CopyOp(c_local, c_global, transpose=flipped[2]))
    e.erase(gen)
