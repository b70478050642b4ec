"""Tiling of the fused linear cross-entropy gradient (the nest fuse-linear-cross-entropy-grad
built, marked `grad.tile_sizes = {bt, v, h}`): each of its three contractions is tiled into
the matrix levels (operands) and the accumulator level (float32 results), H in chunks of `h`;
the tile-sized scratch (logits, G, saved target logits) moves into the vector level.

    linalg.generic {doc = "GEMM 1: ..."} ins(%x_t, %w_packed) outs(%z_t)      // %z_t in a heap tile
becomes
    %A = npu.alloc_local : memref<bt x h x T, #npu.mem<l0a>> ...               // see contraction.py
    scf.for %h0 ... { npu.copy ...; linalg.generic ins(%A, %B) outs(%C); ... }  // %z_t in #npu.mem<ub>

Spreading the nest over cores: the weight gradient of a vocabulary tile sums over all tokens,
the input gradient of a token tile over all vocabulary tiles, so whichever loop is split, one of
the two sums would cross cores. Instead the nest runs twice, in two phases that write disjoint
outputs: phase A spreads the vocabulary tiles over the blocks and computes dW (GEMM 2 dropped),
phase B spreads the token tiles and computes dX (GEMM 3 dropped). No block waits for another,
every sum runs in the same order whatever the number of blocks (bit-identical results for any
thread count), and no workspace is needed; the price is GEMM 1 and the exponentials done twice.
"""

from __future__ import annotations

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import MemRefType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.rewriter import InsertPoint, Rewriter

from npugrad.dialect.npu import AllocLocalOp, BlockDimOp, BlockIdxOp, local_type
from npugrad.lowering.emit import LOOP_DIMS_ATTR, Emitter
from npugrad.passes.fuse_linear_cross_entropy_grad import ROLE_ATTR, TILE_ATTR, TILE_BUFFER_ATTR
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


def _role(op) -> str | None:
    attr = op.attributes.get(ROLE_ATTR)
    return attr.data if attr is not None else None  # type: ignore[attr-defined]


def _spread(loop: scf.ForOp, bid, nblk) -> None:
    """for i = lb to ub step s  →  for i = lb + bid·s to ub step nblk·s (block-cyclic tiles)."""
    e = Emitter.before(loop)
    first = e.muli(bid, loop.step)
    starts_at_zero = isinstance(loop.lb.owner, arith.ConstantOp) and loop.lb.owner.value.value.data == 0
    lb = first if starts_at_zero else e.addi(loop.lb, first)
    step = e.muli(nblk, loop.step)
    loop.operands = [lb, loop.ub, step, *loop.iter_args]


def _token_rows(e: Emitter, bid, nblk, acc, tb: int, body) -> None:
    """body(rows of acc) for each token tile of this block."""
    bt, h = e.dim(acc, 0), e.dim(acc, 1)
    with e.loop(bt, lb=e.muli(bid, e.idx(tb)), step=e.muli(nblk, e.idx(tb))) as t0:
        body(t0, e.minsi(e.idx(tb), e.subi(bt, t0)), h)


def split_over_blocks(nest: scf.ForOp, tiles: dict[str, int]) -> scf.ForOp:
    """Make `nest` phase A and return phase B (see the module docstring)."""
    top = nest.parent
    e = Emitter.before(nest)
    bid, nblk = e.add(BlockIdxOp()), e.add(BlockDimOp())
    phase_b = nest.clone()
    Rewriter.insert_op(phase_b, InsertPoint.after(nest))
    for gen in [o for o in nest.walk() if isinstance(o, GenericOp) and o.doc and o.doc.data.startswith("GEMM 2")]:
        Rewriter.erase_op(gen)
    for op in list(phase_b.walk()):
        gemm3 = isinstance(op, GenericOp) and op.doc is not None and op.doc.data.startswith("GEMM 3")
        if gemm3 or _role(op) in ("weight_grad_init", "weight_grad_final"):
            Rewriter.erase_op(op)
    _spread(nest, bid, nblk)
    _spread(next(o for o in phase_b.walk() if _role(o) == "token_loop"), bid, nblk)

    # dX is zeroed and rounded per block, on that block's token rows only.
    for op in [o for o in top.ops if _role(o) in ("input_grad_init", "input_grad_final")]:
        if _role(op) == "input_grad_init":
            acc = op.outputs[0]
            at = Emitter.before(phase_b)
            _token_rows(at, bid, nblk, acc, tiles["bt"], lambda t0, n, h, at=at, acc=acc: at.fill(0.0, at.subview(acc, [t0, 0], [n, h])))
        else:
            load = next(o for o in op.walk() if isinstance(o, memref.LoadOp))
            store = next(o for o in op.walk() if isinstance(o, memref.StoreOp))
            acc, out = load.memref, store.memref
            at = Emitter.before(op)

            def round_rows(t0, n, h, at=at, acc=acc, out=out):
                src, dst = at.subview(acc, [t0, 0], [n, h]), at.subview(out, [t0, 0], [n, h])
                with at.loop_nest([n, h]) as ivs:
                    at.store_f32(at.load(src, ivs), dst, ivs)

            _token_rows(at, bid, nblk, acc, tiles["bt"], round_rows)
        Rewriter.erase_op(op)
    return phase_b


def nest_tiles(nest: scf.ForOp) -> dict[str, int]:
    """The tile sizes fuse-linear-cross-entropy-grad put on its nest."""
    return {k: v.value.data for k, v in nest.attributes[TILE_ATTR].data.items()}  # type: ignore[attr-defined]


def tile_fused_flce(nest: scf.ForOp, target: Target) -> None:
    tiles = nest_tiles(nest)
    phase_b = split_over_blocks(nest, tiles)
    buffers: dict = {}
    for gen in [o for n in (nest, phase_b) for o in n.walk() if isinstance(o, GenericOp) and LOOP_DIMS_ATTR in o.attributes]:
        names = [d.data for d in gen.attributes[LOOP_DIMS_ATTR].data]  # type: ignore[attr-defined]
        gemm = gen.doc.data.split(":")[0].lower().replace(" ", "") if gen.doc else "gemm"  # "gemm1"
        tile_contraction(gen, [tiles[n] for n in names], target, target.double_buffer, gemm, buffers)
    f = nest.parent_op()
    while f is not None and not isinstance(f, func.FuncOp):
        f = f.parent_op()
    assert f is not None
    for alloc in [o for o in f.walk() if isinstance(o, memref.AllocOp) and TILE_BUFFER_ATTR in o.attributes]:
        _promote(alloc, target)
