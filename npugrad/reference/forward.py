"""NumPy references for the forward companions of the linear cross-entropy gradient, how shards
combine, the loss, and the extensions users ask for (label smoothing, z-loss, logit softcap,
ignored rows): ../shared/spec/FORWARD.md, in float32. The BT×V logits are built on purpose: a
reference, not a kernel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npugrad.reference.ops import round_to, unpack_target_mask

F32 = np.float32


def softcapped(z: np.ndarray, softcap: float) -> np.ndarray:
    """Z' = c·tanh(Z/c) (Gemma 2's logit softcap), or Z when c = 0."""
    if not softcap:
        return z
    c = F32(softcap)
    return (c * np.tanh(z / c)).astype(F32)


@dataclass
class ShardStatistics:
    """What fused_linear_online_max_sum returns for one shard (FORWARD.md §1, §4)."""

    logits_max: np.ndarray  # (BT,) m_t = max_v Z'_tv
    sum_exp_logits: np.ndarray  # (BT,) s_t = Σ_v exp(Z'_tv − m_t)
    predicted_logits: np.ndarray  # (BT,) Z'_{t,target−start} − m_t on rows whose target is in the shard, else 0
    target_mask: np.ndarray  # (ceil(BT/8),) uint8, LSB first, 1 = target not in the shard; padding bits 1
    masked_target: np.ndarray  # (BT,) target − start in the shard, else 0
    logits: np.ndarray | None  # (BT, V) Z' in the input dtype, when asked for
    sum_logits: np.ndarray  # (BT,) Σ_v Z'_tv (label smoothing's statistic)
    logits_block_max: np.ndarray | None = None  # (BT, ceil(V/B)) with logits_block B: each block's row max


def fused_linear_online_max_sum(input, weight, target, vocab_start: int, vocab_end: int, *, softcap: float = 0.0,
                                ignore_index: int | None = None, return_logits: bool = False,
                                float32_logits: bool = False, logits_block: int = 0) -> ShardStatistics:
    """One shard's statistics. With `ignore_index`, rows whose target equals it are not computed:
    their statistics and logits are 0 (their loss is 0 by definition; see
    fused_cross_entropy_loss_with_max_sum). The logits come in the input's dtype, or unrounded
    in float32 with `float32_logits` (the extension), or compact with `logits_block` B > 0 (the
    extension): C = each block of B columns' row maximum (float32), E = exp(Z' − C) in float16."""
    x = np.asarray(input)
    w = np.asarray(weight)
    t = np.asarray(target)
    if x.ndim != 2 or w.ndim != 2 or t.ndim != 1:
        raise ValueError("input and weight must be 2-D, target 1-D")
    bt, h = x.shape
    v = w.shape[0]
    if w.shape[1] != h or t.shape[0] != bt:
        raise ValueError("weight.shape[1] must equal H and target.shape[0] must equal BT")
    if vocab_start < 0 or vocab_end - vocab_start != v or v == 0:
        raise ValueError("need 0 <= vocab_start and vocab_end - vocab_start == V > 0")
    z = softcapped(x.astype(F32) @ w.astype(F32).T, softcap)
    outside = (t < vocab_start) | (t >= vocab_end)
    masked = np.where(outside, 0, t - vocab_start).astype(t.dtype)
    m = z.max(axis=1) if bt else np.zeros(0, F32)
    s = np.exp(z - m[:, None]).sum(axis=1, dtype=F32)
    rows = np.arange(bt)
    p = np.where(outside, F32(0), z[rows, masked] - m).astype(F32) if bt else np.zeros(0, F32)
    sum_z = z.sum(axis=1, dtype=F32)
    if ignore_index is not None:
        skipped = t == ignore_index
        m, s, p, sum_z = (np.where(skipped, F32(0), a).astype(F32) for a in (m, s, p, sum_z))
    bits = np.ones(-(-bt // 8) * 8, np.uint8)
    bits[:bt] = outside
    mask = np.packbits(bits, bitorder="little")
    logits = block_max = None
    if return_logits and logits_block:
        logits, block_max = compact_logits(z, logits_block)
    elif return_logits:
        logits = z.astype(F32 if float32_logits else x.dtype)
    if ignore_index is not None:
        for a in (logits, block_max):
            if a is not None:
                a[skipped] = 0
    return ShardStatistics(m.astype(F32), s.astype(F32), p, mask, masked, logits, sum_z, block_max)


def compact_logits(z: np.ndarray, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(E, C): C[t, b] = max of z[t] over columns [bB, (b+1)B), E = exp(z − C[t, v // B]) in float16."""
    bt, v = z.shape
    blocks = -(-v // block)
    padded = np.full((bt, blocks * block), -np.inf, F32)
    padded[:, :v] = z
    c = padded.reshape(bt, blocks, block).max(axis=2) if bt and v else np.zeros((bt, blocks), F32)
    e = np.exp(z - np.repeat(c, block, axis=1)[:, :v]).astype(np.float16)
    return e, c.astype(F32)


def probability_from_compact(e: np.ndarray, c: np.ndarray, block: int, logits_max, sum_exp_logits) -> np.ndarray:
    """P = (E·exp(C[t, v // B] − M_t))/S_t in float32, in that order (the backward's)."""
    v = e.shape[1]
    scale = np.exp(np.asarray(c, F32) - np.asarray(logits_max, F32)[:, None]).astype(F32)
    p = np.asarray(e, F32) * np.repeat(scale, block, axis=1)[:, :v]
    return (p / np.asarray(sum_exp_logits, F32)[:, None]).astype(F32)


@dataclass
class GlobalStatistics:
    """The statistics over all shards (FORWARD.md §3): M, S (w.r.t. M), P (target logit − M), Σ Z'."""

    logits_max: np.ndarray
    sum_exp_logits: np.ndarray
    predicted_logits: np.ndarray
    sum_logits: np.ndarray


def combine_shards(shards: Sequence[ShardStatistics]) -> GlobalStatistics:
    """The collectives of FORWARD.md §3, in shard order: M = max m_r, S = Σ s_r·exp(m_r − M),
    P = Σ where(mask_r, 0, p_r + m_r − M), and Σ of the shards' Σ Z'."""
    big_m = np.max(np.stack([sh.logits_max for sh in shards]), axis=0).astype(F32)
    s = np.zeros_like(big_m)
    p = np.zeros_like(big_m)
    sum_z = np.zeros_like(big_m)
    bt = big_m.shape[0]
    for sh in shards:
        s += sh.sum_exp_logits * np.exp(sh.logits_max - big_m)
        outside = unpack_target_mask(sh.target_mask, bt).astype(bool)
        p += np.where(outside, F32(0), sh.predicted_logits + sh.logits_max - big_m)
        sum_z += sh.sum_logits
    return GlobalStatistics(big_m, s.astype(F32), p.astype(F32), sum_z.astype(F32))


def fused_cross_entropy_loss_with_max_sum(logits_max, sum_exp_logits, predicted_logits, *, label_smoothing: float = 0.0,
                                          vocab_size: int = 0, sum_logits=None, z_loss: float = 0.0,
                                          target=None, ignore_index: int | None = None,
                                          vocab_parallel_logits=None) -> tuple[np.ndarray, np.ndarray | None]:
    """Loss per token from the global statistics (FORWARD.md §2, §4), and the softmax of a shard's
    logits when they are given: (loss (BT,), softmax (BT, V) or None).

        loss_t = log S_t − P_t  [+ α·(P_t + M_t − ΣZ'_t/K)]  [+ λ·(M_t + log S_t)²]
               (with α: log S_t − (1 − α)·P_t + α·(M_t − ΣZ'_t/K), the same sum)

    0 on rows whose `target` equals `ignore_index` (their softmax row too)."""
    m, s, p = (np.asarray(a, F32) for a in (logits_max, sum_exp_logits, predicted_logits))
    with np.errstate(divide="ignore", invalid="ignore"):
        log_s = np.log(s)
        loss = log_s - p
        if label_smoothing:
            if sum_logits is None or vocab_size <= 0:
                raise ValueError("label smoothing needs sum_logits and vocab_size")
            # lse − (1 − α)·z_y − (α/K)·Σ z  =  log s − (1 − α)·p + α·(m − Σ z / K), with z_y = p + m
            # (so that p = −∞, a −∞ target logit, gives +∞, not ∞ − ∞)
            a = F32(label_smoothing)
            loss = (log_s - F32(1.0 - label_smoothing) * p) + a * (m - np.asarray(sum_logits, F32) / F32(vocab_size))
        if z_loss:
            lse = m + log_s
            loss = loss + F32(z_loss) * lse * lse
        softmax = None
        if vocab_parallel_logits is not None:
            softmax = (np.exp(np.asarray(vocab_parallel_logits, F32) - m[:, None]) / s[:, None]).astype(F32)
    if ignore_index is not None:
        if target is None:
            raise ValueError("ignore_index needs target")
        ignored = np.asarray(target) == ignore_index
        loss = np.where(ignored, F32(0), loss)
        if softmax is not None:
            softmax[ignored] = 0
    return loss.astype(F32), softmax


def fused_linear_cross_entropy_loss_grad(grad, input, weight, target_mask, masked_target, logits_max=None,
                                         sum_exp_logits=None, softmax=None, *, label_smoothing: float = 0.0,
                                         vocab_size: int = 0, z_loss: float = 0.0, softcap: float = 0.0,
                                         round_grad_logits_to=None, magnitude: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """OPS.md §1 with FORWARD.md §4's extensions: (input_grad (BT, H), weight_grad (V, H)) in float32.

        d = P [+ 2λ·(M + log S)·P] [− α/K] − (1 − α)·onehot(target) on rows in the shard
        d ·= 1 − (Z'/c)²   (softcap),   G = g·d,   dX = G·W,   dW = Gᵀ·X

    Rows with g = 0 contribute nothing (they are not computed: a non-finite P there is no NaN).
    `round_grad_logits_to` rounds G to the input dtype before the GEMMs, as the device does.
    `magnitude=True` gives each element's Σ|terms| instead, |G|·|W| and |G|ᵀ·|X|: the scale of a
    float32 sum's rounding error, however much its terms cancel."""
    g = np.asarray(grad, F32)
    x = np.asarray(input, F32)
    w = np.asarray(weight, F32)
    bt, v = x.shape[0], w.shape[0]
    if softmax is not None:
        if z_loss or softcap:
            raise ValueError("z-loss and softcap need the logits: memory-saving mode only")
        probs = np.array(softmax, F32)
        z = None
    else:
        z = softcapped(x @ w.T, softcap)
        m, s = np.asarray(logits_max, F32), np.asarray(sum_exp_logits, F32)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            probs = np.exp(z - m[:, None]) / s[:, None]
    d = probs.copy()
    if z_loss:
        with np.errstate(divide="ignore", invalid="ignore"):
            d += F32(2 * z_loss) * (m + np.log(s))[:, None] * probs
    if label_smoothing:
        if vocab_size <= 0:
            raise ValueError("label smoothing needs vocab_size")
        d -= F32(label_smoothing) / F32(vocab_size)
    inside = unpack_target_mask(target_mask, bt) == 0
    rows = np.flatnonzero(inside)
    cols = np.asarray(masked_target)[rows].astype(np.int64)
    if np.any((cols < 0) | (cols >= v)):
        raise ValueError("masked_target out of [0, V) on a row whose target is in the shard")
    d[rows, cols] -= F32(1) - F32(label_smoothing)
    if softcap:
        d *= F32(1) - (z / F32(softcap)) ** 2
    # A row with g = 0 contributes nothing (FORWARD.md §4), whatever it holds: it is left out.
    live = np.flatnonzero(g != 0)
    gl = d[live] * g[live, None]
    if round_grad_logits_to is not None:
        gl = round_to(gl, round_grad_logits_to)
    if magnitude:
        gl, w, x = np.abs(gl), np.abs(w), np.abs(x)
    dx = np.zeros((bt, w.shape[1]), F32)
    dx[live] = gl @ w
    return dx, gl.T @ x[live]
