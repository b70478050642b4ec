"""A fuzzer of the Python API: hypothesis draws a valid call of an op, then perhaps breaks it
(wrong dtypes, shapes, Python types, strides, NaN/Inf, out-of-range indices, outputs that alias
an input, bad scalars, misaligned or read-only arrays), runs it, and asserts exactly one of:

- correct: the call returned, its outputs match the reference within the dtype's tolerance, the
  given outputs are the arrays returned, and no input was written;
- clean rejection: a ValueError/TypeError whose message starts with the op's name and names one
  of its parameters, and every array the call could write (out=, EMA-Adam's states) is bit for
  bit unchanged.

Anything else fails the test (another exception, a wrong answer, a rejected valid call, a call
accepted although the reference rejects its values). The budget follows the hypothesis profile:
the default `ci` profile keeps the whole file under a minute; `--hypothesis-profile=long` runs
10,000+ cases (the counts are printed at the end of the session).

Kernels are compiled per dtype, rank, layout class and attribute values, so those are drawn from
small sets; shapes, values and the breakage vary freely.
"""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
from api_cases import (
    BCE,
    EMA_ADAM,
    EMBEDDING,
    FLCE,
    NLL,
    OUTCOMES,
    OUTPUTS,
    Case,
    bce,
    ema_adam,
    embedding,
    flce,
    nll,
    output_like,
    overlapping,
)
from conftest import FLOAT_DTYPES, assert_close
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

PARAMETERS = {op: set(inspect.signature(getattr(ops, op)).parameters) for op in (BCE, NLL, EMBEDDING, EMA_ADAM, FLCE)}
# Share of the profile's max_examples per op (FLCE compiles slowest).
WEIGHT = {BCE: 1.0, NLL: 1.0, EMBEDDING: 1.0, EMA_ADAM: 1.0, FLCE: 0.4, "types": 1.0}


