"""Tiling of the elementwise ops (`train.binary_cross_entropy_grad`, `train.apply_fused_ema_adam`):
tiles of n = tile_sizes["n"] elements, spread over the blocks, each copied into buffers of the
target's vector level, computed there by the same op, and copied back.

    train.binary_cross_entropy_grad input_x(%x : memref<?x?xf32>) input_y(%y : memref<?x?xf32>)
        dloss(%d : memref<1xf32>) -> dx(%dx : memref<?x?xf32>) {reduction = 2 : i64, tile_sizes = #train.tiles<n = 8192>}
becomes (target npu-a2)
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %input_x_tile = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>   // input_y, dx alike
    %xf = memref.collapse_shape %x [[0, 1]] : memref<?x?xf32> into memref<?xf32>      // y, dx alike
    scf.for %tile = %bid to ceildiv(N, 8192) step %nblk {     // elements [o, o + k) of the flat arrays:
      npu.copy %xf[o:k], %input_x_tile[:k]                     // o = 8192·tile, k = min(8192, N − o)
      npu.copy %yf[o:k], %input_y_tile[:k]
      train.binary_cross_entropy_grad input_x(%input_x_tile[:k] : memref<?xf32, strided<[1]>, #npu.mem<ub>>)
          input_y(%input_y_tile[:k] : ...) dloss(%d : memref<1xf32>) -> dx(%dx_tile[:k] : ...) {reduction = 2 : i64}
      npu.copy %dx_tile[:k], %dxf[o:k]
    } {train.tiles = #train.tiles<n = 8192>}

Operands with one value per element are tiled (the recipe names them; the footprint model counts
them); a reduced dloss, `step` and `hyperparameters` are one to six
values every tile reads from global memory, where they are. The states of the Adam step are read
and written: copied in and out. Contiguous operands are tiled as one flat array (N-D collapsed,
rank 0 expanded to one element); when one is strided, tiles are pieces of the innermost
dimension, one row of the outer dimensions at a time. Tiles are disjoint and every element is
computed as untiled, so results are bit-identical for any tile size and any number of blocks.

Mean BCE: the op divides dloss by its own element count, a tile's, so its tiles cannot be the
op; nor can they be a sum-reduced op fed u = dloss/N, which would round u to a float16/bfloat16
dloss. The float32 u is computed once per block as the untiled lowering does, and each tile runs
that lowering's element loop (train_to_loops.bce.lower_elements) on the local buffers: the same
operations on every element, so tiled and untiled results are identical bit for bit. The recipe
says how a tile is computed (`compute`), after what is prepared once per block (`prepare`).

The same module sizes the tiles (choose_tile_sizes, footprint) and spreads the untiled op over
cores (distribute_elementwise).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

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

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, budget, clamp, round_down, vector_elements
from npugrad.dialect import TrainOp
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import AllocLocalOp, CopyOp, element_bytes, level_of, local_type
from npugrad.ir import IRBuilder, static_shape
from npugrad.passes.tiling.blocks import LINE, MIN_ELEMENTS, block_part, block_range, record_tile_sizes, tile_sizes
from npugrad.targets import Target

# Beyond this many elements a tile buys nothing more and only wastes local memory.
MAX_ELEMENTWISE_TILE = 1 << 16

# prepare(builder) -> state, run once per block before the tiles; compute(builder, tiles, state)
# computes the op on one tile (operand name -> local or global window).
Prepare = Callable[[IRBuilder], object]
Compute = Callable[[IRBuilder, dict[str, SSAValue], object], None]


def flat(e: IRBuilder, ref: SSAValue) -> SSAValue:
    """A contiguous memref as one dimension."""
    t = ref.type
    assert isinstance(t, MemRefType)
    shape = t.get_shape()
    if len(shape) == 1:
        return ref
    if not shape:  # a single element, whatever the layout says
        layout = t.layout if isinstance(t.layout, NoneAttr) else StridedLayoutAttr([1], t.get_offset())
        return e.emit(
            memref.ExpandShapeOp.build(
                operands=[ref, []],
                result_types=[MemRefType(t.element_type, [1], layout)],
                properties={"reassociation": ArrayAttr([]), "static_output_shape": DenseArrayBase.from_list(i64, [1])},
            )
        )
    return e.collapse(ref)


def _row_window(e: IRBuilder, ref: SSAValue, row: list[SSAValue], offset: SSAValue, size: SSAValue) -> SSAValue:
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
    return e.emit(memref.SubviewOp.get(ref, offsets, sizes, strides, reduced))


def _delinearize(e: IRBuilder, linear: SSAValue, dims: list[SSAValue]) -> list[SSAValue]:
    """Row-major indices of `linear` in an array of shape `dims`."""
    indices = []
    for d in reversed(dims[1:]):
        indices.append(e.emit(arith.RemUIOp(linear, d)))
        linear = e.emit(arith.DivUIOp(linear, d))
    return [linear, *reversed(indices)]


def tile_op(op: TrainOp, tiles: dict[str, SSAValue]) -> TrainOp:
    """The op itself on the tiles (operands not tiled stay global), without its tile sizes: it
    is a tile instance that convert-train-to-loops lowers as any other."""
    properties = {k: v for k, v in op.properties.items() if k not in ("tile_sizes", "operandSegmentSizes")}
    order = [name for name, _ in type(op).get_irdl_definition().operands]
    return type(op).build(operands=[tiles.get(n, getattr(op, n)) for n in order], properties=properties)


def same_op(op: TrainOp) -> Compute:
    """A tile is computed by the op itself on the tile's windows."""
    return lambda e, tiles, _: e.emit(tile_op(op, tiles))


