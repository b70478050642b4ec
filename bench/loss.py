"""The whole LM-head loss (issue 14's targets): forward + backward of cross entropy over X·Wᵀ with
npugrad's fused kernels (`npugrad.ops.linear_cross_entropy`: the online max/sum forward, the
collectives, the loss, the fused gradient; no BT×V buffer anywhere) against PyTorch eager
(`F.cross_entropy(X @ W.T, y)` + `backward()`), in one run on the same inputs, and beside them
PyTorch's own memory-saving path where it has one (2.13 on: `F.linear_cross_entropy` with its
chunking `options`, the batch in chunks, no BT×V logits):

  1. forward + backward, per dtype: time and peak extra memory, ratio to PyTorch eager, in
     `--rounds` rounds (3) in which the two take turns, each in a fresh process, the first
     of them in alternate order: the ratio pools every round's timed calls, and each round's
     own ratio is printed beside it (a shared machine's speed drifts by more than the margins
     this ratio is read against within the minutes a round takes);
  2. the forward alone (one GEMM's worth of FLOPs, 2·BT·H·V) against the machine's SGEMM
     ceiling (NumPy 4096³) measured in the same run;
  3. the whole step with 50 % of the rows ignored (`ignore_index`), against none ignored;
  4. the recompute schedule (`chunk_rows=0`: four GEMMs of work, nothing that grows with V)
     beside the default (chunked, three GEMMs of work: within the memory target in float32, in
     a token tile's rows at least in bfloat16), and with `--chunk-rows N` the chunked schedule
     in chunks of N rows (more memory, faster).

Every contender runs in its own process (bench/common.py): peak extra memory is its own, and
includes the gradients it returns (both sides allocate them; the summary subtracts them from
both). It is measured on a step after one full-size step (the steady state of a training loop:
npugrad's first step at new shapes also compiles the kernels specialised to them, up to ~50 MiB
of compiler memory). Threads: `--threads` (2).

On a CPU where PyTorch's bfloat16 GEMMs have no dot-product instructions (oneDNN's bf16 kernels
need AVX512-BF16 or AMX) they run in a fallback loop at about 1 GFLOP/s, and eager's bfloat16
step would take an hour at the full size. There, the rate of torch.mm on bfloat16 is measured in
the same run (1024³) and, when three GEMMs at that rate predict more than `--predicted-limit`
seconds, eager is not run: its time is the prediction (a lower bound: the softmax passes are not
counted) and its memory the least it can hold, the log-softmax it saves for the backward and the
gradient flowing into it (2·BT·V elements), both marked as such in the summary.

    .venv/bin/python bench/loss.py                    # BT=4096 H=4096 V=32000, float32 and bfloat16
    .venv/bin/python bench/loss.py --quick            # BT=1024 H=1024 V=8192, float32
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from bench.common import Result, combine, measure, release_free_memory, table

SEED = 0


def _inputs(bt: int, h: int, v: int, dtype: str, ignored: float):
    from npugrad.dtypes import BFLOAT16

    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((bt, h), dtype=np.float32) * np.float32(h**-0.5)
    w = rng.standard_normal((v, h), dtype=np.float32) * np.float32(0.02)
    y = rng.integers(0, v, bt)
    y[rng.permutation(bt)[: round(ignored * bt)]] = -100
    dt = BFLOAT16 if dtype == "bfloat16" else np.dtype(dtype)
    return x.astype(dt), w.astype(dt), y


def npugrad_step(bt: int, h: int, v: int, dtype: str, ignored: float = 0.0, chunk_rows: int | None = None):
    """Forward + backward through npugrad's fused kernels (compiled on a tiny case first, in both
    schedules; the kernels specialised to the full size compile in _warmed). `chunk_rows`: the schedule
    (ops/loss.py; None: the default)."""
    from npugrad import ops

    tiny = _inputs(64, 32, 256, dtype, ignored)
    ops.linear_cross_entropy(*tiny, chunk_rows=0)
    ops.linear_cross_entropy(*tiny, chunk_rows=32)
    x, w, y = _inputs(bt, h, v, dtype, ignored)
    return _warmed(lambda: ops.linear_cross_entropy(x, w, y, chunk_rows=chunk_rows))


def npugrad_forward(bt: int, h: int, v: int, dtype: str):
    """The forward statistics of one shard holding the whole vocabulary."""
    from npugrad import ops

    tx, tw, ty = _inputs(64, 32, 256, dtype, 0.0)
    ops.fused_linear_online_max_sum(tx, tw, ty, 0, 256)
    x, w, y = _inputs(bt, h, v, dtype, 0.0)
    return _warmed(lambda: ops.fused_linear_online_max_sum(x, w, y, 0, v))


def torch_step(bt: int, h: int, v: int, dtype: str, ignored: float = 0.0):
    """PyTorch eager: the logits materialised, cross entropy, autograd."""
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(int(os.environ.get("NPUGRAD_THREADS", "2")))
    tdt = torch.bfloat16 if dtype == "bfloat16" else getattr(torch, dtype)
    x, w, y = _inputs(bt, h, v, dtype, ignored)

    def tensors(x, w, y):
        return (torch.from_numpy(np.asarray(x, np.float32)).to(tdt).requires_grad_(),
                torch.from_numpy(np.asarray(w, np.float32)).to(tdt).requires_grad_(), torch.from_numpy(y))

    def step(X, W, Y):
        X.grad = W.grad = None
        F.cross_entropy(X @ W.T, Y, ignore_index=-100).backward()
        return X.grad, W.grad

    warm = tensors(*_inputs(64, 32, 256, dtype, ignored))
    step(*warm)
    big = tensors(x, w, y)
    _warmed(lambda: step(*big))
    big[0].grad = big[1].grad = None  # as npugrad's, the gradients of the measured step are new memory
    return lambda: step(*big)


def torch_chunked_step(bt: int, h: int, v: int, dtype: str, ignored: float = 0.0):
    """PyTorch's own memory-saving path (2.13 on): F.linear_cross_entropy with its chunking
    options (LinearCrossEntropyOptions(): the batch in chunks, no BT×V logits), autograd."""
    import torch
    import torch.nn.functional as F
    from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions

    torch.set_num_threads(int(os.environ.get("NPUGRAD_THREADS", "2")))
    tdt = torch.bfloat16 if dtype == "bfloat16" else getattr(torch, dtype)
    options = LinearCrossEntropyOptions()

    def tensors(x, w, y):
        return (torch.from_numpy(np.asarray(x, np.float32)).to(tdt).requires_grad_(),
                torch.from_numpy(np.asarray(w, np.float32)).to(tdt).requires_grad_(), torch.from_numpy(y))

    def step(X, W, Y):
        X.grad = W.grad = None
        F.linear_cross_entropy(X, W, Y, ignore_index=-100, options=options).backward()
        return X.grad, W.grad

    step(*tensors(*_inputs(64, 32, 256, dtype, ignored)))
    big = tensors(*_inputs(bt, h, v, dtype, ignored))
    _warmed(lambda: step(*big))
    big[0].grad = big[1].grad = None
    return lambda: step(*big)


def torch_chunked_absent() -> str | None:
    """Why PyTorch's chunked linear cross entropy is not run here (None: it is)."""
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        return "torch not installed"
    if importlib.util.find_spec("torch.nn.modules.linear_cross_entropy_options") is None:
        return "this PyTorch has no F.linear_cross_entropy options (2.13 on)"
    return None


