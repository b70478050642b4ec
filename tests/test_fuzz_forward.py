"""A fuzzer of the Python API of FORWARD.md's three entry points, as tests/test_fuzz.py is of
the five ops': fused_linear_online_max_sum (§1), fused_cross_entropy_loss_with_max_sum (§2) and
linear_cross_entropy (§3, §4: the whole loss, forward and backward). Hypothesis draws a valid
call, then perhaps breaks it (wrong dtypes, shapes, Python types, strides, NaN/Inf, ids outside
the shard or the vocabulary, outputs that alias an input, bad scalars, misaligned or read-only
arrays, shards of another H or dtype), runs it, and asserts exactly one of:

- correct: the call returned, its results match the reference within the dtype's tolerance
  (integers exactly; NaN and ±Inf exactly where the reference has them), the outputs given are
  the arrays returned, and no input was written;
- clean rejection: a ValueError/TypeError whose message starts with the op's name and names
  one of its parameters, and no array of the call (outputs given and inputs) is changed.

The judge is forward_cases.Case.expected(): the spec's rules, then the references (the
project's NumPy ones for the two forward ops, a float64 computation for the whole loss). A call
the rules reject must be rejected; a call built valid must be accepted.

Kernels are compiled per dtype, layout class and attribute value (softcap, z_loss, label
smoothing with its vocabulary size K, logits_block, ...), so those come from small sets; shapes,
values, shards, ids and the breakage vary freely. The default `ci` profile keeps the file under
a minute with a warm compile cache; `--hypothesis-profile=long` runs thousands of cases (the
counts are printed at the end of the session, with test_fuzz.py's).
"""

from __future__ import annotations

import inspect
import re
import warnings

import numpy as np
import pytest
from api_cases import OUTCOMES, overlapping
from forward_cases import (
    F32,
    FLOATS,
    INDEX_DTYPES,
    INT64_MAX,
    LCE,
    LOSS,
    MAX_SUM,
    OPS,
    OUTPUTS,
    Case,
    Ranks,
    Rejected,
    lce,
    loss_with_max_sum,
    max_sum,
    output_like,
)
from hypothesis import given
from hypothesis import strategies as st
from test_fuzz import ODD_DTYPES, WEIRD, array_bytes, assert_matches, budget, relayout, seeded_rng

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

PARAMETERS = {op: set(inspect.signature(getattr(ops, op)).parameters) for op in OPS}
# A parameter named in a message: 'weight', or one shard of it, 'weight[1]'.
NAMED = re.compile(r"'(\w+)(?:\[\d+\])?'")
# Share of the profile's max_examples per test (the whole loss runs three kernels and more per call).
WEIGHT = {MAX_SUM: 1.0, LOSS: 1.0, LCE: 0.75, "types": 0.5}


def fuzz(kind: str):
    return budget(WEIGHT[kind])


# -- running one case ------------------------------------------------------------------------------


def _reference(case: Case):
    """The judge's answer, or None where the rules reject the call."""
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return case.expected()
    except Rejected:
        return None


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


def _check_result(name: str, got, want, given_out) -> None:
    if want is None:
        assert got is None, f"'{name}': a result where the call has none"
        return
    if isinstance(want, list):  # linear_cross_entropy's weight_grad, shards given as a list
        assert isinstance(got, list) and len(got) == len(want), f"'{name}': not one gradient per shard"
        for i, (g, w) in enumerate(zip(got, want)):
            _check_result(f"{name}[{i}]", g, w, None)
        return
    values, dtype, scale = (*want, None) if len(want) == 2 else want
    if given_out is not None:
        assert got is given_out, f"'{name}' is not the array given"
    assert isinstance(got, np.ndarray), f"'{name}' is a {type(got).__name__}"
    assert got.dtype == dtype, f"'{name}' has dtype {got.dtype}, not {dtype}"
    assert got.shape == np.shape(values), f"'{name}' has shape {got.shape}, not {np.shape(values)}"
    if dtype.kind in "biu":
        assert np.array_equal(got, values), f"'{name}' differs from the reference: {got} != {values}"
    else:
        try:
            # The scale (forward_cases) covers roundings in the result's dtype too: its tolerance.
            assert_matches(got, np.asarray(values), scale, magnitude_tolerance=harness.tolerance(got.dtype))
        except AssertionError as e:
            raise AssertionError(f"'{name}': {e}") from None


