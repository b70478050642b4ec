"""`#llvm.loop_annotation<unroll = <...>>` (dialect/upstream.py): npugrad's IR prints, parses
back and hands upstream MLIR the attribute it reads, LLVM gets the `!llvm.loop` metadata it
means, and a malformed one is a located error."""

from __future__ import annotations

import pytest

from npugrad.compiler import CompileError, Pipeline, parse
from npugrad.dialect.upstream import LoopAnnotationAttr

LOOP = """func.func @f(%a: memref<?xf32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 {{
    memref.store %z, %a[%i] : memref<?xf32>
  }} {{loop_annotation = {annotation}}}
  func.return
}}
"""


@pytest.mark.parametrize("annotation, metadata", [
    ("#llvm.loop_annotation<unroll = <disable = true>>", ['!{!"llvm.loop.unroll.disable"}']),
    ("#llvm.loop_annotation<unroll = <count = 4 : i32>>", ['!{!"llvm.loop.unroll.count", i32 4}']),
    ("#llvm.loop_annotation<unroll = <disable = false, count = 2 : i32>>",
     ['!{!"llvm.loop.unroll.enable"}', '!{!"llvm.loop.unroll.count", i32 2}']),
])
def test_prints_parses_back_and_reaches_llvm(annotation, metadata):
    module = parse(LOOP.format(annotation=annotation))
    assert annotation in str(module)
    assert str(parse(str(module))) == str(module)
    llvm_ir = Pipeline(fuse=False).lower(module, "llvm-ir")
    assert "!llvm.loop !" in llvm_ir
    for line in metadata:
        assert line in llvm_ir, llvm_ir[-400:]


def test_built_in_python_prints_as_upstream_spells_it():
    assert str(LoopAnnotationAttr(disable=True)) == "#llvm.loop_annotation<unroll = <disable = true>>"
    assert str(LoopAnnotationAttr(count=8)) == "#llvm.loop_annotation<unroll = <count = 8 : i32>>"


# What does not parse is reported at the attribute (line 7); what parses but is not valid, at
# the loop carrying it (line 5).
@pytest.mark.parametrize("annotation, message, line", [
    ("#llvm.loop_annotation<unroll = <full = true>>", "takes 'disable' and 'count' once each, got 'full'", 7),
    ("#llvm.loop_annotation<unroll = <disable = true, disable = false>>", "once each, got 'disable'", 7),
    ("#llvm.loop_annotation<vectorize = <disable = true>>", "unroll", 7),
    ("#llvm.loop_annotation<unroll = <count = 4 : f32>>", "unroll count is an i32, got f32", 7),
    ("#llvm.loop_annotation<unroll = <count = 0 : i32>>", "'scf.for' op .* unroll count must be positive, got 0", 5),
    ("#llvm.loop_annotation<unroll = <>>", "'scf.for' op .* needs 'disable' or 'count'", 5),
])
def test_malformed_is_a_located_error(annotation, message, line):
    with pytest.raises(CompileError, match=message) as error:
        parse(LOOP.format(annotation=annotation), "loop.mlir")
    assert f"loop.mlir:{line}:" in str(error.value)
