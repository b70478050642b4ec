"""The machine's arithmetic peak: what its vector FMA and bf16 dot-product instructions can do
when nothing else is in the way, measured, for benchmarks to state GEMM rates against.

    npugrad peak                      # both, and the micro-kernels, on every core of the host (or python -m npugrad.tools.peak)

A JIT-compiled loop (runtime/jit.py: the host CPU, O3) keeps `chains` independent accumulators
of one vector register each and applies the instruction to each of them once per iteration:
`llvm.fma` on float32 vectors (2 FLOP a lane), where the CPU has AVX512-BF16, `vdpbf16ps`
(two bf16 products added into each float32 lane: 4 FLOP a lane), and where it has AMX-BF16,
`tdpbf16ps` on tiles (16 x 16 x 32 products: 16384 FLOP; six accumulator tiles, the other two
tile registers its operands). Enough independent chains
hide the instruction's latency behind its throughput; their number and the vector width come
from the target description (the vector registers less four for the loop-invariant operands
and the loop), not from a constant tuned to one CPU. Every core runs the loop at once (threads
calling the machine code, which holds no GIL); the rate is all their FLOPs over the wall time,
the best of `repeats`.

The next lines are the compiler's own micro-kernels against those peaks: the MR x NR block
vectorize-contractions makes of a contraction (block_shape), run over a reduction whose operands
fit half the L1 (A's MR rows and B's packed panel), again and again, on every core at once; in
float32 against the FMA loop and, where the CPU has AVX512-BF16, on bfloat16 operands (pairs on
vdpbf16ps, float32 sums) against the vdpbf16ps loop. It is the ceiling the code generated for
the GEMMs reaches when no load waits on memory: what a kernel's rate short of it
(bench/loop_profile.py gives its reduction loops' share of the samples) costs in the memory
hierarchy, not in the instructions. C alternates between two tiles from one repeat to the next:
with one, LLVM kept the bfloat16 kernel's C in registers across the repeats, which spilled 22 of
them to the stack on every repeat (Zen 5, K = 174: 96-97 % of the vdpbf16ps loop, 98-99 % with
two tiles); no GEMM the compiler generates has a C that stays put.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from npugrad.dtypes import BFLOAT16
from npugrad.runtime.address import aligned
from npugrad.runtime.pool import MAX_THREADS
from npugrad.targets import get
from npugrad.targets.target import Target

KINDS = ("fma", "dot_bf16", "tile_bf16")
FEATURE = {"fma": "fma", "dot_bf16": "avx512bf16", "tile_bf16": "amx-bf16"}
FLOP_PER_LANE = {"fma": 2, "dot_bf16": 4}
NAME = {"fma": "float32 FMA", "dot_bf16": "bf16 dot product (vdpbf16ps)", "tile_bf16": "bf16 tile product (AMX tdpbf16ps)"}
# AMX: eight tile registers; a tdpbf16ps multiplies a 16 x 32 bf16 tile by a 16 x 16-pair one into 16
# x 16 float32 sums, 16 x 16 x 32 products (2 FLOP each). Its loop keeps two operand tiles and
# the other six as independent accumulators.
TILE_REGISTERS = 8
TILE_FLOP = 16 * 16 * 32 * 2
STEPS = 1 << 18  # a peak loop's iterations per call: the call's overhead is well under 1 % of it


@dataclass(frozen=True)
class Shape:
    """The loop's shape: float32 lanes per vector and independent accumulators."""

    lanes: int
    chains: int


def shape_for(cpu: Target, kind: str) -> Shape:
    """The loop's shape for `kind` on `cpu`: its vector width (512 bits at most for vdpbf16ps,
    whose widest form is 512-bit) and its vector registers less four."""
    if kind == "tile_bf16":
        return Shape(lanes=16, chains=TILE_REGISTERS - 2)  # lanes: a tile's float32 columns
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
    if kind == "tile_bf16":
        return _tile_loop_ir(shape.chains)
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
    return decl + "\n\n" + _peak_function("", phis, body, f"{add_text}\n  %r = extractelement {vf} {total}, i64 0", "%r")


def _peak_function(setup: str, phis: str, body: str, done: str, result: str) -> str:
    """`define float @peak(i64 %n)`: `setup` in its entry block, then `n` iterations of `body`
    with the loop-carried `phis`, then `done`, returning `result`."""
    return f"""define float @peak(i64 %n) {{
entry:
{setup}
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
{phis}
{body}
  %next = add i64 %i, 1
  %more = icmp ult i64 %next, %n
  br i1 %more, label %loop, label %done
done:
{done}
  ret float {result}
}}
"""


