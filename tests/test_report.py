"""The report of a tiled kernel (npugrad.analysis.report): footprints per level and bytes moved,
exact where the index arithmetic evaluates on the static shapes, an upper bound (and said so)
where it does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from npugrad.analysis import report as rep
from npugrad.compiler import parse
from npugrad.targets import get
from npugrad.targets.target import from_dict

BIN = Path(sys.executable).parent
A2 = get("npu-a2")
# npu-a2's memory with 3 cores: block distribution is visible in small examples.
THREE = from_dict(
    {
        "name": "three",
        "cores": 3,
        "vector_bits": 256,
        "double_buffer": True,
        "level": [
            {"name": "gm", "kind": "global"},
            {"name": "ub", "capacity": "192KiB", "alignment": 32, "unit": "vector", "parent": "gm"},
        ],
        "roles": {r: "ub" for r in ("vector", "stage", "matrix_a", "matrix_b", "accumulator")},
    }
)

# n elements in tiles of t, tile k going to block k mod blocks; x copied in, the tile copied out.
TILED = """
func.func @f(%x: memref<{n}xf32>, %y: memref<{n}xf32>) {{
  %c{t} = arith.constant {t} : index
  %cn = arith.constant {n} : index
  %tiles = arith.ceildivui %cn, %c{t} : index
  %bid = npu.block_idx
  %nb = npu.block_dim
  %ub = npu.alloc_local {{double_buffer}} : memref<{t}xf32, #npu.mem<ub>>
  scf.for %k = %bid to %tiles step %nb {{
    %off = arith.muli %k, %c{t} : index
    %rest = arith.subi %cn, %off : index
    %size = arith.minsi %c{t}, %rest : index
    %src = memref.subview %x[%off] [%size] [1] : memref<{n}xf32> to memref<?xf32, strided<[1], offset: ?>>
    %tile = memref.subview %ub[0] [%size] [1] : memref<{t}xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
    npu.copy %src, %tile : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
    %dst = memref.subview %y[%off] [%size] [1] : memref<{n}xf32> to memref<?xf32, strided<[1], offset: ?>>
    npu.copy %tile, %dst : memref<?xf32, strided<[1]>, #npu.mem<ub>>, memref<?xf32, strided<[1], offset: ?>>
  }}
  func.return
}}
"""


def analyze(text: str, target=A2) -> rep.FunctionReport:
    module = parse(text)
    [f] = [op for op in module.walk() if op.name == "func.func"]
    return rep.analyze(f, target)


def moves(r: rep.FunctionReport) -> dict[tuple[str, str], tuple[int, int, bool, bool]]:
    assert r.moves is not None
    return {k: (m.bytes, m.copies, m.exact, m.bounded) for k, m in r.moves.items()}


def test_partial_tiles_are_exact_and_all_blocks_count():
    r = analyze(TILED.format(n=10, t=4), THREE)
    # tiles of 4, 4, 2 elements; one per block
    assert moves(r) == {("gm", "ub"): (40, 3, True, True), ("ub", "gm"): (40, 3, True, True)}
    assert r.block_bytes == [32, 32, 16]
    assert r.argument_bytes == 80


def test_more_tiles_than_blocks():
    r = analyze(TILED.format(n=1000, t=64), THREE)
    # 16 tiles (15 of 64, one of 40): blocks take tiles 0,3,..,15 / 1,4,..,13 / 2,5,..,14
    assert moves(r)[("gm", "ub")] == (4000, 16, True, True)
    assert r.block_bytes == [2 * 4 * (5 * 64 + 40), 2 * 4 * 5 * 64, 2 * 4 * 5 * 64]
    assert sum(r.block_bytes) == 8000


def test_level_table():
    r = analyze(TILED.format(n=10, t=5))
    ub = next(lv for lv in r.levels if lv.name == "ub")
    # 20 B padded to the 32-byte alignment, twice
    assert [(b.name, b.bytes, b.unpadded, b.copies, b.total) for b in ub.buffers] == [("%ub", 32, 20, 2, 64)]
    assert ub.used == 64 and ub.capacity == 192 * 1024
    assert {lv.name for lv in r.levels} == {"l1", "l0a", "l0b", "l0c", "ub"}


def test_without_blocks_one_run():
    text = """
