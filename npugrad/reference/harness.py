"""Glue between the ops and their references: valid random operands, expected outputs, and the
per-dtype tolerances every numerical check uses.

Tolerances (stated once, used by tests, `npugrad demo` and `npugrad-opt --stage run`):
|got − want| ≤ tol·(|want| + max|want|) elementwise, where `want` is the float32 reference
rounded once to the output dtype, and tol = 1e-5 (float32), 2e-3 (float16, two ulps) and
1.6e-2 (bfloat16, two ulps).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping

import numpy as np

from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.reference import ops as ref

F32 = np.float32
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def tolerance(dtype) -> float:
    return TOLERANCE[str(np.dtype(dtype))]


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    """max |got − want| / (|want| + max|want|), the quantity compared with `tolerance`, after
    rounding the float32 reference once to the dtype of `got` (as the kernels round)."""
    with np.errstate(over="ignore"):
        want = np.asarray(want, F32).astype(np.asarray(got).dtype).astype(F32)
    got = np.asarray(got, F32)
    if want.size == 0:
        return 0.0
    scale = float(np.max(np.abs(want))) if np.all(np.isfinite(want)) else 0.0
    diff = np.abs(got - want)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    denom = np.abs(want) + scale
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(same, 0.0, diff / np.where(denom > 0, denom, 1e-30))
    return float(np.max(rel))


def _cast(values: np.ndarray, dtype) -> np.ndarray:
    return np.asarray(values, F32).astype(dtype)


def random_operands(op: str, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, np.dtype],
                    props: Mapping[str, object], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Valid random values (never all zeros) for every input operand of `op`."""
    make = _RANDOM[op]
    return make({k: tuple(v) for k, v in shapes.items()}, {k: np.dtype(v) for k, v in dtypes.items()}, props, rng)


def _bce(shapes, dts, props, rng):
    x = rng.uniform(0.01, 0.99, shapes["input_x"])
    out = {
        "input_x": _cast(x, dts["input_x"]),
        "input_y": _cast(rng.uniform(0, 1, shapes["input_y"]), dts["input_y"]),
        "dloss": _cast(rng.standard_normal(shapes["dloss"]) + 1.5, dts["dloss"]),
    }
    if "weight" in shapes:
        out["weight"] = _cast(rng.uniform(0.5, 1.5, shapes["weight"]), dts["weight"])
    return out


def _nll(shapes, dts, props, rng):
    s = shapes["self"]
    c = s[-1]
    ignore = int(props.get("ignore_index", -100))
    info = np.iinfo(dts["target"])
    can_ignore = info.min <= ignore <= info.max
    if c == 0:
        # No class to pick: every sample must be ignored (impossible if ignore_index does not fit).
        target = np.full(shapes["target"], ignore if can_ignore else 0)
    else:
        target = rng.integers(0, c, shapes["target"])
        if target.size and can_ignore:
            target = np.where(rng.random(target.shape) < 0.1, ignore, target)
    weight = rng.uniform(0.5, 1.5, (c,))
    kept = np.asarray(target).reshape(-1)
    kept = kept[kept != ignore].astype(np.int64)
    tw = float(weight[kept].sum()) if kept.size else 1.0
    return {
        "grad_output": _cast(rng.standard_normal(shapes["grad_output"]) + 0.5, dts["grad_output"]),
        "self": _cast(rng.standard_normal(s), dts["self"]),
        "target": np.asarray(target).astype(dts["target"]),
        "weight": _cast(weight, dts["weight"]),
        "total_weight": _cast(np.full(shapes["total_weight"], tw), dts["total_weight"]),
    }


def _embedding(shapes, dts, props, rng):
    nw = int(props["num_weights"])
    idx = rng.integers(0, max(nw, 1), shapes["indices"]) if nw else np.zeros(shapes["indices"], np.int64)
    pad = int(props.get("padding_idx", -1))
    if 0 <= pad < nw:  # hit the padding row, which must stay zero
        idx = np.where(rng.random(idx.shape) < 0.2, pad, idx)
    return {
        "grad": _cast(rng.standard_normal(shapes["grad"]), dts["grad"]),
        "indices": idx.astype(dts["indices"]),
    }


_EMA_HYPERPARAMETERS = ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER
_EMA_DEFAULTS = {
    k: p.default for k, p in inspect.signature(ref.apply_fused_ema_adam).parameters.items() if k in _EMA_HYPERPARAMETERS
}


