"""A compiled module: every `func.func` of it, callable with NumPy arrays."""

from __future__ import annotations

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import IndexType, MemRefType, ModuleOp, NoneAttr, StridedLayoutAttr

from npugrad import dtypes
from npugrad.dialect.attributes import DISTRIBUTED
from npugrad.dialect.npu import BLOCKS
from npugrad.ir import defined_functions
from npugrad.runtime import sync
from npugrad.runtime.jit import JitModule
from npugrad.runtime.kernel import Kernel, MemRefSpec


def _spec(name: str, t) -> MemRefSpec:
    if not isinstance(t, MemRefType):
        raise TypeError(f"argument '{name}' has type {t}; kernels take memrefs only")
    layout = t.layout
    if isinstance(layout, NoneAttr):
        strides = None
    elif isinstance(layout, StridedLayoutAttr):
        strides = tuple(None if s is None else s for s in layout.get_strides())
        offset = layout.get_offset()
        if offset not in (None, 0):
            raise TypeError(f"argument '{name}' has a static non-zero offset ({t}); arrays start at offset 0")
    else:
        raise TypeError(f"argument '{name}' has layout {layout}; only identity and strided layouts are supported")
    shape = tuple(None if d < 0 else d for d in t.get_shape())
    return MemRefSpec(name, np.dtype(dtypes.to_numpy(t.element_type)), shape, strides)


def signatures(module: ModuleOp) -> dict[str, list[MemRefSpec]]:
    """The argument specs of every function in the module, named after the SSA names if any: the
    arrays a call passes, so not a block kernel's last two arguments (npu.blocks: its block index
    and count, which the launch passes; a stage saved after lower-npu-to-cpu has them)."""
    result = {}
    for op in defined_functions(module):
        args = list(op.body.block.args)
        if BLOCKS.on(op) and len(args) >= 2 and all(isinstance(a.type, IndexType) for a in args[-2:]):
            args = args[:-2]
        result[op.sym_name.data] = [_spec(a.name_hint or f"arg{i}", a.type) for i, a in enumerate(args)]
    return result


def block_kernels(module: ModuleOp) -> dict[str, bool]:
    """The functions of a loop-level module that run as blocks (see lower-npu-to-cpu), each
    with whether distribute-over-cores made it one (then one block may do all the work)."""
    return {op.sym_name.data: DISTRIBUTED.on(op) for op in module.walk() if isinstance(op, func.FuncOp) and BLOCKS.on(op)}


class Executable:
    def __init__(self, llvm_ir: str, sigs: dict[str, list[MemRefSpec]], blocks: dict[str, bool] | None = None):
        self.llvm_ir = llvm_ir
        self._jit = JitModule(llvm_ir)
        blocks = blocks or {}
        # A module whose kernels call the launch services (npu.synchronized) runs every launch of
        # its block kernels inside sync.launch.
        synchronized = bool(self._jit.services)
        barrier = f"_mlir_ciface_{sync.BARRIER}" in self._jit.services
        self.kernels = {name: Kernel(self._jit, name, specs, name in blocks, blocks.get(name, False),
                                     synchronized and name in blocks, barrier)
                        for name, specs in sigs.items()}

    def __getitem__(self, name: str) -> Kernel:
        return self.kernels[name]