def _run(case: Case, valid: bool) -> str:
    want = _reference(case)
    written = case.written()
    arrays = case.ndarrays()
    before = array_bytes(arrays)
    try:
        with np.errstate(all="ignore"):
            got = case.call()
    except (ValueError, TypeError) as e:
        message = str(e)
        assert message.startswith(f"{case.op}: "), f"the message does not start with the op: {message!r}"
        named = set(NAMED.findall(message)) & PARAMETERS[case.op]
        assert named, f"the message names no parameter of {case.op}: {message!r}"
        changed = [k for k, b in array_bytes(arrays).items() if b != before[k]]
        assert not changed, f"a rejected call wrote to {changed}: {message!r}"
        assert not valid, f"a valid call was rejected: {type(e).__name__}: {message}"
        return "rejected"
    assert want is not None, "the call was accepted, but the rules reject it"
    results = {v: k for k, v in OUTPUTS[case.op].items()}
    for name, w in want.items():
        _check_result(name, got[name], w, written.get(results.get(name)))
    changed = [k for k, b in array_bytes(arrays).items() if b != before[k] and k not in written]
    assert not changed, f"the call wrote to its inputs {changed}"
    return "correct"


# -- breaking a valid case -------------------------------------------------------------------------


def _array_names(case: Case, outputs=True) -> list[str]:
    return [k for k, a in case.arrays.items() if isinstance(a, np.ndarray) and (outputs or k not in OUTPUTS[case.op])]


def _pick(data, names, label: str) -> str | None:
    return data.draw(st.sampled_from(sorted(names)), label=label) if names else None


def wrong_dtype(case: Case, data) -> bool:
    name = _pick(data, _array_names(case), "dtype of")
    if name is None:
        return True
    dtype = data.draw(st.sampled_from(ODD_DTYPES + [np.dtype(np.uint64)]), label="dtype")
    a = case.arrays[name]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            case.arrays[name] = a.astype(dtype)
        except (TypeError, ValueError):
            try:
                case.arrays[name] = a.astype(np.float64).astype(dtype)
            except ValueError:
                case.arrays[name] = np.zeros(a.shape, dtype)
    return False


def wrong_shape(case: Case, data) -> bool:
    name = _pick(data, _array_names(case), "shape of")
    if name is None:
        return True
    a = case.arrays[name]
    shape = list(a.shape)
    how = data.draw(st.sampled_from(["drop", "add", "grow", "shrink", "flatten", "transpose", "nine-dims"]),
                    label="reshape")
    if how == "drop" and shape:
        shape.pop(data.draw(st.integers(0, len(shape) - 1)))
    elif how == "add":
        shape.insert(data.draw(st.integers(0, len(shape))), data.draw(st.integers(1, 3)))
    elif how in ("grow", "shrink") and shape:
        i = data.draw(st.integers(0, len(shape) - 1))
        shape[i] = max(0, shape[i] + (1 if how == "grow" else -1))
    elif how == "flatten":
        shape = [a.size]
    elif how == "transpose":
        shape = shape[::-1]
    elif how == "nine-dims":
        shape = [1] * (9 - len(shape)) + shape
    case.arrays[name] = np.resize(a, shape) if a.size else np.zeros(shape, a.dtype)
    return False


def wrong_python_type(case: Case, data) -> bool:
    names = [k for k in PARAMETERS[case.op] if k in case.arrays or k in case.scalars] + case.shard_names()
    name = _pick(data, names, "python type of")
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


def _layout(a: np.ndarray, how: str, data) -> np.ndarray:
    """The same values in other strides: test_fuzz's layouts, and rows padded (a view of the
    first columns of a wider array: strided, each row contiguous)."""
    if how != "padded":
        return relayout(a, how, data)
    if a.ndim < 2:
        return relayout(a, "stepped", data)
    pad = data.draw(st.integers(1, 17), label="pad")
    big = np.zeros((*a.shape[:-1], a.shape[-1] + pad), a.dtype)
    view = big[..., : a.shape[-1]]
    view[...] = a
    return view


