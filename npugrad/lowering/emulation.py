"""Running code shaped for a CPU this one is not: the instructions it lacks, emulated in generic
LLVM IR, so that the kernels compiled for a target with them (e.g. `--cpu` a target file with
`+avx512bf16`) can be run and checked here, slowly, bit for bit what the instruction computes.

Off unless asked for: `NPUGRAD_EMULATE=avx512bf16` (a comma-separated list of LLVM feature
names), or `with emulating("avx512bf16"): ...` around the calls that compile. Only where the
host lacks the feature; a host that has it runs the instruction. Without it a module using such
an instruction is refused (machine_code.parsed), since LLVM's code generator would abort the
process.

Emulated:
- avx512bf16 `vdpbf16ps` (llvm.x86.avx512bf16.dpbf16ps.{128,256,512}): per float32 lane j,
  acc += a[2j+1]·b[2j+1], then acc += a[2j]·b[2j], each a fused multiply-add rounded to nearest
  even with denormal inputs read as zero (bfloat16 factors and the accumulator) and denormal
  results flushed to zero, each keeping its sign (Intel SDM, VDPBF16PS: "FP32 FMA with daz in,
  ftz out and RNE rounding"). A bfloat16 product is exact in float32's significand, so the
  fused and the unfused sum differ only where the product leaves float32's exponent range.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

ENV = "NPUGRAD_EMULATE"
_ASKED: contextvars.ContextVar[frozenset[str]] = contextvars.ContextVar("npugrad_emulate", default=frozenset())

_DOT = re.compile(r"@llvm\.x86\.avx512bf16\.dpbf16ps\.(128|256|512)\b")
_DECLARE = re.compile(r"^declare [^\n]*@llvm\.x86\.avx512bf16\.dpbf16ps\.(?:128|256|512)\([^\n]*\n?", re.MULTILINE)
EMULATED_FEATURES = ("avx512bf16",)


@contextlib.contextmanager
def emulating(*features: str) -> Iterator[None]:
    """Emulate `features` (LLVM names, e.g. "avx512bf16") in the code compiled inside the block,
    where the host lacks them."""
    _known(features, "emulating")
    token = _ASKED.set(_ASKED.get() | frozenset(features))
    try:
        yield
    finally:
        _ASKED.reset(token)


def requested() -> frozenset[str]:
    """The features asked for: by `emulating` and by NPUGRAD_EMULATE."""
    env = frozenset(f.strip() for f in os.environ.get(ENV, "").split(",") if f.strip())
    _known(env, ENV)
    return _ASKED.get() | env


def _known(features: Iterable[str], where: str) -> None:
    unknown = sorted(set(features) - set(EMULATED_FEATURES))
    if unknown:
        raise ValueError(f"{where}: no emulation of {', '.join(unknown)} (emulated: {', '.join(EMULATED_FEATURES)})")


def emulate(llvm_ir: str, features: Iterable[str]) -> str:
    """`llvm_ir` with the instructions of `features` replaced by calls of generic definitions
    (appended to the module); unchanged where it uses none of them."""
    if "avx512bf16" not in set(features) or not _DOT.search(llvm_ir):
        return llvm_ir
    widths = sorted({int(m.group(1)) for m in _DOT.finditer(llvm_ir)})
    body = _DECLARE.sub("", llvm_ir)
    body = _DOT.sub(lambda m: f"@npugrad_emulated_dpbf16ps_{m.group(1)}", body)
    text = body + "\n" + "".join(_dot_definition(bits // 32) for bits in widths)
    for lanes in (bits // 32 for bits in widths):
        f = f"<{lanes} x float>"
        if not re.search(rf"^declare [^\n]*@llvm\.fma\.v{lanes}f32\(", text, re.MULTILINE):
            text += f"\ndeclare {f} @llvm.fma.v{lanes}f32({f}, {f}, {f})\n"
    return text


def _splat(lanes: int, type_: str, value: int) -> str:
    return "<" + ", ".join([f"{type_} {value}"] * lanes) + ">"


def _dot_definition(lanes: int) -> str:
    """vdpbf16ps on `lanes` float32 lanes, in generic IR (see the module's docstring)."""
    f, i = f"<{lanes} x float>", f"<{lanes} x i32>"
    pairs = f"<{2 * lanes} x bfloat>"
    high = _splat(lanes, "i32", 0xFFFF0000 - (1 << 32))  # i32 constants are signed in the IR text
    sixteen = _splat(lanes, "i32", 16)
    exponent = _splat(lanes, "i32", 0x7F800000)
    sign = _splat(lanes, "i32", 0x80000000 - (1 << 32))
    zero = _splat(lanes, "i32", 0)
    w = lanes * 32
    return f"""
define internal {i} @npugrad_emulated_flush_{w}({i} %bits) alwaysinline {{
  %e = and {i} %bits, {exponent}
  %denormal = icmp eq {i} %e, {zero}
  %signed_zero = and {i} %bits, {sign}
  %r = select <{lanes} x i1> %denormal, {i} %signed_zero, {i} %bits
  ret {i} %r
}}

define internal {f} @npugrad_emulated_dpbf16ps_{w}({f} %acc, {pairs} %a, {pairs} %b) alwaysinline {{
  %ap = bitcast {pairs} %a to {i}
  %bp = bitcast {pairs} %b to {i}
  %a_odd_bits = and {i} %ap, {high}
  %b_odd_bits = and {i} %bp, {high}
  %a_even_bits = shl {i} %ap, {sixteen}
  %b_even_bits = shl {i} %bp, {sixteen}
  %a_odd_daz = call {i} @npugrad_emulated_flush_{w}({i} %a_odd_bits)
  %b_odd_daz = call {i} @npugrad_emulated_flush_{w}({i} %b_odd_bits)
  %a_even_daz = call {i} @npugrad_emulated_flush_{w}({i} %a_even_bits)
  %b_even_daz = call {i} @npugrad_emulated_flush_{w}({i} %b_even_bits)
  %a_odd = bitcast {i} %a_odd_daz to {f}
  %b_odd = bitcast {i} %b_odd_daz to {f}
  %a_even = bitcast {i} %a_even_daz to {f}
  %b_even = bitcast {i} %b_even_daz to {f}
  %acc_bits = bitcast {f} %acc to {i}
  %acc_daz_bits = call {i} @npugrad_emulated_flush_{w}({i} %acc_bits)
  %acc_daz = bitcast {i} %acc_daz_bits to {f}
  %s1 = call {f} @llvm.fma.v{lanes}f32({f} %a_odd, {f} %b_odd, {f} %acc_daz)
  %s1_bits = bitcast {f} %s1 to {i}
  %s1_ftz_bits = call {i} @npugrad_emulated_flush_{w}({i} %s1_bits)
  %s1_ftz = bitcast {i} %s1_ftz_bits to {f}
  %s2 = call {f} @llvm.fma.v{lanes}f32({f} %a_even, {f} %b_even, {f} %s1_ftz)
  %s2_bits = bitcast {f} %s2 to {i}
  %s2_ftz_bits = call {i} @npugrad_emulated_flush_{w}({i} %s2_bits)
  %r = bitcast {i} %s2_ftz_bits to {f}
  ret {f} %r
}}
"""


def for_host(llvm_ir: str, host_features: Callable[[], Mapping[str, bool]]) -> str:
    """`llvm_ir` with the requested features this host lacks emulated; `host_features` (LLVM's
    query of the host) is called only when some are requested."""
    asked = requested()
    if not asked:
        return llvm_ir
    features = host_features()
    return emulate(llvm_ir, [f for f in asked if not features.get(f)])
