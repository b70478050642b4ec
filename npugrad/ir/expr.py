"""Float32 formulas written as formulas: a `Float` wraps an SSA value, and its operators emit
`arith`/`math` ops through an IRBuilder, in Python's evaluation order.

    m = beta1 * Float(e, m_old) + (1 - beta1) * g    # mulf, subf, mulf, addf: as the nested calls
    e.store_f32(m.value, op.m, ivs)

Lowerings that must match a float32 reference bit for bit transcribe its operation order this
way, visibly. Numbers are float32 constants (hoisted by the builder); SSA values are used as
they are. Nothing is folded or reassociated.
"""

from __future__ import annotations

from xdsl.dialects import arith, math
from xdsl.ir import SSAValue

from npugrad.ir.builder import IRBuilder


class Float:
    __slots__ = ("b", "value")

    def __init__(self, b: IRBuilder, value: SSAValue):
        self.b = b
        self.value = value

    def _operand(self, other: Float | SSAValue | float) -> SSAValue:
        if isinstance(other, Float):
            return other.value
        if isinstance(other, SSAValue):
            return other
        return self.b.f32(float(other))

    def _emit(self, op) -> Float:
        return Float(self.b, self.b.emit(op))

    def __add__(self, other) -> Float:
        return self._emit(arith.AddfOp(self.value, self._operand(other)))

    def __radd__(self, other) -> Float:
        return self._emit(arith.AddfOp(self._operand(other), self.value))

    def __sub__(self, other) -> Float:
        return self._emit(arith.SubfOp(self.value, self._operand(other)))

    def __rsub__(self, other) -> Float:
        return self._emit(arith.SubfOp(self._operand(other), self.value))

    def __mul__(self, other) -> Float:
        return self._emit(arith.MulfOp(self.value, self._operand(other)))

    def __rmul__(self, other) -> Float:
        return self._emit(arith.MulfOp(self._operand(other), self.value))

    def __truediv__(self, other) -> Float:
        return self._emit(arith.DivfOp(self.value, self._operand(other)))

    def __rtruediv__(self, other) -> Float:
        return self._emit(arith.DivfOp(self._operand(other), self.value))

    def __neg__(self) -> Float:
        return self._emit(arith.NegfOp(self.value))

    def maximum(self, other) -> Float:
        """IEEE maximum (a NaN operand gives NaN), as numpy.maximum."""
        return self._emit(arith.MaximumfOp(self.value, self._operand(other)))

    def exp(self) -> Float:
        return self._emit(math.ExpOp(self.value))

    def sqrt(self) -> Float:
        return self._emit(math.SqrtOp(self.value))

    def log(self) -> Float:
        return self._emit(math.LogOp(self.value))

    def tanh(self) -> Float:
        return self._emit(math.TanhOp(self.value))

    def pow(self, other) -> Float:
        return self._emit(math.PowFOp(self.value, self._operand(other)))
