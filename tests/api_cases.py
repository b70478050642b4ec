"""One valid call of each op's Python API, as data: the arrays and scalars by API parameter name,
which parameters are outputs (written by the call), and the reference's answer. The overlap,
guard-page and fuzz tests build these, change them, and run them."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pytest

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

BCE = "binary_cross_entropy_grad"
NLL = "nll_loss_backward"
EMBEDDING = "embedding_dense_backward"
EMA_ADAM = "apply_fused_ema_adam"
FLCE = "fused_linear_cross_entropy_loss_grad"
OPS = (BCE, NLL, EMBEDDING, EMA_ADAM, FLCE)
# How the fuzz cases ended, for the session summary (see conftest.pytest_terminal_summary).
OUTCOMES: Counter[str] = Counter()

# The API's output parameters, in the order the API returns them, and the reference's names.
OUTPUTS = {
    BCE: {"out": "dx"},
    NLL: {"out": "out"},
    EMBEDDING: {"out": "out"},
    EMA_ADAM: {"var": "var", "m": "m", "v": "v", "s": "s"},
    FLCE: {"input_grad_out": "input_grad_out", "weight_grad_out": "weight_grad_out"},
}


@dataclass
class Case:
    op: str
    arrays: dict[str, np.ndarray | None]  # API name -> array: inputs, and outputs when given
    scalars: dict[str, object] = field(default_factory=dict)

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(OUTPUTS[self.op])

    def written(self) -> dict[str, np.ndarray]:
        """The caller's arrays the call may write: given outputs (EMA-Adam's states are always given)."""
        return {k: a for k, a in self.arrays.items() if k in OUTPUTS[self.op] and isinstance(a, np.ndarray)}

    def call(self) -> dict[str, np.ndarray]:
        """Run the API function; its results by output parameter name."""
        got = getattr(ops, self.op)(**self.arrays, **self.scalars)
        got = got if isinstance(got, tuple) else (got,)
        return dict(zip(self.outputs, got))

    def expected(self) -> dict[str, np.ndarray]:
        """The float32 reference, by output parameter name (computed before any in-place update)."""
        want = harness.expected(self.op, *self._reference_arguments())
        return {api: want[ref] for api, ref in OUTPUTS[self.op].items()}

    def magnitudes(self) -> dict[str, np.ndarray]:
        """Σ|terms| of each element of the outputs that are sums, by output parameter name."""
        mag = harness.magnitudes(self.op, *self._reference_arguments())
        return {api: mag[ref] for api, ref in OUTPUTS[self.op].items() if ref in mag}

    def _reference_arguments(self) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        """The reference's arrays (copies) and properties for this call."""
        a = {k: np.array(v) for k, v in self.arrays.items() if v is not None}
        s = dict(self.scalars)
        if self.op == BCE:
            a["weight"] = a.get("weight")
            props = {"reduction": s.get("reduction", 1)}
        elif self.op == NLL:
            a["weight"] = a.get("weight") if a.get("weight") is not None else np.ones(a["self"].shape[-1:], np.float32)
            props = {"reduction": s["reduction"], "ignore_index": s["ignore_index"]}
        elif self.op == EMBEDDING:
            props = {"num_weights": s["num_weights"], "padding_idx": s.get("padding_idx", -1),
                     "scale_grad_by_freq": s.get("scale_grad_by_freq", False)}
        elif self.op == EMA_ADAM:
            a["step"] = np.array(s.get("step", self.arrays.get("step")), np.int64).reshape(-1)
            props = {k: v for k, v in s.items() if k != "step"}
        else:
            props = {"label_smoothing": s.get("label_smoothing", 0.0)}
        return a, props

    def snapshot(self) -> dict[str, bytes]:
        """The bytes of every array, to check that a rejected call wrote nothing."""
        return {k: a.tobytes() for k, a in self.arrays.items() if isinstance(a, np.ndarray)}

    def rejected(self, match: str | None) -> str:
        """Call, expecting a ValueError whose message matches `match` (a regex; None: any message,
        for a caller that checks it itself) and no array written; returns the message."""
        before = self.snapshot()
        with pytest.raises(ValueError, match=match) as info:
            self.call()
        assert self.snapshot() == before, "a rejected call wrote to the caller's arrays"
        return str(info.value)

    def copy(self) -> Case:
        arrays = {k: None if v is None else np.array(v) for k, v in self.arrays.items()}
        return Case(self.op, arrays, dict(self.scalars))


def bce(rng, shape=(5, 7), dtype=np.float32, reduction=1, weighted=True, out=False) -> Case:
    shapes = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
    if weighted:
        shapes["weight"] = shape
    a = harness.random_operands(BCE, shapes, dict.fromkeys(shapes, dtype), {}, rng)
    arrays = {k: a.get(k) for k in ("input_x", "input_y", "dloss", "weight")}
    arrays["out"] = np.full(shape, np.nan, dtype) if out else None
    return Case(BCE, arrays, {"reduction": reduction})