def strides(case: Case, data) -> bool:
    """Valid: the same values in other strides, for inputs and outputs alike."""
    names = _array_names(case)
    chosen = (data.draw(st.lists(st.sampled_from(sorted(names)), unique=True, min_size=1), label="restrided")
              if names else [])
    how = data.draw(st.sampled_from(["reversed", "fortran", "stepped", "transposed", "padded"]), label="layout")
    for name in chosen:
        case.arrays[name] = _layout(case.arrays[name], how, data)
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
    name = _pick(data, [k for k in OUTPUTS[case.op]], "zero-stride output")
    if name is None:
        return True
    template = case.arrays.get(name)
    if template is None:
        template = output_like(case, name)
    if not isinstance(template, np.ndarray) or template.ndim == 0 or template.shape[0] <= 1 or template.size == 0:
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
    for _ in range(data.draw(st.integers(1, min(4, flat.size)), label="how many")):
        i = data.draw(st.integers(0, flat.size - 1), label="at")
        flat[i] = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, -0.0]), label="special")
    case.arrays[name] = a
    return True


def extreme_row(case: Case, data) -> bool:
    """Valid: a row of logits all ±Inf, or all huge (the input's row ±Inf or ±1e30, every weight
    element made positive): the online maximum's start and rescaling, softcap's tanh(±Inf) = ±1."""
    x = case.arrays.get("input")
    weights = case.shard_names() if case.shards is not None else ["weight"]
    ws = [case.arrays.get(k) for k in weights]
    if case.op == LOSS or not isinstance(x, np.ndarray) or x.ndim != 2 or not x.size \
            or not all(isinstance(w, np.ndarray) and (w.dtype.kind == "f" or w.dtype == BFLOAT16) for w in ws):
        return True
    if not (x.dtype.kind == "f" or x.dtype == BFLOAT16):
        return True
    x = np.array(x)
    row = data.draw(st.integers(0, x.shape[0] - 1), label="row")
    with np.errstate(over="ignore"):
        x[row] = data.draw(st.sampled_from([np.inf, -np.inf, 1e30, -1e30]), label="value")
    case.arrays["input"] = x
    for name, w in zip(weights, ws):
        case.arrays[name] = np.abs(w)
    return True


def _vocabulary(case: Case) -> int | None:
    """K of linear_cross_entropy (the rows of all shards), where the arrays say."""
    ws = [case.arrays.get(k) for k in case.shard_names()] if case.shards is not None else [case.arrays.get("weight")]
    if not all(isinstance(w, np.ndarray) and w.ndim == 2 for w in ws):
        return None
    return sum(w.shape[0] for w in ws)


def index_values(case: Case, data) -> bool:
    """Ids at or beyond the edges: valid for the forward ops (an id outside the shard is
    masked, whatever it is), for the whole loss only where every id is in [0, K) or ignored."""
    t = case.arrays.get("target")
    if not isinstance(t, np.ndarray) or t.size == 0 or t.dtype.kind not in "iu":
        return True
    a = np.array(t)
    info = np.iinfo(a.dtype)
    if case.op == MAX_SUM:
        start, end = case.scalars.get("vocab_start_index"), case.scalars.get("vocab_end_index")
        edges = [start - 1, start, end - 1, end, end + 1] if type(start) is int and type(end) is int else []
    elif case.op == LCE:
        k = _vocabulary(case) or 0
        edges = [k - 1, k, k + 1, case.scalars.get("ignore_index")]
    else:
        edges = [case.scalars.get("ignore_index")]
    candidates = [v for v in [-1, 0, -100, info.min, info.max, *edges] if type(v) is int and info.min <= v <= info.max]
    flat = a.reshape(-1)
    flat[data.draw(st.integers(0, flat.size - 1), label="at")] = data.draw(st.sampled_from(candidates), label="id")
    case.arrays["target"] = a
    if case.op != LCE:
        return True
    k, ignore = _vocabulary(case), case.scalars.get("ignore_index")
    return k is not None and type(ignore) is int and all(v == ignore or 0 <= v < k for v in flat.tolist())


