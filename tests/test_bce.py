"""binary_cross_entropy_grad: JIT results against the NumPy reference."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.reference import harness


def _operands(rng, shape, dtype, reduction, weighted):
    shapes = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
    if weighted:
        shapes["weight"] = shape
    return harness.random_operands("binary_cross_entropy_grad", shapes, dict.fromkeys(shapes, dtype), {}, rng)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_reference(rng, dtype, reduction, weighted):
    a = _operands(rng, (37, 129), dtype, reduction, weighted)
    got = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), reduction)
    assert got.dtype == dtype
    want = harness.expected("binary_cross_entropy_grad", a, {"reduction": reduction})["dx"]
    assert_close(got, want)


def test_edges_are_exact(rng):
    x = np.array([0.0, 1.0, 1e-12, 1 - 1e-7, 0.5, 0.0], np.float32)
    y = np.array([0.0, 1.0, 0.0, 1.0, 0.25, 1.0], np.float32)
    got = ops.binary_cross_entropy_grad(x, y, np.float32(3.0), reduction=2)
    want = harness.expected("binary_cross_entropy_grad", {"input_x": x, "input_y": y, "dloss": np.float32(3.0)}, {"reduction": 2})["dx"]
    np.testing.assert_array_equal(got, want)


def test_flat_dloss_for_reduction_none(rng):
    a = _operands(rng, (4, 6), np.float32, 0, False)
    got = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"].reshape(-1), reduction=0)
    assert_close(got, harness.expected("binary_cross_entropy_grad", a, {"reduction": 0})["dx"])


def test_strided_inputs_and_output(rng):
    a = _operands(rng, (20, 30), np.float32, 1, True)
    x, y, w = (a[k][::2, 1::3] for k in ("input_x", "input_y", "weight"))
    out = np.full((10, 20), np.nan, np.float32)[:, ::2]
    got = ops.binary_cross_entropy_grad(x, y, a["dloss"], w, 1, out=out)
    assert got is out
    want = harness.expected("binary_cross_entropy_grad", {"input_x": x, "input_y": y, "dloss": a["dloss"], "weight": w}, {"reduction": 1})["dx"]
    assert_close(out, want)


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2), ()])
def test_empty_and_scalar(rng, shape):
    a = _operands(rng, shape, np.float32, 2, False)
    got = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], reduction=2)
    assert got.shape == shape
    assert_close(got, harness.expected("binary_cross_entropy_grad", a, {"reduction": 2})["dx"])


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(0, 9), min_size=0, max_size=4).map(tuple),
    reduction=st.sampled_from([0, 1, 2]),
    weighted=st.booleans(),
    dtype=st.sampled_from(FLOAT_DTYPES),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis_shapes(shape, reduction, weighted, dtype, seed):
    a = _operands(np.random.default_rng(seed), shape, dtype, reduction, weighted)
    got = ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), reduction)
    assert_close(got, harness.expected("binary_cross_entropy_grad", a, {"reduction": reduction})["dx"])
