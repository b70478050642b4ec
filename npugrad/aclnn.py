"""The vendor's two-phase call, with the vendor's parameter names.

    size, executor = aclnn.NLLLossBackward.get_workspace_size(gradOutput=go, self=s, target=t, weight=w,
                                                              reduction=1, ignoreIndex=-100, totalWeight=tw, out=out)
    aclnn.execute(workspace, executor)          # or aclnn.aclnnNLLLossBackward(workspace, size, executor)

Phase one checks metadata only (shapes, dtypes, attributes) and compiles the kernel; phase two
checks the values the kernel would index with, then runs it, writing the `out` arrays given in
phase one. npugrad kernels manage their own scratch memory, so the workspace size is 0 and any
workspace (or None) is accepted. As on the device, an executor runs once unless it was made
repeatable (`repeatable=True`, the vendor's aclSetAclOpExecutorRepeatable).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from npugrad import ops
from npugrad.ops.common import as_input, integer, real
from npugrad.runtime.launch import Call

ACLNN_SUCCESS = 0


@dataclass
class Executor:
    op: str
    call: Call
    repeatable: bool = False
    _done: bool = field(default=False, init=False)
    # Each array's dtype, shape and strides in phase one: the kernel's layout was made for them.
    _signature: dict = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._signature = {k: (a.dtype, a.shape, a.strides) for k, a in self.call.arrays.items() if a is not None}

    def set_repeatable(self) -> None:
        self.repeatable = True


def execute(workspace, executor: Executor, stream=None) -> int:
    """Phase two: value checks, then the kernel. Returns ACLNN_SUCCESS; raises on bad values."""
    if not isinstance(executor, Executor):
        raise TypeError(f"execute: 'executor' must come from a get_workspace_size call, got {type(executor).__name__}")
    if executor._done and not executor.repeatable:
        raise RuntimeError(f"{executor.op}: this executor has already run (make it repeatable to run it again)")
    if workspace is not None and not isinstance(workspace, np.ndarray | bytearray | memoryview):
        raise TypeError(f"{executor.op}: 'workspace' must be a buffer or None, got {type(workspace).__name__}")
    _check_unchanged(executor)
    executor.call.run()
    executor._done = True
    return ACLNN_SUCCESS


def _check_unchanged(executor: Executor) -> None:
    """The kernel runs on phase one's layout at the arrays' current addresses: an array resized
    (ndarray.resize), reshaped or restrided in place since then would be read and written out of
    its bounds, and an output made read-only would be written all the same."""
    outputs = executor.call.op_cls.outputs()
    for name, (dtype, shape, strides) in executor._signature.items():
        a = executor.call.arrays[name]
        if (a.dtype, a.shape, a.strides) != (dtype, shape, strides):
            raise ValueError(f"{executor.op}: parameter '{name}' changed since phase one: {a.dtype} {a.shape} strides "
                             f"{a.strides}, was {dtype} {shape} strides {strides}")
        if name in outputs and not a.flags.writeable:
            raise ValueError(f"{executor.op}: parameter '{name}' became read-only since phase one")


def _phase_one(op: str, call: Call, repeatable: bool) -> tuple[int, Executor]:
    return 0, Executor(op, call, repeatable)


def _required(op: str, **given) -> None:
    """The vendor's required pointers (OPS.md §1.7, 2.3, 3.3, 4.3, 5.3: ACLNN_ERR_PARAM_NULLPTR):
    None is an error naming the parameter, as the vendor's phase one returns. (The plain API
    allocates an output it is not given; here an output would then be reachable only through
    the executor.)"""
    for name, value in given.items():
        if value is None:
            raise TypeError(f"{op}: parameter '{name}' is null")


def _no_label_smoothing(op: str, label_smoothing, extension: str) -> None:
    """The vendor's ops take labelSmoothing = 0 only (OPS.md §1.7, FORWARD.md §2). npugrad's
    label smoothing needs operands this form has no parameter for (the global vocabulary, the
    sum of the logits): its plain API's error would ask for them."""
    if real(op, "labelSmoothing", label_smoothing) != 0:
        raise ValueError(f"{op}: parameter 'labelSmoothing' must be 0, got {label_smoothing} (the vendor's op has "
                         f"no label smoothing; npugrad.ops.{extension} offers it)")


