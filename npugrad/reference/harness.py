"""The per-dtype tolerances every numerical check uses, and the ops' valid random operands and
expected outputs (each op's recipe has them, see npugrad/recipes/).

Tolerances (stated once, used by tests, `npugrad demo` and `npugrad-opt --stage run`):

    |got − want| ≤ tol·(|want| + max|want|) + 1e-5·Σ|terms|   elementwise,

where `want` is the float32 reference rounded once to the output dtype, tol = 1e-5 (float32),
2e-3 (float16, two ulps) and 1.6e-2 (bfloat16, two ulps), and Σ|terms| is, for an output that is
a sum accumulated in float32 (a GEMM, a scatter-add), the sum of its terms' magnitudes (the
op's recipe gives it: `magnitude`; 0 elsewhere): a sum's rounding error follows it, and a sum
whose terms cancel can be far smaller. Integer results (masks, indices) must be exact.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from npugrad.recipes import recipe_of

F32 = np.float32
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def tolerance(dtype) -> float:
    """The tolerance of results in `dtype`: 0 for integers and bools (exact)."""
    dt = np.dtype(dtype)
    return 0.0 if dt.kind in "biu" else TOLERANCE[str(dt)]


def max_error(got: np.ndarray, want: np.ndarray, magnitude=None,
              magnitude_tolerance: float = TOLERANCE["float32"]) -> float:
    """max |got − want| / (|want| + max|want| + (m_tol/tol)·Σ|terms|), the quantity compared
    with `tolerance` (tol, of got's dtype), after rounding the float32 reference once to the
    dtype of `got` (as the kernels round); computed in float64. `magnitude`: Σ|terms| of each
    element (the recipe's `magnitude`, broadcast to want's shape; None for an output that is no
    sum; a non-finite one counts as 0), allowed `magnitude_tolerance` (m_tol) of it: float32's,
    the sums' accumulator (a scale that also covers roundings in got's dtype: that dtype's)."""
    with np.errstate(over="ignore"):
        rounded = np.asarray(want, F32).astype(np.asarray(got).dtype)
    want = np.asarray(rounded, np.float64)
    got = np.asarray(got, F32).astype(np.float64)
    if want.size == 0:
        return 0.0
    scale = float(np.max(np.abs(want))) if np.all(np.isfinite(want)) else 0.0
    diff = np.abs(got - want)
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    denom = np.abs(want) + scale
    tol = tolerance(rounded.dtype)
    if magnitude is not None and tol:
        m = np.broadcast_to(np.asarray(magnitude, np.float64), want.shape)
        denom = denom + np.where(np.isfinite(m), m, 0.0) * (magnitude_tolerance / tol)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.where(same, 0.0, diff / np.where(denom > 0, denom, 1e-30))
    return float(np.max(rel))


def random_operands(op, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, np.dtype],
                    props: Mapping[str, object], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Valid random values (never all zeros) for every input operand of `op` (a name, class or instance)."""
    shapes = {k: tuple(v) for k, v in shapes.items()}
    return recipe_of(op).random_inputs(shapes, {k: np.dtype(v) for k, v in dtypes.items()}, props, rng)


def expected(op, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]:
    """The reference's float32 outputs for `op` (a name, class or instance), by output operand name."""
    return recipe_of(op).reference(dict(arrays), props)


def magnitudes(op, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Σ|terms| of each element of `op`'s outputs that are sums, by output operand name (see
    `max_error`); the other outputs are not in it."""
    return recipe_of(op).magnitude(dict(arrays), props)
