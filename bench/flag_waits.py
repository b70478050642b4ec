"""How long each block of a launch waits at the flags (npu.wait_flag): the FLCE gradient's
wavefront made visible, block by block, on the host's threads.

    NPUGRAD_THREADS=2 .venv/bin/python bench/flag_waits.py                       # FLCE bf16 4096 x 4096 x 8192
    NPUGRAD_THREADS=2 .venv/bin/python bench/flag_waits.py --size bt=2048,h=2048,v=32000,dtype=float32 --steps

The machine code of npu.wait_flag is a support function the JIT links by name
(lowering/machine_code.py: an acquire load repeated, spinning, until the counter reaches the
value). Here that name is bound, before npugrad defines it, to a Python function that checks the
counter once and, if it has not reached the value yet, times the wait (giving the GIL and the
core away between checks, so the other blocks run on). Every other instruction of the kernels
is the one the op runs anyway. A wait is charged to the flag it reads: block b > 0 waits on
flag b − 1 (the block before it, done with the vocabulary tile that block b's GEMM 3 takes
next), and block 0 on flag P − 1 (a bfloat16/float16 dW's ring: a slot the last block still
rounds; tiling/flce.py).

Each check is a call into Python (a few microseconds): at sizes whose steps take
microseconds, the figures are as much the tool's as the kernel's. The first long wait of block 1
is the wavefront's fill (GEMMs 1 and 2 of its first tile against all three of block 0's); a
wait at nearly every step after it says the block before is the slower one, by about that much
a step.

A block that finishes its last step before the others waits at the end of the launch (the
pool's join), not at a flag. The second table gives, per block, what it waited at the flags and
how long before the call's end its last check ended (the wait that closes its last step): the
two together are the time the wavefront left its core idle. On a Zen 5 (FLCE 4096 x 4096 x
8192, 2 threads, 3-5 calls a run, 3 runs each) block 0 was done 21-31 ms (bfloat16) and
39-67 ms (float32) before the end, and block 1 waited 22-49 ms and 39-57 ms: 2.8-3.6 % and
2.2-2.6 % of both cores' time a call.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import threading
import time
from dataclasses import dataclass, field

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.loop_profile import _size  # the same k=v,... sizes
from npugrad.runtime.sync import WAIT_FLAG

WAIT_SYMBOL = f"_mlir_ciface_{WAIT_FLAG}"  # the C interface of npu.wait_flag's support function


@dataclass
class Waits:
    """The waits seen so far: per call, (flag address, value, seconds waited or 0.0 where the
    counter had the value already, start time in the call, the checking thread)."""
    calls: list[list[tuple[int, int, float, float, int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    start: float = 0.0

    def new_call(self) -> None:
        self.calls.append([])
        self.start = time.perf_counter()

    def add(self, address: int, value: int, waited: float, at: float) -> None:
        thread = threading.get_ident()
        with self.lock:
            if self.calls:
                self.calls[-1].append((address, value, waited, at - self.start, thread))


WAITS = Waits()


@ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)
def _wait_flag(address: int, value: int) -> None:
    counter = ctypes.c_int64.from_address(address)  # an aligned i64 load: atomic on x86-64
    at = time.perf_counter()
    if counter.value >= value:
        WAITS.add(address, value, 0.0, at)
        return
    while counter.value < value:
        time.sleep(0)  # the GIL and the core to the others
    WAITS.add(address, value, time.perf_counter() - at, at)


def install() -> None:
    """Bind npu.wait_flag's support function to the timing one, before npugrad binds its own
    (machine_code.init keeps a symbol the process already has)."""
    import llvmlite.binding as llvm

    from npugrad.lowering import machine_code

    if machine_code.init.cache_info().currsize:  # type: ignore[attr-defined]
        raise RuntimeError("flag_waits: npugrad's support functions are bound already; install() first")
    llvm.add_symbol(WAIT_SYMBOL, ctypes.cast(_wait_flag, ctypes.c_void_p).value)


@dataclass(frozen=True)
class FlagReport:
    flag: int  # its index in the launch's counters
    waiter: str
    per_call_ms: float
    blocked: float  # waits a call that found the counter short (the mean over the calls)
    checks: float  # waits a call in all
    first_ms: float  # the first wait that blocked, averaged over the calls
    others_median_ms: float  # the median of the other blocked waits
    steps: list[tuple[int, float, float]]  # the last call's (value, start ms, waited ms) of blocked waits


def _by_flag(call: list[tuple[int, int, float, float, int]]) -> list[tuple[int, int, float, float, int]]:
    """A call's checks with the flag's index for its address: the offset from the call's lowest
    flag address in 64-byte lines (one counter a line: tiling/flce.py's _FLAG_STRIDE)."""
    base = min((a for a, *_ in call), default=0)
    return [((address - base) // 64, *rest) for address, *rest in call]


def report(calls: list[list[tuple[int, int, float, float, int]]], blocks: int) -> list[FlagReport]:
    """Per flag, over the calls (_by_flag)."""
    per_flag: dict[int, list[list[tuple[int, float, float]]]] = {}
    for call in calls:
        if not call:
            continue
        seen: dict[int, list[tuple[int, float, float]]] = {}
        for flag, value, waited, at, _ in _by_flag(call):
            seen.setdefault(flag, []).append((value, at, waited))
        for flag, entries in seen.items():
            per_flag.setdefault(flag, []).append(entries)
    out = []
    n = len(calls)
    for flag in sorted(per_flag):
        runs = per_flag[flag]
        waiter = f"block {flag + 1} (on block {flag})" if flag + 1 < blocks else f"block 0 (on block {flag}: dW's ring)"
        blocked = [[(v, at, w) for v, at, w in run if w > 0] for run in runs]
        firsts = [b[0][2] for b in blocked if b]
        others = [w for b in blocked for _, _, w in b[1:]]
        out.append(FlagReport(
            flag, waiter,
            per_call_ms=sum(w for run in runs for *_, w in run) / n * 1e3,
            blocked=sum(len(b) for b in blocked) / n,
            checks=sum(len(run) for run in runs) / n,
            first_ms=statistics.fmean(firsts) * 1e3 if firsts else 0.0,
            others_median_ms=statistics.median(others) * 1e3 if others else 0.0,
            steps=[(v, at * 1e3, w * 1e3) for v, at, w in blocked[-1]] if blocked else [],
        ))
    return out


@dataclass(frozen=True)
class BlockReport:
    block: int
    waited_ms: float  # at the flags, a call (the mean over the calls)
    drain_ms: float  # from the end of its last check to the end of the call (the mean over the calls)


def block_report(calls: list[list[tuple[int, int, float, float, int]]], walls: list[float],
                 blocks: int) -> list[BlockReport]:
    """Per block: what it waited at the flags, and how long before the call's end it was done:
    the end of its last check, the wait that closes its last step (a ring's last block rounds
    the last tile after it: a few tenths of a millisecond). A thread is block b > 0 in a call
    where it read flag b − 1 at a count above 0, else block 0 (counts of 0, or the ring's flag
    P − 1); the pool may run a block on another thread in each call."""
    waited = [0.0] * blocks
    drain = [0.0] * blocks
    for call, wall in zip(calls, walls):
        if not call:
            continue
        threads: dict[int, list[tuple[int, int, float, float]]] = {}
        for flag, value, w, at, thread in _by_flag(call):
            threads.setdefault(thread, []).append((flag, value, w, at))
        for checks in threads.values():
            read = sorted({flag for flag, value, _, _ in checks if value > 0 and flag + 1 < blocks})
            block = read[0] + 1 if read else 0
            waited[block] += sum(w for *_, w, _ in checks)
            drain[block] += max(wall - max(at + w for *_, w, at in checks), 0.0)
    n = max(len(walls), 1)
    return [BlockReport(b, waited[b] / n * 1e3, drain[b] / n * 1e3) for b in range(blocks)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="bt=4096,h=4096,v=8192,dtype=bfloat16", help="FLCE sizes, k=v,... (bench.ops)")
    ap.add_argument("--calls", type=int, default=3, help="timed calls after the warm-up (default 3)")
    ap.add_argument("--steps", action="store_true", help="list the last call's blocked waits, one a line")
    args = ap.parse_args(argv)
    install()
    from bench.ops import flce_npugrad
    from npugrad.runtime import pool

    size = _size(args.size)
    run = flce_npugrad(**size, alloc=False)
    run()  # compile, touch
    WAITS.calls.clear()
    walls = []
    for _ in range(args.calls):
        WAITS.new_call()
        t = time.perf_counter()
        run()
        walls.append(time.perf_counter() - t)
    blocks = pool.threads()
    wall = statistics.median(walls) * 1e3
    print(f"flag_waits: FLCE {args.size} on {blocks} block(s), {args.calls} call(s): {wall:.1f} ms a call (median)")
    rows = report(WAITS.calls, blocks)
    if not rows:
        print("no flag waits (one block, or a kernel without a wavefront)")
        return
    print(f"{'flag':>4}  {'waiter':<32} {'waited/call':>12} {'of call':>8} {'blocked/checks':>15} "
          f"{'first':>9} {'median other':>13}")
    for r in rows:
        print(f"{r.flag:>4}  {r.waiter:<32} {r.per_call_ms:>9.1f} ms {r.per_call_ms / wall:>8.1%} "
              f"{r.blocked:>7g}/{r.checks:<7g} {r.first_ms:>6.2f} ms {r.others_median_ms:>10.2f} ms")
        if args.steps:
            for value, at, waited in r.steps:
                print(f"        value {value:>4}  at {at:8.1f} ms  waited {waited:6.2f} ms")
    print(f"\n{'block':>5}  {'waited/call':>12} {'done before the end':>20} {'idle':>8}")
    for b in block_report(WAITS.calls, walls, blocks):
        idle = b.waited_ms + b.drain_ms
        print(f"{b.block:>5}  {b.waited_ms:>9.1f} ms {b.drain_ms:>17.1f} ms {idle / wall:>8.1%}")


if __name__ == "__main__":
    main()
