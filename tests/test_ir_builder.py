"""The IR builder (npugrad/ir): what it hoists, where its contexts put ops, that it inserts
through the rewriter it is given, and that `Float` formulas emit their ops in the order written."""

from __future__ import annotations

from xdsl.dialects import arith, func, math, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    FileLineColLoc,
    IntAttr,
    MemRefType,
    ModuleOp,
    StringAttr,
    f32,
)
from xdsl.ir import Block, Region
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriterListener

from npugrad.compiler import verify
from npugrad.ir import IRBuilder, index
from npugrad.ir.expr import Float


def _function(*arg_types):
    """func.func @f(args) { <anchor: a return> }, the builder emitting before the return."""
    block = Block(arg_types=list(arg_types))
    ret = func.ReturnOp()
    ret.location = FileLineColLoc(StringAttr("k.mlir"), IntAttr(7), IntAttr(3))
    block.add_op(ret)
    f = func.FuncOp("f", (list(arg_types), []), Region(block))
    return ModuleOp([f]), block, ret


def _names(block: Block) -> list[str]:
    return [op.name for op in block.ops]


def test_constants_and_outer_sizes_are_hoisted_above_what_is_emitted_and_made_once():
    dyn = MemRefType(f32, [DYNAMIC_INDEX])
    module, block, ret = _function(dyn)
    e = IRBuilder.before(ret)
    x = block.args[0]
    with e.loop(e.dim(x, 0)) as i:
        v = e.load_f32(x, [i])
        e.store_f32(e.emit(arith.MulfOp(v, e.f32(2.0))), x, [i])
    assert e.f32(2.0) is e.f32(2.0) and e.idx(0) is e.idx(0)
    assert e.dim(x, 0) is e.dim(x, 0)
    # Hoisted: the constants (0, 1 and 2.0) and the memref.dim, all before the loop, which is last.
    names = _names(block)
    assert names[-2:] == ["scf.for", "func.return"]
    assert sorted(names[:-2]) == ["arith.constant"] * 3 + ["memref.dim"]
    loop = next(op for op in block.ops if isinstance(op, scf.ForOp))
    assert [op.name for op in loop.body.block.ops] == ["memref.load", "arith.mulf", "memref.store", "scf.yield"]
    verify(module)


def test_static_sizes_are_constants_and_fold_into_subviews():
    module, block, ret = _function(MemRefType(f32, [8, 16]))
    e = IRBuilder.before(ret)
    x = block.args[0]
    n = e.dim(x, 1)
    assert e.static_value(n) == 16
    view = e.subview(x, [e.idx(2), 0], [e.idx(4), n])
    assert view.type.get_shape() == (4, 16)
    verify(module)


def test_contexts_put_ops_inside_and_return_to_the_outer_point():
    module, block, ret = _function(MemRefType(f32, [4]))
    e = IRBuilder.before(ret)
    x = block.args[0]
    cond = e.emit(arith.CmpiOp(e.idx(0), e.idx(1), "slt"))
    with e.if_(cond):
        e.store(e.f32(1.0), x, [e.idx(0)])
    e.if_else(cond, lambda: e.store(e.f32(2.0), x, [e.idx(1)]), lambda: e.store(e.f32(3.0), x, [e.idx(2)]))
    e.store(e.f32(4.0), x, [e.idx(3)])
    ifs = [op for op in block.ops if isinstance(op, scf.IfOp)]
    assert len(ifs) == 2
    assert [op.name for op in ifs[0].true_region.block.ops] == ["memref.store", "scf.yield"]
    assert [op.name for op in ifs[1].false_region.block.ops] == ["memref.store", "scf.yield"]
    assert _names(block)[-2:] == ["memref.store", "func.return"]
    verify(module)


def test_a_carried_loop_yields_what_the_body_appends():
    module, block, ret = _function(MemRefType(f32, [5]))
    e = IRBuilder.before(ret)
    x = block.args[0]
    total = [e.f32(0.0)]
    with e.carried_loop(e.dim(x, 0), total) as (i, (partial,), updated):
        updated.append(e.emit(arith.AddfOp(partial, e.load_f32(x, [i]))))
    loop = total[0].owner
    assert isinstance(loop, scf.ForOp) and loop.results[0] is total[0]
    e.store(total[0], x, [e.idx(0)])
    verify(module)


def test_everything_emitted_is_located_at_the_anchor():
    module, block, ret = _function(MemRefType(f32, [4]))
    e = IRBuilder.before(ret)
    with e.loop(e.idx(4)) as i:
        e.store(e.f32(1.0), block.args[0], [i])
    for op in module.walk():
        if op.parent_op() is not None and not isinstance(op, func.FuncOp):
            assert op.location == ret.location, op.name


def test_it_inserts_through_the_rewriter_it_is_given():
    """In a pattern, the walker must see every op the builder creates (it keeps its worklist and
    knows the IR changed)."""
    module, block, ret = _function(MemRefType(f32, [4]))
    seen: list[str] = []
    rewriter = PatternRewriter(ret)
    rewriter.extend_from_listener(PatternRewriterListener(operation_insertion_handler=[lambda op: seen.append(op.name)]))
    e = IRBuilder(rewriter, ret)
    with e.loop(e.idx(4)) as i:
        e.store(e.f32(1.0), block.args[0], [i])
    assert rewriter.has_done_action
    assert sorted(seen) == sorted(op.name for op in module.walk() if op.parent_op() is not None
                                  and op.name not in ("func.func", "func.return"))
    e.erase(next(op for op in block.ops if isinstance(op, scf.ForOp)))
    assert "scf.for" not in _names(block)


def test_float_formulas_emit_in_python_order_with_shared_constants():
    module, block, ret = _function(MemRefType(f32, [1]))
    e = IRBuilder.before(ret)
    x = block.args[0]
    a = Float(e, e.load_f32(x, [e.idx(0)]))
    b = Float(e, e.load_f32(x, [e.idx(0)]))
    r = (1.0 - a) * b / (a + 2.0).maximum(b) - (-a).sqrt().exp()
    e.store(r.value, x, [e.idx(0)])
    body = [op for op in block.ops if op.name not in ("arith.constant", "memref.load", "memref.store", "func.return")]
    assert [op.name for op in body] == [
        "arith.subf", "arith.mulf", "arith.addf", "arith.maximumf", "arith.divf",
        "arith.negf", "math.sqrt", "math.exp", "arith.subf",
    ]
    first = body[0]
    assert isinstance(first, arith.SubfOp) and first.lhs is e.f32(1.0) and first.rhs is a.value
    assert isinstance(body[-2], math.ExpOp)
    assert sum(isinstance(op, arith.ConstantOp) for op in block.ops) == 3  # 0 (index), 1.0, 2.0
    verify(module)


def test_alloc_and_collapse():
    module, block, ret = _function(MemRefType(f32, [3, 4]), MemRefType(f32, [DYNAMIC_INDEX]))
    e = IRBuilder.before(ret)
    buf = e.alloc([e.idx(8), e.dim(block.args[1], 0)], f32)
    assert buf.type == MemRefType(f32, [8, DYNAMIC_INDEX])
    assert isinstance(buf.owner, memref.AllocOp)
    flat = e.collapse(block.args[0])
    assert flat.type.get_shape() == (12,)
    e.dealloc(buf)
    assert index == e.idx(0).type
    verify(module)
