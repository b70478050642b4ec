"""The JIT's support functions: library routines that LLVM's code generator calls on CPUs without
an instruction for an operation (float -> bfloat16 rounding without AVX512-BF16, float16 <-> float
without F16C), which the process need not define. Unresolved, such a call would jump to address 0:
the JIT refuses a module that calls what nothing defines."""

from __future__ import annotations

import ctypes
import functools

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
from llvm_loops import counted_loop

from npugrad.lowering.machine_code import JitError
from npugrad.runtime.jit import JitModule
from npugrad.targets import get

# A float -> bfloat16 rounding in plain LLVM IR: a native instruction where the CPU has one, a
# call to __truncsfbf2 where it has not.
TRUNCATE = counted_loop("truncate", "ptr %src, ptr %dst", """
    %p = getelementptr float, ptr %src, i64 %i
    %x = load float, ptr %p
    %y = fptrunc float %x to bfloat
    %q = getelementptr bfloat, ptr %dst, i64 %i
    store bfloat %y, ptr %q
""")


def test_float_to_bfloat16_rounds_to_nearest_even_on_any_cpu(rng):
    module = JitModule(TRUNCATE)
    truncate = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(module.address("truncate"))
    ties = np.array([0x3F808000, 0x3F818000, 0x3F80FFFF, 0xBF808000], np.uint32).view(np.float32)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 1e-40, -3e38, 3.4e38], np.float32)
    src = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 1e3, ties, specials])
    dst = np.zeros(src.size, ml_dtypes.bfloat16)
    truncate(src.ctypes.data, dst.ctypes.data, src.size)
    expected = src.astype(ml_dtypes.bfloat16)
    if get("host").has_feature("avx512bf16"):
        # The native instruction (vcvtneps2bf16) rounds to nearest even but, whatever MXCSR
        # says, reads float32 subnormals as zero (Intel SDM, VCVTNEPS2BF16: "DAZ"): 1e-40 -> +0.
        subnormal = np.abs(src) < np.finfo(np.float32).tiny
        expected[subnormal] = np.copysign(np.float32(0), src[subnormal]).astype(ml_dtypes.bfloat16)
    assert dst.view(np.uint16).tolist() == expected.view(np.uint16).tolist()
    nan = np.array([np.nan], np.float32)
    out = np.zeros(1, ml_dtypes.bfloat16)
    truncate(nan.ctypes.data, out.ctypes.data, 1)
    assert np.isnan(out.astype(np.float32))[0]


@functools.cache
def _loop(name: str, src: str, dst: str, body: str, after: str = ""):
    """A function converting n elements of type `src` into `dst` (`body` makes %y of %x)."""
    module = JitModule(counted_loop(name, "ptr %src, ptr %dst", f"""
        %p = getelementptr {src}, ptr %src, i64 %i
        %x = load {src}, ptr %p
        {body}
        %q = getelementptr {dst}, ptr %dst, i64 %i
        store {dst} %y, ptr %q
    """, after=after))
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(module.address(name))

    def run(values: np.ndarray, out_dtype) -> np.ndarray:
        out = np.zeros(values.size, out_dtype)
        function(values.ctypes.data, out.ctypes.data, values.size)
        return out

    run.module = module  # type: ignore[attr-defined]  # alive as long as run is
    return run


# The support functions called as the code generator calls them on a CPU without F16C, whatever
# this one has; and the conversions as this CPU runs them (vcvtph2ps / vcvtps2ph with F16C).
def EXTEND(values, dtype):
    return _loop("extend", "half", "float", "%y = call float @__extendhfsf2(half %x)",
                 "declare float @__extendhfsf2(half)")(values, dtype)


def TRUNC16(values, dtype):
    return _loop("trunc16", "float", "half", "%y = call half @__truncsfhf2(float %x)",
                 "declare half @__truncsfhf2(float)")(values, dtype)


def NATIVE_EXTEND(values, dtype):
    return _loop("native_extend", "half", "float", "%y = fpext half %x to float")(values, dtype)


def NATIVE_TRUNC16(values, dtype):
    return _loop("native_trunc16", "float", "half", "%y = fptrunc float %x to half")(values, dtype)


