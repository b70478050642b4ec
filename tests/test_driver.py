"""The command-line drivers, run as the user runs them: `npugrad-opt` and plain `xdsl-opt`.

Every failure must be a located `file:line:col: error:` (or `npugrad-opt: error:`) with a non-zero
exit code, never a Python traceback."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from npugrad.compiler import STAGES
from npugrad.passes.linear_nests import cpu_tiles
from npugrad.reference import ops as ref
from npugrad.targets import get as get_target

ROOT = Path(__file__).resolve().parent.parent
BCE_EXAMPLE = ROOT / "examples" / "bce_grad.mlir"
BIN = Path(sys.executable).parent

BCE = """func.func @bce(%x: memref<{n}xf32>, %y: memref<{m}xf32>, %d: memref<1xf32>, %dx: memref<{n}xf32>) {{
  train.binary_cross_entropy_grad input_x(%x : memref<{n}xf32>) input_y(%y : memref<{m}xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<{n}xf32>) {{reduction = {reduction} : i64}}
  func.return
}}
"""


def bce(n="16", m=None, reduction=1) -> str:
    return BCE.format(n=n, m=n if m is None else m, reduction=reduction)


def run(tool: str, *args, stdin: str | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(BIN / tool), *map(str, args)], input=stdin, capture_output=True, text=True, timeout=300, check=False
    )
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    return result


def write(tmp_path: Path, text: str, name: str = "input.mlir") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def located_errors(stderr: str) -> list[tuple[str, int, int, str]]:
    return [
        (f, int(line), int(col), msg)
        for f, line, col, msg in re.findall(r"^(.*?):(\d+):(\d+): error: (.*)$", stderr, re.MULTILINE)
    ]


# -- errors ------------------------------------------------------------------------------------


def test_malformed_input_is_a_located_error(tmp_path):
    path = write(
        tmp_path,
        "func.func @f(%x: memref<4xf32>) {\n  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(\n}\n",
    )
    result = run("npugrad-opt", path)
    assert result.returncode == 1
    assert located_errors(result.stderr) == [(str(path), 3, 1, "operand expected")]
    assert result.stdout == ""


def test_verifier_error_is_located_at_the_op(tmp_path):
    path = write(tmp_path, bce(m="15"))
    result = run("npugrad-opt", path)
    assert result.returncode == 1
    [(file, line, col, message)] = located_errors(result.stderr)
    assert (file, line, col) == (str(path), 2, 3)
    assert (
        message
        == "'train.binary_cross_entropy_grad' op operand 'input_y' must have shape (16,) (the shape of 'input_x'), got (15,)"
    )
    # The offending line is quoted, with a caret under the column.
    assert result.stderr.splitlines()[1:3] == [path.read_text().splitlines()[1], "  ^"]


def test_unknown_op_is_located_at_its_name(tmp_path):
    path = write(tmp_path, "func.func @f() {\n  train.no_such_op\n  func.return\n}\n")
    result = run("npugrad-opt", path)
    assert result.returncode == 1
    assert located_errors(result.stderr) == [(str(path), 2, 3, "Operation train.no_such_op is not registered")]


def test_property_of_the_wrong_type_is_located(tmp_path):
    path = write(tmp_path, bce().replace("reduction = 1 : i64", "reduction = 1 : i32"))
    result = run("npugrad-opt", path)
    assert result.returncode == 1
    [(_, line, col, message)] = located_errors(result.stderr)
    assert (line, col) == (2, 3)
    assert message.startswith("'train.binary_cross_entropy_grad' op ")


def test_a_tile_dimension_given_twice_is_located(tmp_path):
    """A dictionary keeps the last of two values silently: the parser names the second."""
    path = write(tmp_path, bce().replace("{reduction = 1 : i64}", "{tile_sizes = #train.tiles<n = 8, n = 16>}"))
    result = run("npugrad-opt", path)
    assert result.returncode == 1
    [(_, line, col, message)] = located_errors(result.stderr)
    assert (line, message) == (3, "tile dimension 'n' is given twice")
    assert path.read_text().splitlines()[2][col - 1:].startswith("n = 16>")


def test_split_input_file_reports_lines_of_the_whole_file(tmp_path):
    chunks = [bce(), bce(m="3"), bce(reduction=4)]
    path = write(tmp_path, "// -----\n".join(chunks))
    result = run("npugrad-opt", path, "--split-input-file")
    assert result.returncode == 1
    first_op_lines = [2 + 6 * i for i in range(3)]  # a chunk is 5 lines plus the separator
    assert [(line, col) for _, line, col, _ in located_errors(result.stderr)] == [
        (first_op_lines[1], 3),
        (first_op_lines[2], 3),
    ]
    # The valid chunk is still printed, and the chunks stay separated.
    assert result.stdout.count("// -----") == 2
    assert "train.binary_cross_entropy_grad" in result.stdout


def test_a_layout_the_llvm_lowering_cannot_take_is_an_error_not_a_crash(tmp_path):
    """The bindings' translation to LLVM IR crashes on ops left outside the LLVM dialect."""
    path = write(
        tmp_path,
        """func.func @f(%x: memref<16xf32, affine_map<(d0) -> (d0 floordiv 4, d0 mod 4)>>) {
  %c0 = arith.constant 0 : index
  %v = memref.load %x[%c0] : memref<16xf32, affine_map<(d0) -> (d0 floordiv 4, d0 mod 4)>>
  memref.store %v, %x[%c0] : memref<16xf32, affine_map<(d0) -> (d0 floordiv 4, d0 mod 4)>>
  func.return
}
""",
    )
    for stage in ("llvm-dialect", "llvm-ir"):
        result = run("npugrad-opt", path, "--stage", stage)
        assert result.returncode == 1
        assert "lowering to the LLVM dialect left 'func.func'" in result.stderr