def _bytes(ref: SSAValue) -> int:
    return element_bytes(ref.type.element_type)  # type: ignore[attr-defined]


def choose_tile_sizes(op: TrainOp, names: Sequence[str], target: Target) -> dict[str, int]:
    """n elements of every tiled operand fit the vector level. n is a multiple of the level's
    alignment (so no tile is padded) and of a float32 vector, or all elements of a smaller
    static shape."""
    per_element = sum(_bytes(getattr(op, name)) for name in names)
    n = budget(target, "vector") // max(per_element, 1)
    multiple = math.lcm(target.role("vector").alignment, vector_elements(target, 4))
    shape = static_shape(getattr(op, names[0]).type)
    return {"n": clamp(round_down(min(n, MAX_ELEMENTWISE_TILE), multiple), static_product(shape))}


def footprint(op: TrainOp, names: Sequence[str], sizes: dict[str, int], target: Target) -> list[TileBuffer]:
    """One n-element tile per tiled operand, in the vector level, double-buffered where the target is."""
    return [TileBuffer("vector", sizes["n"] * b, target.double_buffer) for _, _, b in _operands(op, tuple(names))[1]]


@lru_cache(maxsize=64)
def _operands(op: TrainOp, names: tuple[str, ...]) -> tuple[int, list[tuple[bool, bool, int]]]:
    """(elements of a tiled operand, 1 << 20 when dynamic; (read?, written?, element bytes) per
    operand: an operand updated in place is both), read once per op (xDSL's accessors are slow
    for a search's thousands of calls)."""
    total = static_product(static_shape(getattr(op, names[0]).type)) or 1 << 20
    inputs, outputs = op.inputs(), op.outputs()
    return total, [(name in inputs, name in outputs, _bytes(getattr(op, name))) for name in names]


# The model's vector work for an elementwise op: about this many vector operations per element
# and tiled operand (the report counts a tile computed by the op itself the same way).
VECTOR_OPS_PER_ELEMENT = 4


def work(elements: int, names: Sequence[str]) -> int:
    """Vector operations for `elements` elements of an op whose tiled operands are `names`."""
    return elements * VECTOR_OPS_PER_ELEMENT * len(names)


