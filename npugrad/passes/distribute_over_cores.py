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
  tiles → dW, then token tiles → dX); every sum runs in the order of the one-phase nest, so
  results are bit-identical to it for any number of threads. The price, GEMM 1 done twice, is
  why the runtime compiles without this pass when it runs on one thread (runtime/specialize.py).
- Embedding backward stays on one block (its counting sort spans all indices).

Only a function holding exactly one such op is distributed: blocks do not wait for each other,
so two ops where one reads what the other writes must not be split. Ops whose static sizes are
below one block's worth of work are left alone. A distributed function is marked
`grad.distributed`: the runtime may run it as one block (small arrays, runtime/kernel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType, ModuleOp, NoneAttr, UnitAttr
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from npugrad.dialect import ApplyFusedEmaAdamOp, BinaryCrossEntropyGradOp, GradOp, NLLLossBackwardOp
from npugrad.dialect.checks import static_product
from npugrad.lowering.emit import Emitter, defined_functions
from npugrad.lowering.grad_to_loops.bce import lower_elements, upstream
from npugrad.passes.choose_tile_sizes import elementwise_tiled_operands
from npugrad.passes.fuse_linear_cross_entropy_grad import TILE_ATTR
from npugrad.passes.tiling.blocks import block_range
from npugrad.passes.tiling.elementwise import flat, tile_op
from npugrad.passes.tiling.flce import nest_tiles, split_over_blocks

MIN_ELEMENTS = 1 << 16  # per block, for the memory-bound ops: below this a thread costs more than it saves
DISTRIBUTED_ATTR = "grad.distributed"  # on a function: its blocks split work that one block could do
LINE = 64  # elements per block range are a multiple of this: no cache line is shared by two blocks


def _too_small(ref: SSAValue) -> bool:
    """Static sizes with less than two blocks' worth of elements."""
    n = static_product([None if d == DYNAMIC_INDEX else d for d in ref.type.get_shape()])  # type: ignore[attr-defined]
    return n is not None and n < 2 * MIN_ELEMENTS


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
    if _too_small(refs[names[0]]):
        return False
    e = Emitter.before(op)
    bid, nblk = block_range(e)
    mean_bce = isinstance(op, BinaryCrossEntropyGradOp) and op.prop_int("reduction") == 1
    u = upstream(op, e) if mean_bce else None
    flats = {name: flat(e, r) for name, r in refs.items()}
    n = e.numel(flats[names[0]])
    lo, chunk = _range(e, bid, nblk, n, e.idx(MIN_ELEMENTS), LINE)
    with e.if_(e.cmpi(lo, n, "ult")):
        size = e.minsi(chunk, e.subi(n, lo))
        windows = {name: e.subview(r, [lo], [size]) for name, r in flats.items()}
        if mean_bce:
            lower_elements(e, windows["input_x"], windows["input_y"], u, op.dloss, windows.get("weight"), windows["dx"])
        else:
            e.add(tile_op(op, windows))
    Rewriter.erase_op(op)
    return True


def _distribute_nll(op: NLLLossBackwardOp) -> bool:
    out_t = op.out.type
    assert isinstance(out_t, MemRefType)
    if out_t.get_num_dims() != 2:
        return False
    if _too_small(op.out):
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
        e.add(tile_op(op, windows))
    Rewriter.erase_op(op)
    return True


def _distribute_fused_nest(nest: scf.ForOp) -> bool:
    """The two phases of passes/tiling/flce.py: vocabulary tiles → dW, then token tiles → dX."""
    split_over_blocks(nest, nest_tiles(nest))
    return True


SPLITS = {
    BinaryCrossEntropyGradOp: _distribute_elementwise,
    ApplyFusedEmaAdamOp: _distribute_elementwise,
    NLLLossBackwardOp: _distribute_nll,
}


def _distribute(f: func.FuncOp) -> None:
    nests = [o for o in f.walk() if isinstance(o, scf.ForOp) and TILE_ATTR in o.attributes]
    grads = [o for o in f.walk() if isinstance(o, GradOp)]
    if len(nests) + len(grads) != 1:
        return
    if nests:
        done = _distribute_fused_nest(nests[0])
    else:
        split = SPLITS.get(type(grads[0]))
        done = split is not None and split(grads[0])
    if done:
        f.attributes[DISTRIBUTED_ATTR] = UnitAttr()


@dataclass(frozen=True)
class DistributeOverCoresPass(ModulePass):
    name = "distribute-over-cores"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in defined_functions(op):
            _distribute(f)

