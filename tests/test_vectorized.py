"""vectorize-contractions in the default pipeline: the linear cross-entropy gradient with its GEMMs
as register-blocked micro-kernels, against the NumPy reference, at sizes that exercise every
edge of the blocking (rows not a multiple of MR, columns not a multiple of NR vectors or of one
vector, tiny ones), untiled and tiled for the host; and run to run bit-identical."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES
from test_flce import MODES, _check, _operands

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dtypes import BFLOAT16
from npugrad.passes.vectorize_contractions import (
    VectorizeContractionsPass,
    ahead_locality,
    c_prefetch,
    dot_bf16,
    late_c_prefetch,
    reduction_chunk,
)
from npugrad.runtime.launch import using
from npugrad.targets import get as get_target

# With the default 64×128 tiles: token tiles of 64 and 5 rows, vocabulary tiles of 128 and 3
# (GEMM 1 columns, GEMM 3 rows), H = 101 = one 64-column block, two vectors and 5 lanes.
SIZES = [(69, 101, 131), (37, 29, 131), (1, 16, 130), (6, 64, 128)]
TINY = [(1, 1, 1), (1, 7, 2), (3, 1, 3), (7, 3, 1)]


def _run(a, pipeline=None):
    if pipeline is None:
        return ops.fused_linear_cross_entropy_loss_grad(**a)
    with using(pipeline):
        return ops.fused_linear_cross_entropy_loss_grad(**a)


def test_default_pipeline_vectorizes():
    assert any(isinstance(p, VectorizeContractionsPass) for p in Pipeline().passes_to("vectorized"))
    assert not any(isinstance(p, VectorizeContractionsPass) for p in Pipeline(vectorize=False).passes_to("vectorized"))


@pytest.mark.parametrize(("bt", "h", "v"), SIZES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_matches_reference(rng, bt, h, v, mode, dtype):
    a = _operands(rng, bt=bt, h=h, v=v, dtype=dtype, mode=mode)
    _check(a, _run(a))


@pytest.mark.parametrize(("bt", "h", "v"), TINY, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_tiny_memory_saving(rng, bt, h, v, dtype):
    a = _operands(rng, bt=bt, h=h, v=v, dtype=dtype, mode="memory-saving")
    _check(a, _run(a))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_tiled_for_host_matches_reference(rng, mode, dtype):
    a = _operands(rng, bt=69, h=101, v=131, dtype=dtype, mode=mode)
    _check(a, _run(a, Pipeline(target="host")))


@pytest.mark.parametrize("block", [(4, 3), (1, 1), (13, 1)], ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_a_register_block_the_target_gives_matches_reference(rng, tmp_path, block, mode, dtype):
    """A CPU description's `register_block` (here AVX2's 16 registers: 4 x 3 = 12 accumulators,
    3 vectors of B, a broadcast; one of each; 13 rows of one vector) shapes the micro-kernels,
    whose panels are then NR x lanes columns (24, 8, 8): every edge of the blocking moves, and
    the gradient matches the reference at sizes that cut each of them."""
    from pathlib import Path

    from npugrad.passes.vectorize_contractions import block_shape, panel_width

    text = (Path(__file__).parent / "lit" / "Inputs" / "avx2.toml").read_text()
    path = tmp_path / "avx2_block.toml"
    path.write_text(text.replace("vector_registers = 16", f"vector_registers = 16\nregister_block = {list(block)}"))
    target = get_target(str(path))
    assert block_shape(target) == block and panel_width(target) == block[1] * 8
    for bt, h, v in [(69, 101, 131), (37, 29, 131)]:
        a = _operands(rng, bt=bt, h=h, v=v, dtype=dtype, mode=mode)
        _check(a, _run(a, Pipeline(cpu=str(path))))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_deterministic(rng, mode, dtype):
    a = _operands(rng, bt=69, h=101, v=131, dtype=dtype, mode=mode)
    first = [x.tobytes() for x in _run(a)]
    assert [x.tobytes() for x in _run(a)] == first


GEMM_TEXT = """
func.func @gemm(%a: memref<?x?x{t}>, %b: memref<?x?x{t}>, %c: memref<?x?xf32>, %reps: memref<1xi64>) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n64 = memref.load %reps[%c0] : memref<1xi64>
  %n = arith.index_cast %n64 : i64 to index
  scf.for %r = %c0 to %n step %c1 {{
    {touch}
    linalg.generic {{indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> ({b})>,
                                     affine_map<(d0, d1, d2) -> (d0, d2)>],
                    iterator_types = ["parallel", "reduction", "parallel"]}}
        ins(%a, %b : memref<?x?x{t}>, memref<?x?x{t}>) outs(%c : memref<?x?xf32>) {{
    ^bb0(%x: {t}, %y: {t}, %z: f32):
      {widen}
      %p = arith.mulf %xf, %yf : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    }}
  }}
  func.return
}}
"""


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("repeats", [1, 3])
@pytest.mark.parametrize("written", [False, True])
def test_micro_kernel_with_b_transposed_or_hoisted_matches_numpy(rng, transposed, dtype, repeats, written):
    """C += A·B (or A·Bᵀ, B stored [j, k]) repeated in a loop that B does not change (its panels
    packed once, before the loop, vectorize_contractions.invariant_loop) or that writes B (a value
    back in place: packed per call), sizes that leave row and column tails and several reduction
    chunks: the same as NumPy's float64 product."""
    from npugrad.compiler import Pipeline, make_context, parse
    from npugrad.dtypes import BFLOAT16
    from npugrad.runtime.executable import Executable, block_kernels, signatures

    widen = ("%xf = arith.extf %x : bf16 to f32\n      %yf = arith.extf %y : bf16 to f32" if dtype == "bf16"
             else "%xf = arith.addf %x, %x : f32\n      %yf = arith.addf %y, %y : f32")
    touch = (f"%v00 = memref.load %b[%c0, %c0] : memref<?x?x{dtype}>\n    "
             f"memref.store %v00, %b[%c0, %c0] : memref<?x?x{dtype}>") if written else ""
    text = GEMM_TEXT.format(t=dtype, b="d2, d1" if transposed else "d1, d2", widen=widen, touch=touch)
    if dtype == "f32":  # a plain product: the body must be a multiply-accumulate to be vectorised
        text = text.replace("%xf = arith.addf %x, %x : f32\n      %yf = arith.addf %y, %y : f32\n      ", "")
        text = text.replace("arith.mulf %xf, %yf", "arith.mulf %x, %y")
    ctx = make_context()
    module = parse(text, "gemm.mlir", ctx)
    sigs = signatures(module)
    vectorized = str(Pipeline().lower(parse(text, "gemm.mlir", make_context()), "vectorized"))
    assert ("%b_panels" in vectorized) is not written
    llvm_ir = Pipeline().lower(module, "llvm-ir", ctx)
    # The micro-kernel's vector FMAs (bfloat16 pairs on a host with vdpbf16ps: its dot products,
    # the edge columns' too), not scalar loops.
    assert ("dpbf16ps" if dtype == "bf16" and dot_bf16(get_target("host")) else "fmuladd.v") in llvm_ir
    kernel = Executable(llvm_ir, sigs, block_kernels(module))["gemm"]
    m, k, n = 37, 530, 83  # 6-row blocks and a tail; 16-column panels and a tail; chunks of KC
    np_t = BFLOAT16 if dtype == "bf16" else np.float32
    a = rng.standard_normal((m, k), dtype=np.float32).astype(np_t)
    b = rng.standard_normal((n, k) if transposed else (k, n), dtype=np.float32).astype(np_t)
    c = rng.standard_normal((m, n), dtype=np.float32)
    want = c.astype(np.float64) + repeats * (a.astype(np.float64) @ (b.astype(np.float64).T if transposed else b.astype(np.float64)))
    kernel(a, b, c, np.array([repeats], np.int64))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("lhs_transposed", [False, True])
