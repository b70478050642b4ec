"""The JIT's support functions: library routines that LLVM's code generator calls on CPUs without
an instruction for an operation (float -> bfloat16 rounding without AVX512-BF16), which the process
need not define. Unresolved, such a call jumps to address 0."""

from __future__ import annotations

import ctypes

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