def shift_shard(case: Case, data) -> bool:
    """fused_linear_online_max_sum: the same V rows as another shard [start, end) of the
    vocabulary, anywhere in int64 (valid), or with end - start != V or start < 0 (not)."""
    if case.op != MAX_SUM:
        return True
    w = case.arrays.get("weight")
    v = w.shape[0] if isinstance(w, np.ndarray) and w.ndim == 2 else 1
    start = data.draw(st.sampled_from([0, 1, 127, 128, 2**31 - 1, 2**31, 2**32 + 5, 2**62, INT64_MAX - v, -1, -v]),
                      label="start")
    end = start + v + data.draw(st.sampled_from([0, 0, 0, -1, 1]), label="end off by")
    case.scalars["vocab_start_index"], case.scalars["vocab_end_index"] = start, end
    t = case.arrays.get("target")
    if isinstance(t, np.ndarray) and t.dtype in INDEX_DTYPES and t.size and data.draw(st.booleans(), label="retarget"):
        rng = seeded_rng(data)
        info = np.iinfo(t.dtype)
        ids = [min(max(start + int(rng.integers(-2, v + 2)), info.min), info.max) for _ in range(t.size)]
        case.arrays["target"] = np.array(ids, np.int64).astype(t.dtype).reshape(t.shape)
    return 0 <= start and end == start + v <= INT64_MAX


def alias_output(case: Case, data) -> bool:
    """An output that shares memory with another array parameter: always rejected."""
    output = _pick(data, list(OUTPUTS[case.op]), "aliased output")
    if output is None:
        return True
    if case.arrays.get(output) is None:
        case.arrays[output] = output_like(case, output)
    if not isinstance(case.arrays[output], np.ndarray):
        case.arrays[output] = None
        return True
    other = _pick(data, [k for k in _array_names(case) if k != output], "aliased with")
    if other is None:
        return True
    a, b = case.arrays[other], case.arrays[output]
    if a.size == 0 or b.size == 0 or a.dtype.hasobject or b.dtype.hasobject:
        return True
    how = data.draw(st.sampled_from(["same-buffer", "shifted", "is"]), label="alias")
    if how == "is" and a.shape == b.shape and a.dtype == b.dtype:
        case.arrays[output] = a
        return False
    case.arrays[other], case.arrays[output] = overlapping(a, b, 0 if how == "same-buffer" else 1)
    return False


def inputs_share_memory(case: Case, data) -> bool:
    """Valid: two inputs are views of one buffer (tied embeddings: the input rows inside the
    weight's memory), their values whatever that buffer holds (fresh random values)."""
    names = [k for k in _array_names(case, outputs=False) if case.arrays[k].dtype.kind == "f"
             or case.arrays[k].dtype == BFLOAT16]
    pairs = [(p, q) for p in names for q in names if p < q and case.arrays[p].dtype == case.arrays[q].dtype
             and case.arrays[p].ndim and case.arrays[p].shape[1:] == case.arrays[q].shape[1:]
             and case.arrays[q].ndim and case.arrays[p].size and case.arrays[q].size]
    if not pairs:
        return True
    p, q = data.draw(st.sampled_from(pairs), label="shared")
    a, b = case.arrays[p], case.arrays[q]
    rng = seeded_rng(data)
    rows = max(a.shape[0], b.shape[0]) + data.draw(st.integers(0, 3), label="extra rows")
    buf = (rng.standard_normal((rows, *a.shape[1:])) * 0.5).astype(np.float32).astype(a.dtype)
    off_a = data.draw(st.integers(0, rows - a.shape[0]), label="offset a")
    off_b = data.draw(st.integers(0, rows - b.shape[0]), label="offset b")
    case.arrays[p], case.arrays[q] = buf[off_a:off_a + a.shape[0]], buf[off_b:off_b + b.shape[0]]
    return True


def read_only(case: Case, data) -> bool:
    """An array not writable: fine for an input, rejected for an output."""
    name = _pick(data, _array_names(case), "read-only")
    if name is None:
        return True
    case.arrays[name] = np.array(case.arrays[name])
    case.arrays[name].setflags(write=False)
    return name not in OUTPUTS[case.op]


def misaligned(case: Case, data) -> bool:
    """An array whose data is one byte off its element size."""
    names = [k for k in _array_names(case)
             if case.arrays[k].itemsize > 1 and case.arrays[k].size and case.arrays[k].dtype.kind not in "OUV"]
    name = _pick(data, names, "misaligned")
    if name is None:
        return True
    a = np.ascontiguousarray(case.arrays[name])
    raw = np.zeros(a.nbytes + 1, np.uint8)
    moved = raw[1:].view(a.dtype).reshape(a.shape)
    moved[...] = a
    case.arrays[name] = moved
    return False


