"""nll_loss_backward: JIT results against the NumPy reference (and PyTorch when installed)."""

import ml_dtypes
import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.dialect import NLLLossBackwardOp
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness
from npugrad.runtime.launch import launch

OP = "nll_loss_backward"
TARGET_DTYPES = [np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.uint8)]


def _operands(rng, n, c, dtype, target_dtype=np.int64, reduction=1, ignore_index=-100, one_d=False):
    """Valid operands for (N, C) self, or (C,) self with a 0-D target when one_d."""
    per_sample = reduction == 0 and not one_d
    shapes = {
        "grad_output": (n,) if per_sample else (),
        "self": (c,) if one_d else (n, c),
        "target": () if one_d else (n,),
        "weight": (c,),
        "total_weight": (1,),
    }
    dts = dict.fromkeys(shapes, dtype) | {"target": target_dtype}
    return harness.random_operands(OP, shapes, dts, {"ignore_index": ignore_index}, rng)


def _call(a, reduction, ignore_index=-100, **kw):
    return ops.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"], reduction, ignore_index,
                                 a["total_weight"], **kw)


def _want(a, reduction, ignore_index=-100):
    return harness.expected(OP, a, {"reduction": reduction, "ignore_index": ignore_index})["out"]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("target_dtype", TARGET_DTYPES, ids=str)
@pytest.mark.parametrize("one_d", [False, True], ids=["2d", "1d"])
def test_matches_reference(rng, dtype, reduction, target_dtype, one_d):
    a = _operands(rng, 37, 19, dtype, target_dtype, reduction, one_d=one_d)
    got = _call(a, reduction)
    assert got.dtype == dtype and got.shape == a["self"].shape
    assert_close(got, _want(a, reduction))