def _tile_loop_ir(chains: int) -> str:
    """`float @peak(i64 %n)` on AMX: `chains` float32 accumulator tiles from zero, each adding
    one tdpbf16ps of two loop-invariant tiles (every element 2^-7, so each sum grows by 32·2^-14
    per iteration, exact in float32 for any n a run takes) per iteration, carried in tile
    registers; returns the sum of their first elements."""
    amx = "x86_amx"
    tile = "i16 16, i16 64"
    phis = "\n".join(f"  %a{i} = phi {amx} [ %z{i}, %entry ], [ %b{i}, %loop ]" for i in range(chains))
    zeros = "\n".join(f"  %z{i} = call {amx} @llvm.x86.tilezero.internal({tile})" for i in range(chains))
    body = "\n".join(f"  %b{i} = call {amx} @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, {amx} %a{i}, "
                     f"{amx} %x, {amx} %y)" for i in range(chains))
    out = "\n".join(f"  call void @llvm.x86.tilestored64.internal({tile}, ptr %buf, i64 64, {amx} %b{i})\n"
                    f"  %f{i} = load float, ptr %buf\n"
                    f"  %s{i} = fadd float {'0.0' if i == 0 else f'%s{i - 1}'}, %f{i}" for i in range(chains))
    setup = (f"  %buf = alloca [256 x float], align 64\n"
             f"  %x = call {amx} @llvm.x86.tileloadd64.internal({tile}, ptr @operand, i64 64)\n"
             f"  %y = call {amx} @llvm.x86.tileloadd64.internal({tile}, ptr @operand, i64 64)\n{zeros}")
    return f"""@operand = private unnamed_addr constant [512 x i16] [{', '.join(['i16 15360'] * 512)}], align 64

declare {amx} @llvm.x86.tilezero.internal(i16, i16)
declare {amx} @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare {amx} @llvm.x86.tdpbf16ps.internal(i16, i16, i16, {amx}, {amx}, {amx})
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, {amx})

""" + _peak_function(setup, phis, body, out, f"%s{chains - 1}")


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
        chains = (f"{self.shape.chains} independent 16 x 16 accumulator tiles" if self.kind == "tile_bf16" else
                  f"{self.shape.chains} independent {32 * self.shape.lanes}-bit chains")
        return f"{what} = {self.gflops:.1f} GFLOP/s ({self.threads} thread(s), {chains})"


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
    call, flop_per_call = _peak_loop(kind, shape)
    n = _calibrated(call, seconds)
    best = max(_rate([call] * threads, n, flop_per_call * n * threads) for _ in range(repeats))
    return Peak(kind, shape, threads, best)


def _peak_loop(kind: str, shape: Shape) -> tuple[Callable[[], None], float]:
    """The peak loop of `kind` as a call of STEPS iterations, and the FLOPs of one call."""
    per_step = TILE_FLOP if kind == "tile_bf16" else FLOP_PER_LANE[kind] * shape.lanes
    return functools.partial(compiled(kind, shape), STEPS), float(per_step * shape.chains * STEPS)


# The micro-kernel's contraction: C (MR x N) += A (MR x K) · B (K x N), `repeats` times in a loop
# around it, so that B's panel is packed once, before that loop (vectorize_contractions.invariant_loop);
# C is tile r % 2 of two (the module docstring). A and B float32, or bfloat16 widened in the body
# (what vectorize-contractions runs on vdpbf16ps pairs where the target has them).
_MICROKERNEL = """
func.func @microkernel(%a: memref<{mr}x{k}x{t}>, %b: memref<{k}x{n}x{t}>, %c2: memref<2x{mr}x{n}xf32>) {{
  %lo = arith.constant 0 : index
  %hi = arith.constant {repeats} : index
  %one = arith.constant 1 : index
  %two = arith.constant 2 : index
  scf.for %r = %lo to %hi step %one {{
    %tile = arith.remui %r, %two : index
    %c = memref.subview %c2[%tile, 0, 0] [1, {mr}, {n}] [1, 1, 1]
        : memref<2x{mr}x{n}xf32> to memref<{mr}x{n}xf32, strided<[{n}, 1], offset: ?>>
    linalg.generic {{indexing_maps = [affine_map<(i, k, j) -> (i, k)>, affine_map<(i, k, j) -> (k, j)>,
                                     affine_map<(i, k, j) -> (i, j)>],
                     iterator_types = ["parallel", "reduction", "parallel"]}}
        ins(%a, %b : memref<{mr}x{k}x{t}>, memref<{k}x{n}x{t}>)
        outs(%c : memref<{mr}x{n}xf32, strided<[{n}, 1], offset: ?>>) {{
    ^bb0(%x: {t}, %y: {t}, %z: f32):
{widen}      %p = arith.mulf {x}, {y} : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    }}
  }}
  func.return
}}
"""
_WIDEN = """      %xw = arith.extf %x : bf16 to f32
      %yw = arith.extf %y : bf16 to f32
"""
_DTYPES = {"float32": ("f32", 4, "fma"), "bfloat16": ("bf16", 2, "dot_bf16")}  # MLIR type, bytes, peak loop


