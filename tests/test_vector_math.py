"""exp as the compiled kernels compute it (lowering/vector_math.py): every float32 llvm.exp, scalar
or vector, becomes the same straight-line code. Checked here against float64 exp, through the JIT,
on every 97th float32 bit pattern between -104 and 89 and on the special values: within 1 ulp
where the result is a normal float, within 1 unit of the smallest subnormal below that, and exact
for 0, ±inf and NaN; and the scalar and vector forms agree bit for bit."""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest
from llvm_loops import counted_loop

from npugrad.lowering.vector_math import replace_exp
from npugrad.runtime.jit import JitModule

# y[i] = exp(x[i]): `lanes` elements per step (1: the scalar intrinsic), n a multiple of lanes.
LOOP = counted_loop("apply", "ptr %src, ptr %dst", """
    %p = getelementptr float, ptr %src, i64 %i
    %x = load T, ptr %p, align 4
    %y = call T @llvm.exp.S(T %x)
    %q = getelementptr float, ptr %dst, i64 %i
    store T %y, ptr %q, align 4
""", step="L", after="declare T @llvm.exp.S(T)\n")


def _kernel(lanes: int):
    t = "float" if lanes == 1 else f"<{lanes} x float>"
    s = "f32" if lanes == 1 else f"v{lanes}f32"
    ir = replace_exp(LOOP.replace("T", t).replace(".S", f".{s}").replace(" L\n", f" {lanes}\n"))
    assert "llvm.exp" not in ir
    module = JitModule(ir)
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(module.address("apply"))

    def run(x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, np.float32)
        pad = -x.size % lanes
        src = np.concatenate([x, np.zeros(pad, np.float32)])
        dst = np.empty_like(src)
        fn(src.ctypes.data, dst.ctypes.data, src.size)
        module.address("apply")  # keep the module alive until here
        return dst[: x.size]

    return run


def _inputs() -> np.ndarray:
    lo, hi = np.float32(-104.0), np.float32(89.0)
    # Every 97th float32 of [-104, 89], by bit pattern (negative and positive halves).
    neg = np.arange(np.float32(-0.0).view(np.int32), lo.view(np.int32), 97, dtype=np.int64)
    neg = neg[neg >= np.float32(-0.0).view(np.int32)].astype(np.uint32).view(np.float32)
    pos = np.arange(0, hi.view(np.int32), 97, dtype=np.int32).view(np.float32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 88.72283, 88.7228394, 88.8, 89.0, 100.0, 1e30,
                        -87.33654, -87.3366, -88.0, -100.0, -103.97, -103.98, -104.0, -1e30, 1e-30, -1e-30,
                        np.float32(np.log(2.0)) / 2, -np.float32(np.log(2.0)) / 2], np.float32)
    return np.concatenate([neg, pos, special])


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The distance between two float32 arrays of one sign, in units in the last place."""
    return np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32).astype(np.int64))


@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_exp_is_within_one_ulp_of_float64_exp(lanes):
    x = _inputs()
    got = _kernel(lanes)(x)
    with np.errstate(over="ignore", under="ignore"):
        exact = np.exp(x.astype(np.float64))
        want = exact.astype(np.float32)
    nan = np.isnan(x)
    assert np.isnan(got[nan]).all()
    ok = ~nan
    got, want, exact = got[ok], want[ok], exact[ok]
    assert (got[want == np.inf] == np.inf).all() and (got[want == 0] <= np.float32(1.4e-45)).all()
    normal = (want >= np.finfo(np.float32).tiny) & np.isfinite(want)
    assert _ulps(got[normal], want[normal]).max() <= 1
    sub = (want < np.finfo(np.float32).tiny) & (want > 0)
    assert np.abs(got[sub].astype(np.float64) - exact[sub]).max() <= 2.0**-149
    assert got[x[ok] == -np.inf].tolist() == [0.0] * int((x[ok] == -np.inf).sum())
    assert (got >= 0).all()


def test_the_scalar_and_vector_forms_agree_bit_for_bit():
    x = _inputs()
    x = x[~np.isnan(x)]
    one, eight = _kernel(1)(x), _kernel(8)(x)
    assert one.view(np.int32).tolist() == eight.view(np.int32).tolist()


def test_a_module_without_exp_is_left_as_it_is():
    text = "define void @f() {\n  ret void\n}\n"
    assert replace_exp(text) == text


# x86-64-v2 (a Nehalem): SSE4.2, no AVX, FMA or F16C. Its machine code runs on any x86-64 CPU
# since; only the instructions it leaves out matter here.
NEHALEM = {"64bit", "cmov", "cx8", "cx16", "fxsr", "mmx", "sahf", "popcnt", "crc32",
           "sse", "sse2", "sse3", "ssse3", "sse4.1", "sse4.2"}


def _unfused(lanes: int) -> str:
    t = "float" if lanes == 1 else f"<{lanes} x float>"
    s = "f32" if lanes == 1 else f"v{lanes}f32"
    return replace_exp(LOOP.replace("T", t).replace(".S", f".{s}").replace(" L\n", f" {lanes}\n"), fused=False)


def test_exp_for_a_cpu_without_fma_multiplies_and_adds_instead_of_calling_fmaf():
    """llvm.fma on a CPU without FMA instructions is a libm fmaf call per lane; llvm.fmuladd a
    multiply and an add (and an FMA where the CPU has one)."""
    from npugrad.lowering.machine_code import assembly

    ir = _unfused(4)
    assert "@llvm.fma." not in ir and "@llvm.fmuladd.v4f32" in ir
    asm = assembly(ir, "nehalem", "")
    assert "fmaf" not in asm and "mulps" in asm and "addps" in asm
    assert "fmaf" in assembly(ir.replace("fmuladd", "fma"), "nehalem", "")  # what it replaces


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="runs x86-64-v2 machine code")
@pytest.mark.parametrize("lanes", [1, 4])
def test_exp_without_fma_is_within_one_ulp_of_float64_exp(monkeypatch, lanes):
    """The same checks, the kernel compiled as for a Nehalem (the JIT told so): its multiply-adds
    rounded twice."""
    import llvmlite.binding as llvm
    from llvmlite.binding.targets import FeatureMap

    features = FeatureMap({name: name in NEHALEM for name in llvm.get_host_cpu_features()})
    monkeypatch.setattr(llvm, "get_host_cpu_name", lambda: "nehalem")
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: features)
    module = JitModule(_unfused(lanes))
    fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(module.address("apply"))
    x = _inputs()
    x = x[np.isfinite(x) & (np.abs(x) < 87)]
    x = np.concatenate([x, np.zeros(-x.size % lanes, np.float32)])
    got = np.empty_like(x)
    fn(x.ctypes.data, got.ctypes.data, x.size)
    want = np.exp(x.astype(np.float64)).astype(np.float32)
    normal = want >= np.finfo(np.float32).tiny
    assert normal.sum() > 1_000_000
    assert _ulps(got[normal], want[normal]).max() <= 1
    fused = _kernel(lanes)(x)  # llvm.fma: libm's fmaf here, each multiply-add rounded once
    assert 0 < (got != fused).sum() < x.size // 100  # another rounding, now and then
