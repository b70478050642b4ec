"""Fusion benchmark for the linear cross-entropy gradient (memory-saving mode, float32):
the fused kernel, the same lowering with one tile covering BT×V (the unfused form: the logit
gradient is materialised), and NumPy materialising the logits. Outputs are preallocated for all.

    .venv/bin/python bench/flce_fusion.py [--bt 4096 --h 1024 --v 32000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from bench.common import measure, table


def _inputs(bt: int, h: int, v: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((bt, h), dtype=np.float32) * h**-0.5).astype(np.float32)
    w = (rng.standard_normal((v, h), dtype=np.float32) * h**-0.5).astype(np.float32)
    target = rng.integers(0, v, bt)
    mask = rng.random(bt) < 0.1
    grad = np.full(bt, 1.0 / bt, np.float32)
    # Statistics as the forward pass leaves them (computed in chunks to stay small here).
    lm = np.empty(bt, np.float32)
    se = np.empty(bt, np.float32)
    for s in range(0, bt, 256):
        z = x[s:s + 256] @ w.T
        lm[s:s + 256] = z.max(1)
        se[s:s + 256] = np.exp(z - lm[s:s + 256, None]).sum(1)
    return grad, x, w, mask, np.where(mask, 0, target).astype(np.int64), lm, se


def npugrad_case(bt: int, h: int, v: int, tile_bt: int | None = None, tile_v: int | None = None):
    from npugrad.compiler import Pipeline
    from npugrad.dialect import FusedLinearCrossEntropyLossGradOp as Op
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
    from npugrad.runtime.specialize import OperandClass, compile_op

    g, x, w, mask, t, lm, se = _inputs(bt, h, v)
    gx, gw = np.full_like(x, 0.0), np.full_like(w, 0.0)  # preallocated and touched: not "extra" memory
    arrays = {"grad": g, "input": x, "weight": w, "target_mask": mask, "masked_target": t,
              "logits_max": lm, "sum_exp_logits": se, "input_grad_out": gx, "weight_grad_out": gw}
    # A single tile needs static tile sizes as large as the problem: compile for these shapes.
    static = tile_bt is not None
    tiles = (tile_bt, tile_v) if static else (64, 128)
    pipeline = Pipeline(fused_passes=[FuseLinearCrossEntropyGradPass(*tiles)])
    kernel = compile_op(Op, {k: OperandClass.of(a, static) for k, a in arrays.items()}, {"label_smoothing": 0.0}, pipeline)
    ordered = [arrays[n] for n in Op.operand_names() if n in arrays]
    return lambda: kernel(*ordered)


def numpy_case(bt: int, h: int, v: int):
    g, x, w, mask, t, lm, se = _inputs(bt, h, v)
    gx, gw = np.full_like(x, 0.0), np.full_like(w, 0.0)  # preallocated and touched: not "extra" memory
    rows = np.nonzero(~mask)[0]

    def run():
        p = x @ w.T
        p -= lm[:, None]
        np.exp(p, out=p)
        p /= se[:, None]
        p[rows, t[rows]] -= 1.0
        p *= g[:, None]
        np.matmul(p, w, out=gx)
        np.matmul(p.T, x, out=gw)

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bt", type=int, default=4096)
    ap.add_argument("--h", type=int, default=1024)
    ap.add_argument("--v", type=int, default=32000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    size = {"bt": args.bt, "h": args.h, "v": args.v}
    flops = 6.0 * args.bt * args.h * args.v
    logits_mib = args.bt * args.v * 4 / 2**20
    rows = [
        (measure("npugrad fused (tiles bt=64, v=128)", "bench.flce_fusion:npugrad_case", size, args.repeats, 0, args.threads),
         "no BT×V buffer"),
        (measure("npugrad unfused (one BT×V tile)", "bench.flce_fusion:npugrad_case",
                 {**size, "tile_bt": args.bt, "tile_v": args.v}, args.repeats, 0, args.threads),
         f"materialises the {logits_mib:.0f} MiB logits"),
        (measure("numpy, logits materialised", "bench.flce_fusion:numpy_case", size, args.repeats, 0, args.threads),
         "OpenBLAS GEMMs"),
    ]
    print(table(f"FLCE gradient, float32 memory-saving mode, BT={args.bt} H={args.h} V={args.v}, "
                f"{args.threads} thread(s) for NumPy; outputs preallocated", rows, "numpy, logits materialised", flops))


if __name__ == "__main__":
    main()