class FusedLinearCrossEntropyLossGrad:
    @staticmethod
    def get_workspace_size(grad, input, weight, targetMask, maskedTarget, labelSmoothing=0.0,
                           logitsMaxOptional=None, sumExpLogitsOptional=None, softmaxOptional=None,
                           inputGradOut=None, weightGradOut=None, *, repeatable=False):
        _required("aclnnFusedLinearCrossEntropyLossGrad", grad=grad, input=input, weight=weight,
                  targetMask=targetMask, maskedTarget=maskedTarget, inputGradOut=inputGradOut,
                  weightGradOut=weightGradOut)
        _no_label_smoothing("aclnnFusedLinearCrossEntropyLossGrad", labelSmoothing, "fused_linear_cross_entropy_loss_grad")
        call = ops.fused_linear_cross_entropy_loss_grad.plan(
            grad, input, weight, targetMask, maskedTarget, labelSmoothing, logitsMaxOptional,
            sumExpLogitsOptional, softmaxOptional, input_grad_out=inputGradOut, weight_grad_out=weightGradOut)
        return _phase_one("aclnnFusedLinearCrossEntropyLossGrad", call, repeatable)


class FusedLinearOnlineMaxSum:
    """The forward statistics of one vocabulary shard (FORWARD.md §1), the vendor's outputs given."""

    @staticmethod
    def get_workspace_size(input, weight, target, vocabStartIndex, vocabEndIndex, logitsMaxLocalOut,
                           sumExpLogitsLocalOut, predictedLogitsLocalOut, targetMaskOut, maskedTargetOut,
                           vocabParallelLogitsOutOptional=None, *, repeatable=False):
        _required("aclnnFusedLinearOnlineMaxSum", input=input, weight=weight, target=target,
                  logitsMaxLocalOut=logitsMaxLocalOut, sumExpLogitsLocalOut=sumExpLogitsLocalOut,
                  predictedLogitsLocalOut=predictedLogitsLocalOut, targetMaskOut=targetMaskOut,
                  maskedTargetOut=maskedTargetOut)
        outs = {"logits_max_out": logitsMaxLocalOut, "sum_exp_logits_out": sumExpLogitsLocalOut,
                "predicted_logits_out": predictedLogitsLocalOut, "target_mask_out": targetMaskOut,
                "masked_target_out": maskedTargetOut}
        call = ops.fused_linear_online_max_sum.plan(input, weight, target, vocabStartIndex, vocabEndIndex,
                                                    logits_out=vocabParallelLogitsOutOptional, **outs)
        return _phase_one("aclnnFusedLinearOnlineMaxSum", call, repeatable)


class FusedCrossEntropyLossWithMaxSum:
    """The loss per token from the global statistics (FORWARD.md §2); the vendor takes no
    inputOptional/weightOptional (must be null)."""

    @staticmethod
    def get_workspace_size(logitsMax, sumExpLogits, predictedLogits, labelSmoothing, inputOptional, weightOptional,
                           vocabParallelLogitsOptional, lossOut, softMaxOutOptional=None, *, repeatable=False):
        for name, given in (("inputOptional", inputOptional), ("weightOptional", weightOptional)):
            if given is not None:
                raise ValueError(f"aclnnFusedCrossEntropyLossWithMaxSum: parameter '{name}' must be null")
        _required("aclnnFusedCrossEntropyLossWithMaxSum", logitsMax=logitsMax, sumExpLogits=sumExpLogits,
                  predictedLogits=predictedLogits, lossOut=lossOut)
        _no_label_smoothing("aclnnFusedCrossEntropyLossWithMaxSum", labelSmoothing, "fused_cross_entropy_loss_with_max_sum")
        if (vocabParallelLogitsOptional is None) != (softMaxOutOptional is None):
            raise ValueError("aclnnFusedCrossEntropyLossWithMaxSum: parameters 'vocabParallelLogitsOptional' and "
                             "'softMaxOutOptional' are given together or not at all")
        call = ops.fused_cross_entropy_loss_with_max_sum.plan(
            logitsMax, sumExpLogits, predictedLogits, labelSmoothing, vocabParallelLogitsOptional,
            loss_out=lossOut, softmax_out=softMaxOutOptional)
        return _phase_one("aclnnFusedCrossEntropyLossWithMaxSum", call, repeatable)


