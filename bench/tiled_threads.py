"""Every op through the tiled path for a target, on 1 and on 2 threads, in one run: the
speed-up from spreading the blocks over cores. Outputs preallocated; median of repeats.

    .venv/bin/python bench/tiled_threads.py [--target host|npu-a2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.launch import using

F32, I64 = np.dtype(np.float32), np.dtype(np.int64)


def _cases(rng):
    """(name, size, callable) with inputs and outputs allocated once."""
    bt, h, v = 1024, 1024, 8192
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": (bt,), "masked_target": (bt,),
              "logits_max": (bt,), "sum_exp_logits": (bt,)}
    dts = {k: F32 for k in shapes} | {"target_mask": np.dtype(np.bool_), "masked_target": I64}
    f = harness.random_operands("fused_linear_cross_entropy_loss_grad", shapes, dts, {}, rng)
    gi, gw = np.empty((bt, h), F32), np.empty((v, h), F32)
    yield ("FLCE f32 memory-saving", f"BT={bt} H={h} V={v}",
           lambda: ops.fused_linear_cross_entropy_loss_grad(f["grad"], f["input"], f["weight"], f["target_mask"],
                                                            f["masked_target"], 0.0, f["logits_max"], f["sum_exp_logits"],
                                                            input_grad_out=gi, weight_grad_out=gw))
    g = rng.standard_normal((16384, 1024), dtype=np.float32)
    idx = rng.integers(0, 32000, 16384)
    out = np.empty((32000, 1024), F32)
    yield "embedding backward", "grad 16384x1024 into 32000 rows", lambda: ops.embedding_dense_backward(g, idx, 32000, out=out)
    n, c = 65536, 1000
    nshapes = {"self": (n, c), "target": (n,), "weight": (c,), "total_weight": (1,), "grad_output": ()}
    a = harness.random_operands("nll_loss_backward", nshapes, {k: F32 for k in nshapes} | {"target": I64}, {}, rng)
    nout = np.empty((n, c), F32)
    yield "NLL backward, mean", f"N={n} C={c}", lambda: ops.nll_loss_backward(
        a["grad_output"], a["self"], a["target"], a["weight"], 1, -100, a["total_weight"], out=nout)
    m = 1 << 24
    x = rng.uniform(0.01, 0.99, m).astype(F32)
    y, w, dx = rng.uniform(0, 1, m).astype(F32), rng.uniform(0.5, 1.5, m).astype(F32), np.empty(m, F32)
    yield "BCE grad, mean, weight", "16M", lambda: ops.binary_cross_entropy_grad(x, y, np.float32(1.0), w, 1, out=dx)
    states = [rng.standard_normal(m).astype(F32) for _ in range(4)]
    states[2] = np.abs(states[2])
    gr = rng.standard_normal(m).astype(F32)
    yield "EMA-Adam", "16M", lambda: ops.apply_fused_ema_adam(gr, *states, np.array([3]), lr=1e-3, weight_decay=0.01)


def _median_ms(fn, repeats: int) -> float:
    fn()  # compile, first touch
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="host")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    print(f"tiled path, target {args.target}; outputs preallocated; median of {args.repeats} after a warm-up call")
    print(f"{'op':<26} {'size':<34} {'1 thread ms':>12} {'2 threads ms':>13} {'speed-up':>9}")
    print("-" * 98)
    before = pool.threads()
    try:
        with using(Pipeline(target=args.target)):
            for name, size, fn in _cases(rng):
                pool.set_threads(1)
                one = _median_ms(fn, args.repeats)
                pool.set_threads(2)
                two = _median_ms(fn, args.repeats)
                print(f"{name:<26} {size:<34} {one:>12.1f} {two:>13.1f} {one / two:>8.2f}x")
    finally:
        pool.set_threads(before)


if __name__ == "__main__":
    main()
