"""The vendor two-phase form: metadata errors in phase one, value errors in phase two, results
identical to the plain API, single-use executors unless repeatable."""

import numpy as np
import pytest
from conftest import assert_close

from npugrad import aclnn
from npugrad.reference import harness


def _nll_operands(rng, n=40, c=13):
    shapes = {"self": (n, c), "target": (n,), "weight": (c,), "total_weight": (1,), "grad_output": ()}
    dts = {k: np.dtype(np.float32) for k in shapes} | {"target": np.dtype(np.int64)}
    return harness.random_operands("nll_loss_backward", shapes, dts, {"ignore_index": -100}, rng)


def test_nll_two_phase_matches_reference(rng):
    a = _nll_operands(rng)
    out = np.full(a["self"].shape, np.nan, np.float32)
    size, executor = aclnn.NLLLossBackward.get_workspace_size(
        gradOutput=a["grad_output"], self=a["self"], target=a["target"], weight=a["weight"],
        reduction=1, ignoreIndex=-100, totalWeight=a["total_weight"], out=out)
    assert size == 0
    assert np.isnan(out).all(), "phase one must not write the output"
    assert aclnn.execute(None, executor) == aclnn.ACLNN_SUCCESS
    assert_close(out, harness.expected("nll_loss_backward", a, {"reduction": 1, "ignore_index": -100})["out"])


def test_metadata_errors_in_phase_one_value_errors_in_phase_two(rng):
    a = _nll_operands(rng)
    with pytest.raises(ValueError, match="nll_loss_backward: parameter 'weight'"):
        aclnn.aclnnNLLLossBackwardGetWorkspaceSize(a["grad_output"], a["self"], a["target"], a["weight"][:3], 1, -100,
                                                   a["total_weight"], np.empty_like(a["self"]))
    a["target"][7] = 99
    out = np.full(a["self"].shape, np.nan, np.float32)
    size, executor = aclnn.aclnnNLLLossBackwardGetWorkspaceSize(a["grad_output"], a["self"], a["target"], a["weight"],
                                                                1, -100, a["total_weight"], out)
    with pytest.raises(ValueError, match="parameter 'target' has value 99"):
        aclnn.aclnnNLLLossBackward(None, size, executor)
    assert np.isnan(out).all()


def test_executor_runs_once_unless_repeatable(rng):
    shapes = {k: (33,) for k in ("grad", "var", "m", "v", "s")} | {"step": (1,)}
    a = harness.random_operands("apply_fused_ema_adam", shapes, {k: np.dtype(np.float32) for k in shapes} | {"step": np.dtype(np.int64)}, {}, rng)
    start = {k: a[k].copy() for k in ("var", "m", "v", "s")}
    _, executor = aclnn.ApplyFusedEmaAdam.get_workspace_size(a["grad"], a["var"], a["m"], a["v"], a["s"], a["step"])
    aclnn.execute(np.empty(0, np.uint8), executor)
    with pytest.raises(RuntimeError, match="already run"):
        aclnn.execute(None, executor)
    want = harness.expected("apply_fused_ema_adam", {**a, **start}, {})
    for k in ("var", "m", "v", "s"):
        assert_close(a[k], want[k])
    _, again = aclnn.ApplyFusedEmaAdam.get_workspace_size(a["grad"], a["var"], a["m"], a["v"], a["s"], a["step"], repeatable=True)
    aclnn.execute(None, again)
    aclnn.execute(None, again)


def test_bce_dsp_form(rng):
    shapes = {"input_x": (50,), "input_y": (50,), "dloss": (1,), "weight": (50,)}
    a = harness.random_operands("binary_cross_entropy_grad", shapes, dict.fromkeys(shapes, np.dtype(np.float16)), {}, rng)
    dx = np.empty(50, np.float16)
    with pytest.raises(ValueError, match="'weight' is null"):
        aclnn.BinaryCrossEntropyGrad.get_workspace_size(50, 2, a["input_x"], a["input_y"], None, a["dloss"], dx, 1)
    _, executor = aclnn.BinaryCrossEntropyGrad.get_workspace_size(50, 2, a["input_x"], a["input_y"], a["weight"], a["dloss"], dx, 1)
    aclnn.execute(None, executor)
    assert_close(dx, harness.expected("binary_cross_entropy_grad", a, {"reduction": 2})["dx"])


