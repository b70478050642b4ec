"""Every op at the issue's standard sizes against NumPy and PyTorch (when installed), then the
compile time: `npugrad bench` (or `python bench/ops.py`).

Each contender runs in its own child process (bench/common.py): the first call is the warm-up
and measures peak extra memory, then `--repeats` timed calls give the median. The main table
preallocates (and pre-touches) every contender's outputs; the second lets each allocate them
(npugrad's API without `out=`, the functional NumPy/PyTorch forms). After each, a paired table
runs its memory-bound rows again with every contender in one process, taking turns batch by
batch (bench.common.paired): ratios under one state of the machine's memory, which moves between
processes; the FLCE rows likewise, a call at a time, at one speed of the CPU, which drifts during
a run: preallocated, npugrad and PyTorch eager; allocated, npugrad without `out=`, PyTorch eager
and the compilers (whose programs allocate in both tables, and whose rows there are timed once,
minutes from npugrad's allocated row). The PyTorch contenders are
those of /work/shared/perf/measure_baselines.py: naive FLCE (logits materialised),
aten.embedding_dense_backward, aten.nll_loss_backward, aten.binary_cross_entropy_backward,
AdamW(fused=True) + _foreach_lerp_ EMA. With the optional `[bench]` extra, the FLCE rows also
get the compilers a user would pick instead (bench/contenders.py: XLA via jax.jit, IREE, and
torch.compile), each compiling the same unfused program, and every FLCE row shows its rate as a
fraction of the machine's SGEMM ceiling (and, for bfloat16, of its bf16 GEMM peak), both measured
in the same run, and of the peak of the instruction its GEMMs run on at best (the float32 FMA;
for bfloat16 AMX's tdpbf16ps or vdpbf16ps where the CPU has them), measured by npugrad/tools/peak.py in the same run.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import math
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from bench import contenders as compilers
from bench.common import Result, combine, in_child, measure, paired, paired_costs
from npugrad import progress
from npugrad.runtime.pool import MAX_THREADS

SEED = 1234
IGNORE = -100
LR, BETA1, BETA2, EPS, WEIGHT_DECAY, EMA_DECAY, STEP = 1e-3, 0.9, 0.999, 1e-8, 0.01, 0.999, 10


@dataclass(frozen=True)
class Case:
    """One row group: an op at one size. `work` is FLOPs (FLCE) or bytes read + written."""

    op: str
    label: str
    size: dict
    work: float
    unit: str  # "GFLOP/s" or "GB/s"


def cases(quick: bool) -> list[Case]:
    """The issue's standard sizes, or tiny ones (a smoke test) with `quick`."""
    flce = [(64, 32, 128)] if quick else [(4096, 4096, 8192), (2048, 2048, 32000)]
    emb = (64, 16, 100) if quick else (16384, 4096, 32000)
    nll = (256, 10) if quick else (65536, 1000)
    n = 4096 if quick else 16 << 20
    out = []
    for bt, h, v in flce:
        for dtype in ("float32", "bfloat16"):
            size = {"bt": bt, "h": h, "v": v, "dtype": dtype}
            out.append(Case("flce", f"flce {dtype} BT={bt} H={h} V={v}", size, 6.0 * bt * v * h, "GFLOP/s"))
    t, d, rows = emb
    out.append(Case("embedding", f"embedding {t}x{d} -> {rows} rows", {"t": t, "d": d, "rows": rows},
                    4.0 * (t * d + rows * d), "GB/s"))
    out.append(Case("nll", f"nll N={nll[0]} C={nll[1]}", {"n": nll[0], "c": nll[1]}, 4.0 * nll[0] * nll[1], "GB/s"))
    out.append(Case("bce", f"bce {n} elements", {"n": n}, 4.0 * 4 * n, "GB/s"))
    out.append(Case("ema_adam", f"ema_adam {n} parameters", {"n": n}, 4.0 * 9 * n, "GB/s"))
    return out


TINY = {"flce": {"bt": 4, "h": 8, "v": 8}, "embedding": {"t": 4, "d": 8, "rows": 5},
        "nll": {"n": 4, "c": 8}, "bce": {"n": 16}, "ema_adam": {"n": 16}}


def warmed(setup: Callable) -> Callable:
    """Run the contender once on tiny inputs of the same dtypes first, so that one-time costs
    (npugrad's compile: shapes are dynamic, so it is the same kernel; PyTorch's lazy start-up)
    count neither in the measured calls nor in peak extra memory."""

    @functools.wraps(setup)
    def setup_warm(alloc: bool, **size):
        op = setup.__name__.rsplit("_", 1)[0]
        setup(alloc=alloc, **{**size, **TINY[op]})()
        return setup(alloc=alloc, **size)

    return setup_warm


def _touched(shape, dtype) -> np.ndarray:
    # Written once so that the measured call does not pay (or count) first-touch page faults.
    return np.full(shape, 1, dtype)


# ---- FLCE: memory-saving mode, every target in this shard -----------------------------------


def _flce_inputs(bt: int, h: int, v: int, dtype: str):
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((bt, h), dtype=np.float32) * np.float32(h**-0.5)
    w = rng.standard_normal((v, h), dtype=np.float32) * np.float32(0.02)
    t = rng.integers(0, v, bt)
    g = ((rng.random(bt, dtype=np.float32) + np.float32(0.5)) / np.float32(bt)).astype(np.float32)
    if dtype == "bfloat16":
        from npugrad.dtypes import BFLOAT16

        x, w = x.astype(BFLOAT16), w.astype(BFLOAT16)
    return g, x, w, t