class EmbeddingDenseBackward:
    @staticmethod
    def get_workspace_size(grad, indices, numWeights, paddingIdx, scaleGradByFreq, out, *, repeatable=False):
        _required("aclnnEmbeddingDenseBackward", grad=grad, indices=indices, out=out)
        call = ops.embedding_dense_backward.plan(grad, indices, numWeights, paddingIdx, scaleGradByFreq, out=out)
        return _phase_one("aclnnEmbeddingDenseBackward", call, repeatable)


class NLLLossBackward:
    @staticmethod
    def get_workspace_size(gradOutput, self, target, weight, reduction, ignoreIndex, totalWeight, out, *,
                           repeatable=False):
        _required("aclnnNLLLossBackward", gradOutput=gradOutput, self=self, target=target, weight=weight,
                  totalWeight=totalWeight, out=out)
        call = ops.nll_loss_backward.plan(gradOutput, self, target, weight, reduction, ignoreIndex, totalWeight, out=out)
        return _phase_one("aclnnNLLLossBackward", call, repeatable)


class ApplyFusedEmaAdam:
    @staticmethod
    def get_workspace_size(grad, varRef, mRef, vRef, sRef, step, lr=1e-3, emaDecay=0.9999, beta1=0.9,
                           beta2=0.999, eps=1e-8, mode=1, biasCorrection=True, weightDecay=0.0, *,
                           repeatable=False):
        _required("aclnnApplyFusedEmaAdam", grad=grad, varRef=varRef, mRef=mRef, vRef=vRef, sRef=sRef, step=step)
        call = ops.apply_fused_ema_adam.plan(grad, varRef, mRef, vRef, sRef, step, lr, emaDecay, beta1, beta2,
                                             eps, mode, biasCorrection, weightDecay)
        return _phase_one("aclnnApplyFusedEmaAdam", call, repeatable)


_BCE = "Binarycrossentropygrad"


class BinaryCrossEntropyGrad:
    """The DSP library's call (`input_size`, `weight_defined` flag) in the same two-phase form."""

    @staticmethod
    def get_workspace_size(input_size, reduction, input_x, input_y, weight, dloss, dx, weight_defined=None, *,
                           repeatable=False):
        _required(_BCE, input_x=input_x, input_y=input_y, dloss=dloss, dx=dx)
        x = as_input(_BCE, "input_x", input_x)
        input_size = integer(_BCE, "input_size", input_size)
        if input_size != x.size:
            raise ValueError(f"{_BCE}: parameter 'input_size' must equal input_x.size = {x.size}, got {input_size}")
        if weight_defined is None:
            weight_defined = weight is not None
        elif not isinstance(weight_defined, bool | np.bool_):  # the C API's int: non-zero means defined
            meaning = "a flag (a bool, or an int: non-zero = defined)"
            weight_defined = integer(_BCE, "weight_defined", weight_defined, meaning) != 0
        if weight_defined and weight is None:
            raise ValueError("Binarycrossentropygrad: parameter 'weight' is null while weight_defined is set")
        call = ops.binary_cross_entropy_grad.plan(input_x, input_y, dloss, weight if weight_defined else None,
                                                  reduction, out=dx)
        return _phase_one("Binarycrossentropygrad", call, repeatable)


def _vendor_pair(cls):
    def run(workspace, workspace_size, executor, stream=None):
        return execute(workspace, executor, stream)

    return cls.get_workspace_size, run


aclnnFusedLinearCrossEntropyLossGradGetWorkspaceSize, aclnnFusedLinearCrossEntropyLossGrad = _vendor_pair(
    FusedLinearCrossEntropyLossGrad)
aclnnFusedLinearOnlineMaxSumGetWorkspaceSize, aclnnFusedLinearOnlineMaxSum = _vendor_pair(FusedLinearOnlineMaxSum)
aclnnFusedCrossEntropyLossWithMaxSumGetWorkspaceSize, aclnnFusedCrossEntropyLossWithMaxSum = _vendor_pair(
    FusedCrossEntropyLossWithMaxSum)
aclnnEmbeddingDenseBackwardGetWorkspaceSize, aclnnEmbeddingDenseBackward = _vendor_pair(EmbeddingDenseBackward)
aclnnNLLLossBackwardGetWorkspaceSize, aclnnNLLLossBackward = _vendor_pair(NLLLossBackward)
aclnnApplyFusedEmaAdamGetWorkspaceSize, aclnnApplyFusedEmaAdam = _vendor_pair(ApplyFusedEmaAdam)