def microkernel_text(shape: "MicroKernel", repeats: int) -> str:
    """The micro-kernel's function (`_MICROKERNEL`) for `shape`, `repeats` times."""
    t = _DTYPES[shape.dtype][0]
    wide = t == "bf16"
    return _MICROKERNEL.format(mr=shape.mr, n=shape.n, k=shape.k, repeats=repeats, t=t, widen=_WIDEN if wide else "",
                               x="%xw" if wide else "%x", y="%yw" if wide else "%y")


@dataclass(frozen=True)
class MicroKernel:
    """The micro-kernel's block (MR rows x N float32 columns), its reduction length K and the
    operands' element type (float32, or bfloat16 on vdpbf16ps)."""

    mr: int
    n: int
    k: int
    dtype: str = "float32"

    @property
    def peak_kind(self) -> str:
        """The peak loop (KINDS) of the instruction its reduction runs on."""
        return _DTYPES[self.dtype][2]

    def text(self, gflops: float, threads: int, peak: float) -> str:
        loop = "FMA" if self.peak_kind == "fma" else "vdpbf16ps"
        return (f"{self.dtype} micro-kernel (vectorize-contractions, {self.mr} x {self.n} block, K = {self.k}, "
                f"operands in L1) = {gflops:.1f} GFLOP/s ({threads} thread(s)): {100 * gflops / peak:.0f}% of the "
                f"{loop} loop's {peak:.1f}, timed in turn with it")


