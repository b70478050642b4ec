"""Where a kernel's time goes, loop by loop: an op's call sampled by `perf` (cpu-clock, so it
works on VMs without hardware counters), the JIT's samples mapped back to the machine code
through the disk cache's copy of it (the very object the JIT loaded), and each sample charged
to the innermost loop that holds it (a backward branch and its target bound a loop).

    .venv/bin/python bench/loop_profile.py                          # FLCE float32 2048 x 2048 x 32000
    .venv/bin/python bench/loop_profile.py --op flce --size bt=1024,h=1024,v=8192,dtype=bfloat16
    .venv/bin/python bench/loop_profile.py --op ema_adam --size n=16777216 --top 10
    .venv/bin/python bench/loop_profile.py --op bench.loss:npugrad_forward --size bt=4096,h=4096,v=32000,dtype=float32
    .venv/bin/python bench/loop_profile.py --show 4      # and the 4 hottest loops' code, samples per instruction

It prints one row per loop: its share of the kernel's samples, its address range in the object,
its instructions, multiply-adds (vfmadd*, vdpbf16ps) and operands addressed off %rsp, and off
%rbp where it holds a frame (spills and reloads; one in a micro-kernel's reduction loop is worth
a look), and what it is: the label the passes gave its ops (the kernel is compiled with line
tables, NPUGRAD_LINE_TABLES=1: `logits.k` is the reduction loop of the logits GEMM's
micro-kernel, `weight_grad.pack_b` the pack of its B panel, `softmax_grad` the tile's G; `-`:
code no pass labelled). Compare two variants by their rows, not by their times: the shares are measured within one run, which a
shared machine's slow spells scale alike. Needs `perf`, `nm` and `objdump` (binutils); the op
runs `--calls` times after a warm-up call, on the thread count NPUGRAD_THREADS gives.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

_INSTRUCTION = re.compile(r"^\s+([0-9a-f]+):\s+(.*)$")
_BRANCH = re.compile(r"^j\w+\s+([0-9a-f]+)\b")
_LABEL_BRANCH = re.compile(r"^(j\w+\s+)(\.L\w+)$")


_OFF_RSP = re.compile(r"\(%rsp[,)]")
_OFF_RBP = re.compile(r"\(%rbp[,)]")
_FRAME_SETUP = re.compile(r"^movq?\s+%rsp,\s*%rbp$")


@dataclass(frozen=True)
class Loop:
    start: int  # offsets in the object's code section
    end: int  # the backward branch
    instructions: tuple[str, ...]
    addresses: tuple[int, ...]  # each instruction's offset
    frame_pointer: bool = True  # the code keeps its frame in %rbp (else %rbp is one more register)

    @property
    def fmas(self) -> int:
        """Multiply-adds: FMAs (vfmadd*) and bfloat16 pair dot products (vdpbf16ps)."""
        return sum(i.startswith(("vfmadd", "vdpbf16ps")) for i in self.instructions)

    @property
    def stack(self) -> int:
        """Memory operands based on %rsp, or on %rbp where it holds the frame: spills and
        reloads. (Code built without a frame pointer uses %rbp as a general register: an
        operand such as (%rax,%rbp,4) is A's row, not the stack.)"""
        return sum(bool(_OFF_RSP.search(i) or (self.frame_pointer and _OFF_RBP.search(i)))
                   for i in self.instructions)


def instructions(disassembly: str) -> list[tuple[int, str]]:
    """(offset, instruction) for every instruction `objdump -d --no-show-raw-insn` printed."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in map(_INSTRUCTION.match, disassembly.splitlines()) if m]


def assembly_instructions(asm: str) -> list[tuple[int, str]]:
    """(index, instruction) for assembly text (the asm stage's), as `instructions` gives them
    for a disassembly: a branch to a local label names the index of the label's instruction."""
    labels: dict[str, int] = {}
    body: list[str] = []
    for line in asm.splitlines():
        if m := re.match(r"^(\.L\w+):", line):
            labels[m.group(1)] = len(body)
        elif line.startswith("\t") and (text := line.strip()) and not text.startswith((".", "#")):
            body.append(text)

    def resolved(text: str) -> str:
        m = _LABEL_BRANCH.match(text)
        return f"{m.group(1)}{labels[m.group(2)]:x}" if m and m.group(2) in labels else text

    return [(i, resolved(text)) for i, text in enumerate(body)]


_LINE_ROW = re.compile(r"^(\S+)\s+(?:\d+|-)\s+(0x[0-9a-f]+|\d+)(?:\s|$)")


def line_rows(decoded: str) -> list[tuple[int, str]]:
    """(address, file) for every row of `objdump --dwarf=decodedline`, by address: the file of a
    row is the label of the code from its address on (Pipeline.line_tables)."""
    rows = [(int(m.group(2), 0), m.group(1)) for m in map(_LINE_ROW.match, decoded.splitlines()) if m]
    return sorted(rows)


def label(lp: Loop, code: list[tuple[int, str]], rows: list[tuple[int, str]], found: list[Loop] = ()) -> str:
    """The label most of the loop's own instructions have (a labelled one over `-`), or `-`: its
    own, not those of the loops in `found` nested in it, which the samples there are charged to."""
    if not rows:
        return "-"
    inner = [(o.start, o.end) for o in found if o is not lp and lp.start <= o.start and o.end <= lp.end]
    starts = [a for a, _ in rows]
    counted = collections.Counter(rows[i][1] for a, _ in code if lp.start <= a <= lp.end
                                  and not any(lo <= a <= hi for lo, hi in inner)
                                  if (i := bisect.bisect_right(starts, a) - 1) >= 0)
    named = [(n, f) for f, n in counted.items() if f != "-"]
    return max(named)[1] if named else "-"


def loops(code: list[tuple[int, str]]) -> list[Loop]:
    """A loop per backward branch: from its target to the branch."""
    found = []
    frame = any(_FRAME_SETUP.match(t) for _, t in code)
    for at, text in code:
        m = _BRANCH.match(text)
        if m and int(m.group(1), 16) <= at:
            start = int(m.group(1), 16)
            body = [(a, t) for a, t in code if start <= a <= at]
            found.append(Loop(start, at, tuple(t for _, t in body), tuple(a for a, _ in body), frame))
    return found


def charge(offsets: list[int], found: list[Loop], size: int) -> tuple[collections.Counter, int]:
    """Samples per innermost loop holding them (None: in no loop), and how many fell in the code."""
    by_start = sorted(found, key=lambda lp: lp.end - lp.start)  # innermost first
    counts: collections.Counter = collections.Counter()
    inside = 0
    for off in offsets:
        if not 0 <= off < size:
            continue
        inside += 1
        counts[next((lp for lp in by_start if lp.start <= off <= lp.end), None)] += 1
    return counts, inside


def report(counts: collections.Counter, inside: int, top: int, show: int = 0, labels: dict | None = None,
           hits: collections.Counter | None = None) -> str:
    """A row per loop, the `top` hottest, with its label (`labels`: loop -> label); the
    instructions of the `show` hottest after the table, each after its own samples and offset
    where `hits` (offset -> samples) is given. A sample lands on the instruction the CPU was
    at when the timer fired, often the one after a stall (skid): read a column of counts as
    where a loop waits, to within an instruction or two, e.g. the loads of C in an epilogue."""
    labels = labels or {}
    lines = [f"{'share':>7} {'samples':>8}  {'loop (object offsets)':<22} {'instrs':>6} {'FMAs':>5} {'stack':>5}  label"]
    hottest = counts.most_common(top)
    for lp, n in hottest:
        where = "outside loops" if lp is None else f"{lp.start:#x}-{lp.end:#x}"
        detail = "" if lp is None else f"{len(lp.instructions):>6} {lp.fmas:>5} {lp.stack:>5}  {labels.get(lp, '-')}"
        lines.append(f"{100 * n / max(inside, 1):6.1f}% {n:>8}  {where:<22} {detail}".rstrip())
    for lp in [lp for lp, _ in hottest if lp is not None][:show]:
        lines.append(f"\nloop {lp.start:#x}-{lp.end:#x} ({labels.get(lp, '-')}):")
        if hits is None:
            lines.extend(f"    {i}" for i in lp.instructions)
        else:
            lines.extend(f"    {hits.get(a, 0):>6}  {a:>6x}  {i}" for a, i in zip(lp.addresses, lp.instructions))
    return "\n".join(lines)


# -- the sampled run --------------------------------------------------------------------------------------


def child(op: str, size: dict, calls: int) -> dict:
    """Run `op` (a bench.ops contender, or module:function of a bench script, called with the
    sizes) `calls` times after a warm-up; [name, JIT address, disk cache key] of every kernel
    (several specialisations of one op share a name: each has its own object)."""
    import importlib

    from bench import ops as bench_ops
    from npugrad.runtime import specialize

    if ":" in op:
        module, name = op.split(":")
        fn = getattr(importlib.import_module(module), name)(**size)
    else:
        fn = getattr(bench_ops, f"{op}_npugrad").__wrapped__(alloc=False, **size)
    fn()
    for _ in range(calls):
        fn()
    # Every kernel compiled, under the default pipeline or another (the chunked loss schedule's
    # parts compile under a pipeline of their own: ops/loss.py, _side_by_side).
    return [[k.name, k._jit.address(k.name), k._jit.cache_key] for k in specialize._CACHE.values()]


def _size(text: str) -> dict:
    out = {}
    for part in filter(None, text.split(",")):
        key, value = part.split("=")
        out[key] = value if not value.lstrip("-").isdigit() else int(value)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--op", default="flce", help="a bench.ops op (flce, embedding, nll, bce, ema_adam) or a "
                    "bench script's setup, module:function (bench.loss:npugrad_forward)")
    ap.add_argument("--size", default="bt=2048,h=2048,v=32000,dtype=float32", help="the op's sizes, k=v,...")
    ap.add_argument("--calls", type=int, default=1, help="sampled calls after the warm-up (default 1)")
    ap.add_argument("--top", type=int, default=15, help="loops to print (default 15)")
    ap.add_argument("--show", type=int, default=0, help="print the instructions of this many of the hottest loops, "
                    "each after its own samples and its offset")
    args = ap.parse_args(argv)
    for tool in ("perf", "nm", "objdump"):
        if shutil.which(tool) is None:
            sys.exit(f"loop_profile: needs `{tool}` on PATH")
    from npugrad.runtime import object_cache

    with tempfile.TemporaryDirectory(prefix="npugrad-profile-") as tmp:
        cache = os.path.join(tmp, "cache")
        data = os.path.join(tmp, "perf.data")
        script = (f"import json, sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r}); "
                "from bench.loop_profile import child; "
                f"print('ADDRESSES' + json.dumps(child({args.op!r}, {_size(args.size)!r}, {args.calls:d})))")
        run = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-o", data, sys.executable, "-c", script],
                             capture_output=True, text=True, check=False,
                             env={**os.environ, "NPUGRAD_CACHE_DIR": cache, "NPUGRAD_LINE_TABLES": "1"})
        line = next((x for x in run.stdout.splitlines() if x.startswith("ADDRESSES")), None)
        if run.returncode or line is None:
            sys.exit(f"loop_profile: the sampled run failed:\n{run.stderr[-2000:]}")
        addresses = json.loads(line[len("ADDRESSES"):])
        ips = [int(x, 16) for x in subprocess.run(["perf", "script", "-i", data, "-F", "ip"], capture_output=True,
                                                   text=True, check=True).stdout.split()]
        for entry in sorted(os.listdir(cache)):
            if not entry.endswith(".o"):  # the LLVM IR cache's entries share the directory
                continue
            with open(os.path.join(cache, entry), "rb") as f:
                blob = f.read()
            obj = os.path.join(tmp, "kernel.o")
            with open(obj, "wb") as f:
                f.write(blob[len(object_cache.FORMAT) + 32:])  # the entry's header: magic, SHA-256
            symbols = subprocess.run(["nm", obj], capture_output=True, text=True, check=True).stdout
            code = instructions(subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True,
                                                text=True, check=True).stdout)
            rows = line_rows(subprocess.run(["objdump", "--dwarf=decodedline", obj], capture_output=True,
                                            text=True, check=True).stdout)
            # One report per kernel: the child lists a kernel once per call of it it saw.
            for name, address, key in dict.fromkeys(map(tuple, addresses)):
                if f"{key}.o" != entry:  # another object's kernel (maybe of the same name)
                    continue
                m = re.search(rf"^([0-9a-f]+) T {re.escape(name)}$", symbols, re.MULTILINE)
                if m is None or not code:
                    continue
                base = address - int(m.group(1), 16)  # where the object's code section was loaded
                found = loops(code)
                offsets = [ip - base for ip in ips]
                counts, inside = charge(offsets, found, code[-1][0] + 16)
                print(f"{name} (object {key[:12]}): {inside} of {len(ips)} samples in its code "
                      f"({args.op} {args.size}, {args.calls} call(s))")
                print(report(counts, inside, args.top, args.show, {lp: label(lp, code, rows, found) for lp in found},
                             collections.Counter(offsets)))

if __name__ == "__main__":
    main()