@pytest.mark.parametrize("target_dtype", TARGET_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_ignore_index_is_a_valid_class(rng, target_dtype, reduction):
    ignore = 3
    a = _operands(rng, 40, 8, np.float32, target_dtype, reduction, ignore)
    a["target"][:4] = ignore  # certainly ignored rows, among 10% random ones
    got = _call(a, reduction, ignore)
    ignored = a["target"] == ignore
    assert not np.any(got[ignored]) and np.all(np.count_nonzero(got[~ignored], axis=1) == 1)
    assert_close(got, _want(a, reduction, ignore))


@pytest.mark.parametrize("ignore", [4, 5, -100])
def test_one_d_self_ignored_or_not(rng, ignore):
    a = _operands(rng, 1, 6, np.float32, np.int64, 2, ignore, one_d=True)
    a["target"] = np.array(4)
    got = _call(a, 2, ignore)
    assert np.count_nonzero(got) == (0 if ignore == 4 else 1)
    assert_close(got, _want(a, 2, ignore))


@pytest.mark.parametrize("n,c", [(1, 1), (1, 7), (5, 1), (0, 4), (0, 0), (3, 0), (129, 257)])
@pytest.mark.parametrize("reduction", [0, 1])
def test_sizes(rng, n, c, reduction):
    a = _operands(rng, n, c, np.float32, np.int64, reduction)
    got = _call(a, reduction)
    assert got.shape == (n, c)
    assert_close(got, _want(a, reduction))


def test_uint8_target_above_127_is_not_negative(rng):
    # Zero-extension: 200 as a signed byte would be −56 and be dropped by the bounds guard.
    a = _operands(rng, 6, 256, np.float32, np.uint8, 2)
    a["target"][:] = [200, 255, 0, 128, 127, 1]
    got = _call(a, 2)
    assert np.all(np.count_nonzero(got, axis=1) == 1)
    assert_close(got, _want(a, 2))


def test_strided_inputs_and_output(rng):
    a = _operands(rng, 40, 30, np.float16, np.int32, 0)
    views = {
        "grad_output": a["grad_output"][::2],
        "self": a["self"][::2, ::3],
        "target": np.where(a["target"] < 0, a["target"], a["target"] % 10)[::2],
        "weight": a["weight"][::-3],
        "total_weight": a["total_weight"],
    }
    base = np.full((20, 20), np.nan, np.float16)
    out = base[:, ::2]
    got = _call(views, 0, out=out)
    assert got is out
    assert_close(out, _want(views, 0))
    assert np.all(np.isnan(base[:, 1::2])), "wrote between the elements of a strided out"


@pytest.mark.parametrize(
    "grad_output,total_weight",
    [(np.float32(2.5), np.float32(4.0)), (np.array(2.5, np.float32), np.array([4.0], np.float32)),
     (np.array([2.5], np.float32), np.array([[4.0]], np.float32))],
    ids=["numpy-scalars", "0d-and-1d", "1d-and-2d"],
)
def test_one_element_parameters(rng, grad_output, total_weight):
    a = _operands(rng, 9, 5, np.float32, np.int64, 1) | {"grad_output": grad_output, "total_weight": total_weight}
    got = _call(a, 1)
    assert_close(got, _want(a, 1))


def test_weight_none_means_ones(rng):
    a = _operands(rng, 12, 7, BFLOAT16, np.int64, 2)
    got = ops.nll_loss_backward(a["grad_output"], a["self"], a["target"], None, 2, -100, a["total_weight"])
    assert_close(got, _want(a | {"weight": np.ones(7, BFLOAT16)}, 2))


def test_mean_with_zero_total_weight_follows_ieee(rng):
    a = _operands(rng, 4, 3, np.float32, np.int64, 1) | {"total_weight": np.zeros(1, np.float32)}
    a["target"][:] = [0, -100, 2, -100]
    got = _call(a, 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.testing.assert_array_equal(got, _want(a, 1))
    assert np.all(np.isinf(got[[0, 2], a["target"][[0, 2]]]))
    a["target"][:] = -100  # all ignored: nothing divides, the result is zero
    np.testing.assert_array_equal(_call(a, 1), np.zeros((4, 3), np.float32))


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 9),
    c=st.integers(0, 9),
    one_d=st.booleans(),
    reduction=st.sampled_from([0, 1, 2]),
    dtype=st.sampled_from(FLOAT_DTYPES),
    target_dtype=st.sampled_from(TARGET_DTYPES),
    ignore_index=st.sampled_from([-100, -1, 0, 2, 255, 2**40]),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis(n, c, one_d, reduction, dtype, target_dtype, ignore_index, seed):
    info = np.iinfo(target_dtype)
    # With no class, every sample must be ignored, which a target dtype may not be able to say.
    assume(c > 0 or (n == 0 and not one_d) or info.min <= ignore_index <= info.max)
    a = _operands(np.random.default_rng(seed), n, c, dtype, target_dtype, reduction, ignore_index, one_d)
    assert_close(_call(a, reduction, ignore_index), _want(a, reduction, ignore_index))


# -- rejections -----------------------------------------------------------------------------------


def _valid(n=4, c=5):
    return _operands(np.random.default_rng(0), n, c, np.float32, np.int64, 1)


F64 = np.float64
REJECTS = [
    # (parameter named, error, change to valid mean-reduction operands (N=4, C=5), reduction)
    ("grad_output", TypeError, {"grad_output": None}, 1),
    ("self", TypeError, {"self": None}, 1),
    ("target", TypeError, {"target": None}, 1),
    ("total_weight", TypeError, {"total_weight": None}, 1),
    ("self", TypeError, {"self": np.zeros((4, 5), F64)}, 1),
    ("target", TypeError, {"target": np.zeros(4, np.float32)}, 1),
    ("target", TypeError, {"target": np.zeros(4, np.int16)}, 1),
    ("grad_output", TypeError, {"grad_output": np.ones((), np.float16)}, 1),
    ("weight", TypeError, {"weight": np.ones(5, F64)}, 1),
    ("total_weight", TypeError, {"total_weight": np.ones(1, F64)}, 1),
    ("reduction", ValueError, {}, 3),
    ("reduction", ValueError, {}, -1),
    ("reduction", TypeError, {}, 1.0),
    ("self", ValueError, {"self": np.zeros((), np.float32)}, 1),
    ("self", ValueError, {"self": np.zeros((4, 5, 1), np.float32)}, 1),
    ("target", ValueError, {"target": np.zeros((4, 1), np.int64)}, 1),
    ("target", ValueError, {"target": np.zeros(3, np.int64)}, 1),
    ("target", ValueError, {"target": np.zeros((), np.int64)}, 1),
    ("target", ValueError, {"self": np.zeros(5, np.float32), "target": np.zeros(5, np.int64)}, 1),  # N == C
    ("target", ValueError, {"self": np.zeros(5, np.float32), "target": np.zeros(4, np.int64)}, 1),
    ("weight", ValueError, {"weight": np.ones(4, np.float32)}, 1),
    ("weight", ValueError, {"weight": np.ones((1, 5), np.float32)}, 1),
    ("total_weight", ValueError, {"total_weight": np.ones(2, np.float32)}, 1),
    ("total_weight", ValueError, {"total_weight": np.ones(0, np.float32)}, 1),
    ("grad_output", ValueError, {"grad_output": np.ones(2, np.float32)}, 1),
    ("grad_output", ValueError, {"grad_output": np.ones((1, 1), np.float32)}, 2),
    ("grad_output", ValueError, {"grad_output": np.ones((), np.float32)}, 0),
    ("grad_output", ValueError, {"grad_output": np.ones(5, np.float32)}, 0),
]


@pytest.mark.parametrize("name,error,change,reduction", REJECTS)
def test_rejects_metadata(name, error, change, reduction):
    a = _valid() | change
    with pytest.raises(error, match=rf"^nll_loss_backward: (parameter|property) '{name}'"):
        _call(a, reduction)


@pytest.mark.parametrize(
    "out,error",
    [(np.zeros((5, 4), np.float32), ValueError), (np.zeros((4, 5), np.float16), TypeError),
     (np.zeros((4, 5), np.float32).tolist(), TypeError)],
    ids=["shape", "dtype", "not-an-array"],
)
def test_rejects_out(out, error):
    with pytest.raises(error, match=r"^nll_loss_backward: parameter 'out'"):
        _call(_valid(), 1, out=out)


@pytest.mark.parametrize("value,error", [(1.5, TypeError), ("x", TypeError), (2**63, ValueError)])
def test_rejects_ignore_index(value, error):
    with pytest.raises(error, match=r"^nll_loss_backward: parameter 'ignore_index'"):
        _call(_valid(), 1, value)


@pytest.mark.parametrize(
    "target_dtype,values,ignore,bad,position",
    [(np.int64, [0, 4, 5, 1], -100, 5, 2), (np.int32, [-1, 0, 0, 0], -100, -1, 0),
     (np.int64, [-100, 1, 2, -7], -100, -7, 3), (np.uint8, [1, 255, 0, 0], -1, 255, 1),
     (np.int64, [2, 2, -100, 0], 2, -100, 2)],
)
def test_rejects_target_values(target_dtype, values, ignore, bad, position):
    a = _valid() | {"target": np.array(values, target_dtype)}
    want = rf"^nll_loss_backward: parameter 'target' has value {bad} at position {position}, outside \[0, C=5\)"
    with pytest.raises(ValueError, match=want):
        _call(a, 1, ignore)


def test_rejects_target_value_one_d():
    a = _valid() | {"self": np.zeros(5, np.float32), "target": np.array(9)}
    want = r"^nll_loss_backward: parameter 'target' has value 9, outside \[0, C=5\) and not ignore_index \(-100\)$"
    with pytest.raises(ValueError, match=want):
        _call(a, 1)


@pytest.mark.parametrize(
    "change", [{"target": np.array([0, 1, 7, 2])}, {"weight": np.ones(3, np.float32)}], ids=["value", "metadata"]
)
def test_rejected_call_leaves_out_untouched(change):
    out = np.full((4, 5), 7.0, np.float32)
    with pytest.raises(ValueError):
        _call(_valid() | change, 1, out=out)
    assert np.all(out == 7.0)


def test_kernel_bounds_guard_never_writes_outside_out():
    # Launch without the API's value check: bad targets leave a zero row, and nothing outside
    # out (a window of a NaN-filled buffer) is written.
    a = _valid(6, 5)
    base = np.full((8, 7), np.nan, np.float32)
    for target_dtype, values in [(np.int64, [5, -1, 2**40, -(2**40), 0, 4]), (np.uint8, [5, 255, 128, 6, 0, 4])]:
        base[...] = np.nan
        arrays = a | {"target": np.array(values, target_dtype), "out": base[1:-1, 1:-1]}
        launch(NLLLossBackwardOp, arrays, {"reduction": 2, "ignore_index": -100})
        assert not np.any(base[1:-1, 1:-1][:4]), "an out-of-range target wrote inside out"
        assert np.count_nonzero(base[5:7, 1:-1]) == 2
        border = np.ones(base.shape, bool)
        border[1:-1, 1:-1] = False
        assert np.all(np.isnan(base[border])), "an out-of-range target wrote outside out"


# -- PyTorch oracle -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("one_d", [False, True], ids=["2d", "1d"])
@pytest.mark.parametrize("ignore", [-100, 2])
def test_matches_torch(rng, dtype, reduction, one_d, ignore):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed: no oracle to compare with")
    a = _operands(rng, 23, 11, dtype, np.uint8 if reduction == 2 else np.int64, reduction, ignore, one_d)
    got = _call(a, reduction, ignore)
    t_dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[str(np.dtype(dtype))]

    def tensor(x):
        x = np.asarray(x)
        if x.dtype.kind in "iu":
            return torch.from_numpy(np.array(x))
        return torch.from_numpy(np.array(x, np.float32)).to(t_dtype)

    want = torch.ops.aten.nll_loss_backward(
        tensor(a["grad_output"]), tensor(a["self"]), tensor(a["target"]), tensor(a["weight"]), reduction, ignore,
        tensor(a["total_weight"]).reshape(()),
    )
    want = want.float().numpy()
    # PyTorch rounds w·g and then the division each to the half-precision dtype; npugrad rounds
    # once (as the reference does). Where the result is subnormal the two differ by up to one
    # subnormal step, which no relative tolerance covers: compare those elements by that step.
    info = ml_dtypes.finfo(dtype)
    tiny = np.abs(want) < float(info.smallest_normal)
    step = float(info.smallest_subnormal)
    assert np.all(np.abs(np.asarray(got, np.float32)[tiny] - want[tiny]) <= step * 1.0001)
    assert_close(np.asarray(got)[~tiny], want[~tiny], dtype=np.dtype(dtype))
