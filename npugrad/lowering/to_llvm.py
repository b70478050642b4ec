"""Loop-level IR → LLVM dialect → LLVM IR, with the upstream MLIR pass pipeline.

The (vectorised) loop-level module is printed in MLIR's generic form (lowering/mlir_text.py); upstream
MLIR parses it, runs the standard conversions, and translates the LLVM dialect to LLVM IR text. (xDSL cannot parse upstream's LLVM dialect output,
so everything after the vectorized stage stays on the upstream side.)
"""

from __future__ import annotations

import re
from collections.abc import Callable

# The upstream bindings (about 0.1 s to import) are imported by the functions that use them: a
# process that lowers nothing past the vectorized stage, or whose kernels all come from the disk
# caches (runtime/ir_cache.py), does without them.

TO_LLVM_PASSES = (
    # Every func gets a C interface (`_mlir_ciface_<name>`) taking pointers to memref descriptors.
    "func.func(llvm-request-c-wrappers)",
    "canonicalize",
    "cse",
    "convert-scf-to-cf",
    # bf16 has no native arithmetic here: expand its extf/truncf into integer ops (RNE).
    "arith-expand{include-bf16=true}",
    "convert-math-to-llvm",
    "expand-strided-metadata",
    "lower-affine",
    # The micro-kernels of vectorize-contractions: vector loads, stores, masks and FMAs, and
    # x86.avx512.dot (AVX512-BF16's vdpbf16ps; x86vector.avx512.dot in the printed stages, LLVM
    # 22's name: _NEWER) as its LLVM intrinsic.
    "convert-vector-to-llvm{enable-x86=true}",
    # memref.alloc and dealloc as calls of _mlir_memref_to_llvm_alloc and _free: machine_code's
    # support functions (malloc and free, a large buffer advised to take huge pages).
    "finalize-memref-to-llvm{use-generic-functions=true}",
    "convert-arith-to-llvm",
    "convert-index-to-llvm",
    "convert-func-to-llvm",
    # convert-to-llvm rather than convert-cf-to-llvm: the same conversion of the branches, with
    # every loaded dialect's types, the AMX tiles' among them (!amx.tile block arguments: the
    # tiles' reduction loops carry their accumulators in tile registers, vectorize-contractions'
    # amx_block). The rest is in the LLVM dialect by now.
    "convert-to-llvm",
    "reconcile-unrealized-casts",
)
TO_LLVM_PIPELINE = f"builtin.module({','.join(TO_LLVM_PASSES)})"
# Pipeline.line_tables: every llvm.func gets a debug-info scope, so that the translation keeps the
# ops' locations as line tables (labelled loops: lowering/mlir_text.py), and nothing else.
LINE_TABLES_PASS = "ensure-debug-info-scope-on-llvm-func{emission-kind=LineTablesOnly}"
# What the bindings' newer MLIR renamed, by LLVM 22's name: the printed stages and commands use
# the latter (Debian's mlir-opt-22 reads them), the bindings parse and run the former.
_NEWER = {"x86vector.avx512.dot": "x86.avx512.dot"}
# LLVM 22's AMX dialect (`amx.tile_load`, `!amx.tile<16x32xbf16>`) is the x86 dialect's
# `x86.amx.*` in the bindings' MLIR; convert-vector-to-llvm's enable-x86 lowers it there (LLVM 22:
# enable-amx) to the llvm.x86.tileloadd64/tdpbf16ps/tilestored64 intrinsics.
_NEWER_AMX = re.compile(r"(?<![\w.])(!?)amx\.tile")
# The same as LLVM 22's `mlir-opt --pass-pipeline=...` runs it (npugrad-opt --print-pipeline).
TO_LLVM_PIPELINE_22 = TO_LLVM_PIPELINE.replace("enable-x86=true", "enable-x86vector=true enable-amx=true")


class LoweringError(RuntimeError):
    """The upstream pipeline rejected a module (its diagnostics are in the message)."""


