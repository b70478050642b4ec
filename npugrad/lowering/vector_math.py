"""exp in LLVM IR, for every float32 width: what LLVM itself does with `llvm.exp` on a vector is
one libm `expf` call per lane (8 calls per AVX2 vector: measured on a Zen 3, 5.8 % of the linear
cross-entropy forward's time, FLCE 2048 x 2048 x 8192 on one core), so each use of
`llvm.exp.f32` / `llvm.exp.v<N>f32` in the translated module is replaced by a call to an inlined
function of straight-line vector code (`expand_exp`), the same arithmetic for a scalar and for
every lane of a vector: results do not depend on where an element falls (vector body or scalar
tail, which thread).

    exp(x) = 2^n · p(r),  n = rint(x·log2 e),  r = x − n·C1 − n·C2  (C1 + C2 = ln 2, C1 exact in
    9 bits: n·C1 is exact),  p(r) = 1 + r + r²·(p5 + r·(p4 + … r·p0))   (Cephes' expf minimax
    polynomial on |r| ≤ ln2/2: within 1 ulp of exp in float32 arithmetic, with FMA or without)

The multiply-adds are `llvm.fma`, or, for a CPU without FMA instructions (the `host` target's
features say "-fma": x86-64-v2 machines), `llvm.fmuladd`: LLVM makes each lane of an `llvm.fma`
a libm `fmaf` call there, and of an `llvm.fmuladd` a multiply and an add.

x is first clamped to [−104, 88.8] (beyond those exp rounds to 0 and to +inf): n then lies in
[−150, 129], and 2^n is applied as two factors 2^⌊n/2⌋ · 2^(n−⌊n/2⌋), each a normal float, so
results in the subnormal range underflow gradually (one rounding) and those past FLT_MAX become
+inf. exp(−inf) = 0, exp(+inf) = +inf, exp(NaN) = NaN (selected at the end: the clamp's maxnum
would drop it). Checked against float64 exp on every float32 in [−104, 89] at a stride and on
the special values: tests/test_vector_math.py.
"""

from __future__ import annotations

import re
import struct

import numpy as np

# Cephes expf (Stephen L. Moshier): ln 2 split, minimax coefficients on [−ln2/2, ln2/2].
C1 = 0.693359375
C2 = -2.12194440e-4
POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)
LOG2E = 1.44269504088896341
LOW, HIGH = -104.0, 88.8

_USE = re.compile(r"@llvm\.exp\.(v(\d+)f32|f32)\b")
_DECLARE = re.compile(r"^declare [^\n]*@llvm\.exp\.(?:v\d+f32|f32)\([^\n]*\n", re.MULTILINE)


def _float(value: float) -> str:
    """A float32 constant in LLVM's exact hexadecimal (double) form."""
    return "0x" + struct.pack(">d", float(np.float32(value))).hex().upper()


def _splat(lanes: int, element: str, value: str) -> str:
    if lanes == 1:
        return value
    return "<" + ", ".join(f"{element} {value}" for _ in range(lanes)) + ">"


def _multiply_add(fused: bool) -> str:
    """The intrinsic exp's multiply-adds call (expand_exp's `fused`)."""
    return "fma" if fused else "fmuladd"


def function_name(lanes: int) -> str:
    return f"npugrad.exp.{'f32' if lanes == 1 else f'v{lanes}f32'}"


