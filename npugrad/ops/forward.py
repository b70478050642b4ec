"""fused_linear_online_max_sum (aclnnFusedLinearOnlineMaxSum) and fused_cross_entropy_loss_with_max_sum
(aclnnFusedCrossEntropyLossWithMaxSum): the forward companions of the linear cross-entropy gradient
(../shared/spec/FORWARD.md), with its extensions as keyword arguments that default to the vendor's
semantics."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from npugrad.dialect import FusedCrossEntropyLossWithMaxSumOp, FusedLinearOnlineMaxSumOp
from npugrad.dialect.train import MAX_LOGITS_BLOCK
from npugrad.ops.common import SpreadInput, allocate, as_input, flag, integer, output, real, reject_overlap
from npugrad.runtime.launch import Call, check, two_phase

MAX_SUM = "fused_linear_online_max_sum"
LOSS = "fused_cross_entropy_loss_with_max_sum"
F32 = np.dtype(np.float32)


class OnlineMaxSum(NamedTuple):
    """One shard's statistics: (BT,) float32 each, the mask (ceil(BT/8),) uint8, the masked
    targets (BT,) in the target's dtype; the logits (BT, V) and Σ of the logits (BT,) when asked."""

    logits_max: np.ndarray
    sum_exp_logits: np.ndarray
    predicted_logits: np.ndarray
    target_mask: np.ndarray
    masked_target: np.ndarray
    logits: np.ndarray | None
    sum_logits: np.ndarray | None
    logits_block_max: np.ndarray | None = None  # with logits_block: (BT, ceil(V/B)) float32


