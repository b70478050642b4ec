"""The structure that makes npugrad extensible: one recipe per op, checked when it loads; typed
contracts between passes; a test per pass; the import graph the folders promise."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Dialect
from xdsl.irdl import IRDLOperation
from xdsl.traits import MemoryEffectKind, get_effects

from npugrad.compiler import CompileError, Pipeline, parse
from npugrad.dialect import DISCARDABLE, OPS, TrainOp
from npugrad.dialect.train import input_def, output_def, train_op
from npugrad.lowering.train_to_loops import ConvertTrainToLoopsPass
from npugrad.passes import ALL_PASSES
from npugrad.passes.tiling.elementwise import tile_op
from npugrad.recipes import PARTS, OpRecipe, RecipeError, check_complete, not_supported, recipe_of, recipes
from npugrad.runtime.specialize import OperandClass, build_module

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "npugrad"
BIN = Path(sys.executable).parent


# -- one recipe per op ------------------------------------------------------------------------


def test_every_op_of_the_dialect_has_a_complete_recipe():
    assert set(OPS) <= set(recipes())  # tests may add ops of their own (test_extending.py)
    for op in OPS:
        recipe = recipe_of(op)
        for part in PARTS:
            assert part in {k for cls in type(recipe).__mro__ if cls is not OpRecipe for k in vars(cls)}, (op.name, part)
        assert recipe is recipe_of(op.name) is recipe_of(op.short_name())


@train_op
class _HalfOp(TrainOp):
    """An op a contributor has just added, with only part of its recipe."""

    name = "train.half_registered"
    x = input_def()
    out = output_def()
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)


def test_a_half_registered_op_gets_an_error_naming_the_op_and_the_part():
    with pytest.raises(RecipeError) as info:

        class HalfRecipe(OpRecipe):
            op = _HalfOp

            def lower(self, op, e): ...

    message = str(info.value)
    print(message)
    assert "'train.half_registered'" in message and "'choose_tile_sizes'" in message
    assert "tests/test_architecture.py" in message
    assert "not_supported" in message


def test_an_op_without_a_recipe_is_named():
    with pytest.raises(RecipeError, match="'train.half_registered'.*no recipe"):
        check_complete(Dialect("train", [*OPS, _HalfOp]))


def test_a_recipe_must_name_its_op():
    with pytest.raises(RecipeError, match="must name its op class"):

        class Nameless(OpRecipe):
            pass


def test_a_part_declared_not_supported_says_why_and_its_pass_leaves_the_op():
    recipe = recipe_of("fused_linear_cross_entropy_loss_grad")
    assert not recipe.supports("distribute")
    assert "fused nest" in type(recipe).distribute.reason
    with pytest.raises(RecipeError, match="not supported"):
        recipe.distribute(None, None)
    assert not_supported("x") == not_supported("x")


def test_convert_grad_to_loops_rejects_a_grad_op_that_survives_it(monkeypatch):
    """A lowering that leaves a train op behind (here: one that emits a copy of its op instead of
    loops) is an error at that op's location, not a failure later in the upstream pipeline."""
    text = """func.func @f(%x: memref<8xf32>, %y: memref<8xf32>, %d: memref<1xf32>, %dx: memref<8xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<8xf32>) input_y(%y : memref<8xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<8xf32>)
  func.return
}
"""
    module = parse(text, "kernel.mlir")
    recipe = recipe_of("binary_cross_entropy_grad")
    monkeypatch.setattr(type(recipe), "lower", lambda self, op, e: e.emit(tile_op(op, {})))
    pipeline = Pipeline(vectorize=False, distribute=False, loops_passes=[ConvertTrainToLoopsPass()])
    with pytest.raises(CompileError) as info:
        pipeline.to_xdsl_stage(module, "loops")
    d = info.value.diagnostics[0]
    assert (d.file, d.line, d.column) == ("kernel.mlir", 2, 3)
    assert "convert-train-to-loops: 'train.binary_cross_entropy_grad' was not lowered to loops" in d.message


# -- typed contracts --------------------------------------------------------------------------


def _sources(folder: Path):
    for path in sorted(folder.rglob("*.py")):
        yield path, path.read_text()