def test_float16_to_float_without_f16c_is_exact_and_quiets_nans():
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    got = EXTEND(halves, np.float32).view(np.uint32)
    nan = np.isnan(halves.view(np.float16))
    assert nan.sum() == 2 * 1023  # both signs, 1023 payloads each
    want = halves.view(np.float16).astype(np.float32).view(np.uint32)
    assert got[~nan].tolist() == want[~nan].tolist()  # subnormals, zeros, infinities: exact
    h = halves[nan].astype(np.uint32)
    quiet = ((h & 0x8000) << 16) | 0x7F800000 | 0x400000 | ((h & 0x3FF) << 13)
    assert got[nan].tolist() == quiet.tolist()
    if get("host").has_feature("f16c"):  # vcvtph2ps, bit for bit
        assert got.tolist() == NATIVE_EXTEND(halves, np.float32).view(np.uint32).tolist()


def test_float_to_float16_without_f16c_rounds_to_nearest_even(rng):
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float32)  # every finite magnitude
    mids = (halves[:-1].astype(np.float64) + halves[1:]) / 2  # ties, exact in float32
    near = mids.astype(np.float32).view(np.uint32)
    edges = np.array([65504, 65519.996, 65520, 65536, 3.4e38, 2.0**-24, 2.0**-25, 2.0**-25 * 1.0000001, 2.0**-26,
                      2.0**-14, 2.0**-14 * (1 - 2.0**-11), 1e-40, 1e-45, 0.0], np.float32)
    values = np.concatenate([halves, mids.astype(np.float32), (near - 1).view(np.float32), (near + 1).view(np.float32),
                             edges, rng.integers(0, 1 << 32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32),
                             np.array([np.inf], np.float32)])
    values = np.concatenate([values, -values])
    got = TRUNC16(values, np.float16).view(np.uint16)
    nan = np.isnan(values)
    assert 1000 < nan.sum() < 10_000  # the random bit patterns hold NaNs: their payloads
    with np.errstate(over="ignore"):
        want = values.astype(np.float16).view(np.uint16)
    assert got[~nan].tolist() == want[~nan].tolist()
    bits = values[nan].view(np.uint32)
    quiet = ((bits >> 16) & 0x8000) | 0x7E00 | ((bits >> 13) & 0x3FF)
    assert got[nan].tolist() == quiet.tolist()
    if get("host").has_feature("f16c"):  # vcvtps2ph, bit for bit
        assert got.tolist() == NATIVE_TRUNC16(values, np.float16).view(np.uint16).tolist()


def test_a_module_calling_what_nothing_defines_is_refused_before_it_runs():
    module = counted_loop("calls", "ptr %src", """
        %p = getelementptr float, ptr %src, i64 %i
        %x = load float, ptr %p
        %y = call float @npugrad_no_such_function(float %x)
        store float %y, ptr %p
    """, after="declare float @npugrad_no_such_function(float)")
    with pytest.raises(JitError, match=r"calls npugrad_no_such_function, which nothing in this process defines"):
        JitModule(module)


# One AVX512-BF16 dot product (vdpbf16ps), as vectorize-contractions emits them for a target with
# +avx512bf16: LLVM's code generator aborts the process on a CPU without the feature.
DOT_BF16 = """
declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)

define void @dot(ptr %acc, ptr %a, ptr %b) {
entry:
  %c = load <16 x float>, ptr %acc, align 4
  %x = load <32 x bfloat>, ptr %a, align 2
  %y = load <32 x bfloat>, ptr %b, align 2
  %r = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %c, <32 x bfloat> %x, <32 x bfloat> %y)
  store <16 x float> %r, ptr %acc, align 4
  ret void
}
"""


def test_a_module_with_bf16_dot_products_is_refused_on_a_cpu_without_them(monkeypatch):
    features = dict(llvm.get_host_cpu_features())
    features["avx512bf16"] = False
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: features)
    with pytest.raises(JitError, match=r"avx512bf16 instructions, which this CPU .* lacks"):
        JitModule(DOT_BF16)


@pytest.mark.skipif(not get("host").has_feature("avx512bf16"), reason="the CPU lacks AVX512-BF16")
def test_a_module_with_bf16_dot_products_runs_on_a_cpu_with_them(rng):
    acc = rng.standard_normal(16).astype(np.float32)
    a, b = (rng.standard_normal(32).astype(ml_dtypes.bfloat16) for _ in range(2))
    expected = acc.astype(np.float64) + (a.astype(np.float64) * b.astype(np.float64)).reshape(16, 2).sum(axis=1)
    module = JitModule(DOT_BF16)
    dot = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)(module.address("dot"))
    dot(acc.ctypes.data, a.ctypes.data, b.ctypes.data)
    np.testing.assert_allclose(acc, expected, rtol=1e-6, atol=1e-6)