def _parse(ctx, text: str):
    from npugrad.lowering.mlir_bindings import ir

    for old, new in _NEWER.items():
        text = text.replace(old, new)
    if "amx.tile" in text:
        text = _NEWER_AMX.sub(r"\1x86.amx.tile", text)
    try:
        return ir.Module.parse(text)
    except ir.MLIRError as e:  # type: ignore[attr-defined]
        raise LoweringError(f"upstream MLIR could not parse the module: {e}") from None


def _outside_llvm_dialect(module) -> str | None:
    """The first op (name and location) that is not in the LLVM dialect, if any."""
    from npugrad.lowering.mlir_bindings import ir

    found = []

    def visit(op):
        if op.name != "builtin.module" and not op.name.startswith("llvm."):
            found.append(f"'{op.name}' at {op.location}")
            return ir.WalkResult.INTERRUPT
        return ir.WalkResult.ADVANCE

    module.operation.walk(visit, ir.WalkOrder.PRE_ORDER)
    return found[0] if found else None


def to_llvm_pipeline(line_tables: bool = False) -> str:
    """The upstream pass pipeline to the LLVM dialect, with line tables or without."""
    return TO_LLVM_PIPELINE if not line_tables else f"builtin.module({','.join((*TO_LLVM_PASSES, LINE_TABLES_PASS))})"


def _llvm_dialect_module(ctx, loops_mlir: str, line_tables: bool = False):
    """The loop-level module parsed into `ctx` and lowered there to the LLVM dialect."""
    from npugrad.lowering.mlir_bindings import ir, passmanager

    module = _parse(ctx, loops_mlir)
    pm = passmanager.PassManager.parse(to_llvm_pipeline(line_tables))
    # The module is verified once, after the last pass, not after each of the 16 (MLIR's
    # default, -verify-each, for debugging passes): upstream's passes are upstream's to test, the
    # parser verified what they start from, and the translation needs valid IR only at the end.
    # Verifying after each pass was 30 % of the pipeline's time (a FLCE gradient: 0.11 of 0.36 s).
    pm.enable_verifier(False)
    try:
        pm.run(module.operation)
        module.operation.verify()
    except ir.MLIRError as e:  # type: ignore[attr-defined]
        raise LoweringError(f"lowering to the LLVM dialect failed: {e}") from None
    if (left := _outside_llvm_dialect(module)) is not None:
        raise LoweringError(f"lowering to the LLVM dialect left {left} unconverted")
    return module


def to_llvm_dialect(loops_mlir: str, line_tables: bool = False) -> str:
    """The LLVM-dialect module (upstream's textual form) for a loop-level module."""
    from npugrad.lowering.mlir_bindings import ir

    with ir.Context() as ctx, ir.Location.unknown():
        return str(_llvm_dialect_module(ctx, loops_mlir, line_tables))


def loops_to_llvm_ir(loops_mlir: str, lowered: Callable[[], None] = lambda: None, line_tables: bool = False) -> str:
    """LLVM IR text for a loop-level module: to_llvm_ir(to_llvm_dialect(...)) without printing
    the LLVM dialect and parsing it back (a third of a FLCE gradient's time in upstream MLIR). `lowered()`
    is called between the passes and the translation (Pipeline.report_step's timing)."""
    from npugrad.lowering.mlir_bindings import ir, translate_module_to_llvmir

    with ir.Context() as ctx, ir.Location.unknown():
        module = _llvm_dialect_module(ctx, loops_mlir, line_tables)
        lowered()
        return translate_module_to_llvmir(module.operation)


def to_llvm_ir(llvm_dialect_mlir: str) -> str:
    """LLVM IR text for an LLVM-dialect module."""
    from npugrad.lowering.mlir_bindings import ir, translate_module_to_llvmir

    with ir.Context() as ctx, ir.Location.unknown():
        module = _parse(ctx, llvm_dialect_mlir)
        # The bindings' translation crashes the process on anything else.
        if (left := _outside_llvm_dialect(module)) is not None:
            raise LoweringError(f"cannot translate {left} to LLVM IR: it is not in the LLVM dialect")
        return translate_module_to_llvmir(module.operation)
