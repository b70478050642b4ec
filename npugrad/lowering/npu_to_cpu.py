"""lower-npu-to-cpu: run the NPU-shaped IR on this CPU.

    %bid = npu.block_idx                       →  a function argument %block_idx: index
    %n = npu.block_dim                         →  a function argument %block_dim: index
    %b = npu.alloc_local : memref<64xf32, #npu.mem<ub>>
                                               →  memref.alloc at function entry (this call's
                                                  arena: each thread has its own), freed on return
    npu.copy %a, %b                            →  a loop nest of loads and stores
    #npu.mem<...> on every memref type         →  erased: on a CPU all levels are one memory

A function that used block_idx/block_dim gets the `npu.blocks` attribute: the runtime then calls
it once per block, from a pool of threads, with the two extra arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func, memref
from xdsl.dialects.builtin import FunctionType, IntegerAttr, MemRefType, ModuleOp, NoneAttr, UnitAttr
from xdsl.ir import Attribute, Operation
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriteWalker, TypeConversionPattern, attr_type_rewrite_pattern
from xdsl.rewriter import InsertPoint, Rewriter

from npugrad.dialect.npu import AllocLocalOp, BlockDimOp, BlockIdxOp, CopyOp, MemorySpaceAttr
from npugrad.lowering.emit import Emitter, defined_functions, index

BLOCKS_ATTR = "npu.blocks"


class _EraseMemorySpace(TypeConversionPattern):
    @attr_type_rewrite_pattern
    def convert_type(self, typ: MemRefType, /) -> Attribute | None:
        if isinstance(typ.memory_space, MemorySpaceAttr):
            return MemRefType(typ.element_type, typ.get_shape(), typ.layout, NoneAttr())
        return None


def _lower_copy(op: CopyOp) -> None:
    e = Emitter.before(op)
    with e.loop_nest(e.dims(op.target)) as ivs:
        # The raw element (no signless cast for unsigned integers): a copy moves bits.
        e.store(e.add(memref.LoadOp.get(op.source, ivs)), op.target, ivs)
    Rewriter.erase_op(op)


def _lower_function(f: func.FuncOp) -> None:
    entry = f.body.blocks[0]  # a function may have several blocks (cf branches), each with its return
    ops = list(f.walk())
    blocks = [o for o in ops if isinstance(o, BlockIdxOp | BlockDimOp)]
    if blocks:
        bid = entry.insert_arg(index, len(entry.args))
        bid.name_hint = "block_idx"
        ndim = entry.insert_arg(index, len(entry.args))
        ndim.name_hint = "block_dim"
        for o in blocks:
            o.result.replace_all_uses_with(bid if isinstance(o, BlockIdxOp) else ndim)
            Rewriter.erase_op(o)
        f.function_type = FunctionType.from_lists([a.type for a in entry.args], f.function_type.outputs.data)
        f.attributes[BLOCKS_ATTR] = UnitAttr()
    locals_ = [o for o in ops if isinstance(o, AllocLocalOp)]
    for o in reversed(locals_):
        buf = memref.AllocOp([], [], o.result.type, alignment=IntegerAttr(64, 64))
        Rewriter.insert_op(buf, InsertPoint.at_start(entry))
        o.result.replace_all_uses_with(buf.memref)
        Rewriter.erase_op(o)
        for ret in [r for r in f.walk() if isinstance(r, func.ReturnOp)]:
            Rewriter.insert_op(memref.DeallocOp.get(buf.memref), InsertPoint.before(ret))
    for o in [o for o in ops if isinstance(o, CopyOp)]:
        _lower_copy(o)


@dataclass(frozen=True)
class LowerNpuToCpuPass(ModulePass):
    name = "lower-npu-to-cpu"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for f in defined_functions(op):
            _lower_function(f)
        # Rewriting every op's types is slow on large modules: only do it when a level is named.
        if any(_in_local_level(v) for o in op.walk() for v in (*o.results, *_block_args(o))):
            PatternRewriteWalker(_EraseMemorySpace(recursive=True)).rewrite_module(op)


def _block_args(op: Operation):
    return (a for r in op.regions for b in r.blocks for a in b.args)


def _in_local_level(value) -> bool:
    return isinstance(value.type, MemRefType) and isinstance(value.type.memory_space, MemorySpaceAttr)
