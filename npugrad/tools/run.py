"""Run one function of a module on random or `.npz` inputs and check it against the reference.

Used by `npugrad-opt --stage run`. When the function's body is a single `train` op whose operands
are the function's arguments (or was, before a pass replaced it: `train.source`, a resumed
`fused` or `tiled` stage), inputs are drawn from the op's valid domain (indices in range,
probabilities in (0, 1), ...), pure outputs start as NaN (so an element the kernel forgets to
write shows up), and every output is compared with the NumPy reference.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, SymbolRefAttr
from xdsl.ir import Operation
from xdsl.irdl import OptOperandDef
from xdsl.utils.exceptions import VerifyException

from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import SOURCE, SOURCE_OP, SourceOpAttr
from npugrad.dialect.checks import Checker
from npugrad.ir import defined_functions
from npugrad.ops.common import MEMORY_BYTES, human_bytes
from npugrad.passes.source_op import single_train_op
from npugrad.recipes import recipe_of
from npugrad.reference import harness
from npugrad.runtime.executable import Executable, signatures
from npugrad.runtime.kernel import MemRefSpec


class RunError(ValueError):
    """The module cannot be run as asked (no such function, dynamic shapes without inputs...);
    `op`, when known, is where the driver locates the error."""

    def __init__(self, message: str, op: Operation | None = None):
        super().__init__(message)
        self.op = op


@dataclass
class RunReport:
    lines: list[str]
    ok: bool
    outputs: dict[str, np.ndarray]

    def __str__(self) -> str:
        return "\n".join(self.lines)


def _entry(module: ModuleOp, name: str | None) -> func.FuncOp:
    funcs = defined_functions(module)
    if name is not None:
        for f in funcs:
            if f.sym_name.data == name:
                return f
        raise RunError(f"no function @{name} in the module (have: {', '.join('@' + f.sym_name.data for f in funcs)})")
    if len(funcs) != 1:
        raise RunError(f"the module has {len(funcs)} functions; choose one with --entry")
    return funcs[0]


def keep_entry(module: ModuleOp, name: str) -> None:
    """Erase the function definitions @name does not reach through symbol references (calls):
    running one function of a module compiles it alone, not its neighbours (a lit file's RUN lines,
    one per --entry, each compiled every function). Declarations stay, whoever uses them."""
    funcs = {f.sym_name.data: f for f in defined_functions(module)}
    keep: set[str] = set()
    todo = [name]
    while todo:
        current = todo.pop()
        if current in keep or current not in funcs:
            continue
        keep.add(current)
        for op in funcs[current].walk():
            for attr in (*op.properties.values(), *op.attributes.values()):
                if isinstance(attr, SymbolRefAttr):
                    todo.append(attr.root_reference.data)
    for f_name, f in funcs.items():
        if f_name not in keep:
            f.detach()
            f.erase()


def _source_op(f: func.FuncOp) -> tuple[TrainOp, dict[str, int]] | None:
    """The train op the function computes, with operand name → argument position: its only op,
    or, in a stage where a pass replaced it (fused, tiled), the op its `train.source` names."""
    found = single_train_op(f)
    if found is not None:
        return found
    source = SOURCE.get(f)
    if source is None and (lowered := SOURCE_OP.get(f)) is not None:
        try:
            source = SourceOpAttr.from_builtin(lowered)
        except VerifyException as e:
            raise RunError(f"@{f.sym_name.data}: {e}", f) from None
    if source is None:
        return None
    try:
        op_cls = recipe_of(source.op.data).op
    except KeyError as e:
        raise RunError(f"@{f.sym_name.data}: train.source: {e.args[0]}", f) from None
    # The op without its operands: enough for its name, properties, checks and reference.
    op = op_cls.create(properties=dict(source.properties.data))
    roles, names, arity = source.arguments(), op_cls.operand_names(), len(f.body.block.args)
    where = f"@{f.sym_name.data}: train.source<\"{op_cls.name}\">"
    unknown = [n for n in roles if n not in names]
    if unknown:
        raise RunError(f"{where} names operand(s) {', '.join(map(repr, unknown))} the op does not have "
                       f"(it has: {', '.join(names)})", f)
    optional = {n for n, d in op_cls.get_irdl_definition().operands if isinstance(d, OptOperandDef)}
    missing = [n for n in names if n not in roles and n not in optional]
    if missing:
        raise RunError(f"{where} gives no argument for operand(s) {', '.join(map(repr, missing))}", f)
    outside = {n: i for n, i in roles.items() if not 0 <= i < arity}
    if outside:
        raise RunError(f"{where}: argument position(s) {outside} past the function's {arity} arguments", f)
    return op, roles


def _check_sizes(f: func.FuncOp, specs: list[MemRefSpec]) -> None:
    """Arguments this machine could not hold are an error at the function, before any allocation."""
    sizes = [math.prod(s.shape) * s.dtype.itemsize for s in specs]
    if sum(sizes) <= MEMORY_BYTES:
        return
    i = max(range(len(sizes)), key=sizes.__getitem__)
    arg = f.body.block.args[i]
    others = f" (all arguments: {human_bytes(sum(sizes))})" if sum(sizes) != sizes[i] else ""
    raise RunError(
        f"argument {i} (%{arg.name_hint or i}: {arg.type}) needs {human_bytes(sizes[i])}{others}, more than this "
        f"machine's memory ({human_bytes(MEMORY_BYTES)}): --stage run cannot allocate its inputs",
        f,
    )


DTYPES_KEY = "__npugrad_dtypes__"


def save_npz(path: str, arrays: dict[str, np.ndarray]) -> None:
    """np.savez, except that a dtype the .npy format cannot name (bfloat16, which it would save as
    raw '|V2' that loads as no number) is saved as its bits, unsigned integers of its width, with
    its name in the entry DTYPES_KEY ("name:dtype" lines), so that load_npz gives it back."""
    encoded, names = {}, []
    for key, a in arrays.items():
        if a.dtype.kind == "V" and a.dtype.names is None:
            encoded[key] = a.view(f"u{a.dtype.itemsize}")
            names.append(f"{key}:{a.dtype}")
        else:
            encoded[key] = a
    if names:
        encoded[DTYPES_KEY] = np.array(names)
    np.savez(path, **encoded)


def load_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an .npz file, those save_npz encoded in their own dtype again."""
    try:
        with np.load(path) as data:
            arrays = {k: data[k] for k in data.files}
    except (ValueError, OSError, EOFError) as e:  # not an .npz (np.load then guesses a pickle)
        raise RunError(f"{path} is not a NumPy .npz file: {e}") from None
    for entry in arrays.pop(DTYPES_KEY, np.array([], dtype=str)):
        key, _, dtype = str(entry).rpartition(":")
        try:
            arrays[key] = arrays[key].view(np.dtype(dtype))
        except (KeyError, TypeError) as e:
            raise RunError(f"{path}: {DTYPES_KEY} names array '{key}' as {dtype}, which cannot be: {e}") from None
    return arrays


