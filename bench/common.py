"""Benchmark plumbing: every contender runs in its own child process so that its peak memory is
its own. A contender is `module:function(**args)` returning a zero-argument callable (inputs
allocated, kernels compiled). The child gives the C heap's free pages back to the system
(release_free_memory: what the setup allocated and freed, NumPy's temporaries making the inputs,
would otherwise be reused by the call without counting), resets the RSS high-water mark
(`/proc/self/clear_refs`), makes one call and reports VmHWM − VmRSS before it as "peak extra"
memory, then times `repeats`
calls after `warmup` and reports the median (a call slower than `slow` seconds is timed alone:
its first call is its time). A setup may give its callable a `compile_s` (seconds spent compiling
outside the measured calls), reported alongside. With `ceiling` n > 0 the child also times
NumPy's float32 matmul n³ right before its timed calls and right after them (`ceilings`,
GFLOP/s): the machine's SGEMM ceiling in the same minutes and process as the row, for a shared
machine whose speed drifts during a run (the operands are allocated before the baseline of the
peak, and the product goes into a preallocated output, so the peak stays the contender's).
With `bandwidth` m > 0 it reads the machine's memory bandwidth there in the same way (`bandwidths`,
GB/s: bench.contenders.stream_numpy, NumPy's in-place add over two arrays of m MiB on the
contender's threads), for the memory-bound rows.
`combine` pools the calls of several such runs (rounds in which the contenders take turns, so
that a slow spell of a shared machine falls on all of them rather than on one).
`paired` runs several contenders in one child instead, taking turns batch by batch, for ratios
measured in the same minutes and the same process (no peak memory there: the process holds all
of their inputs).
"""

from __future__ import annotations

import ctypes
import gc
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _status_kib() -> dict[str, int]:
    values = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                values[key] = int(value.split()[0])
    return values


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def release_free_memory() -> None:
    """Let go of Python's garbage and give the C heap's free pages back to the system
    (glibc's malloc_trim), so that a measured call's peak counts all it allocates, not only what
    exceeds the free memory an earlier step left resident. (Measured: npugrad's FLCE float32
    4096 x 4096 x 8192, whose per-core weight packs (2.75 MiB each) the first core took from the
    heap's free chunks left by the input generation: 8.3 MiB without, 13.9 MiB with.)"""
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: the retained pages stay in the baseline
        pass


def _setup(spec: str, args: dict) -> Callable[[], object]:
    """The contender `module:function` called with `args` (its setup): the call to time."""
    module_name, func_name = spec.split(":")
    sys.path.insert(0, ROOT)
    return getattr(__import__(module_name, fromlist=[func_name]), func_name)(**args)


def _take_turns(fns: list[Callable[[], object]], batches: int, size: int, pause: float = 0.0) -> list[list[float]]:
    """`batches` turns in which each of `fns` runs a batch of `size` timed calls (the order
    reversed every other turn; `pause` seconds before each batch, if any): each one's batch
    medians, in turn order."""
    medians: list[list[float]] = [[] for _ in fns]
    for turn in range(batches):
        for j in range(len(fns)) if turn % 2 == 0 else reversed(range(len(fns))):
            if pause:
                time.sleep(pause)
            times = []
            for _ in range(size):
                start = time.perf_counter()
                fns[j]()
                times.append(time.perf_counter() - start)
            medians[j].append(statistics.median(times))
    return medians


