"""Shared test helpers: fresh random inputs per test (seed printed on failure) and the
per-dtype tolerance check of npugrad.reference.harness."""

from __future__ import annotations

import os

import numpy as np
import pytest

from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]


@pytest.fixture
def rng(request) -> np.random.Generator:
    seed = int(os.environ.get("NPUGRAD_SEED", np.random.SeedSequence().entropy % (2**32)))
    request.node.user_properties.append(("seed", seed))
    print(f"NPUGRAD_SEED={seed}")
    return np.random.default_rng(seed)


def assert_close(got: np.ndarray, want: np.ndarray, dtype=None) -> float:
    """Check `got` against the float32 reference `want` with the tolerance of got's dtype."""
    got = np.asarray(got)
    assert got.shape == np.shape(want), f"shape {got.shape} != {np.shape(want)}"
    err = harness.max_error(got, want)
    tol = harness.tolerance(dtype or got.dtype)
    assert err <= tol, f"max error {err:.3e} > tolerance {tol:.1e} ({got.dtype})"
    return err