def test_unknown_pass_is_a_usage_error(tmp_path):
    result = run("npugrad-opt", BCE_EXAMPLE, "-p", "no-such-pass")
    assert result.returncode == 1
    assert result.stderr.startswith("npugrad-opt: error: ")
    assert "no-such-pass" in result.stderr


@pytest.mark.parametrize("pipeline, says", [
    ("fuse-linear-cross-entropy-grad{tile_bt=1", "expected either a space or `}` here"),
    ("check-capacity{target=a/b.toml}", 'quoted: target="path/to/cpu.toml"'),
])
def test_a_malformed_pipeline_is_a_usage_error(pipeline, says):
    """xDSL's pipeline parser raises a BaseException (ArgSpecParseError): a one-line error too."""
    result = run("npugrad-opt", BCE_EXAMPLE, "-p", pipeline)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith("npugrad-opt: error: Error parsing pass pipeline specification")
    assert says in result.stderr


@pytest.mark.parametrize("pipeline", ["fuse-linear-cross-entropy-grad{tile_bt=-1}", "fuse-linear-online-max-sum{tile_v=-3}",
                                      "fuse-linear-cross-entropy-grad{balance_blocks=-2}"])
def test_a_negative_fuse_option_is_a_usage_error_naming_the_pass_and_option(pipeline):
    """It reached #train.tiles' verifier, an error with no line, no pass and no option (or, for
    balance_blocks, was taken silently as 0)."""
    result = run("npugrad-opt", BCE_EXAMPLE, "-p", pipeline)
    name, option = re.match(r"([\w-]+)\{(\w+)=", pipeline).groups()
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.startswith(f"npugrad-opt: error: {name}: option '{option}' must be a non-negative integer, got -")


def test_missing_input_file_is_a_usage_error(tmp_path):
    result = run("npugrad-opt", tmp_path / "missing.mlir")
    assert result.returncode == 1
    assert result.stderr.startswith("npugrad-opt: error: ")