def _as_dtype(a: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """`a` as a C-contiguous array of `dtype`: converted by value, or, for raw bytes of the same
    width (a bfloat16 array another tool saved as '|V2'), reinterpreted."""
    if a.dtype.kind == "V" and a.dtype.names is None and a.dtype.itemsize == dtype.itemsize:
        return np.array(a, order="C").view(dtype)  # (np.ascontiguousarray makes a 0-d array 1-d)
    try:
        return np.array(a, dtype=dtype, order="C")
    except (TypeError, ValueError) as e:
        raise RunError(f"{what} has dtype {a.dtype}, which does not convert to {dtype} ({e})") from None


def prepare_inputs(module: ModuleOp, entry: str | None, npz: str | None, seed: int):
    """(function name, argument specs, arrays, train op and roles or None)."""
    f = _entry(module, entry)
    name = f.sym_name.data
    specs: list[MemRefSpec] = signatures(module)[name]
    found = _source_op(f)
    if npz is not None:
        data = load_npz(npz)
        arrays = []
        for i, spec in enumerate(specs):
            key = spec.name if spec.name in data else f"arg{i}"
            if key not in data:
                raise RunError(f"{npz} has no array '{spec.name}' (or 'arg{i}') for argument {i} of @{name}")
            arrays.append(_as_dtype(data[key], spec.dtype, f"{npz}: array '{key}' for argument {i} of @{name}"))
        if found is not None:
            op, roles = found
            # Dynamic dimensions are known only now; a kernel run on mismatched sizes would index
            # past the end of an array.
            given = {n: arrays[i] for n, i in roles.items()}
            shapes = {n: a.shape for n, a in given.items()}
            dts = {n: str(a.dtype) for n, a in given.items()}
            type(op).check(Checker(f"{npz}: '{op.name}' op", "operand", shapes, dts, op.attribute_values()))
        return name, specs, arrays, found
    if any(d is None for s in specs for d in s.shape):
        raise RunError(f"@{name} has dynamic shapes: give the inputs with --inputs FILE.npz")
    if found is None and (ints := [s.name for s in specs if s.dtype.kind in "iu"]):
        # Random integers would be indices out of range for the code that reads them.
        raise RunError(f"@{name} computes no train op that says which values are valid for its integer argument(s) "
                       f"{', '.join(ints)} (no train.source): give the inputs with --inputs FILE.npz", f)
    _check_sizes(f, specs)
    rng = np.random.default_rng(seed)
    arrays = [np.array(rng.standard_normal(s.shape), dtype=s.dtype, order="C") for s in specs]
    if found is not None:
        op, roles = found
        shapes = {n: specs[i].shape for n, i in roles.items()}
        dts = {n: specs[i].dtype for n, i in roles.items()}
        values = harness.random_operands(op.short_name(), shapes, dts, op.attribute_values(), rng)
        for n, i in roles.items():
            if n in values:
                arrays[i] = np.array(values[n], order="C")
            elif specs[i].dtype.kind == "f":
                arrays[i] = np.full(specs[i].shape, np.nan, specs[i].dtype)
    return name, specs, arrays, found


def run(executable: Executable, name: str, specs, arrays, found, compile_seconds: float) -> RunReport:
    inputs = [a.copy() for a in arrays]
    kernel = executable[name]
    # Before the launch: the reference rejects the values (indices out of range...) that would
    # make the kernel read or write out of bounds.
    want = expected(found, inputs)
    magnitude = magnitudes(found, inputs)
    start = time.perf_counter()
    kernel(*arrays)
    elapsed = time.perf_counter() - start
    report = compare(specs, arrays, found, want, magnitude)
    report.lines.insert(0, f"@{name}: compiled in {compile_seconds * 1e3:.1f} ms, ran in {elapsed * 1e3:.3f} ms")
    return report


def expected(found, inputs: list[np.ndarray]) -> dict[str, np.ndarray] | None:
    """The reference's outputs by operand name for the inputs of a single-op function, else None."""
    return _reference(harness.expected, found, inputs)


def magnitudes(found, inputs: list[np.ndarray]) -> dict[str, np.ndarray]:
    """Σ|terms| of each element of the outputs that are sums, by operand name (harness.max_error)."""
    return _reference(harness.magnitudes, found, inputs) or {}


def _reference(part, found, inputs: list[np.ndarray]):
    if found is None:
        return None
    op, roles = found
    return part(op.short_name(), {n: inputs[i] for n, i in roles.items()}, op.attribute_values())


def compare(specs, arrays: list[np.ndarray], found, want: dict[str, np.ndarray] | None,
            magnitude: dict[str, np.ndarray] | None = None) -> RunReport:
    """The arguments after a run against the reference's outputs `want` (see `expected`), the
    sums among them allowed their terms' `magnitude` (see `magnitudes`)."""
    lines = []
    outputs = {s.name: a for s, a in zip(specs, arrays)}
    ok = True
    if want is None:
        lines.append("no single train op with argument operands: outputs not checked against a reference")
        for s, a in zip(specs, arrays):
            lines.append(f"  {s.name:<16} {a.shape!s:<16} {a.dtype!s:<9} sum={float(np.sum(a, dtype=np.float64)):.6g}")
        return RunReport(lines, ok, outputs)
    _, roles = found
    width = max([16, *(len(n) for n in want)])
    lines.append(f"  {'operand':<{width}} {'shape':<16} {'dtype':<9} {'max error':>10} {'tolerance':>10}")
    for n, expect in want.items():
        got = arrays[roles[n]]
        err = harness.max_error(got, expect, (magnitude or {}).get(n))
        tol = harness.tolerance(got.dtype)
        good = err <= tol
        ok &= good
        lines.append(f"  {n:<{width}} {got.shape!s:<16} {got.dtype!s:<9} {err:>10.2e} {tol:>10.1e}  "
                     f"{'ok' if good else 'MISMATCH'}")
    return RunReport(lines, ok, outputs)