def _warmed(step):
    """`step` after one call at the full size, outside the measured ones: npugrad compiles the
    kernels specialised to these shapes (the forward's vocabulary ranges, the chunks' rows), whose
    compiler memory is no part of a training step's; PyTorch's the same for symmetry. What the
    call returns is let go, and the C heap's free pages go back to the system (malloc_trim), so
    that the measured step's peak counts all it allocates, not only what the first left unused."""
    step()
    release_free_memory()
    return step


def eager_not_run(args, kw: dict, flops: float) -> Result | None:
    """PyTorch eager's bfloat16 row where its GEMMs run in PyTorch's fallback loop and three of them
    at the rate measured here would take longer than `--predicted-limit` seconds; None: run it."""
    from bench.contenders import FALLBACK_GEMM_N as n
    from bench.contenders import fallback_prediction, torch_bf16_hardware

    if not args.predicted_limit or torch_bf16_hardware():
        return None
    mm = measure(f"torch.mm bfloat16 {n}³", "bench.contenders:bf16_gemm_torch", {"n": n}, **kw)
    if mm.error:
        return None
    rate = 2.0 * n**3 / mm.median / 1e9
    print(f"torch.mm bfloat16 (no bf16 dot-product instructions: PyTorch's fallback loop): "
          f"{rate:.2f} GFLOP/s ({args.threads} threads)")
    predicted = fallback_prediction(flops, rate, args.predicted_limit)
    if predicted is None:
        return None
    return Result("PyTorch eager (logits materialised)", float("nan"), float("nan"), float("nan"),
                  f"not run: its three GEMMs at {rate:.2f} GFLOP/s would take ~{predicted:.0f} s "
                  f"(over --predicted-limit {args.predicted_limit:.0f} s)", predicted=predicted)