def test_allow_unregistered_dialect_is_honoured(tmp_path):
    path = write(tmp_path, 'func.func @f() {\n  "foo.bar"() : () -> ()\n  func.return\n}\n')
    assert run("npugrad-opt", path).returncode == 1
    result = run("npugrad-opt", path, "--allow-unregistered-dialect")
    assert result.returncode == 0
    assert '"foo.bar"() : () -> ()' in result.stdout


# -- the stage ladder ----------------------------------------------------------------------------

STAGE_MARKERS = {
    "train": "train.binary_cross_entropy_grad input_x(",
    "fused": "train.binary_cross_entropy_grad input_x(",
    "loops": "scf.for",
    "llvm-dialect": "llvm.func @bce_grad(",
    "llvm-ir": "define void @_mlir_ciface_bce_grad(",
    "asm": "bce_grad:",
    "run": "ok",
}


@pytest.mark.parametrize("stage", [*STAGES, "run"])
def test_every_stage(stage):
    result = run("npugrad-opt", BCE_EXAMPLE, "--stage", stage)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert STAGE_MARKERS.get(stage, "") in result.stdout
    assert result.stdout.strip()
    if stage == "loops":  # no train op left; of the train level, what it computed (upstream MLIR reads it)
        assert re.findall(r"(?<!\")train\.\w+", result.stdout) == ["train.source_op"]


def test_run_with_npz_inputs_and_outputs(tmp_path):
    rng = np.random.default_rng(0)
    n = 1000
    inputs = {
        "x": rng.uniform(0.05, 0.95, n).astype(np.float32),
        "y": rng.uniform(0, 1, n).astype(np.float32),
        "dloss": np.array([2.5], np.float32),
        "w": rng.uniform(0.5, 1.5, n).astype(np.float32),
        "dx": np.full(n, np.nan, np.float32),
    }
    np.savez(tmp_path / "in.npz", **inputs)
    result = run(
        "npugrad-opt", BCE_EXAMPLE, "--stage", "run", "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "out.npz"
    )
    assert result.returncode == 0, result.stderr
    assert re.search(r"^\s+dx\s+\(1000,\)\s+float32\s+\S+\s+\S+\s+ok$", result.stdout, re.MULTILINE), result.stdout
    out = np.load(tmp_path / "out.npz")
    assert sorted(out.files) == sorted(inputs)
    for name in ("x", "y", "dloss", "w"):
        np.testing.assert_array_equal(out[name], inputs[name])
    want = ref.binary_cross_entropy_grad(inputs["x"], inputs["y"], inputs["dloss"], inputs["w"], reduction=1)
    np.testing.assert_allclose(out["dx"], want, rtol=1e-5)


@pytest.mark.parametrize("example, fuse", [("flce_grad.mlir", "fuse-linear-cross-entropy-grad"),
                                           ("flce_forward.mlir", "fuse-linear-online-max-sum")])
