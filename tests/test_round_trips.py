"""Round trips through files: every dtype `--outputs` saves loads with `--inputs` (bfloat16
included), and a stage saved after its op was replaced (`fused`, `tiled`, `loops`, `vectorized`)
still runs against the op's reference on inputs valid for it, through the `train.source` attribute
the passes write (`train.source_op` once lowered), with what the printer wrote read back as it was
(hexadecimal float constants)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from npugrad import dtypes
from npugrad.compiler import CompileError, parse
from npugrad.tools import run as runner
from npugrad.tools.opt import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
RUNNABLE = sorted(p for p in EXAMPLES.glob("*.mlir") if "4096" not in p.name)  # the 4096 one: minutes


def _opt(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as stop:
        main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return stop.value.code, out, err


@pytest.mark.parametrize("dtype", list(dtypes._TO_MLIR), ids=str)
def test_every_dtype_comes_back_bit_for_bit(dtype, tmp_path):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((3, 5)) * 50).astype(dtype)
    runner.save_npz(str(tmp_path / "a.npz"), {"a": a, "b": a[0].copy()})
    back = runner.load_npz(str(tmp_path / "a.npz"))
    assert set(back) == {"a", "b"}
    assert back["a"].dtype == dtype and back["a"].tobytes() == a.tobytes()


def test_bfloat16_that_another_tool_saved_as_raw_bytes_loads_as_its_bits(tmp_path):
    x = np.linspace(-3, 3, 10, dtype=np.float32).astype(dtypes.BFLOAT16)
    np.savez(tmp_path / "raw.npz", x=x)  # NumPy writes '|V2'
    assert np.load(tmp_path / "raw.npz")["x"].dtype.kind == "V"
    got = runner._as_dtype(runner.load_npz(str(tmp_path / "raw.npz"))["x"], dtypes.BFLOAT16, "x")
    assert got.dtype == dtypes.BFLOAT16 and got.tobytes() == x.tobytes()
    with pytest.raises(runner.RunError, match="array 'x' has dtype |V4, which does not convert to bfloat16"):
        runner._as_dtype(np.zeros(2, "V4"), dtypes.BFLOAT16, "array 'x'")


@pytest.mark.parametrize("path", RUNNABLE, ids=[p.stem for p in RUNNABLE])
def test_what_outputs_saves_inputs_loads(path, tmp_path, capsys):
    saved = tmp_path / "out.npz"
    code, out, err = _opt(capsys, path, "--stage", "run", "--outputs", saved)
    assert code == 0, err
    arrays = runner.load_npz(str(saved))
    module = parse(path.read_text(), str(path))
    specs = next(iter(runner.signatures(module).values()))
    assert [arrays[s.name].dtype for s in specs] == [s.dtype for s in specs]
    code, again, err = _opt(capsys, path, "--stage", "run", "--inputs", saved)
    assert code == 0, err
    assert " ok" in again and "MISMATCH" not in again


# Stages where a pass replaced the op (BCE's `fused` stage still is the op: nothing to resume); the
# lowered ones as block kernels (distributed, or tiled for a target's cores) whose last two arguments
# the launch gives, and flce_forward's vectorized stage with its -inf splat (dense<0xff800000>).
RESUMED = [("bce_grad", "tiled", None), ("nll_loss_backward", "tiled", None),
           ("flce_grad", "fused", None), ("flce_grad", "tiled", None), ("flce_forward", "fused", None),
           ("flce_grad", "tiled", "npu-a2"), ("embedding_dense_backward", "tiled", "npu-a2"),
           ("bce_grad", "loops", None), ("embedding_dense_backward", "loops", None), ("flce_grad", "loops", None),
           ("nll_loss_backward", "vectorized", "host"), ("apply_fused_ema_adam", "vectorized", None),
           ("flce_forward", "vectorized", None), ("flce_grad_fused", "vectorized", "npu-a2")]


@pytest.mark.parametrize("name, stage, target", RESUMED, ids=[f"{n}-{s}{'-' + t if t else ''}" for n, s, t in RESUMED])
def test_a_resumed_stage_runs_against_its_ops_reference(name, stage, target, tmp_path, capsys):
    options = ["--target", target] if target else []
    saved = tmp_path / f"{name}.{stage}.mlir"
    code, _, err = _opt(capsys, EXAMPLES / f"{name}.mlir", "--stage", stage, *options, "-o", saved)
    assert code == 0, err
    text = saved.read_text()
    lowered = stage in ("loops", "vectorized")
    assert ('train.source_op = {op = "train.' if lowered else 'train.source = #train.source<"train.') in text
    # Read back with the same options: the passes it has been through leave it as it is.
    code, out, err = _opt(capsys, saved, "--stage", "run", *options)
    assert code == 0, err
    assert "outputs not checked" not in out
    assert re.search(r"max error", out) and " ok" in out and "MISMATCH" not in out


def test_the_source_is_lowered_to_builtin_attributes_and_checked_when_read(tmp_path, capsys):
    """convert-train-to-loops drops #train.source with the train level (upstream MLIR cannot
    parse it) and writes the same as builtin attributes; a malformed one is a located error."""
    code, loops, _ = _opt(capsys, EXAMPLES / "bce_grad.mlir", "--stage", "loops")
    assert code == 0 and "#train.source<" not in loops
    assert ('train.source_op = {op = "train.binary_cross_entropy_grad", properties = {reduction = 1 : i64}, '
            'operands = {input_x = 0 : i64, input_y = 1 : i64, dloss = 2 : i64, weight = 3 : i64, dx = 4 : i64}}') in loops
    for wrong_op, message in (('{op = "train.binary_cross_entropy_grad", properties = {}}', "must be {op = "),
                              ('{op = "other.bce", properties = {}, operands = {}}', "names a train op, got 'other.bce'")):
        wrong = tmp_path / "wrong_loops.mlir"
        wrong.write_text(re.sub(r"train\.source_op = \{op = .*\}\}(?=\} \{)", f"train.source_op = {wrong_op}", loops))
        code, _, err = _opt(capsys, wrong, "--stage", "run")
        assert code == 1 and re.search(rf"{wrong}:2:3: error: @bce_grad: .*{re.escape(message)}", err), err
    code, fused, _ = _opt(capsys, EXAMPLES / "flce_grad.mlir", "--stage", "fused")
    wrong = tmp_path / "wrong.mlir"
    wrong.write_text(fused.replace('#train.source<"train.fused_linear_cross_entropy_loss_grad"',
                                   '#train.source<"train.no_such_op"'))
    code, _, err = _opt(capsys, wrong, "--stage", "run")
    assert code == 1
    assert re.search(rf"{wrong}:\d+:\d+: error: @flce_grad: train.source: .*no op 'train.no_such_op'", err), err
    wrong.write_text(fused.replace('#train.source<"train.', '#train.source<"other.'))
    with pytest.raises(CompileError, match=r"#train.source names a train op, got 'other\."):
        parse(wrong.read_text(), str(wrong))


def test_every_file_a_readme_command_names_exists():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"npugrad-opt ((?:examples|tests)/\S+)", doc.read_text()):
            assert (ROOT / m.group(1)).exists(), f"{doc.name}: {m.group(0)}"


def test_a_function_with_integer_arguments_and_no_source_needs_its_inputs(tmp_path, capsys):
    """Random integers would index out of range: without the op that says what is valid (a
    hand-written loop nest, a stage stripped of train.source_op), --stage run asks for --inputs."""
    code, loops, _ = _opt(capsys, EXAMPLES / "embedding_dense_backward.mlir", "--stage", "loops")
    bare = tmp_path / "bare.mlir"
    bare.write_text(re.sub(r" attributes \{train\.source_op = .*\}\}\} \{", " {", loops))
    assert "train.source_op" not in bare.read_text()
    code, _, err = _opt(capsys, bare, "--stage", "run")
    assert code == 1 and "integer argument(s) indices (no train.source): give the inputs with --inputs" in err, err


@pytest.mark.parametrize("literal, bits", [("0xFF800000", 0xFF800000), ("0x7FC00000", 0x7FC00000),
                                           ("[0x7F800000, 2.5]", None)])
def test_a_hexadecimal_dense_float_is_its_bits_as_in_mlir(literal, bits):
    """MLIR reads `dense<0xFF800000> : vector<4xf32>` as the bits of -inf (xDSL's printer writes
    -inf, NaN and values without a short decimal form so); xDSL 0.74's parser read the integer
    4286578688. Printed and read again, the constant is the same bits."""
    from io import StringIO

    from xdsl.dialects.arith import ConstantOp
    from xdsl.printer import Printer

    text = f"func.func @f() {{\n  %0 = arith.constant dense<{literal}> : vector<2xf32>\n  func.return\n}}"
    for _ in range(2):
        module = parse(text, "hex.mlir")
        const = next(op for op in module.walk() if isinstance(op, ConstantOp))
        raw = np.frombuffer(const.value.data.data, np.uint32)
        if bits is not None:
            assert raw.tolist() == [bits, bits]
        else:
            assert raw[0] == 0x7F800000 and raw.view(np.float32)[1] == 2.5
        out = StringIO()
        Printer(stream=out).print_op(module)
        text = out.getvalue()


@pytest.mark.parametrize("literal, element, message", [
    ("-0x7F800000", "f32", "hexadecimal float literal should not have a leading minus sign"),
    ("0x1FF80", "bf16", "hexadecimal float literal does not fit in bf16"),
])
def test_a_hexadecimal_dense_float_mlir_rejects_is_rejected(literal, element, message):
    with pytest.raises(CompileError, match=re.escape(message)):
        parse(f"func.func @f() {{\n  %0 = arith.constant dense<{literal}> : vector<2x{element}>\n  func.return\n}}",
              "hex.mlir")
