"""embedding_dense_backward: JIT results against the NumPy reference (and PyTorch when present)."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness
from npugrad.runtime.launch import launch

OP = "embedding_dense_backward"
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
INDEX_DTYPES = [np.dtype(np.int32), np.dtype(np.int64)]
UINT64_MINUS_ONE = 2**64 - 1


def _operands(rng, grad_shape, indices_shape, num_weights, dtype=F32, index_dtype=np.int64, padding_idx=-1):
    shapes = {"grad": grad_shape, "indices": indices_shape}
    dts = {"grad": dtype, "indices": index_dtype}
    return harness.random_operands(OP, shapes, dts, {"num_weights": num_weights, "padding_idx": padding_idx}, rng)


def _expected(a, num_weights, padding_idx=-1, scale=False):
    props = {"num_weights": num_weights, "padding_idx": padding_idx, "scale_grad_by_freq": scale}
    return harness.expected(OP, a, props)["out"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("scale", [False, True], ids=["sum", "scaled"])
@pytest.mark.parametrize(
    "padding_idx", [-1, 3, 23, 200, UINT64_MINUS_ONE], ids=["none", "3", "last", "past-end", "u64-minus-1"]
)
def test_matches_reference(rng, dtype, index_dtype, scale, padding_idx):
    # 37 rows into 24 (padding hit by the harness): indices repeat, so frequency scaling matters.
    a = _operands(rng, (37, 13), (37,), 24, dtype, index_dtype, padding_idx)
    got = ops.embedding_dense_backward(a["grad"], a["indices"], 24, padding_idx, scale)
    assert got.dtype == dtype and got.shape == (24, 13)
    want = _expected(a, 24, padding_idx, scale)
    assert_close(got, want)
    if padding_idx in (3, 23):
        assert np.all(np.asarray(got, F32)[padding_idx] == 0)


def test_float32_is_the_reference_bit_for_bit(rng):
    # Same float32 operations in the same order (i ascending) as the reference's np.add.at.
    a = _operands(rng, (4, 50, 9), (200,), 7, padding_idx=2)
    for scale in (False, True):
        got = ops.embedding_dense_backward(a["grad"], a["indices"], 7, 2, scale)
        np.testing.assert_array_equal(got, _expected(a, 7, 2, scale))


@pytest.mark.parametrize(
    "grad_dtype,out_dtype",
    [(F32, F16), (F32, BFLOAT16), (F16, F32), (BFLOAT16, F32), (F16, BFLOAT16), (BFLOAT16, F16)],
    ids=str,
)
def test_out_dtype_differs_from_grad(rng, grad_dtype, out_dtype):
    a = _operands(rng, (6, 11, 17), (66,), 10, grad_dtype, np.int32, padding_idx=0)
    out = np.full((10, 17), np.nan, out_dtype)
    got = ops.embedding_dense_backward(a["grad"], a["indices"], 10, 0, True, out=out)
    assert got is out
    assert_close(out, _expected(a, 10, 0, True))


@pytest.mark.parametrize(
    "grad_shape,indices_shape",
    [
        ((3, 5, 8), (15,)),
        ((3, 5, 8), (5, 3)),
        ((15, 8), (3, 1, 5)),
        ((3, 5, 8), (3, 5)),
        ((8,), ()),
        ((2, 1, 3, 1, 2, 1, 2, 5), (4, 6)),
        ((24, 3), (2, 1, 1, 3, 1, 2, 1, 2)),
    ],
    ids=str,
)
def test_indices_of_any_shape(rng, grad_shape, indices_shape):
    a = _operands(rng, grad_shape, indices_shape, 9)
    got = ops.embedding_dense_backward(a["grad"], a["indices"], 9, scale_grad_by_freq=True)
    assert_close(got, _expected(a, 9, scale=True))


@pytest.mark.parametrize(
    "grad_shape,indices_shape,num_weights",
    [
        ((0, 4), (0,), 5),  # no rows to scatter
        ((2, 0, 4), (0, 3), 5),
        ((4, 0), (4,), 5),  # D = 0
        ((4, 0), (7,), 5),  # D = 0 skips the element-count check
        ((0, 3), (0,), 0),  # no embedding rows either
        ((3, 0), (3,), 0),
    ],
    ids=str,
)
def test_empty(rng, grad_shape, indices_shape, num_weights):
    grad = rng.standard_normal(grad_shape).astype(np.float32)
    indices = rng.integers(0, 5, indices_shape)
    out = np.full((num_weights, grad_shape[-1]), np.nan, np.float32)
    got = ops.embedding_dense_backward(grad, indices, num_weights, out=out)
    assert got is out
    np.testing.assert_array_equal(out, np.zeros_like(out))


def test_strided_inputs_and_output(rng):
    a = _operands(rng, (20, 9, 30), (60,), 12, padding_idx=4)
    grad = a["grad"][::2, 1::3, ::2]  # (10, 3, 15)
    indices = a["indices"].reshape(30, 2).astype(np.int32)[::2, ::-1]  # (15, 2)
    big = np.full((12, 40), np.nan, BFLOAT16)
    out = big[:, 5::2][:, :15]
    got = ops.embedding_dense_backward(grad, indices, 12, 4, True, out=out)
    assert got is out
    assert_close(out, _expected({"grad": grad, "indices": indices}, 12, 4, True))
    assert np.all(np.isnan(np.asarray(big[:, :5], F32)))  # nothing outside the view is written


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_deterministic(rng, dtype):
    # Many contributions per row: a run-to-run change of summation order would show in the bits.
    a = _operands(rng, (4000, 33), (4000,), 5, dtype)
    first = ops.embedding_dense_backward(a["grad"], a["indices"], 5, scale_grad_by_freq=True)
    for _ in range(3):
        again = ops.embedding_dense_backward(a["grad"], a["indices"], 5, scale_grad_by_freq=True)
        np.testing.assert_array_equal(first.view(np.uint8), again.view(np.uint8))
    assert_close(first, _expected(a, 5, scale=True))


@pytest.mark.parametrize("given", [False, True], ids=["allocated", "given-out"])
def test_a_row_of_negative_zeros_sums_to_positive_zero(given):
    """The sum starts from +0 (the reference's np.add.at into zeros): 0 + -0 is +0, so a row
    whose only contribution is -0 is +0, not the -0 a copy of the first row would give; -0 + -0
    within a row stays +0 too."""
    grad = np.array([[-0.0, 1.0, -0.0], [-0.0, -2.0, 3.0], [-0.0, -0.0, 5.0]], np.float32)
    idx = np.array([2, 0, 0])
    out = np.full((3, 3), np.nan, np.float32) if given else None
    got = ops.embedding_dense_backward(grad, idx, 3, out=out)
    want = np.zeros((3, 3), np.float32)
    np.add.at(want, idx, grad)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert not np.signbit(got[2, 0]) and not np.signbit(got[0, 0])


def test_kernel_skips_indices_out_of_range(rng):
    # The API rejects them; the kernel itself must still neither read nor write out of bounds.
    grad = rng.standard_normal((6, 4)).astype(np.float32)
    indices = np.array([1, -1, 3, 2**40, 1, 3], np.int64)
    out = np.full((4, 4), np.nan, np.float32)
    props = {"num_weights": 4, "padding_idx": -1, "scale_grad_by_freq": True}
    launch(EmbeddingDenseBackwardOp, {"grad": grad, "indices": indices, "out": out}, props)
    want = np.zeros((4, 4), np.float32)
    want[1] = (grad[0] + grad[4]) / 2
    want[3] = (grad[2] + grad[5]) / 2
    assert_close(out, want)


@st.composite
def _cases(draw):
    lead = draw(st.lists(st.integers(0, 6), min_size=0, max_size=3))
    d = draw(st.integers(0, 9))
    n = int(np.prod(lead, dtype=np.int64))
    # indices: flat, shaped like grad's leading dims, or n split differently
    shapes = [(n,), tuple(lead)] + ([(1, n, 1)] if n else [(0, 2)])
    indices_shape = draw(st.sampled_from(shapes))
    num_weights = draw(st.integers(1, 12))
    anywhere = draw(st.integers(0, num_weights))
    padding = draw(st.sampled_from([-1, 0, num_weights - 1, num_weights, UINT64_MINUS_ONE, anywhere]))
    return {
        "grad_shape": (*lead, d),
        "indices_shape": indices_shape,
        "num_weights": num_weights,
        "padding_idx": padding,
        "scale": draw(st.booleans()),
        "dtype": draw(st.sampled_from(FLOAT_DTYPES)),
        "out_dtype": draw(st.sampled_from(FLOAT_DTYPES)),
        "index_dtype": draw(st.sampled_from(INDEX_DTYPES)),
    }


@settings(max_examples=30, deadline=None)
@given(case=_cases(), seed=st.integers(0, 2**32 - 1))
def test_hypothesis(case, seed):
    c = case
    a = _operands(np.random.default_rng(seed), c["grad_shape"], c["indices_shape"], c["num_weights"],
                  c["dtype"], c["index_dtype"], c["padding_idx"])
    out = np.full((c["num_weights"], c["grad_shape"][-1]), np.nan, c["out_dtype"])
    ops.embedding_dense_backward(a["grad"], a["indices"], c["num_weights"], c["padding_idx"], c["scale"], out=out)
    assert_close(out, _expected(a, c["num_weights"], c["padding_idx"], c["scale"]))


VALID = {"grad": np.ones((4, 3), np.float32), "indices": np.array([0, 1, 5, 1]), "num_weights": 6, "padding_idx": -1}


@pytest.mark.parametrize(
    "change,error,parameter",
    [
        ({"grad": None}, TypeError, "grad"),  # null operands
        ({"indices": None}, TypeError, "indices"),
        ({"grad": np.ones((4, 3), np.float64)}, TypeError, "grad"),
        ({"grad": np.ones((4, 3), np.int32)}, TypeError, "grad"),
        ({"grad": [[1.0, 2.0, 3.0]] * 4}, TypeError, "grad"),  # a list becomes float64
        # Outside the dtypes the vendor converts (CONVERTED_INDICES_CASES below).
        ({"indices": np.array([0, 1, 5, 1], np.uint16)}, TypeError, "indices"),
        ({"indices": np.array([0, 1, 5, 1], np.uint64)}, TypeError, "indices"),
        ({"indices": np.array([0, 1, 5, 1], np.complex64)}, TypeError, "indices"),
        ({"indices": np.array([0, 1, 5, 1], ">f4")}, TypeError, "indices"),
        # Converted, then out of range: as given, not as a cast made them.
        ({"indices": np.array([0, 1, -1, 1], np.int8)}, ValueError, "indices"),
        ({"indices": np.array([0, 1, 6.0, 1], np.float32)}, ValueError, "indices"),
        ({"indices": np.array([0, 1, np.nan, 1], np.float16)}, ValueError, "indices"),
        ({"indices": np.array([0, 1, -np.inf, 1])}, ValueError, "indices"),
        ({"out": np.zeros((6, 3), np.float64)}, TypeError, "out"),
        ({"out": [[0.0] * 3] * 6}, TypeError, "out"),
        ({"grad": np.float32(1.0)}, ValueError, "grad"),  # 0-D
        ({"grad": np.ones((1,) * 8 + (3,), np.float32), "indices": np.zeros(1, np.int64)}, ValueError, "grad"),
        ({"indices": np.zeros((1,) * 8 + (4,), np.int64)}, ValueError, "indices"),
        ({"indices": np.array([0, 1, 5])}, ValueError, "indices"),  # numel != prod(grad.shape[:-1])
        ({"grad": np.ones((2, 2, 3), np.float32), "indices": np.zeros((5,), np.int64)}, ValueError, "indices"),
        ({"out": np.zeros((6, 3, 1), np.float32)}, ValueError, "out"),  # not 2-D
        ({"out": np.zeros((18,), np.float32)}, ValueError, "out"),
        ({"out": np.zeros((7, 3), np.float32)}, ValueError, "out"),  # not num_weights rows
        ({"out": np.zeros((6, 4), np.float32)}, ValueError, "out"),  # not D columns
        ({"num_weights": -1}, ValueError, "num_weights"),
        ({"num_weights": 6.0}, TypeError, "num_weights"),
        ({"num_weights": 2**63}, ValueError, "num_weights"),
        ({"padding_idx": 2**64}, ValueError, "padding_idx"),
        ({"padding_idx": "1"}, TypeError, "padding_idx"),
        ({"indices": np.array([0, 1, 6, 1])}, ValueError, "indices"),  # value precondition: < num_weights
        ({"indices": np.array([[0, 1], [-2, 1]], np.int32)}, ValueError, "indices"),  # and >= 0
    ],
)
def test_rejects(change, error, parameter):
    args = {**VALID, **change}
    out = args.pop("out", np.full((6, 3), 7.0, np.float32))
    before = np.array(out, copy=True)
    with pytest.raises(error) as info:
        ops.embedding_dense_backward(**args, out=out)
    message = str(info.value)
    assert message.startswith(f"{OP}:") and f"'{parameter}'" in message, message
    np.testing.assert_array_equal(out, before)  # a rejected call writes nothing


CONVERTED = [np.int8, np.int16, np.uint8, np.bool_, np.float16, np.float32, np.float64]


@pytest.mark.parametrize("index_dtype", CONVERTED, ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("scale", [False, True], ids=["sum", "scaled"])
def test_indices_the_vendor_converts(rng, index_dtype, scale):
    # OPS.md 2.1: the vendor also takes int8, int16, uint8, bool and floating-point indices, converted
    # to integers (a float truncated toward zero, as the reference does). They were a TypeError.
    grad = rng.standard_normal((3, 11, 5)).astype(np.float32)
    if index_dtype is np.bool_:
        indices = rng.integers(0, 2, (3, 11)).astype(np.bool_)
    elif np.dtype(index_dtype).kind == "f":  # -0.9 truncates to row 0, 5.99 to row 5
        indices = rng.uniform(-0.9, 5.99, (3, 11)).astype(index_dtype)
    else:
        indices = rng.integers(0, 6, (3, 11)).astype(index_dtype)
    before = indices.copy()
    for _ in range(2):  # the second call is planned again (its conversion is not replayed)
        got = ops.embedding_dense_backward(grad, indices, 6, 2, scale)
        np.testing.assert_array_equal(got, _expected({"grad": grad, "indices": indices}, 6, 2, scale))
        np.testing.assert_array_equal(indices, before)
        indices[0] = indices[-1]  # new values, same signature
        before = indices.copy()


def test_rejected_index_names_value_and_position():
    indices = np.array([[0, 1], [2, 9]], np.int32)
    with pytest.raises(ValueError, match=r"'indices'.*\[0, 6\).*got 9 at position \(1, 1\)"):
        ops.embedding_dense_backward(np.ones((2, 2, 3), np.float32), indices, 6)


def test_read_only_out_is_rejected():
    out = np.zeros((6, 3), np.float32)
    out.flags.writeable = False
    with pytest.raises(ValueError, match=f"{OP}: parameter 'out'"):
        ops.embedding_dense_backward(VALID["grad"], VALID["indices"], 6, out=out)


def test_default_output_dtype_is_grads(rng):
    a = _operands(rng, (5, 4), (5,), 3, BFLOAT16)
    got = ops.embedding_dense_backward(a["grad"], a["indices"], 3)
    assert got.dtype == BFLOAT16
    assert_close(got, _expected(a, 3))
    # indices as a list, NumPy integer attributes, -1 as uint64; float32 out for float32 grad
    grad = np.asarray(a["grad"], F32)
    got = ops.embedding_dense_backward(grad, a["indices"].tolist(), np.uint64(3), np.uint64(UINT64_MINUS_ONE))
    assert got.dtype == F32
    assert_close(got, _expected(a, 3))


@pytest.mark.parametrize("index_dtype", INDEX_DTYPES, ids=str)
@pytest.mark.parametrize("padding_idx", [-1, 2])
@pytest.mark.parametrize("scale", [False, True])
def test_matches_torch(rng, index_dtype, padding_idx, scale):
    torch = pytest.importorskip("torch", reason="torch is not installed: no PyTorch oracle")
    a = _operands(rng, (3, 7, 10), (7, 3), 8, F32, index_dtype, padding_idx)
    want = torch.ops.aten.embedding_dense_backward(
        torch.from_numpy(a["grad"]), torch.from_numpy(a["indices"]), 8, padding_idx, scale
    ).numpy()
    got = ops.embedding_dense_backward(a["grad"], a["indices"], 8, padding_idx, scale)
    assert_close(got, want)
