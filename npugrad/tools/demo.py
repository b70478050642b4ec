"""`npugrad demo`: compile every op that has a lowering, in every mode and dtype, run it on fresh
random inputs through the Python API, and print its error against the NumPy reference."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npugrad import ops
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)


@dataclass
class Case:
    op: str
    label: str
    dtype: np.dtype
    run: Callable[[np.random.Generator], list[tuple[np.ndarray, np.ndarray]]]  # (got, want) pairs


def _bce_cases() -> list[Case]:
    cases = []
    for dtype in DTYPES:
        for reduction, rname in ((0, "none"), (1, "mean"), (2, "sum")):
            for weighted in (False, True):
                def run(rng, dtype=dtype, reduction=reduction, weighted=weighted):
                    shape = (37, 53)
                    operands = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
                    if weighted:
                        operands["weight"] = shape
                    a = harness.random_operands("binary_cross_entropy_grad", operands, dict.fromkeys(operands, dtype), {"reduction": reduction}, rng)
                    got = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), reduction)
                    want = harness.expected("binary_cross_entropy_grad", a, {"reduction": reduction})["dx"]
                    return [(got, want)]

                cases.append(Case("binary_cross_entropy_grad", f"{rname}{', weight' if weighted else ''}", dtype, run))
    return cases


def all_cases() -> list[Case]:
    return _bce_cases()


def run_demo(seed: int = 0) -> bool:
    rng = np.random.default_rng(seed)
    print(f"{'op':<38} {'case':<28} {'dtype':<9} {'max error':>10} {'tolerance':>10} {'first call':>11}")
    print("-" * 112)
    ok = True
    for case in all_cases():
        start = time.perf_counter()
        pairs = case.run(rng)
        elapsed = time.perf_counter() - start
        err = max(harness.max_error(g, w) for g, w in pairs)
        tol = harness.tolerance(case.dtype)
        good = err <= tol
        ok &= good
        print(f"{case.op:<38} {case.label:<28} {case.dtype.name:<9} {err:>10.2e} {tol:>10.1e} {elapsed * 1e3:>9.0f}ms  {'ok' if good else 'MISMATCH'}")
    print("all results within tolerance" if ok else "SOME RESULTS DO NOT MATCH THE REFERENCE")
    return ok