def budget(share: float):
    """Hypothesis settings for a fuzz test taking `share` of the profile's max_examples."""
    return settings(
        max_examples=max(1, round(settings.default.max_examples * share)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def fuzz(kind: str):
    return budget(WEIGHT[kind])


# -- running one case ------------------------------------------------------------------------------


def _reference(case: Case) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """The reference's answer on copies of the arguments and the Σ|terms| of its sums, or None
    where it rejects them."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. a complex step cast to int64
            return case.copy().expected(), case.copy().magnitudes()
    except Exception:  # noqa: BLE001 - the reference rejects arguments with whatever numpy raises
        return None


def array_bytes(arrays: dict) -> dict[str, bytes]:
    return {k: a.tobytes() for k, a in arrays.items() if isinstance(a, np.ndarray)}


def assert_matches(got: np.ndarray, want: np.ndarray, magnitude=None,
                   magnitude_tolerance: float = harness.TOLERANCE["float32"]) -> None:
    """NaN and ±Inf exactly where the reference (rounded to got's dtype) has them; the finite
    elements within the dtype's tolerance, scaled by the largest finite one (a NaN somewhere
    must not make every other element's rounding count relative to itself) and, for a sum, by
    its terms' magnitudes (`magnitude`, broadcast to want's shape; `magnitude_tolerance` of
    them: harness.max_error)."""
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    with np.errstate(over="ignore"):
        rounded = np.asarray(want, np.float32).astype(got.dtype).astype(np.float32)
    finite = np.isfinite(rounded)
    got32 = np.asarray(got, np.float32)
    same = np.array_equal(got32[~finite], rounded[~finite], equal_nan=True)
    assert same, "the non-finite elements (NaN, ±Inf) differ from the reference's"
    if magnitude is not None:
        magnitude = np.broadcast_to(magnitude, finite.shape)[finite]
    assert_close(got[finite], want[finite], magnitude=magnitude, magnitude_tolerance=magnitude_tolerance)


def run(case: Case, valid: bool) -> str:
    """Run the case and check its outcome; count it as 'correct', 'rejected' or 'other'."""
    try:
        outcome = _run(case, valid)
    except BaseException:
        OUTCOMES["other"] += 1
        raise
    OUTCOMES[outcome] += 1
    OUTCOMES["cases"] += 1
    return outcome


def _run(case: Case, valid: bool) -> str:
    reference = _reference(case)
    want, magnitude = reference if reference is not None else (None, {})
    written = case.written()
    read = {k: a for k, a in case.arrays.items() if k not in written}
    before_written, before_read = array_bytes(written), array_bytes(read)
    try:
        with np.errstate(all="ignore"):
            got = case.call()
    except (ValueError, TypeError) as e:
        message = str(e)
        assert message.startswith(f"{case.op}: "), f"the message does not start with the op: {message!r}"
        named = set(re.findall(r"'(\w+)'", message)) & PARAMETERS[case.op]
        assert named, f"the message names no parameter of {case.op}: {message!r}"
        assert array_bytes(written) == before_written, f"a rejected call wrote to its outputs: {message!r}"
        assert not valid, f"a valid call was rejected: {type(e).__name__}: {message}"
        return "rejected"
    assert want is not None, "the call was accepted, but the reference rejects its arguments"
    for name, array in got.items():
        given_out = written.get(name)
        if given_out is not None:
            assert array is given_out, f"'{name}' is not the array given"
        assert_matches(array, want[name], magnitude.get(name))
    assert array_bytes(read) == before_read, "the call wrote to an input"
    return "correct"


# -- breaking a valid case -------------------------------------------------------------------------

ODD_DTYPES = [np.dtype(t) for t in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.uint8,
                                    np.bool_, np.complex64, ">f4", "<U3", object)] + [BFLOAT16]
WEIRD = [None, "x", 1.5, 7, {}, object(), b"\x00\x01", (1.0, 2.0), [[1.0], 2.0], slice(1)]


def _array_names(case: Case, outputs=True) -> list[str]:
    return [k for k, a in case.arrays.items() if isinstance(a, np.ndarray) and (outputs or k not in OUTPUTS[case.op])]


def _output_names(case: Case) -> list[str]:
    return list(OUTPUTS[case.op])


def _pick(data, names: list[str], label: str) -> str | None:
    return data.draw(st.sampled_from(names), label=label) if names else None


def wrong_dtype(case: Case, data) -> bool:
    name = _pick(data, _array_names(case), "dtype of")
    if name is None:
        return True
    dtype = data.draw(st.sampled_from(ODD_DTYPES), label="dtype")
    a = case.arrays[name]
    with np.errstate(all="ignore"):
        try:
            case.arrays[name] = a.astype(dtype)
        except (TypeError, ValueError):  # bfloat16 to str, "0.6" to int: through float64
            try:
                case.arrays[name] = a.astype(np.float64).astype(dtype)
            except ValueError:  # a string no number reads ("1e-" of "1e-05" in 3 characters)
                case.arrays[name] = np.zeros(a.shape, dtype)
    return False


def wrong_shape(case: Case, data) -> bool:
    name = _pick(data, _array_names(case), "shape of")
    if name is None:
        return True
    a = case.arrays[name]
    shape = list(a.shape)
    how = data.draw(st.sampled_from(["drop", "add", "grow", "shrink", "flatten", "nine-dims"]), label="reshape")
    if how == "drop" and shape:
        shape.pop(data.draw(st.integers(0, len(shape) - 1)))
    elif how == "add":
        shape.insert(data.draw(st.integers(0, len(shape))), data.draw(st.integers(1, 3)))
    elif how in ("grow", "shrink") and shape:
        i = data.draw(st.integers(0, len(shape) - 1))
        shape[i] = max(0, shape[i] + (1 if how == "grow" else -1))
    elif how == "flatten":
        shape = [a.size]
    elif how == "nine-dims":
        shape = [1] * (9 - len(shape)) + shape
    case.arrays[name] = np.resize(a, shape) if a.size else np.zeros(shape, a.dtype)
    return False


def wrong_python_type(case: Case, data) -> bool:
    names = [k for k in PARAMETERS[case.op] if k in case.arrays or k in case.scalars]
    name = _pick(data, sorted(names), "python type of")
    if name is None:
        return False
    value = data.draw(st.sampled_from(WEIRD), label="value")
    if name in case.arrays:
        if data.draw(st.booleans(), label="as list") and isinstance(case.arrays[name], np.ndarray):
            value = case.arrays[name].tolist()
        case.arrays[name] = value
    else:
        case.scalars[name] = value
    return False


def relayout(a: np.ndarray, how: str, data) -> np.ndarray:
    """The same values in other strides (negative, Fortran, stepped)."""
    if a.ndim == 0:
        return a
    if how == "reversed":
        axis = data.draw(st.integers(0, a.ndim - 1), label="reversed axis")
        flipped = np.flip(a, axis).copy()
        return np.flip(flipped, axis)
    if how == "fortran":
        return np.asfortranarray(a)
    if how == "stepped":
        step = data.draw(st.integers(2, 3), label="step")
        big = np.zeros(tuple(n * step for n in a.shape), a.dtype)
        view = big[tuple(slice(None, None, step) for _ in a.shape)]
        view[...] = a
        return view
    # "transposed": a C-contiguous copy of the transpose, viewed back
    return np.ascontiguousarray(a.T).T


def strides(case: Case, data) -> bool:
    """Valid: the same values in other strides, for inputs and outputs alike."""
    names = _array_names(case)
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True, min_size=1), label="restrided") if names else []
    how = data.draw(st.sampled_from(["reversed", "fortran", "stepped", "transposed"]), label="layout")
    for name in chosen:
        case.arrays[name] = relayout(case.arrays[name], how, data)
    return True


def broadcast_input(case: Case, data) -> bool:
    """Valid: an input with a zero stride (its values repeat along the axis)."""
    name = _pick(data, [k for k in _array_names(case, outputs=False) if case.arrays[k].ndim], "broadcast")
    if name is None:
        return True
    a = case.arrays[name]
    axis = data.draw(st.integers(0, a.ndim - 1), label="axis")
    if a.shape[axis] == 0:
        return True
    case.arrays[name] = np.broadcast_to(np.take(a, [0], axis=axis), a.shape)
    return True


def zero_stride_output(case: Case, data) -> bool:
    names = [k for k in _output_names(case) if k in case.arrays]
    name = _pick(data, names, "zero-stride output")
    if name is None:
        return True
    template = case.arrays[name]
    if template is None:
        template = output_like(case, name)
    if not isinstance(template, np.ndarray):
        return True
    if template.ndim == 0 or template.shape[0] <= 1 or template.size == 0:
        return True
    row = np.zeros(template.shape[1:], template.dtype)
    case.arrays[name] = np.lib.stride_tricks.as_strided(row, template.shape, (0, *row.strides))
    return False


def special_values(case: Case, data) -> bool:
    """Valid: NaN, ±Inf and -0 among the float inputs' values."""
    names = [k for k in _array_names(case, outputs=False)
             if case.arrays[k].dtype.kind == "f" or case.arrays[k].dtype == BFLOAT16]
    name = _pick(data, names, "special values in")
    if name is None or case.arrays[name].size == 0:
        return True
    a = np.array(case.arrays[name])
    flat = a.reshape(-1)
    count = data.draw(st.integers(1, min(4, flat.size)), label="how many")
    for _ in range(count):
        i = data.draw(st.integers(0, flat.size - 1), label="at")
        flat[i] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, -0.0]), label="special")
    case.arrays[name] = a
    return True


