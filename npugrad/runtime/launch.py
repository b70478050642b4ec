"""Validate NumPy arrays against an op's rules, then run the op's specialised kernel on them.

This is the path every API call takes: the same metadata rules as the dialect's verifier (on the
concrete shapes), then value checks done by the caller, then a cached kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from npugrad.compiler import Pipeline
from npugrad.dialect import TrainOp
from npugrad.dialect.checks import Checker, SignatureError, SignatureTypeError
from npugrad.interop.dlpack import accepting_foreign_arrays
from npugrad.runtime import pool
from npugrad.runtime.kernel import Kernel, Layout
from npugrad.runtime.specialize import OperandClass, compile_op, dtype_name

_PIPELINE: contextvars.ContextVar[Pipeline | None] = contextvars.ContextVar("npugrad_pipeline", default=None)


@contextlib.contextmanager
def using(pipeline: Pipeline) -> Iterator[Pipeline]:
    """Compile the API calls made inside the block with `pipeline` (e.g. Pipeline(fuse=False))."""
    token = _PIPELINE.set(pipeline)
    try:
        yield pipeline
    finally:
        _PIPELINE.reset(token)


def current_pipeline() -> Pipeline | None:
    return _PIPELINE.get()


@functools.cache
def _defaults(op_cls: type[TrainOp]) -> dict[str, int | float | bool]:
    values = {}
    for name, prop in op_cls.get_irdl_definition().properties.items():
        attr = prop.default_value
        if attr is None or name == "operandSegmentSizes":
            continue
        data = attr.value.data  # type: ignore[attr-defined]
        values[name] = data != 0 if getattr(attr.type, "width", None) is not None and attr.type.width.data == 1 else data  # type: ignore[attr-defined]
    return values


def defaults(op_cls: type[TrainOp]) -> dict[str, int | float | bool]:
    """The op's property defaults as Python values."""
    return dict(_defaults(op_cls))


def as_input(op: str, name: str, value) -> np.ndarray:
    """An input operand as an ndarray (lists and scalars are accepted; the dtype is kept). An
    array must be aligned: the kernels address elements (and stream 64-byte lines) assuming
    that the data and the strides are multiples of the element size."""
    if isinstance(value, np.ndarray):
        if not value.flags.aligned:
            raise SignatureError(
                f"{op}: parameter '{name}' is not aligned: its address and strides must be multiples of its "
                f"element size ({value.itemsize} bytes), got strides {value.strides}"
            )
        return value
    if isinstance(value, np.generic | int | float | bool | list | tuple):
        try:
            return np.asarray(value)
        except (ValueError, TypeError, OverflowError) as e:  # e.g. a ragged list
            raise SignatureTypeError(f"{op}: parameter '{name}' cannot be read as an array: {e}") from None
    raise SignatureTypeError(f"{op}: parameter '{name}' must be a numpy array, got {type(value).__name__}")


def check(
    op_cls: type[TrainOp],
    arrays: Mapping[str, np.ndarray | None],
    props: Mapping,
    display: Mapping[str, str] | None = None,
) -> dict:
    """Run the op's metadata rules on the arrays; return the full property values. `display`
    renames operands in messages to the API's parameter names (e.g. dx -> out).

    The rules see only shapes, dtypes and properties, so a signature that passed once passes
    again: it is remembered (a bounded table) and the rules are not run twice."""
    # Property values with their types: 1, 1.0 and True are equal keys but not the same input.
    key = (op_cls, tuple([(k, v.shape, v.dtype) for k, v in arrays.items() if v is not None]),
           tuple([(k, type(v), v) for k, v in props.items()]), tuple(display.items()) if display else None)
    full = _PASSED.get(key)
    if full is not None:
        return dict(full)
    present = {k: v for k, v in arrays.items() if v is not None}
    full = {**_defaults(op_cls), **props}
    checker = Checker(
        f"{op_cls.short_name()}:",
        "parameter",
        {k: v.shape for k, v in present.items()},
        {k: dtype_name(v.dtype) for k, v in present.items()},
        full,
        display,
    )
    op_cls.check(checker)
    if len(_PASSED) >= _PASSED_MAX:  # e.g. a learning-rate schedule: a new signature each step
        _PASSED.clear()
    _PASSED[key] = full
    return dict(full)


_PASSED: dict[tuple, dict] = {}
_PASSED_MAX = 4096


