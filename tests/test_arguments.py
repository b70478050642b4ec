"""Scalar and enum arguments are checked by type and value, and a rejection names the op and the
parameter: no int()/float() coercion of whatever was passed.

What each kind accepts:
- integer enums (reduction, mode) and int64 values (ignore_index, num_weights, padding_idx, an
  int step): Python and NumPy integers, not bool, not floats (not even 1.0);
- real numbers (label_smoothing, EMA-Adam's lr, eps, betas, decays): Python and NumPy reals and
  0-d arrays of numbers, not bool, finite (EMA-Adam's also finite as the float32 the kernel
  computes with);
- flags (scale_grad_by_freq, bias_correction): bool and numpy.bool_, and the integers 0 and 1
  (the vendor API's C bool); nothing else.
"""

import numpy as np
import pytest
from api_cases import BCE, EMA_ADAM, EMBEDDING, FLCE, NLL, Case, bce, ema_adam, embedding, flce, nll
from conftest import assert_close

from npugrad import aclnn, ops

# -- the findings -------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", [0.5, 1.5, 1.0, np.float32(2.0)], ids=str)
def test_bce_non_integral_reduction_is_rejected(rng, reduction):
    """0.5 ran as "none" and 1.5 as "mean" (truncated by int())."""
    case = bce(rng, (4, 3), reduction=1)
    case.scalars["reduction"] = reduction
    with pytest.raises(TypeError, match=r"binary_cross_entropy_grad: parameter 'reduction' must be 0 \(none\), "
                                        r"1 \(mean\) or 2 \(sum\), got"):
        case.call()


@pytest.mark.parametrize("op", [BCE, NLL])
@pytest.mark.parametrize("reduction", [None, "mean", float("nan"), True, np.True_, [1]], ids=repr)
def test_reduction_of_another_type_names_op_and_parameter(rng, op, reduction):
    """None, "mean" and NaN raised int()'s own errors; True ran as mean."""
    case = bce(rng, (4, 3)) if op == BCE else nll(rng)
    case.scalars["reduction"] = reduction
    with pytest.raises(TypeError, match=f"{op}: parameter 'reduction' must be 0 \\(none\\)"):
        case.call()


@pytest.mark.parametrize("label_smoothing", [None, "mean", "0", [0.0], True, 0j], ids=repr)
def test_label_smoothing_of_another_type_names_op_and_parameter(rng, label_smoothing):
    case = flce(rng)
    case.scalars["label_smoothing"] = label_smoothing
    with pytest.raises(TypeError, match="fused_linear_cross_entropy_loss_grad: parameter 'label_smoothing' must be a "
                                        "real number"):
        case.call()


# -- every scalar parameter -----------------------------------------------------------------------

REJECTS = [
    # (op, parameter, value, error, words the message must hold besides the op and the parameter)
    (NLL, "ignore_index", 1.5, TypeError, ["integer"]),
    (NLL, "ignore_index", None, TypeError, ["integer"]),
    (NLL, "ignore_index", "-100", TypeError, ["integer"]),
    (NLL, "ignore_index", False, TypeError, ["integer"]),
    (NLL, "ignore_index", 1 << 63, ValueError, ["int64"]),
    (NLL, "reduction", 3, ValueError, ["0 (none), 1 (mean) or 2 (sum)", "got 3"]),
    (NLL, "reduction", -(1 << 70), ValueError, ["int64"]),
    (BCE, "reduction", -1, ValueError, ["0 (none), 1 (mean) or 2 (sum)"]),
    (EMBEDDING, "num_weights", 5.0, TypeError, ["integer"]),
    (EMBEDDING, "num_weights", None, TypeError, ["integer"]),
    (EMBEDDING, "num_weights", True, TypeError, ["integer"]),
    (EMBEDDING, "num_weights", -1, ValueError, [">= 0"]),
    (EMBEDDING, "num_weights", 1 << 63, ValueError, ["int64"]),
    (EMBEDDING, "padding_idx", 0.0, TypeError, ["integer"]),
    (EMBEDDING, "padding_idx", "none", TypeError, ["integer"]),
    (EMBEDDING, "padding_idx", 1 << 64, ValueError, ["int64"]),
    (EMBEDDING, "scale_grad_by_freq", None, TypeError, ["True or False"]),
    (EMBEDDING, "scale_grad_by_freq", "yes", TypeError, ["True or False"]),
    (EMBEDDING, "scale_grad_by_freq", 2, ValueError, ["True or False"]),
    (EMBEDDING, "scale_grad_by_freq", 1.0, TypeError, ["True or False"]),
    (EMBEDDING, "scale_grad_by_freq", np.array([True]), TypeError, ["True or False"]),
    (EMA_ADAM, "mode", True, TypeError, ["0 (L2, Adam) or 1 (decoupled decay, AdamW)"]),
    (EMA_ADAM, "mode", 1.0, TypeError, ["0 (L2, Adam) or 1 (decoupled decay, AdamW)"]),
    (EMA_ADAM, "mode", None, TypeError, ["0 (L2, Adam)"]),
    (EMA_ADAM, "mode", "adamw", TypeError, ["0 (L2, Adam)"]),
    (EMA_ADAM, "mode", 2, ValueError, ["0 (L2, Adam)"]),
    (EMA_ADAM, "bias_correction", None, TypeError, ["True or False"]),
    (EMA_ADAM, "bias_correction", "False", TypeError, ["True or False"]),
    (EMA_ADAM, "lr", None, TypeError, ["real number"]),
    (EMA_ADAM, "lr", "1e-3", TypeError, ["real number"]),
    (EMA_ADAM, "lr", True, TypeError, ["real number"]),
    (EMA_ADAM, "lr", float("inf"), ValueError, ["finite"]),
    (EMA_ADAM, "lr", np.array([1e-3]), TypeError, ["real number"]),  # 1-d: not a scalar
    (EMA_ADAM, "lr", np.array(True), TypeError, ["real number"]),
    (EMA_ADAM, "lr", np.array(1e-3 + 0j), TypeError, ["real number"]),
    (EMA_ADAM, "lr", np.array(np.inf), ValueError, ["finite"]),
    (EMA_ADAM, "lr", 1e39, ValueError, ["finite", "float32"]),
    (EMA_ADAM, "eps", float("nan"), ValueError, ["finite"]),
    (EMA_ADAM, "weight_decay", 10**400, ValueError, ["finite"]),
    (EMA_ADAM, "beta2", np.float64("-inf"), ValueError, ["finite"]),
    (EMA_ADAM, "step", 1 << 63, ValueError, ["int64"]),
    (EMA_ADAM, "step", True, TypeError, ["int64"]),
    (EMA_ADAM, "step", 2.0, TypeError, ["int64"]),
    (FLCE, "label_smoothing", float("nan"), ValueError, ["finite"]),
    (FLCE, "label_smoothing", 0.1, ValueError, ["0"]),
]