_FLAG_BAD = [2, "yes", None, 1.0, -1, np.array([True]), "False"]
_REAL_BAD = [None, "5", float("nan"), float("inf"), -1.0, True, 1e39, [5.0], 0j, 10**400, np.bool_(False)]
BAD_SCALARS = {
    MAX_SUM: {
        "vocab_start_index": [1.0, 0.0, "0", None, True, -1, 1 << 63, np.float64(0), 2.5, [0]],
        "vocab_end_index": [1.0, "5", None, False, -1, 1 << 63, np.float32(3), 0],
        "softcap": _REAL_BAD,
        "ignore_index": [1.5, "-100", True, 1 << 63, np.float32(0), -(1 << 63) - 1],
        "return_logits": _FLAG_BAD,
        "return_sum_logits": _FLAG_BAD,
        "float32_logits": _FLAG_BAD,
        "logits_block": [2.5, -1, True, (1 << 16) + 1, "8", None, 1 << 70],
    },
    LOSS: {
        "label_smoothing": [None, "0", float("nan"), float("inf"), 1.5, -0.1, True, 0j, [0.0]],
        "vocab_size": [1.5, -1, True, "1000", None, 1 << 63, 0],
        "z_loss": [-1e-3, float("nan"), float("inf"), "0", None, True, 1e39],
        "ignore_index": [1.5, "-100", True, 1 << 63, np.float32(0)],
    },
    LCE: {
        "reduction": [0, 1, 2, None, "MEAN", "avg", b"mean", True, 1.0, ["mean"]],
        "ignore_index": [1.5, "-100", True, None, 1 << 63, np.float32(-100)],
        "label_smoothing": [None, "0.1", float("nan"), 1.5, -0.1, True, float("inf")],
        "z_loss": [-1e-3, float("nan"), float("inf"), "0", None, True, 1e39],
        "softcap": _REAL_BAD,
        "shards": [0, -1, 1.5, True, "2", 1 << 63, 10**6, np.float64(2)],
        "compute_grad": _FLAG_BAD,
        "chunk_rows": [-1, 1.5, True, "16", 1 << 63],
    },
}


def _spellings(v) -> list:
    """Other spellings of a valid scalar: the same call."""
    if isinstance(v, bool):
        return [np.bool_(v), int(v)]
    if isinstance(v, int):
        out = [np.int64(v)] if -(1 << 63) <= v < (1 << 63) else []
        out += [np.int32(v), np.array(v)] if -(1 << 31) <= v < (1 << 31) else []
        return out + ([np.uint64(v)] if 0 <= v < (1 << 64) else [])
    if isinstance(v, float):
        out = [np.float64(v), np.array(v)] + ([int(v)] if v.is_integer() else [])
        return out + ([np.float32(v)] if float(np.float32(v)) == v else [])
    if isinstance(v, str):
        return [np.str_(v)]
    return []


def bad_scalar(case: Case, data) -> bool:
    names = [k for k in BAD_SCALARS[case.op] if k in case.scalars or k in PARAMETERS[case.op]]
    name = _pick(data, names, "scalar")
    if name is None:
        return True
    if data.draw(st.booleans(), label="other spelling") and name in case.scalars:
        spellings = _spellings(case.scalars[name])
        if spellings:
            case.scalars[name] = data.draw(st.sampled_from(spellings), label="spelling")
        return True
    case.scalars[name] = data.draw(st.sampled_from(BAD_SCALARS[case.op][name]), label="bad value")
    return False


def drop_array(case: Case, data) -> bool:
    """An array left out (None): an output then comes fresh (valid); an input is missing."""
    name = _pick(data, [k for k, a in case.arrays.items() if a is not None], "dropped")
    if name is None:
        return True
    case.arrays[name] = None
    return name in OUTPUTS[case.op]


def lce_shards(case: Case, data) -> bool:
    """linear_cross_entropy: a shard of another H, dtype, or none at all; shards both as a
    list and by the parameter (all rejected)."""
    if case.op != LCE:
        return True
    how = data.draw(st.sampled_from(["empty", "other H", "other dtype", "both"]), label="shards broken")
    names = case.shard_names() or ["weight"]
    name = data.draw(st.sampled_from(names), label="shard")
    w = case.arrays.get(name)
    if not isinstance(w, np.ndarray) or w.ndim != 2:
        return False
    if how == "empty":
        case.arrays[name] = w[:0]
    elif how == "other H":
        case.arrays[name] = np.zeros((w.shape[0], w.shape[1] + 1), w.dtype)
    elif how == "other dtype":
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")  # complex or strings after wrong_dtype
            case.arrays[name] = np.zeros(w.shape, np.float16 if w.dtype != np.float16 else np.float32)
    elif case.shards is not None:
        case.scalars["shards"] = case.shards
    else:
        case.scalars["shards"] = w.shape[0] + 1
    return False


