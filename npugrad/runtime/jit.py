"""Optimised LLVM IR (lowering/machine_code.py) → machine code JIT-linked into the process."""

from __future__ import annotations

import llvmlite.binding as llvm

from npugrad.lowering.machine_code import LOCK, JitError, new_target_machine, optimised
from npugrad.runtime import sync

__all__ = ["JitError", "JitModule"]


class JitModule:
    """Machine code for one LLVM module, kept alive as long as this object is."""

    def __init__(self, llvm_ir: str):
        # The launch services the module calls (runtime/sync.py), bound before it is linked.
        self.services = sync.services(llvm_ir)
        with LOCK:
            sync.bind_symbols(self.services)
            module = optimised(llvm_ir)
            # The engine takes ownership of its target machine and frees it with itself.
            self._engine = llvm.create_mcjit_compiler(module, new_target_machine())
            self._engine.finalize_object()
            self._engine.run_static_constructors()

    def address(self, symbol: str) -> int:
        addr = self._engine.get_function_address(symbol)
        if not addr:
            raise JitError(f"symbol '{symbol}' is not in the compiled module")
        return addr
