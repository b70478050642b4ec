"""Line tables (Pipeline.line_tables, npugrad-opt --line-tables, NPUGRAD_LINE_TABLES=1): the
labels the passes give their loops (IRBuilder.labelled; convert-train-to-loops keeps a
contraction's kind and a nest part's role as one) reach the machine code as the files of its
line tables, and nothing else changes: the same instructions, the same results, the default
pipeline's LLVM IR without debug information."""

from __future__ import annotations

import collections
import os
import re

import numpy as np
import pytest
from xdsl.dialects import arith
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, NameLoc, StringAttr, UnknownLoc

from bench import loop_profile
from npugrad.compiler import Pipeline, parse, source_location
from npugrad.ir.builder import labelled_location

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "examples")
BF16_CPU = os.path.join(os.path.dirname(__file__), "lit", "Inputs", "avx512bf16.toml")


def _example(name: str) -> ModuleOp:
    path = os.path.join(EXAMPLES, name)
    with open(path) as f:
        return parse(f.read(), path)


def _labelled_instructions(asm: str) -> list[tuple[str, str]]:
    """(file of the line table row in force, instruction) for every instruction."""
    files: dict[str, str] = {}
    current = "-"
    out = []
    for line in asm.splitlines():
        text = line.strip()
        if m := re.match(r'\.file\s+(\d+)\s+(?:"[^"]*"\s+)?"([^"]*)"', text):
            files[m.group(1)] = m.group(2)
        elif m := re.match(r"\.loc\s+(\d+)\s", text):
            current = files.get(m.group(1), "?")
        elif line.startswith("\t") and text and not text.startswith((".", "#")):
            out.append((current, text))
    return out


@pytest.fixture(scope="module")
def bf16_asm() -> tuple[str, str]:
    """The bfloat16 FLCE gradient's assembly for an AVX512-BF16 CPU, without and with line tables."""
    module = _example("flce_grad_4096x4096x8192.mlir")
    plain = Pipeline(cpu=BF16_CPU).lower(module.clone(), "asm")
    tables = Pipeline(cpu=BF16_CPU, line_tables=True).lower(module.clone(), "asm")
    return plain, tables


def test_line_tables_change_no_instruction(bf16_asm):
    plain, tables = bf16_asm
    assert ".loc" not in plain and ".loc" in tables
    assert loop_profile.assembly_instructions(tables) == loop_profile.assembly_instructions(plain)


def test_every_dot_product_is_in_a_labelled_reduction_loop(bf16_asm):
    """Each vdpbf16ps is in the reduction loop of one of the three GEMMs (whole blocks `.k`, the
    rows below them `.k_tail`), and each GEMM's whole blocks hold a 6 x 4 block's 24."""
    labelled = _labelled_instructions(bf16_asm[1])
    dots = collections.Counter(label for label, text in labelled if text.startswith("vdpbf16ps"))
    kinds = {"logits", "input_grad", "weight_grad"}
    assert set(dots) <= {f"{k}.{part}" for k in kinds for part in ("k", "k_tail")}, dots
    for kind in kinds:
        assert dots[f"{kind}.k"] >= 24, dots
    found = {label for label, _ in labelled}
    # The packs, the softmax gradient, the rounding of the float32 accumulators: named too.
    assert {"logits.pack_b", "weight_grad.pack_b", "weight_grad.pack_a", "softmax_grad", "softmax_grad.vector",
            "input_grad_final", "weight_grad_final"} <= found, found
    # exp's polynomial is the softmax gradient's vector loop's.
    assert any(label == "softmax_grad.vector" and text.startswith(("vrndscaleps", "vroundps")) for label, text in labelled)


def test_default_llvm_ir_has_no_debug_information():
    module = _example("flce_grad.mlir")
    plain = Pipeline().lower(module.clone(), "llvm-ir")
    tables = Pipeline(line_tables=True).lower(module.clone(), "llvm-ir")
    assert "!dbg" not in plain and "DICompileUnit" not in plain
    assert 'DIFile(filename: "logits.k"' in tables and "emissionKind: LineTablesOnly" in tables
    assert Pipeline(line_tables=True).key() != Pipeline().key()


def test_labels_see_through_to_the_source_position():
    """A labelled op's diagnostics still point at its source line; a label replaces a label."""
    source = FileLineColLoc(StringAttr("flce.mlir"), IntAttr(5), IntAttr(3))
    named = labelled_location("logits.k", labelled_location("logits", source))
    assert isinstance(named, NameLoc) and named.desc.data == "logits.k" and named.location == source
    assert source_location(named) == source and source_location(UnknownLoc()) == UnknownLoc()


