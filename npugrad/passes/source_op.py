"""The train op a function computes, for whoever runs a stage where the op is gone: the passes
that replace the op (the fusions, tile-for-target, distribute-over-cores) write its identity on
the function (`train.source`, see SourceOpAttr), so that `npugrad-opt --stage run` on a saved
`fused` or `tiled` stage still generates inputs valid for the op and checks against its reference.

    func.func @f(%x, %y, %d, %dx) { train.binary_cross_entropy_grad input_x(%x) ... -> dx(%dx) }
    → func.func @f(%x, %y, %d, %dx) attributes {train.source = #train.source<
          "train.binary_cross_entropy_grad", {reduction = 1 : i64}, {input_x = 0 : i64, ..., dx = 3 : i64}>} {...}

Only a function whose body is that one op on the function's arguments is marked (the op then is
what the function computes). convert-train-to-loops writes the same as builtin attributes
(`train.source_op = {op = "train.<op>", properties = {...}, operands = {...}}`, which upstream MLIR
reads), for a function marked or whose body is one op, so that a saved `loops` or `vectorized`
stage runs against the reference too.
"""

from __future__ import annotations

from xdsl.dialects import func
from xdsl.dialects.builtin import FloatAttr, IntegerAttr
from xdsl.pattern_rewriter import PatternRewriter

from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import SOURCE, SOURCE_OP, SourceOpAttr
from npugrad.ir import enclosing_function


def single_train_op(f: func.FuncOp) -> tuple[TrainOp, dict[str, int]] | None:
    """The function's only train op, with operand name → argument position, if it has one whose
    operands are all arguments of the function."""
    ops = [op for op in f.walk() if isinstance(op, TrainOp)]
    if len(ops) != 1:
        return None
    op = ops[0]
    args = list(f.body.block.args)
    roles = {}
    for name in op.operand_names():
        value = getattr(op, name)
        if value is None:
            continue
        if value not in args:
            return None
        roles[name] = args.index(value)
    return op, roles


def record_source(op: TrainOp, rewriter: PatternRewriter) -> None:
    """Before a pass replaces `op`: mark its function with it, if the function computes just it."""
    try:
        f = enclosing_function(op)
    except ValueError:  # an op outside any function: nothing runs it
        return
    if SOURCE.on(f) or (found := single_train_op(f)) is None:
        return
    SOURCE.set(f, _source(*found))
    rewriter.notify_op_modified(f)


def record_lowered_source(f: func.FuncOp) -> None:
    """Before convert-train-to-loops: mark `f` with the op it computes (its train.source, or its
    one train op on its arguments) in builtin attributes (SOURCE_OP), which outlive the lowering."""
    source = SOURCE.get(f)
    if source is None and (found := single_train_op(f)) is not None:
        source = _source(*found)
    if source is not None:
        SOURCE_OP.set(f, source.as_builtin())


def _source(op: TrainOp, roles: dict[str, int]) -> SourceOpAttr:
    props = {k: v for k, v in op.properties.items() if isinstance(v, IntegerAttr | FloatAttr)}
    return SourceOpAttr(op.name, props, roles)