def _flce_stats(x: np.ndarray, w: np.ndarray):
    """The row max and sum of exp of x @ w.T, as the forward pass leaves them (in chunks)."""
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    lm, se = np.empty(len(x), np.float32), np.empty(len(x), np.float32)
    for s in range(0, len(x), 512):
        z = xf[s:s + 512] @ wf.T
        lm[s:s + 512] = z.max(1)
        se[s:s + 512] = np.exp(z - lm[s:s + 512, None]).sum(1)
    return lm, se


@warmed
def flce_npugrad(bt, h, v, dtype, alloc):
    from npugrad import ops

    g, x, w, t = _flce_inputs(bt, h, v, dtype)
    lm, se = _flce_stats(x, w)
    mask = np.zeros(bt, np.bool_)
    if alloc:
        return lambda: ops.fused_linear_cross_entropy_loss_grad(g, x, w, mask, t, logits_max=lm, sum_exp_logits=se)
    gx, gw = _touched(x.shape, x.dtype), _touched(w.shape, w.dtype)
    return lambda: ops.fused_linear_cross_entropy_loss_grad(
        g, x, w, mask, t, logits_max=lm, sum_exp_logits=se, input_grad_out=gx, weight_grad_out=gw)


@warmed
def flce_numpy(bt, h, v, dtype, alloc):
    g, x, w, t = _flce_inputs(bt, h, v, "float32")  # NumPy has no bfloat16 matmul
    rows = np.arange(bt)
    gx, gw = (None, None) if alloc else (_touched(x.shape, x.dtype), _touched(w.shape, w.dtype))

    def run():
        p = x @ w.T
        p -= p.max(axis=1, keepdims=True)
        np.exp(p, out=p)
        p /= p.sum(axis=1, keepdims=True)
        p[rows, t] -= 1.0
        p *= g[:, None]
        return np.matmul(p, w, out=gx), np.matmul(p.T, x, out=gw)

    return run


@warmed
def flce_torch(bt, h, v, dtype, alloc):
    import torch

    g, x, w, t = (torch.from_numpy(a) for a in _flce_inputs(bt, h, v, "float32"))
    if dtype == "bfloat16":
        x, w = x.bfloat16(), w.bfloat16()
    rows = torch.arange(bt)
    gx, gw = (None, None) if alloc else (torch.ones_like(x), torch.ones_like(w))

    def run():
        p = torch.softmax(x @ w.T, dim=1)
        p[rows, t] -= 1.0
        p.mul_(g[:, None].to(p.dtype))
        if alloc:
            return p @ w, p.T @ x
        torch.mm(p, w, out=gx)
        torch.mm(p.T, x, out=gw)

    return run


# ---- embedding dense backward --------------------------------------------------------------


def _emb_inputs(t, d, rows):
    rng = np.random.default_rng(SEED)
    return rng.standard_normal((t, d), dtype=np.float32), rng.integers(0, rows, t)


@warmed
def embedding_npugrad(t, d, rows, alloc):
    from npugrad import ops

    grad, idx = _emb_inputs(t, d, rows)
    out = None if alloc else _touched((rows, d), np.float32)
    return lambda: ops.embedding_dense_backward(grad, idx, rows, -1, False, out=out)


@warmed
def embedding_numpy(t, d, rows, alloc):
    grad, idx = _emb_inputs(t, d, rows)
    out = None if alloc else _touched((rows, d), np.float32)

    def run():
        o = np.zeros((rows, d), np.float32) if alloc else out
        if not alloc:
            o.fill(0)
        np.add.at(o, idx, grad)
        return o

    return run


@warmed
def embedding_torch(t, d, rows, alloc):
    import torch

    grad, idx = (torch.from_numpy(a) for a in _emb_inputs(t, d, rows))
    if alloc:
        return lambda: torch.ops.aten.embedding_dense_backward(grad, idx, rows, -1, False)
    out = torch.ones(rows, d)
    return lambda: torch.ops.aten.embedding_dense_backward.out(grad, idx, rows, -1, False, out=out)


# ---- NLL loss backward: mean, class weights, 5% ignored ------------------------------------


def _nll_inputs(n, c):
    rng = np.random.default_rng(SEED)
    z = rng.standard_normal((n, c), dtype=np.float32)
    logp = (z - np.log(np.exp(z).sum(1, keepdims=True))).astype(np.float32)
    w = (rng.random(c, dtype=np.float32) + np.float32(0.5)).astype(np.float32)
    t = rng.integers(0, c, n)
    t[rng.random(n) < 0.05] = IGNORE
    total = np.array(w[t[t != IGNORE]].sum(dtype=np.float32), np.float32)
    return np.array(0.75, np.float32), logp, t, w, total


@warmed
def nll_npugrad(n, c, alloc):
    from npugrad import ops

    go, logp, t, w, total = _nll_inputs(n, c)
    out = None if alloc else _touched((n, c), np.float32)
    return lambda: ops.nll_loss_backward(go, logp, t, w, 1, IGNORE, total, out=out)


@warmed
def nll_numpy(n, c, alloc):
    go, _, t, w, total = _nll_inputs(n, c)
    out = None if alloc else _touched((n, c), np.float32)

    def run():
        o = np.zeros((n, c), np.float32) if alloc else out
        if not alloc:
            o.fill(0)
        rows = np.flatnonzero(t != IGNORE)
        o[rows, t[rows]] = -w[t[rows]] * (go / total)
        return o

    return run


@warmed
def nll_torch(n, c, alloc):
    import torch

    go, logp, t, w, total = (torch.from_numpy(np.asarray(a)) for a in _nll_inputs(n, c))
    if alloc:
        return lambda: torch.ops.aten.nll_loss_backward(go, logp, t, w, 1, IGNORE, total)
    out = torch.ones(n, c)
    return lambda: torch.ops.aten.nll_loss_backward.grad_input(go, logp, t, w, 1, IGNORE, total, grad_input=out)


