"""Does the cost model rank tilings as the machine does? On the tiled host path, for tilings of the
FLCE gradient (compute-bound) and of the BCE gradient (memory-bound), the time the model predicts
for the tiled IR (npugrad/analysis/cost.py, from `npugrad-opt --report`'s counts) against the
time the kernel takes here; prints the table, Spearman's rank correlation per op and overall,
and the worst ratio of predicted to measured (after scaling by the median ratio: the model's
clock and rates are absolute, the ranking is what a search needs).

    .venv/bin/python bench/cost_model.py                       # the sizes the issue asks for
    .venv/bin/python bench/cost_model.py --tiny                # a smoke test: small shapes, 1 repeat
    .venv/bin/python bench/cost_model.py --target host-measured.toml   # after `npugrad calibrate`

Each tiling is set by hand on the op (`tile_sizes`), so choose-tile-sizes keeps it; the module
goes through the host pipeline and runs on all cores, best of --repeats runs and of at least half
a second of runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np

from npugrad.analysis import cost
from npugrad.analysis.report import analyze
from npugrad.compiler import CompileError, Pipeline, parse
from npugrad.ir import defined_functions
from npugrad.runtime.executable import Executable, block_kernels, signatures
from npugrad.targets import get
from npugrad.tools import run as runner

FLCE = """
func.func @flce(%g: memref<{bt}xf32>, %x: memref<{bt}x{h}xbf16>, %w: memref<{v}x{h}xbf16>, %mask: memref<{m}xui8>,
                %t: memref<{bt}xi64>, %lm: memref<{bt}xf32>, %se: memref<{bt}xf32>,
                %gx: memref<{bt}x{h}xbf16>, %gw: memref<{v}x{h}xbf16>) {{
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<{bt}xf32>) input(%x : memref<{bt}x{h}xbf16>)
      weight(%w : memref<{v}x{h}xbf16>) target_mask(%mask : memref<{m}xui8>) masked_target(%t : memref<{bt}xi64>)
      logits_max(%lm : memref<{bt}xf32>) sum_exp_logits(%se : memref<{bt}xf32>)
      -> input_grad_out(%gx : memref<{bt}x{h}xbf16>) weight_grad_out(%gw : memref<{v}x{h}xbf16>)
      {{tile_sizes = #train.tiles<bt = {tbt}, v = {tv}, h = {th}>}}
  func.return
}}
"""
BCE = """
func.func @bce(%x: memref<{n}xf32>, %y: memref<{n}xf32>, %d: memref<1xf32>, %dx: memref<{n}xf32>) {{
  train.binary_cross_entropy_grad input_x(%x : memref<{n}xf32>) input_y(%y : memref<{n}xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<{n}xf32>) {{tile_sizes = #train.tiles<n = {tn}>}}
  func.return
}}
"""

FLCE_TILES = [(bt, v, h) for bt, v, h in [
    (16, 16, 16), (16, 64, 32), (32, 32, 32), (32, 128, 64), (64, 32, 16), (64, 64, 64), (64, 128, 32),
    (128, 32, 64), (128, 64, 16), (128, 128, 128), (256, 32, 64), (256, 64, 32), (32, 256, 128), (8, 128, 64),
]]
BCE_TILES = [64, 128, 256, 512, 1024, 2048, 3072, 4096, 8192, 12288, 16384, 32768]  # 12 that fit a 512 KiB L2


def cases(tiny: bool) -> list[tuple[str, str, str]]:
    """(op, tiling label, module text)."""
    bt, h, v = (64, 64, 256) if tiny else (1024, 1024, 4096)
    n = 1 << 14 if tiny else 1 << 24
    out = [("flce", f"bt={a} v={b} h={c}", FLCE.format(bt=bt, h=h, v=v, m=(bt + 7) // 8, tbt=a, tv=b, th=c))
           for a, b, c in FLCE_TILES]
    out += [("bce", f"n={t}", BCE.format(n=n, tn=t)) for t in BCE_TILES]
    return out


MIN_SECONDS = 0.5


def predicted_and_measured(text: str, target: str, repeats: int, min_seconds: float = MIN_SECONDS) -> tuple[float, float]:
    """(seconds the model predicts for the tiled IR, best measured seconds of the compiled kernel)."""
    pipeline = Pipeline(target=target)
    t = get(target)
    tiled = pipeline.lower(parse(text), "tiled")
    [f] = defined_functions(tiled)
    p = cost.of_report(analyze(f, t), t)
    assert p is not None
    module = parse(text)
    entry, specs, arrays, _ = runner.prepare_inputs(module, None, None, 0)
    sigs = signatures(module)
    llvm_ir = pipeline.lower(module, "llvm-ir")
    kernel = Executable(llvm_ir, sigs, block_kernels(module))[entry]
    kernel(*arrays)  # warm up
    # Best of `repeats` runs and of at least half a second of them: a short memory-bound kernel
    # gets enough runs for its best to stand out of this machine's noise.
    best, runs, spent = float("inf"), 0, 0.0
    while runs < repeats or spent < min_seconds:
        start = time.perf_counter()
        kernel(*arrays)
        took = time.perf_counter() - start
        best, runs, spent = min(best, took), runs + 1, spent + took
    return p.seconds, best


def spearman(a: list[float], b: list[float]) -> float:
    def ranks(xs):
        order = sorted(range(len(xs)), key=xs.__getitem__)
        r = [0.0] * len(xs)
        for rank, i in enumerate(order):
            r[i] = float(rank)
        return r

    ra, rb = ranks(a), ranks(b)
    return float(np.corrcoef(ra, rb)[0, 1]) if len(a) > 1 else 1.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="host", help="host (default) or a target file (npugrad calibrate)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--tiny", action="store_true", help="small shapes, one repeat: checks the script runs")
    args = parser.parse_args()
    repeats = 1 if args.tiny else args.repeats
    rows: list[tuple[str, str, float, float]] = []
    print(f"{'op':<5} {'tiling':<22} {'predicted':>12} {'measured':>12}")
    for op, label, text in cases(args.tiny):
        try:
            pred, meas = predicted_and_measured(text, args.target, repeats, 0.0 if args.tiny else MIN_SECONDS)
        except CompileError as e:  # a tiling that does not fit this target's levels
            print(f"{op:<5} {label:<22} skipped: {str(e).splitlines()[0]}")
            continue
        rows.append((op, label, pred, meas))
        print(f"{op:<5} {label:<22} {pred * 1e3:>10.4g}ms {meas * 1e3:>10.4g}ms", flush=True)
    for name in ("flce", "bce", "all"):
        sel = [r for r in rows if name in ("all", r[0])]
        pred, meas = [r[2] for r in sel], [r[3] for r in sel]
        scale = statistics.median(m / p for p, m in zip(pred, meas))
        worst = max(max(p * scale / m, m / (p * scale)) for p, m in zip(pred, meas))
        print(f"{name}: Spearman {spearman(pred, meas):.3f} over {len(sel)} tilings; measured / predicted "
              f"median {scale:.3g}; worst ratio after scaling {worst:.2f}x")


if __name__ == "__main__":
    main()
