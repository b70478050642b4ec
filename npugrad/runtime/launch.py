"""Validate NumPy arrays against an op's rules, then run the op's specialised kernel on them.

This is the path every API call takes: the same metadata rules as the dialect's verifier (on the
concrete shapes), then value checks done by the caller, then a cached kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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
    values = tuple(props.values())
    key = (op_cls, tuple([(k, v.shape, v.dtype) for k, v in arrays.items() if v is not None]),
           tuple(props), values, tuple(map(type, values)), tuple(display.items()) if display else None)
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
    value_check: Callable[[Mapping[str, np.ndarray | None]], None] | None = None  # called with `arrays`
    static_shapes: bool = False
    fresh: Mapping[str, object] | None = None  # the outputs the call allocated: name -> its Planned
    # False: the plan made an operand that the value check fills from an argument's data on every
    # run (the embedding's indices converted to the kernel's integer type), so a call of the same
    # signature is planned anew, not replayed with this call's operand and check.
    replayable: bool = True
    kernel: Kernel = field(init=False)

    def __post_init__(self) -> None:
        self._ordered, self._kernel_and_layout = _specialised(self.op_cls, self.arrays, self.props, self.static_shapes)
        self.kernel = self._kernel_and_layout[0]

    def run(self):
        if self.value_check is not None:
            self.value_check(self.arrays)
        self.kernel.run(self._kernel_and_layout[1], self._ordered)
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
    present = list(map(arrays.get, _operand_names(op_cls)))
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


def two_phase(plan: Callable[..., Call] | None = None, *, replay: bool = False,
              per_call: Callable[..., Mapping[str, np.ndarray]] | None = None) -> Callable:
    """Turn `plan(...) -> Call` into the API function that runs it at once; `f.plan` stays
    available for the two-phase form. Both take PyTorch tensors (anything with `__dlpack__`) as
    well as NumPy arrays, without a copy, and return what they were given (interop/dlpack.py).

    `replay`: the plan reads nothing but its arguments' signature (types, dtypes, shapes,
    strides, scalar values) apart from its `value_check`, and makes no array of an argument's
    data (a copy would be replayed stale), so a call whose arguments have a signature met
    before replays what the plan made of it (Replay) instead of planning again.
    `per_call(**values)`: operands the plan derives from the arguments it names (their values
    stay out of the signature: e.g. a step count), made again on every call with the same
    checks; it raises, as the plan would, on a bad value, or returns None for the call to be
    planned anew (a value the op's own check rejects: its error is then the plan's)."""
    if plan is None:
        return functools.partial(two_phase, replay=replay, per_call=per_call)
    planned = accepting_foreign_arrays(plan)
    if not replay:
        @functools.wraps(planned)
        def run_now(*args, **kwargs):
            return planned(*args, **kwargs).run()

        run_now.plan = planned  # type: ignore[attr-defined]
        return run_now

    replays = _Replays(plan, per_call)

    @functools.wraps(planned)
    def run_replayed(*args, **kwargs):
        key = replays.key(args, kwargs)
        if key is not None:
            found = _REPLAYS.get(key)
            if found is not None:
                call = found.call(args, kwargs, replays)
                if call is not None:
                    return call.run()
        call = planned(*args, **kwargs)
        if key is not None:
            replays.remember(key, call, args, kwargs)
        return call.run()

    run_replayed.plan = planned  # type: ignore[attr-defined]
    return run_replayed


# ---- replay: what a plan made of a signature, made again for new arrays ----------------------
#
# A cached call's Python costs more than its kernel on small inputs: the scalar checks, the
# metadata rules' memo, the overlap test, the kernel's memo each read every array's metadata
# again (36-60 µs for the FLCE's nine arrays on a Zen 3, against a 3 µs kernel). A plan whose
# result follows from its arguments' signature alone is run once per signature; a later call
# of that signature reads each argument's metadata once (the key), then does only what reads
# more than metadata: each array's alignment and an output's writeability (flags), the overlap
# test (addresses), fresh outputs, per_call operands and the value check. Where any of those
# fails the call is planned as if it were new, so errors are the plan's own, word for word.

_PLAIN_SCALARS = frozenset({int, float, bool, str, type(None)})
_ARG, _KWARG, _FRESH, _CONST, _PER_CALL = range(5)


class _Replays:
    """The signature of an op's arguments, and what its plan made of them (Replay)."""

    def __init__(self, plan: Callable, per_call: Callable | None):
        import inspect

        params = list(inspect.signature(plan).parameters.values())
        self.positions = len([p for p in params if p.kind == p.POSITIONAL_OR_KEYWORD])
        self.per_call = per_call
        names = tuple(inspect.signature(per_call).parameters) if per_call is not None else ()
        index = {p.name: i for i, p in enumerate(params)}
        defaults = {p.name: p.default for p in params}
        # Each per_call parameter: where a call may pass it, and its default.
        self.varying = tuple((n, index[n] if index[n] < self.positions else None, defaults[n]) for n in names)
        self.varying_positions = frozenset(i for _, i, _ in self.varying if i is not None)
        self.varying_names = frozenset(names)

    def key(self, args: tuple, kwargs: dict) -> tuple | None:
        """The arguments' signature, or None when one is not a plain ndarray or scalar (or a
        pipeline of the caller's is in force: it may change between calls)."""
        if _PIPELINE.get() is not None or len(args) > self.positions:
            return None
        key = [self, pool.threads()]
        for i, a in enumerate(args):
            t = type(a)
            if t is np.ndarray:
                if i in self.varying_positions:  # per_call's arrays are plain scalars
                    return None
                key.append((a.dtype, a.shape, a.strides))
            elif t in _PLAIN_SCALARS:
                key.append((t,) if i in self.varying_positions else (t, a))
            else:
                return None
        for k, a in kwargs.items():
            t = type(a)
            if t is np.ndarray:
                if k in self.varying_names:
                    return None
                key.append((k, a.dtype, a.shape, a.strides))
            elif t in _PLAIN_SCALARS:
                key.append((k, t) if k in self.varying_names else (k, t, a))
            else:
                return None
        return tuple(key)

    def values(self, args: tuple, kwargs: dict) -> dict:
        """per_call's arguments, as the call gave them (or their defaults)."""
        return {n: (args[i] if i is not None and i < len(args) else kwargs.get(n, default))
                for n, i, default in self.varying}

    def remember(self, key: tuple, call: Call, args: tuple, kwargs: dict) -> None:
        """Keep the call's Replay under `key`, in a table bounded as _SPECIALISED is."""
        found = Replay.of(call, args, kwargs, self)
        if found is not None:
            if len(_REPLAYS) >= _SPECIALISED_MAX:
                _REPLAYS.clear()
            _REPLAYS[key] = found


