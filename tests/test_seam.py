"""The seam between two LLVMs: the MLIR bindings translate to LLVM IR with their (newer) LLVM,
llvmlite parses and compiles it with LLVM 22. Float literals are where the two syntaxes differ;
`to_llvmlite_syntax` must carry every constant across bit for bit."""

from __future__ import annotations

import gc
import importlib.metadata
import mmap
import re
from pathlib import Path

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest

from npugrad.lowering import machine_code, mlir_bindings
from npugrad.lowering.machine_code import to_llvmlite_syntax
from npugrad.lowering.to_llvm import LoweringError, to_llvm_dialect, to_llvm_ir
from npugrad.runtime.executable import Executable
from npugrad.runtime.jit import JitModule
from npugrad.runtime.kernel import MemRefSpec


def bindings_llvm_version() -> str:
    """The LLVM the MLIR bindings were built from: its libraries carry the string that
    `opt --version` prints. Failing that, the package that provides the bindings."""
    libs = Path(mlir_bindings.ir.__file__).parent / "_mlir_libs"
    for lib in sorted(libs.glob("*.so"), key=lambda p: -p.stat().st_size):
        with lib.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            if m := re.search(rb"LLVM version (\d[\w.]*)", data):
                return m.group(1).decode()
    package = "torch-mlir" if mlir_bindings.PROVIDER == "torch_mlir" else "mlir-python-bindings"
    return f"{mlir_bindings.PROVIDER} {importlib.metadata.version(package)}"


def test_llvm_versions():
    bindings, llvmlite = bindings_llvm_version(), machine_code.llvm_version()
    print(f"MLIR bindings ({mlir_bindings.PROVIDER}): LLVM {bindings}; llvmlite: LLVM {llvmlite}")
    assert bindings and llvmlite
    assert re.fullmatch(r"\d+\.\d+\.\d+", llvmlite)


# -- constants through the whole seam, bit for bit ------------------------------------------------

# (MLIR type, NumPy dtype, unsigned view, exponent bits, fraction bits)
TYPES = [
    ("f16", np.dtype(np.float16), np.uint16, 5, 10),
    ("bf16", np.dtype(ml_dtypes.bfloat16), np.uint16, 8, 7),
    ("f32", np.dtype(np.float32), np.uint32, 8, 23),
    ("f64", np.dtype(np.float64), np.uint64, 11, 52),
]


def special_bits(exponent_bits: int, fraction_bits: int) -> list[int]:
    """Infinities, NaNs (quiet, signalling, with payloads, negative), zeros and subnormals."""
    sign = 1 << (exponent_bits + fraction_bits)
    top = ((1 << exponent_bits) - 1) << fraction_bits
    quiet = 1 << (fraction_bits - 1)
    positive = [
        top,  # inf
        top | quiet,  # the default quiet NaN
        top | quiet | 5,  # a quiet NaN with a payload
        top | quiet | (quiet - 1),  # all payload bits set
        top | 1,  # the smallest signalling NaN
        top | (quiet >> 1),  # a signalling NaN with its top payload bit
        0,  # +0.0
        1,  # the smallest subnormal
        (1 << fraction_bits) - 1,  # the largest subnormal
        1 << fraction_bits,  # the smallest normal
        top - 1,  # the largest finite
    ]
    return positive + [sign | b for b in positive]


DECIMALS = [1e-12, 0.1, 1 / 3, 1.0, -2.5, np.pi, 0.999, 6.1e-05, 65504.0]


def expected_bits(dtype, view, exponent_bits, fraction_bits) -> np.ndarray:
    with np.errstate(over="ignore"):
        decimals = np.array(DECIMALS, np.float64).astype(dtype).view(view)
    return np.concatenate([np.array(special_bits(exponent_bits, fraction_bits), view), decimals])


def constants_module() -> tuple[str, list[MemRefSpec], list[np.ndarray]]:
    """A loop-level function that stores every constant twice: one `arith.constant` at a time
    (scalar operands in LLVM IR) and by copying a constant global (an array initializer)."""
    lines, globals_, args, specs, wants = [], [], [], [], []
    for mlir_t, dtype, view, eb, fb in TYPES:
        want = expected_bits(dtype, view, eb, fb)
        n = len(want)
        digits = np.dtype(view).itemsize * 2
        hex_bits = [f"0x{int(b):0{digits}X}" for b in want[: -len(DECIMALS)]]
        # The decimal values are written as decimals, for MLIR to round as NumPy does.
        literals = hex_bits + [f"{d:.16e}" for d in DECIMALS]
        t = f"memref<{n}x{mlir_t}>"
        globals_.append(f'memref.global "private" constant @table_{mlir_t} : {t} = dense<[{", ".join(literals)}]>')
        args += [f"%scalars_{mlir_t}: {t}", f"%table_{mlir_t}: {t}"]
        for i, literal in enumerate(literals):
            lines.append(f"  %{mlir_t}_{i} = arith.constant {literal} : {mlir_t}")
            lines.append(f"  %{mlir_t}_at{i} = arith.constant {i} : index")
            lines.append(f"  memref.store %{mlir_t}_{i}, %scalars_{mlir_t}[%{mlir_t}_at{i}] : {t}")
        lines.append(f"  %global_{mlir_t} = memref.get_global @table_{mlir_t} : {t}")
        lines.append(f"  memref.copy %global_{mlir_t}, %table_{mlir_t} : {t} to {t}")
        for kind in ("scalars", "table"):
            specs.append(MemRefSpec(f"{kind}_{mlir_t}", dtype, (n,), None))
            wants.append(want)
    text = "\n".join([*globals_, f"func.func @constants({', '.join(args)}) {{", *lines, "  func.return", "}"])
    return text, specs, wants


