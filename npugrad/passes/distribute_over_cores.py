"""distribute-over-cores: with no target to tile for, the code still runs on every core. Each op's
work is cut into one contiguous range per block (npu.block_idx of npu.block_dim; the runtime
runs one block per thread), computed in place on global memory — on a CPU the caches are the
local levels, so nothing is copied.

    grad.binary_cross_entropy_grad input_x(%x : memref<?xf32>) ... -> dx(%dx : memref<?xf32>)
becomes
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %active = min(%nblk, ceildiv(N, 65536))                 // blocks worth starting
    %chunk = ceildiv(ceildiv(N, %active), 64)·64            // whole cache lines per block
    %lo = %bid·%chunk
    scf.if %lo < N {
      grad.binary_cross_entropy_grad input_x(%x[%lo : min(%chunk, N − %lo)]) ... -> dx(%dx[...])
    }

- BCE and EMA-Adam: elements of the flat arrays (contiguous operands; a strided one keeps the
  op on one block). Mean BCE divides by the whole N, once per block, as its tiling does.
- NLL backward (2-D self): rows; each block zeroes and fills its own rows of `out`.
- The fused linear cross-entropy gradient: the two phases of passes/tiling/flce.py (vocabulary
  tiles → dW, then token tiles → dX) when more than one block runs and the work is large;
  otherwise block 0 runs the one-phase nest. Either way every sum runs in the same order, so
  results are bit-identical for any number of threads.
- Embedding backward stays on one block (its counting sort spans all indices).

Only a function holding exactly one such op is distributed: blocks do not wait for each other,
so two ops where one reads what the other writes must not be split. Ops whose static sizes are
below one block's worth of work are left alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, ModuleOp, NoneAttr, StringAttr
from xdsl.ir import Block, Operation, Region, SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import InsertPoint, Rewriter
from xdsl.traits import is_side_effect_free

from npugrad.dialect import ApplyFusedEmaAdamOp, BinaryCrossEntropyGradOp, GradOp, NLLLossBackwardOp
from npugrad.lowering.emit import Emitter
from npugrad.lowering.grad_to_loops.bce import lower_elements, upstream
from npugrad.passes.choose_tile_sizes import elementwise_tiled_operands
from npugrad.passes.fuse_linear_cross_entropy_grad import ROLE_ATTR, TILE_ATTR
from npugrad.passes.tiling.blocks import block_range
from npugrad.passes.tiling.elementwise import _flat, _tile_op
from npugrad.passes.tiling.flce import split_over_blocks

MIN_ELEMENTS = 1 << 16  # per block, for the memory-bound ops: below this a thread costs more than it saves
MIN_LOGITS = 1 << 16  # the linear cross-entropy gradient (BT·V): below this a second phase costs more
LINE = 64  # elements per block range are a multiple of this: no cache line is shared by two blocks


def _static_numel(ref: SSAValue) -> int | None:
    shape = ref.type.get_shape()  # type: ignore[attr-defined]
    return None if DYNAMIC_INDEX in shape else math.prod(shape)


def _range(e: Emitter, bid: SSAValue, nblk: SSAValue, n: SSAValue, min_units: SSAValue, line: int):
    """(first, count) of this block's range of [0, n): as many blocks as have `min_units` each,
    counts a multiple of `line`; `first < n` says whether the block has any."""
    active = e.minsi(nblk, e.add(arith.MaxUIOp(e.idx(1), e.add(arith.CeilDivUIOp(n, min_units)))))
    per_block = e.add(arith.CeilDivUIOp(n, active))
    count = e.muli(e.add(arith.CeilDivUIOp(per_block, e.idx(line))), e.idx(line)) if line > 1 else per_block
    return e.muli(bid, count), count


def _distribute_elementwise(op: BinaryCrossEntropyGradOp | ApplyFusedEmaAdamOp) -> bool:
    names = elementwise_tiled_operands(op)
    refs = {name: getattr(op, name) for name in names}
    if any(r.type.get_num_dims() > 1 and not isinstance(r.type.layout, NoneAttr) for r in refs.values()):
        return False
    static = _static_numel(refs[names[0]])
    if static is not None and static < 2 * MIN_ELEMENTS:
        return False
    e = Emitter.before(op)
    bid, nblk = block_range(e)
    mean_bce = isinstance(op, BinaryCrossEntropyGradOp) and op.prop_int("reduction") == 1
    u = upstream(op, e) if mean_bce else None
    flat = {name: _flat(e, r) for name, r in refs.items()}
    n = e.numel(flat[names[0]])
    lo, chunk = _range(e, bid, nblk, n, e.idx(MIN_ELEMENTS), LINE)
    with e.if_(e.cmpi(lo, n, "ult")):
        size = e.minsi(chunk, e.subi(n, lo))
        windows = {name: e.subview(r, [lo], [size]) for name, r in flat.items()}
        if mean_bce:
            lower_elements(e, windows["input_x"], windows["input_y"], u, op.dloss, windows.get("weight"), windows["dx"])
        else:
            e.add(_tile_op(op, windows))
    Rewriter.erase_op(op)
    return True


def _distribute_nll(op: NLLLossBackwardOp) -> bool:
    out_t = op.out.type
    assert isinstance(out_t, MemRefType)
    if out_t.get_num_dims() != 2:
        return False
    static = _static_numel(op.out)
    if static is not None and static < 2 * MIN_ELEMENTS:
        return False
    e = Emitter.before(op)
    bid, nblk = block_range(e)
    rows, c = e.dim(op.out, 0), e.dim(op.out, 1)
    # Whole rows, enough of them for MIN_ELEMENTS of out per block.
    min_rows = e.add(arith.CeilDivUIOp(e.idx(MIN_ELEMENTS), e.add(arith.MaxUIOp(c, e.idx(1)))))
    r0, chunk = _range(e, bid, nblk, rows, min_rows, 1)
    with e.if_(e.cmpi(r0, rows, "ult")):
        rn = e.minsi(chunk, e.subi(rows, r0))
        per_sample = op.prop_int("reduction") == 0
        windows = {
            "self": e.subview(op.self, [r0, 0], [rn, e.dim(op.self, 1)]),
            "target": e.subview(op.target, [r0], [rn]),
            "out": e.subview(op.out, [r0, 0], [rn, c]),
        }
        if per_sample:
            windows["grad_output"] = e.subview(op.grad_output, [r0], [rn])
        e.add(_tile_op(op, windows))
    Rewriter.erase_op(op)
    return True


def _distribute_fused_nest(nest: scf.ForOp) -> None:
    """scf.if (blocks > 1 and enough logits) { phase A; phase B } else { block 0: the nest };
    the function's code moves into the branches, the spread branch gets a copy."""
    top = nest.parent
    assert top is not None
    ops = [o for o in top.ops if not isinstance(o, func.ReturnOp)]
    token_loop = next(o for o in nest.walk() if o.attributes.get(ROLE_ATTR) == StringAttr("token_loop"))
    e = Emitter.before(ops[0])
    bid, nblk = block_range(e)
    logits = e.muli(_recompute(e, nest.ub, ops), _recompute(e, token_loop.ub, ops))  # type: ignore[attr-defined]
    spread = e.andi(e.cmpi(nblk, e.idx(1), "ugt"), e.cmpi(logits, e.idx(MIN_LOGITS), "uge"))
    is_first = e.cmpi(bid, e.idx(0), "eq")
    many, one, first = Block(), Block(), Block()
    Rewriter.insert_op(scf.IfOp(spread, [], Region(many), Region(one)), InsertPoint.before(ops[0]))
    one.add_ops([scf.IfOp(is_first, [], Region(first)), scf.YieldOp()])
    mapping: dict[SSAValue, SSAValue] = {}
    for o in ops:
        o.detach()
        first.add_op(o)
        many.add_op(o.clone(value_mapper=mapping))
    first.add_op(scf.YieldOp())
    many.add_op(scf.YieldOp())
    spread_nest = next(o for o in many.ops if isinstance(o, scf.ForOp) and TILE_ATTR in o.attributes)
    tiles = {k: v.value.data for k, v in spread_nest.attributes[TILE_ATTR].data.items()}  # type: ignore[attr-defined]
    split_over_blocks(spread_nest, tiles)


