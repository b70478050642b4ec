"""The compilers a user would pick instead of npugrad for the FLCE gradient, and the machine's
GEMM ceilings, for `npugrad bench` (bench/ops.py). Optional: `pip install -e ".[bench]"`.

Every compiler gets the same unfused program (logits Z = X·Wᵀ materialised, then P, G, dX, dW)
on the same inputs as the other contenders (bench/ops.py `_flce_inputs`, `_flce_stats`), compiled
for the exact shapes outside the measured calls, in its own child process (bench/common.py):

- ``xla``: ``jax.jit`` (XLA:CPU), ``XLA_FLAGS=--xla_cpu_multi_thread_eigen=true
  intra_op_parallelism_threads=N``; compiled ahead of time (``lower().compile()``) in the setup.
- ``iree``: the same JAX function exported as StableHLO, ``iree.compiler.compile_str`` with
  ``iree_flags(dtype)`` (llvm-cpu, host CPU, O3; data tiling + microkernels for float32, and for
  bfloat16 where the CPU has bf16 dot products), run on the ``local-task`` device with
  ``--task_topology_max_group_count=N``.
- ``torch.compile``: the same program in PyTorch, ``torch.compile`` (Inductor, default mode,
  ``dynamic=False``), ``torch.set_num_threads(N)``; compiled by one call at the full size in the
  setup (Inductor compiles on the first call).

N is the bench's ``--threads``; when N is below the CPUs available the process is also pinned to
N CPUs. A functional program has no ``out=``: the compilers allocate dX and dW on every call in
both tables, so their peak extra memory includes the outputs.

Numerics. float32: everything in float32. bfloat16 (X, W, dX, dW in bfloat16, the statistics and
g in float32), as spec §1.6 where the framework allows it:
- xla / iree: Z = X·Wᵀ accumulated and kept in float32 (``preferred_element_type=float32``),
  P and G in float32, G rounded to bfloat16, both GEMMs accumulate in float32 and round their
  result to bfloat16. XLA:CPU widens the bf16 GEMM operands to float32 and runs float32 GEMMs;
- torch.compile: PyTorch's natural bf16 path: Z = X·Wᵀ rounded to bfloat16 (aten.mm on bf16
  returns bf16), widened to float32 for P and G, G rounded to bfloat16, the GEMMs return bf16.
  Inductor leaves the three GEMMs to aten.mm (extern kernels) and fuses the rest into one loop.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import time

import numpy as np

CONTENDERS = ("xla", "iree", "torch.compile")
REQUIRES = {"xla": ("jax", "jaxlib"), "iree": ("jax", "iree.compiler", "iree.runtime"), "torch.compile": ("torch",)}
IREE_FLAGS = ("--iree-llvmcpu-target-cpu=host", "--iree-opt-level=O3")
# Data tiling + microkernels: ~3x on float32 GEMMs; on bfloat16 only where the CPU has bf16 dot
# products (IREE 3.13 on AVX2 packs bf16 into a generic path of ~1 GFLOP/s, 25x slower than without).
IREE_DATA_TILING = ("--iree-opt-data-tiling=true", "--iree-llvmcpu-enable-ukernels=all")


def iree_flags(dtype: str) -> list[str]:
    return [*IREE_FLAGS, *(IREE_DATA_TILING if dtype == "float32" or cpu_has_bf16_dot() else ())]


def cpu_has_bf16_dot() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and ("avx512_bf16" in line.split() or "amx_bf16" in line.split())
                       for line in f)
    except OSError:
        return False
TINY = {"bt": 4, "h": 8, "v": 8}


def missing(name: str) -> str | None:
    """Why the contender cannot run here (a one-line note), or None."""
    absent = [m for m in REQUIRES[name] if importlib.util.find_spec(m.split(".")[0]) is None
              or (("." in m) and _no_submodule(m))]
    if absent:
        return f"{name}: skipped, {', '.join(absent)} not installed (pip install -e \".[bench]\")"
    if name == "torch.compile" and shutil.which(os.environ.get("CXX", "g++")) is None:
        return f"torch.compile: skipped, Inductor needs a C++ compiler ({os.environ.get('CXX', 'g++')}) on PATH"
    return None


def _no_submodule(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ImportError:
        return True


def threads() -> int:
    return int(os.environ.get("NPUGRAD_THREADS") or os.cpu_count() or 1)


def _pin(n: int) -> None:
    """Keep a runtime whose thread count is not fully ours to set on n CPUs."""
    cpus = sorted(os.sched_getaffinity(0))
    if n < len(cpus):
        os.sched_setaffinity(0, cpus[:n])


def _inputs(bt, h, v, dtype):
    from bench.ops import _flce_inputs, _flce_stats

    g, x, w, t = _flce_inputs(bt, h, v, dtype)
    m, s = _flce_stats(x, w)
    return g, x, w, t.astype(np.int32), m, s


# ---- the program ---------------------------------------------------------------------------


def jax_program():
    import jax.numpy as jnp

    def flce(g, x, w, t, m, s):
        z = jnp.dot(x, w.T, preferred_element_type=jnp.float32)  # the logits, BT x V, materialised
        p = jnp.exp(z - m[:, None]) / s[:, None]
        onehot = jnp.arange(w.shape[0], dtype=t.dtype)[None, :] == t[:, None]
        grad_logits = (g[:, None] * jnp.where(onehot, p - 1.0, p)).astype(x.dtype)
        dx = jnp.dot(grad_logits, w, preferred_element_type=jnp.float32).astype(x.dtype)
        dw = jnp.dot(grad_logits.T, x, preferred_element_type=jnp.float32).astype(x.dtype)
        return dx, dw

    return flce


def torch_program(g, x, w, t, m, s):
    import torch

    z = torch.mm(x, w.T)  # the logits, BT x V, materialised (bf16 inputs: bf16 logits)
    p = torch.exp(z.float() - m[:, None]) / s[:, None]
    onehot = torch.arange(w.shape[0], dtype=t.dtype)[None, :] == t[:, None]
    grad_logits = (g[:, None] * torch.where(onehot, p - 1.0, p)).to(x.dtype)
    return grad_logits @ w, grad_logits.T @ x


def reference(g, x, w, t, m, s):
    """NumPy, float32, spec §1.6 rounding of G for bfloat16 inputs (for the correctness test)."""
    xf, wf = x.astype(np.float32), w.astype(np.float32)
    p = np.exp(xf @ wf.T - m[:, None]) / s[:, None]
    p[np.arange(len(t)), t] -= 1.0
    grad_logits = (g[:, None] * p).astype(x.dtype).astype(np.float32)
    return grad_logits @ wf, grad_logits.T @ xf


# ---- the contenders: setup(bt, h, v, dtype, alloc) -> a call, with .compile_s -----------------


def flce_xla(bt, h, v, dtype, alloc=True):
    n = threads()
    _pin(n)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_cpu_multi_thread_eigen=true intra_op_parallelism_threads={n}").strip()
    import jax

    def build(size):
        args = [jax.device_put(a) for a in _inputs(**size, dtype=dtype)]
        start = time.perf_counter()
        compiled = jax.jit(jax_program()).lower(*args).compile()
        return compiled, args, time.perf_counter() - start

    compiled, args, _ = build(TINY)
    jax.block_until_ready(compiled(*args))  # the runtime's one-time start-up
    compiled, args, compile_s = build({"bt": bt, "h": h, "v": v})

    def run():
        return jax.block_until_ready(compiled(*args))

    run.compile_s = compile_s
    return run


def flce_iree(bt, h, v, dtype, alloc=True):
    n = threads()
    _pin(n)
    import iree.compiler
    import iree.runtime as ireert
    import jax

    ireert.flags.parse_flags(f"--task_topology_max_group_count={n}")
    config = ireert.Config("local-task")

    def build(size):
        inputs = _inputs(**size, dtype=dtype)
        start = time.perf_counter()
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in inputs]
        stablehlo = jax.jit(jax_program()).lower(*shapes).as_text(dialect="stablehlo")
        vmfb = iree.compiler.compile_str(stablehlo, target_backends=["llvm-cpu"], input_type="stablehlo",
                                         extra_args=iree_flags(dtype))
        ctx = ireert.SystemContext(config=config)
        ctx.add_vm_module(ireert.VmModule.copy_buffer(ctx.instance, vmfb))
        function = ctx.modules["jit_flce"]["main"]
        compile_s = time.perf_counter() - start
        return function, [ireert.asdevicearray(config.device, a) for a in inputs], compile_s

    # No warm-up on tiny inputs (an IREE compile costs seconds even then): the runtime starts with
    # the device above, and the compile time includes the compiler's start-up.
    function, args, compile_s = build({"bt": bt, "h": h, "v": v})

    def run():
        return function(*args)  # synchronous: returns once the results are ready

    run.compile_s = compile_s
    return run


def flce_torch_compile(bt, h, v, dtype, alloc=True):
    import torch

    n = threads()
    torch.set_num_threads(n)
    tdtype = torch.bfloat16 if dtype == "bfloat16" else torch.float32

    def tensors(size):
        g, x, w, t, m, s = (np.ascontiguousarray(a) for a in _inputs(**size, dtype=dtype))
        # bf16 values widened to float32 and rounded back: exact
        x, w = (torch.from_numpy(a.astype(np.float32)).to(tdtype) for a in (x, w))
        g, t, m, s = (torch.from_numpy(a) for a in (g, t, m, s))
        return g, x, w, t, m, s

    compiled = torch.compile(torch_program, dynamic=False)
    args = tensors({"bt": bt, "h": h, "v": v})
    start = time.perf_counter()
    compiled(*args)  # Inductor's start-up, the compile for these shapes, one call
    first = time.perf_counter() - start

    def run():
        return compiled(*args)

    run.compile_s = first
    run.compile_includes_call = True  # the child subtracts one timed call
    return run


# ---- the machine's GEMM ceilings -----------------------------------------------------------


def sgemm_numpy(n: int):
    """float32 n³ with NumPy's BLAS: the SGEMM ceiling."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    c = np.ones((n, n), np.float32)
    return lambda: np.matmul(a, b, out=c)