_REPLAYS: dict[tuple, Replay] = {}


@dataclass(frozen=True)
class Replay:
    """What a plan made of one signature: the Call's class, op, properties, kernel and layout
    and value check, and where each operand comes from: an argument (by position or name), a
    fresh output (its Planned), an array the plan made from the signature's scalars alone (kept:
    the kernel only reads it), or per_call."""

    cls: type[Call]
    op_cls: type[TrainOp]
    props: Mapping
    static_shapes: bool
    kernel_and_layout: tuple[Kernel, Layout]
    value_check: Callable | None
    sources: tuple[tuple[str, int, object], ...]  # (operand, kind, position / name / Planned / array)
    order: tuple[str, ...]  # the present operands, in the kernel's argument order
    given_outputs: tuple[str, ...]  # outputs that are the caller's arrays
    made: tuple[str, ...]  # operands the call makes (not the caller's): no overlap test
    result: object  # None, an operand's name, or (make, names): a tuple of operands and Nones

    @staticmethod
    def of(call: Call, args: tuple, kwargs: dict, replays: _Replays) -> Replay | None:
        """The call's Replay, or None where its operands or result cannot be told apart by
        where they come from (e.g. one array passed twice, a view the plan made of one)."""
        if not call.replayable:
            return None
        given = {}
        for i, a in enumerate(args):
            if type(a) is np.ndarray:
                given.setdefault(id(a), []).append((_ARG, i))
        for k, a in kwargs.items():
            if type(a) is np.ndarray:
                given.setdefault(id(a), []).append((_KWARG, k))
        if any(len(v) > 1 for v in given.values()):
            return None
        # A 0-d array the plan did not take as an operand was read as a scalar parameter
        # (ops/common.real and integer take them): its value shaped the properties, the
        # outputs' shapes and the value check, but the key holds only its dtype and shape.
        operands = {id(a) for a in call.arrays.values() if a is not None}
        for a in (*args, *kwargs.values()):
            if type(a) is np.ndarray and a.ndim == 0 and id(a) not in operands:
                return None
        per_call = set()
        if replays.per_call is not None:
            per_call = set(replays.per_call(**replays.values(args, kwargs)))
        fresh = call.fresh or {}
        sources = []
        for name, a in call.arrays.items():
            if a is None:
                sources.append((name, _CONST, None))
            elif name in per_call:
                sources.append((name, _PER_CALL, None))
            elif name in fresh:
                sources.append((name, _FRESH, fresh[name]))
            elif id(a) in given:
                kind, where = given[id(a)][0]
                sources.append((name, kind, where))
            elif type(a) is np.ndarray and a.base is None and a.flags.owndata and name not in call.op_cls.outputs():
                kept = a.copy()
                kept.flags.writeable = False
                sources.append((name, _CONST, kept))
            else:
                return None
        result = _result_source(call.result, {id(a): n for n, a in call.arrays.items() if a is not None})
        if result is _UNKNOWN:
            return None
        outputs = call.op_cls.outputs()
        kinds = {name: kind for name, kind, _ in sources}
        return Replay(type(call), call.op_cls, call.props, call.static_shapes, call._kernel_and_layout,
                      call.value_check, tuple(sources),
                      tuple(n for n in _operand_names(call.op_cls) if call.arrays.get(n) is not None),
                      tuple(n for n in outputs if kinds.get(n) in (_ARG, _KWARG)),
                      tuple(n for n, k in kinds.items() if k not in (_ARG, _KWARG)),
                      result)

    def call(self, args: tuple, kwargs: dict, replays: _Replays) -> Call | None:
        """The Call for these arguments (of this signature), or None: plan it anew."""
        arrays = {}
        for name, kind, where in self.sources:
            if kind == _ARG:
                a = args[where]  # type: ignore[index]
            elif kind == _KWARG:
                a = kwargs[where]  # type: ignore[index]
            elif kind == _CONST:
                arrays[name] = where
                continue
            else:
                continue  # made below, once every check that needs no allocation passed
            if not a.flags.aligned:
                return None
            arrays[name] = a
        for name in self.given_outputs:
            if not arrays[name].flags.writeable:
                return None
        if self.given_outputs and not owned_and_distinct(arrays, self.given_outputs, self.made):
            return None
        if replays.per_call is not None:
            made = replays.per_call(**replays.values(args, kwargs))
            if made is None:
                return None
            arrays.update(made)
        for name, kind, where in self.sources:
            if kind == _FRESH:
                try:
                    arrays[name] = where.new()  # type: ignore[union-attr]
                except MemoryError:  # planned anew: the plan's error names the op and the output
                    return None
        call = object.__new__(self.cls)
        call.op_cls, call.arrays, call.props, call.value_check = self.op_cls, arrays, self.props, self.value_check
        call.static_shapes, call.fresh = self.static_shapes, None
        call._ordered = [arrays[n] for n in self.order]
        call._kernel_and_layout = self.kernel_and_layout
        call.kernel = self.kernel_and_layout[0]
        call.result = self._result(arrays)
        return call

    def _result(self, arrays: Mapping[str, np.ndarray]) -> object:
        """The API's result for these operands (see _result_source)."""
        r = self.result
        if r is None:
            return None
        if type(r) is str:
            return arrays[r]
        make, names = r
        return make([None if n is None else arrays[n] for n in names])