# ---- BCE gradient: class weights, mean ------------------------------------------------------


def _bce_inputs(n):
    rng = np.random.default_rng(SEED)
    x = (rng.random(n, dtype=np.float32) * np.float32(0.98) + np.float32(0.01)).astype(np.float32)
    y = (rng.random(n, dtype=np.float32) < 0.5).astype(np.float32)
    w = (rng.random(n, dtype=np.float32) + np.float32(0.5)).astype(np.float32)
    return x, y, w, np.array(0.75, np.float32)


@warmed
def bce_npugrad(n, alloc):
    from npugrad import ops

    x, y, w, go = _bce_inputs(n)
    out = None if alloc else _touched(n, np.float32)
    return lambda: ops.binary_cross_entropy_grad(x, y, go, w, 1, out=out)


@warmed
def bce_numpy(n, alloc):
    x, y, w, go = _bce_inputs(n)
    out = None if alloc else _touched(n, np.float32)

    def run():
        dx = np.subtract(x, y, out=out)
        dx /= np.maximum((np.float32(1) - x) * x, np.float32(1e-12))
        dx *= w
        dx *= go / np.float32(n)
        return dx

    return run


@warmed
def bce_torch(n, alloc):
    import torch

    x, y, w, go = (torch.from_numpy(a) for a in _bce_inputs(n))
    if alloc:
        return lambda: torch.ops.aten.binary_cross_entropy_backward(go, x, y, w, 1)
    out = torch.ones(n)
    return lambda: torch.ops.aten.binary_cross_entropy_backward.grad_input(go, x, y, w, 1, grad_input=out)


# ---- EMA-Adam: in place, so both tables measure the same call -------------------------------


def _adam_state(n):
    rng = np.random.default_rng(SEED)
    var = rng.standard_normal(n, dtype=np.float32) * np.float32(0.02)
    grad = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-3)
    m = rng.standard_normal(n, dtype=np.float32) * np.float32(1e-4)
    v = (rng.random(n, dtype=np.float32) * np.float32(1e-6) + np.float32(1e-8)).astype(np.float32)
    return grad, var, m, v, var + np.float32(1e-4)


@warmed
def ema_adam_npugrad(n, alloc):
    from npugrad import ops

    grad, var, m, v, s = _adam_state(n)
    return lambda: ops.apply_fused_ema_adam(grad, var, m, v, s, STEP, lr=LR, ema_decay=EMA_DECAY, beta1=BETA1,
                                            beta2=BETA2, eps=EPS, mode=1, weight_decay=WEIGHT_DECAY)


@warmed
def ema_adam_numpy(n, alloc):
    grad, var, m, v, s = _adam_state(n)
    tmp = _touched(n, np.float32)
    bc1, bc2 = 1 - BETA1**STEP, 1 - BETA2**STEP

    def run():
        np.multiply(var, np.float32(1 - LR * WEIGHT_DECAY), out=var)
        np.multiply(m, np.float32(BETA1), out=m)
        np.add(m, np.multiply(grad, np.float32(1 - BETA1), out=tmp), out=m)
        np.multiply(v, np.float32(BETA2), out=v)
        np.multiply(grad, grad, out=tmp)
        np.multiply(tmp, np.float32(1 - BETA2), out=tmp)
        np.add(v, tmp, out=v)
        np.sqrt(v, out=tmp)
        np.multiply(tmp, np.float32(1 / math.sqrt(bc2)), out=tmp)
        np.add(tmp, np.float32(EPS), out=tmp)
        np.divide(m, tmp, out=tmp)
        np.multiply(tmp, np.float32(LR / bc1), out=tmp)
        np.subtract(var, tmp, out=var)
        np.multiply(s, np.float32(EMA_DECAY), out=s)
        np.add(s, np.multiply(var, np.float32(1 - EMA_DECAY), out=tmp), out=s)

    return run


@warmed
def ema_adam_torch(n, alloc):
    import torch

    grad, var, _, _, s = (torch.from_numpy(a) for a in _adam_state(n))  # AdamW keeps its own m, v
    p = torch.nn.Parameter(var)
    p.grad = grad
    opt = torch.optim.AdamW([p], lr=LR, betas=(BETA1, BETA2), eps=EPS, weight_decay=WEIGHT_DECAY, fused=True)
    opt.step()  # creates the moment buffers outside the measurement
    data = p.detach()

    def run():
        opt.step()
        torch._foreach_lerp_([s], [data], 1.0 - EMA_DECAY)

    return run


# ---- compile time and per-call overhead, on tiny inputs -------------------------------------


def api_call(op: str, dtype: str = "float32"):
    """The API call on tiny inputs, not yet compiled: its first call compiles (the FLCE in
    `dtype`; the other ops take float32)."""
    size = {**TINY[op], **({"dtype": dtype} if op == "flce" else {})}
    return globals()[f"{op}_npugrad"].__wrapped__(alloc=False, **size)


def kernel_call(op: str, dtype: str = "float32"):
    """The compiled machine code alone for the same call (arguments checked and bound once)."""
    from npugrad.runtime import launch

    captured = []
    original = launch.Call.run

    def capture(self):
        captured.append(self.bind())
        return original(self)

    launch.Call.run = capture
    try:
        api_call(op, dtype)()
    finally:
        launch.Call.run = original
    return captured[0]


# ---- the command ---------------------------------------------------------------------------

OPS = ("flce", "embedding", "nll", "bce", "ema_adam")


def torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


def _fmt_ratio(other: Result | None, ours: Result) -> str:
    if other is not None and other.predicted and not ours.error:
        return f"~{other.predicted / ours.median:.0f}x"  # not run: its time predicted from its GEMM rate
    if other is not None and other.timed_out and not ours.error:
        return f">{other.timed_out / ours.median:.1f}x"  # its setup and first call took longer than the time-out
    if other is None or other.error or ours.error:
        return "-"
    return f"{other.median / ours.median:.2f}x"


@dataclass
class Ceilings:
    """The machine's ceilings, measured in the same run: the GEMMs' (GFLOP/s) and the memory
    bandwidth (GB/s); None: not measured."""

    sgemm: float | None = None
    bf16: float | None = None
    lines: tuple[str, ...] = ()
    torch_bf16_fallback: float | None = None  # torch.mm bf16's rate where it is PyTorch's fallback loop
    fma: float | None = None  # the float32 FMA instruction peak (npugrad/tools/peak.py)
    dot_bf16: float | None = None  # the vdpbf16ps instruction peak; None where the CPU lacks it
    tile_bf16: float | None = None  # the AMX tdpbf16ps peak; None where the CPU lacks it
    n: int = 0  # the SGEMM's size, n³; each GEMM-bound row reads it again in its own process (0: not)
    bandwidth: float | None = None  # the in-place stream's GB/s (bench.contenders.stream_numpy)
    stream_mib: int = 0  # its arrays' size; each memory-bound row reads it again in its own process (0: not)

    def instruction_peak(self, dtype: str | None) -> float | None:
        """The peak of the instruction a GEMM in `dtype` runs on at best: for bfloat16 AMX's
        tdpbf16ps where the CPU has it (the kernels' whole blocks run on tiles), else vdpbf16ps
        where it has that, else the float32 FMA (bf16 widened to float32)."""
        return (self.tile_bf16 or self.dot_bf16 or self.fma) if dtype == "bfloat16" else self.fma

    def not_run(self, case: Case, contender: str, limit: float | None) -> Result | None:
        """The row of a PyTorch contender on a bfloat16 FLCE case whose GEMMs run in PyTorch's
        fallback loop (no bf16 dot-product instructions) when the case's FLOPs at that loop's
        rate, measured above, predict a call longer than `limit` seconds; None: run it."""
        if not (case.op == "flce" and case.size.get("dtype") == "bfloat16" and contender in ("torch", "torch.compile")):
            return None
        predicted = compilers.fallback_prediction(case.work, self.torch_bf16_fallback, limit)
        if predicted is None:
            return None
        return Result(contender, float("nan"), float("nan"), float("nan"),
                      f"not run: its bf16 GEMMs run in PyTorch's fallback loop here ({self.torch_bf16_fallback:.1f} "
                      f"GFLOP/s measured above), so a call would take ~{predicted / 60:.0f} min "
                      f"(over --predicted-limit {limit:.0f} s)", predicted=predicted)


CEILING_N = 4096  # the SGEMM ceiling: NumPy matmul 4096³, float32
STREAM_MIB, STREAM_MIB_QUICK = 256, 16  # the bandwidth ceiling's arrays: far beyond any last-level cache
SLOW_S = 60.0  # an FLCE call slower than this is timed on its first call alone


def measure_ceilings(quick: bool, threads: int, log: Callable[[str], None], timeout: float | None,
                     gemm: bool = True, memory: bool = False) -> Ceilings:
    """With `gemm`: SGEMM (NumPy float32 matmul n³) and the bf16 GEMM peak: the better of
    torch.mm on bfloat16 (oneDNN's bf16 dot-product kernels where the CPU has them; elsewhere
    PyTorch's fallback loop, measured at a smaller n so that it ends) and bfloat16 operands
    widened to float32 and multiplied by NumPy's SGEMM (what a CPU without bf16 dot-product
    instructions can do). With `memory`: the memory bandwidth of an in-place stream."""
    stream_mib = STREAM_MIB_QUICK if quick else STREAM_MIB
    bandwidth, lines = None, []
    if memory:
        log("  ceiling: memory bandwidth")
        got = in_child("bench.contenders:stream_ceiling", {"mib": stream_mib}, threads, timeout)
        if isinstance(got, dict):
            bandwidth = got["gbs"]
            text = f"{bandwidth:.1f} GB/s"
        else:
            text = f"failed: {got or 'timed out'}"
        lines.append(f"Memory bandwidth: NumPy in-place float32 add a += b over 2 x {stream_mib} MiB, "
                     f"{threads} thread(s) (12 bytes an element) = {text}")
    if not gemm:
        return Ceilings(lines=tuple(lines), bandwidth=bandwidth, stream_mib=stream_mib if memory else 0)
    n = 512 if quick else CEILING_N

    def rate(name: str, spec: str, size: int, repeats: int = 3) -> tuple[float | None, str]:
        log(f"  ceiling: {name}")
        r = measure(name, spec, {"n": size}, repeats, 1, threads, slow=SLOW_S, timeout=timeout)
        if r.error:
            return None, f"failed: {r.error}"
        return 2.0 * size**3 / r.median / 1e9, f"{2.0 * size**3 / r.median / 1e9:.1f} GFLOP/s"

    sgemm, sgemm_text = rate("sgemm", "bench.contenders:sgemm_numpy", n)
    lines.insert(0, f"SGEMM ceiling: NumPy float32 matmul {n}^3 = {sgemm_text}")
    widened, widened_text = rate("bf16 widened", "bench.contenders:bf16_gemm_widened", n)
    candidates = [widened]
    parts = [f"bfloat16 widened to float32 + NumPy SGEMM {n}^3 = {widened_text}"]
    fallback = None  # torch.mm bf16's rate where it is PyTorch's fallback loop
    if torch_available():
        hardware = compilers.torch_bf16_hardware()
        tn = n if hardware or quick else compilers.FALLBACK_GEMM_N
        torch_rate, torch_text = rate("bf16 torch.mm", "bench.contenders:bf16_gemm_torch", tn)
        candidates.append(torch_rate)
        fallback = None if hardware else torch_rate
        parts.insert(0, f"torch.mm bfloat16 {tn}^3 = {torch_text} ("
                     + ("oneDNN bf16 dot-product kernels" if hardware else
                        "no bf16 dot-product instructions here: PyTorch's fallback loop") + ")")
    bf16 = max((c for c in candidates if c), default=None)
    peak = f"{bf16:.1f} GFLOP/s" if bf16 else "not measured"
    lines.append(f"bf16 GEMM peak = {peak}, the better of: " + "; ".join(parts))
    log("  ceiling: instruction peaks")
    peaks = in_child("bench.contenders:instruction_peaks", {"threads": threads}, threads, timeout)
    if isinstance(peaks, dict):
        fma, dot, tile = peaks["fma"][0], peaks["dot_bf16"][0], peaks.get("tile_bf16", [None])[0]
        lines.append("Instruction peaks (JIT loops of independent chains, npugrad/tools/peak.py): "
                     + "; ".join(text for _, text in peaks.values()))
    else:
        fma = dot = tile = None
        lines.append(f"Instruction peaks: failed: {peaks or 'timed out'}")
    return Ceilings(sgemm, bf16, tuple(lines), fallback, fma, dot, tile, n, bandwidth, stream_mib if memory else 0)