STREAM_BYTES_PER_ELEMENT = 12  # a += b in float32: two reads and one write, in place (no write-allocate)


def stream_numpy(mib: int, count: int | None = None):
    """A reading of the machine's memory bandwidth, for the memory-bound rows as the SGEMM is for
    the GEMM-bound ones (a reference, not a bound: a kernel with more streams in flight, such as
    EMA-Adam's nine, can move more): `count` threads (default: the contender's, `threads()`) each add
    their share of b into a, in place, with NumPy (`a += b` on float32: two reads and a write an
    element, as the in-place ops' own traffic is counted; NumPy lets go of the GIL in the ufunc's
    loop, so the threads run at once). a and b are `mib` MiB each, far beyond the last cache
    level. The callable returns one reading in GB/s: every thread's bytes over the time from the
    first thread's start to the last one's end (threads started beforehand, held at a barrier,
    so that starting them is not timed)."""
    import threading

    count = count or threads()
    n = mib * 2**20 // 4
    a, b = np.ones(n, np.float32), np.ones(n, np.float32)
    bounds = [n * i // count for i in range(count + 1)]
    parts = [(a[lo:hi], b[lo:hi]) for lo, hi in zip(bounds, bounds[1:])]

    def reading() -> float:
        gate = threading.Barrier(count)
        spans = [(0.0, 0.0)] * count

        def part(i: int) -> None:
            x, y = parts[i]
            gate.wait()
            start = time.perf_counter()
            np.add(x, y, out=x)
            spans[i] = (start, time.perf_counter())

        workers = [threading.Thread(target=part, args=(i,)) for i in range(count)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        took = max(end for _, end in spans) - min(start for start, _ in spans)
        return STREAM_BYTES_PER_ELEMENT * n / took / 1e9

    reading.arrays = (a, b)
    return reading


def stream_ceiling(mib: int, tries: int = 5) -> dict:
    """The run's memory-bandwidth ceiling in a process of its own: the best of `tries` readings
    of stream_numpy (GB/s)."""
    reading = stream_numpy(mib)
    reading()  # the pages mapped
    return {"gbs": max(reading() for _ in range(tries)), "threads": threads()}


def instruction_peaks(threads: int) -> dict:
    """The machine's float32 FMA and bf16 dot-product (vdpbf16ps) and tile (AMX tdpbf16ps) peaks on
    `threads` threads (npugrad/tools/peak.py): {kind: [GFLOP/s or None, its text]}."""
    from npugrad.tools import peak

    return {kind: [(r := peak.measure(kind, threads)).gflops, r.text()] for kind in peak.KINDS}


def bf16_gemm_torch(n: int):
    """bfloat16 n³ with torch.mm (oneDNN's bf16 dot-product kernels where the CPU has them)."""
    import torch

    torch.set_num_threads(threads())
    a, b = torch.randn(n, n).bfloat16(), torch.randn(n, n).bfloat16()
    c = torch.ones(n, n).bfloat16()
    return lambda: torch.mm(a, b, out=c)


def bf16_gemm_widened(n: int):
    """bfloat16 n³ widened to float32 and multiplied by NumPy's SGEMM: what a CPU without bf16
    dot-product instructions can do with bf16 operands."""
    import ml_dtypes

    rng = np.random.default_rng(1)
    a = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((n, n), dtype=np.float32).astype(ml_dtypes.bfloat16)
    a32, b32, c = np.ones((n, n), np.float32), np.ones((n, n), np.float32), np.ones((n, n), np.float32)

    def run():
        a32[...] = a
        b32[...] = b
        np.matmul(a32, b32, out=c)

    return run


def torch_bf16_hardware() -> bool:
    """Whether PyTorch's bf16 GEMMs use the CPU's bf16 dot-product instructions (oneDNN)."""
    import torch

    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


# Where PyTorch's bf16 GEMMs are its fallback loop (~1 GFLOP/s), torch.mm bf16 is measured at
# this n (the 4096³ of the SGEMM ceiling would take minutes).
FALLBACK_GEMM_N = 1024


def fallback_prediction(flops: float, rate: float | None, limit: float | None) -> float | None:
    """The seconds a bfloat16 PyTorch program of `flops` GEMM FLOP would take at `rate` (GFLOP/s:
    torch.mm bf16 measured in PyTorch's fallback loop in the same run), if that is over `limit`
    seconds: the program is then not run, and its row shows this prediction (a lower bound: its
    other work is not counted). None (no rate, no limit, or under it): run it."""
    if not (limit and rate):
        return None
    predicted = flops / (rate * 1e9)
    return predicted if predicted > limit else None


def check(name: str, dtype: str, bt: int = 32, h: int = 16, v: int = 64) -> dict[str, float]:
    """The contender's dX and dW against `reference` at a small size: max |error| / max |reference|
    (a correctness smoke test; tests/test_bench.py runs it in a fresh process per contender)."""
    setup = {"xla": flce_xla, "iree": flce_iree, "torch.compile": flce_torch_compile}[name]
    outputs = setup(bt, h, v, dtype)()
    ref = reference(*_inputs(bt, h, v, dtype))
    errors = {}
    for label, out, want in zip(("dx", "dw"), outputs, ref):
        out = out.to_host() if hasattr(out, "to_host") else out
        if hasattr(out, "detach"):
            out = out.detach().float().numpy()
        got = np.asarray(out).astype(np.float32)
        assert got.shape == want.shape, (label, got.shape, want.shape)
        errors[label] = float(np.abs(got - want).max() / np.abs(want).max())
    return errors