def index_values(case: Case, data) -> bool:
    """Out-of-range (or edge) indices: the reference decides whether they are valid."""
    names = [k for k in ("indices", "target", "masked_target") if isinstance(case.arrays.get(k), np.ndarray)]
    name = _pick(data, names, "index values in")
    if name is None or case.arrays[name].size == 0:
        return True
    a = np.array(case.arrays[name])
    if a.dtype.kind not in "iu":
        return False
    info = np.iinfo(a.dtype)
    if case.op == EMBEDDING:
        bound = case.scalars.get("num_weights", 0)
    else:  # C (the last dimension of self) or V (the rows of weight)
        other = case.arrays.get("self" if case.op == NLL else "weight")
        bound = other.shape[0 if case.op == FLCE else -1] if isinstance(other, np.ndarray) and other.ndim else 0
    bound = bound if isinstance(bound, int) else 0
    candidates = [v for v in (-1, bound, bound + 1, bound - 1, info.min, info.max, -100, 0)
                  if info.min <= v <= info.max]
    flat = a.reshape(-1)
    flat[data.draw(st.integers(0, flat.size - 1), label="at")] = data.draw(st.sampled_from(candidates), label="index")
    case.arrays[name] = a
    return False


def alias_output(case: Case, data) -> bool:
    """An output that shares memory with another array parameter: always rejected."""
    output = _pick(data, _output_names(case), "aliased output")
    if case.arrays.get(output) is None:
        case.arrays[output] = output_like(case, output)
    if not isinstance(case.arrays[output], np.ndarray):
        return False
    others = [k for k in _array_names(case) if k != output]
    other = _pick(data, others, "aliased with")
    if other is None:
        return False
    a, b = case.arrays[other], case.arrays[output]
    # Nothing to overlap in an empty array, and references (wrong_dtype's 'O') share no raw memory.
    if a.size == 0 or b.size == 0 or a.dtype.hasobject or b.dtype.hasobject:
        return False
    how = data.draw(st.sampled_from(["same-buffer", "shifted", "is"]), label="alias")
    if how == "is" and a.shape == b.shape and a.dtype == b.dtype:
        case.arrays[output] = a
        return False
    case.arrays[other], case.arrays[output] = overlapping(a, b, 0 if how == "same-buffer" else 1)
    return False