@pytest.fixture(scope="module")
def seam():
    text, specs, wants = constants_module()
    return to_llvm_ir(to_llvm_dialect(text)), specs, wants


def test_the_bindings_print_the_newer_syntax(seam):
    """What this seam is for: the bindings' LLVM prints special values and hex bits in forms
    LLVM 22 does not read (if this fails, the seam may no longer be needed)."""
    llvm_ir = seam[0]
    for form in ("+inf", "-inf", "+qnan", "-qnan", "+nan(0x", "+snan(0x", "-snan(0x", "f0x"):
        assert form in llvm_ir, form
    with pytest.raises(RuntimeError):
        llvm.parse_assembly(llvm_ir)


def test_llvmlite_reads_the_rewritten_module(seam):
    module = llvm.parse_assembly(to_llvmlite_syntax(seam[0]))
    module.verify()


def test_every_constant_arrives_bit_for_bit(seam):
    llvm_ir, specs, wants = seam
    executable = Executable(llvm_ir, {"constants": specs})
    arrays = [np.zeros(s.shape, s.dtype) for s in specs]
    executable["constants"](*arrays)
    for spec, got, want in zip(specs, arrays, wants):
        got_bits = got.view(want.dtype)
        bad = np.flatnonzero(got_bits != want)
        assert bad.size == 0, f"{spec.name}: " + ", ".join(f"[{i}] {got_bits[i]:#x} != {want[i]:#x}" for i in bad)


def test_translation_refuses_ops_outside_the_llvm_dialect():
    """The bindings' translation crashes the process on them; a LoweringError names the op."""
    with pytest.raises(LoweringError, match=r"cannot translate 'func.func' at loc\(.*\) to LLVM IR"):
        to_llvm_ir("func.func @f() {\n  return\n}\n")


def test_a_freed_engine_leaves_the_shared_target_machine_alone(seam):
    """An MCJIT engine owns (and frees) the target machine it is given; the cached one that
    optimises and prints assembly for every module must survive engines that come and go."""
    for _ in range(3):
        JitModule(seam[0])
        gc.collect()
    assert machine_code.host_target_machine().triple == llvm.get_default_triple()
    assert "constants:" in machine_code.assembly(seam[0])


# -- to_llvmlite_syntax on hand-written lines ---------------------------------------------------

HEADER = """declare void @g(half, bfloat, float, double)
define void @f(ptr %p, i1 %c, float %x, half %a, bfloat %b, double %d, <4 x bfloat> %v, float %inf) {
"""