@pytest.mark.parametrize("rhs_transposed", [False, True])
@pytest.mark.parametrize("k", [1, 37, 400, 401, 1024, 1025])
def test_bf16_dot_micro_kernel_matches_numpy(rng, lhs_transposed, rhs_transposed, k):
    """Two bfloat16 operands on a host with AVX512-BF16 (x86vector.avx512.dot): A read [i, k] or [k, i],
    B read [k, j] or [j, k], in a loop B does not change (hoisted pairs) with K odd and even,
    below, at and above a reduction chunk (KC = 512 on a 1 MiB L2, 1024 two chunks, 1025 a
    third chunk of one odd pair; KC = 128 on a 32 KiB L1 where the L2 is smaller: 400, 401; 37
    leaves 16-pair vectors and single pairs); M and N leave row and masked column tails. The
    memory right past each operand holds NaN, so a pair read past the end would show. The
    products of bfloat16 values are exact in float32: the result matches float64 to float32
    rounding of sums of K terms. Compiled for the host where it has AVX512-BF16, elsewhere for
    tests/lit/Inputs/avx512bf16.toml with vdpbf16ps emulated (lowering/emulation.py)."""
    from test_emulation import AVX512BF16

    from npugrad.compiler import make_context, parse
    from npugrad.lowering.emulation import emulating
    from npugrad.runtime.executable import Executable, block_kernels, signatures

    widen = "%xf = arith.extf %x : bf16 to f32\n      %yf = arith.extf %y : bf16 to f32"
    text = GEMM_TEXT.format(t="bf16", b="d2, d1" if rhs_transposed else "d1, d2", widen=widen, touch="")
    if lhs_transposed:
        text = text.replace("affine_map<(d0, d1, d2) -> (d0, d1)>", "affine_map<(d0, d1, d2) -> (d1, d0)>")
    cpu = "host" if dot_bf16(get_target("host")) else AVX512BF16
    assert "x86vector.avx512.dot" in str(Pipeline(cpu=cpu).lower(parse(text, "gemm.mlir", make_context()), "vectorized"))
    ctx = make_context()
    module = parse(text, "gemm.mlir", ctx)
    with emulating("avx512bf16"):
        kernel = Executable(Pipeline(cpu=cpu).lower(module, "llvm-ir", ctx), signatures(module),
                            block_kernels(module))["gemm"]
    m, n = 37, 83

    def operand(shape):  # followed in memory by NaNs
        whole = np.full(shape[0] * shape[1] + 64, np.nan, np.float32).astype(BFLOAT16)
        whole[: shape[0] * shape[1]] = rng.standard_normal(shape[0] * shape[1], dtype=np.float32).astype(BFLOAT16)
        return whole[: shape[0] * shape[1]].reshape(shape)

    a = operand((k, m) if lhs_transposed else (m, k))
    b = operand((n, k) if rhs_transposed else (k, n))
    c = rng.standard_normal((m, n), dtype=np.float32)
    a64 = a.astype(np.float64).T if lhs_transposed else a.astype(np.float64)
    b64 = b.astype(np.float64).T if rhs_transposed else b.astype(np.float64)
    want = c.astype(np.float64) + 3 * (a64 @ b64)
    kernel(a, b, c, np.array([3], np.int64))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-4 * np.sqrt(k))