@two_phase(replay=True)
def fused_linear_online_max_sum(input, weight, target, vocab_start_index, vocab_end_index, *, softcap=0.0,
                                ignore_index=None, return_logits=False, return_sum_logits=False, float32_logits=False,
                                logits_block=0, logits_max_out=None, sum_exp_logits_out=None,
                                predicted_logits_out=None, target_mask_out=None, masked_target_out=None,
                                logits_out=None, sum_logits_out=None, logits_block_max_out=None):
    """One vocabulary shard's statistics of Z' = softcap(X·Wᵀ), in one pass over W with an online
    row maximum (no BT×V buffer unless `return_logits`): an OnlineMaxSum.

    input (BT, H) and weight (V, H) float16, bfloat16 or float32; target (BT,) int32/int64 global
    ids; the shard is [vocab_start_index, vocab_end_index). `softcap` c > 0 caps the logits at
    c·tanh(Z/c); rows whose target is `ignore_index` are skipped (their statistics are 0);
    `return_sum_logits`: Σ_v Z'_tv, which label smoothing needs. The logits come in the input's
    dtype, or with `float32_logits` (an extension, default off) in float32 whatever the input's,
    unrounded: what a softmax made from them needs; or with `logits_block` B > 0 (an extension,
    default 0) compact, in float16, E = exp(Z' − C) with C (BT, ceil(V/B)) float32 each block of
    B columns' row maximum (`logits_block_max` of the result): what ops/loss.py's chunked
    schedule keeps for bfloat16 and float16 (train.FusedLinearOnlineMaxSumOp)."""
    start = integer(MAX_SUM, "vocab_start_index", vocab_start_index)
    end = integer(MAX_SUM, "vocab_end_index", vocab_end_index)
    cap = real(MAX_SUM, "softcap", softcap, float32=True)
    ignore = None if ignore_index is None else integer(MAX_SUM, "ignore_index", ignore_index)
    wide = flag(MAX_SUM, "float32_logits", float32_logits)
    block = integer(MAX_SUM, "logits_block", logits_block, "a non-negative integer", 0)
    want_logits = flag(MAX_SUM, "return_logits", return_logits) or logits_out is not None or block > 0
    want_sum = flag(MAX_SUM, "return_sum_logits", return_sum_logits) or sum_logits_out is not None
    x = as_input(MAX_SUM, "input", input)
    w = as_input(MAX_SUM, "weight", weight)
    t = as_input(MAX_SUM, "target", target)
    bt = x.shape[0] if x.ndim == 2 else 0
    v = w.shape[0] if w.ndim == 2 else 0
    sized = "parameter 'input'"
    arrays = {
        "input": x, "weight": w, "target": t,
        "logits_max_local_out": output(MAX_SUM, "logits_max_out", logits_max_out, (bt,), F32, sized),
        "sum_exp_logits_local_out": output(MAX_SUM, "sum_exp_logits_out", sum_exp_logits_out, (bt,), F32, sized),
        "predicted_logits_local_out": output(MAX_SUM, "predicted_logits_out", predicted_logits_out, (bt,), F32, sized),
        "target_mask_out": output(MAX_SUM, "target_mask_out", target_mask_out, (-(-bt // 8),), np.dtype(np.uint8), sized),
        "masked_target_out": output(MAX_SUM, "masked_target_out", masked_target_out, (bt,), t.dtype, sized),
        "vocab_parallel_logits_out": output(MAX_SUM, "logits_out", logits_out, (bt, v),
                                            np.dtype(np.float16) if block else F32 if wide else x.dtype, sized)
        if want_logits else None,
        "logits_block_max_out": output(MAX_SUM, "logits_block_max_out", logits_block_max_out,
                                       (bt, -(-v // block) if block else 0), F32, sized)
        if block or logits_block_max_out is not None else None,
        "sum_logits_local_out": output(MAX_SUM, "sum_logits_out", sum_logits_out, (bt,), F32, sized)
        if want_sum else None,
    }
    display = {"logits_max_local_out": "logits_max_out", "sum_exp_logits_local_out": "sum_exp_logits_out",
               "predicted_logits_local_out": "predicted_logits_out", "vocab_parallel_logits_out": "logits_out",
               "sum_logits_local_out": "sum_logits_out"}
    props = {"vocab_start_index": start, "vocab_end_index": end, "softcap": cap}
    if ignore is not None:
        props["ignore_index"] = ignore
    if wide:
        props["float32_logits"] = True
    if block:  # past V, one block of V columns: the same outputs, and the nest's tile no wider than V
        props["logits_block"] = block if block > MAX_LOGITS_BLOCK else min(block, max(v, 1))
    props = check(FusedLinearOnlineMaxSumOp, arrays, props, display)
    # Checked as properties, passed at run time (the op's vocab_range): the kernel is the same
    # for every shard, and for every part ops/loss.py cuts a shard into, of any start and size.
    arrays["vocab_range"] = np.array([props.pop("vocab_start_index"), props.pop("vocab_end_index")], np.int64)
    outputs = [n for n in FusedLinearOnlineMaxSumOp.outputs() if arrays.get(n) is not None]
    reject_overlap(MAX_SUM, arrays, outputs, display)
    fresh = allocate(MAX_SUM, arrays, outputs, display)
    result = OnlineMaxSum(arrays["logits_max_local_out"], arrays["sum_exp_logits_local_out"],
                          arrays["predicted_logits_local_out"], arrays["target_mask_out"], arrays["masked_target_out"],
                          arrays["vocab_parallel_logits_out"], arrays["sum_logits_local_out"],
                          arrays["logits_block_max_out"])
    return SpreadInput(FusedLinearOnlineMaxSumOp, arrays, props, result, fresh=fresh)



@two_phase(replay=True)
def fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, label_smoothing=0.0,
                                          vocab_parallel_logits=None, *, sum_logits=None, vocab_size=0, z_loss=0.0,
                                          target=None, ignore_index=None, loss_out=None, softmax_out=None):
    """The loss per token from the global statistics (after the collectives): (loss (BT,), softmax
    (BT, V) or None). loss_t = log S_t − P_t [+ α·(P_t + M_t − ΣZ'_t/K)] [+ λ·(M_t + log S_t)²],
    0 where `target` equals `ignore_index`; given a shard's logits, its columns of the softmax.
    Label smoothing α needs `sum_logits` (the global Σ of the logits) and `vocab_size` K."""
    alpha = real(LOSS, "label_smoothing", label_smoothing)
    k = integer(LOSS, "vocab_size", vocab_size)
    zl = real(LOSS, "z_loss", z_loss, float32=True)
    ignore = None if ignore_index is None else integer(LOSS, "ignore_index", ignore_index)
    m = as_input(LOSS, "logits_max", logits_max)
    arrays = {
        "logits_max": m,
        "sum_exp_logits": as_input(LOSS, "sum_exp_logits", sum_exp_logits),
        "predicted_logits": as_input(LOSS, "predicted_logits", predicted_logits),
        "vocab_parallel_logits": None if vocab_parallel_logits is None
        else as_input(LOSS, "vocab_parallel_logits", vocab_parallel_logits),
        "sum_logits": None if sum_logits is None else as_input(LOSS, "sum_logits", sum_logits),
        "target": None if target is None else as_input(LOSS, "target", target),
    }
    bt = m.shape[0] if m.ndim == 1 else 0
    logits = arrays["vocab_parallel_logits"]
    arrays["loss_out"] = output(LOSS, "loss_out", loss_out, (bt,), F32, "parameter 'logits_max'")
    if logits is None:  # a softmax_out given without the logits: the op's rule (both or neither) rejects it
        arrays["softmax_out"] = None if softmax_out is None else output(LOSS, "softmax_out", softmax_out, (), F32)
    else:
        arrays["softmax_out"] = output(LOSS, "softmax_out", softmax_out, logits.shape, F32,
                                       "parameter 'vocab_parallel_logits'")
    props = {"label_smoothing": alpha, "vocab_size": k, "z_loss": zl}
    if ignore is not None:
        props["ignore_index"] = ignore
    props = check(FusedCrossEntropyLossWithMaxSumOp, arrays, props)
    outputs = [n for n in ("loss_out", "softmax_out") if arrays[n] is not None]
    reject_overlap(LOSS, arrays, outputs)
    fresh = allocate(LOSS, arrays, outputs)
    return Call(FusedCrossEntropyLossWithMaxSumOp, arrays, props, (arrays["loss_out"], arrays["softmax_out"]),
                fresh=fresh)