# (newer LLVM's line, LLVM 22's line)
LINES = [
    # f0x<bits>, preceded by the literal's own type
    ("store float f0x3F800000, ptr %p", "store float 0x3FF0000000000000, ptr %p"),
    ("store double f0x3FD5555555555555, ptr %p", "store double 0x3FD5555555555555, ptr %p"),
    ("store half f0x3C00, ptr %p", "store half 0xH3C00, ptr %p"),
    ("store bfloat f0x3F80, ptr %p", "store bfloat 0xR3F80, ptr %p"),
    ("store float f0x00000001, ptr %p", "store float 0x36A0000000000000, ptr %p"),
    # ... or not: the second operand of a binary op or a compare
    ("%r = fadd float %x, f0x3F800000", "%r = fadd float %x, 0x3FF0000000000000"),
    ("%r = fcmp olt half %a, f0x3C00", "%r = fcmp olt half %a, 0xH3C00"),
    ("%r = fmul bfloat %b, f0xBF80", "%r = fmul bfloat %b, 0xRBF80"),
    ("%r = fdiv double %d, f0x3D719799812DEA11", "%r = fdiv double %d, 0x3D719799812DEA11"),
    # bfloat vectors: element lists and splats
    (
        "store <2 x bfloat> <bfloat f0x3F80, bfloat -inf>, ptr %p",
        "store <2 x bfloat> <bfloat 0xR3F80, bfloat 0xRFF80>, ptr %p",
    ),
    ("%r = fmul <4 x bfloat> %v, splat (bfloat f0x4000)", "%r = fmul <4 x bfloat> %v, splat (bfloat 0xR4000)"),
    (
        "%r = fcmp ogt <4 x bfloat> %v, <bfloat +qnan, bfloat -qnan, bfloat +snan(0x1), bfloat +nan(0x3F)>",
        "%r = fcmp ogt <4 x bfloat> %v, <bfloat 0xR7FC0, bfloat 0xRFFC0, bfloat 0xR7F81, bfloat 0xR7FFF>",
    ),
    # special values, per type
    ("store half +inf, ptr %p", "store half 0xH7C00, ptr %p"),
    ("store half -snan(0x1), ptr %p", "store half 0xHFC01, ptr %p"),
    ("store half +nan(0x1FF), ptr %p", "store half 0xH7FFF, ptr %p"),
    ("store float -inf, ptr %p", "store float 0xFFF0000000000000, ptr %p"),
    ("store float +qnan, ptr %p", "store float 0x7FF8000000000000, ptr %p"),
    ("store float -nan(0x3FFFFF), ptr %p", "store float 0xFFFFFFFFE0000000, ptr %p"),
    # A signalling float NaN stays signalling as a double (no hardware float->double conversion).
    ("store float +snan(0x1), ptr %p", "store float 0x7FF0000020000000, ptr %p"),
    ("store double +snan(0x4000000000000), ptr %p", "store double 0x7FF4000000000000, ptr %p"),
    ("store double -qnan, ptr %p", "store double 0xFFF8000000000000, ptr %p"),
    # decimals: double as is; narrower types rounded once to the type (LLVM 22 wants them exact)
    ("store double 1.000000e-12, ptr %p", "store double 1.000000e-12, ptr %p"),
    ("store float 9.990000e-01, ptr %p", "store float 0x3FEFF7CEE0000000, ptr %p"),
    ("store float -0.000000e+00, ptr %p", "store float 0x8000000000000000, ptr %p"),
    ("store half 5.960460e-08, ptr %p", "store half 0xH0001, ptr %p"),
    ("store bfloat 1.001870e-12, ptr %p", "store bfloat 0xR2B8D, ptr %p"),
    # 1 + 2**-24 + 2**-54: through a double it would round twice, to 1.0
    (
        "store float 1.0000000596046447753906805511151231257827021181583404541015625e+00, ptr %p",
        "store float 0x3FF0000020000000, ptr %p",
    ),
    # several types on one line; names that are type keywords or special values are not types
    ("%r = select i1 %c, half f0x3C00, half +inf", "%r = select i1 %c, half 0xH3C00, half 0xH7C00"),
    (
        "call void @g(half f0x3C00, bfloat f0x3F80, float f0x3F800000, double -inf)",
        "call void @g(half 0xH3C00, bfloat 0xR3F80, float 0x3FF0000000000000, double 0xFFF0000000000000)",
    ),
    ("%half = fadd bfloat %b, f0x3F80", "%half = fadd bfloat %b, 0xR3F80"),
    ("%float = fadd half %a, f0x3C00", "%float = fadd half %a, 0xH3C00"),
    ("%r = fadd float %inf, +inf", "%r = fadd float %inf, 0x7FF0000000000000"),
    # LLVM 22's own syntax and everything else pass unchanged
    ("store half 0xH3C00, ptr %p", "store half 0xH3C00, ptr %p"),
    ("store float 0x3FF0000000000000, ptr %p", "store float 0x3FF0000000000000, ptr %p"),
    ("%r = fadd nnan ninf float %x, %x", "%r = fadd nnan ninf float %x, %x"),
    ("%r = fadd float %x, 1.000000e+00", "%r = fadd float %x, 0x3FF0000000000000"),
]


@pytest.mark.parametrize(("new", "old"), LINES, ids=[n for n, _ in LINES])
def test_line(new, old):
    assert to_llvmlite_syntax(new) == old
    assert to_llvmlite_syntax(old) == old


def test_rewritten_lines_parse_in_llvmlite():
    """Every rewritten line is valid LLVM 22 IR (with its results renamed apart)."""
    body = [re.sub(r"^%\w+ =", f"%r{i} =", to_llvmlite_syntax(new)) for i, (new, _) in enumerate(LINES)]
    llvm.parse_assembly(HEADER + "".join(f"  {line}\n" for line in body) + "  ret void\n}\n").verify()


def test_array_initializer():
    new = "@t = private constant [3 x half] [half +inf, half f0x3C00, half -0.000000e+00]"
    assert to_llvmlite_syntax(new) == "@t = private constant [3 x half] [half 0xH7C00, half 0xH3C00, half 0xH8000]"


@pytest.mark.parametrize(
    "line",
    [
        "; a comment about float +inf and f0x3F800000",
        'source_filename = "float 1.5"',
        '!0 = !{!"float +inf"}',
        "define void @half(float nofpclass(nan inf) %x) {",
    ],
)
def test_lines_without_literals_are_unchanged(line):
    assert to_llvmlite_syntax(line) == line
