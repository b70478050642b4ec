"""Optimised LLVM IR (lowering/machine_code.py) → machine code JIT-linked into the process; the
machine code of IR compiled before, by any process, comes from the disk cache (object_cache.py)."""

from __future__ import annotations

import llvmlite.binding as llvm

from npugrad.lowering import emulation
from npugrad.lowering.machine_code import (
    LOCK,
    JitError,
    new_target_machine,
    optimised,
    parsed,
    request_amx,
    unresolved,
    uses_amx,
)
from npugrad.runtime import object_cache, sync

__all__ = ["JitError", "JitModule"]


class JitModule:
    """Machine code for one LLVM module, kept alive as long as this object is."""

    def __init__(self, llvm_ir: str):
        # Instructions the host lacks that were asked to be emulated (NPUGRAD_EMULATE), before
        # the cache key: emulated code is cached apart from the instruction's.
        llvm_ir = emulation.for_host(llvm_ir, llvm.get_host_cpu_features)
        # The launch services the module calls (runtime/sync.py), bound before it is linked.
        self.services = sync.services(llvm_ir)
        with LOCK:
            sync.bind_symbols(self.services)
            key = object_cache.key(llvm_ir)
            code = object_cache.load(key)
            # With the machine code at hand the module is only parsed (its symbols and static
            # constructors); the engine takes the code instead of optimising and generating it.
            module = optimised(llvm_ir) if code is None else parsed(llvm_ir)[0]
            # The engine takes ownership of its target machine and frees it with itself.
            self._engine = llvm.create_mcjit_compiler(module, new_target_machine())
            made: list[bytes] = []  # the machine code generated now

            def generated(_module, compiled: bytes) -> None:
                made.append(compiled)
                object_cache.store(key, compiled)

            if code is None:
                self._engine.set_object_cache(generated)
            else:
                self._engine.set_object_cache(getbuffer_func=lambda _module: code)
            # Asked for once the module is known to be for this CPU (parsed() refuses tile code on one
            # without AMX, naming the feature), before any of its code runs.
            if uses_amx(llvm_ir):
                request_amx()
            self.from_cache = code is not None
            self.cache_key = key  # its disk cache entry's name (bench/loop_profile.py reads the object)
            self._engine.finalize_object()
            # A function the code generator called for an instruction the CPU lacks and nothing
            # defines is linked to address 0: refused here, before anything runs.
            if missing := unresolved(code if code is not None else b"".join(made)):
                raise JitError(f"the machine code calls {', '.join(missing)}, which nothing in this process defines: "
                               f"declared by the module, or called by LLVM's code generator for an operation this CPU "
                               f"({llvm.get_host_cpu_name()}) has no instruction for; linked to address 0, it would crash")
            self._engine.run_static_constructors()

    def address(self, symbol: str) -> int:
        addr = self._engine.get_function_address(symbol)
        if not addr:
            raise JitError(f"symbol '{symbol}' is not in the compiled module")
        return addr
