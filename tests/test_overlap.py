"""Outputs that share memory with an input or another output are rejected before anything is
written (the kernels write an output before they have read all of their inputs), as PyTorch
rejects such an `out=`. Only EMA-Adam's states are both read and written, by definition: each
state is its own input and output, and must not overlap another."""

import numpy as np
import pytest
from api_cases import (
    BCE,
    EMA_ADAM,
    EMBEDDING,
    FLCE,
    NLL,
    OPS,
    OUTPUTS,
    Case,
    bce,
    default_case,
    ema_adam,
    flce,
    overlapping,
)
from conftest import assert_close

from npugrad import aclnn, ops


def _rejected(case: Case, *names: str) -> None:
    message = case.rejected(None)
    for word in (case.op, *(f"'{n}'" for n in names), "overlap"):
        assert word in message, f"{word!r} not in {message!r}"


# -- the findings: each of these was accepted and returned a wrong result -----------------


def test_embedding_out_that_is_grad_is_rejected():
    g = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(ValueError, match="embedding_dense_backward: .*'grad'.*'out'.*overlap"):
        ops.embedding_dense_backward(g, np.arange(4), 4, out=g)
    np.testing.assert_array_equal(g, np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_array_equal(ops.embedding_dense_backward(g, np.arange(4), 4), g)  # the answer


def test_nll_out_that_is_weight_is_rejected():
    one = np.ones(1, np.float32)
    w = np.array([1, 2, 3, 4], np.float32)
    with pytest.raises(ValueError, match="nll_loss_backward: .*'weight'.*'out'.*overlap"):
        ops.nll_loss_backward(one, np.zeros(4, np.float32), np.array(2), w, 2, -100, one, out=w)
    np.testing.assert_array_equal(w, [1, 2, 3, 4])
    got = ops.nll_loss_backward(one, np.zeros(4, np.float32), np.array(2), w, 2, -100, one)
    np.testing.assert_array_equal(got, [0, 0, -3, 0])


@pytest.mark.parametrize("output, operand", [("input_grad_out", "input"), ("weight_grad_out", "weight")])
def test_flce_output_that_is_an_input_is_rejected(rng, output, operand):
    case = default_case(FLCE, rng, out=False)
    case.arrays[output] = case.arrays[operand]
    _rejected(case, output, operand)


def test_flce_output_inside_softmax_is_rejected(rng):
    """The vendor kernel builds its logit gradient inside `softmax`; this one reads softmax while
    it writes the outputs, so an output placed there is rejected like any other overlap."""
    case = flce(rng, bt=3, h=4, v=128, mode="high-performance")
    softmax, out = overlapping(case.arrays["softmax"], np.empty((3, 4), np.float32))
    case.arrays["softmax"], case.arrays["input_grad_out"] = softmax, out
    _rejected(case, "input_grad_out", "softmax")


# -- every output against every other array parameter ------------------------------------------


def _pairs():
    for op in OPS:
        case = default_case(op, np.random.default_rng(0))
        if op == EMA_ADAM:
            case.arrays["step"] = np.array([3])
        for output in OUTPUTS[op]:
            for other, a in case.arrays.items():
                if other != output and isinstance(a, np.ndarray):
                    yield op, output, other


@pytest.mark.parametrize("op, output, other", list(_pairs()), ids=lambda x: str(x))
@pytest.mark.parametrize("shift", [0, 1], ids=["same-start", "shifted"])
def test_an_output_overlapping_any_other_parameter_is_rejected(rng, op, output, other, shift):
    case = default_case(op, rng)
    if op == EMA_ADAM:
        case.arrays["step"] = np.array([case.scalars.pop("step")])
    case.arrays[other], case.arrays[output] = overlapping(case.arrays[other], case.arrays[output], shift)
    _rejected(case, output, other)


def test_the_two_phase_form_rejects_overlap_in_phase_one():
    g = np.arange(12, dtype=np.float32).reshape(4, 3)
    with pytest.raises(ValueError, match="embedding_dense_backward: .*overlap"):
        aclnn.EmbeddingDenseBackward.get_workspace_size(g, np.arange(4), 4, -1, False, g)


def test_an_output_whose_elements_share_memory_is_rejected(rng):
    case = bce(rng, (5, 7), out=True)
    case.arrays["out"] = np.lib.stride_tricks.as_strided(np.zeros(7, np.float32), (5, 7), (0, 4))  # writable
    case.rejected(r"binary_cross_entropy_grad: parameter 'out' .*share memory")


def test_interleaved_states_with_one_element_shared_are_rejected(rng):
    case = ema_adam(rng, (6,))
    buf = np.zeros(11, np.float32)
    case.arrays["var"], case.arrays["m"] = buf[0:11:2], buf[5:11]  # share buf[6], buf[8], buf[10]
    _rejected(case, "var", "m")


# -- what stays allowed ----------------------------------------------------------------------------


def test_disjoint_views_of_one_buffer_are_accepted(rng):
    """Exact, not by bounds: interleaved arrays whose bounds overlap but no element is shared."""
    case = bce(rng, (6, 8), out=True)
    buf = np.empty((6, 16), np.float32)
    buf[:, 0::2] = case.arrays["input_x"]
    case.arrays["input_x"], case.arrays["out"] = buf[:, 0::2], buf[:, 1::2]
    want = case.expected()
    got = case.call()
    assert got["out"] is case.arrays["out"]
    assert_close(got["out"], want["out"])


def test_interleaved_states_are_accepted(rng):
    case = ema_adam(rng, (4, 5))
    buf = np.empty((4, 5, 4), np.float32)
    for i, k in enumerate(("var", "m", "v", "s")):
        buf[..., i] = case.arrays[k]
        case.arrays[k] = buf[..., i]
    want = case.expected()
    got = case.call()
    for k in ("var", "m", "v", "s"):
        assert_close(got[k], want[k])


def test_inputs_may_share_memory(rng):
    case = bce(rng, (5, 7), reduction=2)
    case.arrays["input_y"] = case.arrays["weight"] = case.arrays["input_x"]
    assert_close(case.call()["out"], case.expected()["out"])


@pytest.mark.parametrize("op", [BCE, NLL, EMBEDDING, FLCE])
def test_fresh_outputs_never_overlap(rng, op):
    case = default_case(op, rng, out=False)
    want = case.expected()
    for k, got in case.call().items():
        assert_close(got, want[k])