def _case(op: str, rng) -> Case:
    return {BCE: bce, NLL: nll, EMBEDDING: embedding, EMA_ADAM: ema_adam, FLCE: flce}[op](rng)


@pytest.mark.parametrize("op, name, value, error, words", REJECTS,
                         ids=[f"{r[0]}-{r[1]}-{r[2]!r}"[:60] for r in REJECTS])
def test_rejects(rng, op, name, value, error, words):
    case = _case(op, rng)
    case.scalars[name] = value
    before = {k: a.tobytes() for k, a in case.arrays.items() if isinstance(a, np.ndarray)}
    with pytest.raises(error) as info:
        case.call()
    message = str(info.value)
    for word in (f"{op}: ", f"'{name}'", *words):
        assert word in message, f"{word!r} not in {message!r}"
    assert {k: a.tobytes() for k, a in case.arrays.items() if isinstance(a, np.ndarray)} == before


ACCEPTS = [
    (BCE, "reduction", np.int64(2)),
    (BCE, "reduction", np.uint8(2)),
    (NLL, "ignore_index", np.int32(-100)),
    (NLL, "reduction", np.array(2)),  # a 0-d integer array is an integer (operator.index)
    (EMBEDDING, "num_weights", np.int64(5)),
    (EMBEDDING, "padding_idx", (1 << 64) - 1),  # uint64 -1, as torch_npu passes it
    (EMBEDDING, "padding_idx", np.uint64(2)),
    (EMBEDDING, "scale_grad_by_freq", np.True_),
    (EMBEDDING, "scale_grad_by_freq", 1),
    (EMBEDDING, "scale_grad_by_freq", np.int8(0)),
    (EMA_ADAM, "mode", np.int64(0)),
    (EMA_ADAM, "bias_correction", 0),
    (EMA_ADAM, "lr", 0),
    (EMA_ADAM, "lr", np.float32(1e-2)),
    (EMA_ADAM, "step", np.int32(7)),
    (FLCE, "label_smoothing", 0),
    (FLCE, "label_smoothing", np.float16(0)),
    (FLCE, "label_smoothing", np.array(0)),  # a 0-d array of numbers is its number
    (EMA_ADAM, "lr", np.array(1e-3)),
    (EMA_ADAM, "eps", np.array(1e-8, np.float32)),
]


@pytest.mark.parametrize("op, name, value", ACCEPTS, ids=[f"{r[0]}-{r[1]}-{r[2]!r}" for r in ACCEPTS])
def test_accepts(rng, op, name, value):
    case = _case(op, rng)
    case.scalars[name] = value
    want = case.expected()
    for k, got in case.call().items():
        assert_close(got, want[k])


def test_vendor_bce_input_size_and_flag_are_checked(rng):
    case = bce(rng, (6,), weighted=False, out=True)
    a = case.arrays
    for size, error in ((6.0, TypeError), ("6", TypeError), (True, TypeError), (7, ValueError)):
        with pytest.raises(error, match="Binarycrossentropygrad: parameter 'input_size'"):
            aclnn.BinaryCrossEntropyGrad.get_workspace_size(size, 1, a["input_x"], a["input_y"], None, a["dloss"],
                                                            a["out"])
    with pytest.raises(TypeError, match="Binarycrossentropygrad: parameter 'weight_defined'"):
        aclnn.BinaryCrossEntropyGrad.get_workspace_size(6, 1, a["input_x"], a["input_y"], None, a["dloss"], a["out"],
                                                        weight_defined="no")


def test_ragged_list_names_op_and_parameter():
    with pytest.raises(TypeError, match="binary_cross_entropy_grad: parameter 'input_y'"):
        ops.binary_cross_entropy_grad([0.5, 0.5], [[0.0], 1.0], np.float32(1))
