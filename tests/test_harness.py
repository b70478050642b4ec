"""The tolerance check every numerical test uses (npugrad/reference/harness.py): a sum accumulated
in float32 is held to its terms' magnitudes Σ|terms|, which the recipes give, so that a sum whose
terms cancel is not failed for the rounding any summation order has, while a wrong sum still is."""

from __future__ import annotations

import numpy as np
from api_cases import EMBEDDING, FLCE, bce, ema_adam, embedding, flce, nll
from conftest import assert_close

from npugrad.reference import harness


def _cancelling_terms(rng, n: int) -> np.ndarray:
    """n float32 terms of magnitude ~1 whose sum is ~1e-3 of Σ|terms|."""
    t = rng.standard_normal(n).astype(np.float32)
    t[-1] = np.float32(-np.sum(t[:-1], dtype=np.float64) + 1e-3 * np.abs(t).sum())
    return t


def test_a_cancelling_float32_sum_passes_with_its_magnitude_and_a_wrong_one_fails(rng):
    """Summed in float32 in another order than the float64 reference, a sum whose terms cancel
    differs from it by a few ulps of Σ|terms|: within 1e-5·Σ|terms|. The same sum missing a term
    of the median magnitude (1/800 of Σ|terms|) is not within it."""
    terms = np.stack([_cancelling_terms(rng, 512) for _ in range(64)])
    want = terms.astype(np.float64).sum(axis=1).astype(np.float32)
    magnitude = np.abs(terms).sum(axis=1, dtype=np.float32)
    got = np.zeros(64, np.float32)
    for t in terms.T[::-1]:  # one term at a time, backwards: float32 rounding at every step
        got += t
    assert_close(got, want, magnitude=magnitude)
    median = np.argsort(np.abs(terms[0]))[256]
    wrong = got.copy()
    wrong[0] -= terms[0, median]
    assert harness.max_error(wrong, want, magnitude) > harness.tolerance(np.float32)


def test_the_flce_gradient_whose_sum_cancels_is_within_tolerance_of_its_terms():
    """The fuzzer's case (high-performance, BT = H = 1, V = 140, seed 134284): dX is a sum of 140
    terms, Σ|terms| = 2.85 for a sum of 0.0076. Its float32 rounding is 1e-7 of Σ|terms| and 5e-5 of
    the sum: the check relative to the sum alone failed a correct kernel."""
    case = flce(np.random.default_rng(134284), bt=1, h=1, v=140, mode="high-performance")
    want, magnitude = case.copy().expected(), case.copy().magnitudes()
    got = case.call()
    assert magnitude["input_grad_out"].item() > 100 * abs(want["input_grad_out"].item())  # the sum cancels
    for name in want:
        assert_close(got[name], want[name], magnitude=magnitude[name])


def test_flce_magnitudes_are_the_gradient_gemms_on_magnitudes(rng):
    """Σ|terms| of dX = G·W and dW = Gᵀ·X: |G|·|W| and |G|ᵀ·|X|, G the gradient of the logits
    (recovered from dW = Gᵀ·X with X = I: high-performance mode, P given, G not made from X);
    each at least the sum's own magnitude."""
    case = flce(rng, bt=6, h=6, v=11, mode="high-performance")
    want, magnitude = case.expected(), case.magnitudes()
    eye = case.copy()
    eye.arrays["input"] = np.eye(6, dtype=np.float32)
    g = eye.expected()["weight_grad_out"].T  # Gᵀ·I: G, (BT, V)
    w, x = case.arrays["weight"], case.arrays["input"]
    np.testing.assert_allclose(magnitude["input_grad_out"], np.abs(g) @ np.abs(w), rtol=1e-5)
    np.testing.assert_allclose(magnitude["weight_grad_out"], np.abs(g).T @ np.abs(x), rtol=1e-5)
    for name in want:
        assert np.all(magnitude[name] >= np.abs(want[name]) * (1 - 1e-5))


def test_embedding_magnitudes_sum_the_rows_magnitudes(rng):
    """Each row of the embedding gradient sums the grad rows its index gathers: Σ|rows|."""
    case = embedding(rng)
    magnitude = case.magnitudes()["out"]
    negated = case.copy()
    negated.arrays["grad"] = -np.abs(negated.arrays["grad"])
    np.testing.assert_allclose(magnitude, -negated.expected()["out"], rtol=1e-6)
    assert np.all(magnitude >= np.abs(case.expected()["out"]))


def test_outputs_that_are_no_sums_have_no_magnitude(rng):
    """The elementwise ops (NLL, BCE, EMA-Adam) give none: their check is relative to the result."""
    for case in (bce(rng), nll(rng), ema_adam(rng)):
        assert case.magnitudes() == {}, case.op
    assert set(flce(rng).magnitudes()) == {"input_grad_out", "weight_grad_out"}, FLCE
    assert set(embedding(rng).magnitudes()) == {"out"}, EMBEDDING
