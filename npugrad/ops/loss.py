"""linear_cross_entropy: the whole LM-head loss, forward and backward, through the fused kernels and
the collectives, with no BT×V buffer anywhere (FORWARD.md §3):

    per shard r:  (m_r, s_r, p_r, mask_r, mt_r) = fused_linear_online_max_sum(X, W_r, y, start_r, end_r)
    M = max m_r,  S = Σ s_r·exp(m_r − M),  P = Σ where(mask_r, 0, p_r + m_r − M)     (all-reduces)
    loss_t = fused_cross_entropy_loss_with_max_sum(M, S, P)_t
    per shard r:  (dX_r, dW_r) = fused_linear_cross_entropy_loss_grad(g, X, W_r, mask_r, mt_r, M, S)
    dX = Σ dX_r (all-reduce),  dW = the dW_r, concatenated

Rows whose target is `ignore_index` count for nothing: they are left out before the first kernel
(and their input gradient is 0), so time follows the rows that count.

Two schedules compute the same loss and gradients:

- recompute (memory-saving mode): as above. The backward recomputes the logits from X and W, so
  the step costs four GEMMs' worth of FLOPs, and nothing that grows with V is held.
- chunked (high-performance mode, token chunk by chunk): the forward of a chunk of rows keeps its
  logits (rows × V of each shard, float32), the chunk's softmax is made in place from the global
  statistics, and the backward reads it (`softmax`) instead of recomputing it, adding its dW into
  the shard's gradient (`accumulate`): three GEMMs' worth, and one chunk × K float32 buffer.
  It applies where the kept logits are exact and high-performance mode computes the options:
  float32 inputs, no z-loss, no softcap, every shard at least 128 rows.

`chunk_rows` picks: 0 recompute; n > 0 chunks of n rows; None (default) chunked where it applies
and a chunk of at least two of the backward's token tiles per core holds at most 1/16 of the
BT × K float32 logits (PyTorch eager holds them and their gradient: 1/32 of that), in chunks of
whole tiles per core; recompute elsewhere. A chunk pays, per core, for packing every tile of W
and reading and writing every tile of dW once per token tile it holds: one tile per core made
the chunked step no faster than recomputing (Zen 3, 2 threads, BT = 4096, H = 4096, K = 32000,
float32: 32.4 s against 33.0 s), two 4-16 % faster (28.6 s against 33.9 s in one process, 29.3 s
against 30.4 s in bench/loss.py; 94 MiB of logits), three 22 % (26.4 s, 136 MiB). Where memory
allows, a larger `chunk_rows` is faster.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import numpy as np

from npugrad.collectives import Group, InProcess
from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
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
                         group: Group | None = None, chunk_rows: int | None = None) -> LinearCrossEntropy:
    """F.cross_entropy(softcap(X·Wᵀ), target, ignore_index, label_smoothing, reduction) + z_loss·lse²
    (mean/sum over the rows that count), and its gradients, vocabulary-parallel.

    input (BT, H); weight (V, H) split into `shards` equal-ish vocabulary shards, or a list of
    shards (uneven allowed) held by this process; target (BT,) int32/int64 global ids. All float
    arrays share one dtype (float32, float16 or bfloat16); gradients come in it. `grad_output`
    weights each row's loss for reduction 'none' (default ones). `group`: the collectives across
    ranks (default: all shards in this process). `chunk_rows`: the schedule (module docstring)."""
    if reduction not in REDUCTIONS:
        raise (SignatureTypeError if not isinstance(reduction, str) else SignatureError)(
            f"{OP}: parameter 'reduction' must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    ignore = integer(OP, "ignore_index", ignore_index)
    alpha = real(OP, "label_smoothing", label_smoothing)
    zl = real(OP, "z_loss", z_loss, float32=True)
    cap = real(OP, "softcap", softcap, float32=True)
    want_grad = flag(OP, "compute_grad", compute_grad)
    chunk = None if chunk_rows is None else integer(OP, "chunk_rows", chunk_rows, "a non-negative integer", 0)
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

    if reduction == "none":
        per_row = np.ones(n, F32) if grad_output is None else np.asarray(
            as_input(OP, "grad_output", grad_output), F32).reshape(bt)[keep]
    else:
        per_row = np.full(n, (1.0 / n if n else 0.0) if reduction == "mean" else 1.0, F32)
    opts = _Options(cap, alpha, zl, k, group)
    rows_per_chunk = _chunk_rows(chunk, ws, x.dtype, n, opts) if want_grad else 0
    if rows_per_chunk:
        loss_c, dx_c, dws = _chunked(xc, yc, ws, per_row, rows_per_chunk, opts)
    else:
        stats, loss_c = _statistics(xc, yc, ws, opts)
        dx_c, dws = _recomputed(xc, ws, stats, per_row, opts) if want_grad else (None, [])

    if reduction == "none":
        loss = np.zeros(bt, F32)
        loss[keep] = loss_c
    else:
        total = loss_c.sum(dtype=np.float64)
        loss = np.asarray(total * per_row[0] if n else (0.0 if reduction == "sum" else np.nan), F32)
    if not want_grad:
        return LinearCrossEntropy(loss, None, None)
    if rows is None:
        dx = dx_c
    else:
        dx = np.zeros_like(x)
        dx[rows] = dx_c
    dw = np.concatenate(dws) if joined and len(dws) > 1 else (dws[0] if joined else dws)
    return LinearCrossEntropy(loss, dx, dw)


class _Options(NamedTuple):
    cap: float  # softcap
    alpha: float  # label smoothing
    z_loss: float
    k: int  # the global vocabulary
    group: Group


def _statistics(xc, yc, ws, o: _Options, logits=None):
    """The forward of every shard, the collectives and the loss per row: (the shards' statistics,
    loss (n,)). `logits`: a (rows, V_r) float32 buffer per shard to keep the logits in."""
    n = xc.shape[0]
    stats = []
    start = 0
    for r, w in enumerate(ws):
        stats.append(fused_linear_online_max_sum(xc, w, yc, start, start + w.shape[0], softcap=o.cap,
                                                 return_sum_logits=bool(o.alpha),
                                                 logits_out=None if logits is None else logits[r]))
        start += w.shape[0]
    group = o.group
    big_m = group.all_reduce([st.logits_max for st in stats], "max")
    big_s = group.all_reduce([st.sum_exp_logits * np.exp(st.logits_max - big_m) for st in stats], "sum")
    big_p = group.all_reduce([np.where(_outside(st.target_mask, n), F32(0), st.predicted_logits + st.logits_max - big_m)
                              for st in stats], "sum")
    sum_z = group.all_reduce([st.sum_logits for st in stats], "sum") if o.alpha else None
    loss_c, _ = fused_cross_entropy_loss_with_max_sum(big_m, big_s, big_p, o.alpha, sum_logits=sum_z,
                                                      vocab_size=o.k if o.alpha else 0, z_loss=o.z_loss)
    return _Stats(stats, big_m, big_s), loss_c


class _Stats(NamedTuple):
    shards: list  # each shard's OnlineMaxSum
    logits_max: np.ndarray  # M, global
    sum_exp_logits: np.ndarray  # S, global


def _recomputed(xc, ws, st: _Stats, per_row, o: _Options):
    """The gradients in memory-saving mode (the logits recomputed): (dX of the rows, dW per shard)."""
    dx_c, dws = [], []
    for w, shard in zip(ws, st.shards):
        gx, gw = fused_linear_cross_entropy_loss_grad(
            per_row, xc, w, shard.target_mask, shard.masked_target, o.alpha, st.logits_max, st.sum_exp_logits,
            vocab_size=o.k if o.alpha else 0, z_loss=o.z_loss, softcap=o.cap)
        dx_c.append(gx)
        dws.append(gw)
    return (o.group.all_reduce(dx_c, "sum") if len(dx_c) > 1 else dx_c[0]), dws


def _chunked(xc, yc, ws, per_row, rows: int, o: _Options):
    """Loss and gradients chunk by chunk of `rows` rows (module docstring): (loss (n,), dX of the
    rows, dW per shard)."""
    n, h = xc.shape
    loss = np.empty(n, F32)
    dx = np.zeros((n, h), xc.dtype)
    dws = [np.zeros(w.shape, w.dtype) for w in ws]
    buffers = [np.empty((min(rows, n), w.shape[0]), F32) for w in ws]
    partial = [np.empty((min(rows, n), h), xc.dtype) for _ in ws[1:]]  # dX of shards 1.. (all-reduced)
    for a in range(0, n, rows):
        b = min(a + rows, n)
        x_c, logits = xc[a:b], [buf[: b - a] for buf in buffers]
        st, loss[a:b] = _statistics(x_c, yc[a:b], ws, o, logits)
        # The chunk's softmax, in place: P = exp(Z − M) / S with the global statistics.
        m, s = st.logits_max[:, None], st.sum_exp_logits[:, None]
        for z in logits:
            np.subtract(z, m, out=z)
            np.exp(z, out=z)
            np.divide(z, s, out=z)
        outs = [dx[a:b]] + [p[: b - a] for p in partial]
        for out in outs[1:]:
            out.fill(0)
        for w, shard, p, gx, gw in zip(ws, st.shards, logits, outs, dws):
            fused_linear_cross_entropy_loss_grad(
                per_row[a:b], x_c, w, shard.target_mask, shard.masked_target, o.alpha, softmax=p,
                vocab_size=o.k if o.alpha else 0, accumulate=True, input_grad_out=gx, weight_grad_out=gw)
        if partial:
            dx[a:b] = o.group.all_reduce(outs, "sum")
    return loss, dx, dws


def _chunk_rows(chunk: int | None, ws, dtype, n: int, o: _Options) -> int:
    """The chunked schedule's rows per chunk, or 0 for the recompute schedule (module docstring)."""
    applies = (dtype == F32 and not o.z_loss and not o.cap
               and min(w.shape[0] for w in ws) >= FusedLinearCrossEntropyLossGradOp.MIN_V_HIGH_PERFORMANCE)
    if chunk is not None:
        if chunk and not applies:
            raise SignatureError(f"{OP}: parameter 'chunk_rows' = {chunk} needs the chunked schedule, which takes "
                                 "float32 inputs, no z_loss, no softcap and shards of at least "
                                 f"{FusedLinearCrossEntropyLossGradOp.MIN_V_HIGH_PERFORMANCE} rows")
        return chunk if n else 0
    if not applies or not n:
        return 0
    unit = _token_rows()
    rows = n // 16 // unit * unit  # whole tiles per core within 1/16 of the BT × K logits
    return rows if rows >= 2 * unit else 0


def _token_rows() -> int:
    """A whole token tile of the backward for every core: the smallest chunk that keeps each
    core on full tiles (the fuse passes' tiles for the pipeline's cpu; passes/linear_nests.py)."""
    from npugrad.compiler import Pipeline
    from npugrad.passes.linear_nests import cpu_tiles
    from npugrad.runtime import pool
    from npugrad.runtime.launch import current_pipeline
    from npugrad.targets import get

    pipeline = current_pipeline() or Pipeline()
    return cpu_tiles(get(pipeline.cpu))["bt"] * max(1, pool.threads())


def _outside(mask: np.ndarray, n: int) -> np.ndarray:
    """The (n,) bool 'target not in this shard' of a bit-packed mask."""
    return np.unpackbits(mask, bitorder="little")[:n].astype(bool)


__all__ = ["LinearCrossEntropy", "linear_cross_entropy"]