def read_only_output(case: Case, data) -> bool:
    names = [k for k in _output_names(case) if isinstance(case.arrays.get(k), np.ndarray)]
    name = _pick(data, names, "read-only")
    if name is not None:
        case.arrays[name] = np.array(case.arrays[name])
        case.arrays[name].setflags(write=False)
    return name is None


def misaligned(case: Case, data) -> bool:
    """An array whose data or strides are not a multiple of its element size."""
    names = [k for k in _array_names(case)
             if case.arrays[k].itemsize > 1 and case.arrays[k].size and case.arrays[k].dtype.kind not in "OUV"]
    name = _pick(data, names, "misaligned")
    if name is None:
        return True
    a = np.ascontiguousarray(case.arrays[name])
    raw = np.zeros(a.nbytes + 1, np.uint8)
    moved = raw[1:].view(a.dtype).reshape(a.shape)  # one byte off
    moved[...] = a
    case.arrays[name] = moved
    return False


BAD_SCALARS = {
    "reduction": [0.5, 1.5, 1.0, None, "mean", float("nan"), True, np.True_, 3, -1, 1 << 70, [1]],
    "ignore_index": [1.5, None, "-100", True, 1 << 63, np.float32(0)],
    "num_weights": [5.0, None, True, -1, 1 << 40, 1 << 62, 1 << 63, "5"],
    "padding_idx": [0.0, None, "0", True, 1 << 64, -(1 << 63) - 1],
    "scale_grad_by_freq": [None, "yes", 2, 1.0, -1, np.array([True])],
    "mode": [True, 1.0, None, "adamw", 2, -1],
    "bias_correction": [None, "False", 2, 0.0],
    "lr": [None, "1e-3", True, float("inf"), float("nan"), -1e-3, 1e39, 10**400],
    "eps": [float("nan"), -1.0, None],
    "beta1": [1.0, -0.1, float("inf"), "0.9"],
    "beta2": [1.0, 2.0, float("-inf")],
    "ema_decay": [1.5, -0.5, float("nan")],
    "weight_decay": [-0.01, float("inf"), None],
    "step": [1 << 63, True, 2.0, None, "1", -1],
    "label_smoothing": [None, "mean", float("nan"), 0.1, True, 0j, [0.0]],
}
# Other spellings of a valid value: the same result.
SAME_SCALARS = {
    int: lambda v: [np.int64(v), np.int32(v), np.array(v)] if -(1 << 31) <= v < (1 << 31) else [np.int64(v)],
    float: lambda v: [np.float64(v), np.array(v), *([int(v), np.array(int(v))] if float(v).is_integer() else [])],
    bool: lambda v: [np.bool_(v), int(v)],
}
# The parameters that take real numbers (the others: integers, and bools where the value is one).
REALS = {"label_smoothing", "lr", "eps", "beta1", "beta2", "ema_decay", "weight_decay", "z_loss", "softcap"}