GEMM3_TEXT = """
func.func @gemm3(%a: memref<?x?xf32>, %x: memref<?x?xf32>, %c: memref<?x?xf32>, %args: memref<2xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n64 = memref.load %args[%c0] : memref<2xi64>
  %n = arith.index_cast %n64 : i64 to index
  %t64 = memref.load %args[%c1] : memref<2xi64>
  %tile = arith.index_cast %t64 : i64 to index
  %m = memref.dim %a, %c0 : memref<?x?xf32>
  %rows = memref.dim %x, %c0 : memref<?x?xf32>
  %h = memref.dim %x, %c1 : memref<?x?xf32>
  scf.for %r = %c0 to %n step %c1 {
    scf.for %t0 = %c0 to %rows step %tile {
      %left = arith.subi %rows, %t0 : index
      %size = arith.minsi %tile, %left : index
      %at = memref.subview %a[0, %t0] [%m, %size] [1, 1] : memref<?x?xf32> to memref<?x?xf32, strided<[?, 1], offset: ?>>
      %xt = memref.subview %x[%t0, 0] [%size, %h] [1, 1] : memref<?x?xf32> to memref<?x?xf32, strided<[?, 1], offset: ?>>
      linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                       affine_map<(d0, d1, d2) -> (d0, d2)>],
                      iterator_types = ["parallel", "reduction", "parallel"]}
          ins(%at, %xt : memref<?x?xf32, strided<[?, 1], offset: ?>>, memref<?x?xf32, strided<[?, 1], offset: ?>>)
          outs(%c : memref<?x?xf32>) {
      ^bb0(%p: f32, %q: f32, %s: f32):
        %pq = arith.mulf %p, %q : f32
        %sum = arith.addf %s, %pq : f32
        linalg.yield %sum : f32
      }
    }
  }
  func.return
}
"""