MUTATIONS = {
    "wrong_dtype": wrong_dtype, "wrong_shape": wrong_shape, "wrong_python_type": wrong_python_type,
    "strides": strides, "broadcast_input": broadcast_input, "zero_stride_output": zero_stride_output,
    "special_values": special_values, "extreme_row": extreme_row, "index_values": index_values,
    "shift_shard": shift_shard,
    "alias_output": alias_output, "inputs_share_memory": inputs_share_memory, "read_only": read_only,
    "misaligned": misaligned, "bad_scalar": bad_scalar, "drop_array": drop_array, "lce_shards": lce_shards,
}


def mutate(case: Case, data) -> bool:
    """Apply up to two mutations; whether the case is still valid by construction."""
    chosen = data.draw(st.lists(st.sampled_from(sorted(MUTATIONS)), max_size=2), label="mutations")
    valid = True
    for name in chosen:
        valid &= MUTATIONS[name](case, data)
    return valid


# -- valid cases -----------------------------------------------------------------------------------

# Around the fused nests' tiles (186 tokens x 176 vocabulary rows on this machine's default target,
# 64/128 elsewhere) and the vector widths, and small.
BT = st.one_of(st.integers(0, 12), st.sampled_from([15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 186, 187]))
H = st.one_of(st.integers(0, 12), st.sampled_from([15, 16, 17, 31, 33]))
V = st.one_of(st.integers(1, 12), st.sampled_from([15, 16, 17, 31, 33, 64, 65, 128, 129, 176, 177, 300]))


# Each a kernel of its own per dtype and target dtype: the options come from this list.
MAX_SUM_OPTIONS = [
    {},
    {"softcap": 5.0},
    {"ignore_index": -100},
    {"ignore_index": 3, "return_sum_logits": True},  # an id that may be in the shard
    {"return_logits": True, "return_sum_logits": True},
    {"softcap": 5.0, "ignore_index": -100, "return_logits": True, "return_sum_logits": True},
    {"return_logits": True, "float32_logits": True},
    {"logits_block": 16, "ignore_index": -100},
    {"logits_block": 1, "softcap": 5.0, "return_sum_logits": True},
]
MAX_SUM_OUTPUTS = list(OUTPUTS[MAX_SUM])


def draw_max_sum(data) -> Case:
    options = dict(data.draw(st.sampled_from(MAX_SUM_OPTIONS), label="options"))
    bt, h = data.draw(BT, label="BT"), data.draw(H, label="H")
    # A block of 16 columns is clamped to V below 16 (one block): a kernel per V, so V >= 16 there.
    v = data.draw(V.filter(lambda n: n >= 16) if options.get("logits_block") == 16 else V, label="V")
    if data.draw(st.integers(0, 11), label="large") == 0:  # past kernel.SMALL: the rows over the cores
        bt, h, v = (600, 8, 250) if options.get("return_logits") or options.get("logits_block") else (20, 33, 4100)
    start = data.draw(st.sampled_from([0, 0, 3, 100, 2**31 - 1, 2**40, INT64_MAX - v]), label="start")
    outputs = [k for k in MAX_SUM_OUTPUTS if data.draw(st.booleans(), label=f"{k} given")] \
        if data.draw(st.booleans(), label="outputs given") else []
    if "return_logits" in options and data.draw(st.booleans(), label="logits by logits_out"):
        del options["return_logits"]  # asked for by the array given instead of the flag
        outputs = sorted({*outputs, "logits_out"})
    return max_sum(seeded_rng(data), bt, h, v, data.draw(st.sampled_from(FLOATS), label="dtype"),
                   data.draw(st.sampled_from(INDEX_DTYPES), label="target dtype"), start, options, outputs,
                   scale=data.draw(st.sampled_from([1.0, 1.0, 2.0]), label="scale"))


