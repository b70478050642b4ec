"""Tiling of the fused linear cross-entropy gradient (the nest fuse-linear-cross-entropy-grad
built, marked `grad.tile_sizes = {bt, v, h}`): each of its three contractions is tiled into
the matrix levels (operands) and the accumulator level (float32 results), H in chunks of `h`;
the tile-sized scratch (logits, G, saved target logits) moves into the vector level.

    linalg.generic {doc = "GEMM 1: ..."} ins(%x_t, %w_packed) outs(%z_t)      // %z_t in a heap tile
becomes
    %A = npu.alloc_local : memref<bt x h x T, #npu.mem<l0a>> ...               // see contraction.py
    scf.for %h0 ... { npu.copy ...; linalg.generic ins(%A, %B) outs(%C); ... }  // %z_t in #npu.mem<ub>

The vocabulary loop is not spread over blocks yet: the input gradient sums over every
vocabulary tile, and splitting that sum across cores needs a cross-core reduction (workspace
partials summed in a fixed order) that this pass does not build. The kernel runs as one block.
"""

from __future__ import annotations

from xdsl.dialects import func, memref, scf
from xdsl.dialects.builtin import MemRefType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.rewriter import InsertPoint, Rewriter

from npugrad.dialect.npu import AllocLocalOp, local_type
from npugrad.lowering.emit import LOOP_DIMS_ATTR
from npugrad.passes.fuse_linear_cross_entropy_grad import TILE_ATTR, TILE_BUFFER_ATTR
from npugrad.passes.tiling.contraction import tile_contraction
from npugrad.targets import Target


def _promote(alloc: memref.AllocOp, target: Target) -> None:
    """A heap tile buffer -> a local buffer of the level its role names; its dealloc goes."""
    role = alloc.attributes[TILE_BUFFER_ATTR].data  # type: ignore[attr-defined]
    t = alloc.memref.type
    assert isinstance(t, MemRefType)
    local = AllocLocalOp(local_type(t.element_type, t.get_shape(), target.role(role).name), target.double_buffer)
    local.location = alloc.location
    local.result.name_hint = alloc.memref.name_hint
    Rewriter.insert_op(local, InsertPoint.before(alloc))
    for use in list(alloc.memref.uses):
        if isinstance(use.operation, memref.DeallocOp):
            Rewriter.erase_op(use.operation)
    alloc.memref.replace_all_uses_with(local.result)
    Rewriter.erase_op(alloc)
    _retype_views(local.result)


def _retype_views(buffer) -> None:
    """Views of a buffer that moved to a local level live there too."""
    space = buffer.type.memory_space
    for use in list(buffer.uses):
        view = use.operation
        if isinstance(view, memref.SubviewOp) and view.source is buffer:
            t = view.result.type
            moved = Rewriter.replace_value_with_new_type(view.result, MemRefType(t.element_type, t.get_shape(), t.layout, space))
            _retype_views(moved)


def tile_fused_flce(nest: scf.ForOp, target: Target) -> None:
    tiles = {k: v.value.data for k, v in nest.attributes[TILE_ATTR].data.items()}  # type: ignore[attr-defined]
    for gen in [o for o in nest.walk() if isinstance(o, GenericOp) and LOOP_DIMS_ATTR in o.attributes]:
        names = [d.data for d in gen.attributes[LOOP_DIMS_ATTR].data]  # type: ignore[attr-defined]
        gemm = gen.doc.data.split(":")[0].lower().replace(" ", "") if gen.doc else "gemm"  # "gemm1"
        tile_contraction(gen, [tiles[n] for n in names], target, target.double_buffer, gemm)
    f = nest.parent_op()
    while f is not None and not isinstance(f, func.FuncOp):
        f = f.parent_op()
    assert f is not None
    for alloc in [o for o in f.walk() if isinstance(o, memref.AllocOp) and TILE_BUFFER_ATTR in o.attributes]:
        _promote(alloc, target)