@pytest.mark.parametrize("cpu", ["host", "avx2"])
@pytest.mark.parametrize("h", [83, 300])
def test_micro_kernel_with_b_rows_of_an_invariant_base_matches_numpy(rng, cpu, h):
    """C += A_t·X_t over token tiles t of X, repeated in a loop (GEMM 3 of the linear cross-entropy
    gradient, the vocabulary loop around the token loop): X's panels are packed once, before the
    outer loop, where X's float32 size is at most the largest local level per core
    (vectorize_contractions.invariant_rows; host: the L3's share, at most 8 L2s: row_pack_budget),
    and per call otherwise (avx2.toml: 512 KiB, which 530 x 300 float32 exceeds): the same as NumPy
    either way."""
    from pathlib import Path

    from npugrad.compiler import Pipeline, make_context, parse
    from npugrad.runtime.executable import Executable, block_kernels, signatures

    target = "host" if cpu == "host" else str(Path(__file__).parent / "lit" / "Inputs" / "avx2.toml")
    pipeline = Pipeline(cpu=target)
    vectorized = str(pipeline.lower(parse(GEMM3_TEXT, "gemm3.mlir", make_context()), "vectorized"))
    assert "%b_panels" in vectorized and "%fits" in vectorized
    ctx = make_context()
    module = parse(GEMM3_TEXT, "gemm3.mlir", ctx)
    sigs = signatures(module)
    kernel = Executable(pipeline.lower(module, "llvm-ir", ctx), sigs, block_kernels(module))["gemm3"]
    m, rows, repeats = 37, 530, 3  # token tiles of 200, 200 and 130: chunks of KC, row offsets
    a = rng.standard_normal((m, rows), dtype=np.float32)
    x = rng.standard_normal((rows, h), dtype=np.float32)
    c = rng.standard_normal((m, h), dtype=np.float32)
    want = c.astype(np.float64) + repeats * (a.astype(np.float64) @ x.astype(np.float64))
    kernel(a, x, c, np.array([repeats, 200], np.int64))
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-3)


def test_a_base_is_packed_whole_only_within_eight_l2s():
    """row_pack_budget: the largest local level, but at most 8 of the vector role's (the L2): a VM
    that shows 2 cores of a 300 MiB L3 (an Emerald Rapids) packed X of 4096 x 4096 whole, 64 MiB
    of float32 a core, and the gradient's peak extra memory went from 5 to 134 MiB."""
    import tomllib
    from pathlib import Path

    from npugrad.passes.vectorize_contractions import ROW_PACK_L2S, row_pack_budget
    from npugrad.targets.target import from_dict

    text = (Path(__file__).parent / "lit" / "Inputs" / "avx512bf16.toml").read_text()
    assert row_pack_budget(from_dict(tomllib.loads(text), "t")) == 1 << 20  # the L2 is the largest level
    big = tomllib.loads(text)
    big["level"].append({"name": "l3", "capacity": "150MiB", "alignment": 64, "unit": "cpu", "parent": "dram"})
    big["level"][1]["parent"] = "l3"
    assert row_pack_budget(from_dict(big, "big-l3")) == ROW_PACK_L2S << 20
    big["level"][-1]["capacity"] = "4MiB"
    assert row_pack_budget(from_dict(big, "small-l3")) == 4 << 20


@pytest.mark.parametrize("toml, columns, element_bytes, kc", [
    ("zen3.toml", 16, 4, 512),  # 256-bit, 2 vectors a row: half the 32 KiB L1 is 256 steps, 1/16 of the 512 KiB L2 512
    ("avx512.toml", 64, 4, 256),  # 512-bit, 4 vectors: half the 48 KiB L1 is 96 steps, 1/16 of the 1 MiB L2 256
    ("avx512bf16.toml", 64, 2, 512),  # bfloat16 pairs: twice the steps in the same bytes
])
def test_the_reduction_chunk_is_the_larger_of_the_l1_and_l2_rules(toml, columns, element_bytes, kc):
    """KC from the target's caches: B's panel fills half the L1 or a sixteenth of the L2,
    whichever is more, and KC is even (pairs never straddle two chunks)."""
    target = get_target(f"tests/lit/Inputs/{toml}")
    assert reduction_chunk(target, columns, element_bytes) == kc
    l1 = min(lv.capacity for lv in target.local_levels())
    assert kc * columns * element_bytes >= l1 // 2 and kc % 2 == 0