def microkernel_shape(cpu: Target, dtype: str = "float32") -> MicroKernel:
    """The block vectorize-contractions makes on `cpu` and the longest even K whose A rows and
    packed B panel of `dtype` elements take half its smallest local level (the L1 on a CPU)."""
    from npugrad.passes.vectorize_contractions import block_shape, panel_width

    if dtype not in _DTYPES:
        raise ValueError(f"peak: unknown micro-kernel dtype {dtype!r} (known: {', '.join(_DTYPES)})")
    mr, n = block_shape(cpu)[0], panel_width(cpu)
    smallest = min(lv.capacity for lv in cpu.local_levels())
    size = _DTYPES[dtype][1]
    return MicroKernel(mr, n, max(2, smallest // 2 // (size * (mr + n)) // 2 * 2), dtype)


def microkernel(shape: MicroKernel, repeats: int, cpu: str = "host"):
    """The micro-kernel compiled by the pipeline (untiled, vectorized for `cpu`): a Kernel of
    (a, b, c2) that adds A·B into C = c2[r % 2] on repeat r, `repeats` times."""
    from npugrad.compiler import Pipeline, make_context, parse
    from npugrad.runtime.executable import Executable, block_kernels, signatures

    ctx = make_context()
    module = parse(microkernel_text(shape, repeats), "microkernel.mlir", ctx)
    sigs, blocks = signatures(module), block_kernels(module)
    llvm_ir = Pipeline(fuse=False, distribute=False, cpu=cpu).lower(module, "llvm-ir", ctx)
    return Executable(llvm_ir, sigs, blocks)["microkernel"]


def _own_pages(shape: tuple[int, ...], dtype=np.float32, page: int = 4096) -> np.ndarray:
    """A zeroed C-contiguous array starting a page, a page of its own buffer after it."""
    count = int(np.prod(shape))
    item = np.dtype(dtype).itemsize
    return aligned((count + page // item,), dtype, page, zeroed=True)[:count].reshape(shape)


def _calibrated(fn: Callable[[], None], seconds: float) -> int:
    """How many calls of `fn` take about `seconds` on one thread."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        took = time.perf_counter() - start
        if took > 0.02 or n >= 1 << 20:
            return max(1, int(n * seconds / took))
        n *= 4


def _rate(fns: Sequence[Callable[[], None]], n: int, flop: float) -> float:
    """GFLOP/s of every `fns` called `n` times, each on a thread of its own, all at once."""
    def work(fn: Callable[[], None]) -> None:
        for _ in range(n):
            fn()

    workers = [threading.Thread(target=work, args=(fn,)) for fn in fns]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return flop / (time.perf_counter() - start) / 1e9


def measure_microkernel(threads: int = 0, seconds: float = 0.25, repeats: int = 5, cpu: str = "host",
                        dtype: str = "float32") -> tuple[MicroKernel, int, float, float]:
    """(shape, threads, micro-kernel GFLOP/s, peak GFLOP/s): the micro-kernel on `dtype` operands
    on `threads` threads (0: the target's cores), each on arrays of its own, and the peak loop of
    its instruction (float32: the FMA's; bfloat16: vdpbf16ps's), taking turns `repeats` times
    (runs of about `seconds`), the best of each: a machine whose speed drifts scales both alike.
    bfloat16 needs a CPU with AVX512-BF16 (a ValueError otherwise: the widened fallback is
    float32's micro-kernel)."""
    from npugrad.passes.vectorize_contractions import dot_bf16

    target = get(cpu)
    threads = threads or target.cores
    shape = microkernel_shape(target, dtype)
    if shape.peak_kind == "dot_bf16" and not dot_bf16(target):
        raise ValueError(f"peak: the {dtype} micro-kernel runs on vdpbf16ps, which the CPU lacks "
                         f"({FEATURE['dot_bf16']})")
    calls = 1 << 10  # the reduction's repeats in one call: about a millisecond at tens of GFLOP/s
    kernel = microkernel(shape, calls, cpu)
    operand = np.float32 if dtype == "float32" else BFLOAT16
    rng = np.random.default_rng(0)
    bound = []
    for _ in range(threads):
        # Each thread's arrays on pages of their own: C's stores share no cache line with another
        # thread's operands. Values that keep C finite over any run: |A·B| per call well below 1.
        a, b = (_own_pages(s, operand) for s in ((shape.mr, shape.k), (shape.k, shape.n)))
        c = _own_pages((2, shape.mr, shape.n))
        a[...] = rng.uniform(-1e-3, 1e-3, a.shape).astype(operand)
        b[...] = rng.uniform(-1e-3, 1e-3, b.shape).astype(operand)
        bound.append(kernel.bind(a, b, c))
    loop, loop_flop_per_call = _peak_loop(shape.peak_kind, shape_for(target, shape.peak_kind))
    loop_fns = [loop] * threads
    n_kernel, n_loop = _calibrated(bound[0], seconds), _calibrated(loop, seconds)
    kernel_flop = 2.0 * shape.mr * shape.n * shape.k * calls * n_kernel * threads
    loop_flop = loop_flop_per_call * n_loop * threads
    best_kernel = best_loop = 0.0
    for _ in range(repeats):
        best_kernel = max(best_kernel, _rate(bound, n_kernel, kernel_flop))
        best_loop = max(best_loop, _rate(loop_fns, n_loop, loop_flop))
    return shape, threads, best_kernel, best_loop


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--threads", type=int, default=0, help="threads (default: the host's cores)")
    parser.add_argument("--seconds", type=float, default=0.25, help="length of one timed run (default 0.25)")


def run(args: argparse.Namespace) -> None:
    if not 0 <= args.threads <= MAX_THREADS or not 0 < args.seconds < math.inf:
        raise SystemExit(f"npugrad peak: --threads must be from 0 to {MAX_THREADS} and --seconds a finite number > 0")
    for kind in KINDS:
        print(measure(kind, args.threads, args.seconds).text())
    for dtype in _DTYPES:
        try:
            shape, threads, gflops, peak = measure_microkernel(args.threads, args.seconds, dtype=dtype)
        except ValueError as lacking:  # bfloat16 on a CPU without vdpbf16ps
            print(f"{dtype} micro-kernel: not measured: {str(lacking).removeprefix('peak: ')}")
            continue
        print(shape.text(gflops, threads, peak))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m npugrad.tools.peak", description=__doc__.splitlines()[0])
    add_arguments(parser)
    run(parser.parse_args(argv))


if __name__ == "__main__":
    main()
