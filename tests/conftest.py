"""Shared test helpers: fresh random inputs per test (seed printed on failure), the per-dtype
tolerance check of npugrad.reference.harness, and the hypothesis profiles.

Profiles: `ci` (the default) gives tests without their own max_examples (the fuzzer,
tests/test_fuzz.py) a budget that keeps CI short; `--hypothesis-profile=long` gives them 2,000
examples each (10,000+ fuzz cases), and the session summary prints the fuzz counts."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import settings

from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness

settings.register_profile("ci", max_examples=40)
settings.register_profile("long", max_examples=2000)
settings.load_profile("ci")  # --hypothesis-profile=... loads another one after this file

FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]


def compact_logits_cases(blocks, unfused):
    """Parametrizes (fuse, dtype, block) for the compact kept logits, where each block size is a
    kernel of its own: every dtype fused with each of `blocks`, and the unfused loops only on the
    (dtype, block) pairs of `unfused`."""
    cases = [(True, d, b) for d in FLOAT_DTYPES for b in blocks] + [(False, np.dtype(d), b) for d, b in unfused]
    return pytest.mark.parametrize(("fuse", "dtype", "block"), cases,
                                   ids=[f"{'fused' if f else 'unfused'}-{d}-block{b}" for f, d, b in cases])


@pytest.fixture
def rng(request) -> np.random.Generator:
    seed = int(os.environ.get("NPUGRAD_SEED", np.random.SeedSequence().entropy % (2**32)))
    request.node.user_properties.append(("seed", seed))
    print(f"NPUGRAD_SEED={seed}")
    return np.random.default_rng(seed)


def assert_close(got: np.ndarray, want: np.ndarray, dtype=None, magnitude=None,
                 magnitude_tolerance: float = harness.TOLERANCE["float32"]) -> float:
    """Check `got` against the float32 reference `want` with the tolerance of got's dtype
    (`magnitude`: Σ|terms| of each element of an output that is a sum, allowed
    `magnitude_tolerance` of it: see harness.max_error)."""
    got = np.asarray(got)
    assert got.shape == np.shape(want), f"shape {got.shape} != {np.shape(want)}"
    err = harness.max_error(got, want, magnitude, magnitude_tolerance)
    tol = harness.tolerance(dtype or got.dtype)
    assert err <= tol, f"max error {err:.3e} > tolerance {tol:.1e} ({got.dtype})"
    return err


def assert_reference(op, arrays, props, got: dict[str, np.ndarray]) -> None:
    """Check each output in `got` (by output operand name) against the reference of `op` on
    `arrays`, an output that is a sum allowed its terms' magnitudes (harness.magnitudes)."""
    want, magnitude = harness.expected(op, arrays, props), harness.magnitudes(op, arrays, props)
    for name, g in got.items():
        assert_close(g, want[name], magnitude=magnitude.get(name))


def pytest_terminal_summary(terminalreporter):
    from api_cases import OUTCOMES

    if OUTCOMES:
        counts = ", ".join(f"{k} {OUTCOMES[k]}" for k in ("cases", "correct", "rejected", "other"))
        terminalreporter.write_line(f"fuzz ({settings.get_current_profile_name()} profile): {counts}")
