"""npu.copy out of an accumulator (an Ascend A2's FixPipe), through the whole pipeline on this CPU:
a converting copy rounds float32 to bf16/f16 to nearest even exactly as ml_dtypes/NumPy do (the
arith.truncf every float32 -> narrow store of the compiler uses); an accumulating copy adds the
source into the target in float32, transposed or not. Vectorised (whole vectors and the scalar
loop of the left-over lanes) and scalar."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from npugrad.compiler import Pipeline, make_context, parse
from npugrad.dialect.npu import CopyOp
from npugrad.runtime.executable import Executable, block_kernels, signatures

R, C = 37, 45  # rows of 45: whole vectors and a scalar rest at any vector width (8, 16, 32 lanes...)

KERNEL = f"""
func.func @fixpipe(%src: memref<{R}x{C}xf32>, %y: memref<{R}x{C}xbf16>, %h: memref<{R}x{C}xf16>,
                   %part: memref<{R}x{C}xf32>, %part_t: memref<{C}x{R}xf32>) {{
  %acc = npu.alloc_local : memref<{R}x{C}xf32, #npu.mem<l0c>>
  npu.copy %src, %acc : memref<{R}x{C}xf32>, memref<{R}x{C}xf32, #npu.mem<l0c>>
  npu.copy %acc, %y : memref<{R}x{C}xf32, #npu.mem<l0c>>, memref<{R}x{C}xbf16>
  npu.copy %acc, %h : memref<{R}x{C}xf32, #npu.mem<l0c>>, memref<{R}x{C}xf16>
  npu.copy %acc, %part {{accumulate}} : memref<{R}x{C}xf32, #npu.mem<l0c>>, memref<{R}x{C}xf32>
  npu.copy %acc, %part_t {{transpose, accumulate}} : memref<{R}x{C}xf32, #npu.mem<l0c>>, memref<{C}x{R}xf32>
  func.return
}}
"""


@pytest.fixture(scope="module", params=[True, False], ids=["vectorized", "scalar"])
def fixpipe(request):
    ctx = make_context()
    module = parse(KERNEL, "fixpipe.mlir", ctx)
    sigs, blocks = signatures(module), block_kernels(module)
    pipeline = Pipeline(fuse=False, distribute=False, vectorize=request.param)
    lines = str(pipeline.lower(parse(KERNEL, "fixpipe.mlir", ctx), "vectorized", ctx)).splitlines()
    # Vectorised, the truncf and the add run on whole vectors (and the rest in the scalar loop).
    for op in ("arith.truncf", "arith.addf"):
        assert any(op in line and "vector<" in line for line in lines) == request.param
        assert any(op in line and "vector<" not in line for line in lines)
    return Executable(pipeline.lower(module, "llvm-ir", ctx), sigs, blocks)["fixpipe"]


def _source(rng: np.random.Generator) -> np.ndarray:
    """Random float32 values that round (random low mantissa bits), halfway cases of both narrow
    types (ties to even, both ways), negative ones, large ones (beyond f16's range: infinity;
    near bf16's largest), tiny ones (f16 and bf16 subnormals) and the special values."""
    x = (rng.standard_normal((R, C)) * np.exp2(rng.integers(-20, 20, (R, C)))).astype(np.float32)
    flat = x.reshape(-1)
    bits = flat.view(np.uint32)
    n = flat.size
    # bf16 halfway: the 16 bits dropped are exactly 0x8000, the kept low bit 0 or 1.
    idx = rng.choice(n, 120, replace=False)
    bits[idx[:60]] = (bits[idx[:60]] & 0xFFFF0000) | 0x8000
    # f16 halfway: the 13 mantissa bits dropped exactly 0x1000 (values in f16's normal range).
    halves = rng.uniform(-60000, 60000, 60).astype(np.float32).view(np.uint32)
    bits[idx[60:]] = (halves & 0xFFFFE000) | 0x1000
    special = np.array(
        [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 65504.0, 65519.0, 65520.0, -65520.0, 1e5, -3e38, 3.3e38,
         np.finfo(np.float32).max, -np.finfo(np.float32).max, 1e-7, -3e-8, 6e-8, 1e-40, -1e-41, 1e-45,
         1.00390625, 1.01171875, 2049.0, 2051.0, -2049.0],
        np.float32,
    )
    take = rng.choice(np.setdiff1d(np.arange(n), idx), special.size, replace=False)
    flat[take] = special
    return x


def test_a_converting_copy_rounds_like_ml_dtypes_and_an_accumulating_one_adds_in_f32(fixpipe):
    rng = np.random.default_rng()
    for _ in range(3):  # fresh inputs every run
        src = _source(rng)
        y = np.full((R, C), 7, ml_dtypes.bfloat16)
        h = np.full((R, C), 7, np.float16)
        part0 = (rng.standard_normal((R, C)) * 1e3).astype(np.float32)
        part_t0 = (rng.standard_normal((C, R)) * 1e-3).astype(np.float32)
        part, part_t = part0.copy(), part_t0.copy()
        fixpipe(src, y, h, part, part_t)
        with np.errstate(over="ignore"):  # src holds values beyond f16's range and float32's largest: inf, as on the device
            np.testing.assert_array_equal(y.view(np.uint16), src.astype(ml_dtypes.bfloat16).view(np.uint16))
            np.testing.assert_array_equal(h.view(np.uint16), src.astype(np.float16).view(np.uint16))
            np.testing.assert_array_equal(part.view(np.uint32), (part0 + src).view(np.uint32))
            np.testing.assert_array_equal(part_t.view(np.uint32), (part_t0 + src.T).view(np.uint32))


def test_a_nan_stays_a_nan(fixpipe):
    """NaN payloads aside (which NaN comes out is not pinned down), a NaN converts to a NaN."""
    src = np.full((R, C), np.nan, np.float32)
    y, h = np.zeros((R, C), ml_dtypes.bfloat16), np.zeros((R, C), np.float16)
    part, part_t = np.zeros((R, C), np.float32), np.zeros((C, R), np.float32)
    fixpipe(src, y, h, part, part_t)
    assert np.isnan(y.astype(np.float32)).all() and np.isnan(h).all()
    assert np.isnan(part).all() and np.isnan(part_t).all()


def test_the_op_builds_and_counts_the_bytes_it_writes():
    module = parse(KERNEL, "fixpipe.mlir", make_context())
    copies = [o for o in module.walk() if isinstance(o, CopyOp)]
    src, acc = copies[0].source, copies[0].target
    y, h, part, part_t = (c.target for c in copies[1:])
    # Positional compatibility: (source, target, transpose).
    plain = CopyOp(src, acc, False)
    assert plain.transpose is None and plain.accumulate is None and not plain.converts()
    flipped = CopyOp(acc, part_t, True, accumulate=True)
    assert flipped.transpose is not None and flipped.accumulate is not None
    flipped.verify()
    # bytes(): the target's element size (what a converting copy writes), else the common one.
    assert plain.bytes() == R * C * 4
    assert CopyOp(acc, y).converts() and CopyOp(acc, y).bytes() == R * C * 2
    assert CopyOp(acc, h).bytes() == R * C * 2
    assert CopyOp(acc, part, accumulate=True).bytes() == R * C * 4
    assert flipped.bytes() == R * C * 4
    # An accumulating copy reads its target too (what passes moving memory ops must know).
    from xdsl.traits import MemoryEffectKind, get_effects

    effects = get_effects(CopyOp(acc, part, accumulate=True)) or set()
    assert any(e.kind == MemoryEffectKind.READ and e.value is part for e in effects)
    effects = get_effects(CopyOp(acc, part)) or set()
    assert not any(e.kind == MemoryEffectKind.READ and e.value is part for e in effects)
