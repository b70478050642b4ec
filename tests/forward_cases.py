"""The three entry points FORWARD.md adds, as data for tests/test_fuzz_forward.py: one call of
fused_linear_online_max_sum (§1), fused_cross_entropy_loss_with_max_sum (§2) or
linear_cross_entropy (§3, §4: the whole loss, forward and backward), its arrays and scalars by
API parameter name, which parameters are outputs, and what the call must do.

`Case.expected()` is the judge. It first applies the rules a call must meet, written from
FORWARD.md and the API's documented conventions (ops/common.py: integers are Python or NumPy
integers but not bools, reals are real numbers but not bools and finite, flags are bools or
0/1; arrays are aligned, an array given for an output is writable, of the output's shape and
dtype, and shares memory with no other argument nor with itself), and raises `Rejected` where
one fails: the call must then raise a clean error. Otherwise it returns the outputs: for the two
forward ops the project's NumPy references (npugrad/reference/forward.py, float32), for
linear_cross_entropy a float64 computation written here from the spec (FORWARD.md §3, §4:
F.cross_entropy of softcap(X·Wᵀ) with label smoothing over the global vocabulary, + z_loss·lse²,
ignored rows giving 0 loss and 0 gradient, reduction mean/sum/none, grad_output scaling it).

Beside the values, a result may carry its error scale: the magnitude of the terms it is computed
from, in float64 (|X|·|W|ᵀ for the logits and what is made of them, |G|·|W| and |G|ᵀ·|X| for
the gradients). A result that cancels to about 0 (p = Z_y − m at a row of tied logits, Σ_v Z_tv,
a gradient element) carries its terms' rounding, which the harness's rule, relative to the
result's own magnitude, does not allow for; the tolerance applies to that scale too.
"""

from __future__ import annotations

import math
import numbers
import operator
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

from npugrad import ops
from npugrad.collectives import InProcess
from npugrad.dtypes import BFLOAT16
from npugrad.reference import forward, harness

MAX_SUM = "fused_linear_online_max_sum"
LOSS = "fused_cross_entropy_loss_with_max_sum"
LCE = "linear_cross_entropy"
OPS = (MAX_SUM, LOSS, LCE)

F32 = np.dtype(np.float32)
F16 = np.dtype(np.float16)
FLOATS = (F32, F16, BFLOAT16)
INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
U8 = np.dtype(np.uint8)
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
FLOAT32_MAX = float(np.finfo(np.float32).max)
MAX_LOGITS_BLOCK = 1 << 16
REDUCTIONS = ("mean", "sum", "none")
MIN_V_CHUNKED = 128  # high-performance mode's least shard rows: the chunked schedule's condition

# The results in the order the API returns them, and the output parameter of each that has one.
RESULTS = {
    MAX_SUM: ("logits_max", "sum_exp_logits", "predicted_logits", "target_mask", "masked_target", "logits",
              "sum_logits", "logits_block_max"),
    LOSS: ("loss", "softmax"),
    LCE: ("loss", "input_grad", "weight_grad"),
}
OUTPUTS = {  # output parameter -> result
    MAX_SUM: {"logits_max_out": "logits_max", "sum_exp_logits_out": "sum_exp_logits",
              "predicted_logits_out": "predicted_logits", "target_mask_out": "target_mask",
              "masked_target_out": "masked_target", "logits_out": "logits", "sum_logits_out": "sum_logits",
              "logits_block_max_out": "logits_block_max"},
    LOSS: {"loss_out": "loss", "softmax_out": "softmax"},
    LCE: {},
}


class Rejected(Exception):
    """The rules say the call is invalid: it must be rejected cleanly."""


class Ranks:
    """A group that is not the in-process one (the one rank of a group of one): the targets are
    then checked through the collectives, not up front."""

    def all_reduce(self, values, op):
        return InProcess().all_reduce(values, op)