def _fraction(rate: float, ceiling: float | None) -> str:
    return f"{100.0 * rate / ceiling:.0f}%" if ceiling else "-"


def spec_of(case: Case, contender: str) -> str:
    if contender in compilers.CONTENDERS:
        return f"bench.contenders:{case.op}_{contender.replace('.', '_')}"
    return f"bench.ops:{case.op}_{contender}"


def run_table(title: str, selected: Sequence[Case], alloc: bool, repeats: int, threads: int,
              contenders: Sequence[str], log: Callable[[str], None], rounds: int = 1,
              extra: Sequence[str] = (), ceilings: Ceilings | None = None, shared: dict | None = None,
              timeout: float | None = None, predicted_limit: float | None = None) -> str:
    """One table: `contenders` on every case, `extra` (the compilers) on FLCE cases only. A
    compiler's program allocates its outputs in either table: it is measured once per case and
    `shared` (a dict kept across tables) holds its result. A contender whose call `ceilings`
    predicts to take longer than `predicted_limit` seconds is not run: the row shows the
    prediction."""
    ratio_cols = [c for c in contenders if c != "npugrad"] + [c for c in extra if any(s.op == "flce" for s in selected)]
    gemm_cols = ceilings is not None and any(s.unit == "GFLOP/s" for s in selected)
    bw_cols = ceilings is not None and ceilings.stream_mib > 0 and any(s.unit == "GB/s" for s in selected)
    widths = [max(10, len(c) + 4) for c in ratio_cols]
    header = (f"{'case':<40} {'contender':<13} {'median ms':>10} {'rate':>16}"
              + (f" {'of SGEMM':>8} {'own SGEMM':>9} {'of bf16 pk':>10} {'of instr pk':>11}" if gemm_cols else "")
              + (f" {'of BW':>6} {'own BW':>6}" if bw_cols else "")
              + f" {'peak extra MiB':>15}"
              + "".join(f" {'vs ' + c:>{w}}" for c, w in zip(ratio_cols, widths)))
    lines = [title, header, "-" * len(header)]
    shared = {} if shared is None else shared
    notes = set()
    for case in selected:
        names = [*contenders, *(extra if case.op == "flce" else ())]
        runs: dict[str, list[Result]] = {c: [] for c in names}
        # An FLCE call takes seconds: its first call is its warm-up, and it runs one round.
        warmup, case_rounds = (0, 1) if case.op == "flce" else (1, rounds)
        slow = SLOW_S if case.op == "flce" else None
        for turn in range(case_rounds):
            for c in names:
                if c in compilers.CONTENDERS and (case.label, c) in shared:
                    runs[c].append(shared[case.label, c])
                    continue
                r = ceilings.not_run(case, c, predicted_limit) if ceilings else None
                if r is None:
                    log(f"  {case.label}: {c}" + (f" (round {turn + 1} of {case_rounds})" if case_rounds > 1 else ""))
                    r = measure(c, spec_of(case, c), {**case.size, "alloc": alloc}, repeats, warmup, threads,
                                slow=slow, timeout=timeout,
                                ceiling=ceilings.n if ceilings is not None and case.unit == "GFLOP/s" else 0,
                                bandwidth=ceilings.stream_mib if ceilings is not None and case.unit == "GB/s" else 0)
                runs[c].append(r)
                if c in compilers.CONTENDERS:
                    shared[case.label, c] = r
        results = {c: combine(r) for c, r in runs.items()}
        ours = results["npugrad"]
        for c in names:
            r = results[c]
            name = case.label if c == "npugrad" else ""
            if r.error:
                lines.append(f"{name:<40} {c:<13} "
                             + (r.error if r.predicted else
                                f"{r.error} (setup and first call)" if r.timed_out else f"failed: {r.error}"))
                continue
            mark = "*" if r.first_only else " "
            rate = case.work / r.median / 1e9
            rate_text = f"{rate:8.1f} {case.unit}"
            cols = f"{name:<40} {c:<13} {r.median * 1e3:>9.2f}{mark} {rate_text:>16}"
            if gemm_cols:
                sgemm = _fraction(rate, ceilings.sgemm) if case.unit == "GFLOP/s" else ""
                own = _fraction(rate, r.ceiling()) if case.unit == "GFLOP/s" else ""
                bf16 = _fraction(rate, ceilings.bf16) if case.size.get("dtype") == "bfloat16" else ""
                instr = (_fraction(rate, ceilings.instruction_peak(case.size.get("dtype")))
                         if case.unit == "GFLOP/s" else "")
                cols += f" {sgemm:>8} {own:>9} {bf16:>10} {instr:>11}"
            if bw_cols:
                memory = case.unit == "GB/s"
                cols += (f" {_fraction(rate, ceilings.bandwidth) if memory else '':>6}"
                         f" {_fraction(rate, r.bandwidth()) if memory else '':>6}")
            cols += f" {r.peak_mib:>15.1f}"
            if c == "npugrad":
                cols += "".join(f" {_fmt_ratio(results.get(o), ours) if o in results else '':>{w}}"
                                for o, w in zip(ratio_cols, widths))
            lines.append(cols.rstrip())
            if r.first_only:
                notes.add(f"* slower than {SLOW_S:.0f} s: timed on its first call alone")
        if not alloc and case.op == "flce" and any(c in results for c in extra):
            out_mib = (case.size["bt"] + case.size["v"]) * case.size["h"] * (2 if case.size["dtype"] == "bfloat16" else 4)
            notes.add("compilers (" + ", ".join(extra) + ") return new dX and dW in this table too (a functional "
                      "program has no out=): their peak extra includes the outputs")
            lines.append(f"{'':<40} ({', '.join(extra)}: {out_mib / 2**20:.1f} MiB of outputs dX + dW)")
    return "\n".join(lines + sorted(notes))