def test_a_nest_fused_without_a_target_is_tiled_for_one(tmp_path, example, fuse):
    """Fused without a target, the nest's tiles are bt and v alone (the `fused` stage fed back with
    -t): tile-for-target chooses the h that fits around them. Where bt and v fit the target it
    runs, and right; where they do not, check-capacity says so at the op (npu-a2's 128 KiB L0C
    against the host's float32 accumulator, 252 x 256 on a 1 MiB L2)."""
    fused = write(tmp_path, run("npugrad-opt", ROOT / "examples" / example, "--stage", "fused").stdout)
    small = write(tmp_path, run("npugrad-opt", ROOT / "examples" / example, "-p", fuse + "{tile_bt=16 tile_v=32}").stdout,
                  "small.mlir")
    for path, target in ((fused, "host"), (small, "npu-a2"), (small, "host")):
        assert "tiles<bt = " in path.read_text() and ", h = " not in path.read_text()
        result = run("npugrad-opt", path, "-t", target, "--stage", "run")
        assert result.returncode == 0, result.stderr
        rows = [line for line in result.stdout.splitlines() if line.endswith(("ok", "FAIL"))]
        assert rows and all(line.endswith(" ok") for line in rows), result.stdout
    # The host's 252 x 256 tiles need 252 tokens and 256 vocabulary rows (the fuse passes take no
    # tile past the op's static sizes, linear_nests.within): the example with 16 times its tokens.
    text = (ROOT / "examples" / example).read_text()
    bt = re.search(r"%x: memref<(\d+)x", text).group(1)
    large = re.sub(rf"memref<{bt}([x>])", lambda m: f"memref<{16 * int(bt)}{m.group(1)}", text)
    large = re.sub(r"memref<\d+xui8>", f"memref<{-(-16 * int(bt) // 8)}xui8>", large)
    large_fused = write(tmp_path, run("npugrad-opt", write(tmp_path, large, "large.mlir"), "--stage", "fused").stdout,
                        "large_fused.mlir")
    result = run("npugrad-opt", large_fused, "-t", "npu-a2", "--stage", "tiled")
    assert result.returncode == 1, result.stdout[-2000:]
    # The host's tiles come from its caches (252 x 256 on a 1 MiB L2, 384 x 320 on a 2 MiB one
    # whose GEMMs run on AMX tiles), each at most the op's size.
    tiles = cpu_tiles(get_target("host"))
    v = int(re.search(r"%w: memref<(\d+)x", large).group(1))
    shape = f"{min(tiles['bt'], 16 * int(bt))}x{min(tiles['v'], v)}"
    assert re.match(rf"check-capacity: local buffer %gemm1?_acc \(memref<{shape}xf32, #npu.mem<l0c>>",
                    [e[3] for e in located_errors(result.stderr)][0]), result.stderr


def test_run_outputs_read_back_as_inputs_with_bfloat16_scalars(tmp_path):
    """--outputs saves bfloat16 as raw 2-byte records; --inputs reads them back with their shape,
    a 0-d one (NLL's grad_output) included."""
    path = write(tmp_path, """func.func @f(%go: memref<bf16>, %s: memref<4x5xbf16>, %t: memref<4xi64>, %w: memref<5xbf16>,
             %tw: memref<1xbf16>, %o: memref<4x5xbf16>) {
  train.nll_loss_backward grad_output(%go : memref<bf16>) self(%s : memref<4x5xbf16>) target(%t : memref<4xi64>)
      weight(%w : memref<5xbf16>) total_weight(%tw : memref<1xbf16>) -> out(%o : memref<4x5xbf16>) {reduction = 1 : i64}
  func.return
}
""")
    first = run("npugrad-opt", path, "--stage", "run", "--outputs", tmp_path / "first.npz")
    assert first.returncode == 0, first.stderr
    again = run("npugrad-opt", path, "--stage", "run", "--inputs", tmp_path / "first.npz", "--outputs",
                tmp_path / "again.npz")
    assert again.returncode == 0, again.stderr
    before, after = np.load(tmp_path / "first.npz"), np.load(tmp_path / "again.npz")
    assert before["go"].shape == after["go"].shape == ()
    for name in before.files:
        assert before[name].tobytes() == after[name].tobytes(), name


def test_run_with_positional_npz_names(tmp_path):
    """Arrays may also be named arg0, arg1, ... after the argument positions."""
    path = write(tmp_path, bce(n="?"))
    n = 10
    arrays = [
        np.full(n, 0.5, np.float32),
        np.full(n, 0.25, np.float32),
        np.ones(1, np.float32),
        np.zeros(n, np.float32),
    ]
    np.savez(tmp_path / "in.npz", **{f"arg{i}": a for i, a in enumerate(arrays)})
    result = run("npugrad-opt", path, "--stage", "run", "--inputs", tmp_path / "in.npz")
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_dynamic_shapes_need_inputs(tmp_path):
    path = write(tmp_path, bce(n="?"))
    result = run("npugrad-opt", path, "--stage", "run")
    assert result.returncode == 1
    assert result.stderr.strip() == f"{path}: error: @bce has dynamic shapes: give the inputs with --inputs FILE.npz"


