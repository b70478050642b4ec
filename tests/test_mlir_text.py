"""lowering/mlir_text.py: the generic form handed to upstream MLIR is the module xDSL's printer
prints: upstream MLIR parses the two texts into the same module, for every example op at the
vectorized stage (host, an AVX2 CPU, the NPU target) and for the constructs the examples lack
(blocks with successors, attribute names that need quotes, unit attributes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from npugrad.compiler import Pipeline, make_context, parse
from npugrad.lowering.mlir_bindings import ir
from npugrad.lowering.mlir_text import generic_text
from npugrad.lowering.to_llvm import _parse as upstream_parse

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.mlir") if "4096" not in p.name)
AVX2 = str(ROOT / "tests" / "lit" / "Inputs" / "avx2.toml")
CASES = [(p, {}) for p in EXAMPLES] + [
    (ROOT / "examples" / "flce_grad_fused.mlir", {"cpu": AVX2}),
    (ROOT / "examples" / "flce_grad.mlir", {"target": "npu-a2"}),
    (ROOT / "examples" / "embedding_dense_backward.mlir", {"target": "npu-a2"}),
    (ROOT / "examples" / "flce_forward.mlir", {"distribute": False}),
]


def _upstream(text: str) -> str:
    """The module as upstream MLIR parses and prints it (its own value and block names)."""
    with ir.Context() as ctx, ir.Location.unknown():
        return str(upstream_parse(ctx, text))


def _same_for_upstream(module) -> None:
    generic = generic_text(module)
    assert generic != str(module)  # not xDSL's text by another path
    assert _upstream(generic) == _upstream(str(module))


@pytest.mark.parametrize(("path", "options"), CASES,
                         ids=[f"{p.stem}-{'-'.join(f'{k}={Path(str(v)).stem}' for k, v in o.items()) or 'host'}"
                              for p, o in CASES])
def test_upstream_reads_the_vectorized_stage_as_xdsl_prints_it(path, options):
    ctx = make_context()
    module = parse(path.read_text(), str(path), ctx)
    Pipeline(verify_each=False, **options).to_xdsl_stage(module, "vectorized", ctx)
    _same_for_upstream(module)


def test_blocks_successors_and_attribute_names():
    text = """
    func.func @f(%a: i32, %c: i1) -> i32 {
      cf.cond_br %c, ^bb1(%a : i32), ^bb2
    ^bb1(%x: i32):
      %y = arith.addi %x, %x {"a name with spaces" = 3 : i64, flag} : i32
      func.return %y : i32
    ^bb2:
      %0, %1 = "test.two"() : () -> (i32, i64)
      func.return %0 : i32
    }
    func.func private @g(i32) -> ()
    """
    ctx = make_context()
    ctx.allow_unregistered = True
    module = parse(text, "blocks.mlir", ctx)
    generic = generic_text(module)
    assert '"a name with spaces" = 3 : i64, flag}' in generic
    assert '"cf.cond_br"(%1, %0) [^bb2, ^bb3]' in generic  # operands, then successors
    assert '%4, %5 = "test.two"() : () -> (i32, i64)' in generic
    with ir.Context() as mlir, ir.Location.unknown():
        mlir.allow_unregistered_dialects = True
        assert str(ir.Module.parse(generic)) == str(ir.Module.parse(str(module)))
