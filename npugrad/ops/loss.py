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
  logits (rows × V of each shard, float32), and the backward reads them (`softmax` with
  `softmax_is_logits`: it makes P = exp(Z − M)/S itself, with the global statistics) instead of
  recomputing them, adding its dW into the shard's gradient (`accumulate`): three GEMMs' worth,
  and one chunk × K float32 buffer. It applies where high-performance mode computes the
  options: no z-loss, no softcap, every shard at least 128 rows. For float32 inputs the logits
  are kept in float32 (the forward's `float32_logits`, unrounded), so the loss is the recompute
  schedule's, and so is each shard's G, to the bit. For bfloat16 and float16 they are kept
  compact (the forward's `logits_block`): E = exp(Z − C) in float16, C each block's row
  maximum in float32, a block the target's vocabulary tile (so the forward's tiles are as
  chosen, and its statistics and the loss are the recompute schedule's to the bit); the
  backward makes P = E·exp(C − M)/S. Half the bytes of float32 logits, and each E within 2⁻¹¹
  of the float32 value whatever the logits' magnitude. (Logits rounded to bfloat16 would take
  the same bytes, but lose their absolute precision as they grow: P made from them and
  unrounded statistics no longer sums to 1, twice PyTorch eager's bfloat16 gradient error
  where the logits reach 20, 1.05e-2 against 5.2e-3, relative to float64; not taken.)

The chunked schedule splits the vocabulary over the cores, not the rows: each shard is cut into
one part per core of the target (_parts), and a part is a task (pool.run_tasks) whose kernels
run as one block: the part's forward, then, once the collectives have the global statistics,
its softmax and backward. A core thus packs only its part of W, once per chunk, and reads and
writes only its part of dW, with the whole chunk as GEMM 3's reduction; the parts combine like
shards (their statistics by the collectives, dX summed in part order). When the kernels split
each chunk's rows over the cores instead (the wavefront), every core packed all of W and
updated all of dW once per chunk, and a chunk of two token tiles per core was 4-16 % faster than
recomputing; by parts, 268 rows (the default before the budget counted W's packs by chunk) ran
the 3-GEMM work at 0.83 of the same run's SGEMM (Zen 3, 2 threads, BT = H = 4096, K = 32000:
20.1 s, 0.94x PyTorch eager's step and 0.73x the recompute schedule's, bench/loss.py). The parts are the
target's, not the thread count's, and so is the chunk size (it changes dW's sums): results are
the same on any number of threads. A task's kernels compile as on one thread (pool.threads() is 1
on a task's thread: runtime/specialize.py), with no wavefront, so the gradient's token loop is
not phased (tiling/flce_groups.py): a part packs all of its W tile before the token loop, and
GEMM 3 adds into dW once per token tile. Where its time goes (bench/loop_profile.py on the
step, BT = H = 4096, K = 32000, float32, Zen 3, 2 threads; two runs): in the backward, the FMA
loops 78 % of the samples, the W tile's pack 7 %, the updates of dW (GEMM 3) and dX (GEMM 2)
after their reductions 7.1-7.6 and 4.4-4.7 %; in the forward, its FMA loop 86-87 % and the
transposing pack 8.8-9.7 %.

`chunk_rows` picks: 0 recompute; n > 0 chunks of n rows; None (default) the largest chunk that
fits, with each core's pack of a chunk of W, its rows of X and its stash of the softmax
gradient, in 13/16 of 1/16 of the two BT × K float32 buffers PyTorch eager holds (the logits and
their gradient; issue 14's memory target), if it is at least one token tile (fewer rows pay for
packing W for too few); recompute elsewhere (for float32: bfloat16/float16 below). Where
memory allows, a larger `chunk_rows` is faster: 294 rows at BT = H = 4096, K = 32000 on a Zen 3,
where counting a pack of all of W's tile per core (as the kernels held it before
tiling/flce_groups.py) gave 268.

bfloat16/float16 take the chunked schedule too where it applies, in chunks of the rows that fit
in the same budget in the input's dtype (_narrow_chunk_rows):
each lane's float32 dW accumulator tile and packs of W, and per row the compact logits, each
lane's float32 dX row and packed row of X. Where not even a token tile fits, the rows that
fit in 15/16 of 1/16 (the target, less what the count leaves out) if they are half a token
tile or more, in chunks as even as rows make them; else a token tile if its logits take at
most twice the budget; else the recompute schedule. At BT = H = 4096, K = 32000 not even a
token tile fits the budget. A token tile was taken there until a Zen 5 (tiles of 252 x 256)
held 29.6-30.8 MiB beyond the gradients with it, 1/15.3 of PyTorch eager's 470.4 measured in
the same run (its time 0.91x eager's). Fresh processes on that Zen 5, with a part's token
tiles balanced over its one block (_side_by_side): a token tile (17 chunks) 28.5-29.2 MiB in
4010-4021 ms; 19 chunks of 216 rows (the rule, X's pairs not packed ahead there) 24.4-24.8 MiB
in 4061-4087 ms; 21 chunks of 196 (all of 1/16, X's pack counted) 22.7 MiB in 4239-4306 ms.
With the logits kept in float32
that was 46.5 MiB beyond the gradients against the recompute schedule's 72.1, 9.14 s against
11.10 (PyTorch eager: 470.5 MiB, 8.93 s; Zen 4, 2 threads, bench/loss.py; a second run:
45.0 MiB, 9.18 s, recompute 11.02 s, eager 8.49 s); kept compact, on a Zen 3 (tiles of
186 x 176), 30.4 MiB where float32 logits held 40.9, and 26.2 and 27.4 s where they took 26.8
and 28.9 (a chunk of 124 rows instead, float32 logits: 29.4 MiB, but 32.7 and 33.2 s). Chunks
of 504 and 1008 rows took 8.86 and 8.61 s where 252 took 9.13 (Zen 4): the chunks' own costs
(W packed and dW widened and rounded once per chunk) are a few per cent; the rest of the
backward's rate is its GEMMs'. dW is rounded to the dtype once per chunk; each part's dX comes
in float32 (`float32_input_grad`, the kernel's accumulator itself, in a 64-byte-aligned buffer),
and their sum is rounded once: parts 1.. held a rounded copy beside their accumulators before
(28.6-28.7 MiB where that held 30.7; fresh processes taking turns, the step's time the same
within this VM's noise: 30.6/31.6 and 29.8/35.8 s against 32.4/30.9 and 32.3/30.9).

Elsewhere (z-loss, softcap) bfloat16/float16 take the recompute schedule, whose backward
accumulates dX in float32 (BT × H × 4 bytes: 64 MiB at BT = H = 4096, more than the memory
target allows). Its backward runs in chunks of rows instead (_backward_rows): by default the
rows whose float32 dX fits, beside the wavefront's ring of float32 dW tiles, in the same budget
in the input's dtype (921 rows at BT = H = 4096, K = 32000; at least a token tile per core),
each chunk adding its dW into the gradient (`accumulate`), so dW is rounded to the dtype once
per chunk; the loss and dX are bit-identical to one pass. `chunk_rows=0` keeps one pass (dW
rounded once), n > 0 chunks of n. Zen 3, 2 threads, a steady-state step: 26.1 MiB beyond the
gradients against one pass's 77.0 (eager: 749 MiB), 34.2 s against 33.1.
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import numpy as np

from npugrad.collectives import Group, InProcess
from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.dtypes import BFLOAT16
from npugrad.ops.common import aligned_empty, as_input, first_bad_id, flag, integer, prefault, real, rows_in_place
from npugrad.ops.common import kernel_cpu as _cpu
from npugrad.ops.flce import fused_linear_cross_entropy_loss_grad
from npugrad.ops.forward import fused_cross_entropy_loss_with_max_sum, fused_linear_online_max_sum
from npugrad.runtime import pool

OP = "linear_cross_entropy"
REDUCTIONS = ("mean", "sum", "none")
F32 = np.float32


class LinearCrossEntropy(NamedTuple):
    """The loss (a float32 scalar, or (BT,) for reduction 'none'), and the gradients of it
    (input (BT, H); weight in the form given: one array, or one per shard), or None."""

    loss: np.ndarray
    input_grad: np.ndarray | None
    weight_grad: np.ndarray | list[np.ndarray] | None


def _all_reduce(group, values: list[np.ndarray], op: str) -> np.ndarray:
    """group.all_reduce(values, op), checked: the reduction of arrays of one shape and dtype is an
    array of that shape and dtype. (NumPy would broadcast a (1, H) row into every row of dX, a wrong
    gradient with no error, or fail in a line of this module with shapes the caller never gave.)"""
    got = group.all_reduce(values, op)
    want = values[0]
    if isinstance(got, np.ndarray) and got.shape == want.shape:
        if got.dtype == want.dtype:
            return got
        # A transport's own types: counts for a sum of flags, doubles for floats.
        if want.dtype == np.bool_ and got.dtype.kind in "biu":
            return got != 0
        if want.dtype.kind == "f" and got.dtype.kind == "f":
            return got.astype(want.dtype)
    what = (f"an array of shape {got.shape} and dtype {got.dtype}" if isinstance(got, np.ndarray)
            else f"a {type(got).__name__}")
    raise SignatureError(f"{OP}: parameter 'group': all_reduce(..., {op!r}) of {len(values)} arrays of shape "
                         f"{want.shape} and dtype {want.dtype} must return one of that shape (and dtype), got {what}")


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
    weights each row's loss for reduction 'none' (default ones), and scales the scalar loss's
    gradients for 'mean' and 'sum' (one element, default 1). `group`: the collectives across
    ranks (default: all shards in this process). `chunk_rows`: the schedule (module docstring)."""
    if reduction not in REDUCTIONS:
        raise (SignatureTypeError if not isinstance(reduction, str) else SignatureError)(
            f"{OP}: parameter 'reduction' must be one of {', '.join(map(repr, REDUCTIONS))}, got {reduction!r}")
    ignore = integer(OP, "ignore_index", ignore_index)
    alpha, zl, cap = loss_options(OP, label_smoothing, z_loss, softcap)
    want_grad = flag(OP, "compute_grad", compute_grad)
    chunk = None if chunk_rows is None else integer(OP, "chunk_rows", chunk_rows, "a non-negative integer", 0)
    group = group if group is not None else InProcess()
    if not callable(getattr(group, "all_reduce", None)):
        raise SignatureTypeError(f"{OP}: parameter 'group' must be a group of ranks with an all_reduce method "
                                 f"(npugrad.collectives.Group), got {type(group).__name__}")
    x = as_input(OP, "input", input)
    y = as_input(OP, "target", target)
    ws, joined = _shards(weight, shards)
    if x.ndim != 2:
        raise SignatureError(f"{OP}: parameter 'input' must have rank 2 (BT, H), got rank {x.ndim} {x.shape}")
    if x.dtype not in (F32, np.float16, BFLOAT16):  # the kernels' dtypes: checked here, named as this op's
        raise SignatureTypeError(
            f"{OP}: parameter 'input' must have dtype float32, float16 or bfloat16, got {x.dtype}")
    if y.ndim != 1 or y.shape[0] != x.shape[0]:
        raise SignatureError(f"{OP}: parameter 'target' must have shape (BT,) = ({x.shape[0]},), got {y.shape}")
    for i, w in enumerate(ws):  # every shard: the input's dtype and H, at least one row
        name = "weight" if joined else f"weight[{i}]"
        if w.ndim != 2 or w.shape[1] != x.shape[1] or w.shape[0] == 0:
            raise SignatureError(f"{OP}: parameter '{name}' must have shape (V, H = {x.shape[1]}) with V > 0, "
                                 f"got {w.shape}" + (f" (shard {i} of {len(ws)})" if joined and len(ws) > 1 else ""))
        if w.dtype != x.dtype:
            raise SignatureTypeError(f"{OP}: parameter '{name}' must have the dtype of 'input' ({x.dtype}), got {w.dtype}")
    bt = x.shape[0]
    k = sum(w.shape[0] for w in ws)
    if y.dtype not in (np.int32, np.int64):  # the forward kernel's: checked here, named as this op's
        raise SignatureTypeError(f"{OP}: parameter 'target' must have an integer dtype (int32 or int64), got {y.dtype}")
    _check_targets(y, ignore, k, isinstance(group, InProcess))

    # The rows that count, gathered once: every kernel sees only them.
    keep = y != ignore
    n = int(keep.sum())
    rows = None if n == bt else np.flatnonzero(keep)
    xc = x if rows is None else x[rows]
    yc = y if rows is None else y[rows]

    if reduction == "none":
        per_row = np.ones(n, F32) if grad_output is None else _row_weights(grad_output, bt)[keep]
    else:
        factor = F32((1.0 / n if n else 0.0) if reduction == "mean" else 1.0)
        upstream = F32(1.0) if grad_output is None else _row_weights(grad_output, 1)[0]  # of the scalar loss
        per_row = np.full(n, factor * upstream, F32)
    opts = _Options(cap, alpha, zl, k, group)
    rows_per_chunk = _chunk_rows(chunk, ws, x.dtype, n, bt, x.shape[1], opts) if want_grad else 0
    with rows_in_place():  # the schedules' memory budgets hold no copy of X (ops/common.spread_rows)
        if rows_per_chunk:
            loss_c, dx_c, dws = _chunked(xc, yc, ws, per_row, rows_per_chunk, opts)
        else:
            stats, loss_c = _statistics(xc, yc, _whole(ws), opts)
            dx_c, dws = (_recomputed(xc, ws, stats, per_row, opts, _backward_rows(chunk, x.dtype, n, bt, x.shape[1],
                                                                                    ws, opts))
                         if want_grad else (None, []))

    if reduction == "none":
        loss = np.zeros(bt, F32)
        loss[keep] = loss_c
    else:
        total = loss_c.sum(dtype=np.float64)
        loss = np.asarray(total * factor if n else (0.0 if reduction == "sum" else np.nan), F32)
    if not want_grad:
        return LinearCrossEntropy(loss, None, None)
    if rows is None:
        dx = dx_c
    else:
        dx = np.zeros_like(x)
        dx[rows] = dx_c
    dw = np.concatenate(dws) if joined and len(dws) > 1 else (dws[0] if joined else dws)
    return LinearCrossEntropy(loss, dx, dw)


def loss_options(op: str, label_smoothing, z_loss, softcap) -> tuple[float, float, float]:
    """(α, λ, c): the loss extensions (FORWARD.md §4) as floats in their ranges, label_smoothing
    in [0, 1], z_loss and softcap >= 0 (float32-finite), or an error naming `op` and the
    parameter. Checked before any kernel runs: the loss kernel, which checks label_smoothing
    and z_loss itself, runs after the forward ones."""
    alpha = real(op, "label_smoothing", label_smoothing)
    zl = real(op, "z_loss", z_loss, float32=True)
    cap = real(op, "softcap", softcap, float32=True)
    for name, value in (("label_smoothing", alpha), ("z_loss", zl), ("softcap", cap)):
        if value < 0 or (name == "label_smoothing" and value > 1):
            bound = "in [0, 1]" if name == "label_smoothing" else ">= 0 (0: off)"
            raise SignatureError(f"{op}: parameter '{name}' must be {bound}, got {value}")
    return alpha, zl, cap


def _row_weights(grad_output, count: int) -> np.ndarray:
    """grad_output as `count` float32 values: (BT,) for reduction 'none', one element (the scalar
    loss's upstream gradient) for 'mean' and 'sum'; real numbers (a float array, bfloat16 too,
    or a Python float or list)."""
    g = as_input(OP, "grad_output", grad_output)
    python_numbers = not isinstance(grad_output, np.ndarray) and g.dtype.kind in "iu"  # 2, [1, 2]
    if g.dtype.kind != "f" and g.dtype != BFLOAT16 and not python_numbers:
        raise SignatureTypeError(f"{OP}: parameter 'grad_output' must have a floating dtype, got {g.dtype}")
    if g.size != count:
        want = f"(BT,) = ({count},)" if count > 1 else "one element (the loss is a scalar)"
        raise SignatureError(f"{OP}: parameter 'grad_output' must have {want}, got shape {g.shape}")
    return np.asarray(g, F32).reshape(count)


def _check_targets(y: np.ndarray, ignore: int, k: int, every_shard: bool) -> None:
    """Targets are global ids in [0, K) or `ignore_index`, checked before any kernel runs: the
    forward of a shard counts an id outside it as another shard's, so an id in no shard would
    make a wrong loss, not an error. With every shard in this process (`every_shard`: the
    in-process group) K is the sum of their rows; across ranks only a negative id is known here
    to be in no shard (_statistics checks the rest through the collectives)."""
    row = first_bad_id(y, ignore, k if every_shard else None)
    if row is not None:
        bound = f"[0, V={k})" if every_shard else "[0, V)"
        raise SignatureError(f"{OP}: parameter 'target' has value {y[row]} at row {row}, outside {bound} "
                             f"and not ignore_index ({ignore})")


class _Options(NamedTuple):
    cap: float  # softcap
    alpha: float  # label smoothing
    z_loss: float
    k: int  # the global vocabulary
    group: Group


def _statistics(xc, yc, pieces, o: _Options, logits=None, side_by_side: bool = False, block: int = 0, maxima=None):
    """The forward of every piece of the vocabulary ((weight rows, first global id): the shards,
    _whole, or their parts, _parts), the collectives and the loss per row: (the pieces'
    statistics, loss (n,)). `logits`: a (rows, V_r) buffer per piece to keep the logits in,
    float32, or with `block` B > 0 compact (float16 E, and C in `maxima`, a (rows, ceil(V_r/B))
    float32 buffer per piece); `side_by_side`: the forwards as tasks (pool.run_tasks), else one
    after the other."""
    n = xc.shape[0]
    kept = logits is not None
    forwards = [functools.partial(fused_linear_online_max_sum, xc, w, yc, start, start + w.shape[0], softcap=o.cap,
                                  return_sum_logits=bool(o.alpha), logits_out=logits[i] if kept else None,
                                  float32_logits=kept and not block, logits_block=block,
                                  logits_block_max_out=maxima[i] if block else None)
                for i, (w, start) in enumerate(pieces)]
    stats = _side_by_side(forwards) if side_by_side else [f() for f in forwards]
    group = o.group
    outside = [_outside(st.target_mask, n) for st in stats]
    if not isinstance(group, InProcess):  # ranks beyond this one: an id in no shard of any rank
        found = _all_reduce(group, [~away for away in outside], "sum")
        if not np.all(found):
            row = int(np.argmin(found))
            raise SignatureError(f"{OP}: parameter 'target' has value {yc[row]} (row {row} of the rows that count), "
                                 "in no vocabulary shard of the group")
    big_m = _all_reduce(group, [st.logits_max for st in stats], "max")
    # A shard whose logits in a row are all −∞ (m_r = −∞, its s_r and p_r 0/0 = NaN, as the
    # forward op's) adds the limits: 0 to S and, holding the target, −∞ to P (F.cross_entropy's
    # loss and gradient of the whole row; the plain formula made the row NaN).
    empty = [st.logits_max == -np.inf for st in stats]
    big_s = _all_reduce(group, [np.where(e, F32(0), st.sum_exp_logits * np.exp(st.logits_max - big_m))
                              for st, e in zip(stats, empty)], "sum")
    big_p = _all_reduce(group, [np.where(away, F32(0), np.where(e, F32(-np.inf),
                                                              st.predicted_logits + st.logits_max - big_m))
                              for st, away, e in zip(stats, outside, empty)], "sum")
    sum_z = _all_reduce(group, [st.sum_logits for st in stats], "sum") if o.alpha else None
    loss_c, _ = fused_cross_entropy_loss_with_max_sum(big_m, big_s, big_p, o.alpha, sum_logits=sum_z,
                                                      vocab_size=o.k if o.alpha else 0, z_loss=o.z_loss)
    return _Stats(stats, big_m, big_s), loss_c


def _whole(ws) -> list[tuple[np.ndarray, int]]:
    """(shard, its first global vocabulary id) for each shard."""
    starts = np.cumsum([0] + [w.shape[0] for w in ws[:-1]])
    return [(w, int(a)) for w, a in zip(ws, starts)]


def _parts(ws, cores: int) -> list[tuple[int, int, int]]:
    """(shard, first row, end row): each shard cut into `cores` contiguous parts, fewer where a
    part would have fewer than the high-performance mode's minimum rows. A property of the
    target, not of the thread count, so the sums (and the results) are the same on any number
    of threads."""
    least = FusedLinearCrossEntropyLossGradOp.MIN_V_HIGH_PERFORMANCE
    out = []
    for r, w in enumerate(ws):
        q = max(1, min(cores, w.shape[0] // least))
        cuts = np.linspace(0, w.shape[0], q + 1).astype(np.int64)
        out += [(r, int(a), int(b)) for a, b in itertools.pairwise(cuts)]
    return out


class _Stats(NamedTuple):
    shards: list  # each shard's OnlineMaxSum
    logits_max: np.ndarray  # M, global
    sum_exp_logits: np.ndarray  # S, global


def _recomputed(xc, ws, st: _Stats, per_row, o: _Options, rows: int = 0):
    """The gradients in memory-saving mode (the logits recomputed): (dX of the rows, dW per shard).
    `rows` > 0: the backward in chunks of that many rows, each chunk's dW added into the shards'
    gradients (`accumulate`; module docstring)."""
    n = xc.shape[0]
    if not rows or rows >= n:
        dx_c, dws = [], []
        for w, shard in zip(ws, st.shards):
            gx, gw = fused_linear_cross_entropy_loss_grad(
                per_row, xc, w, shard.target_mask, shard.masked_target, o.alpha, st.logits_max, st.sum_exp_logits,
                vocab_size=o.k if o.alpha else 0, z_loss=o.z_loss, softcap=o.cap)
            dx_c.append(gx)
            dws.append(gw)
        return (_all_reduce(o.group, dx_c, "sum") if len(dx_c) > 1 else dx_c[0]), dws
    dx = prefault(np.zeros(xc.shape, xc.dtype))
    dws = [prefault(np.zeros(w.shape, w.dtype)) for w in ws]  # read (widened) before written: mapped first
    outside = [_outside(shard.target_mask, n) for shard in st.shards]
    partial = [prefault(np.empty((rows, xc.shape[1]), xc.dtype)) for _ in ws] if len(ws) > 1 else []
    for a in range(0, n, rows):
        b = min(a + rows, n)
        outs = [p[: b - a] for p in partial] or [dx[a:b]]
        for w, shard, out, gw, away in zip(ws, st.shards, outs, dws, outside):
            if partial:
                out.fill(0)
            fused_linear_cross_entropy_loss_grad(
                per_row[a:b], xc[a:b], w, np.packbits(away[a:b], bitorder="little"), shard.masked_target[a:b],
                o.alpha, st.logits_max[a:b], st.sum_exp_logits[a:b], vocab_size=o.k if o.alpha else 0,
                z_loss=o.z_loss, softcap=o.cap, accumulate=True, input_grad_out=out, weight_grad_out=gw)
        if partial:
            dx[a:b] = _all_reduce(o.group, outs, "sum")
    return dx, dws


def _chunked(xc, yc, ws, per_row, rows: int, o: _Options):
    """Loss and gradients chunk by chunk of `rows` rows (module docstring): (loss (n,), dX of the
    rows, dW per shard). Each part of a shard (_parts) is a task of its own, its kernels one
    block: the forwards side by side, then, with the global statistics, each part's softmax and
    backward side by side; dX is the sum of the parts' dX in part order."""
    n, h = xc.shape
    loss = np.empty(n, F32)
    dx = prefault(np.zeros((n, h), xc.dtype))
    dws = [prefault(np.zeros(w.shape, w.dtype)) for w in ws]  # read (widened) before written: mapped first
    parts = _parts(ws, _cores())
    starts = [a for _, a in _whole(ws)]
    pieces = [(ws[r][lo:hi], starts[r] + lo) for r, lo, hi in parts]
    grads = [dws[r][lo:hi] for r, lo, hi in parts]  # contiguous rows of the shard's dW
    block = _compact_block(xc.dtype)
    buffers = [prefault(np.empty((min(rows, n), w.shape[0]), np.float16 if block else F32)) for w, _ in pieces]
    blocks = [prefault(np.empty((min(rows, n), -(-w.shape[0] // block)), F32)) for w, _ in pieces] if block else []
    # dX of parts 1.. (part 0's is written in dx, the others' summed into it); narrow, every part's
    # in float32 (the kernels' accumulators themselves, float32_input_grad), summed, rounded once.
    wide = xc.dtype != F32 and len(parts) > 1
    count = len(parts) if wide else len(parts) - 1
    partial = [prefault(aligned_empty((min(rows, n), h), F32 if wide else xc.dtype)) for _ in range(count)]
    for a in range(0, n, rows):
        b = min(a + rows, n)
        x_c, logits, maxima = xc[a:b], [buf[: b - a] for buf in buffers], [c[: b - a] for c in blocks]
        st, loss[a:b] = _statistics(x_c, yc[a:b], pieces, o, logits, side_by_side=True, block=block, maxima=maxima)
        m, s = st.logits_max, st.sum_exp_logits
        outs = ([] if wide else [dx[a:b]]) + [p[: b - a] for p in partial]
        _side_by_side([functools.partial(_part_backward, logits[i], maxima[i] if block else None, block, m, s,
                                          st.shards[i], outs[i], i > 0 or wide, per_row[a:b], x_c, pieces[i][0],
                                          grads[i], o) for i in range(len(parts))])
        if partial:
            dx[a:b] = _all_reduce(o.group, outs, "sum")
    return loss, dx, dws


def _side_by_side(tasks) -> list:
    """pool.run_tasks(tasks), their kernels compiled for the one block each runs as: the fuse
    passes' token tiles balanced over one block (balance_blocks = 1), not over the target's
    cores as for a kernel the wavefront may split (the default pipeline's; the same kernels on
    any number of threads either way). A chunk of a token tile's rows is then one tile, not two
    halves: its W tile is packed per call, a reduction chunk at a time, not all of it before a
    token loop that runs once (vectorize_contractions.hoisted_panels). bfloat16, BT = H = 4096,
    K = 32000 (Zen 5, tiles of 252 x 256): the two cores' 2 MiB packs of W in the forward and
    in GEMM 2 went, and the step's time stayed."""
    from dataclasses import replace

    from npugrad.runtime.launch import current_pipeline, using
    from npugrad.runtime.specialize import pipeline_in_use

    base = pipeline_in_use(current_pipeline())
    passes = [replace(p, balance_blocks=1) if getattr(p, "balance_blocks", None) == 0 else p
              for p in base.fused_passes]
    with using(replace(base, fused_passes=passes, distribute=False)):  # a task's kernels run as one block
        return pool.run_tasks(tasks)


def _part_backward(z, c, block: int, m, s, part, gx, zero: bool, g, x_c, w, gw, o: _Options) -> None:
    """One part's backward from its kept logits and the global statistics (the kernel makes
    P = exp(Z − M) / S, softmax_is_logits; compact with `block` B > 0: P = E·exp(C − M)/S):
    dX into gx (zeroed first where `zero`), dW added into gw."""
    if zero:
        gx.fill(0)
    fused_linear_cross_entropy_loss_grad(g, x_c, w, part.target_mask, part.masked_target, o.alpha, m, s, softmax=z,
                                         vocab_size=o.k if o.alpha else 0, accumulate=True, softmax_is_logits=True,
                                         logits_block=block, softmax_block_max=c,
                                         float32_input_grad=gx.dtype != w.dtype, input_grad_out=gx, weight_grad_out=gw)


def _compact_block(dtype) -> int:
    """The kept logits' form in the chunked schedule: 0 (float32 logits) for float32 inputs; for
    bfloat16 and float16, compact (module docstring) in blocks of the target's vocabulary tile,
    so that the forward's tiles are whole blocks as chosen (fuse-linear-online-max-sum)."""
    return 0 if dtype == F32 else _tiles()["v"]


def _chunk_rows(chunk: int | None, ws, dtype, n: int, bt: int, h: int, o: _Options) -> int:
    """The chunked schedule's rows per chunk (of the n rows that count, of bt), or 0 for the
    recompute schedule (module docstring)."""
    applies = (not o.z_loss and not o.cap
               and min(w.shape[0] for w in ws) >= FusedLinearCrossEntropyLossGradOp.MIN_V_HIGH_PERFORMANCE)
    if chunk is not None:
        if chunk and not applies and dtype == F32:
            raise SignatureError(f"{OP}: parameter 'chunk_rows' = {chunk} needs the chunked schedule, which takes "
                                 "no z_loss, no softcap and shards of at least "
                                 f"{FusedLinearCrossEntropyLossGradOp.MIN_V_HIGH_PERFORMANCE} rows")
        return chunk if n and applies else 0
    if not applies or not n:
        return 0
    tiles, cores = _tiles(), _cores()
    parts = len(_parts(ws, cores))
    lanes = min(parts, cores)  # the target's, not the thread count: chunks change dW's sums
    if dtype != F32:
        return _narrow_chunk_rows(n, bt, h, o.k, np.dtype(dtype).itemsize, tiles, parts, lanes, _x_pack_bytes(dtype))
    # Within 13/16 of 1/16 of the two bt x K float32 buffers PyTorch eager holds (the logits and
    # their gradient, ignored rows included): each lane's pack of a chunk of W's tile (GEMM 2's,
    # _weight_pack), then per row the kept logits, the other parts' dX, each lane's packed rows of
    # X (GEMM 3 packs the chunk's X once: vectorize_contractions.invariant_rows) and each lane's
    # stash of the softmax gradient (a row of the vocabulary tile: tiling/flce_groups.py). The
    # 3/16 left are for what this does not count: about 5 MiB at BT = H = 4096, K = 32000
    # (bench/loss.py measured 60.0 MiB beyond the gradients with 7/8, where these terms came to
    # 54.7).
    budget = _budget(bt, o.k, 4) - lanes * _weight_pack(tiles["v"], h)
    rows = min(n, max(budget, 0) // ((o.k + (parts - 1 + lanes) * h + lanes * tiles["v"]) * 4))
    return rows if rows >= tiles["bt"] else 0


def _narrow_chunk_rows(n: int, bt: int, h: int, k: int, size: int, tiles: dict[str, int], parts: int,
                       lanes: int, x_pack: int) -> int:
    """bfloat16/float16: the chunked schedule's rows per chunk, or 0 for the recompute schedule.
    In the same budget as the float32 rule's, in the dtype (13/16 of 1/16 of two bt x K
    buffers): each lane's float32 dW accumulator tile and its pack of a chunk of W (GEMM 2's,
    _weight_pack), then per row the compact logits (float16, and the float32 maxima of each
    part's blocks), each part's float32 dX (the kernel's accumulator: float32_input_grad where
    there are several, summed and rounded once), each lane's packed row of X (`x_pack` bytes an
    element: _x_pack_bytes) and its stash of the softmax gradient (a row of the vocabulary tile,
    float32). Where not even a token tile fits, the rows (at most a token tile's) that fit in
    15/16 of 1/16 of those buffers (issue 14's target; the 1/16 of it left for what this does
    not count), if they are at least half a token tile (fewer rows would pack W and update dW
    for too few), the chunks as even as whole rows make them (the last is not a remnant that
    costs a whole chunk's packs); else a token tile still if its
    logits take at most twice the budget: the recompute schedule holds about as much (its ring
    of float32 dW tiles, its float32 dX rows, its packs; measured above) for four GEMMs' work
    instead of three. Beyond that (few rows, a large vocabulary) the recompute schedule."""
    whole = _budget(bt, k, size)
    kept = k * 2 + (k // tiles["v"] + parts) * 4  # per row: compact logits (float16) and their blocks' maxima
    per_row = kept + lanes * h * x_pack + parts * h * 4 + lanes * tiles["v"] * 4  # parts' float32 dX: accumulators
    fixed = lanes * (tiles["v"] * h * 4 + _weight_pack(tiles["v"], h))
    rows = max(whole - fixed, 0) // per_row
    tile = min(n, tiles["bt"])
    if rows >= tile:
        return min(n, rows)
    fit = min(tile, max(_budget(bt, k, size, 15) - fixed, 0) // per_row)
    if 2 * fit >= tile:
        return -(-n // -(-n // fit))  # ceil(n / count) rows, count = ceil(n / fit) chunks
    return tile if tile * kept <= 2 * whole else 0


def _x_pack_bytes(dtype) -> int:
    """Bytes an element of a lane's pack of the chunk's rows of X takes (GEMM 3's B): float32
    panels packed once per chunk (vectorize_contractions.invariant_rows), or none where
    bfloat16 runs on the target's dot product (its pairs are packed per call, not ahead)."""
    from npugrad.passes.vectorize_contractions import dot_bf16

    return 0 if np.dtype(dtype) == BFLOAT16 and dot_bf16(_cpu()) else 4


def _backward_rows(chunk: int | None, dtype, n: int, bt: int, h: int, ws, o: _Options) -> int:
    """The recompute schedule's rows per backward chunk, or 0 for one pass (module docstring)."""
    if dtype == F32 or not n or not h:
        return 0  # float32 gradients are their own accumulators: chunks would only repack W (H = 0: nothing)
    if chunk is not None:
        return chunk
    tiles, cores = _tiles(), _cores()
    size = np.dtype(dtype).itemsize
    # Within 13/16 of 1/16 of the two bt x K buffers PyTorch eager holds in this dtype (the logits
    # and their gradient; in bfloat16 at BT = 4096, K = 32000 it held three, 749 MiB): the
    # wavefront's ring of float32 dW tiles (cores + 2 of v x H: passes/tiling/flce.py), then per
    # row the float32 dX accumulator and, for several shards, each shard's dX. The 3/16 left are
    # for the rest (bench/loss.py, BT = H = 4096: 26.7 MiB beyond the gradients where these terms
    # come to 25.4).
    budget = _budget(bt, o.k, size) - (cores + 2) * tiles["v"] * h * 4
    rows = max(budget, 0) // (h * 4 + (len(ws) > 1) * len(ws) * h * size)
    return 0 if rows >= n else max(rows, tiles["bt"] * cores)


def _budget(bt: int, k: int, size: int, sixteenths: int = 13) -> int:
    """Bytes a schedule may hold: 13/16 (`sixteenths`) of 1/16 of the two bt x K buffers of
    `size`-byte elements PyTorch eager holds (the logits and their gradient: issue 14's memory
    target), the 3/16 left for what the schedules' rules do not count."""
    return 2 * bt * k * size // 16 * sixteenths // 16


def _weight_pack(v: int, h: int) -> int:
    """Bytes of a lane's pack of a v × h tile of W: its kernel (the wavefront's, launched as one block) packs the
    vocabulary tile a chunk of columns at a time (tiling/flce_groups.py). On one thread the
    kernel is not spread over cores and packs all of the tile (v·h·4 bytes), one lane at a time:
    at BT = H = 4096, K = 32000 on a Zen 3, 2.9 MB where this counts 0.4 MB a lane, 0.7 MB in
    all: about 2.1 MB more, in the 3/16 the budget leaves."""
    from npugrad.passes.tiling.flce_groups import weight_pack_bytes

    return weight_pack_bytes(_cpu(), v, h)


def _tiles() -> dict[str, int]:
    """The token and vocabulary tiles ({bt, v}) of the fused nests on the pipeline's cpu when
    nothing chose them (passes/linear_nests.py)."""
    from npugrad.passes.linear_nests import cpu_tiles

    return cpu_tiles(_cpu())


def _cores() -> int:
    return _cpu().cores


def _outside(mask: np.ndarray, n: int) -> np.ndarray:
    """The (n,) bool 'target not in this shard' of a bit-packed mask."""
    return np.unpackbits(mask, bitorder="little")[:n].astype(bool)


__all__ = ["LinearCrossEntropy", "linear_cross_entropy"]