def load(op: TrainOp, names: Sequence[str], sizes: dict[str, int], target: Target) -> list[Load]:
    """The busiest core's tiles (dealt round-robin): each read operand's tile copied in, each
    written one's out (both for one updated in place); about 4 vector operations per element and
    operand."""
    total, operands = _operands(op, tuple(names))
    n = max(1, min(sizes["n"], total))
    tiles = -(-total // n)
    mine = -(-tiles // target.cores)
    g, vec = target.global_level.name, target.role("vector").name
    one = Load()
    for read, written, b in operands:
        if read:
            one.add_move((g, vec), mine * n * b, mine)
        if written:
            one.add_move((vec, g), mine * n * b, mine)
    one.add_work("vector", "f32", work(mine * n, names), mine, 0)
    one.total_work[("vector", "f32")] = work(total, names)
    one.global_bytes = total * sum(b * (read + written) for read, written, b in operands)
    one.extents = {"n": total}
    return [one]


def tile_elementwise(op: TrainOp, target: Target, e: IRBuilder, names: Sequence[str], prepare: Prepare,
                     compute: Compute) -> None:
    refs = {name: getattr(op, name) for name in names}
    if any(level_of(r.type) is not None for r in refs.values()):
        return  # already a tile instance, on local memory
    reads = [n for n in names if n in op.inputs()]
    writes = [n for n in names if n in op.outputs()]
    level = target.role("vector").name
    first = refs[names[0]]  # every tiled operand has its shape
    shape = first.type.get_shape()
    contiguous = all(r.type.get_num_dims() <= 1 or isinstance(r.type.layout, NoneAttr) for r in refs.values())
    # The extent cut into tiles: all elements when contiguous, else the innermost dimension.
    extent = (DYNAMIC_INDEX if DYNAMIC_INDEX in shape else math.prod(shape)) if contiguous else shape[-1]
    sizes = tile_sizes(op, {"n": None if extent == DYNAMIC_INDEX else extent})
    n = sizes["n"]

    bid, nblk = block_range(e)
    buffers = {}
    for name in names:
        buf = e.emit(AllocLocalOp(local_type(refs[name].type.element_type, [n], level), target.double_buffer))
        buf.name_hint = f"{name}_tile"
        buffers[name] = buf
    state = prepare(e)
    if contiguous:
        outer, inner = [], e.idx(extent) if extent != DYNAMIC_INDEX else e.numel(first)
        refs = {name: flat(e, r) for name, r in refs.items()}
    else:
        outer, inner = e.dims(first)[:-1], e.dim(first, len(shape) - 1)
    per_row = e.idx(-(-extent // n)) if extent != DYNAMIC_INDEX else e.emit(arith.CeilDivUIOp(inner, e.idx(n)))
    # Tiles numbered row-major over (row of the outer dimensions, piece of the innermost).
    count = e.emit(arith.MuliOp(e.product(outer), per_row)) if outer else per_row
    with e.loop(count, lb=bid, step=nblk) as tile:
        record_tile_sizes(e, tile, sizes)
        row: list[SSAValue] = []
        piece = tile
        if outer:
            row = _delinearize(e, e.emit(arith.DivUIOp(tile, per_row)), outer)
            piece = e.emit(arith.RemUIOp(tile, per_row))
        offset = e.emit(arith.MuliOp(piece, e.idx(n)))
        size = e.emit(arith.MinSIOp(e.idx(n), e.emit(arith.SubiOp(inner, offset))))
        globals_ = {name: _row_window(e, refs[name], row, offset, size) for name in names}
        locals_ = {name: e.subview(buffers[name], [0], [size]) for name in names}
        for name in reads:
            e.emit(CopyOp(globals_[name], locals_[name]))
        compute(e, locals_, state)
        for name in writes:
            e.emit(CopyOp(locals_[name], globals_[name]))
    e.erase(op)


def _too_small(ref: SSAValue) -> bool:
    """Static sizes with less than two blocks' worth of elements."""
    n = static_product(static_shape(ref.type))  # type: ignore[arg-type]
    return n is not None and n < 2 * MIN_ELEMENTS


def distribute_elementwise(op: TrainOp, e: IRBuilder, names: Sequence[str], prepare: Prepare,
                           compute: Compute) -> bool:
    """One contiguous range of the flat arrays per block (whole 64-element lines); False (left on
    one block) when an operand is strided or the arrays are too small to be worth splitting."""
    refs = {name: getattr(op, name) for name in names}
    if any(r.type.get_num_dims() > 1 and not isinstance(r.type.layout, NoneAttr) for r in refs.values()):
        return False
    if _too_small(refs[names[0]]):
        return False
    bid, nblk = block_range(e)
    state = prepare(e)
    flats = {name: flat(e, r) for name, r in refs.items()}
    n = e.numel(flats[names[0]])
    with block_part(e, bid, nblk, n, e.idx(MIN_ELEMENTS), LINE) as (lo, size):
        windows = {name: e.subview(r, [lo], [size]) for name, r in flats.items()}
        compute(e, windows, state)
    e.erase(op)
    return True
