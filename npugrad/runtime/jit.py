"""LLVM IR → optimised machine code for this CPU (llvmlite, O3), JIT-linked into the process."""

from __future__ import annotations

import re
import struct
import threading
from functools import cache

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np

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


# A float literal: `f0x<bits>` (the newer LLVM's hex form) or a decimal like `9.990000e-01`.
_LITERAL = re.compile(
    r"(?<![\w.$%@#!\"-])(?:f0x(?P<bits>[0-9A-Fa-f]+)\b|(?P<dec>[-+]?\d+\.\d*(?:[eE][-+]?\d+)?)(?![\w.]))"
)
_FLOAT_TYPES = re.compile(r"\b(half|bfloat|float|double)\b")


def _double_hex(value: float) -> str:
    return "0x" + struct.pack("<d", value)[::-1].hex().upper()


def _rewrite_line(line: str) -> str:
    def literal(m: re.Match) -> str:
        kinds = _FLOAT_TYPES.findall(line[: m.start()])
        kind = kinds[-1] if kinds else None
        if m.group("bits") is not None:
            bits = m.group("bits").upper()
            if len(bits) == 8:  # float: LLVM 22 spells it as the double of the same value
                return _double_hex(struct.unpack("<f", struct.pack("<I", int(bits, 16)))[0])
            if len(bits) == 16:
                return "0x" + bits
            return ("0xR" if kind == "bfloat" else "0xH") + bits
        # LLVM 22 rejects a decimal float constant that the type cannot hold exactly (0.999 as
        # a float): round it to the type, as the newer LLVM did when it printed it.
        value = float(m.group("dec"))
        if kind == "float":
            return _double_hex(float(np.float32(value)))
        if kind == "half":
            return "0xH" + f"{int(np.float16(value).view(np.uint16)):04X}"
        if kind == "bfloat":
            return "0xR" + f"{int(np.array(value, ml_dtypes.bfloat16).view(np.uint16)):04X}"
        return m.group(0)

    return _LITERAL.sub(literal, line)


def to_llvmlite_syntax(llvm_ir: str) -> str:
    """Rewrite float literals printed by the MLIR bindings' newer LLVM into what llvmlite's
    LLVM 22 parser reads: `f0x<bits>` into the `0x`/`0xH`/`0xR` forms, and decimal constants
    of float, half and bfloat type into hex of the value rounded to that type (bit for bit
    the constant the newer LLVM meant)."""
    return "\n".join(
        _rewrite_line(line) if _FLOAT_TYPES.search(line) and not line.lstrip().startswith(("define", "declare", ";", "!"))
        else line
        for line in llvm_ir.split("\n")
    )


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