func.func @f(%x: memref<6x8xf16>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c6 = arith.constant 6 : index
  %l1 = npu.alloc_local : memref<4x8xf16, #npu.mem<l1>>
  scf.for %i = %c0 to %c6 step %c2 {
    %rows = affine.min affine_map<(d0) -> (4, 6 - d0)>(%i)
    %src = memref.subview %x[%i, 0] [%rows, 8] [1, 1] : memref<6x8xf16> to memref<?x8xf16, strided<[8, 1], offset: ?>>
    %dst = memref.subview %l1[0, 0] [%rows, 8] [1, 1] : memref<4x8xf16, #npu.mem<l1>> to memref<?x8xf16, strided<[8, 1]>, #npu.mem<l1>>
    npu.copy %src, %dst : memref<?x8xf16, strided<[8, 1], offset: ?>>, memref<?x8xf16, strided<[8, 1]>, #npu.mem<l1>>
    %row = memref.subview %l1[0, 0] [1, 8] [1, 1] : memref<4x8xf16, #npu.mem<l1>> to memref<8xf16, strided<[1]>, #npu.mem<l1>>
    %ub = memref.subview %x[%i, 0] [1, 8] [1, 1] : memref<6x8xf16> to memref<8xf16, strided<[1], offset: ?>>
    npu.copy %row, %ub : memref<8xf16, strided<[1]>, #npu.mem<l1>>, memref<8xf16, strided<[1], offset: ?>>
  }
  func.return
}
"""
    r = analyze(text)
    # overlapping windows of 4, 4, 2 rows of 16 B; a rank-reduced row of 16 B back each trip
    assert moves(r) == {("gm", "l1"): (160, 3, True, True), ("l1", "gm"): (48, 3, True, True)}
    assert r.block_bytes == [208]


def test_loop_carried_offsets_and_collapse():
    text = """
func.func @f(%x: memref<4x25xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c40 = arith.constant 40 : index
  %c100 = arith.constant 100 : index
  %flat = memref.collapse_shape %x [[0, 1]] : memref<4x25xf32> into memref<100xf32>
  %ub = npu.alloc_local : memref<40xf32, #npu.mem<ub>>
  %end = scf.for %k = %c0 to %c3 step %c1 iter_args(%off = %c0) -> (index) {
    %rest = arith.subi %c100, %off : index
    %n = arith.minsi %c40, %rest : index
    %src = memref.subview %flat[%off] [%n] [1] : memref<100xf32> to memref<?xf32, strided<[1], offset: ?>>
    %dst = memref.subview %ub[0] [%n] [1] : memref<40xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
    npu.copy %src, %dst : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
    %next = arith.addi %off, %n : index
    scf.yield %next : index
  }
  func.return
}
"""
    assert moves(analyze(text)) == {("gm", "ub"): (400, 3, True, True)}


def test_unknown_sizes_are_an_upper_bound():
    text = """
func.func @f(%x: memref<100xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  %src = memref.subview %x[0] [%n] [1] : memref<100xf32> to memref<?xf32, strided<[1]>>
  %dst = memref.subview %ub[0] [%n] [1] : memref<16xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
  npu.copy %src, %dst : memref<?xf32, strided<[1]>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
  func.return
}
"""
    r = analyze(text)
    assert moves(r) == {("gm", "ub"): (64, 1, False, True)}  # at most the 16-element buffer
    lines = rep.format_report(r, A2)
    assert "  gm -> ub: <= 64 B in 1 copy (64 B)" in lines
    assert "upper bound:" in lines
    assert any("largest tile" in line for line in lines)


def test_unknown_trip_count_is_not_a_bound():
    text = """
func.func @f(%x: memref<16xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  scf.for %i = %c0 to %n step %c1 {
    npu.copy %x, %ub : memref<16xf32>, memref<16xf32, #npu.mem<ub>>
  }
  func.return
}
"""
    r = analyze(text)
    assert moves(r) == {("gm", "ub"): (64, 1, True, False)}
    lines = rep.format_report(r, A2)
    assert "  gm -> ub: unknown (64 B counted; see below) in 1 copy (64 B)" in lines
    assert "not a bound:" in lines
    assert any("bounds that are not constants" in line for line in lines)


def test_unknown_condition_counts_the_larger_branch():
    text = """
func.func @f(%x: memref<16xf32>, %c: i1) {
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  %small = npu.alloc_local : memref<4xf32, #npu.mem<ub>>
  scf.if %c {
    npu.copy %x, %ub : memref<16xf32>, memref<16xf32, #npu.mem<ub>>
  } else {
    %part = memref.subview %x[0] [4] [1] : memref<16xf32> to memref<4xf32, strided<[1]>>
    npu.copy %part, %small : memref<4xf32, strided<[1]>>, memref<4xf32, #npu.mem<ub>>
  }
  func.return
}
"""
    assert moves(analyze(text)) == {("gm", "ub"): (64, 1, False, True)}


def test_constant_condition_takes_its_branch():
    text = """