def test_npz_inputs_are_checked_against_the_op_rules(tmp_path):
    """Dynamic sizes that break the op's rules are rejected before the kernel reads past an array."""
    path = write(tmp_path, bce(n="?", m="?"))
    np.savez(
        tmp_path / "in.npz",
        x=np.full(100, 0.5, np.float32),
        y=np.full(3, 0.5, np.float32),
        d=np.ones(1, np.float32),
        dx=np.zeros(100, np.float32),
    )
    result = run("npugrad-opt", path, "--stage", "run", "--inputs", tmp_path / "in.npz")
    assert result.returncode == 1
    assert "operand 'input_y' must have shape (100,) (the shape of 'input_x'), got (3,)" in result.stderr


def test_npz_values_are_checked_before_the_launch(tmp_path):
    """An index the kernel would write out of bounds with is rejected by the reference first."""
    path = write(
        tmp_path,
        """func.func @emb(%g: memref<?x4xf32>, %i: memref<?xi64>, %out: memref<10x4xf32>) {
  train.embedding_dense_backward grad(%g : memref<?x4xf32>) indices(%i : memref<?xi64>) -> out(%out : memref<10x4xf32>)
      {num_weights = 10 : i64}
  func.return
}
""",
    )
    np.savez(
        tmp_path / "in.npz",
        g=np.ones((3, 4), np.float32),
        i=np.array([1, 2, 1 << 40]),
        out=np.zeros((10, 4), np.float32),
    )
    result = run("npugrad-opt", path, "--stage", "run", "--inputs", tmp_path / "in.npz")
    assert result.returncode == 1
    assert "indices must lie in [0, num_weights)" in result.stderr


def test_bad_npz_file(tmp_path):
    (tmp_path / "in.npz").write_text("not an npz")
    result = run("npugrad-opt", BCE_EXAMPLE, "--stage", "run", "--inputs", tmp_path / "in.npz")
    assert result.returncode == 1
    assert "is not a NumPy .npz file" in result.stderr


# -- --verify-diagnostics ----------------------------------------------------------------------

EXPECTED = "  // expected-error@+1 {{operand 'input_y' must have shape (16,)}}\n"


def _annotated(text: str, annotation: str, before_line: int = 1) -> str:
    lines = text.splitlines(keepends=True)
    return "".join(lines[:before_line] + [annotation] + lines[before_line:])


def test_verify_diagnostics_passes_when_errors_match(tmp_path):
    path = write(tmp_path, _annotated(bce(m="15"), EXPECTED))
    result = run("npugrad-opt", path, "--verify-diagnostics")
    assert result.returncode == 0, result.stderr


def test_verify_diagnostics_fails_when_an_expected_error_is_missing(tmp_path):
    path = write(tmp_path, _annotated(bce(), EXPECTED))
    result = run("npugrad-opt", path, "--verify-diagnostics")
    assert result.returncode == 1
    assert (
        f"{path}:3: error: expected error \"operand 'input_y' must have shape (16,)\" was not produced" in result.stderr
    )


@pytest.mark.parametrize("directive", ["expected-error @+1", "expected-error@below", "expected-error @below"])
def test_verify_diagnostics_reads_mlirs_other_forms(tmp_path, directive):
    """MLIR's `@below` and a space before the `@` (found by a probe: they were dropped, so a
    negative test passed checking nothing)."""
    annotation = EXPECTED.replace("expected-error@+1", directive)
    assert run("npugrad-opt", write(tmp_path, _annotated(bce(m="15"), annotation)), "--verify-diagnostics").returncode == 0
    result = run("npugrad-opt", write(tmp_path, _annotated(bce(), annotation)), "--verify-diagnostics")
    assert result.returncode == 1 and "was not produced" in result.stderr


