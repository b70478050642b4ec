"""The metadata rules of the spec, written once against a signature of shapes, dtypes and
properties. The dialect's verifiers run them on memref types (dynamic dimensions unknown); the
runtime runs the same rules on the concrete arrays before launching a kernel.

Every message names the op and the operand (or property) at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Dim = int | None  # None: dynamic, not known until run time

FLOATS = ("float32", "float16", "bfloat16")

# The NumPy name (as users know it) of each MLIR element type npugrad has kernels for: the
# names alone, so that the dialects' verifiers need not import NumPy and ml_dtypes (an
# npugrad-opt that only parses and prints loads neither); npugrad/dtypes.py maps the dtypes
# themselves (tests/test_architecture.py checks the two agree).
ELEMENT_NAMES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16", "i1": "bool", "ui8": "uint8",
                 "i32": "int32", "i64": "int64"}


def element_name(element_type: object) -> str:
    """The NumPy name of an MLIR element type ('float32', 'bfloat16', 'uint8'...), else its MLIR
    spelling."""
    key = str(element_type)
    return ELEMENT_NAMES.get(key, key)


class SignatureError(ValueError):
    """A shape, rank or attribute that the spec rejects."""


class SignatureTypeError(TypeError):
    """A dtype that the spec rejects."""


def fmt_shape(dims: Sequence[Dim]) -> str:
    inner = ", ".join("?" if d is None else str(d) for d in dims)
    return f"({inner},)" if len(dims) == 1 else f"({inner})"


def static_product(dims: Sequence[Dim]) -> int | None:
    """The number of elements, or None when a dimension is dynamic."""
    n = 1
    for d in dims:
        if d is None:
            return None
        n *= d
    return n


class Checker:
    """Checks one op's signature. `shapes`/`dtypes` hold only the operands that are present."""

    def __init__(
        self,
        prefix: str,
        word: str,
        shapes: Mapping[str, Sequence[Dim]],
        dtypes: Mapping[str, str],
        props: Mapping[str, int | float | bool],
        display: Mapping[str, str] | None = None,
    ):
        self.prefix = prefix  # "'train.op' op" or "op_name:"
        self.word = word  # "operand" or "parameter"
        self.shapes = {k: tuple(v) for k, v in shapes.items()}
        self.dtypes = dict(dtypes)
        self.props = dict(props)
        self.display = dict(display or {})  # operand name -> name the caller knows it by

    def fail(self, message: str, error: type[Exception] = SignatureError) -> None:
        raise error(f"{self.prefix} {message}")

    def operand_fail(self, name: str, message: str, error: type[Exception] = SignatureError) -> None:
        self.fail(f"{self.word} '{self.display.get(name, name)}' {message}", error)

    def present(self, name: str) -> bool:
        return name in self.shapes

    def dims(self, name: str) -> tuple[Dim, ...]:
        return self.shapes[name]

    def dtype(self, name: str) -> str:
        return self.dtypes[name]

    def prop(self, name: str):
        return self.props[name]

    def prop_or(self, name: str, default=None):
        """An optional property's value, or `default` when it is absent."""
        return self.props.get(name, default)

    def rank(self, name: str, allowed: Iterable[int]) -> int:
        allowed = list(allowed)
        r = len(self.dims(name))
        if r not in allowed:
            want = " or ".join(map(str, allowed)) if len(allowed) <= 3 else f"{allowed[0]} to {allowed[-1]}"
            self.operand_fail(name, f"must have rank {want}, got rank {r} {fmt_shape(self.dims(name))}")
        return r

    def element(self, name: str, allowed: Sequence[str]) -> str:
        t = self.dtype(name)
        if t not in allowed:
            want = ", ".join(allowed[:-1]) + " or " + allowed[-1] if len(allowed) > 1 else allowed[0]
            self.operand_fail(name, f"must have dtype {want}, got {t}", SignatureTypeError)
        return t

    def same_element(self, name: str, other: str) -> None:
        if self.dtype(name) != self.dtype(other):
            self.operand_fail(
                name, f"must have the dtype of '{other}' ({self.dtype(other)}), got {self.dtype(name)}", SignatureTypeError
            )

    def dim_is(self, name: str, axis: int, expected: Dim, what: str) -> None:
        got = self.dims(name)[axis]
        if got is not None and expected is not None and got != expected:
            self.operand_fail(name, f"must have {what} = {expected} in dimension {axis}, got shape {fmt_shape(self.dims(name))}")

    def shape_is(self, name: str, expected: Sequence[Dim], what: str) -> None:
        got = self.dims(name)
        if len(got) != len(expected) or any(g is not None and e is not None and g != e for g, e in zip(got, expected)):
            if what.startswith("("):  # a formula, perhaps qualified: "(N,) for reduction none"
                depth, end = 0, len(what)
                for i, ch in enumerate(what):  # the formula ends at its balancing parenthesis
                    depth += {"(": 1, ")": -1}.get(ch, 0)
                    if depth == 0:
                        end = i + 1
                        break
                want = f"{what[:end]} = {fmt_shape(expected)}{what[end:]}"
            else:
                want = f"{fmt_shape(expected)} ({what})"
            self.operand_fail(name, f"must have shape {want}, got {fmt_shape(got)}")

    def one_element(self, name: str, what: str = "exactly one element") -> None:
        dims = self.dims(name)
        if any(d is not None and d != 1 for d in dims):
            self.operand_fail(name, f"must have {what}, got shape {fmt_shape(dims)}")

    def prop_check(self, name: str, ok: bool, meaning: str) -> None:
        if not ok:
            self.fail(f"property '{name}' must be {meaning}, got {self.props[name]}")
