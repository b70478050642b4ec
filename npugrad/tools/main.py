"""The `npugrad` command: `npugrad demo` compiles every op, runs it and checks it against the reference;
`npugrad bench` times every op against NumPy and PyTorch (bench/ops.py, from a source checkout);
`npugrad calibrate` measures this machine for the cost model and writes a target file;
`npugrad peak` measures its float32 FMA and bf16 dot-product instruction peaks;
`npugrad cache` shows (or `--clear`s) the disk cache of compiled kernels."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    """The command; a reader that stops early (`npugrad peak | head -1`) ends it quietly, as it
    ends any shell tool: no traceback, exit status 128 + SIGPIPE (141). Python ignores SIGPIPE,
    so the write raises instead; stdout then goes to /dev/null, or the interpreter's last flush
    would raise again as it exits."""
    try:
        _main(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(128 + signal.SIGPIPE)


def _main(argv: Sequence[str] | None) -> None:
    parser = argparse.ArgumentParser(prog="npugrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile, run and check every op (every mode and dtype)")
    demo.add_argument("--seed", type=int, default=None, help="fix the random inputs (default: fresh ones)")
    demo.add_argument("--quick", action="store_true", help="each op in each dtype once (its first example)")
    bench = sub.add_parser("bench", help="time every op against NumPy and PyTorch (bench/ops.py)")
    ops_bench = _bench_module()
    if ops_bench is not None:
        ops_bench.add_arguments(bench)
    calibrate = sub.add_parser("calibrate", help="measure this machine's rates and bandwidths into a target file")
    from npugrad.tools import calibrate as calibration

    calibration.add_arguments(calibrate)
    peak = sub.add_parser("peak", help="measure this machine's float32 FMA and bf16 dot-product instruction peaks")
    from npugrad.tools import peak as peaks

    peaks.add_arguments(peak)
    cache = sub.add_parser("cache", help="the disk cache of compiled kernels: where, how many, how large")
    cache.add_argument("--clear", action="store_true", help="delete its entries")
    args = parser.parse_args(argv)
    if args.command == "demo" and args.seed is not None and args.seed < 0:
        demo.error(f"argument --seed: must be >= 0, got {args.seed}")
    if args.command == "calibrate":
        calibration.check_arguments(calibrate, args)
    if args.command in ("demo", "bench", "peak"):
        _check_environment(args.command)
    if args.command == "cache":
        _cache(args.clear)
    if args.command == "calibrate":
        calibration.run(args.output, args.seconds)
        print(f"wrote {args.output}: use it with --target {args.output}")
    if args.command == "peak":
        peaks.run(args)
    if args.command == "bench":
        if ops_bench is None:
            sys.exit("npugrad bench: needs a source checkout (bench/ops.py next to the npugrad package)")
        ops_bench.run(args)
    if args.command == "demo":
        from npugrad.tools.demo import run_demo

        sys.exit(0 if run_demo(seed=args.seed, quick=args.quick) else 1)


def _check_environment(command: str) -> None:
    """The NPUGRAD_* variables read where kernels are compiled and run, checked before the
    command's minutes of work: a bad value is one line naming it, not a traceback (demo), a
    micro-kernel "not measured" (peak) or every row "failed" (bench, whose --threads sets
    NPUGRAD_THREADS for its processes)."""
    from npugrad import progress
    from npugrad.lowering import emulation
    from npugrad.runtime import memory, pool, specialize

    checks = [emulation.requested, memory.limit, progress.enabled, progress.delay,
              lambda: specialize.env_flag("NPUGRAD_VERIFY_EACH"), lambda: specialize.env_flag("NPUGRAD_LINE_TABLES")]
    if command != "bench":
        checks.append(pool.threads)
    try:
        for check in checks:
            check()
    except ValueError as e:
        sys.exit(f"npugrad {command}: error: {e}")


def _cache(clear: bool) -> None:
    from npugrad.runtime import ir_cache, object_cache

    where = object_cache.directory()
    if where is None:
        print("npugrad cache: off (NPUGRAD_CACHE_DIR=off)")
        return
    if why := object_cache.unreadable():
        sys.exit(f"npugrad cache: error: {where}: cannot be read ({why}); NPUGRAD_CACHE_DIR names another "
                 "directory, =off turns the cache off")
    if clear:
        count, size, failed = object_cache.clear()
        print(f"npugrad cache: {where}: deleted {count} entries, {size / 2**20:.1f} MiB")
        if failed:
            sys.exit(f"npugrad cache: error: {len(failed)} entries could not be deleted:\n  " + "\n  ".join(failed))
        return
    paths = object_cache.entries()
    size = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
    ir = sum(p.endswith(ir_cache.SUFFIX) for p in paths)
    print(f"npugrad cache: {where}: {len(paths)} entries ({len(paths) - ir} machine code, {ir} LLVM IR), "
          f"{size / 2**20:.1f} MiB (NPUGRAD_CACHE_DIR to move it, =off to turn it off; --clear deletes the entries)")


def _bench_module():
    """bench/ops.py of the checkout this package was installed from (it is not packaged)."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    if not os.path.isfile(os.path.join(root, "bench", "ops.py")):
        return None
    if root not in sys.path:
        sys.path.insert(0, root)
    from bench import ops

    return ops


if __name__ == "__main__":
    main()