_UNKNOWN = object()


def _result_source(result: object, by_id: Mapping[int, str]) -> object:
    """Where a plan's result comes from: None, an operand's name, or (make, names) for a tuple
    (a NamedTuple too: make is its _make) of operands and Nones; _UNKNOWN for anything else."""
    if result is None:
        return None
    if type(result) is np.ndarray:
        return by_id.get(id(result), _UNKNOWN)
    make = tuple if type(result) is tuple else getattr(type(result), "_make", None)
    if not isinstance(result, tuple) or make is None:
        return _UNKNOWN
    names = tuple(None if r is None else by_id.get(id(r), _UNKNOWN) for r in result)
    return _UNKNOWN if _UNKNOWN in names else (make, names)


def owned_and_distinct(arrays: Mapping[str, object], outputs: Sequence[str], skip: Iterable[str] = ()) -> bool:
    """Whether no output can share memory with an array argument, settled without addresses:
    the array arguments (but those in `skip`) are distinct arrays that each own their memory,
    and each output is C-contiguous (so no two of its elements meet). False: look closer."""
    others = [a for k, a in arrays.items() if isinstance(a, np.ndarray) and k not in skip]
    for a in others:
        if a.base is not None or not a.flags.owndata:
            return False
    for out in outputs:
        if not arrays[out].flags.c_contiguous:
            return False
    return len(set(map(id, others))) == len(others)
