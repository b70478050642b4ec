"""distribute-over-cores: with no target to tile for, the code still runs on every core. Each op's
work is cut into one contiguous range per block (npu.block_idx of npu.block_dim; the runtime
runs one block per thread) by its recipe, computed in place on global memory — on a CPU the
caches are the local levels, so nothing is copied.

    train.binary_cross_entropy_grad input_x(%x : memref<?xf32>) ... -> dx(%dx : memref<?xf32>)
becomes
    %bid = npu.block_idx
    %nblk = npu.block_dim
    %active = min(%nblk, ceildiv(N, 65536))                 // blocks worth starting
    %chunk = ceildiv(ceildiv(N, %active), 64)·64            // whole cache lines per block
    %lo = %bid·%chunk
    scf.if %lo < N {
      train.binary_cross_entropy_grad input_x(%x[%lo : min(%chunk, N − %lo)]) ... -> dx(%dx[...])
    }

- BCE and EMA-Adam: elements of the flat arrays (contiguous operands; a strided one keeps the
  op on one block). Mean BCE divides by the whole N, once per block, as its tiling does.
- NLL backward (2-D self): rows; each block zeroes and fills its own rows of `out`.
- The fused linear cross-entropy gradient: a wavefront (passes/tiling/flce.py): each block owns a
  range of token tiles and takes the vocabulary tiles one step behind the block before it,
  passing each tile's dW accumulator on through a flag (npu.set_flag when a block is done with
  a step, npu.wait_flag for the block before's; no barrier: a block waits only for the one
  before it); every sum runs in the order of the one-block nest, so results are bit-identical
  to it for any number of threads, with the same FLOPs. The runtime still compiles without
  this pass for one thread (runtime/specialize.py): the one-block nest needs no flag.
- Embedding backward (passes/tiling/embedding.distribute_embedding): rows of `out`; each block
  sorts the indices of its own rows and writes those rows (lowered here, not by
  convert-train-to-loops).

Only a function holding exactly one such op is distributed: blocks (but the wavefront's) do not
wait for each other, so two ops where one reads what the other writes must not be split. Ops whose static sizes are
below one block's worth of work are left alone. A distributed function is marked
`train.distributed`: the runtime may run it as one block (small arrays, runtime/kernel.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, scf
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import DISTRIBUTED, FUSED
from npugrad.dialect.npu import spread_over_blocks
from npugrad.ir import IRBuilder
from npugrad.passes.source_op import record_source
from npugrad.recipes import recipe_of
from npugrad.targets import Target, get


@dataclass(frozen=True)
class DistributeFunction(RewritePattern):
    cpu: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, f: func.FuncOp, rewriter: PatternRewriter) -> None:
        if f.is_declaration or DISTRIBUTED.on(f):
            return
        if spread_over_blocks(f):
            return  # tile-for-target's tiles: its fused nest is no longer the fuse pass's
        nests = [o for o in f.walk() if isinstance(o, scf.ForOp) and FUSED.on(o)]
        grads = [o for o in f.walk() if isinstance(o, TrainOp)]
        if len(nests) + len(grads) != 1:
            return
        if nests:
            fused = FUSED.get(nests[0])
            recipe = recipe_of(fused.op.data)  # type: ignore[union-attr]
            assert recipe.fused is not None
            recipe.fused.distribute(nests[0], IRBuilder(rewriter, nests[0]), self.cpu)
            done = True
        else:
            recipe = recipe_of(grads[0])
            done = recipe.supports("distribute")
            if done:
                record_source(grads[0], rewriter)
                # Its loops named after it (line tables).
                done = recipe.distribute(grads[0], IRBuilder(rewriter, grads[0], label=grads[0].short_name()))
        if done:
            DISTRIBUTED.set(f)
            rewriter.notify_op_modified(f)


@dataclass(frozen=True)
class DistributeOverCoresPass(ModulePass):
    name = "distribute-over-cores"

    cpu: str = "host"  # the CPU the kernels are shaped for (vectorize-contractions' target)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(DistributeFunction(get(self.cpu)), apply_recursively=False).rewrite_module(op)