func.func @f(%x: memref<16xf32>) {
  %c3 = arith.constant 3 : index
  %c5 = arith.constant 5 : index
  %lt = arith.cmpi slt, %c5, %c3 : index
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  scf.if %lt {
    npu.copy %x, %ub : memref<16xf32>, memref<16xf32, #npu.mem<ub>>
  }
  func.return
}
"""
    assert moves(analyze(text)) == {}


def test_over_budget_counts_long_loops(monkeypatch):
    monkeypatch.setattr(rep, "BUDGET", 50)
    r = analyze(TILED.format(n=1000, t=16), THREE)
    # 63 tiles, 21 per block: each block's loop stands for its trips at the full tile size,
    # 63 * 64 B against 4000 B exactly; the count of copies stays exact.
    assert moves(r)[("gm", "ub")] == (63 * 64, 63, False, True)
    lines = rep.format_report(r, THREE)
    assert "  gm -> ub: <= 4032 B in 63 copies (3.938 KiB)" in lines
    assert any("loops of more than 8 trips" in line for line in lines)
    # Loops short enough still run: 6, 5 and 5 trips per block.
    assert moves(analyze(TILED.format(n=1000, t=64), THREE))[("gm", "ub")] == (4000, 16, True, True)


def test_over_budget_stays_exact_where_sizes_do_not_depend_on_the_loop(monkeypatch):
    monkeypatch.setattr(rep, "BUDGET", 50)
    text = """
func.func @f(%x: memref<116xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c100 = arith.constant 100 : index
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  scf.for %i = %c0 to %c100 step %c1 {
    %window = memref.subview %x[%i] [16] [1] : memref<116xf32> to memref<16xf32, strided<[1], offset: ?>>
    npu.copy %window, %ub : memref<16xf32, strided<[1], offset: ?>>, memref<16xf32, #npu.mem<ub>>
  }
  func.return
}
"""
    assert moves(analyze(text)) == {("gm", "ub"): (6400, 100, True, True)}


def test_dynamic_shapes():
    text = """
func.func @f(%x: memref<?xf32>) {
  %ub = npu.alloc_local : memref<16xf32, #npu.mem<ub>>
  func.return
}
"""
    r = analyze(text)
    assert r.moves is None and r.dynamic == ["%x: memref<?xf32>"]
    lines = rep.format_report(r, A2)
    assert lines[-1] == "bytes moved: the report needs static shapes (dynamic: %x: memref<?xf32>)"
    assert "  ub: 64 B of 196608 B = 0.0% (64 B of 192 KiB)" in lines


def test_untiled_op_is_flagged():
    text = """