LOSS_OPTIONS = [
    {},
    {"z_loss": 1e-3},
    {"label_smoothing": 0.1, "vocab_size": 1000},
    {"ignore_index": -100},
    {"ignore_index": 3},
    {"label_smoothing": 0.1, "vocab_size": 1000, "z_loss": 1e-3, "ignore_index": -100},
    {"vocab_size": 1000},
]


def draw_loss(data) -> Case:
    options = data.draw(st.sampled_from(LOSS_OPTIONS), label="options")
    logits = data.draw(st.booleans(), label="logits")
    v = data.draw(V, label="V") if logits else None
    outputs = [k for k in OUTPUTS[LOSS] if data.draw(st.booleans(), label=f"{k} given")]
    case = loss_with_max_sum(seeded_rng(data), data.draw(BT, label="BT"), v,
                             data.draw(st.sampled_from(FLOATS), label="dtype"),
                             data.draw(st.sampled_from(INDEX_DTYPES), label="target dtype"), options, outputs,
                             sum_logits=data.draw(st.booleans(), label="sum_logits"))
    if data.draw(st.booleans(), label="label_smoothing 0 given"):
        case.scalars.setdefault("label_smoothing", 0.0)
    return case


# (label_smoothing, z_loss, softcap): each set a few kernels of its own per dtype (label
# smoothing with the vocabulary K: K comes from a small set there).
LCE_OPTIONS = [(0.0, 0.0, 0.0), (0.1, 0.0, 0.0), (0.0, 1e-3, 0.0), (0.0, 0.0, 5.0), (0.1, 1e-3, 5.0)]
LCE_K_SMOOTHED = [37, 300]


def draw_lce(data) -> Case:
    alpha, zl, cap = data.draw(st.sampled_from(LCE_OPTIONS), label="options")
    dtype = data.draw(st.sampled_from(FLOATS), label="dtype")
    bt, h = data.draw(BT, label="BT"), data.draw(H, label="H")
    k = data.draw(st.sampled_from(LCE_K_SMOOTHED) if alpha else V, label="K")
    if not alpha and data.draw(st.integers(0, 11), label="large") == 0:  # past kernel.SMALL
        bt, h, k = data.draw(st.integers(0, 20), label="BT large"), 33, 4100
    how = data.draw(st.sampled_from(["one", "shards", "list"]), label="shards")
    cuts = []
    if how == "shards":
        how = data.draw(st.integers(1, min(4, k)), label="shard count")
        cuts = np.linspace(0, k, how + 1).astype(np.int64)[1:-1].tolist()  # as the API cuts
    elif how == "list":
        cuts = data.draw(st.lists(st.integers(1, k - 1), unique=True, max_size=3), label="cuts") if k > 1 else []
    ignore = data.draw(st.sampled_from([-100, -100, -1, 0]), label="ignore_index")
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]), label="reduction")
    options = {"reduction": reduction}
    for name, value in (("label_smoothing", alpha), ("z_loss", zl), ("softcap", cap)):
        if value or data.draw(st.booleans(), label=f"{name} 0 given"):
            options[name] = value
    ignored = data.draw(st.sampled_from([0.0, 0.0, 0.3, 1.0]), label="ignored")
    case = lce(seeded_rng(data), bt, h, k, dtype, how, cuts, ignored, ignore, options,
               scale=data.draw(st.sampled_from([1.0, 1.0, 2.0]), label="scale"),
               target_dtype=data.draw(st.sampled_from(INDEX_DTYPES), label="target dtype"))
    if not data.draw(st.integers(0, 3), label="compute_grad"):
        case.scalars["compute_grad"] = False
    rng = seeded_rng(data)
    upstream = data.draw(st.sampled_from(["none", "array", "python", "zeros"]), label="grad_output")
    count = bt if reduction == "none" else 1
    if upstream == "array":
        g = rng.uniform(-2, 2, count).astype(np.float32)
        g[rng.random(count) < 0.2] = 0
        case.arrays["grad_output"] = g.astype(data.draw(st.sampled_from([F32, np.dtype(dtype)]), label="grad dtype"))
    elif upstream == "zeros":
        case.arrays["grad_output"] = np.zeros(count, dtype)
    elif upstream == "python":
        case.arrays["grad_output"] = [2.0] * count if reduction == "none" else data.draw(
            st.sampled_from([0.5, 2, [3.0], np.float32(-1.5)]), label="upstream")
    # The schedule: recompute (0), the default, or chunks of rows (the chunked schedule where it
    # applies, else for bfloat16/float16 the recompute backward in chunks; float32 rejects it there).
    bounds = [0, *sorted(cuts), k]
    applies = not zl and not cap and min(b - a for a, b in zip(bounds[:-1], bounds[1:])) >= 128
    chunk = data.draw(st.sampled_from([None, None, 0, "rows"]), label="chunk_rows")
    if chunk == "rows" and (applies or dtype != F32):
        case.scalars["chunk_rows"] = data.draw(st.sampled_from([1, 5, 16, 64, 1000]), label="rows per chunk")
    elif chunk == 0:
        case.scalars["chunk_rows"] = 0
    if data.draw(st.integers(0, 4), label="group") == 0:
        case.scalars["group"] = Ranks()
    return case


