"""Contractions on AMX tiles (vectorize_contractions.amx_bf16): a target whose llvm_features have
+amx-tile and +amx-bf16 (tests/lit/Inputs/amx.toml, or `host` on a Sapphire Rapids or later)
runs the bfloat16 GEMMs' whole 32 x 32 blocks on tdpbf16ps, the rows below them and the
reduction steps after the last whole 32 on vdpbf16ps. What the target says is checked on every
machine, the assembly by tests/lit/asm/gemm_amx_bf16.mlir; running the tiles needs a CPU that
has them (there is no emulation of AMX), so those tests run where the CPU has AMX-BF16."""

from pathlib import Path

import llvmlite.binding as llvm
import ml_dtypes
import numpy as np
import pytest
from conftest import assert_close
from test_emulation import check_bf16_gradient_on_1_2_3_threads
from test_flce import _operands

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.lowering import machine_code
from npugrad.lowering.machine_code import JitError
from npugrad.passes.linear_nests import cpu_tiles
from npugrad.passes.vectorize_contractions import amx_bf16, dot_bf16, row_multiple
from npugrad.runtime.launch import using
from npugrad.targets import get as get_target
from npugrad.targets.target import from_dict

INPUTS = Path(__file__).parent / "lit" / "Inputs"
AMX = str(INPUTS / "amx.toml")
AVX512BF16 = str(INPUTS / "avx512bf16.toml")
BF16 = ml_dtypes.bfloat16


def _host_has_amx() -> bool:
    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    return bool(features.get("amx-tile") and features.get("amx-bf16"))


needs_amx = pytest.mark.skipif(not _host_has_amx(), reason="this CPU has no AMX-BF16 tiles to run the kernels on "
                               "(there is no emulation of AMX; their assembly is checked by the lit test)")


def test_target_features_decide_tiles():
    """Tiles where the target has both AMX features, 512-bit vectors and vdpbf16ps; not where
    any is missing. The token tiles are then whole 32-row blocks as well as 6-row ones."""
    amx = get_target(AMX)
    assert amx_bf16(amx) and dot_bf16(amx)
    assert not amx_bf16(get_target(AVX512BF16))
    assert row_multiple(amx) == 96 and row_multiple(get_target(AVX512BF16)) == 6
    assert cpu_tiles(amx)["bt"] % 96 == 0
    text = Path(AMX).read_text()
    for without in ("+amx-bf16", "+amx-tile"):
        data = __import__("tomllib").loads(text.replace("," + without, ""))
        assert not amx_bf16(from_dict(data, "amx-less"))
    narrow = __import__("tomllib").loads(text.replace("vector_bits = 512", "vector_bits = 256"))
    assert not amx_bf16(from_dict(narrow, "amx-256"))


@pytest.fixture
def amx_kernels():
    """Compile the calls inside for the AMX target (1 MiB more L2 than avx512bf16.toml)."""
    with using(Pipeline(cpu=AMX)):
        yield


@needs_amx
@pytest.mark.parametrize("mode", ["memory-saving", "high-performance"])
@pytest.mark.parametrize("bt, h, v", [(37, 45, 131), (100, 96, 200), (96, 1100, 300), (200, 1101, 130),
                                      (333, 130, 500), (700, 600, 300)])
def test_flce_gradient_on_tiles(rng, amx_kernels, mode, bt, h, v):
    """The bfloat16 gradient's three GEMMs on tiles: rows in and below whole 32-row blocks, H
    below, at and above a reduction chunk (1024 steps on this target), odd and even, not a
    multiple of 32 (the steps left run on vdpbf16ps); against the reference, and bit for bit
    the same on 1, 2 and 3 threads (700 x 600 x 300 has its token loop in phases)."""
    check_bf16_gradient_on_1_2_3_threads(_operands(rng, bt, h, v, dtype=BF16, mode=mode))


@needs_amx
def test_tiles_agree_with_the_dot_product_kernels(rng):
    """The same gradient on tiles and on vdpbf16ps alone: the same products summed in another
    order (tdpbf16ps adds a tile's 32 steps into C directly, vdpbf16ps a chunk's from zero),
    within bfloat16's tolerance of each other, and not bit for bit (the tiles did run)."""
    a = _operands(rng, 256, 512, 384, dtype=BF16)
    with using(Pipeline(cpu=AMX)):
        tiles = ops.fused_linear_cross_entropy_loss_grad(**a)
    with using(Pipeline(cpu=AVX512BF16)):
        dots = ops.fused_linear_cross_entropy_loss_grad(**a)
    for t, d in zip(tiles, dots):
        assert_close(t, d.astype(np.float32))
    assert any((t.view(np.uint16) != d.view(np.uint16)).any() for t, d in zip(tiles, dots))


