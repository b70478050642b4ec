"""linear_cross_entropy: the whole LM-head loss, forward and backward, through the fused kernels and
the collectives, with no BT×V buffer anywhere (FORWARD.md §3):

    per shard r:  (m_r, s_r, p_r, mask_r, mt_r) = fused_linear_online_max_sum(X, W_r, y, start_r, end_r)
    M = max m_r,  S = Σ s_r·exp(m_r − M),  P = Σ where(mask_r, 0, p_r + m_r − M)     (all-reduces)
    loss_t = fused_cross_entropy_loss_with_max_sum(M, S, P)_t
    per shard r:  (dX_r, dW_r) = fused_linear_cross_entropy_loss_grad(g, X, W_r, mask_r, mt_r, M, S)
    dX = Σ dX_r (all-reduce),  dW = the dW_r, concatenated

Rows whose target is `ignore_index` count for nothing: they are left out before the first kernel
(and their input gradient is 0), so time follows the rows that count.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from npugrad.collectives import Group, InProcess
from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.ops.common import as_input, flag, integer, real
from npugrad.ops.flce import fused_linear_cross_entropy_loss_grad
from npugrad.ops.forward import fused_cross_entropy_loss_with_max_sum, fused_linear_online_max_sum

OP = "linear_cross_entropy"
REDUCTIONS = ("mean", "sum", "none")
F32 = np.float32


class LinearCrossEntropy(NamedTuple):
    """The loss (a float32 scalar, or (BT,) for reduction 'none'), and the gradients of it
    (input (BT, H); weight in the form given: one array, or one per shard), or None."""

    loss: np.ndarray
    input_grad: np.ndarray | None
    weight_grad: np.ndarray | list[np.ndarray] | None


def _shards(weight, shards) -> tuple[list[np.ndarray], bool]:
    """The weight shards, and whether one weight was split (its gradient is then one array)."""
    if isinstance(weight, list | tuple):
        if shards is not None:
            raise SignatureError(f"{OP}: parameter 'shards' applies to one weight; weight is already {len(weight)} shards")
        if not weight:
            raise SignatureError(f"{OP}: parameter 'weight' has no shard")
        return [as_input(OP, f"weight[{i}]", w) for i, w in enumerate(weight)], False
    w = as_input(OP, "weight", weight)
    count = integer(OP, "shards", 1 if shards is None else shards, "a positive integer", 1)
    if w.ndim != 2:
        raise SignatureError(f"{OP}: parameter 'weight' must have rank 2 (V, H), got rank {w.ndim} {w.shape}")
    if count > max(w.shape[0], 1):
        raise SignatureError(f"{OP}: parameter 'shards' = {count} exceeds the vocabulary ({w.shape[0]} rows)")
    cuts = np.linspace(0, w.shape[0], count + 1).astype(np.int64)
    return [w[a:b] for a, b in itertools.pairwise(cuts)], True


def linear_cross_entropy(input, weight, target, *, shards: int | None = None, ignore_index: int = -100,
                         label_smoothing: float = 0.0, z_loss: float = 0.0, softcap: float = 0.0,
                         reduction: str = "mean", grad_output=None, compute_grad: bool = True,
                         group: Group | None = None) -> LinearCrossEntropy:
    """F.cross_entropy(softcap(X·Wᵀ), target, ignore_index, label_smoothing, reduction) + z_loss·lse²
    (mean/sum over the rows that count), and its gradients, vocabulary-parallel.

    input (BT, H); weight (V, H) split into `shards` equal-ish vocabulary shards, or a list of
    shards (uneven allowed) held by this process; target (BT,) int32/int64 global ids. All float
    arrays share one dtype (float32, float16 or bfloat16); gradients come in it. `grad_output`
    weights each row's loss for reduction 'none' (default ones). `group`: the collectives across
    ranks (default: all shards in this process)."""
    if reduction not in REDUCTIONS:
        raise (SignatureTypeError if not isinstance(reduction, str) else SignatureError)(
            f"{OP}: parameter 'reduction' must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    ignore = integer(OP, "ignore_index", ignore_index)
    alpha = real(OP, "label_smoothing", label_smoothing)
    zl = real(OP, "z_loss", z_loss, float32=True)
    cap = real(OP, "softcap", softcap, float32=True)
    want_grad = flag(OP, "compute_grad", compute_grad)
    group = group if group is not None else InProcess()
    x = as_input(OP, "input", input)
    y = as_input(OP, "target", target)
    ws, joined = _shards(weight, shards)
    if x.ndim != 2:
        raise SignatureError(f"{OP}: parameter 'input' must have rank 2 (BT, H), got rank {x.ndim} {x.shape}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise SignatureError(f"{OP}: parameter 'target' must have shape (BT,) = ({x.shape[0]},), got {y.shape}")
    bt = x.shape[0]
    k = sum(w.shape[0] for w in ws)

    # The rows that count, gathered once: every kernel sees only them.
    keep = y != ignore
    n = int(keep.sum())
    rows = None if n == bt else np.flatnonzero(keep)
    xc = x if rows is None else x[rows]
    yc = y if rows is None else y[rows]

    stats = []
    start = 0
    for w in ws:
        stats.append(fused_linear_online_max_sum(xc, w, yc, start, start + w.shape[0], softcap=cap,
                                                 return_sum_logits=bool(alpha)))
        start += w.shape[0]
    big_m = group.all_reduce([st.logits_max for st in stats], "max")
    big_s = group.all_reduce([st.sum_exp_logits * np.exp(st.logits_max - big_m) for st in stats], "sum")
    big_p = group.all_reduce([np.where(_outside(st.target_mask, n), F32(0), st.predicted_logits + st.logits_max - big_m)
                              for st in stats], "sum")
    sum_z = group.all_reduce([st.sum_logits for st in stats], "sum") if alpha else None
    loss_c, _ = fused_cross_entropy_loss_with_max_sum(big_m, big_s, big_p, alpha, sum_logits=sum_z,
                                                      vocab_size=k if alpha else 0, z_loss=zl)

    if reduction == "none":
        loss = np.zeros(bt, F32)
        loss[keep] = loss_c
        per_row = np.ones(n, F32) if grad_output is None else np.asarray(
            as_input(OP, "grad_output", grad_output), F32).reshape(bt)[keep]
    else:
        total = loss_c.sum(dtype=np.float64)
        scale = (1.0 / n if n else 0.0) if reduction == "mean" else 1.0
        loss = np.asarray(total * scale if n or reduction == "sum" else np.nan, F32)
        per_row = np.full(n, scale, F32)
    if not want_grad:
        return LinearCrossEntropy(loss, None, None)

    dx_c = None
    dws = []
    for w, st in zip(ws, stats):
        gx, gw = fused_linear_cross_entropy_loss_grad(
            per_row, xc, w, st.target_mask, st.masked_target, alpha, big_m, big_s,
            vocab_size=k if alpha else 0, z_loss=zl, softcap=cap)
        dx_c = [gx] if dx_c is None else [*dx_c, gx]
        dws.append(gw)
    dx_sum = group.all_reduce(dx_c, "sum") if len(dx_c) > 1 else dx_c[0]  # type: ignore[arg-type]
    if rows is None:
        dx = dx_sum
    else:
        dx = np.zeros_like(x)
        dx[rows] = dx_sum
    dw = np.concatenate(dws) if joined and len(dws) > 1 else (dws[0] if joined else dws)
    return LinearCrossEntropy(loss, dx, dw)


def _outside(mask: np.ndarray, n: int) -> np.ndarray:
    """The (n,) bool 'target not in this shard' of a bit-packed mask."""
    return np.unpackbits(mask, bitorder="little")[:n].astype(bool)


__all__ = ["LinearCrossEntropy", "linear_cross_entropy"]