def child(spec: str, args: dict, repeats: int, warmup: int, slow: float | None = None, ceiling: int = 0,
          bandwidth: int = 0) -> dict:
    fn = _setup(spec, args)
    sgemm = _sgemm(ceiling) if ceiling else None
    stream = _stream(bandwidth) if bandwidth else None
    release_free_memory()
    before = _status_kib()["VmRSS"]
    exact = _reset_hwm()
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    peak = _status_kib()["VmHWM"] - before
    first_only = slow is not None and first > slow
    for _ in range(0 if first_only else warmup):
        fn()
    ceilings = [sgemm()] if sgemm else []
    bandwidths = [stream()] if stream else []
    times = []
    for _ in range(0 if first_only else repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    if sgemm:
        ceilings.append(sgemm())
    if stream:
        bandwidths.append(stream())
    median = statistics.median(times) if times else first
    compile_s = getattr(fn, "compile_s", None)
    if compile_s is not None and getattr(fn, "compile_includes_call", False):
        compile_s = max(compile_s - median, 0.0)
    return {"median": median, "min": min(times or [first]), "first": first, "peak_mib": max(peak, 0) / 1024,
            "exact_peak": exact, "times": times if times else [first], "first_only": first_only,
            "compile_s": compile_s, "ceilings": ceilings, "bandwidths": bandwidths}


def paired_child(specs: dict[str, str], args: dict, batches: int, size: int, pause: float = 0.2) -> dict:
    """The contenders `specs` (name -> `module:function`, each called with `args`) in this one
    process: each set up and called once (its warm-up), then `batches` turns in which each runs a
    batch of `size` timed calls (the order reversed every other turn), `pause` seconds before
    each batch, so that threads a contender's runtime leaves spinning after its calls (OpenMP's,
    BLAS's) go idle before the next one's. Returns each contender's batch medians, in turn order."""
    fns = {}
    for name, spec in specs.items():
        fns[name] = _setup(spec, args)
        fns[name]()
    medians = _take_turns(list(fns.values()), batches, size, pause)
    return {"medians": dict(zip(fns, medians))}


@dataclass
class Paired:
    """Contenders timed in one process, taking turns batch by batch (paired_child)."""

    medians: dict[str, tuple[float, ...]]  # name -> its batches' medians (s), in turn order
    error: str | None = None

    def time(self, name: str) -> float:
        """The median of `name`'s batch medians (s)."""
        return statistics.median(self.medians[name])

    def ratio(self, other: str, base: str) -> float:
        """The median over turns of other's batch median / base's (>1: base faster): each
        quotient of two batches run a fraction of a second apart."""
        return statistics.median(o / b for o, b in zip(self.medians[other], self.medians[base]))


def paired(specs: dict[str, str], args: dict, batches: int, size: int, threads: int | None = None,
           timeout: float | None = None) -> Paired:
    """`specs` in one fresh interpreter, taking turns (paired_child): their batch medians, or the
    error it hit, or "timed out" after `timeout` seconds."""
    r = in_child("bench.common:paired_child", {"specs": specs, "args": args, "batches": batches, "size": size},
                 threads, timeout)
    if isinstance(r, dict):
        return Paired({n: tuple(m) for n, m in r["medians"].items()})
    return Paired({}, f"timed out after {timeout:.0f} s" if r is None else r)


def _sgemm(n: int, tries: int = 2) -> Callable[[], float]:
    """A reading of the SGEMM ceiling (bench.contenders.sgemm_numpy: NumPy float32 matmul n³ into
    a preallocated output), the faster of `tries` (GFLOP/s), then a pause, so that BLAS threads
    still spinning after it do not take the cores from the contender's next call."""
    from bench.contenders import sgemm_numpy

    product = sgemm_numpy(n)
    product()

    def reading() -> float:
        best = float("inf")
        for _ in range(tries):
            start = time.perf_counter()
            product()
            best = min(best, time.perf_counter() - start)
        time.sleep(0.2)
        return 2.0 * n**3 / best / 1e9

    return reading


def _stream(mib: int, tries: int = 3) -> Callable[[], float]:
    """A reading of the memory-bandwidth ceiling (bench.contenders.stream_numpy over two arrays
    of `mib` MiB, mapped here, before the baseline of the peak), the best of `tries` (GB/s)."""
    from bench.contenders import stream_numpy

    stream = stream_numpy(mib)
    stream()

    def reading() -> float:
        time.sleep(0.2)  # the contender's runtime threads still spinning after its call go idle first
        best = max(stream() for _ in range(tries))
        time.sleep(0.2)
        return best

    return reading


@dataclass
class Result:
    name: str
    median: float
    first: float
    peak_mib: float
    error: str | None = None
    times: tuple[float, ...] = ()
    compile_s: float | None = None
    first_only: bool = False  # timed on its first call alone (slower than `slow`)
    timed_out: float | None = None  # the time-out (s) that stopped it: its time is at least that
    predicted: float | None = None  # not run: the seconds a call was predicted to take
    ceilings: tuple[float, ...] = ()  # SGEMM ceiling readings in the contender's process (child's `ceiling`)
    bandwidths: tuple[float, ...] = ()  # memory-bandwidth readings there (child's `bandwidth`)

    def ceiling(self) -> float | None:
        """The SGEMM ceiling of the row's own minutes: the best of its readings, so that one
        reading taken in a slow moment does not flatter the row (None: not read)."""
        return max(self.ceilings) if self.ceilings else None

    def bandwidth(self) -> float | None:
        """The memory bandwidth of the row's own minutes, the best of its readings (None: not read)."""
        return max(self.bandwidths) if self.bandwidths else None


def combine(runs: list[Result]) -> Result:
    """One result from several runs of a contender: the median of all their timed calls, the
    first run's first call, the largest peak; the first error if any run failed."""
    failed = next((r for r in runs if r.error), None)
    if failed is not None:
        return failed
    times = tuple(t for r in runs for t in r.times)
    median = statistics.median(times) if times else runs[0].median
    return Result(runs[0].name, median, runs[0].first, max(r.peak_mib for r in runs), None, times,
                  runs[0].compile_s, any(r.first_only for r in runs),
                  ceilings=tuple(c for r in runs for c in r.ceilings),
                  bandwidths=tuple(b for r in runs for b in r.bandwidths))


def measure(name: str, spec: str, args: dict, repeats: int = 3, warmup: int = 1, threads: int | None = None,
            slow: float | None = None, timeout: float | None = None, env: dict[str, str] | None = None,
            ceiling: int = 0, bandwidth: int = 0) -> Result:
    """Run one contender in a fresh interpreter (with `env` added to this one's environment)
    and return its figures (or the error it hit, or "timed out" after `timeout` seconds); with
    `ceiling` n, the SGEMM n³ readings around its timed calls too, with `bandwidth` m the
    memory-bandwidth readings over two m MiB arrays (child)."""
    r = in_child("bench.common:child", {"spec": spec, "args": args, "repeats": repeats, "warmup": warmup, "slow": slow,
                                        "ceiling": ceiling, "bandwidth": bandwidth}, threads, timeout, env)
    if isinstance(r, dict):
        return Result(name, r["median"], r["first"], r["peak_mib"], None, tuple(r["times"]), r["compile_s"],
                      r["first_only"], ceilings=tuple(r["ceilings"]), bandwidths=tuple(r["bandwidths"]))
    nan = float("nan")
    if r is None:
        return Result(name, nan, nan, nan, f"timed out after {timeout:.0f} s", timed_out=timeout)
    return Result(name, nan, nan, nan, r)


def in_child(spec: str, args: dict, threads: int | None = None, timeout: float | None = None,
             env: dict[str, str] | None = None) -> dict | str | None:
    """`module:function(**args)` in a fresh interpreter, with `env` added to this one's
    environment and every thread count set to `threads`: the dict it returned, the error it hit
    (its last line of output), or None if `timeout` seconds ended it."""
    env = {**os.environ, **(env or {})}
    if threads is not None:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NPUGRAD_THREADS"):
            env[var] = str(threads)
    module, function = spec.split(":")
    code = (
        f"import importlib, json, sys; sys.path.insert(0, {ROOT!r}); "
        f"f = getattr(importlib.import_module({module!r}), {function!r}); "
        "print('RESULT' + json.dumps(f(**json.loads(sys.argv[1]))))"
    )
    # A session of its own, so that a time-out ends the child's own workers too (Inductor's compilers).
    with subprocess.Popen([sys.executable, "-c", code, json.dumps(args)], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return None
        except BaseException:  # Ctrl-C: the child is in a session of its own and did not get it
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    for line in stdout.splitlines():
        if line.startswith("RESULT"):
            return json.loads(line[len("RESULT"):])
    tail = (stderr or stdout).strip().splitlines()[-1:] or ["no output"]
    return tail[0]


def paired_costs(first_call: Callable[[], Callable[[], object]], part: Callable[[], Callable[[], object]],
                 batches: int, size: int, reference: Callable[[], object] | None = None) -> dict:
    """What a call costs beyond a part of it (an API call beyond its kernel), both measured in
    this process: `first_call()` makes the call (its setup, not timed), whose first run is timed
    (`first`, s); `part()` the part alone. Then `batches` batches of `size` calls of each, taking
    turns (which goes first alternates), each call timed: `call` and `part` are the medians of
    the batches' medians, `overhead` the median of the batches' differences (s). On a shared
    machine a slow spell (other tenants: the call's Python then runs at a fraction of its speed
    for a few hundred milliseconds) falls on both sides of the batches it covers, and the median
    over batches spread across the run leaves out the spells unless they cover half of it:
    timing the two sides in separate processes, one run of thousands of calls each, the
    difference took a spell whole (36 µs quiet, 70 µs in a spell, measured on a Zen 3 VM).
    With `reference` (a call whose cost is the machine's, e.g. a NumPy ufunc on a few elements)
    a batch of it joins each turn, and `per_reference` is the median over batches of the
    overhead in units of it: a slow spell that covers the whole run scales both."""
    call = first_call()
    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    alone = part()

    sides = [call, alone] + ([reference] if reference is not None else [])
    _take_turns(sides, 1, size)  # warm-up: a batch of each
    medians = _take_turns(sides, batches, size)
    calls, parts = medians[0], medians[1]
    result = {"first": first, "call": statistics.median(calls), "part": statistics.median(parts),
              "overhead": statistics.median([c - p for c, p in zip(calls, parts)]),
              "spread": [min(calls), max(calls)]}
    if reference is not None:
        result["reference"] = statistics.median(medians[2])
        result["per_reference"] = statistics.median([(c - p) / r for c, p, r in zip(calls, parts, medians[2])])
    return result


def table(title: str, rows: list[tuple[Result, str]], baseline: str, flops: float | None = None) -> str:
    """One row per contender: time, GFLOP/s, ratio to `baseline` (>1 = faster), peak extra MiB."""
    base = next((r.median for r, _ in rows if r.name == baseline), float("nan"))
    lines = [title, f"{'contender':<44} {'median ms':>10} {'GFLOP/s':>8} {'vs ' + baseline:>14} {'peak extra MiB':>15}  notes",
             "-" * 110]
    for r, note in rows:
        if r.error:
            lines.append(f"{r.name:<44} {'not run' if r.predicted else 'failed':>10}  {r.error}")
            continue
        gf = f"{flops / r.median / 1e9:8.1f}" if flops else f"{'':>8}"
        lines.append(f"{r.name:<44} {r.median * 1e3:>10.1f} {gf} {base / r.median:>13.2f}x {r.peak_mib:>15.1f}  {note}")
    return "\n".join(lines)