def _taking_turns(args, case: dict, kw: dict, flops: float) -> tuple[Result, Result, list[float]]:
    """The step and PyTorch eager's, in `args.rounds` rounds in which they take turns (the first
    of them in alternate order), each in a fresh process: both pooled (common.combine), and each
    round's ratio of the step's median to eager's. Where eager's bfloat16 is not run
    (eager_not_run), one round of the step alone, against the prediction."""
    predicted = eager_not_run(args, kw, flops) if case["dtype"] == "bfloat16" else None
    ours_runs: list[Result] = []
    eager_runs: list[Result] = []
    for turn in range(1 if predicted else args.rounds):
        order = ["ours"] if predicted else ["ours", "eager"] if turn % 2 == 0 else ["eager", "ours"]
        for who in order:
            if args.rounds > 1 and not predicted:
                print(f"  {case['dtype']} step, round {turn + 1} of {args.rounds}: {who}", flush=True)
            if who == "ours":
                ours_runs.append(measure("npugrad fused (no BT×V buffer)", "bench.loss:npugrad_step", case, **kw))
            else:
                eager_runs.append(measure("PyTorch eager (logits materialised)", "bench.loss:torch_step", case, **kw))
    ours = combine(ours_runs)
    if predicted:
        return ours, predicted, []
    ratios = [o.median / e.median for o, e in zip(ours_runs, eager_runs) if not (o.error or e.error)]
    return ours, combine(eager_runs), ratios


