"""LLVM IR → optimised machine code for this CPU (llvmlite, O3), JIT-linked into the process."""

from __future__ import annotations

import re
import struct
import threading
from functools import cache

import llvmlite.binding as llvm

_LOCK = threading.Lock()  # LLVM's global context is not thread-safe


class JitError(RuntimeError):
    """llvmlite rejected the LLVM IR (the message holds LLVM's diagnostic)."""


@cache
def _init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@cache
def host_target_machine() -> llvm.TargetMachine:
    _init()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        codemodel="jitdefault",
    )


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


_BITS_LITERAL = re.compile(r"(?<![\w.$%@])f0x([0-9A-Fa-f]+)\b")
_HALF_TYPES = re.compile(r"\b(half|bfloat)\b")


def _rewrite_line(line: str) -> str:
    def literal(m: re.Match) -> str:
        bits = m.group(1).upper()
        if len(bits) == 8:  # float: LLVM 22 spells it as the double of the same value
            value = struct.unpack("<f", struct.pack("<I", int(bits, 16)))[0]
            return "0x" + struct.pack("<d", value)[::-1].hex().upper()
        if len(bits) == 16:
            return "0x" + bits
        kinds = _HALF_TYPES.findall(line[: m.start()])
        return ("0xR" if kinds and kinds[-1] == "bfloat" else "0xH") + bits

    return _BITS_LITERAL.sub(literal, line)


def to_llvmlite_syntax(llvm_ir: str) -> str:
    """Rewrite the `f0x<bits>` float literals printed by the MLIR bindings' newer LLVM into the
    `0x`/`0xH`/`0xR` forms that llvmlite's LLVM 22 parser reads (the same values, bit for bit)."""
    if "f0x" not in llvm_ir:
        return llvm_ir
    return "\n".join(_rewrite_line(line) if "f0x" in line else line for line in llvm_ir.split("\n"))


def _optimised(llvm_ir: str) -> llvm.ModuleRef:
    _init()
    try:
        module = llvm.parse_assembly(to_llvmlite_syntax(llvm_ir))
        module.verify()
    except RuntimeError as e:
        raise JitError(f"llvmlite (LLVM {llvm_version()}) rejected the LLVM IR: {e}") from None
    tm = host_target_machine()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    builder = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=3))
    builder.getModulePassManager().run(module, builder)
    return module


def optimise(llvm_ir: str) -> str:
    """The O3-optimised LLVM IR for the host CPU."""
    with _LOCK:
        return str(_optimised(llvm_ir))


def assembly(llvm_ir: str) -> str:
    """Host assembly of the O3-optimised module."""
    with _LOCK:
        return host_target_machine().emit_assembly(_optimised(llvm_ir))


class JitModule:
    """Machine code for one LLVM module, kept alive as long as this object is."""

    def __init__(self, llvm_ir: str):
        with _LOCK:
            module = _optimised(llvm_ir)
            self._engine = llvm.create_mcjit_compiler(module, host_target_machine())
            self._engine.finalize_object()
            self._engine.run_static_constructors()

    def address(self, symbol: str) -> int:
        addr = self._engine.get_function_address(symbol)
        if not addr:
            raise JitError(f"symbol '{symbol}' is not in the compiled module")
        return addr
