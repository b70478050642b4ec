"""Tiling of the elementwise ops, `grad.binary_cross_entropy_grad` and `grad.apply_fused_ema_adam`:
tiles of n = tile_sizes["n"] elements, spread over the blocks, each copied into buffers of the
target's vector level, computed there by the same op, and copied back.

    grad.binary_cross_entropy_grad input_x(%x : memref<?x?xf32>) input_y(%y : memref<?x?xf32>)
        dloss(%d : memref<1xf32>) -> dx(%dx : memref<?x?xf32>) {reduction = 2 : i64, tile_sizes = {n = 8192 : i64}}
becomes (target npu-a2)
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %input_x_tile = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>   // input_y, dx alike
    %xf = memref.collapse_shape %x [[0, 1]] : memref<?x?xf32> into memref<?xf32>      // y, dx alike
    scf.for %tile = %bid to ceildiv(N, 8192) step %nblk {     // elements [o, o + k) of the flat arrays:
      npu.copy %xf[o:k], %input_x_tile[:k]                     // o = 8192·tile, k = min(8192, N − o)
      npu.copy %yf[o:k], %input_y_tile[:k]
      grad.binary_cross_entropy_grad input_x(%input_x_tile[:k] : memref<?xf32, strided<[1]>, #npu.mem<ub>>)
          input_y(%input_y_tile[:k] : ...) dloss(%d : memref<1xf32>) -> dx(%dx_tile[:k] : ...) {reduction = 2 : i64}
      npu.copy %dx_tile[:k], %dxf[o:k]
    } {tile_sizes = {n = 8192 : i64}}

Operands with one value per element are tiled (choose_tile_sizes.elementwise_tiled_operands,
which its footprint model counts); a reduced dloss, `step` and `hyperparameters` are one to six
values every tile reads from global memory, where they are. The states of the Adam step are read
and written: copied in and out. Contiguous operands are tiled as one flat array (N-D collapsed,
rank 0 expanded to one element); when one is strided, tiles are pieces of the innermost
dimension, one row of the outer dimensions at a time. Tiles are disjoint and every element is
computed as untiled, so results are bit-identical for any tile size and any number of blocks.

Mean BCE: the op divides dloss by its own element count, a tile's, so its tiles cannot be the
op; nor can they be a sum-reduced op fed u = dloss/N, which would round u to a float16/bfloat16
dloss. The float32 u is computed once per block as the untiled lowering does, and each tile runs
that lowering's element loop (grad_to_loops.bce.lower_elements) on the local buffers: the same
operations on every element, so tiled and untiled results are identical bit for bit.
"""

from __future__ import annotations

import math

from xdsl.dialects import arith, memref
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DenseArrayBase,
    MemRefType,
    NoneAttr,
    StridedLayoutAttr,
    i64,
)
from xdsl.ir import SSAValue
from xdsl.rewriter import Rewriter

from npugrad.dialect import ApplyFusedEmaAdamOp, BinaryCrossEntropyGradOp
from npugrad.dialect.npu import AllocLocalOp, CopyOp, level_of, local_type
from npugrad.lowering.emit import Emitter
from npugrad.lowering.grad_to_loops.bce import lower_elements, upstream
from npugrad.passes.choose_tile_sizes import elementwise_tiled_operands
from npugrad.passes.tiling.blocks import block_range, record_tile_sizes, tile_sizes
from npugrad.passes.tiling.registry import TILINGS
from npugrad.targets import Target

ElementwiseOp = BinaryCrossEntropyGradOp | ApplyFusedEmaAdamOp


def flat(e: Emitter, ref: SSAValue) -> SSAValue:
    """A contiguous memref as one dimension."""
    t = ref.type
    assert isinstance(t, MemRefType)
    shape = t.get_shape()
    if len(shape) == 1:
        return ref
    if not shape:  # a single element, whatever the layout says
        layout = t.layout if isinstance(t.layout, NoneAttr) else StridedLayoutAttr([1], t.get_offset())
        return e.add(
            memref.ExpandShapeOp.build(
                operands=[ref, []],
                result_types=[MemRefType(t.element_type, [1], layout)],
                properties={"reassociation": ArrayAttr([]), "static_output_shape": DenseArrayBase.from_list(i64, [1])},
            )
        )
    return e.collapse(ref)


def _row_window(e: Emitter, ref: SSAValue, row: list[SSAValue], offset: SSAValue, size: SSAValue) -> SSAValue:
    """ref[*row, offset:offset + size] as a 1-D view (a rank-reducing subview)."""
    if not row:
        return e.subview(ref, [offset], [size])
    rank = len(row) + 1
    offsets, sizes, strides = [*row, offset], [1] * len(row) + [size], [1] * rank
    full = memref.SubviewOp.infer_result_type(ref.type, offsets, sizes, strides)  # type: ignore[arg-type]
    layout = full.layout
    assert isinstance(layout, StridedLayoutAttr)
    reduced = MemRefType(
        full.element_type, [full.get_shape()[-1]],
        StridedLayoutAttr([layout.get_strides()[-1]], layout.get_offset()), full.memory_space,
    )
    return e.add(memref.SubviewOp.get(ref, offsets, sizes, strides, reduced))