def test_verify_diagnostics_reads_above(tmp_path):
    text = bce(m="15").splitlines(keepends=True)
    path = write(tmp_path, "".join(text[:2] + [EXPECTED.replace("@+1", "@above")] + text[2:]))
    assert run("npugrad-opt", path, "--verify-diagnostics").returncode == 0


@pytest.mark.parametrize("directive", ["expected-warning", "expected-error-re", "expected-remark@+1"])
def test_verify_diagnostics_rejects_a_directive_it_does_not_check(tmp_path, directive):
    path = write(tmp_path, _annotated(bce(), EXPECTED.replace("expected-error@+1", directive)))
    result = run("npugrad-opt", path, "--verify-diagnostics")
    assert result.returncode == 1 and f"{path}:2: error: npugrad-opt checks only" in result.stderr


def test_verify_diagnostics_fails_on_an_unexpected_error(tmp_path):
    path = write(tmp_path, bce(m="15"))
    result = run("npugrad-opt", path, "--verify-diagnostics")
    assert result.returncode == 1
    assert (
        f"{path}:2:3: error: unexpected error: 'train.binary_cross_entropy_grad' op operand 'input_y'" in result.stderr
    )


def test_verify_diagnostics_fails_on_the_wrong_line(tmp_path):
    path = write(tmp_path, _annotated(bce(m="15"), EXPECTED.replace("@+1", "@+2")))
    result = run("npugrad-opt", path, "--verify-diagnostics")
    assert result.returncode == 1
    assert "unexpected error" in result.stderr and "was not produced" in result.stderr


def test_verify_diagnostics_fails_on_the_wrong_message(tmp_path):
    path = write(tmp_path, _annotated(bce(m="15"), EXPECTED.replace("input_y", "input_x")))
    assert run("npugrad-opt", path, "--verify-diagnostics").returncode == 1


def test_verify_diagnostics_per_chunk(tmp_path):
    """Each chunk is checked on its own: one failing chunk fails the file."""
    good = _annotated(bce(m="15"), EXPECTED)
    path = write(tmp_path, "// -----\n".join([good, bce(), good]))  # noqa: FLY002 - like the next case
    assert run("npugrad-opt", path, "--verify-diagnostics", "--split-input-file").returncode == 0
    path = write(tmp_path, "// -----\n".join([good, _annotated(bce(), EXPECTED), good]))
    result = run("npugrad-opt", path, "--verify-diagnostics", "--split-input-file")
    assert result.returncode == 1
    assert f"{path}:10: error: expected error" in result.stderr  # the op of the second chunk


# -- input from stdin; plain xdsl-opt ------------------------------------------------------------


def test_stdin_input():
    result = run("npugrad-opt", "--stage", "loops", stdin=BCE_EXAMPLE.read_text())
    assert result.returncode == 0, result.stderr
    assert "scf.for" in result.stdout
    result = run("npugrad-opt", stdin=bce(m="15"))
    assert result.returncode == 1
    [(file, line, col, _)] = located_errors(result.stderr)
    assert "stdin" in file and (line, col) == (2, 3)


def test_xdsl_opt_knows_the_dialect():
    result = run("xdsl-opt", BCE_EXAMPLE)
    assert result.returncode == 0, result.stderr
    assert "train.binary_cross_entropy_grad input_x(%x : memref<1000xf32>)" in result.stdout
    reparsed = run("xdsl-opt", stdin=result.stdout)
    assert reparsed.stdout == result.stdout


def test_xdsl_opt_runs_convert_grad_to_loops():
    result = run("xdsl-opt", BCE_EXAMPLE, "-p", "convert-train-to-loops")
    assert result.returncode == 0, result.stderr
    assert "scf.for" in result.stdout
    assert re.findall(r"(?<!\")train\.\w+", result.stdout) == ["train.source_op"]