func.func @f(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>, %dx: memref<16xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}
"""
    r = analyze(text)
    assert r.untiled == ["train.binary_cross_entropy_grad"]
    assert moves(r) == {}
    lines = rep.format_report(r, A2)
    assert (
        "untiled: train.binary_cross_entropy_grad works on global memory directly, its traffic is not counted" in lines
    )
    assert "  none (no npu.copy)" in lines


def test_driver_names_buffers_as_printed(tmp_path):
    path = tmp_path / "k.mlir"
    path.write_text(
        "func.func @k(%x: memref<8xf32>) {\n"
        "  %0 = npu.alloc_local : memref<8xf32, #npu.mem<ub>>\n"
        "  %1 = npu.alloc_local : memref<8xf32, #npu.mem<ub>>\n"
        "  npu.copy %x, %1 : memref<8xf32>, memref<8xf32, #npu.mem<ub>>\n"
        "  func.return\n}\n"
    )
    result = subprocess.run(
        [BIN / "npugrad-opt", path, "--target", "npu-a2", "--report"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "%0 = npu.alloc_local" in result.stdout and "%1 = npu.alloc_local" in result.stdout
    assert "//     %0 : memref<8xf32, #npu.mem<ub>> 32 B" in result.stdout
    assert "//     %1 : memref<8xf32, #npu.mem<ub>> 32 B" in result.stdout
    assert "//   gm -> ub: 32 B in 1 copy (32 B)" in result.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--report"], "npugrad-opt: error: --report needs --target (host, npu-a2 or a target file)"),
        (
            ["--report", "--target", "npu-a2", "--stage", "loops"],
            "npugrad-opt: error: --report reports the tiled stage, not --stage loops",
        ),
    ],
)
def test_driver_report_usage_errors(tmp_path, args, message):
    path = tmp_path / "k.mlir"
    path.write_text("func.func @k() {\n  func.return\n}\n")
    result = subprocess.run(
        [BIN / "npugrad-opt", path, *args], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 1
    assert result.stderr.strip() == message


def test_flce_on_npu_a2_meets_the_traffic_and_time_targets():
    """Issue 13's targets on examples/flce_grad_4096x4096x8192.mlir (bf16, BT=4096, H=4096,
    V=8192) tiled for npu-a2 by the search: global traffic at most 1/8 of the 78.5 GiB the first
    tiling moved, predicted time within 1.5x of the cube unit's compute bound (3 GEMMs)."""
    from npugrad.analysis import cost
    from npugrad.analysis.report import analyze
    from xdsl.dialects import func

    from npugrad.compiler import Pipeline

    text = (Path(__file__).parent.parent / "examples" / "flce_grad_4096x4096x8192.mlir").read_text()
    target = get("npu-a2")
    module = Pipeline(target="npu-a2").lower(parse(text, "flce_grad_4096x4096x8192.mlir"), "tiled")
    [f] = [o for o in module.ops if isinstance(o, func.FuncOp)]
    r = analyze(f, target)
    traffic = sum(m.bytes for (a, b), m in r.moves.items() if "gm" in (a, b))
    assert traffic <= 78.5 * (1 << 30) / 8
    p = cost.of_report(r, target)
    assert p.compute["cube"] == pytest.approx(6 * 4096 * 4096 * 8192 / 8192 / 20, rel=1e-3)
    assert p.cycles <= 1.5 * p.compute["cube"]


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_host_report_counts_the_micro_kernels_packed_b_panels(dtype):
    """On a CPU target the micro-kernels copy each contraction's B panel (K x N), widened to
    float32, into the smallest level (vectorize-contractions): the report counts that copy, b + 4
    bytes per element. FLCE BT=64, H=64,
    V=256 with tiles bt=32, v=64, h=32: 2 x 4 (token, vocabulary) tile pairs, each packing W's
    64 x 64 twice (GEMMs 1 and 2) and X's 32 x 64 once (GEMM 3): 8 x (2·64 + 32)·64 elements."""
    from xdsl.dialects import func

    from npugrad.compiler import Pipeline

    text = f"""
func.func @flce(%g: memref<64xf32>, %x: memref<64x64x{dtype}>, %w: memref<256x64x{dtype}>, %mask: memref<8xui8>,
                %t: memref<64xi64>, %lm: memref<64xf32>, %se: memref<64xf32>,
                %gx: memref<64x64x{dtype}>, %gw: memref<256x64x{dtype}>) {{
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<64xf32>) input(%x : memref<64x64x{dtype}>)
      weight(%w : memref<256x64x{dtype}>) target_mask(%mask : memref<8xui8>) masked_target(%t : memref<64xi64>)
      logits_max(%lm : memref<64xf32>) sum_exp_logits(%se : memref<64xf32>)
      -> input_grad_out(%gx : memref<64x64x{dtype}>) weight_grad_out(%gw : memref<256x64x{dtype}>)
      {{tile_sizes = #train.tiles<bt = 32, v = 64, h = 32>}}
  func.return
}}"""
    target = get("host")
    module = Pipeline(target="host").lower(parse(text, "flce.mlir"), "tiled")
    [f] = [o for o in module.ops if isinstance(o, func.FuncOp)]
    r = rep.analyze(f, target)
    smallest = min((lv for lv in target.local_levels() if lv.capacity), key=lambda lv: lv.capacity).name
    packed = sum(m.bytes for (a, b), m in r.moves.items() if b == smallest)
    assert packed == 8 * (2 * 64 + 32) * 64 * ((2 if dtype == "bf16" else 4) + 4)


@pytest.mark.parametrize("example, reduction, tiled", [
    ("apply_fused_ema_adam.mlir", None, 5),  # grad, var, m, v, s
    ("bce_grad.mlir", "none", 5),  # input_x, input_y, dloss (one per element), weight, dx
    ("bce_grad.mlir", "sum", 4),  # input_x, input_y, weight, dx
])
def test_elementwise_tiles_computed_by_the_op_count_the_models_work(example, reduction, tiled):
    """A tile of EMA-Adam or of a none/sum BCE is the op itself on local buffers: the report
    counted no work for it (npu-a2: 'compute bound: 0 cycles'). It now counts the cost model's
    (elementwise.work: 4 vector operations per element and tiled operand), over every element."""
    from xdsl.dialects import func

    from npugrad.compiler import Pipeline
    from npugrad.passes.tiling.elementwise import VECTOR_OPS_PER_ELEMENT

    text = (Path(__file__).parent.parent / "examples" / example).read_text()
    if reduction is not None:
        text = text.replace("reduction = 1 : i64", f"reduction = {dict(none=0, sum=2)[reduction]} : i64")
        assert f"reduction = {dict(none=0, sum=2)[reduction]} : i64" in text
        if reduction == "none":  # dloss of input_x's shape
            text = text.replace("memref<1xf32>", "memref<1000xf32>")
    module = Pipeline(target="npu-a2").lower(parse(text, example), "tiled")
    [f] = [o for o in module.ops if isinstance(o, func.FuncOp)]
    elements = 1
    for n in f.args[0].type.get_shape():
        elements *= n
    r = rep.analyze(f, A2)
    work = {(k.kind, k.element): m.bytes for k, m in r.work.items()}
    assert work == {("vector", "f32"): elements * VECTOR_OPS_PER_ELEMENT * tiled}
    assert all(m.exact for m in r.work.values())