@dataclass
class Case:
    op: str
    arrays: dict[str, object]  # API parameter name (weight[i]: one of the shards given as a list) -> value
    scalars: dict[str, object] = field(default_factory=dict)
    shards: int | None = None  # linear_cross_entropy's weight given as a list of this many arrays

    def shard_names(self) -> list[str]:
        return [f"weight[{i}]" for i in range(self.shards or 0)]

    def kwargs(self) -> dict[str, object]:
        kw = {k: v for k, v in self.arrays.items() if not k.startswith("weight[")}
        if self.shards is not None:
            kw["weight"] = [self.arrays[k] for k in self.shard_names()]
        return kw | self.scalars

    def call(self) -> dict[str, object]:
        """Run the API function; its results by name."""
        return dict(zip(RESULTS[self.op], getattr(ops, self.op)(**self.kwargs()), strict=True))

    def written(self) -> dict[str, np.ndarray]:
        """The caller's arrays the call may write: the outputs given."""
        return {k: a for k, a in self.arrays.items() if k in OUTPUTS[self.op] and isinstance(a, np.ndarray)}

    def ndarrays(self) -> dict[str, np.ndarray]:
        return {k: a for k, a in self.arrays.items() if isinstance(a, np.ndarray)}

    def expected(self) -> dict[str, tuple | list | None]:
        """Each result: None where there is none, else (values, dtype) (a list of those for
        weight_grad given as shards). Raises Rejected where the call is invalid."""
        return {MAX_SUM: _expected_max_sum, LOSS: _expected_loss, LCE: _expected_lce}[self.op](self)

    def copy(self) -> Case:
        arrays = {k: np.array(v) if isinstance(v, np.ndarray) else v for k, v in self.arrays.items()}
        return Case(self.op, arrays, dict(self.scalars), self.shards)


# -- the rules -----------------------------------------------------------------------------------------


def _int(value, lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
    if isinstance(value, bool | np.bool_):
        raise Rejected("a bool for an integer")
    try:
        v = operator.index(value)
    except TypeError:
        raise Rejected(f"not an integer: {value!r}") from None
    if not lo <= v <= hi:
        raise Rejected(f"integer {v} outside [{lo}, {hi}]")
    return v


def _real(value, float32: bool = False) -> float:
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        value = value[()]  # a 0-d array of numbers: its number
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise Rejected(f"not a real number: {value!r}")
    try:
        v = float(value)
    except OverflowError:
        raise Rejected("beyond the float range") from None
    if not math.isfinite(v) or float32 and abs(v) > FLOAT32_MAX:
        raise Rejected(f"not finite: {v}")
    return v


def _flag(value) -> bool:
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer) and value in (0, 1):
        return bool(value)
    raise Rejected(f"not a flag: {value!r}")


def _array(value) -> np.ndarray:
    """An input: an aligned ndarray, or numbers and (nested) lists read as one."""
    if isinstance(value, np.ndarray):
        if not value.flags.aligned:
            raise Rejected("misaligned")
        return value
    if isinstance(value, np.generic | int | float | bool | list | tuple):
        try:
            a = np.asarray(value)
        except (ValueError, TypeError, OverflowError):
            raise Rejected("cannot be read as an array") from None
        return a
    raise Rejected(f"not an array: {type(value).__name__}")


def _overlaps_itself(a: np.ndarray) -> bool:
    if a.size <= 1 or a.flags.c_contiguous or a.flags.f_contiguous:
        return False
    offsets = np.zeros((), np.int64)
    for stride, n in zip(a.strides, a.shape):
        offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * stride)
    flat = np.sort(offsets, axis=None)
    return bool(np.any(np.diff(flat) < a.itemsize))


