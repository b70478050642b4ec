"""One op, specialised to operand dtypes, shapes and attribute values, as a module with one
function, compiled and cached.

The cache key is (op, each operand's dtype/rank/layout class and sizes or dynamic-shape class,
attribute values, pipeline): a second call with the same key reuses the machine code.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    StridedLayoutAttr,
)
from xdsl.ir import Attribute, Block, Region

from npugrad import dtypes, progress
from npugrad.compiler import Pipeline
from npugrad.dialect import TrainOp
from npugrad.lowering.machine_code import JitError
from npugrad.runtime import ir_cache, object_cache, pool
from npugrad.runtime.executable import Executable, block_kernels, signatures
from npugrad.runtime.kernel import Kernel


@dataclass(frozen=True)
class OperandClass:
    """What a kernel is specialised to for one operand."""

    dtype: str
    shape: tuple[int | None, ...]  # None: dynamic
    strided: bool  # any strides (else C-contiguous)
    # Strided, but each row contiguous (the last stride one element): a view of rows or of a
    # column range of a larger array, a padded row pitch. The kernel is compiled for that last
    # stride, so its micro-kernels and vector loops apply (unit_innermost_stride); with every
    # stride dynamic they do not, and the loops stay scalar (FLCE forward 4096 x 4096 x 8192
    # float32 on rows padded by 16 elements, Zen 3: 5 GFLOP/s against 151-165 contiguous).
    unit_rows: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.dtype, self.shape, self.strided, self.unit_rows)))

    def __hash__(self) -> int:
        # Every cached call hashes its operands' classes in the cache key.
        return self._hash

    @classmethod
    def of(cls, array: np.ndarray, static: bool) -> OperandClass:
        strided = not array.flags.c_contiguous
        unit_rows = strided and array.ndim > 0 and array.strides[-1] == array.itemsize
        if static:
            return cls(dtype_name(array.dtype), tuple(array.shape), strided, unit_rows)
        # Dynamic classes are few and built on every API call: reuse them.
        key = (array.dtype, array.ndim, strided, unit_rows)
        found = _DYNAMIC_CLASSES.get(key)
        if found is None:
            found = _DYNAMIC_CLASSES[key] = cls(dtype_name(array.dtype), (None,) * array.ndim, strided, unit_rows)
        return found

    def memref_type(self) -> MemRefType:
        shape = [DYNAMIC_INDEX if d is None else d for d in self.shape]
        element = dtypes.to_mlir(self.dtype)
        if self.strided and shape:
            strides = [None] * (len(shape) - 1) + [1 if self.unit_rows else None]
            return MemRefType(element, shape, StridedLayoutAttr(strides, None))
        return MemRefType(element, shape)


_DYNAMIC_CLASSES: dict[tuple[np.dtype, int, bool, bool], OperandClass] = {}
_DTYPE_NAMES: dict[np.dtype, str] = {}


def dtype_name(dtype: np.dtype) -> str:
    """str(dtype), memoised: numpy computes the name afresh on every call."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype)
    return name


def _property(value: float | bool, declared: Attribute | None) -> Attribute:
    if isinstance(value, bool | np.bool_):
        return IntegerAttr(-1 if value else 0, IntegerType(1))
    if isinstance(declared, FloatAttr) or isinstance(value, float):
        return FloatAttr(float(value), Float64Type())
    return IntegerAttr(int(value), 64)


def build_module(
    op_cls: type[TrainOp], operands: Mapping[str, OperandClass], props: Mapping[str, int | float | bool]
) -> ModuleOp:
    """`func.func @<op>(<operands in op order>) { train.<op> ...; return }`."""
    names = [n for n in op_cls.operand_names() if n in operands]
    block = Block(arg_types=[operands[n].memref_type() for n in names])
    for arg, name in zip(block.args, names):
        arg.name_hint = name
    values = dict(zip(names, block.args))
    op_def = op_cls.get_irdl_definition()
    declared = dict(op_def.properties)
    properties = {
        k: _property(v, declared[k].default_value if k in declared else None) for k, v in props.items()
    }
    order = [name for name, _ in op_def.operands]
    op = op_cls.build(operands=[values.get(n) for n in order], properties=properties)
    block.add_ops([op, func.ReturnOp()])
    fn = func.FuncOp(op_cls.short_name(), ([a.type for a in block.args], []), Region(block))
    return ModuleOp([fn])


_CACHE: dict[tuple, Kernel] = {}
_LOCK = threading.Lock()
_DEFAULT_PIPELINES: dict[tuple[bool, bool], tuple[Pipeline, tuple]] = {}


def env_flag(name: str) -> bool:
    """An on/off environment variable: 1 on; unset, empty or 0 off; anything else an error naming
    it (`true` or `yes` read as off would be an option silently not taken)."""
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"{name} must be 1 (on) or 0 (off), got {os.environ[name]!r}")
    return value == "1"