def nll(rng, n=6, c=5, dtype=np.float32, target_dtype=np.int64, reduction=1, ignore_index=-100, one_d=False,
        out=False) -> Case:
    per_sample = reduction == 0 and not one_d
    shapes = {"grad_output": (n,) if per_sample else (), "self": (c,) if one_d else (n, c),
              "target": () if one_d else (n,), "weight": (c,), "total_weight": (1,)}
    dts = dict.fromkeys(shapes, dtype) | {"target": target_dtype}
    a = harness.random_operands(NLL, shapes, dts, {"ignore_index": ignore_index}, rng)
    arrays = dict(a) | {"out": np.full(shapes["self"], np.nan, dtype) if out else None}
    return Case(NLL, arrays, {"reduction": reduction, "ignore_index": ignore_index})


def embedding(rng, grad_shape=(6, 4), indices_shape=(6,), num_weights=5, dtype=np.float32, index_dtype=np.int64,
              padding_idx=-1, scale=False, out=False, out_dtype=None) -> Case:
    props = {"num_weights": num_weights, "padding_idx": padding_idx}
    a = harness.random_operands(EMBEDDING, {"grad": grad_shape, "indices": indices_shape},
                                {"grad": dtype, "indices": index_dtype}, props, rng)
    d = grad_shape[-1] if grad_shape else 0
    arrays = dict(a) | {"out": np.full((num_weights, d), np.nan, out_dtype or dtype) if out else None}
    return Case(EMBEDDING, arrays, props | {"scale_grad_by_freq": scale})


def ema_adam(rng, shape=(4, 5), dtype=np.float32, step=3, **hyper) -> Case:
    a = harness.random_operands(EMA_ADAM, {"grad": shape, "step": (1,)}, {"grad": dtype, "step": np.int64}, {}, rng)
    arrays = {k: a[k] for k in ("grad", "var", "m", "v", "s")}
    return Case(EMA_ADAM, arrays, {"step": step, **hyper})


def flce(rng, bt=5, h=7, v=9, dtype=np.float32, mode="memory-saving", mask=np.bool_, target=np.int64,
         out=False) -> Case:
    mask_len = bt if mask == np.bool_ else -(-bt // 8)
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": (mask_len,), "masked_target": (bt,)}
    if mode == "high-performance":
        shapes["softmax"] = (bt, v)
    else:
        shapes["logits_max"] = shapes["sum_exp_logits"] = (bt,)
    dts = dict.fromkeys(shapes, np.float32) | {"input": dtype, "weight": dtype, "target_mask": mask,
                                                 "masked_target": target}
    a = harness.random_operands(FLCE, shapes, dts, {}, rng)
    arrays = dict(a)
    arrays["input_grad_out"] = np.full((bt, h), np.nan, dtype) if out else None
    arrays["weight_grad_out"] = np.full((v, h), np.nan, dtype) if out else None
    return Case(FLCE, arrays, {})


def output_like(case: Case, name: str) -> np.ndarray | None:
    """A NaN-filled array of the shape and dtype the call would allocate for output `name`, if the
    arrays it derives from are there."""
    a = case.arrays
    source = {"out": {BCE: "input_x", NLL: "self", EMBEDDING: "grad"}.get(case.op),
              "input_grad_out": "input", "weight_grad_out": "weight"}.get(name)
    x = a.get(source)
    if not isinstance(x, np.ndarray) or x.dtype.kind != "f" and x.dtype != BFLOAT16:
        return None
    shape = x.shape
    if case.op == EMBEDDING:
        num_weights = case.scalars.get("num_weights")
        if type(num_weights) is not int or not 0 <= num_weights <= 1 << 20 or not x.ndim:
            return None
        shape = (num_weights, x.shape[-1])
    elif case.op == FLCE:
        bt = x.shape[0] if x.ndim == 2 else 0
        shape = (bt, x.shape[1]) if x.ndim == 2 else shape
    return np.full(shape, np.nan, x.dtype)


def default_case(op: str, rng, out=True) -> Case:
    """A small valid call of `op` with its outputs given (EMA-Adam's states always are)."""
    if op == EMA_ADAM:
        return ema_adam(rng)
    return {BCE: bce, NLL: nll, EMBEDDING: embedding, FLCE: flce}[op](rng, out=out)


def overlapping(first: np.ndarray, second: np.ndarray, shift_elements: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Copies of `first` and `second` (values kept) in one buffer, `second` starting inside `first`
    (shifted by `shift_elements` of first's dtype, or right at its start when 0): the two
    overlap in memory whenever both are non-empty."""
    shift = min(shift_elements * first.itemsize, max(first.nbytes - 1, 0))
    shift -= shift % second.itemsize  # keep second aligned to its element size
    buf = np.zeros(max(first.nbytes, shift + second.nbytes) + 16, np.uint8)
    start = -buf.ctypes.data % 16  # both element sizes divide 16
    a = buf[start:start + first.nbytes].view(first.dtype).reshape(first.shape)
    b = buf[start + shift:start + shift + second.nbytes].view(second.dtype).reshape(second.shape)
    a[...] = first
    return a, b