def _delinearize(e: Emitter, linear: SSAValue, dims: list[SSAValue]) -> list[SSAValue]:
    """Row-major indices of `linear` in an array of shape `dims`."""
    indices = []
    for d in reversed(dims[1:]):
        indices.append(e.add(arith.RemUIOp(linear, d)))
        linear = e.add(arith.DivUIOp(linear, d))
    return [linear, *reversed(indices)]


def tile_op(op: ElementwiseOp, tiles: dict[str, SSAValue]) -> ElementwiseOp:
    """The op itself on the tiles (operands not tiled stay global), without its tile sizes: it
    is a tile instance that convert-grad-to-loops lowers as any other."""
    properties = {k: v for k, v in op.properties.items() if k not in ("tile_sizes", "operandSegmentSizes")}
    order = [name for name, _ in type(op).get_irdl_definition().operands]
    return type(op).build(operands=[tiles.get(n, getattr(op, n)) for n in order], properties=properties)


def tile_elementwise(op: ElementwiseOp, target: Target) -> None:
    names = elementwise_tiled_operands(op)
    refs = {name: getattr(op, name) for name in names}
    if any(level_of(r.type) is not None for r in refs.values()):
        return  # already a tile instance, on local memory
    in_place = isinstance(op, ApplyFusedEmaAdamOp)
    reads = [n for n in names if in_place or n in op.INPUTS]
    writes = [n for n in names if n in op.OUTPUTS]
    mean_bce = isinstance(op, BinaryCrossEntropyGradOp) and op.prop_int("reduction") == 1
    level = target.role("vector").name
    first = refs[names[0]]  # every tiled operand has its shape
    shape = first.type.get_shape()
    contiguous = all(r.type.get_num_dims() <= 1 or isinstance(r.type.layout, NoneAttr) for r in refs.values())
    # The extent cut into tiles: all elements when contiguous, else the innermost dimension.
    extent = (DYNAMIC_INDEX if DYNAMIC_INDEX in shape else math.prod(shape)) if contiguous else shape[-1]
    sizes = tile_sizes(op, {"n": None if extent == DYNAMIC_INDEX else extent})
    n = sizes["n"]

    e = Emitter.before(op)
    bid, nblk = block_range(e)
    buffers = {}
    for name in names:
        buf = e.add(AllocLocalOp(local_type(refs[name].type.element_type, [n], level), target.double_buffer))
        buf.name_hint = f"{name}_tile"
        buffers[name] = buf
    u = upstream(op, e) if mean_bce else None
    if contiguous:
        outer, inner = [], e.idx(extent) if extent != DYNAMIC_INDEX else e.numel(first)
        refs = {name: flat(e, r) for name, r in refs.items()}
    else:
        outer, inner = e.dims(first)[:-1], e.dim(first, len(shape) - 1)
    per_row = e.idx(-(-extent // n)) if extent != DYNAMIC_INDEX else e.add(arith.CeilDivUIOp(inner, e.idx(n)))
    # Tiles numbered row-major over (row of the outer dimensions, piece of the innermost).
    count = e.muli(e.product(outer), per_row) if outer else per_row
    with e.loop(count, lb=bid, step=nblk) as tile:
        record_tile_sizes(tile, sizes)
        row: list[SSAValue] = []
        piece = tile
        if outer:
            row = _delinearize(e, e.add(arith.DivUIOp(tile, per_row)), outer)
            piece = e.add(arith.RemUIOp(tile, per_row))
        offset = e.muli(piece, e.idx(n))
        size = e.minsi(e.idx(n), e.subi(inner, offset))
        globals_ = {name: _row_window(e, refs[name], row, offset, size) for name in names}
        locals_ = {name: e.subview(buffers[name], [0], [size]) for name in names}
        for name in reads:
            e.add(CopyOp(globals_[name], locals_[name]))
        if mean_bce:
            lower_elements(e, locals_["input_x"], locals_["input_y"], u, op.dloss, locals_.get("weight"), locals_["dx"])
        else:
            e.add(tile_op(op, locals_))
        for name in writes:
            e.add(CopyOp(locals_[name], globals_[name]))
    Rewriter.erase_op(op)


TILINGS[BinaryCrossEntropyGradOp] = tile_elementwise
TILINGS[ApplyFusedEmaAdamOp] = tile_elementwise
