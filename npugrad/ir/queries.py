"""Questions passes ask of the IR: which functions have a body, where an op's function is, what a
memref type says about its layout and shape, which values are integer constants."""

from __future__ import annotations

from xdsl.dialects import arith, func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, MemRefType, ModuleOp, NoneAttr, StridedLayoutAttr
from xdsl.ir import Operation, SSAValue


def unit_innermost_stride(t: MemRefType) -> bool:
    """The innermost dimension is contiguous (identity layout, or a strided one whose last stride is 1)."""
    layout = t.layout
    return isinstance(layout, NoneAttr) or (isinstance(layout, StridedLayoutAttr) and layout.get_strides()[-1] == 1)


def integer_constant(value: SSAValue) -> int | None:
    """The value of an integer (or index) arith.constant, else None."""
    owner = value.owner
    if isinstance(owner, arith.ConstantOp) and isinstance(owner.value, IntegerAttr):
        return owner.value.value.data
    return None


def operand_dims(gen) -> list[list[int]]:
    """For each operand of a linalg.generic, the loop dimension each of its indices walks."""
    return [[r.position for r in m.data.results] for m in gen.indexing_maps.data]


def iterator_kinds(gen) -> list[str]:
    """A linalg.generic's iterator types by name ("parallel", "reduction")."""
    return [str(it.data) for it in gen.iterator_types.data]


def static_shape(t: MemRefType) -> tuple[int | None, ...]:
    """The sizes of a memref type, None where dynamic."""
    return tuple(None if d == DYNAMIC_INDEX else d for d in t.get_shape())


def defined_functions(module: ModuleOp) -> list[func.FuncOp]:
    """The functions of `module` that have a body."""
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and not op.is_declaration]


def enclosing_function(op: Operation) -> func.FuncOp:
    """The function `op` is (nested) in."""
    parent = op.parent_op()
    while parent is not None and not isinstance(parent, func.FuncOp):
        parent = parent.parent_op()
    if parent is None:
        raise ValueError(f"'{op.name}' is not inside a function")
    return parent