def bad_scalar(case: Case, data) -> bool:
    names = sorted(k for k in case.scalars if k in BAD_SCALARS)
    name = _pick(data, names, "scalar")
    if name is None:
        return True
    if data.draw(st.booleans(), label="other spelling"):
        v = case.scalars[name]
        # The parameter's kind, not its value's: a real may already be spelled as an int.
        kind = float if name in REALS else bool if isinstance(v, bool) else int
        if kind is float:
            if type(v) not in (int, float):  # an earlier mutation's wrong type: nothing to respell
                return True
            v = float(v)
        if kind is int and (not isinstance(v, int) or not -(1 << 63) <= v < 1 << 63):
            return True
        case.scalars[name] = data.draw(st.sampled_from(SAME_SCALARS[kind](v)), label="spelling")
        return True
    case.scalars[name] = data.draw(st.sampled_from(BAD_SCALARS[name]), label="bad value")
    return False


def drop_array(case: Case, data) -> bool:
    name = _pick(data, sorted(k for k, a in case.arrays.items() if a is not None), "dropped")
    if name is not None:
        case.arrays[name] = None
    return False


MUTATIONS = {
    "wrong_dtype": wrong_dtype, "wrong_shape": wrong_shape, "wrong_python_type": wrong_python_type,
    "strides": strides, "broadcast_input": broadcast_input, "zero_stride_output": zero_stride_output,
    "special_values": special_values, "index_values": index_values, "alias_output": alias_output,
    "read_only_output": read_only_output, "misaligned": misaligned, "bad_scalar": bad_scalar,
    "drop_array": drop_array,
}


def mutate(case: Case, data) -> bool:
    """Apply up to two mutations; whether the case is still valid by construction."""
    chosen = data.draw(st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=2), label="mutations")
    valid = True
    for name in chosen:
        valid &= MUTATIONS[name](case, data)
    return valid


# -- valid cases -----------------------------------------------------------------------------------

SIZES = st.one_of(st.integers(0, 12), st.sampled_from([15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257]))