def expand_exp(lanes: int, fused: bool = True) -> str:
    """The LLVM IR definition of exp on `lanes` float32 lanes (1: a scalar). `fused`: its
    multiply-adds are `llvm.fma`; otherwise `llvm.fmuladd`, a multiply and an add on a CPU
    without FMA instructions, where each lane of an `llvm.fma` is a libm `fmaf` call."""
    t = "float" if lanes == 1 else f"<{lanes} x float>"
    it = "i32" if lanes == 1 else f"<{lanes} x i32>"
    bt = "i1" if lanes == 1 else f"<{lanes} x i1>"
    sfx = "f32" if lanes == 1 else f"v{lanes}f32"

    def f(value: float) -> str:
        return _splat(lanes, "float", _float(value))

    def i(value: int) -> str:
        return _splat(lanes, "i32", str(value))

    fma = f"@llvm.{_multiply_add(fused)}.{sfx}"
    lines = [
        f"define internal {t} @{function_name(lanes)}({t} %x) alwaysinline {{",
        f"  %lo = call {t} @llvm.maxnum.{sfx}({t} %x, {t} {f(LOW)})",
        f"  %xc = call {t} @llvm.minnum.{sfx}({t} %lo, {t} {f(HIGH)})",
        f"  %t = fmul {t} %xc, {f(LOG2E)}",
        f"  %n = call {t} @llvm.rint.{sfx}({t} %t)",
        f"  %r0 = call {t} {fma}({t} %n, {t} {f(-C1)}, {t} %xc)",
        f"  %r = call {t} {fma}({t} %n, {t} {f(-C2)}, {t} %r0)",
        f"  %y0 = call {t} {fma}({t} {f(POLY[0])}, {t} %r, {t} {f(POLY[1])})",
    ]
    for k, c in enumerate(POLY[2:], start=1):
        lines.append(f"  %y{k} = call {t} {fma}({t} %y{k - 1}, {t} %r, {t} {f(c)})")
    last = len(POLY) - 2
    lines += [
        f"  %r2 = fmul {t} %r, %r",
        f"  %q = call {t} {fma}({t} %y{last}, {t} %r2, {t} %r)",
        f"  %p = fadd {t} %q, {f(1.0)}",
        f"  %ni = fptosi {t} %n to {it}",
        f"  %n1 = ashr {it} %ni, {i(1)}",
        f"  %n2 = sub {it} %ni, %n1",
        f"  %e1 = add {it} %n1, {i(127)}",
        f"  %e2 = add {it} %n2, {i(127)}",
        f"  %b1 = shl {it} %e1, {i(23)}",
        f"  %b2 = shl {it} %e2, {i(23)}",
        f"  %s1 = bitcast {it} %b1 to {t}",
        f"  %s2 = bitcast {it} %b2 to {t}",
        f"  %m = fmul {t} %p, %s1",
        f"  %e = fmul {t} %m, %s2",
        f"  %nan = fcmp uno {t} %x, %x",
        f"  %out = select {bt} %nan, {t} %x, {t} %e",
        f"  ret {t} %out",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _intrinsics(lanes: int, fused: bool) -> list[str]:
    t = "float" if lanes == 1 else f"<{lanes} x float>"
    sfx = "f32" if lanes == 1 else f"v{lanes}f32"
    return [f"declare {t} @llvm.{name}.{sfx}({', '.join([t] * arity)})"
            for name, arity in (("maxnum", 2), ("minnum", 2), ("rint", 1), (_multiply_add(fused), 3))]


def replace_exp(llvm_ir: str, fused: bool = True) -> str:
    """`llvm_ir` with every float32 `llvm.exp` replaced by a call to expand_exp's function of its
    width (defined once per width, appended with the intrinsics it calls); `fused`: whether the
    CPU it is for has FMA instructions (expand_exp)."""
    widths = {1 if m.group(1) == "f32" else int(m.group(2)) for m in _USE.finditer(llvm_ir)}
    if not widths:
        return llvm_ir
    text = _DECLARE.sub("", llvm_ir)
    text = _USE.sub(lambda m: "@" + function_name(1 if m.group(1) == "f32" else int(m.group(2))), text)
    declared = set(re.findall(r"^declare [^\n]*?(@[\w.]+)\(", text, re.MULTILINE))
    extra = []
    for lanes in sorted(widths):
        extra.append(expand_exp(lanes, fused))
        for d in _intrinsics(lanes, fused):
            name = re.search(r"(@[\w.]+)\(", d).group(1)  # type: ignore[union-attr]
            if name not in declared:
                declared.add(name)
                extra.append(d + "\n")
    return text.rstrip("\n") + "\n\n" + "".join(extra)


__all__ = ["expand_exp", "function_name", "replace_exp"]