def _resized(toml: str, level: str, capacity: str):
    """The CPU description tests/lit/Inputs/`toml` with its `level` of `capacity` instead."""
    import tomllib
    from pathlib import Path

    from npugrad.targets.target import from_dict

    data = tomllib.loads((Path(__file__).parent / "lit" / "Inputs" / toml).read_text())
    next(lv for lv in data["level"] if lv["name"] == level)["capacity"] = capacity
    return from_dict(data, f"{level}-{capacity}")


@pytest.mark.parametrize("toml, dot", [("zen3.toml", False), ("avx512.toml", False), ("avx512bf16.toml", True),
                                       ("avx512bf16.toml", False)])
def test_c_is_prefetched_into_the_level_b_panel_leaves_it_in(toml, dot):
    """A block prefetches C's lines for reading into the L2 where B's panel, streamed before
    C is read, takes more than half the L1 (KC from the L2's rule: every shipped CPU description),
    and for writing into the L1 where the L1's rule gave KC (an L2 a sixteenth of which is
    less than half the L1)."""
    assert c_prefetch(get_target(f"tests/lit/Inputs/{toml}"), dot) == (False, 2)
    target = _resized(toml, "l2", "128KiB")
    l1 = min(lv.capacity for lv in target.local_levels())
    assert c_prefetch(target, dot) == (True, 3), l1


@pytest.mark.parametrize("dot, steps", [(False, 11), (True, 6)])
def test_late_c_prefetch_is_sized_by_the_copy_path_and_the_matrix_rate(dot, steps):
    """The late prefetch of a block's C lines comes the steps before its loop ends that the L2 ->
    L1 copy path needs for the block's 6 x 4 lines (32 cycles, then 1536 bytes at 16 a cycle: 128)
    at the matrix rate (a float32 step's 24 FMAs of 16 lanes, 768 FLOP at 64 a cycle: 12 cycles;
    a bfloat16 pair step twice that): more steps for a slower path, none where the description
    gives no path, or where C's first prefetch already took the lines into the L1."""
    import dataclasses

    target = get_target("tests/lit/Inputs/avx512_paths.toml")
    assert late_c_prefetch(target, dot) == steps
    slow = dataclasses.replace(target, paths=tuple(dataclasses.replace(p, bandwidth=p.bandwidth / 4) for p in target.paths))
    assert late_c_prefetch(slow, dot) > steps
    assert late_c_prefetch(get_target("tests/lit/Inputs/avx512.toml"), dot) == 0  # no copy path
    assert late_c_prefetch(_resized("avx512_paths.toml", "l2", "128KiB"), dot) == 0  # C's prefetch went to the L1


@pytest.mark.parametrize("toml, dot, locality", [
    ("zen3.toml", False, 2),  # AVX2: KC 512 rows of B, 32 KiB of lines: all of the 32 KiB L1
    ("avx512.toml", False, 3),  # 256 rows: 16 KiB of lines, at most half the 48 KiB L1
    ("avx512bf16.toml", False, 3),
    ("avx512bf16.toml", True, 2),  # pairs: 512 rows, 32 KiB of lines, more than half the L1
])
def test_the_next_panels_lines_go_where_all_kc_of_them_fit_half_of_it(toml, dot, locality):
    """B's pack asks for one line of the next panel per row of B it reads (KC rows): into the
    L1 where KC lines take at most half of it, else into the L2 (prefetcht1); in the code, on
    both of a pair's rows."""
    from npugrad.passes.vectorize_contractions import kernel_chunk, line_bytes, panel_level

    target = get_target(f"tests/lit/Inputs/{toml}")
    l1 = target.level(panel_level(target)).capacity
    lines = kernel_chunk(target, dot) * line_bytes(target)
    assert (lines <= l1 // 2) == (locality == 3), (lines, l1)
    assert ahead_locality(target, dot) == locality
    # An L1 four times larger holds every chunk's lines (KC from the L2's rule stays put).
    assert ahead_locality(_resized(toml, "l1", f"{4 * l1 // 1024}KiB"), dot) == 3
