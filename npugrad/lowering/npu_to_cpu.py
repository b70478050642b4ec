"""lower-npu-to-cpu: run the NPU-shaped IR on this CPU.

    %bid = npu.block_idx                       →  a function argument %block_idx: index
    %n = npu.block_dim                         →  a function argument %block_dim: index
    %b = npu.alloc_local : memref<64xf32, #npu.mem<ub>>
                                               →  memref.alloc at function entry (this call's
                                                  arena: each thread has its own), freed on return
    npu.copy %a, %b                            →  a loop nest of loads and stores (`transpose`:
                                                  the source read transposed)
    #npu.mem<...> on every memref type         →  erased: on a CPU all levels are one memory

A function that used block_idx/block_dim gets the `npu.blocks` attribute: the runtime then calls
it once per block, from a pool of threads, with the two extra arguments.

Patterns: one per function (its blocks and local buffers, which must keep their order), one per
copy, then a type conversion erasing the memory spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import FunctionType, IntegerAttr, MemRefType, ModuleOp, NoneAttr
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import (
    GreedyRewritePatternApplier,
    PatternRewriter,
    PatternRewriteWalker,
    RewritePattern,
    TypeConversionPattern,
    attr_type_rewrite_pattern,
    op_type_rewrite_pattern,
)
from xdsl.rewriter import InsertPoint

from npugrad.dialect.npu import BLOCKS, AllocLocalOp, BlockDimOp, BlockIdxOp, CopyOp, MemorySpaceAttr
from npugrad.ir import IRBuilder, index


class _EraseMemorySpace(TypeConversionPattern):
    @attr_type_rewrite_pattern
    def convert_type(self, typ: MemRefType, /) -> Attribute | None:
        if isinstance(typ.memory_space, MemorySpaceAttr):
            return MemRefType(typ.element_type, typ.get_shape(), typ.layout, NoneAttr())
        return None


class LowerCopy(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: CopyOp, rewriter: PatternRewriter) -> None:
        e = IRBuilder(rewriter, op)
        with e.loop_nest(e.dims(op.target)) as ivs:
            # The raw element (no signless cast for unsigned integers): a copy moves bits.
            source = ivs[::-1] if op.transpose is not None else ivs
            e.store(e.emit(memref.LoadOp.get(op.source, source)), op.target, ivs)
        rewriter.erase(op)


class LowerFunction(RewritePattern):
    """Block index and count become arguments; local buffers, heap buffers of the call."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, f: func.FuncOp, rewriter: PatternRewriter) -> None:
        if f.is_declaration:
            return
        entry = f.body.blocks[0]  # a function may have several blocks (cf branches), each with its return
        ops = list(f.walk())
        blocks = [o for o in ops if isinstance(o, BlockIdxOp | BlockDimOp)]
        if blocks:
            bid = rewriter.insert_block_argument(entry, len(entry.args), index)
            bid.name_hint = "block_idx"
            ndim = rewriter.insert_block_argument(entry, len(entry.args), index)
            ndim.name_hint = "block_dim"
            for o in blocks:
                rewriter.replace(o, [], [bid if isinstance(o, BlockIdxOp) else ndim])
            f.function_type = FunctionType.from_lists([a.type for a in entry.args], f.function_type.outputs.data)
            BLOCKS.set(f)
            rewriter.notify_op_modified(f)
        # Buffers at the entry in program order, freed before each return in the reverse order.
        frees: dict[Operation, Operation] = {r: r for r in ops if isinstance(r, func.ReturnOp)}
        after: Operation | None = None
        for o in [o for o in ops if isinstance(o, AllocLocalOp)]:
            buf = memref.AllocOp([], [], o.result.type, alignment=IntegerAttr(64, 64))
            buf.location = o.location
            rewriter.insert(buf, InsertPoint.after(after) if after is not None else InsertPoint.at_start(entry))
            after = buf
            rewriter.replace(o, [], [buf.memref])
            for ret, first in frees.items():
                free = memref.DeallocOp.get(buf.memref)
                rewriter.insert(free, InsertPoint.before(first))
                frees[ret] = free


@dataclass(frozen=True)
class LowerNpuToCpuPass(ModulePass):
    name = "lower-npu-to-cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        patterns = GreedyRewritePatternApplier([LowerFunction(), LowerCopy()])
        PatternRewriteWalker(patterns, apply_recursively=False).rewrite_module(op)
        # Rewriting every op's types is slow on large modules: only do it when a level is named.
        if any(_in_local_level(v) for o in op.walk() for v in (*o.results, *_block_args(o))):
            PatternRewriteWalker(_EraseMemorySpace(recursive=True)).rewrite_module(op)


def _block_args(op: Operation):
    return (a for r in op.regions for b in r.blocks for a in b.args)


def _in_local_level(value) -> bool:
    return isinstance(value.type, MemRefType) and isinstance(value.type.memory_space, MemorySpaceAttr)
