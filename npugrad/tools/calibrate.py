"""`npugrad calibrate`: measure this machine for the cost model and write a target file.

    npugrad calibrate -o host-measured.toml        # then: npugrad-opt ... --target host-measured.toml

The file is `host` (its levels, roles, vector width, cores: npugrad/targets/target.py) with the
cost figures measured on one core instead of estimated: the clock (from /sys or /proc/cpuinfo),
the float32 GEMM rate (FLOP per cycle, NumPy's BLAS on one thread: the best this core reaches),
the elementwise rate (x * y + z on arrays that stay in L2), the copy bandwidth out of every level
(bytes per cycle, two arrays of a quarter of it each; NumPy's per-call overhead taken off), and the memory's bandwidth with every core
copying at once. Measured in a child process whose BLAS is held to one thread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import numpy as np

from npugrad.targets.target import HOST_COPY_SETUP, HOST_LOOP, host

REPEATS = 5


def _best(fn: Callable[[], None], seconds: float) -> float:
    """The fastest of REPEATS timings of `fn`, each repeating it for about `seconds`."""
    fn()
    start, n = time.perf_counter(), 0
    while time.perf_counter() - start < seconds / 10 or n < 1:
        fn()
        n += 1
    per = max(1, int(n * 10 / REPEATS))
    best = float("inf")
    for _ in range(REPEATS):
        t = time.perf_counter()
        for _ in range(per):
            fn()
        best = min(best, (time.perf_counter() - t) / per)
    return best


def measure(seconds: float = 0.2) -> dict:
    """Figures per second, on one core (run with the BLAS held to one thread)."""
    t = host()
    out: dict = {}
    n = 512
    a, b = np.ones((n, n), np.float32), np.ones((n, n), np.float32)
    c = np.empty((n, n), np.float32)
    out["gemm_flops"] = 2 * n**3 / _best(lambda: np.matmul(a, b, out=c), seconds)
    x, y, z = (np.ones(16384, np.float32) for _ in range(3))  # 192 KiB: in L2
    out["vector_ops"] = 2 * x.size / _best(lambda: np.add(np.multiply(x, y, out=z), x, out=z), seconds)
    # NumPy's call overhead (about a microsecond) is as long as a copy within L1: timed on one
    # element and taken off (at most half of a copy's time, measurements being noisy).
    one = [np.ones(1, np.float32) for _ in range(2)]
    call = _best(lambda: np.copyto(one[1], one[0]), seconds)
    copies = {}
    for lv in t.levels:
        size = (lv.capacity // 4) if lv.capacity else 256 << 20
        src, dst = np.ones(size // 4, np.float32), np.empty(size // 4, np.float32)
        spent = _best(lambda s=src, d=dst: np.copyto(d, s), seconds)
        copies[lv.name] = size / max(spent - call, spent / 2)
    out["copy"] = copies
    return out


def _shared_bandwidth(cores: int, seconds: float) -> float:
    """Bytes per second of global memory with `cores` processes copying at once."""
    code = ("import numpy as np, time\n"
            "s = np.ones(64 << 18, np.float32); d = np.empty_like(s); np.copyto(d, s)\n"
            f"t = time.perf_counter(); n = 0\nwhile time.perf_counter() - t < {seconds}: np.copyto(d, s); n += 1\n"
            "print(n * s.nbytes / (time.perf_counter() - t))")
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=_one_thread())
             for _ in range(cores)]
    return sum(float(p.communicate()[0]) for p in procs)


def _one_thread() -> dict[str, str]:
    return {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def target_file(figures: dict, shared: float) -> str:
    """The TOML of `host` with the measured figures (per cycle at the clock)."""
    t = host()
    hz = t.clock_ghz * 1e9
    lines = [
        f"# Written by `npugrad calibrate` on {time.strftime('%Y-%m-%d')}: host with measured cost figures.",
        'name = "host-measured"',
        f"cores = {t.cores}",
        f"vector_bits = {t.vector_bits}",
        f"vector_registers = {t.vector_registers}",
        "double_buffer = false",
        f'llvm_cpu = "{t.llvm_cpu}"',
        f'llvm_features = "{t.llvm_features}"',
        f"clock_ghz = {t.clock_ghz:.4g}",
        'costs = "measured by npugrad calibrate: GEMM (BLAS, one thread), x * y + z in L2, copies per level"',
        "",
        "[roles]",
        *(f'{role} = "{level}"' for role, level in t.roles),
    ]
    for lv in t.levels:
        lines += ["", "[[level]]", f'name = "{lv.name}"']
        if lv.is_global:
            lines += ['kind = "global"', f"bandwidth = {shared / hz:.4g}"]
            if lv.latency:  # not measured: host's estimate, kept so that streaming loops still prefetch
                lines += [f"latency = {lv.latency:.4g}"]
        else:
            lines += [f"capacity = {lv.capacity}", f"alignment = {lv.alignment}", f'unit = "{lv.unit}"',
                      f'parent = "{lv.parent}"']
    rate = figures["gemm_flops"] / hz
    lines += ["", "[[unit]]", 'name = "cpu"', 'work = ["matrix", "vector", "scalar"]', f"overhead = {HOST_LOOP:g}",
              f"rate = {{ matrix = {{ any = {rate:.4g} }}, vector = {{ any = {figures['vector_ops'] / hz:.4g} }}, "
              f"scalar = {{ any = {figures['vector_ops'] / hz / (t.vector_bits // 32):.4g} }} }}"]
    copy = figures["copy"]
    for a in t.levels:
        for b in t.levels:
            bw = min(copy[a.name], copy[b.name]) / hz
            lines += ["", "[[path]]", f'from = "{a.name}"', f'to = "{b.name}"', f"bandwidth = {bw:.4g}",
                      f"latency = {HOST_COPY_SETUP:g}"]
    return "\n".join(lines) + "\n"


def run(output: str, seconds: float = 0.2) -> str:
    child = subprocess.run([sys.executable, "-m", "npugrad.tools.calibrate", "--measure", str(seconds)],
                           capture_output=True, text=True, env=_one_thread(), check=False)
    if child.returncode != 0:
        raise SystemExit(f"npugrad calibrate: error: the measuring process failed:\n{child.stderr.strip()}")
    figures = json.loads(child.stdout)
    text = target_file(figures, _shared_bandwidth(host().cores, seconds))
    try:
        with open(output, "w") as f:
            f.write(text)
    except OSError as e:
        raise SystemExit(f"npugrad calibrate: error: cannot write {output}: {e.strerror}") from None
    return text


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What can be told before minutes of measuring: a finite positive time, and an output
    file that can be written (a directory, or one in a directory that does not exist or is
    not writable, is not)."""
    if not 0 < args.seconds < math.inf:
        parser.error(f"argument --seconds: must be a positive number of seconds, got {args.seconds}")
    if not args.output:  # abspath('') is the current directory
        parser.error("argument -o/--output: names no file")
    output = os.path.abspath(args.output)
    folder = os.path.dirname(output)
    if os.path.isdir(output):
        parser.error(f"argument -o/--output: {args.output} is a directory")
    if not os.path.isdir(folder):
        parser.error(f"argument -o/--output: directory {folder} does not exist")
    if not os.access(folder, os.W_OK) or (os.path.exists(output) and not os.access(output, os.W_OK)):
        parser.error(f"argument -o/--output: {args.output} cannot be written")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-o", "--output", default="host-measured.toml", help="the target file to write")
    parser.add_argument("--seconds", type=float, default=0.2, help="time per measurement (default 0.2)")


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--measure"]:
        print(json.dumps(measure(float(args[1]) if len(args) > 1 else 0.2)))


if __name__ == "__main__":
    main()
