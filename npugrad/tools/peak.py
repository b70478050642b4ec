"""The machine's arithmetic peak: what its vector FMA and bf16 dot-product instructions can do
when nothing else is in the way, measured, for benchmarks to state GEMM rates against.

    npugrad peak                      # both, on every core of the host (or python -m npugrad.tools.peak)

A JIT-compiled loop (runtime/jit.py: the host CPU, O3) keeps `chains` independent accumulators
of one vector register each and applies the instruction to each of them once per iteration:
`llvm.fma` on float32 vectors (2 FLOP a lane), and, where the CPU has AVX512-BF16, `vdpbf16ps`
(two bf16 products added into each float32 lane: 4 FLOP a lane). Enough independent chains
hide the instruction's latency behind its throughput; their number and the vector width come
from the target description (the vector registers less four for the loop-invariant operands
and the loop), not from a constant tuned to one CPU. Every core runs the loop at once (threads
calling the machine code, which holds no GIL); the rate is all their FLOPs over the wall time,
the best of `repeats`.
"""

from __future__ import annotations

import argparse
import ctypes
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from npugrad.targets import get
from npugrad.targets.target import Target

KINDS = ("fma", "dot_bf16")
FEATURE = {"fma": "fma", "dot_bf16": "avx512bf16"}
FLOP_PER_LANE = {"fma": 2, "dot_bf16": 4}
NAME = {"fma": "float32 FMA", "dot_bf16": "bf16 dot product (vdpbf16ps)"}


@dataclass(frozen=True)
class Shape:
    """The loop's shape: float32 lanes per vector and independent accumulators."""

    lanes: int
    chains: int


def shape_for(cpu: Target, kind: str) -> Shape:
    """The loop's shape for `kind` on `cpu`: its vector width (512 bits at most for vdpbf16ps,
    whose widest form is 512-bit) and its vector registers less four."""
    bits = cpu.vector_bits if kind == "fma" else min(cpu.vector_bits, 512)
    if kind == "dot_bf16" and bits < 128:
        raise ValueError(f"peak: vdpbf16ps needs 128-bit vectors at least, the target has {cpu.vector_bits}")
    registers = cpu.vector_registers or 16
    return Shape(lanes=bits // 32, chains=max(1, registers - 4))


def loop_ir(kind: str, shape: Shape) -> str:
    """LLVM IR of `float @peak(i64 %n)`: `n` iterations of `shape.chains` independent `kind`
    operations on `shape.lanes`-lane accumulators; returns lane 0 of their sum (so none is
    dead). The operands are loop-invariant constants close to one (fma: acc·x + y, which
    converges; dot: acc + Σ x·y with small products, which stays finite for any n a run takes)."""
    if kind not in KINDS:
        raise ValueError(f"peak: unknown kind {kind!r} (known: {', '.join(KINDS)})")
    lanes, chains = shape.lanes, shape.chains
    vf = f"<{lanes} x float>"
    if kind == "fma":
        decl = f"declare {vf} @llvm.fma.v{lanes}f32({vf}, {vf}, {vf})"
        x = f"{vf} splat (float 0x3FEFFFD600000000)"  # 0.99998 (float32)
        y = f"{vf} splat (float 0x3F1A36E2E0000000)"  # 1e-4 (float32)

        def step(acc: str) -> str:
            return f"call {vf} @llvm.fma.v{lanes}f32({vf} {acc}, {x}, {y})"
    else:
        vb = f"<{2 * lanes} x bfloat>"
        name = f"@llvm.x86.avx512bf16.dpbf16ps.{32 * lanes}"
        decl = f"declare {vf} {name}({vf}, {vb}, {vb})"
        x = f"{vb} splat (bfloat 0xR3C00)"  # 2^-7, both factors

        def step(acc: str) -> str:
            return f"call {vf} {name}({vf} {acc}, {x}, {x})"

    init = "splat (float 1.0)"
    phis = "\n".join(f"  %a{i} = phi {vf} [ {init}, %entry ], [ %b{i}, %loop ]" for i in range(chains))
    body = "\n".join(f"  %b{i} = {step(f'%a{i}')}" for i in range(chains))
    # %s_i = %s_(i-1) + %b_i, from %s_0 = %b_0
    add_text = "\n".join(f"  %s{i} = fadd {vf} {'%b0' if i == 1 else f'%s{i - 1}'}, %b{i}" for i in range(1, chains))
    total = f"%s{chains - 1}" if chains > 1 else "%b0"
    return f"""{decl}

define float @peak(i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
{phis}
{body}
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
{add_text}
  %r = extractelement {vf} {total}, i64 0
  ret float %r
}}
"""


@dataclass(frozen=True)
class Peak:
    kind: str
    shape: Shape
    threads: int
    gflops: float | None  # None: the CPU lacks the instruction
    note: str = ""

    def text(self) -> str:
        what = NAME[self.kind]
        if self.gflops is None:
            return f"{what}: {self.note}"
        return (f"{what} = {self.gflops:.1f} GFLOP/s ({self.threads} thread(s), {self.shape.chains} independent "
                f"{32 * self.shape.lanes}-bit chains)")


def compiled(kind: str, shape: Shape):
    """The loop, compiled for the host: a ctypes function (n) -> float."""
    from npugrad.runtime.jit import JitModule

    module = JitModule(loop_ir(kind, shape))
    fn = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64)(module.address("peak"))
    fn.module = module  # the machine code lives as long as the function
    return fn


def measure(kind: str, threads: int = 0, seconds: float = 0.25, repeats: int = 3, cpu: str = "host") -> Peak:
    """`kind`'s peak rate on `threads` threads (0: the target's cores), the best of `repeats`
    runs of about `seconds` each."""
    target = get(cpu)
    threads = threads or target.cores
    shape = shape_for(target, kind)
    if not target.has_feature(FEATURE[kind]):
        return Peak(kind, shape, threads, None, f"not measured: the CPU lacks {FEATURE[kind]}")
    fn = compiled(kind, shape)
    flop_per_iteration = FLOP_PER_LANE[kind] * shape.lanes * shape.chains
    # Iterations for about `seconds` on one thread, from a short calibration run.
    n = 1 << 16
    while True:
        start = time.perf_counter()
        fn(n)
        took = time.perf_counter() - start
        if took > 0.02 or n >= 1 << 40:
            break
        n *= 4
    n = max(1, int(n * seconds / took))
    best = 0.0
    for _ in range(repeats):
        workers = [threading.Thread(target=fn, args=(n,)) for _ in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, threads * n * flop_per_iteration / (time.perf_counter() - start) / 1e9)
    return Peak(kind, shape, threads, best)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=0, help="threads (default: the host's cores)")
    parser.add_argument("--seconds", type=float, default=0.25, help="length of one timed run (default 0.25)")


def run(args: argparse.Namespace) -> None:
    if args.threads < 0 or not args.seconds > 0:
        raise SystemExit("npugrad peak: --threads must be >= 0 and --seconds > 0")
    for kind in KINDS:
        print(measure(kind, args.threads, args.seconds).text())


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m npugrad.tools.peak", description=__doc__.splitlines()[0])
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