def _of_own(flops: float, r: Result) -> str:
    """A row's rate over the SGEMM ceiling read in its own process (common.child's `ceiling`)."""
    own = r.ceiling()
    return "-" if own is None or r.error else f"{flops / r.median / own / 1e9:.2f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bt", type=int, default=4096)
    ap.add_argument("--h", type=int, default=4096)
    ap.add_argument("--v", type=int, default=32000)
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds in which the step and PyTorch eager's take turns (default 3; module docstring)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900.0, help="per contender, seconds")
    ap.add_argument("--quick", action="store_true", help="BT=1024 H=1024 V=8192, float32 only")
    ap.add_argument("--predicted-limit", type=float, default=300.0,
                    help="bfloat16: do not run PyTorch eager where its GEMM rate measured in this run predicts "
                         "a step longer than this many seconds (0: run it anyway)")
    ap.add_argument("--chunk-rows", type=int, default=0,
                    help="also run the chunked schedule in chunks of this many rows (0: not)")
    args = ap.parse_args()
    if args.rounds < 1:
        raise SystemExit("bench/loss.py: --rounds must be at least 1")
    if args.quick:
        args.bt, args.h, args.v, args.dtypes = 1024, 1024, 8192, "float32"
    size = {"bt": args.bt, "h": args.h, "v": args.v}
    gemm = 2.0 * args.bt * args.h * args.v
    kw = {"repeats": args.repeats, "warmup": 0, "threads": args.threads, "slow": 60.0, "timeout": args.timeout}
    n = 4096
    sgemm = measure(f"SGEMM ceiling (NumPy {n}³)", "bench.contenders:sgemm_numpy", {"n": n}, **kw)
    ceiling = 2.0 * n**3 / sgemm.median
    print(f"SGEMM ceiling: {ceiling / 1e9:.1f} GFLOP/s ({args.threads} threads)\n")
    summary = []
    for dtype in args.dtypes.split(","):
        case = {**size, "dtype": dtype}
        ours, eager, rounds = _taking_turns(args, case, kw, 3 * gemm)
        rows = [(ours, "default schedule")]
        others = [("recompute", measure("npugrad recompute (chunk_rows=0)", "bench.loss:npugrad_step",
                                        {**case, "chunk_rows": 0}, **kw))]
        if args.chunk_rows:
            others.append((f"chunked, {args.chunk_rows} rows", measure(
                f"npugrad chunked (chunk_rows={args.chunk_rows})", "bench.loss:npugrad_step",
                {**case, "chunk_rows": args.chunk_rows}, **kw)))
        rows += [(r, "") for _, r in others]
        absent = torch_chunked_absent()
        chunked = None
        if absent is None:
            chunked = measure("PyTorch F.linear_cross_entropy, chunked", "bench.loss:torch_chunked_step", case, **kw)
            rows.append((chunked, "options=LinearCrossEntropyOptions(): no BT×V logits"))
        else:
            print(f"PyTorch's chunked F.linear_cross_entropy: skipped, {absent}")
        print(table(f"LM-head loss forward + backward, {dtype}, BT={args.bt} H={args.h} V={args.v}",
                    [*rows, (eager, "")], (ours if eager.predicted else eager).name, 3 * gemm) + "\n")
        fwd = measure("npugrad forward (online max/sum)", "bench.loss:npugrad_forward", case, **kw, ceiling=n)
        print(table(f"forward alone, {dtype}: one GEMM's worth (2·BT·H·V FLOPs)", [(fwd, "")], fwd.name, gemm))
        print(f"  = {gemm / fwd.median / ceiling:.2f} of the SGEMM ceiling ({ceiling / 1e9:.1f} GFLOP/s); "
              f"{_of_own(gemm, fwd)} of the same SGEMM read in the forward's own process right before and after "
              f"its timed calls ({', '.join(f'{c:.1f}' for c in fwd.ceilings) or 'none'} GFLOP/s)\n")
        half = measure("npugrad fused, 50 % rows ignored", "bench.loss:npugrad_step", {**case, "ignored": 0.5}, **kw)
        print(table(f"50 % of the rows ignored, {dtype}", [(half, ""), (ours, "none ignored")], ours.name,
                    None) + "\n")
        summary.append((dtype, ours, eager, fwd, half, others, rounds, chunked))
    print("targets (issue 14)                         measured")
    for dtype, ours, eager, fwd, half, others, rounds, chunked in summary:
        # Both return dX and dW (PyTorch as X.grad, W.grad): the memory either spends beyond them.
        grads = (args.bt + args.v) * args.h * (2 if dtype == "bfloat16" else np.dtype(dtype).itemsize) / 2**20
        ours_extra = max(ours.peak_mib - grads, 0.0)
        if eager.predicted:  # not run: the least its step takes and holds (see the docstring)
            eager_extra, eager_time = 2 * args.bt * args.v * 2 / 2**20, eager.predicted
            eager_how = "at least (not run: its saved log-softmax and its gradient)"
        else:
            eager_extra, eager_time = max(eager.peak_mib - grads, 0.0), eager.median
            eager_how = "measured"
        print(f"{dtype:<9} time vs PyTorch eager ≤ 1.0×          {ours.median / eager_time:6.2f}×"
              + (" (eager's time predicted from its GEMM rate: at most this)" if eager.predicted else
                 f" (all {len(rounds)} rounds' calls; each round's: {', '.join(f'{r:.3f}' for r in rounds)})"
                 if len(rounds) > 1 else ""))
        print(f"{dtype:<9} peak memory beyond the gradients ({grads:.0f} MiB): npugrad {ours_extra:.1f} MiB, "
              f"eager {eager_extra:.1f} MiB {eager_how} (≤ 1/16: 1/{eager_extra / max(ours_extra, 0.1):.1f}, "
              f"{'met' if 16 * ours_extra <= eager_extra else 'missed'})")
        print(f"{dtype:<9} forward vs SGEMM ceiling ≥ 0.9×       {gemm / fwd.median / ceiling:6.2f}× "
              f"(of its own process's readings: {_of_own(gemm, fwd)}×)")
        print(f"{dtype:<9} 50 % ignored vs none ≤ 0.6×            {half.median / ours.median:6.2f}×")
        if chunked is not None and not chunked.error:
            print(f"{dtype:<9} PyTorch's chunked F.linear_cross_entropy (no target): npugrad's time "
                  f"{ours.median / chunked.median:.2f}× its, peak beyond the gradients "
                  f"{max(chunked.peak_mib - grads, 0.0):.1f} MiB (npugrad {ours_extra:.1f})")
        for label, other in others:
            extra = max(other.peak_mib - grads, 0.0)
            print(f"{dtype:<9} {label}: time vs eager {other.median / eager_time:.2f}×"
                  + (" (eager's time predicted)" if eager.predicted else "") + ", "
                  f"peak beyond the gradients {extra:.1f} MiB (1/{eager_extra / max(extra, 0.1):.0f} of eager's)")


if __name__ == "__main__":
    main()