def test_generic_text_locations():
    """With line_tables the text for upstream locates labelled ops at their label (as the file,
    the source line kept), source ops at their source, and leaves unknown locations out."""
    from npugrad.ir import IRBuilder
    from npugrad.lowering.mlir_bindings import ir
    from npugrad.lowering.mlir_text import generic_text

    module = _example("bce_grad.mlir")
    func = module.body.block.first_op
    anchor = next(op for op in func.walk() if op.name.startswith("train."))
    e = IRBuilder.before(anchor)
    with e.labelled("bce.part"):
        e.emit(arith.ConstantOp.from_int_and_width(7, 64))
    e.emit(arith.ConstantOp.from_int_and_width(8, 64))
    anchor_line = anchor.location.line.data
    unknown = arith.ConstantOp.from_int_and_width(9, 64)
    func.body.block.insert_op_before(unknown, func.body.block.first_op)
    text = generic_text(module, line_tables=True)
    assert f'loc("bce.part":{anchor_line}:' in text
    assert re.search(rf'value = 8 : i64}}> : \(\) -> i64 loc\("[^"]*bce_grad.mlir":{anchor_line}:', text)
    assert re.search(r"value = 9 : i64}> : \(\) -> i64\n", text)
    assert "loc(" not in generic_text(module)
    with ir.Context():  # upstream reads the located form
        ir.Context.current.allow_unregistered_dialects = True
        parsed = ir.Module.parse(text)
        assert "bce.part" in str(parsed.operation.get_asm(enable_debug_info=True))


def test_api_kernels_with_line_tables(monkeypatch, tmp_path):
    """NPUGRAD_LINE_TABLES=1: another kernel (another cache key), bit for bit the same results."""
    from npugrad import ops
    from npugrad.runtime import launch, specialize

    rng = np.random.default_rng(7)
    bt, h, v = 33, 40, 70
    x = rng.standard_normal((bt, h), dtype=np.float32)
    w = rng.standard_normal((v, h), dtype=np.float32) * np.float32(0.1)
    target = rng.integers(0, v, bt)
    logits = x @ w.T
    lmax = logits.max(1).astype(np.float32)
    lse = np.exp(logits - lmax[:, None]).sum(1).astype(np.float32)
    mask = np.packbits(np.ones(bt, np.bool_), bitorder="little")
    grad = rng.random(bt, dtype=np.float32)

    def call():
        return ops.fused_linear_cross_entropy_loss_grad(grad, x, w, mask, target, logits_max=lmax, sum_exp_logits=lse)

    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(specialize, "_DEFAULT_PIPELINES", {})
    monkeypatch.setattr(specialize, "_CACHE", {})
    monkeypatch.setattr(launch, "_REPLAYS", {})
    monkeypatch.setattr(launch, "_SPECIALISED", {})
    monkeypatch.delenv("NPUGRAD_LINE_TABLES", raising=False)
    plain = call()
    monkeypatch.setenv("NPUGRAD_LINE_TABLES", "1")  # read when a signature is first specialised
    launch._REPLAYS.clear()
    launch._SPECIALISED.clear()
    with_tables = call()
    assert len(specialize._CACHE) == 2  # two pipelines' kernels, side by side
    for a, b in zip(plain, with_tables):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("example, label", [("bce_grad.mlir", "binary_cross_entropy_grad"),
                                            ("nll_loss_backward.mlir", "nll_loss_backward")])
def test_an_op_lowered_to_loops_is_labelled_by_its_name(example, label):
    """Its loops under its name; vectorize-elementwise's main loop `.vector` (the vector
    instructions), the scalar loop doing the rest under the name alone."""
    for pipeline in (Pipeline(line_tables=True), Pipeline(target="host", line_tables=True)):  # distributed, tiled
        labelled = _labelled_instructions(pipeline.lower(_example(example), "asm"))
        names = collections.Counter(name for name, _ in labelled)
        assert names[label] > 10 and names[f"{label}.vector"] > 5, names
        vector = [text for name, text in labelled if name == f"{label}.vector"]
        assert any(re.search(r"%[yz]mm", text) for text in vector), vector


@pytest.mark.parametrize("name", ["NPUGRAD_LINE_TABLES", "NPUGRAD_VERIFY_EACH"])
def test_an_on_off_variable_other_than_1_or_0_is_named(monkeypatch, name):
    """`true` or `yes` read as off would be an option silently not taken."""
    from npugrad.runtime import specialize

    for value, on in (("1", True), (" 1 ", True), ("0", False), ("", False)):
        monkeypatch.setenv(name, value)
        assert specialize.env_flag(name) is on
    monkeypatch.setenv(name, "yes")
    with pytest.raises(ValueError, match=rf"^{name} must be 1 \(on\) or 0 \(off\), got 'yes'$"):
        specialize.env_flag(name)