PAIRED_CALLS = 5  # timed calls in a batch of the paired tables (--quick: 2)
PAIRED_FLCE_TURNS = 3  # at most, of one call each: an FLCE call takes seconds


def paired_table(title: str, selected: Sequence[Case], alloc: bool, threads: int, contenders: Sequence[str],
                 log: Callable[[str], None], batches: int, size: int, timeout: float | None = None,
                 unit: str = "GB/s", left_out: Callable[[Case, str], str | None] | None = None) -> str:
    """The cases of `unit` once more, all `contenders` in one process, taking turns in `batches`
    batches of `size` calls (bench.common.paired): a memory-bound row's time follows the
    machine's memory, which moves between processes (the 'own BW' readings), and a GEMM-bound
    one its CPU's speed, which drifts during a run (the 'own SGEMM' readings), so each ratio here
    is of two batches run a fraction of a second apart, its median over the turns. A contender
    that `left_out(case, name)` gives a reason not to run on a case (a call predicted to take too
    long: the tables' not_run) shows '-' there, and the reason under the table."""
    others = [c for c in contenders if c != "npugrad"]
    header = (f"{'case':<40}" + "".join(f" {c + ' ms':>12}" for c in contenders)
              + "".join(f" {'vs ' + c:>10}" for c in others))
    lines = [title, header, "-" * len(header)]
    notes: set[str] = set()
    for case in (c for c in selected if c.unit == unit):
        skipped = {c: why for c in others if left_out is not None and (why := left_out(case, c))}
        running = [c for c in contenders if c not in skipped]
        log(f"  {case.label}: {', '.join(running)} in one process")
        r = paired({c: spec_of(case, c) for c in running}, {**case.size, "alloc": alloc}, batches, size, threads,
                   timeout)
        if r.error:
            lines.append(f"{case.label:<40} failed: {r.error}")
            continue
        lines.append(f"{case.label:<40}"
                     + "".join(f" {r.time(c) * 1e3:>12.2f}" if c in running else f" {'-':>12}" for c in contenders)
                     + "".join(f" {r.ratio(c, 'npugrad'):>9.2f}x" if c in running else f" {'-':>10}"
                               for c in others))
        notes.update(f"{case.label}, {c}: {reason}" for c, reason in skipped.items())
    return "\n".join(lines + [f"- {note}" for note in sorted(notes)])


def contender_compile_table(shared: dict) -> str:
    """The compilers' compile time at each FLCE case's exact shapes (outside the timed calls)."""
    header = f"{'case':<40} {'contender':<13} {'compile s':>10}"
    title = ("Compile time of the compilers (exact shapes, in a fresh process: includes the compiler's start-up; "
             "outside the timed calls; torch.compile: its first call minus a timed call)")
    lines = [title, header, "-" * len(header)]
    for (label, c), r in shared.items():
        text = ("not run (see the tables)" if r.predicted else f"failed: {r.error}" if r.error
                else "-" if r.compile_s is None else f"{r.compile_s:>10.2f}")
        lines.append(f"{label:<40} {c:<13} {text:>10}")
    return "\n".join(lines)


CALL_BATCHES = 25  # batches of each side of the cached-call measurement (call_costs)


def call_costs(op: str, batches: int, size: int, dtype: str = "float32") -> dict:
    """The cold call, then the cached API call, its bound kernel and a NumPy ufunc call on 16
    float32 elements taking turns (paired_costs)."""
    a, b = np.ones(16, np.float32), np.ones(16, np.float32)
    return paired_costs(lambda: api_call(op, dtype), lambda: kernel_call(op, dtype), batches, size,
                        reference=lambda: np.add(a, b, out=a))