def test_no_pass_uses_an_attribute_the_dialects_do_not_declare():
    """Every 'train.x' or 'npu.x' string in the code outside the dialects is an op name or a
    declared attribute's name; passes reach attributes only through the declarations."""
    op_names = {op.name for op in OPS} | {"train.half_registered"}
    from npugrad.dialect import Npu

    op_names |= {op.name for op in Npu.operations}
    attr_names = {a.name for a in (*recipes(), *Npu.attributes)} | {"npu.mem", "npu.role"}
    strings = re.compile(r"""["']((?:grad|npu)\.[a-z_]+)["']""")
    for path, text in _sources(PACKAGE):
        if path.parent.name == "dialect":
            continue
        for name in strings.findall(text):
            assert name in op_names or name in DISCARDABLE or name in attr_names, f"{path}: '{name}'"
        assert ".attributes[" not in text or path.name in ("to_llvm.py", "fills.py"), (
            f"{path} indexes op.attributes by hand: use a declared Discardable"
        )


def test_no_code_recognises_ir_by_a_doc_string():
    for path, text in _sources(PACKAGE):
        assert ".doc.data" not in text and "doc.data" not in text, path


def test_undeclared_and_ill_typed_attributes_are_located_errors(tmp_path):
    cases = {
        "scf.for %i = %c0 to %c4 step %c1 {\n  } {train.nest_role = \"token_loop\"}": "unknown attribute 'train.nest_role'",
        "scf.for %i = %c0 to %c4 step %c1 {\n  } {train.tiles = 3 : i64}": "attribute 'train.tiles' must be train.tiles",
    }
    for body, message in cases.items():
        path = tmp_path / "a.mlir"
        path.write_text(f"func.func @f() {{\n  %c0 = arith.constant 0 : index\n  %c1 = arith.constant 1 : index\n"
                        f"  %c4 = arith.constant 4 : index\n  {body}\n  func.return\n}}\n")
        result = subprocess.run([BIN / "npugrad-opt", path], capture_output=True, text=True, check=False)
        assert result.returncode == 1
        assert f"{path}:5:3: error: 'scf.for' op {message}" in result.stderr, result.stderr


def test_contract_attributes_print_and_parse_back():
    text = """func.func @f() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c1 step %c1 {
  } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 64, v = 128, h = 32>>}
  scf.for %i = %c0 to %c1 step %c1 {
  } {train.role = #train.role<token_loop>, train.tiles = #train.tiles<n = 8>}
  %a = memref.alloc() {npu.promote = #npu.role<accumulator>} : memref<4xf32>
  func.return
}
"""
    once = str(parse(text))
    assert once == str(parse(once))
    for piece in ("#train.tiles<bt = 64, v = 128, h = 32>", "#train.role<token_loop>", "#npu.role<accumulator>"):
        assert piece in once


# -- typed operands, memory effects -----------------------------------------------------------


@pytest.mark.parametrize("op_cls", OPS, ids=lambda c: c.short_name())
def test_grad_ops_declare_what_they_read_and_write(op_cls):
    module = build_module(op_cls, {n: OperandClass("float32", (None,), False) for n in op_cls.operand_names()}, {})
    op = next(o for o in module.walk() if isinstance(o, op_cls))
    effects = get_effects(op)
    reads = {e.value for e in effects if e.kind == MemoryEffectKind.READ}
    writes = {e.value for e in effects if e.kind == MemoryEffectKind.WRITE}
    roles = op_cls.operand_roles()
    assert writes == {getattr(op, n) for n, r in roles.items() if r != "in" and getattr(op, n) is not None}
    assert reads == {getattr(op, n) for n, r in roles.items() if r != "out" and getattr(op, n) is not None}
    assert set(op_cls.inputs()) | set(op_cls.outputs()) == set(op_cls.operand_names())


def test_operand_lists_come_from_the_irdl_definitions():
    for op_cls in OPS:
        assert op_cls.operand_names() == tuple(name for name, _ in op_cls.get_irdl_definition().operands)
        assert not hasattr(op_cls, "INPUTS") and not hasattr(op_cls, "OUTPUTS")
    assert recipe_of("apply_fused_ema_adam").op.outputs() == ("var", "m", "v", "s")


# -- a test per pass --------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ALL_PASSES))
def test_every_registered_pass_has_a_lit_test_named_after_it(name):
    test = ROOT / "tests" / "lit" / "passes" / f"{name}.mlir"
    assert test.exists(), f"pass '{name}' has no tests/lit/passes/{name}.mlir"
    runs = [line for line in test.read_text().splitlines() if "RUN:" in line]
    assert any(re.search(rf"-p '?{re.escape(name)}\b", line) for line in runs), f"{test} has no RUN line with -p {name}"


# -- the import graph -------------------------------------------------------------------------