def _vectorized_flce_on_tiles():
    """examples/flce_grad_4096x4096x8192.mlir at the vectorized stage, for the AMX target."""
    from npugrad.compiler import make_context, parse

    ctx = make_context()
    example = Path(__file__).parents[1] / "examples" / "flce_grad_4096x4096x8192.mlir"
    module = parse(example.read_text(), str(example), ctx)
    Pipeline(cpu=AMX, verify_each=False).to_xdsl_stage(module, "vectorized", ctx)
    return module


def test_tile_row_blocks_run_outermost_over_hoisted_panels():
    """With B's panels hoisted (GEMMs 1 and 2 of the FLCE gradient), a 32-row block of tiles
    runs over every panel before the next block starts (vectorize_contractions' columns_either): the
    loop around a block's tile products steps over the panels (NR vectors of columns), and the
    loop around that one over 32-row blocks. Panel outermost, each panel read A's whole chunk
    again. Checked on the IR, so on every machine."""
    from xdsl.dialects import scf

    from npugrad.dialect.upstream import TileMulFOp
    from npugrad.ir import integer_constant
    from npugrad.passes.vectorize_contractions import AMX_BLOCK, panel_width

    def loops_around(op) -> list[scf.ForOp]:
        found = []
        while (op := op.parent_op()) is not None:
            if isinstance(op, scf.ForOp):
                found.append(op)
        return found

    module = _vectorized_flce_on_tiles()
    products = [op for op in module.walk() if isinstance(op, TileMulFOp)]
    assert products
    # GEMM 1's first block: around its group loop, the panels' loop, then the row blocks'.
    _groups, panels, row_blocks, *_ = loops_around(products[0])
    assert integer_constant(panels.step) == panel_width(get_target(AMX)) and integer_constant(row_blocks.step) == AMX_BLOCK


def test_each_gemm_is_compiled_once_on_tiles():
    """The FLCE gradient's vectorized IR for AMX holds each GEMM's blocks once (cold compile: the
    IR is what LLVM spends its time on): per GEMM, the tile products of one 32-row block over a
    panel (4 per 32 x 32 block); the blocks of MR rows on vdpbf16ps twice, for the steps after
    the last whole 32 and for the rows below the tile blocks, each with its odd-step loop where
    A is read in place (GEMMs 1 and 2) and without where it is packed as pairs (GEMM 3), and
    once more a line's worth of vectors wide for the masked columns at the edges. Where
    the token loop might run once, GEMMs 1 and 2 had a second copy of all of it under an
    scf.if, and the rows below the tiles a second block: 40 tile products and 648 vdpbf16ps
    against 24 and 240. Checked on the IR, so on every machine."""
    from collections import Counter

    from npugrad.passes.vectorize_contractions import AMX_BLOCK, block_shape, edge_vectors, panel_width

    module = _vectorized_flce_on_tiles()
    ops = Counter(op.name for op in module.walk())
    target = get_target(AMX)
    mr, nr = block_shape(target)
    assert ops["amx.tile_mulf"] == 3 * (panel_width(target) // AMX_BLOCK) * 4
    assert ops["x86vector.avx512.dot"] == (2 * 2 + 2 * 2 + 2) * mr * nr + (2 + 2 + 1) * mr * edge_vectors(target)


def test_tile_code_is_refused_on_a_cpu_without_amx(monkeypatch):
    """A module with tile instructions, on a CPU without them: a JitError naming the feature,
    before LLVM's code generator (which would abort the process) sees it."""
    text = ("define void @f(ptr %p) {\n"
            "  %t = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %p, i64 64)\n"
            "  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p, i64 64, x86_amx %t)\n"
            "  ret void\n}\n"
            "declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)\n"
            "declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)\n")
    features = dict(llvm.get_host_cpu_features())
    features["amx-tile"] = False

    class Features(dict):
        def flatten(self):
            return ",".join(("+" if v else "-") + k for k, v in self.items())

    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: Features(features))
    with pytest.raises(JitError, match="uses amx-tile instructions, which this CPU .* lacks") as e:
        machine_code.parsed(text)
    assert "NPUGRAD_EMULATE" not in str(e.value)
    assert machine_code.uses_amx(text)