def _outputs(case: Case, specs: dict[str, tuple[tuple[int, ...], np.dtype] | None]) -> None:
    """The outputs given: ndarrays, writable, aligned, each of its spec's (shape, dtype) (a spec
    of None: the output does not exist in this call, so none may be given), no element sharing
    memory with another, nor with any other array argument."""
    given = {k: v for k, v in case.arrays.items() if k in OUTPUTS[case.op] and v is not None}
    for name, out in given.items():
        spec = specs.get(name)
        if spec is None:
            raise Rejected(f"output {name} given where the call has none")
        if not isinstance(out, np.ndarray) or not out.flags.writeable or not out.flags.aligned:
            raise Rejected(f"output {name} not a writable aligned array")
        if out.shape != spec[0] or out.dtype != spec[1]:
            raise Rejected(f"output {name} of shape {out.shape} {out.dtype}, not {spec}")
        if _overlaps_itself(out):
            raise Rejected(f"output {name} overlaps itself")
        for other, a in case.ndarrays().items():
            if other != name and np.shares_memory(out, a):
                raise Rejected(f"output {name} overlaps {other}")


def _f32(values, scale=None) -> tuple:
    return (np.asarray(values, F32), F32) if scale is None else (np.asarray(values, F32), F32, scale)


def _abs_logits(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Σ_h |x_th|·|w_vh| in float64: the magnitude of the terms of each logit (its error scale)."""
    with np.errstate(all="ignore"):
        return np.einsum("th,vh->tv", np.abs(np.asarray(x, np.float64)), np.abs(np.asarray(w, np.float64)))


def _row_max(a: np.ndarray) -> np.ndarray:
    return a.max(axis=1) if a.shape[1] else np.zeros(a.shape[0])


# -- fused_linear_online_max_sum (FORWARD.md §1, §4) -----------------------------------------------


def _expected_max_sum(case: Case):
    a, s = case.arrays, case.scalars
    if "vocab_start_index" not in s or "vocab_end_index" not in s:
        raise Rejected("the shard is required")
    start, end = _int(s["vocab_start_index"]), _int(s["vocab_end_index"])
    cap = _real(s.get("softcap", 0.0), float32=True)
    ignore = None if s.get("ignore_index") is None else _int(s["ignore_index"])
    want_logits = _flag(s.get("return_logits", False))
    want_sum = _flag(s.get("return_sum_logits", False))
    wide = _flag(s.get("float32_logits", False))
    block = _int(s.get("logits_block", 0))
    if cap < 0 or not 0 <= block <= MAX_LOGITS_BLOCK or (block and wide):
        raise Rejected("softcap, logits_block or float32_logits")
    x, w, t = (_array(a.get(k)) for k in ("input", "weight", "target"))
    if x.dtype not in FLOATS or w.dtype != x.dtype or t.dtype not in INDEX_DTYPES:
        raise Rejected("dtypes")
    if x.ndim != 2 or w.ndim != 2 or t.ndim != 1:
        raise Rejected("ranks")
    bt, h = x.shape
    v = w.shape[0]
    if w.shape[1] != h or t.shape != (bt,) or start < 0 or end - start != v or v == 0:
        raise Rejected("shapes or shard")
    want_logits = want_logits or a.get("logits_out") is not None or block > 0
    want_sum = want_sum or a.get("sum_logits_out") is not None
    logits_dtype = F16 if block else F32 if wide else x.dtype
    _outputs(case, {
        "logits_max_out": ((bt,), F32), "sum_exp_logits_out": ((bt,), F32), "predicted_logits_out": ((bt,), F32),
        "target_mask_out": ((-(-bt // 8),), U8), "masked_target_out": ((bt,), t.dtype),
        "logits_out": ((bt, v), logits_dtype) if want_logits else None,
        "sum_logits_out": ((bt,), F32) if want_sum else None,
        "logits_block_max_out": ((bt, -(-v // block)), F32) if block else None,
    })
    # In int64: an int32 target minus a start beyond int32 would overflow NumPy's arithmetic (the
    # ids in the shard, target - start < V, fit the target's dtype).
    st = forward.fused_linear_online_max_sum(np.array(x), np.array(w), np.array(t, np.int64), start, end,
                                             softcap=cap, ignore_index=ignore, return_logits=want_logits,
                                             float32_logits=wide, logits_block=block)
    terms = _abs_logits(x, w)
    row = _row_max(terms)  # a row's logits, m and p = Z_y − m are within rounding of this
    return {
        "logits_max": _f32(st.logits_max, row), "sum_exp_logits": _f32(st.sum_exp_logits, st.sum_exp_logits * row),
        "predicted_logits": _f32(st.predicted_logits, row), "target_mask": (st.target_mask, U8),
        "masked_target": (st.masked_target.astype(t.dtype), t.dtype),
        "logits": ((st.logits, logits_dtype) if block else (st.logits, logits_dtype, terms)) if want_logits else None,
        "sum_logits": _f32(st.sum_logits, terms.sum(axis=1)) if want_sum else None,
        "logits_block_max": _f32(st.logits_block_max, row[:, None]) if block else None,
    }


# -- fused_cross_entropy_loss_with_max_sum (FORWARD.md §2, §4) -------------------------------------


def _expected_loss(case: Case):
    a, s = case.arrays, case.scalars
    alpha = _real(s.get("label_smoothing", 0.0))
    k = _int(s.get("vocab_size", 0))
    zl = _real(s.get("z_loss", 0.0), float32=True)
    ignore = None if s.get("ignore_index") is None else _int(s["ignore_index"])
    if not 0 <= alpha <= 1 or k < 0 or zl < 0:
        raise Rejected("label_smoothing, vocab_size or z_loss out of range")
    m, se, p = (_array(a.get(n)) for n in ("logits_max", "sum_exp_logits", "predicted_logits"))
    if any(x.dtype != F32 or x.ndim != 1 for x in (m, se, p)) or not m.shape == se.shape == p.shape:
        raise Rejected("statistics: float32 (BT,)")
    bt = m.shape[0]
    logits = None if a.get("vocab_parallel_logits") is None else _array(a["vocab_parallel_logits"])
    sum_z = None if a.get("sum_logits") is None else _array(a["sum_logits"])
    target = None if a.get("target") is None else _array(a["target"])
    v = None
    if logits is not None:
        if logits.ndim != 2 or logits.dtype not in FLOATS or logits.shape[0] != bt:
            raise Rejected("vocab_parallel_logits")
        v = logits.shape[1]
    if sum_z is not None and (sum_z.dtype != F32 or sum_z.shape != (bt,)):
        raise Rejected("sum_logits")
    if (ignore is None) != (target is None):
        raise Rejected("ignore_index and target go together")
    if target is not None and (target.dtype not in INDEX_DTYPES or target.shape != (bt,)):
        raise Rejected("target")
    if alpha and (sum_z is None or k < max(1, v or 0)):
        raise Rejected("label smoothing needs sum_logits and vocab_size >= V")
    # The softmax exists only with the logits: an array given for it without them could not be
    # written, and would not be the array returned (decided: rejected, as the op's rule 'both or
    # neither' and fused_linear_online_max_sum's logits_block_max_out without logits_block are).
    _outputs(case, {"loss_out": ((bt,), F32), "softmax_out": None if logits is None else ((bt, v), F32)})
    with np.errstate(all="ignore"):
        loss, softmax = forward.fused_cross_entropy_loss_with_max_sum(
            np.array(m), np.array(se), np.array(p), label_smoothing=alpha, vocab_size=k,
            sum_logits=None if sum_z is None else np.array(sum_z), z_loss=zl,
            target=None if target is None else np.array(target), ignore_index=ignore,
            vocab_parallel_logits=None if logits is None else np.array(logits))
    with np.errstate(all="ignore"):
        m64, log_s, p64 = (np.abs(np.asarray(z, np.float64)) for z in (m, np.log(np.asarray(se, np.float64)), p))
        scale = log_s + p64
        if alpha:
            scale = scale + alpha * (p64 + m64 + np.abs(np.asarray(sum_z, np.float64)) / k)
        if zl:
            scale = scale + zl * (m64 + log_s) ** 2
    return {"loss": _f32(loss, scale), "softmax": None if softmax is None else _f32(softmax)}


# -- linear_cross_entropy (FORWARD.md §3, §4), in float64 ------------------------------------------


def _weights(case: Case) -> tuple[list[np.ndarray], bool]:
    """The shards, and whether one weight array was given (its gradient is then one array)."""
    s = case.scalars
    weight = [case.arrays[k] for k in case.shard_names()] if case.shards is not None else case.arrays.get("weight")
    if isinstance(weight, list | tuple):
        if s.get("shards") is not None or not weight:
            raise Rejected("shards of a list, or no shard")
        return [_array(w) for w in weight], False
    w = _array(weight)
    count = 1 if s.get("shards") is None else _int(s["shards"], 1)
    if w.ndim != 2 or count > max(w.shape[0], 1):
        raise Rejected("weight rank, or more shards than rows")
    cuts = np.linspace(0, w.shape[0], count + 1).astype(np.int64)
    return [w[lo:hi] for lo, hi in zip(cuts[:-1], cuts[1:])], True


def _grad_output(g, count: int) -> np.ndarray:
    """grad_output as `count` float64 values (read as float32, as the API documents): real
    numbers, a float array of any float dtype (bfloat16 too: the API's dtypes), or Python
    numbers and lists of them."""
    python = not isinstance(g, np.ndarray)
    g = _array(g)
    if not (g.dtype.kind == "f" or g.dtype == BFLOAT16 or (python and g.dtype.kind in "iu")):
        raise Rejected("grad_output dtype")
    if g.size != count:
        raise Rejected("grad_output size")
    return np.asarray(g, F32).reshape(count).astype(np.float64)


def _expected_lce(case: Case):
    s = case.scalars
    reduction = s.get("reduction", "mean")
    if not isinstance(reduction, str) or reduction not in REDUCTIONS:
        raise Rejected("reduction")
    ignore = _int(s.get("ignore_index", -100))
    alpha = _real(s.get("label_smoothing", 0.0))
    zl = _real(s.get("z_loss", 0.0), float32=True)
    cap = _real(s.get("softcap", 0.0), float32=True)
    if not 0 <= alpha < 1 or zl < 0 or cap < 0:
        raise Rejected("an option out of its range")
    want_grad = _flag(s.get("compute_grad", True))
    chunk = None if s.get("chunk_rows") is None else _int(s["chunk_rows"], 0)
    group = s.get("group")
    if group is not None and not callable(getattr(group, "all_reduce", None)):
        raise Rejected("group has no all_reduce")
    x = _array(case.arrays.get("input"))
    y = _array(case.arrays.get("target"))
    ws, joined = _weights(case)
    if x.dtype not in FLOATS or x.ndim != 2 or y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise Rejected("input or target")
    for w in ws:
        if w.ndim != 2 or w.shape[1] != x.shape[1] or w.shape[0] == 0 or w.dtype != x.dtype:
            raise Rejected("a shard")
    if y.dtype not in INDEX_DTYPES:  # the docstring's (and the forward op's) int32/int64
        raise Rejected("target dtype")
    bt, h = x.shape
    k = sum(w.shape[0] for w in ws)
    ids = y.tolist()  # Python ints: any integer dtype, compared without overflow
    keep = np.array([t != ignore for t in ids], bool)
    if any(t != ignore and not 0 <= t < k for t in ids):
        raise Rejected("a target in no shard")
    applies = not zl and not cap and min(w.shape[0] for w in ws) >= MIN_V_CHUNKED
    if chunk and x.dtype == F32 and not applies:
        raise Rejected("chunk_rows without the chunked schedule")
    g = None
    if case.arrays.get("grad_output") is not None:
        g = _grad_output(case.arrays["grad_output"], bt if reduction == "none" else 1)

    rows = np.flatnonzero(keep)
    n = rows.size
    xk = np.asarray(x, np.float64)[rows]
    yk = np.array([ids[r] for r in rows], np.int64).reshape(n)
    wf = np.concatenate([np.asarray(w, np.float64) for w in ws]) if ws else np.zeros((0, h))
    with np.errstate(all="ignore"):
        # einsum, not matmul: products and sums as written (no BLAS shortcut around a 0·Inf).
        z = np.einsum("th,vh->tv", xk, wf)
        terms = _abs_logits(xk, wf)
        row = _row_max(terms)
        if cap:
            z = cap * np.tanh(z / cap)
        big_m = z.max(axis=1) if n else np.zeros(0)
        big_s = np.exp(z - big_m[:, None]).sum(axis=1)
        big_p = z[np.arange(n), yk] - big_m  # the target's logit minus the global max (§3)
        if alpha:  # §4's lse − (1 − α)·z_y − (α/K)·Σ z, as written: a −∞ target logit gives +∞ (PyTorch's)
            per = np.log(big_s) - (1 - alpha) * big_p + alpha * (big_m - z.sum(axis=1) / k)
        else:
            per = np.log(big_s) - big_p
        lse = big_m + np.log(big_s)
        if zl:
            per = per + zl * lse * lse
        # The magnitude of each row's terms (with the logits' rounding, `row`).
        size = np.abs(big_m) + np.abs(np.log(big_s)) + np.abs(big_p) + row
        if alpha:
            size = size + alpha * (np.abs(big_p) + np.abs(big_m) + np.abs(z).sum(axis=1) / k + row)
        if zl:
            size = size + zl * (np.abs(big_m) + np.abs(np.log(big_s)) + row) ** 2
        if reduction == "none":
            loss, scale = np.zeros(bt), np.zeros(bt)
            loss[rows], scale[rows] = per, size
        else:
            loss = np.asarray(per.sum() / n if n else np.nan) if reduction == "mean" else np.asarray(per.sum())
            scale = np.asarray(size.sum() / max(n, 1) if reduction == "mean" else size.sum())
        result = {"loss": (loss, F32, scale), "input_grad": None, "weight_grad": None}
        if not want_grad:
            return result
        if reduction == "none":
            weights = np.ones(n) if g is None else g[rows]
        else:
            factor = (1.0 / n if n else 0.0) if reduction == "mean" else 1.0
            weights = np.full(n, factor * (1.0 if g is None else g[0]))
        prob = np.exp(z - big_m[:, None]) / big_s[:, None]
        d = prob + 2 * zl * lse[:, None] * prob if zl else prob.copy()
        if alpha:
            d = d - alpha / k
        d[np.arange(n), yk] -= 1 - alpha
        # The magnitude of G's terms before the softcap's factor 1 − (Z'/c)² (at most 1, and
        # near 0 a difference that cancels): P (with its rounding through the logits, P·row),
        # 2λ·lse·P, α/K and (1 − α) at the target: the error scale of G, and so of the gradients
        # (with K = 1, P = 1 and G = 2λ·lse cancels 1 − 1).
        before_cap = prob * (1 + row[:, None]) + (2 * zl * np.abs(lse)[:, None] * prob if zl else 0) + alpha / k
        before_cap[np.arange(n), yk] += 1 - alpha
        if cap:
            d = d * (1 - (z / cap) ** 2)
        live = np.flatnonzero(weights != 0)  # a row with g = 0 contributes nothing (§4), whatever it holds
        grad_logits = d[live] * weights[live, None]
        size = before_cap[live] * np.abs(weights[live, None])
        dx, dx_scale = np.zeros((bt, h)), np.zeros((bt, h))
        dx[rows[live]] = np.einsum("tv,vh->th", grad_logits, wf)
        dx_scale[rows[live]] = np.einsum("tv,vh->th", size, np.abs(wf))
        dw = np.einsum("tv,th->vh", grad_logits, xk[live])
        dw_scale = np.einsum("tv,th->vh", size, np.abs(xk[live])) * _rounded_per_chunk(x.dtype, n, chunk)
    result["input_grad"] = (dx, x.dtype, dx_scale)
    if joined:
        result["weight_grad"] = (dw, x.dtype, dw_scale)
    else:
        cuts = np.cumsum([0] + [w.shape[0] for w in ws])
        result["weight_grad"] = [(dw[lo:hi], x.dtype, dw_scale[lo:hi]) for lo, hi in zip(cuts[:-1], cuts[1:])]
    return result


def _rounded_per_chunk(dtype: np.dtype, rows: int, chunk: int | None) -> float:
    """The factor on dW's error scale for a bfloat16/float16 dW rounded to its dtype once per
    chunk of `chunk` rows (ops/loss.py: each chunk adds its float32 dW into the rounded
    gradient): c = ceil(rows / chunk) roundings, each within u·|partial sum| <= u·(the terms'
    magnitude), u the dtype's unit roundoff; so c·u·scale, where the tolerance allows tol·scale.
    1 for float32 (accumulated in float32), for one chunk and for the default schedule."""
    if not chunk or dtype == F32:
        return 1.0
    unit = 2.0 ** -(ml_dtypes.finfo(dtype).nmant + 1)
    return max(1.0, -(-rows // chunk) * unit / harness.tolerance(dtype))


# -- valid calls ---------------------------------------------------------------------------------------


def _values(rng, shape, dtype, scale: float = 1.0) -> np.ndarray:
    h = shape[-1] if shape else 1
    return (rng.standard_normal(shape) * scale / max(h, 1) ** 0.25).astype(np.float32).astype(dtype)


def shard_targets(rng, bt: int, start: int, v: int, dtype, ignore: int | None = None) -> np.ndarray:
    """Global ids: inside the shard, just below and just above it, far outside, negative,
    and `ignore` on some rows."""
    end = start + v
    info = np.iinfo(dtype)
    values = []
    for kind in rng.integers(0, 6, bt):
        if kind <= 1:
            t = start + int(rng.integers(0, v))
        elif kind == 2:
            t = start - 1 - int(rng.integers(0, v))
        elif kind == 3:
            t = end + int(rng.integers(0, v))
        elif kind == 4:
            t = int(rng.choice([-100, -1, 0, info.max, info.min, start, end - 1, end]))
        else:
            t = ignore if ignore is not None else -100
        values.append(t if info.min <= t <= info.max else int(rng.integers(info.min, info.max, endpoint=True)))
    return np.array(values, dtype=np.int64).astype(dtype) if values else np.zeros(0, dtype)


def max_sum(rng, bt=5, h=7, v=9, dtype=F32, target_dtype=np.int64, start=0, options=None, outputs=(),
            scale: float = 1.0) -> Case:
    """A valid call; `options` its keyword options (softcap, ignore_index, return_logits, ...),
    `outputs` the output parameters given (NaN-filled arrays of the right shape and dtype)."""
    options = dict(options or {})
    dtype = np.dtype(dtype)
    arrays = {"input": _values(rng, (bt, h), dtype, scale), "weight": _values(rng, (v, h), dtype, scale),
              "target": shard_targets(rng, bt, start, v, np.dtype(target_dtype), options.get("ignore_index"))}
    case = Case(MAX_SUM, arrays, {"vocab_start_index": start, "vocab_end_index": start + v, **options})
    for name in outputs:
        template = output_like(case, name)
        if template is not None:
            arrays[name] = template
    return case


def loss_with_max_sum(rng, bt=5, v=None, logits_dtype=F32, target_dtype=np.int64, options=None, outputs=(),
                      sum_logits=False) -> Case:
    """A valid call: the global statistics (BT,), and with `v` a shard's logits (BT, V)."""
    options = dict(options or {})
    m = (rng.standard_normal(bt) * 3).astype(np.float32)
    arrays = {"logits_max": m, "sum_exp_logits": rng.uniform(1.0, 300.0, bt).astype(np.float32),
              "predicted_logits": -rng.uniform(0.0, 5.0, bt).astype(np.float32)}
    if v is not None:
        logits = (m[:, None] - rng.uniform(0, 6, (bt, v))).astype(np.float32)
        arrays["vocab_parallel_logits"] = logits.astype(logits_dtype)
    if sum_logits or options.get("label_smoothing"):
        arrays["sum_logits"] = (rng.standard_normal(bt) * 50).astype(np.float32)
    if options.get("ignore_index") is not None:
        ignore = options["ignore_index"]
        arrays["target"] = np.where(rng.random(bt) < 0.3, ignore, rng.integers(0, 1000, bt)).astype(target_dtype)
    case = Case(LOSS, arrays, options)
    for name in outputs:
        template = output_like(case, name)
        if template is not None:
            arrays[name] = template
    return case


def lce(rng, bt=6, h=8, k=20, dtype=F32, shards="one", cuts=None, ignored=0.0, ignore_index=-100, options=None,
        scale: float = 1.0, target_dtype=np.int64) -> Case:
    """A valid call of linear_cross_entropy: `shards` 'one' (one weight), an int (that many
    equal-ish shards by the parameter), or 'list' (the shards given as arrays, split at `cuts`,
    uneven)."""
    dtype = np.dtype(dtype)
    x = _values(rng, (bt, h), dtype, scale)
    w = _values(rng, (k, h), dtype, scale)
    y = rng.integers(0, k, bt)
    y = np.where(rng.random(bt) < ignored, ignore_index, y).astype(target_dtype)
    scalars = {"ignore_index": ignore_index, **(options or {})}
    arrays = {"input": x, "target": y}
    count = None
    if shards == "list":
        bounds = [0, *sorted(cuts or []), k]
        count = len(bounds) - 1
        for i in range(count):
            arrays[f"weight[{i}]"] = np.ascontiguousarray(w[bounds[i]:bounds[i + 1]])
    else:
        arrays["weight"] = w
        if shards != "one":
            scalars["shards"] = shards
    return Case(LCE, arrays, scalars, count)


def output_like(case: Case, name: str) -> np.ndarray | None:
    """A NaN-filled (or, for integers, filled with a marker) array of the shape and dtype output
    `name` has in this call, if the arrays it derives from are there and the call has it."""
    a, s = case.arrays, case.scalars
    try:
        if case.op == MAX_SUM:
            x, w, t = (a.get(n) for n in ("input", "weight", "target"))
            if not all(isinstance(z, np.ndarray) for z in (x, w, t)) or x.ndim != 2 or w.ndim != 2:
                return None
            bt, v = x.shape[0], w.shape[0]
            block = s.get("logits_block", 0)
            specs = {"logits_max_out": ((bt,), F32), "sum_exp_logits_out": ((bt,), F32),
                     "predicted_logits_out": ((bt,), F32), "target_mask_out": ((-(-bt // 8),), U8),
                     "masked_target_out": ((bt,), t.dtype), "sum_logits_out": ((bt,), F32),
                     "logits_out": ((bt, v), F16 if block else F32 if s.get("float32_logits") else x.dtype)}
            if block:
                specs["logits_block_max_out"] = ((bt, -(-v // block)), F32)
        elif case.op == LOSS:
            m, logits = a.get("logits_max"), a.get("vocab_parallel_logits")
            if not isinstance(m, np.ndarray) or m.ndim != 1:
                return None
            specs = {"loss_out": ((m.shape[0],), F32)}
            if isinstance(logits, np.ndarray) and logits.ndim == 2:
                specs["softmax_out"] = (logits.shape, F32)
        else:
            return None
    except TypeError:  # a scalar of another type in the shape's arithmetic
        return None
    spec = specs.get(name)
    if spec is None:
        return None
    shape, dtype = spec
    if dtype.kind in "iu":
        return np.full(shape, 0x5A, dtype)
    return np.full(shape, np.nan, dtype)
