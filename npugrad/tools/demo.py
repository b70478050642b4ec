"""`npugrad demo`: compile every op in every mode and dtype, run it on fresh random inputs through
the Python API, and print its error against the NumPy reference."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


@dataclass
class Case:
    op: str
    label: str
    dtype: np.dtype
    run: Callable[[np.random.Generator], dict[str, tuple[np.ndarray, np.ndarray]]]  # output -> (got, want)


def _compare(op: str, a: dict, props: dict, got: dict[str, np.ndarray]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    want = harness.expected(op, a, props)
    return {name: (got[name], want[name]) for name in want}


def _random(op: str, shapes: dict, dtypes: dict, props: dict, rng) -> dict[str, np.ndarray]:
    return harness.random_operands(op, shapes, dtypes, props, rng)


def _bce() -> Iterator[Case]:
    op = "binary_cross_entropy_grad"
    for dtype, reduction, weighted in itertools.product(DTYPES, REDUCTIONS, (False, True)):
        def run(rng, dtype=dtype, reduction=reduction, weighted=weighted):
            shape = (37, 53)
            shapes = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
            if weighted:
                shapes["weight"] = shape
            a = _random(op, shapes, dict.fromkeys(shapes, dtype), {}, rng)
            dx = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), reduction)
            return _compare(op, a, {"reduction": reduction}, {"dx": dx})

        yield Case(op, f"{REDUCTIONS[reduction]}{', weight' if weighted else ''}", dtype, run)


def _nll() -> Iterator[Case]:
    op = "nll_loss_backward"
    for dtype, reduction, self_rank in itertools.product(DTYPES, REDUCTIONS, (2, 1)):
        def run(rng, dtype=dtype, reduction=reduction, self_rank=self_rank):
            n, c = 300, 37
            shapes = {
                "self": (n, c) if self_rank == 2 else (c,),
                "target": (n,) if self_rank == 2 else (),
                "weight": (c,),
                "total_weight": (1,),
                "grad_output": (n,) if reduction == 0 and self_rank == 2 else (),
            }
            dts = {k: dtype for k in shapes} | {"target": np.dtype(np.int64)}
            props = {"reduction": reduction, "ignore_index": -100}
            a = _random(op, shapes, dts, props, rng)
            out = ops.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"], reduction, -100, a["total_weight"])
            return _compare(op, a, props, {"out": out})

        yield Case(op, f"{REDUCTIONS[reduction]}, {self_rank}-D self", dtype, run)


def _embedding() -> Iterator[Case]:
    op = "embedding_dense_backward"
    for dtype, scale, padding in itertools.product(DTYPES, (False, True), (-1, 3)):
        def run(rng, dtype=dtype, scale=scale, padding=padding):
            props = {"num_weights": 50, "padding_idx": padding, "scale_grad_by_freq": scale}
            shapes = {"grad": (4, 33, 24), "indices": (4, 33)}
            a = _random(op, shapes, {"grad": dtype, "indices": np.dtype(np.int64)}, props, rng)
            out = ops.embedding_dense_backward(a["grad"], a["indices"], 50, padding, scale)
            return _compare(op, a, props, {"out": out})

        yield Case(op, f"padding {padding}{', scale by freq' if scale else ''}", dtype, run)


def _ema_adam() -> Iterator[Case]:
    op = "apply_fused_ema_adam"
    for dtype, mode, bias_correction in itertools.product(DTYPES, (0, 1), (True, False)):
        def run(rng, dtype=dtype, mode=mode, bias_correction=bias_correction):
            props = {"lr": 1e-2, "ema_decay": 0.99, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                     "mode": mode, "bias_correction": bias_correction, "weight_decay": 0.05}
            shapes = {k: (61, 17) for k in ("grad", "var", "m", "v", "s")} | {"step": (1,)}
            a = _random(op, shapes, {k: dtype for k in shapes} | {"step": np.dtype(np.int64)}, props, rng)
            want_from = {k: v.copy() for k, v in a.items()}
            state = [a[k] for k in ("var", "m", "v", "s")]
            ops.apply_fused_ema_adam(a["grad"], *state, a["step"], **props)
            return _compare(op, want_from, props, dict(zip(("var", "m", "v", "s"), state)))

        yield Case(op, f"{'AdamW' if mode else 'Adam+L2'}, bias correction {'on' if bias_correction else 'off'}", dtype, run)


def _flce() -> Iterator[Case]:
    op = "fused_linear_cross_entropy_loss_grad"
    for dtype, mode, packed in itertools.product(DTYPES, ("memory-saving", "high-performance"), (False, True)):
        def run(rng, dtype=dtype, mode=mode, packed=packed):
            bt, h, v = 75, 40, 300
            shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h),
                      "target_mask": ((bt + 7) // 8,) if packed else (bt,), "masked_target": (bt,)}
            shapes |= {"softmax": (bt, v)} if mode == "high-performance" else {"logits_max": (bt,), "sum_exp_logits": (bt,)}
            dts = {k: np.dtype(np.float32) for k in shapes} | {"input": dtype, "weight": dtype,
                   "target_mask": np.dtype(np.uint8 if packed else np.bool_), "masked_target": np.dtype(np.int32)}
            a = _random(op, shapes, dts, {}, rng)
            gi, gw = ops.fused_linear_cross_entropy_loss_grad(
                a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"], 0.0,
                a.get("logits_max"), a.get("sum_exp_logits"), a.get("softmax"))
            return _compare(op, a, {}, {"input_grad_out": gi, "weight_grad_out": gw})

        yield Case(op, f"{mode}, {'uint8 bit-packed' if packed else 'bool'} mask", dtype, run)


def all_cases() -> list[Case]:
    return [*_flce(), *_embedding(), *_nll(), *_ema_adam(), *_bce()]


def run_demo(seed: int | None = None) -> bool:
    rng = np.random.default_rng(seed)
    print(f"{'op':<38} {'case':<40} {'dtype':<9} {'max error':>10} {'tolerance':>10} {'first call':>11}")
    print("-" * 124)
    ok = True
    worst: dict[tuple[str, str], float] = {}
    for case in all_cases():
        start = time.perf_counter()
        pairs = case.run(rng)
        elapsed = time.perf_counter() - start
        err = max(harness.max_error(g, w) for g, w in pairs.values())
        tol = harness.tolerance(case.dtype)
        good = err <= tol
        ok &= good
        key = (case.op, case.dtype.name)
        worst[key] = max(worst.get(key, 0.0), err)
        print(f"{case.op:<38} {case.label:<40} {case.dtype.name:<9} {err:>10.2e} {tol:>10.1e} "
              f"{elapsed * 1e3:>9.0f}ms  {'ok' if good else 'MISMATCH'}")
    print()
    print("max error per op and dtype (tolerance: float32 1e-5, float16 2e-3, bfloat16 1.6e-2):")
    for (op, dtype), err in worst.items():
        print(f"  {op:<38} {dtype:<9} {err:.2e}")
    print("all results within tolerance" if ok else "SOME RESULTS DO NOT MATCH THE REFERENCE")
    return ok