def test_xdsl_opt_runs_the_verifier(tmp_path):
    result = subprocess.run(
        [str(BIN / "xdsl-opt"), str(write(tmp_path, bce(m="15")))],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode != 0
    assert "operand 'input_y' must have shape (16,)" in result.stderr


def test_machine_code_for_instructions_the_host_lacks_is_a_diagnostic():
    """--stage run compiles for --cpu: llvmlite's refusal (JitError, imported only by a run) is
    a diagnostic naming the file, not an internal error; where the host has the instructions,
    the kernel runs."""
    import llvmlite.binding as llvm

    avx512bf16 = ROOT / "tests" / "lit" / "Inputs" / "avx512bf16.toml"
    result = run("npugrad-opt", ROOT / "examples" / "flce_grad.mlir", "--stage", "run", "--cpu", avx512bf16)
    if llvm.get_host_cpu_features().get("avx512bf16"):
        assert result.returncode == 0 and " ok" in result.stdout, result.stderr
    else:
        assert result.returncode == 1
        assert result.stderr.startswith(f"{ROOT / 'examples' / 'flce_grad.mlir'}: error: the module uses avx512bf16")
        assert "internal error" not in result.stderr


def test_run_compiles_only_what_the_entry_reaches():
    """--stage run --entry f compiles f and what it calls (declarations stay), not the module's
    other functions: runner.keep_entry, on the module the runner lowers."""
    from npugrad.compiler import parse
    from npugrad.ir import defined_functions
    from npugrad.tools.run import keep_entry

    module = parse("""
func.func @helper(%x: memref<4xf32>) {
  func.return
}
func.func @entry(%x: memref<4xf32>) {
  func.call @helper(%x) : (memref<4xf32>) -> ()
  func.call @declared(%x) : (memref<4xf32>) -> ()
  func.return
}
func.func @other(%x: memref<4xf32>) {
  func.call @helper(%x) : (memref<4xf32>) -> ()
  func.return
}
func.func private @declared(memref<4xf32>)
""", "entries.mlir")
    keep_entry(module, "entry")
    assert sorted(f.sym_name.data for f in defined_functions(module)) == ["entry", "helper"]
    assert "func.func private @declared" in str(module)
    module.verify()


_SOURCED = ('func.func @f(%x: memref<8xf32>, %y: memref<8xf32>, %d: memref<1xf32>, %dx: memref<8xf32>) attributes '
            '{{train.source = #train.source<"train.binary_cross_entropy_grad", {{reduction = 1 : i64}}, {{{roles}}}>}} {{\n'
            '  func.return\n}}\n')


@pytest.mark.parametrize("roles, words", [
    ("input_x = 0 : i64", "gives no argument for operand(s) 'input_y', 'dloss', 'dx'"),
    ("input_x = 0, input_y = 1, dloss = 2, dx = 3, input_z = 1 : i64", "names operand(s) 'input_z' the op does not have"),
    ("input_x = 0, input_y = 1, dloss = 2, dx = 9 : i64", "argument position(s) {'dx': 9} past the function's 4 arguments"),
])
def test_run_a_malformed_train_source_is_a_located_error(tmp_path, roles, words):
    """`--stage run` reads the op a function computes from its #train.source: a role naming no
    operand, a missing one or a position past the arguments was an internal error (KeyError,
    IndexError) with exit 2 (found by a probe)."""
    path = write(tmp_path, _SOURCED.format(roles=roles))
    result = run("npugrad-opt", path, "--stage", "run")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert f"{path}:1:1: error: @f: train.source<\"train.binary_cross_entropy_grad\">" in result.stderr
    assert words in result.stderr, result.stderr


def test_help_lists_a_pass_option_without_a_help_entry(monkeypatch):
    """extending.md's pass with an option (`factor`) registered by its one _PASSES line made
    --help an internal error (KeyError: 'factor'); the option is listed with a pointer instead."""
    from npugrad.passes import OPTION_HELP
    from npugrad.tools import opt

    name = next(iter(OPTION_HELP))
    monkeypatch.delitem(OPTION_HELP, name)
    assert f"{name}=" in opt._passes_help() and "no entry in npugrad/passes/__init__.py" in opt._passes_help()