def _pipeline_and_key(pipeline: Pipeline | None) -> tuple[Pipeline, tuple]:
    """The pipeline to compile with and its cache key. On one thread nothing is spread over
    cores (distribute-over-cores would only add block ranges and the linear cross-entropy
    gradient's barriers), so the kernel compiled depends on the thread count, and so does the key.

    The default pipeline verifies the module once, after its last pass (the op was built and
    verified here, and the upstream parser verifies what it reads); NPUGRAD_VERIFY_EACH=1 makes
    it, and a pipeline given to launch.using, verify after every pass, to find the pass that
    breaks the IR; NPUGRAD_LINE_TABLES=1 gives the default its machine code line tables
    (Pipeline.line_tables: a profile then names each loop)."""
    one_thread = pool.threads() == 1
    if pipeline is not None:
        if one_thread and pipeline.distribute:
            pipeline = replace(pipeline, distribute=False)
        if not pipeline.verify_each and env_flag("NPUGRAD_VERIFY_EACH"):
            pipeline = replace(pipeline, verify_each=True)
        return pipeline, pipeline.key()
    # The default pipeline's key is rebuilt from pass reprs otherwise: compute it once.
    line_tables = env_flag("NPUGRAD_LINE_TABLES")
    if (one_thread, line_tables) not in _DEFAULT_PIPELINES:
        default = Pipeline(distribute=not one_thread, verify_each=env_flag("NPUGRAD_VERIFY_EACH"),
                           line_tables=line_tables)
        _DEFAULT_PIPELINES[one_thread, line_tables] = (default, default.key())
    return _DEFAULT_PIPELINES[one_thread, line_tables]


def pipeline_in_use(pipeline: Pipeline | None) -> Pipeline:
    """The pipeline an API call made on this thread compiles with, given launch.using's (None:
    the default for this thread's thread count; _pipeline_and_key)."""
    return _pipeline_and_key(pipeline)[0]


def compile_op(
    op_cls: type[TrainOp],
    operands: Mapping[str, OperandClass],
    props: Mapping[str, int | float | bool],
    pipeline: Pipeline | None = None,
) -> Kernel:
    """The kernel for this specialisation, compiled on first use. Its arguments are the present
    operands in the op's operand order."""
    pipeline, pipeline_key = _pipeline_and_key(pipeline)
    # Unsorted: the API builds these mappings in a fixed order; another order only costs a compile.
    key = (op_cls, tuple(operands.items()), tuple(props.items()), pipeline_key)
    kernel = _CACHE.get(key)
    if kernel is not None:
        return kernel
    with _LOCK:
        if key not in _CACHE:
            module = build_module(op_cls, operands, props)
            module.verify()
            sigs = signatures(module)
            kinds = ", ".join(f"{n}: {c.dtype}" for n, c in operands.items())
            with progress.slow(f"npugrad: compiling {op_cls.name} ({kinds})"):
                llvm_ir, blocks, from_disk = _lowered(module, pipeline, pipeline_key)
                try:
                    kernel = Executable(llvm_ir, sigs, blocks)[op_cls.short_name()]
                except JitError:
                    if not from_disk:
                        raise
                    # An entry whose digest holds but whose IR llvmlite rejects (a writer's bug): compiled anew.
                    llvm_ir, blocks, from_disk = _lowered(module, pipeline, pipeline_key, from_disk=False)
                    kernel = Executable(llvm_ir, sigs, blocks)[op_cls.short_name()]
                kernel.ir_from_cache = from_disk
                _CACHE[key] = kernel
        return _CACHE[key]


def _lowered(module: ModuleOp, pipeline: Pipeline, pipeline_key: tuple,
             from_disk: bool = True) -> tuple[str, dict[str, bool], bool]:
    """The op's LLVM IR and its block kernels: from the disk cache when a process with the
    same npugrad lowered the same op with the same pipeline (ir_cache.py), else from the passes
    (and then kept there); and whether they came from the disk. An entry made verifying after
    every pass is apart from one made without (the pipeline key leaves verification out); a
    pipeline with an observer, which wants to see the passes run, always runs them."""
    cached = pipeline.observer is None and object_cache.directory() is not None
    k = ir_cache.key(str(module), (pipeline.verify_each, pipeline_key)) if cached else None
    if k is not None and from_disk and (found := ir_cache.load(k)) is not None:
        return (*found, True)
    llvm_ir = pipeline.lower(module, "llvm-ir")  # leaves `module` at the vectorized stage
    blocks = block_kernels(module)
    if k is not None:
        ir_cache.store(k, llvm_ir, blocks)
    return llvm_ir, blocks, False