def compile_cases(ops: Sequence[str]) -> list[tuple[str, str]]:
    """(op, dtype) of each row of the compile table: every op in float32, and the FLCE in
    bfloat16 too, its largest kernel (the bf16 GEMMs on the host's AMX tiles or dot-product
    pairs, each with its edges: about twice the float32 kernel's LLVM IR)."""
    return [(op, dtype) for op in ops for dtype in (("float32", "bfloat16") if op == "flce" else ("float32",))]


def compile_table(ops: Sequence[str], threads: int, calls: int, log: Callable[[str], None]) -> str:
    header = (f"{'op':<10} {'dtype':<9} {'cold compile ms':>16} {'from disk ms':>13} {'cached call us':>15} "
              f"{'kernel us':>10} {'overhead us':>12} {'in np.add calls':>16} {'call, batches us':>17}")
    title = ("Compile time (fresh process, tiny inputs): cold = first call minus a cached call, with an empty "
             "disk cache; from disk = the same in the next fresh process, the passes' LLVM IR and the machine code "
             "loaded from the disk cache (NPUGRAD_CACHE_DIR: runtime/ir_cache.py, object_cache.py); cached call, kernel (the bound machine "
             f"code alone) and overhead (call minus kernel): {CALL_BATCHES} batches of {calls // CALL_BATCHES} calls "
             "of each taking turns in one process, the median over batches of each batch's median "
             "(bench.common.paired_costs); 'in np.add calls': the overhead over the time of np.add(a, b, out=a) on 16 "
             "float32 elements, timed in the same batches (a machine-wide slow spell scales both); 'call, batches': "
             "the fastest and slowest batch of the cached call")
    lines = [title, header, "-" * len(header)]
    for op, dtype in compile_cases(ops):
        log(f"  compile: {op} {dtype}")
        args = {"op": op, "batches": CALL_BATCHES, "size": max(1, calls // CALL_BATCHES), "dtype": dtype}
        with tempfile.TemporaryDirectory(prefix="npugrad-bench-cache-") as cache:
            fresh = {"NPUGRAD_CACHE_DIR": cache}
            cold = in_child("bench.ops:call_costs", args, threads, env=fresh)
            disk = in_child("bench.ops:call_costs", {**args, "batches": 1}, threads, env=fresh)
        bad = [r for r in (cold, disk) if not isinstance(r, dict)]
        row = f"{op:<10} {dtype:<9}"
        if bad:
            lines.append(f"{row} failed: {bad[0] or 'timed out'}")
            continue
        low, high = cold["spread"]
        lines.append(f"{row} {(cold['first'] - cold['call']) * 1e3:>16.1f} {(disk['first'] - cold['call']) * 1e3:>13.1f} "
                     f"{cold['call'] * 1e6:>15.1f} {cold['part'] * 1e6:>10.1f} {cold['overhead'] * 1e6:>12.1f} "
                     f"{cold['per_reference']:>15.0f}x "
                     f"{f'{low * 1e6:.1f}-{high * 1e6:.1f}':>17}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="npugrad bench", description=__doc__.splitlines()[0])
    add_arguments(ap)
    run(ap.parse_args(argv))


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--ops", default=",".join(OPS), help=f"comma-separated subset of {','.join(OPS)}")
    ap.add_argument("--repeats", type=int, default=5, help="timed calls after the warm-up call (default 5)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="times the contenders take turns on each case except FLCE, each time in a fresh process; "
                         "the median is over all their timed calls (default 3)")
    ap.add_argument("--paired", type=int, default=6,
                    help="after each table, its memory-bound rows again with every contender in one process, taking "
                         "turns in this many batches of calls, for ratios under one state of the machine's memory "
                         "(default 6; 0: none)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every contender (default 2)")
    ap.add_argument("--quick", action="store_true", help="tiny sizes: a smoke test, not a measurement")
    ap.add_argument("-q", "--quiet", action="store_true",
                    help="no progress messages (otherwise on stderr when it is a terminal)")
    ap.add_argument("--timeout", type=float, default=1800.0,
                    help="seconds after which a contender's process is stopped and reported as timed out "
                         "(default 1800; 0: no limit)")
    ap.add_argument("--predicted-limit", type=float, default=300.0,
                    help="a PyTorch contender on a bfloat16 FLCE row whose GEMMs run in PyTorch's fallback loop "
                         "(a CPU without bf16 dot-product instructions) and whose call the bf16 GEMM rate measured "
                         "in the same run predicts to take longer than this many seconds is not run; the row shows "
                         "the prediction (default 300; 0: run it anyway)")


def run(args: argparse.Namespace) -> None:
    ops = list(dict.fromkeys(o.strip() for o in args.ops.split(",") if o.strip()))  # bce,bce: once
    unknown = sorted(set(ops) - set(OPS))
    if unknown:
        raise SystemExit(f"npugrad bench: unknown op(s) {', '.join(unknown)}; ops are {', '.join(OPS)}")
    if args.repeats < 1:
        raise SystemExit("npugrad bench: --repeats must be at least 1")
    if args.rounds < 1:
        raise SystemExit("npugrad bench: --rounds must be at least 1")
    if args.paired < 0:
        raise SystemExit("npugrad bench: --paired must be at least 0")
    if not 1 <= args.threads <= MAX_THREADS:
        raise SystemExit(f"npugrad bench: --threads must be from 1 to {MAX_THREADS}")
    if not 0 <= args.timeout < math.inf:
        raise SystemExit("npugrad bench: --timeout must be a number of seconds >= 0 (0: no limit)")
    if not 0 <= args.predicted_limit < math.inf:
        raise SystemExit("npugrad bench: --predicted-limit must be a number of seconds >= 0 (0: run it anyway)")
    if not ops:
        raise SystemExit(f"npugrad bench: --ops names no op; ops are {', '.join(OPS)}")
    timeout = args.timeout or None
    contenders = ["npugrad", "numpy", *(["torch"] if torch_available() else [])]
    selected = [c for c in cases(args.quick) if c.op in ops]
    gemm_bound = any(c.unit == "GFLOP/s" for c in selected)
    absent = {c: compilers.missing(c) for c in compilers.CONTENDERS} if gemm_bound else {}
    extra = [c for c, why in absent.items() if why is None]

    progress.set_quiet(args.quiet)
    log = progress.say  # on stderr, to a terminal only

    setting = (f"{args.threads} thread(s) per contender, each in its own process, warmed on tiny inputs; "
               f"median of {args.repeats} timed call(s) after a first call (which measures peak extra memory) "
               f"and, except FLCE, one more warm-up call, pooled over {args.rounds} round(s) in which the contenders "
               "take turns (FLCE: one round); ratios are the contender's time / npugrad's (>1: npugrad faster)")
    print(f"npugrad bench{' --quick (tiny sizes)' if args.quick else ''}: {setting}")
    print("FLCE: memory-saving mode; NumPy computes in float32 for the bfloat16 rows; "
          "rates: FLCE 6*BT*V*H FLOP, others bytes read + written")
    ceilings = None
    memory_bound = any(c.unit == "GB/s" for c in selected)
    if gemm_bound:
        if extra:
            print("FLCE compilers, each compiling the same unfused program (logits materialised) for the exact "
                  f"shapes outside the timed calls: {', '.join(extra)} (bench/contenders.py)")
        for why in absent.values():
            if why:
                print(why)
    if gemm_bound or memory_bound:
        ceilings = measure_ceilings(args.quick, args.threads, log, timeout, gemm=gemm_bound, memory=memory_bound)
        print("Measured in this run, " + f"{args.threads} thread(s): " + "\n".join(ceilings.lines))
    if gemm_bound:
        print("'of SGEMM' / 'of bf16 pk' / 'of instr pk': the row's GFLOP/s as a fraction of these (instr: "
              "for bfloat16 AMX's tdpbf16ps peak where the CPU has it, else vdpbf16ps's where it has that, else the "
              "float32 FMA's); 'own SGEMM': of the "
              f"same SGEMM ({ceilings.n}^3) timed again in the row's own process, right before and right after its "
              "timed calls (the best of those readings): the ceiling of the row's own minutes, on a machine whose "
              "speed drifts during the run")
    if memory_bound:
        print("'of BW' / 'own BW': a memory-bound row's GB/s (the bytes it must read and write, counted once) as a "
              "fraction of that bandwidth, measured at the start of the run / again in the row's own process, right "
              "before and right after its timed calls (the best of those readings): the memory of a shared machine "
              "moves between processes, and a ratio between two rows is fair only where their 'own BW' agree")
    print()
    shared: dict = {}
    limit = args.predicted_limit or None
    batches, size = (min(args.paired, 2), 2) if args.quick else (args.paired, PAIRED_CALLS)
    pairing = (f"the memory-bound rows again, every contender in one process, taking turns in {batches} batches of "
               f"{size} calls (0.2 s apart, the order reversed every other turn): ms, the median of its batches' "
               "medians; vs, the median over the turns of the other's batch median / npugrad's (>1: npugrad "
               "faster), each of two batches under one state of the machine's memory")
    for title, alloc in (("Outputs preallocated (and pre-touched) for every contender", False),
                         ("Outputs allocated by every contender (npugrad without out=, functional NumPy/PyTorch; "
                          "EMA-Adam is in place in both tables)", True)):
        print(run_table(title, selected, alloc, args.repeats, args.threads, contenders, log, args.rounds, extra,
                        ceilings, shared, timeout, limit), "\n", flush=True)
        if batches and memory_bound:
            print(paired_table(f"Paired ({'allocated' if alloc else 'preallocated'}): {pairing}", selected, alloc,
                               args.threads, contenders, log, batches, size, timeout), "\n", flush=True)
        # The FLCE rows' contenders again in one process: npugrad and PyTorch eager into preallocated
        # outputs; every contender allocating, the compilers among them (their programs always
        # allocate; in the tables, they are timed once, minutes from npugrad's allocated row).
        flce_paired = ([c for c in contenders if c == "torch"] if not alloc
                       else [c for c in (*contenders, *extra) if c in ("torch", *compilers.CONTENDERS)])
        if batches and gemm_bound and flce_paired:
            turns = min(batches, PAIRED_FLCE_TURNS)
            who = ("npugrad and PyTorch eager" if not alloc else
                   "npugrad without out=, " + ", ".join("PyTorch eager" if c == "torch" else c for c in flce_paired))
            print(paired_table(f"Paired FLCE ({'allocated' if alloc else 'preallocated'}): {who} in one process, "
                               f"taking turns {turns} times, a call each (0.2 s apart, the order reversed every other "
                               "turn): ms, the median of the turns; vs, the median over the turns of the other's call "
                               "/ npugrad's, each of two calls at one speed of the machine's CPU, which drifts during "
                               "a run", selected, alloc, args.threads, ["npugrad", *flce_paired], log, turns, 1,
                               timeout, unit="GFLOP/s", left_out=lambda case, c: getattr(
                                   ceilings.not_run(case, c, limit), "error", None)),
                  "\n", flush=True)
    print(compile_table(ops, args.threads, 300 if args.quick else 5000, log))
    if shared:
        print("\n" + contender_compile_table(shared))


if __name__ == "__main__":
    main()