DRAW = {MAX_SUM: draw_max_sum, LOSS: draw_loss, LCE: draw_lce}


def _fuzz_one(op: str, data) -> None:
    case = DRAW[op](data)
    valid = mutate(case, data)
    run(case, valid)


@fuzz(MAX_SUM)
@given(data=st.data())
def test_fuzz_fused_linear_online_max_sum(data):
    _fuzz_one(MAX_SUM, data)


@fuzz(LOSS)
@given(data=st.data())
def test_fuzz_fused_cross_entropy_loss_with_max_sum(data):
    _fuzz_one(LOSS, data)


@fuzz(LCE)
@given(data=st.data())
def test_fuzz_linear_cross_entropy(data):
    _fuzz_one(LCE, data)


@fuzz("types")
@given(data=st.data())
def test_fuzz_python_types_of_every_parameter(data):
    """Any of the three, any parameter, any Python object: a clean rejection or (lists,
    integers) a correct call."""
    op = data.draw(st.sampled_from(OPS), label="op")
    rng = seeded_rng(data)
    case = {MAX_SUM: lambda: max_sum(rng, outputs=["logits_max_out", "target_mask_out"]),
            LOSS: lambda: loss_with_max_sum(rng, v=6, outputs=["loss_out"]),
            LCE: lambda: lce(rng, shards="list", cuts=[7], options={"group": None})}[op]()
    for _ in range(data.draw(st.integers(1, 3), label="how many")):
        wrong_python_type(case, data)
    run(case, False)


# -- the judge itself ------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_whole_loss_reference_matches_torch_autograd(reduction):
    """forward_cases' float64 loss and gradients are PyTorch's: F.cross_entropy(softcap(X·Wᵀ),
    ignore_index, label_smoothing) + z_loss·lse² on the rows that count, reduced, its autograd
    scaled by grad_output (no kernel runs here)."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    rng = np.random.default_rng(7)
    options = {"label_smoothing": 0.1, "z_loss": 1e-3, "softcap": 3.0, "reduction": reduction}
    case = lce(rng, 23, 9, 41, F32, "list", [5, 30], ignored=0.3, options=options)
    g = rng.uniform(-2, 2, 23 if reduction == "none" else 1).astype(np.float32)
    g[:3] = 0
    case.arrays["grad_output"] = g
    want = case.expected()
    x, y = case.arrays["input"], case.arrays["target"]
    w = np.concatenate([case.arrays[n] for n in case.shard_names()])
    X = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    W = torch.tensor(w, dtype=torch.float64, requires_grad=True)
    Z = 3.0 * torch.tanh(X @ W.T / 3.0)
    Y = torch.tensor(y)
    keep = Y != -100
    per = F.cross_entropy(Z, Y, ignore_index=-100, label_smoothing=0.1, reduction="none")
    per = per + 1e-3 * torch.logsumexp(Z, 1) ** 2 * keep
    loss = {"mean": per.sum() / keep.sum(), "sum": per.sum(), "none": per}[reduction]
    (loss * torch.tensor(g, dtype=torch.float64)).sum().backward()
    np.testing.assert_allclose(want["loss"][0], loss.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(want["input_grad"][0], X.grad.numpy(), rtol=1e-10, atol=1e-12)
    dw = np.concatenate([part[0] for part in want["weight_grad"]])
    np.testing.assert_allclose(dw, W.grad.numpy(), rtol=1e-10, atol=1e-12)