def _shape(data, min_rank: int, max_rank: int, label: str) -> tuple[int, ...]:
    rank = data.draw(st.integers(min_rank, max_rank), label=f"{label} rank")
    shape = tuple(data.draw(SIZES, label=f"{label} dim") for _ in range(rank))
    while np.prod(shape, dtype=np.int64) > 200_000:  # keep cases small and fast
        shape = tuple(max(1, d // 4) for d in shape)
    return shape


def seeded_rng(data) -> np.random.Generator:
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


def draw_bce(data) -> Case:
    shape = _shape(data, 0, 4, "input_x")
    if data.draw(st.integers(0, 9), label="long") == 0:
        shape = (data.draw(st.sampled_from([1000, 4097, 131_073]), label="long size"),)
    return bce(seeded_rng(data), shape, data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype"),
               data.draw(st.sampled_from([0, 1, 2]), label="reduction"), data.draw(st.booleans(), label="weighted"),
               out=data.draw(st.booleans(), label="out given"))


def draw_nll(data) -> Case:
    one_d = data.draw(st.booleans(), label="1-D self")
    n = data.draw(SIZES, label="N")
    c = data.draw(st.one_of(st.integers(1, 12), st.sampled_from([31, 65, 1000])), label="C")
    case = nll(seeded_rng(data), n, c, data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype"),
               data.draw(st.sampled_from([np.int64, np.int32, np.uint8]), label="target dtype"),
               data.draw(st.sampled_from([0, 1, 2]), label="reduction"),
               data.draw(st.sampled_from([-100, 0, 1]), label="ignore_index"), one_d,
               out=data.draw(st.booleans(), label="out given"))
    if data.draw(st.booleans(), label="weight None"):
        case.arrays["weight"] = None
    return case


def draw_embedding(data) -> Case:
    dtype = data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype")
    lead = _shape(data, 0, 2, "grad leading")
    d = data.draw(SIZES, label="D")
    n = int(np.prod(lead, dtype=np.int64))
    # Any shape with n = prod(grad.shape[:-1]) elements (n = 1 for a 1-D grad).
    indices_shape = data.draw(st.sampled_from([lead, (n,), (1, n)] if lead else [(), (1,)]), label="indices shape")
    out_dtype = data.draw(st.sampled_from([None, None, np.float32, np.float16, BFLOAT16]), label="out dtype")
    return embedding(seeded_rng(data), (*lead, d), indices_shape, data.draw(st.sampled_from([1, 3, 17]), label="num_weights"),
                     dtype, data.draw(st.sampled_from([np.int64, np.int32]), label="index dtype"),
                     data.draw(st.sampled_from([-1, 0, 2]), label="padding_idx"),
                     data.draw(st.booleans(), label="scale"), out=out_dtype is not None, out_dtype=out_dtype)


def draw_ema_adam(data) -> Case:
    shape = _shape(data, 1, 3, "grad")
    if 0 in shape:
        shape = tuple(max(1, d) for d in shape) if data.draw(st.booleans(), label="non-empty") else shape
    bias_correction = data.draw(st.booleans(), label="bias_correction")
    hyper = {
        "lr": data.draw(st.floats(0, 0.1), label="lr"),
        "ema_decay": data.draw(st.floats(0, 1), label="ema_decay"),
        "beta1": data.draw(st.floats(0, 0.99), label="beta1"),
        "beta2": data.draw(st.floats(0, 0.999), label="beta2"),
        "eps": data.draw(st.sampled_from([1e-8, 1e-6, 0.0]), label="eps"),
        "weight_decay": data.draw(st.floats(0, 0.1), label="weight_decay"),
        "mode": data.draw(st.sampled_from([0, 1]), label="mode"),
        "bias_correction": bias_correction,
    }
    step = data.draw(st.integers(1 if bias_correction else 0, 1000), label="step")
    case = ema_adam(seeded_rng(data), shape, data.draw(st.sampled_from(FLOAT_DTYPES), label="dtype"), step, **hyper)
    if data.draw(st.booleans(), label="step array"):
        case.arrays["step"] = np.array([case.scalars.pop("step")], np.int64)
    return case


def draw_flce(data) -> Case:
    mode = data.draw(st.sampled_from(["memory-saving", "high-performance"]), label="mode")
    bt = data.draw(st.one_of(st.integers(0, 12), st.sampled_from([65, 70])), label="BT")
    h = data.draw(st.one_of(st.integers(1, 12), st.sampled_from([17, 33])), label="H")
    v = data.draw(st.integers(0, 12) if mode == "memory-saving" else st.integers(128, 140), label="V")
    dtype = data.draw(st.sampled_from([BFLOAT16, np.float32]), label="dtype")
    mask = data.draw(st.sampled_from([np.bool_, np.uint8]), label="mask dtype")
    case = flce(seeded_rng(data), bt, h, v, dtype, mode, mask, np.int64, out=data.draw(st.booleans(), label="out given"))
    if data.draw(st.booleans(), label="label_smoothing given"):
        case.scalars["label_smoothing"] = 0.0
    return case


DRAW = {BCE: draw_bce, NLL: draw_nll, EMBEDDING: draw_embedding, EMA_ADAM: draw_ema_adam, FLCE: draw_flce}


def _fuzz_one(op: str, data) -> None:
    case = DRAW[op](data)
    valid = mutate(case, data)
    run(case, valid)


@fuzz(BCE)
@given(data=st.data())
def test_fuzz_binary_cross_entropy_grad(data):
    _fuzz_one(BCE, data)


@fuzz(NLL)
@given(data=st.data())
def test_fuzz_nll_loss_backward(data):
    _fuzz_one(NLL, data)


@fuzz(EMBEDDING)
@given(data=st.data())
def test_fuzz_embedding_dense_backward(data):
    _fuzz_one(EMBEDDING, data)


@fuzz(EMA_ADAM)
@given(data=st.data())
def test_fuzz_apply_fused_ema_adam(data):
    _fuzz_one(EMA_ADAM, data)


@fuzz(FLCE)
@given(data=st.data())
def test_fuzz_fused_linear_cross_entropy_loss_grad(data):
    _fuzz_one(FLCE, data)


@fuzz("types")
@given(data=st.data())
def test_fuzz_python_types_of_every_parameter(data):
    """Any op, any parameter, any Python object: a clean rejection or (lists, integers) a correct call."""
    op = data.draw(st.sampled_from(sorted(DRAW)), label="op")
    case = {BCE: lambda: bce(seeded_rng(data), (3, 5), reduction=2), NLL: lambda: nll(seeded_rng(data)),
            EMBEDDING: lambda: embedding(seeded_rng(data)), EMA_ADAM: lambda: ema_adam(seeded_rng(data)),
            FLCE: lambda: flce(seeded_rng(data))}[op]()
    for _ in range(data.draw(st.integers(1, 3), label="how many")):
        wrong_python_type(case, data)
    run(case, False)