def _recompute(e: Emitter, value: SSAValue, moving: list) -> SSAValue:
    """`value` before the code that moves into branches: the pure ops computing it (sizes and
    constants of the loop bounds) cloned there."""
    op = value.owner
    if not isinstance(op, Operation) or op not in moving:
        return value
    assert is_side_effect_free(op) and not op.regions, op.name
    clone = op.clone_without_regions()
    for i, operand in enumerate(op.operands):
        clone.operands[i] = _recompute(e, operand, moving)
    return e.add(clone)


def _distribute(f: func.FuncOp) -> None:
    nests = [o for o in f.walk() if isinstance(o, scf.ForOp) and TILE_ATTR in o.attributes]
    grads = [o for o in f.walk() if isinstance(o, GradOp)]
    if len(nests) + len(grads) != 1:
        return
    if nests:
        _distribute_fused_nest(nests[0])
    elif isinstance(grads[0], BinaryCrossEntropyGradOp | ApplyFusedEmaAdamOp):
        _distribute_elementwise(grads[0])
    elif isinstance(grads[0], NLLLossBackwardOp):
        _distribute_nll(grads[0])


@dataclass(frozen=True)
class DistributeOverCoresPass(ModulePass):
    name = "distribute-over-cores"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in [o for o in op.walk() if isinstance(o, func.FuncOp) and not o.is_declaration]:
            _distribute(f)

