"""Two or more tilings of the FLCE gradient compared in one process, calls taking turns: the way
to tell a few percent apart on a machine whose speed drifts by more than that between minutes.

    .venv/bin/python bench/ab.py --variant tile_bt=384,tile_v=320 --variant tile_bt=480,tile_v=512
    .venv/bin/python bench/ab.py --size 2048,2048,32000 --dtype float32 --rounds 16 \\
        --variant tile_bt=0,tile_v=0 --variant tile_v=640
    .venv/bin/python bench/ab.py --dtype float32 --variant cpu=host.toml --variant cpu=host_8x3.toml

Each variant is a set of options of the fuse-linear-cross-entropy-grad pass (tile_bt, tile_v,
balance_blocks, ...; 0: what the pass derives from the CPU), and `cpu=` the CPU description it is
compiled for (default: the host; a file as `npugrad calibrate` writes it, where `register_block =
[MR, NR]` sets the micro-kernels' block), compiled once, then every round calls each variant
once in turn (outputs preallocated). It prints each variant's median and best time
and, for every variant after the first, the median over the rounds of the first's time / its
time (>1: faster than the first) with the rounds' lowest and highest ratio. Two calls of one
round run seconds apart, so a slow spell of the machine scales both; a ratio between separate
processes, or between medians, carries that spell. On an Emerald Rapids (2 vCPUs) whose speed
swung by 2x within a minute, one kernel under two names read 1.005x over 16 rounds at the default
size (single rounds 0.64-1.66, the two medians 853 and 892 ms): give a few percent 10 rounds or
more, and run it again before believing it.

The kernels are compiled with a fresh disk cache (NPUGRAD_CACHE_DIR, a temporary directory):
a kernel cached by an earlier run of different code could otherwise come back for a variant.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def parse_variant(text: str) -> dict[str, int | str]:
    """`tile_bt=384,tile_v=320` as the pass's keyword arguments; '' (or 'default'): none.
    `cpu=FILE` (or a target's name) compiles the variant for that CPU description instead of
    the host: e.g. the host's as `npugrad calibrate` writes it, with a `register_block` of its
    own, to compare micro-kernel blocks on this machine."""
    options: dict[str, int | str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        if part == "default":
            continue
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise SystemExit(f"bench/ab.py: a variant is name=value pairs separated by commas, got {part!r}")
        if name.strip() == "cpu":
            if not value.strip():
                raise SystemExit("bench/ab.py: cpu= takes a target file or name")
            options["cpu"] = value.strip()
            continue
        try:
            options[name.strip()] = int(value)
        except ValueError:
            raise SystemExit(f"bench/ab.py: option {name.strip()!r} takes an integer, got {value!r}") from None
    return options


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", action="append", required=True,
                    help="fuse-linear-cross-entropy-grad options, e.g. tile_bt=384,tile_v=320 ('default': none); "
                         "give two or more")
    ap.add_argument("--size", default="4096,4096,8192", help="BT,H,V (default 4096,4096,8192)")
    ap.add_argument("--dtype", default="bfloat16", choices=("float32", "bfloat16"))
    ap.add_argument("--rounds", type=int, default=10, help="rounds of one call per variant (default 10)")
    args = ap.parse_args(argv)
    if len(args.variant) < 2:
        ap.error("give at least two --variant")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    try:
        bt, h, v = (int(x) for x in args.size.split(","))
    except ValueError:
        ap.error(f"--size is BT,H,V, got {args.size!r}")
    variants = [parse_variant(t) for t in args.variant]
    before = os.environ.get("NPUGRAD_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="npugrad-ab-") as cache:
        os.environ["NPUGRAD_CACHE_DIR"] = cache
        try:
            run(variants, args.variant, bt, h, v, args.dtype, args.rounds)
        finally:  # the caller's cache again (or none), not a directory that is gone
            if before is None:
                del os.environ["NPUGRAD_CACHE_DIR"]
            else:
                os.environ["NPUGRAD_CACHE_DIR"] = before
    return 0


def run(variants: list[dict[str, int | str]], names: list[str], bt: int, h: int, v: int, dtype: str, rounds: int) -> None:
    from bench.ops import flce_npugrad
    from npugrad.compiler import Pipeline
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
    from npugrad.passes.fuse_linear_online_max_sum import FuseLinearOnlineMaxSumPass
    from npugrad.runtime.launch import using
    from npugrad.targets import TargetError
    from npugrad.targets import get as get_target

    # The bench's own FLCE call (bench/ops.py: its inputs, outputs preallocated and touched),
    # compiled by whichever pipeline `using` gives when it is called.
    flce = flce_npugrad.__wrapped__(bt, h, v, dtype, False)
    pipelines = []
    for options in variants:
        options = dict(options)
        cpu = str(options.pop("cpu", "host"))
        try:
            get_target(cpu)
        except TargetError as e:
            raise SystemExit(f"bench/ab.py: cpu={cpu}: {e}") from None
        try:
            grad_pass = FuseLinearCrossEntropyGradPass(**options)
        except (TypeError, ValueError) as e:
            raise SystemExit(f"bench/ab.py: fuse-linear-cross-entropy-grad: {e}") from None
        pipelines.append(Pipeline(cpu=cpu, fused_passes=[FuseLinearOnlineMaxSumPass(), grad_pass]))

    def call(i: int) -> float:
        with using(pipelines[i]):
            start = time.perf_counter()
            flce()
            return time.perf_counter() - start

    for i in range(len(variants)):
        call(i)  # compile, first touch
    times: list[list[float]] = [[] for _ in variants]
    for r in range(rounds):
        order = range(len(variants)) if r % 2 == 0 else reversed(range(len(variants)))
        for i in order:
            times[i].append(call(i))
    flop = 6 * bt * h * v
    print(f"FLCE gradient {dtype} BT={bt} H={h} V={v}: {rounds} round(s), one call of each variant a round "
          f"(the order reversed every other round), outputs preallocated")
    header = f"{'variant':<36} {'median ms':>10} {'best ms':>9} {'GFLOP/s':>8} {'vs first (rounds)':>26}"
    print(header)
    print("-" * len(header))
    for i, name in enumerate(names):
        median = statistics.median(times[i])
        versus = ""
        if i:
            ratios = [a / b for a, b in zip(times[0], times[i])]
            versus = f"{statistics.median(ratios):.3f}x ({min(ratios):.2f}-{max(ratios):.2f})"
        print(f"{name or 'default':<36} {median * 1e3:>10.1f} {min(times[i]) * 1e3:>9.1f} {flop / median / 1e9:>8.1f} "
              f"{versus:>26}")


if __name__ == "__main__":
    raise SystemExit(main())