def _module_imports() -> dict[str, set[str]]:
    """npugrad module -> the npugrad modules it imports at module level (not inside functions)."""
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        deps: set[str] = set()
        tree = ast.parse(path.read_text())
        for node in tree.body:
            nodes = [node]
            if isinstance(node, ast.If):  # `if TYPE_CHECKING:` imports are for the type checker only
                continue
            for n in nodes:
                if isinstance(n, ast.ImportFrom) and n.module and n.module.startswith("npugrad"):
                    deps.add(n.module)
                    deps.update(f"{n.module}.{a.name}" for a in n.names)
                elif isinstance(n, ast.Import):
                    deps.update(a.name for a in n.names if a.name.startswith("npugrad"))
        graph[name] = deps
    modules = set(graph)
    return {m: {d for d in deps if d in modules and d != m} for m, deps in graph.items()}


def test_runtime_imports_nothing_from_passes():
    for module, deps in _module_imports().items():
        if module.startswith("npugrad.runtime"):
            assert not [d for d in deps if d.startswith("npugrad.passes")], (module, deps)


def test_no_import_cycles():
    graph = _module_imports()
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                cycle = path[path.index(d):] + [d] if d in path else [m, d]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if d not in state:
                visit(d, [*path, d])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [m])


def test_a_pass_is_a_rewrite_pattern_driver():
    """The passes that rewrite IR drive xDSL RewritePatterns with a PatternRewriteWalker."""
    rewriting = set(ALL_PASSES) - {"check-capacity"}  # it proves, it does not rewrite
    for name in rewriting:
        cls = ALL_PASSES[name]()
        source = Path(sys.modules[cls.__module__].__file__).read_text()
        assert "PatternRewriteWalker(" in source and "RewritePattern" in source, name


def test_module_helpers_are_functions_with_a_body():
    module = parse("func.func private @decl(%x: memref<4xf32>)\nfunc.func @f() {\n  func.return\n}\n")
    from npugrad.ir import defined_functions

    assert [f.sym_name.data for f in defined_functions(module)] == ["f"]
    assert isinstance(module, ModuleOp) and all(isinstance(f, func.FuncOp) for f in defined_functions(module))
    assert issubclass(_HalfOp, IRDLOperation)


# -- what a short-lived process imports -------------------------------------------------------


def _modules_after(*argv: str) -> set[str]:
    """The modules an `npugrad-opt` invocation (in-process main, in a fresh interpreter) imported."""
    code = ("import json, sys\nfrom npugrad.tools.opt import main\n"
            f"sys.argv = ['npugrad-opt', *{list(argv)!r}]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print('MODULES' + json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT).stdout
    return set(json.loads(out.split("MODULES", 1)[1]))


def test_printing_a_module_imports_no_pass_numpy_or_llvm():
    """Every lit RUN line is a fresh npugrad-opt: one that parses and prints (round trips,
    --verify-diagnostics) imports the dialects, not the passes, NumPy or llvmlite (printing
    examples/flce_grad.mlir took 0.76-0.82 s with them, 0.35-0.44 s without, on a Zen 3)."""
    loaded = _modules_after(str(ROOT / "examples" / "flce_grad.mlir"))
    assert "npugrad.dialect.train" in loaded  # it did parse and verify the train ops
    heavy = [m for m in loaded if m.startswith(("npugrad.passes.", "npugrad.lowering.train_to_loops", "npugrad.recipes",
                                                "numpy", "ml_dtypes", "llvmlite", "torch_mlir"))]
    assert not heavy, heavy


def test_a_pass_pipeline_imports_only_its_passes():
    loaded = _modules_after(str(ROOT / "examples" / "bce_grad.mlir"), "-p", "convert-train-to-loops")
    assert "npugrad.lowering.train_to_loops" in loaded
    # Passes the pipeline does not name, and that no module it uses imports for its helpers.
    others = {"npugrad.passes.tile_for_target", "npugrad.passes.check_capacity", "npugrad.passes.distribute_over_cores",
              "npugrad.passes.vectorize_elementwise", "npugrad.passes.choose_tile_sizes", "llvmlite", "torch_mlir"}
    assert not others & loaded, others & loaded


def test_the_dialects_name_element_types_as_numpy_does():
    """The verifiers' names of element types (dialect/checks.py, no NumPy import) are NumPy's."""
    from npugrad import dtypes
    from npugrad.dialect.checks import ELEMENT_NAMES

    assert {str(t): str(dt) for dt, t in dtypes._TO_MLIR.items()} == ELEMENT_NAMES
