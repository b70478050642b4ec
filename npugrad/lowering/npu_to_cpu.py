"""lower-npu-to-cpu: run the NPU-shaped IR on this CPU.

    %bid = npu.block_idx                       →  a function argument %block_idx: index
    %n = npu.block_dim                         →  a function argument %block_dim: index
    %b = npu.alloc_local : memref<64xf32, #npu.mem<ub>>
                                               →  memref.alloc at function entry (this call's
                                                  arena: each thread has its own), freed on return
    npu.copy %a, %b                            →  a loop nest of loads and stores (`transpose`:
                                                  the source read transposed; f32 into bf16/f16:
                                                  arith.truncf before the store; `accumulate`:
                                                  the target loaded, arith.addf, then stored)
    npu.barrier                                →  func.call @npugrad_barrier()
    npu.set_flag %f[%i], %v : memref<?xi64>    →  func.call @npugrad_set_flag(&%f[%i], %v)
    npu.wait_flag %f[%i], %v : memref<?xi64>   →  func.call @npugrad_wait_flag(&%f[%i], %v)
                                                  (the address as an index: an atomic release
                                                  store, an acquire load until it is >= %v;
                                                  lowering/machine_code.py's SUPPORT_IR)
    %w = npu.alloc_shared(%m) : memref<?xf32>  →  func.call @npugrad_shared_r1_f32(slot, 4, %m):
                                                  the same buffer in every block of the launch
    #npu.mem<...> on every memref type         →  erased: on a CPU all levels are one memory

A function that used block_idx/block_dim gets the `npu.blocks` attribute: the runtime then calls
it once per block, from a pool of threads, with the two extra arguments. One that calls the launch
services (barrier, flags, shared workspaces: npugrad/runtime/sync.py) also gets
`npu.synchronized`: the runtime then runs all its blocks at once.

Patterns: one per function (its blocks and local buffers, which must keep their order), one per
copy, then a type conversion erasing the memory spaces.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith, func, memref
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    ArrayAttr,
    DictionaryAttr,
    FunctionType,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NoneAttr,
    i64,
)
from xdsl.ir import Attribute, Operation, ParametrizedAttribute
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
from xdsl.rewriter import InsertPoint, Rewriter

from npugrad.dialect.npu import (
    BLOCKS,
    SYNCHRONIZED,
    AllocLocalOp,
    AllocSharedOp,
    BarrierOp,
    BlockDimOp,
    BlockIdxOp,
    CopyOp,
    MemorySpaceAttr,
    SetFlagOp,
    WaitFlagOp,
    element_bytes,
)
from npugrad.ir import IRBuilder, index
from npugrad.runtime.sync import BARRIER, SET_FLAG, WAIT_FLAG, shared_symbol


class _EraseMemorySpace(TypeConversionPattern):
    @attr_type_rewrite_pattern
    def convert_type(self, typ: MemRefType, /) -> Attribute | None:
        if isinstance(typ.memory_space, MemorySpaceAttr):
            return _erased(typ)
        return None


def _erased(t: MemRefType) -> MemRefType:
    return MemRefType(t.element_type, t.get_shape(), t.layout, NoneAttr())


def _holds_local(attr: Attribute) -> bool:
    if isinstance(attr, MemRefType):
        return isinstance(attr.memory_space, MemorySpaceAttr)
    if isinstance(attr, ParametrizedAttribute):
        return any(_holds_local(p) for p in attr.parameters)
    if isinstance(attr, ArrayAttr):
        return any(_holds_local(a) for a in attr.data)
    if isinstance(attr, DictionaryAttr):
        return any(_holds_local(a) for a in attr.data.values())
    return False


def _erase_memory_spaces(module: ModuleOp) -> None:
    """Every memref type in a local level (an #npu.mem memory space) -> the same memref in the
    default space. Local buffers and their views are values: their types are replaced directly.
    A local type inside an attribute (a function's signature) is rare: only then does xDSL's
    TypeConversionPattern run, which rebuilds every attribute of every op (seconds on a large
    module)."""
    local, in_attributes = [], False
    for o in module.walk():
        local += [v for v in (*o.results, *_block_args(o)) if _in_local_level(v)]
        in_attributes = in_attributes or any(_holds_local(a) for a in (*o.attributes.values(), *o.properties.values()))
    for v in local:
        Rewriter.replace_value_with_new_type(v, _erased(v.type))
    if in_attributes:
        PatternRewriteWalker(_EraseMemorySpace(recursive=True)).rewrite_module(module)


class LowerCopy(RewritePattern):
    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: CopyOp, rewriter: PatternRewriter) -> None:
        e = IRBuilder(rewriter, op)
        with e.loop_nest(e.dims(op.target)) as ivs:
            # The raw element (no signless cast for unsigned integers): a copy moves bits.
            source = ivs[::-1] if op.transpose is not None else ivs
            value = e.emit(memref.LoadOp.get(op.source, source))
            if op.accumulate is not None:  # float32 only (the verifier says so)
                value = e.emit(arith.AddfOp(e.emit(memref.LoadOp.get(op.target, ivs)), value))
            if op.converts():
                e.store_f32(value, op.target, ivs)  # arith.truncf: rounded to nearest even
            else:
                e.store(value, op.target, ivs)
        rewriter.erase(op)


def _declare(module: ModuleOp, name: str, inputs: list, outputs: list) -> None:
    """A private declaration of an external function, once per module."""
    if not any(isinstance(o, func.FuncOp) and o.sym_name.data == name for o in module.ops):
        module.body.block.add_op(func.FuncOp.external(name, inputs, outputs))


class LowerLaunchServices(RewritePattern):
    """npu.barrier, npu.set_flag, npu.wait_flag and npu.alloc_shared become calls of the
    runtime's launch services; each shared buffer of a function gets its own slot number (the
    same in every block)."""

    @op_type_rewrite_pattern
    def match_and_rewrite(self, f: func.FuncOp, rewriter: PatternRewriter) -> None:
        ops = [o for o in f.walk() if isinstance(o, BarrierOp | AllocSharedOp | SetFlagOp | WaitFlagOp)]
        if not ops:
            return
        module = f.parent_op()
        assert isinstance(module, ModuleOp)
        slot = 0
        for o in ops:
            e = IRBuilder(rewriter, o)
            if isinstance(o, BarrierOp):
                _declare(module, BARRIER, [], [])
                call = func.CallOp(BARRIER, [], [])
                call.location = o.location
                rewriter.replace(o, call)
                continue
            if isinstance(o, SetFlagOp | WaitFlagOp):
                name = SET_FLAG if isinstance(o, SetFlagOp) else WAIT_FLAG
                _declare(module, name, [index, index], [])
                base = e.emit(memref.ExtractAlignedPointerAsIndexOp.get(o.flags))
                address = e.emit(arith.AddiOp(base, e.emit(arith.MuliOp(o.index, e.idx(element_bytes(i64))))))
                call = func.CallOp(name, [address, o.value], [])
                call.location = o.location
                rewriter.replace(o, call)
                continue
            t = o.result.type
            assert isinstance(t, MemRefType)
            name = shared_symbol(t.get_num_dims(), str(t.element_type))
            dynamic = iter(o.sizes)
            sizes = [next(dynamic) if d == DYNAMIC_INDEX else e.idx(d) for d in t.get_shape()]
            args = [e.idx(slot), e.idx(element_bytes(t.element_type)), *sizes]
            any_shape = MemRefType(t.element_type, [DYNAMIC_INDEX] * t.get_num_dims())
            _declare(module, name, [index] * len(args), [any_shape])
            buf = e.emit(func.CallOp(name, args, [any_shape]))
            if buf.type != t:
                buf = e.emit(memref.CastOp.get(buf, t))
            buf.name_hint = o.result.name_hint
            rewriter.replace(o, [], [buf])
            slot += 1
        SYNCHRONIZED.set(f)
        rewriter.notify_op_modified(f)


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
        PatternRewriteWalker(LowerLaunchServices(), apply_recursively=False).rewrite_module(op)
        patterns = GreedyRewritePatternApplier([LowerFunction(), LowerCopy()])
        PatternRewriteWalker(patterns, apply_recursively=False).rewrite_module(op)
        _erase_memory_spaces(op)


def _block_args(op: Operation):
    return (a for r in op.regions for b in r.blocks for a in b.args)


def _in_local_level(value) -> bool:
    return isinstance(value.type, MemRefType) and isinstance(value.type.memory_space, MemorySpaceAttr)