def _ema_adam(shapes, dts, props, rng):
    shape, dt = shapes["grad"], dts["grad"]
    out = {
        "grad": _cast(rng.standard_normal(shape), dt),
        "var": _cast(rng.standard_normal(shape), dt),
        "m": _cast(0.1 * rng.standard_normal(shape), dt),
        "v": _cast(rng.uniform(0.001, 0.1, shape), dt),
        "s": _cast(rng.standard_normal(shape), dt),
        "step": np.full(shapes["step"], int(rng.integers(1, 20)), np.int64),
    }
    if "hyperparameters" in shapes:
        # The run-time operand carries the properties' values (the kernel then ignores the properties).
        out["hyperparameters"] = np.array([props.get(k, _EMA_DEFAULTS[k]) for k in _EMA_HYPERPARAMETERS], F32)
    return out


def _flce(shapes, dts, props, rng):
    bt, h = shapes["input"]
    v = shapes["weight"][0]
    dt = dts["input"]
    x = _cast(rng.standard_normal((bt, h)) / max(h, 1) ** 0.25, dt)
    w = _cast(rng.standard_normal((v, h)) / max(h, 1) ** 0.25, dt)
    z = np.asarray(x, F32) @ np.asarray(w, F32).T
    # Global statistics over all shards: at least this shard's max, and more mass than it has.
    local_max = z.max(axis=1) if v else np.zeros(bt, F32)
    m = (local_max + rng.uniform(0, 1, bt)).astype(F32)
    s = (np.exp(z - m[:, None]).sum(axis=1) + rng.uniform(0.5, 2, bt)).astype(F32)
    masked = (rng.random(bt) < 0.3) | (v == 0)  # an empty shard holds no target
    target = np.where(masked, 0, rng.integers(0, max(v, 1), bt))
    mask = masked if dts["target_mask"] == np.bool_ else ref.pack_target_mask(masked)
    if dts["target_mask"] == np.uint8 and shapes["target_mask"][0] > mask.size:
        mask = np.concatenate([mask, rng.integers(0, 256, shapes["target_mask"][0] - mask.size).astype(np.uint8)])
    out = {
        "grad": rng.uniform(0.5, 1.5, bt).astype(F32),
        "input": x,
        "weight": w,
        "target_mask": np.asarray(mask, dts["target_mask"]),
        "masked_target": target.astype(dts["masked_target"]),
    }
    if "softmax" in shapes:
        out["softmax"] = (np.exp(z - m[:, None]) / s[:, None]).astype(F32)
    if "logits_max" in shapes:
        out["logits_max"] = m
        out["sum_exp_logits"] = s
    return out


_RANDOM = {
    "binary_cross_entropy_grad": _bce,
    "nll_loss_backward": _nll,
    "embedding_dense_backward": _embedding,
    "apply_fused_ema_adam": _ema_adam,
    "fused_linear_cross_entropy_loss_grad": _flce,
}


def expected(op: str, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The reference's float32 outputs for `op`, keyed by output operand name."""
    a = dict(arrays)
    if op == "binary_cross_entropy_grad":
        return {"dx": ref.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), props.get("reduction", 1))}
    if op == "nll_loss_backward":
        return {"out": ref.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"],
                                             props.get("reduction", 1), props.get("ignore_index", -100), a["total_weight"])}
    if op == "embedding_dense_backward":
        return {"out": ref.embedding_dense_backward(a["grad"], a["indices"], props["num_weights"],
                                                    props.get("padding_idx", -1), props.get("scale_grad_by_freq", False))}
    if op == "apply_fused_ema_adam":
        state = {k: np.array(a[k], np.float32) for k in ("var", "m", "v", "s")}
        hyper = {k: props[k] for k in ("lr", "ema_decay", "beta1", "beta2", "eps", "mode", "bias_correction", "weight_decay") if k in props}
        if a.get("hyperparameters") is not None:
            hyper.update(zip(_EMA_HYPERPARAMETERS, map(float, np.asarray(a["hyperparameters"], F32))))
        ref.apply_fused_ema_adam(np.asarray(a["grad"], np.float32), state["var"], state["m"], state["v"], state["s"], a["step"], **hyper)
        return state
    if op == "fused_linear_cross_entropy_loss_grad":
        dt = np.dtype(a["input"].dtype)
        gi, gw = ref.fused_linear_cross_entropy_loss_grad(
            a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"],
            props.get("label_smoothing", 0.0), a.get("logits_max"), a.get("sum_exp_logits"), a.get("softmax"),
            round_grad_logits_to=None if dt == np.float32 else dt,
        )
        return {"input_grad_out": gi, "weight_grad_out": gw}
    raise KeyError(op)