def test_converted_indices_are_read_in_phase_two(rng):
    # Float indices (the vendor converts them) are converted when the executor runs, from what the
    # array holds then, not from what it held in phase one.
    g = rng.standard_normal((6, 4)).astype(np.float32)
    idx = np.array([0.5, 1.2, 2.9, 3.0, 4.7, 0.0], np.float32)
    out = np.full((5, 4), np.nan, np.float32)
    _, ex = aclnn.EmbeddingDenseBackward.get_workspace_size(g, idx, 5, -1, False, out)
    idx[:] = [4.2, 4.9, 3.1, 2.0, 1.5, 0.3]
    aclnn.execute(None, ex)
    want = harness.expected("embedding_dense_backward", {"grad": g, "indices": idx}, {"num_weights": 5})["out"]
    np.testing.assert_array_equal(out, want)
    _, ex = aclnn.EmbeddingDenseBackward.get_workspace_size(g, idx, 5, -1, False, out)
    idx[2] = 5.0
    with pytest.raises(ValueError, match=r"^embedding_dense_backward: parameter 'indices' must lie in \[0, num_weights\)"):
        aclnn.execute(None, ex)


def test_flce_and_embedding_two_phase(rng):
    bt, h, v = 20, 16, 130
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": (3,), "masked_target": (bt,), "softmax": (bt, v)}
    dts = {k: np.dtype(np.float32) for k in shapes} | {"target_mask": np.dtype(np.uint8), "masked_target": np.dtype(np.int64)}
    a = harness.random_operands("fused_linear_cross_entropy_loss_grad", shapes, dts, {}, rng)
    gi, gw = np.empty((bt, h), np.float32), np.empty((v, h), np.float32)
    _, ex = aclnn.aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize(
        a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"], 0.0, None, None, a["softmax"], gi, gw)
    aclnn.aclnnFusedLinearCrossEntropyLossGrad(None, 0, ex)
    want = harness.expected("fused_linear_cross_entropy_loss_grad", a, {})
    assert_close(gi, want["input_grad_out"])
    assert_close(gw, want["weight_grad_out"])

    g = rng.standard_normal((6, 8)).astype(np.float32)
    idx = rng.integers(0, 10, 6)
    out = np.empty((10, 8), np.float32)
    _, ex = aclnn.EmbeddingDenseBackward.get_workspace_size(g, idx, 10, 2**64 - 1, True, out)
    aclnn.execute(None, ex)
    assert_close(out, harness.expected("embedding_dense_backward", {"grad": g, "indices": idx}, {"num_weights": 10, "scale_grad_by_freq": True})["out"])


def _vendor_calls():
    """Each two-phase entry point with valid tiny arguments by the vendor's names, and the names
    of its required pointers (OPS.md §1.7, 2.3, 3.3, 4.3, 5.3; FORWARD.md)."""
    f = np.float32
    z = lambda *shape, dtype=f: np.zeros(shape, dtype)  # noqa: E731
    bt, h, v = 4, 8, 130
    return {
        "aclnnFusedLinearCrossEntropyLossGrad": (
            aclnn.FusedLinearCrossEntropyLossGrad,
            dict(grad=z(bt), input=z(bt, h), weight=z(v, h), targetMask=z(1, dtype=np.uint8),
                 maskedTarget=z(bt, dtype=np.int64), labelSmoothing=0.0, logitsMaxOptional=None,
                 sumExpLogitsOptional=None, softmaxOptional=z(bt, v), inputGradOut=z(bt, h), weightGradOut=z(v, h)),
            ("grad", "input", "weight", "targetMask", "maskedTarget", "inputGradOut", "weightGradOut")),
        "aclnnFusedLinearOnlineMaxSum": (
            aclnn.FusedLinearOnlineMaxSum,
            dict(input=z(bt, h), weight=z(v, h), target=z(bt, dtype=np.int64), vocabStartIndex=0, vocabEndIndex=v,
                 logitsMaxLocalOut=z(bt), sumExpLogitsLocalOut=z(bt), predictedLogitsLocalOut=z(bt),
                 targetMaskOut=z(1, dtype=np.uint8), maskedTargetOut=z(bt, dtype=np.int64)),
            ("input", "weight", "target", "logitsMaxLocalOut", "sumExpLogitsLocalOut", "predictedLogitsLocalOut",
             "targetMaskOut", "maskedTargetOut")),
        "aclnnFusedCrossEntropyLossWithMaxSum": (
            aclnn.FusedCrossEntropyLossWithMaxSum,
            dict(logitsMax=z(bt), sumExpLogits=np.ones(bt, f), predictedLogits=z(bt), labelSmoothing=0.0,
                 inputOptional=None, weightOptional=None, vocabParallelLogitsOptional=None, lossOut=z(bt)),
            ("logitsMax", "sumExpLogits", "predictedLogits", "lossOut")),
        "aclnnEmbeddingDenseBackward": (
            aclnn.EmbeddingDenseBackward,
            dict(grad=z(3, h), indices=z(3, dtype=np.int64), numWeights=5, paddingIdx=-1, scaleGradByFreq=False,
                 out=z(5, h)),
            ("grad", "indices", "out")),
        "aclnnNLLLossBackward": (
            aclnn.NLLLossBackward,
            dict(gradOutput=np.array(1.0, f), self=z(2, 3), target=z(2, dtype=np.int64), weight=np.ones(3, f),
                 reduction=1, ignoreIndex=-100, totalWeight=np.array(2.0, f), out=z(2, 3)),
            ("gradOutput", "self", "target", "weight", "totalWeight", "out")),
        "aclnnApplyFusedEmaAdam": (
            aclnn.ApplyFusedEmaAdam,
            dict(grad=z(6), varRef=z(6), mRef=z(6), vRef=z(6), sRef=z(6), step=np.ones(1, np.int64)),
            ("grad", "varRef", "mRef", "vRef", "sRef", "step")),
        "Binarycrossentropygrad": (
            aclnn.BinaryCrossEntropyGrad,
            dict(input_size=6, reduction=1, input_x=np.full(6, 0.5, f), input_y=z(6), weight=None, dloss=np.ones(1, f),
                 dx=z(6)),
            ("input_x", "input_y", "dloss", "dx")),
    }


@pytest.mark.parametrize("op", list(_vendor_calls()))
def test_a_null_required_pointer_is_rejected_in_phase_one(op):
    """The vendor's ACLNN_ERR_PARAM_NULLPTR: a required tensor (an input, or an output to write,
    which the plain API would allocate) given as None is a TypeError naming it; the same call
    with every pointer given plans and runs."""
    cls, args, required = _vendor_calls()[op]
    for name in required:
        with pytest.raises(TypeError, match=rf"^{op}: parameter '{name}' is null$"):
            cls.get_workspace_size(**{**args, name: None})
    size, executor = cls.get_workspace_size(**args)
    assert size == 0 and aclnn.execute(None, executor) == aclnn.ACLNN_SUCCESS


def test_an_array_changed_between_the_phases_is_rejected(rng):
    """The executor runs phase one's layout at the arrays' current addresses: an array resized in
    place (ndarray.resize, refcheck=False) would be written past its new end (a segfault), one
    reshaped or restrided would be read in the old layout. Each is an error naming it, nothing written."""
    a = _nll_operands(rng)
    for change in (lambda o: o.resize((1, 1), refcheck=False), lambda o: setattr(o, "shape", o.shape[::-1]),
                   lambda o: o.setflags(write=False)):
        out = np.full(a["self"].shape, np.nan, np.float32)
        _, executor = aclnn.NLLLossBackward.get_workspace_size(a["grad_output"], a["self"], a["target"], a["weight"],
                                                               1, -100, a["total_weight"], out)
        change(out)
        with pytest.raises(ValueError, match="aclnnNLLLossBackward: parameter 'out' (changed|became read-only)"):
            aclnn.execute(None, executor)
        assert np.isnan(out).all()


@pytest.mark.parametrize("op", ["aclnnFusedLinearCrossEntropyLossGrad", "aclnnFusedCrossEntropyLossWithMaxSum"])
@pytest.mark.parametrize("alpha", [0.1, 1.5])
def test_label_smoothing_is_zero_in_the_vendor_form(op, alpha):
    """labelSmoothing != 0 is the vendor's reject (OPS.md §1.7, FORWARD.md §2), named as this
    form's parameter: the plain API's message asked for 'vocab_size' or 'sum_logits', which this
    form has no parameter for."""
    cls, args, _ = _vendor_calls()[op]
    with pytest.raises(ValueError, match=rf"^{op}: parameter 'labelSmoothing' must be 0, got {alpha} "):
        cls.get_workspace_size(**{**args, "labelSmoothing": alpha})
    with pytest.raises(TypeError, match=rf"^{op}: parameter 'labelSmoothing' must be a real number"):
        cls.get_workspace_size(**{**args, "labelSmoothing": "0"})