def launch(
    op_cls: type[TrainOp],
    arrays: Mapping[str, np.ndarray | None],
    props: Mapping[str, int | float | bool],
    *,
    static_shapes: bool = False,
    pipeline: Pipeline | None = None,
) -> None:
    """Run the op's kernel on arrays that passed `check`, without the value checks: what the
    generated code does on its own (tests use it to show the kernels' guards)."""
    with using(pipeline) if pipeline is not None else contextlib.nullcontext():
        call = Call(op_cls, arrays, props, None, static_shapes=static_shapes)
    call.bind()()


@dataclass
class Call:
    """A checked op call, not yet run: phase one of the vendor's two-phase API. The metadata
    rules have passed, the kernel is compiled and the arrays fit its arguments; `run` does the
    value checks (index ranges, which read the data) and launches. `result` is what the API
    function returns."""

    op_cls: type[TrainOp]
    arrays: Mapping[str, np.ndarray | None]
    props: Mapping[str, int | float | bool]
    result: object
    value_check: Callable[[], None] | None = None
    static_shapes: bool = False
    kernel: Kernel = field(init=False)

    def __post_init__(self) -> None:
        self._ordered, self._kernel_and_layout = _specialised(self.op_cls, self.arrays, self.props, self.static_shapes)
        self.kernel = self._kernel_and_layout[0]

    def run(self):
        if self.value_check is not None:
            self.value_check()
        kernel, layout = self._kernel_and_layout
        kernel.launch(kernel.descriptors(layout, self._ordered), layout.blocks)
        return self.result

    def bind(self) -> Callable[[], None]:
        """The kernel bound to this call's arrays, without the value checks: the machine code alone."""
        kernel, layout = self._kernel_and_layout
        return kernel.bind_layout(layout, self._ordered)


def _specialised(op_cls: type[TrainOp], arrays: Mapping[str, np.ndarray | None], props: Mapping,
                 static_shapes: bool) -> tuple[list[np.ndarray], tuple[Kernel, Layout]]:
    """The present arrays in operand order, the kernel compiled for them and their checked
    Layout. Both follow from the op, the properties, the pipeline, the thread count and each
    operand's dtype, shape and strides (C-contiguity is a function of those), so a signature
    met before skips the operand classes, the compile-cache key and the kernel's argument
    checks: they are remembered, by that signature, in a bounded table. The checks that read
    more than that (alignment, writeability, overlap: addresses) are the API's, on every call."""
    present = [arrays.get(n) for n in _operand_names(op_cls)]
    ordered = [a for a in present if a is not None]
    pipeline = current_pipeline()
    # Only plain ndarrays are remembered (a subclass may define its metadata differently): the
    # key holds each operand's type, so an array of another type never finds an entry; and not
    # under a pipeline of the caller's, which may change after a call.
    key = None
    if pipeline is None:
        key = (op_cls, static_shapes, pool.threads(), tuple(props.items()),
               *[None if a is None else (type(a), a.dtype, a.shape, a.strides) for a in present])
        found = _SPECIALISED.get(key)
        if found is not None:
            return ordered, found
        if not set(map(type, ordered)) <= _NDARRAY:
            key = None
    classes = {k: OperandClass.of(v, static_shapes) for k, v in arrays.items() if v is not None}
    kernel = compile_op(op_cls, classes, dict(props), pipeline)
    found = (kernel, kernel.layout(ordered))
    if key is not None:
        if len(_SPECIALISED) >= _SPECIALISED_MAX:
            _SPECIALISED.clear()
        _SPECIALISED[key] = found
    return ordered, found


_SPECIALISED: dict[tuple, tuple[Kernel, Layout]] = {}
_SPECIALISED_MAX = 4096
_operand_names = functools.cache(lambda op_cls: op_cls.operand_names())
_NDARRAY = frozenset({np.ndarray})


def two_phase(plan: Callable[..., Call]) -> Callable:
    """Turn `plan(...) -> Call` into the API function that runs it at once; `f.plan` stays
    available for the two-phase form. Both take PyTorch tensors (anything with `__dlpack__`) as
    well as NumPy arrays, without a copy, and return what they were given (interop/dlpack.py)."""
    plan = accepting_foreign_arrays(plan)

    @functools.wraps(plan)
    def run_now(*args, **kwargs):
        return plan(*args, **kwargs).run()

    run_now.plan = plan  # type: ignore[attr-defined]
    return run_now
