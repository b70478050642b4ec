"""`npugrad demo`: compile every op in every mode and dtype, run it on fresh random inputs through
the Python API, and print its error against the NumPy reference. `--quick`: each op in each
dtype once (its first example signature), a check of a machine in a minute (tests/test_other_cpus.py
runs it on emulated CPUs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from npugrad.dialect import OPS
from npugrad.recipes import Example, OpRecipe, recipe_of
from npugrad.reference import harness


@dataclass
class Case:
    op: str
    label: str
    dtype: np.dtype  # the precision it runs in: its inputs' narrowest float type
    # output -> (got, want, Σ|terms| of each element of a sum or None): see harness.max_error
    run: Callable[[np.random.Generator], dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]]


def _case(recipe: OpRecipe, example: Example) -> Case:
    """Random valid inputs, the API on copies of them, the reference on the originals."""

    def run(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        a = recipe.random_inputs(dict(example.shapes), dict(example.dtypes), example.props, rng)
        got = recipe.call_api({k: v.copy() for k, v in a.items()}, example.props)
        want = recipe.reference(a, example.props)
        magnitude = recipe.magnitude(a, example.props)
        return {name: (got[name], want[name], magnitude.get(name)) for name in want}

    floats = [np.dtype(d) for d in example.dtypes.values() if np.dtype(d).kind == "f" or np.dtype(d).name == "bfloat16"]
    narrow = [d for d in floats if d.itemsize < 4]
    return Case(recipe.op.short_name(), example.label, narrow[0] if narrow else np.dtype(np.float32), run)


def all_cases() -> list[Case]:
    """Every op's example signatures, in the dialect's order of ops."""
    return [_case(recipe_of(op), ex) for op in OPS for ex in recipe_of(op).examples()]


def first_cases() -> list[Case]:
    """Each op in each dtype once: the first of its example signatures in that dtype."""
    first: dict[tuple[str, str], Case] = {}
    for case in all_cases():
        first.setdefault((case.op, case.dtype.name), case)
    return list(first.values())


def host_line() -> str:
    """What the kernels are shaped for here: the host target's CPU (LLVM's name for it), vectors
    and registers, and how bfloat16 contractions multiply."""
    from npugrad.passes.vectorize_contractions import dot_bf16
    from npugrad.targets import get

    host = get("host")
    dots = "vdpbf16ps" if dot_bf16(host) else "widened to float32"
    return (f"host: {host.llvm_cpu}, {host.vector_bits}-bit vectors, {host.vector_registers} vector registers, "
            f"{host.cores} core(s); bfloat16 contractions: {dots}")


def run_demo(seed: int | None = None, quick: bool = False) -> bool:
    rng = np.random.default_rng(seed)
    print(host_line())
    print(f"{'op':<38} {'case':<40} {'dtype':<9} {'max error':>10} {'tolerance':>10} {'first call':>11}")
    print("-" * 124)
    ok = True
    worst: dict[tuple[str, str], float] = {}
    for case in first_cases() if quick else all_cases():
        start = time.perf_counter()
        results = case.run(rng)
        elapsed = time.perf_counter() - start
        # Each output against the tolerance of its own dtype; the one closest to it is shown.
        checks = [(harness.max_error(g, w, m), harness.tolerance(g.dtype)) for g, w, m in results.values()]
        good = all(err <= tol for err, tol in checks)
        err, tol = max(checks, key=lambda c: (c[0] > c[1], c[0] / c[1] if c[1] else c[0]))
        ok &= good
        dtype = case.dtype
        key = (case.op, dtype.name)
        worst[key] = max(worst.get(key, 0.0), err)
        print(f"{case.op:<38} {case.label:<40} {dtype.name:<9} {err:>10.2e} {tol:>10.1e} "
              f"{elapsed * 1e3:>9.0f}ms  {'ok' if good else 'MISMATCH'}")
    print()
    print("max error per op and dtype (tolerance by output dtype: float32 1e-5, float16 2e-3, bfloat16 1.6e-2, "
          "integers exact;\n  sums also 1e-5 of their terms' magnitudes, see npugrad/reference/harness.py):")
    for (op, dtype), err in worst.items():
        print(f"  {op:<38} {dtype:<9} {err:.2e}")
    print("all results within tolerance" if ok else "SOME RESULTS DO NOT MATCH THE REFERENCE")
    return ok
