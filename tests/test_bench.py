"""`npugrad bench --quick`: the tables' shape (not the numbers), the kernel cache on repeated calls,
and the optional compilers (the `[bench]` extra) against NumPy at a small size."""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import common
from bench import contenders as compilers
from bench import loss as bench_loss
from bench import ops as bench_ops
from bench.common import Result, combine, paired_costs
from npugrad.runtime import specialize

HAS_TORCH = importlib.util.find_spec("torch") is not None
EXTRA = [c for c in compilers.CONTENDERS if compilers.missing(c) is None]


def _tables(stdout: str) -> list[list[str]]:
    """The blocks of lines that start with a header naming the columns."""
    blocks = [b.splitlines() for b in stdout.split("\n\n")]
    return [b for b in blocks if any(line.startswith(("case ", "op ")) for line in b)]


def _quick_bench(*options: str) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, "-m", "npugrad.tools.main", "bench", "--quick", "--repeats", "1", *options],
        check=False, capture_output=True, text=True, timeout=900, cwd=ROOT,
        env={**os.environ, "NPUGRAD_PROGRESS": "1"},  # progress on stderr, though it is no terminal
    )
    assert proc.returncode == 0, proc.stderr
    return proc


def test_quick_bench_prints_every_op_with_ratio_columns():
    proc = _quick_bench("--rounds", "1")
    assert "median of 1 timed call(s)" in proc.stdout and "pooled over 1 round(s)" in proc.stdout
    assert "SGEMM ceiling: NumPy float32 matmul 512^3 = " in proc.stdout and "bf16 GEMM peak = " in proc.stdout
    assert "Memory bandwidth: NumPy in-place float32 add a += b over 2 x 16 MiB" in proc.stdout
    for c in compilers.CONTENDERS:  # absent: a one-line note, never an error
        assert (f"{c}: skipped," in proc.stdout) == (c not in EXTRA)
    tables = _tables(proc.stdout)
    # The FLCE's contenders in one process: after the preallocated tables npugrad and PyTorch
    # eager; after the allocated ones every contender that allocates, the compilers among them.
    flce_labels = [c.label for c in bench_ops.cases(True) if c.op == "flce"]
    for at, kind, who in ((2, "preallocated", ["torch"] if HAS_TORCH else []),
                          (4, "allocated", [*(["torch"] if HAS_TORCH else []), *EXTRA])):
        if not who:
            assert f"Paired FLCE ({kind})" not in proc.stdout
            continue
        paired_flce = tables.pop(at)
        assert paired_flce[0].startswith(f"Paired FLCE ({kind}): npugrad"), paired_flce[0]
        assert " in one process, taking turns 2 times" in paired_flce[0]
        assert paired_flce[1].split() == ["case", "npugrad", "ms", *(w for c in who for w in (c, "ms")),
                                          *(w for c in who for w in ("vs", c))]
        rows = [line for line in paired_flce[3:] if line.strip()]
        assert [r[:40].strip() for r in rows] == flce_labels
        assert all(r.rstrip().endswith("x") and len(r[41:].split()) == 1 + 2 * len(who) for r in rows), rows
    main, paired_main, allocating, paired_allocating, compile_times, *contender_compile = tables
    assert "preallocated" in main[0] and "allocated by every contender" in allocating[0]
    contenders = ["npugrad", "numpy", *(["torch"] if HAS_TORCH else [])]
    memory_ops = [c.op for c in bench_ops.cases(True) if c.unit == "GB/s"]
    for table, kind in ((paired_main, "Paired (preallocated)"), (paired_allocating, "Paired (allocated)")):
        assert table[0].startswith(kind) and "taking turns in 2 batches of 2 calls" in table[0]
        assert table[1].split()[1:] == [*(w for c in contenders for w in (c, "ms")),
                                        *(w for c in contenders[1:] for w in ("vs", c))]
        rows = [line for line in table[3:] if line.strip()]
        assert [r.split()[0] for r in rows] == memory_ops  # the memory-bound rows only, in order
        for r in rows:
            fields = r[41:].split()
            assert len(fields) == 2 * len(contenders) - 1 and all(f.endswith("x") for f in fields[len(contenders):]), r
    for table in (main, allocating):
        header = next(line for line in table if line.startswith("case "))
        assert "vs numpy" in header and "of SGEMM" in header and "own SGEMM" in header and "of bf16 pk" in header
        assert "of BW" in header and "own BW" in header
        assert ("vs torch " in header) == HAS_TORCH
        for c in compilers.CONTENDERS:
            assert (f"vs {c}" in header) == (c in EXTRA)
        rows = [line for line in table[3:] if line.strip()]
        assert not [r for r in rows if "failed" in r or "timed out" in r]
        for op in bench_ops.OPS:
            names = contenders + (EXTRA if op == "flce" else [])
            at = next(i for i, r in enumerate(rows) if r.startswith(op))
            group = rows[at:at + len(names)]
            assert [r[41:].split()[0] for r in group] == names
            ours = group[0].split()
            ratios = ours[-(len(names) - 1):]
            assert all(r.endswith("x") for r in ratios), ours
            if op == "flce":  # the rate as a fraction of the SGEMM ceiling: the run's, and the row's own
                assert all(all(f.endswith("%") for f in r.split("GFLOP/s")[1].split()[:2]) for r in group), group
            else:  # of the memory bandwidth: the run's, and the row's own
                assert all(all(f.endswith("%") for f in r.split("GB/s")[1].split()[:2]) for r in group), group
    assert "cold compile ms" in compile_times[1] and "from disk ms" in compile_times[1]
    assert compile_times[1].split()[:2] == ["op", "dtype"]
    compiled = [tuple(line.split()[:2]) for line in compile_times[3:]]  # the FLCE in bfloat16 too: its largest kernel
    assert compiled == [("flce", "float32"), ("flce", "bfloat16"), *((op, "float32") for op in bench_ops.OPS[1:])]
    assert not [r for r in compile_times[3:] if "failed" in r]
    if EXTRA:
        rows = contender_compile[0][3:]
        assert sorted({r[41:].split()[0] for r in rows}) == sorted(EXTRA) and not [r for r in rows if "failed" in r]


def test_rounds_take_turns_and_pool_their_calls():
    """Every op but FLCE runs in rounds in which the contenders take turns (the same loop for
    each of them: one op shows it)."""
    proc = _quick_bench("--rounds", "2", "--ops", "bce", "--paired", "0")
    assert "pooled over 2 round(s)" in proc.stdout and "Paired" not in proc.stdout  # --paired 0: none
    contenders = ["npugrad", "numpy", *(["torch"] if HAS_TORCH else [])]
    for c in contenders:
        assert proc.stderr.count(f"bce 4096 elements: {c} (round 2 of 2)") == 2  # both tables
    main, allocating, _ = _tables(proc.stdout)
    for table in (main, allocating):
        rows = [line for line in table[3:] if line.strip()]
        assert [r[41:].split()[0] for r in rows] == contenders


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", compilers.CONTENDERS)
def test_compiler_matches_numpy(name, dtype):
    """Each compiler's dX and dW against NumPy at a small size, in a fresh process (thread flags,
    CPU pinning and IREE's runtime flags are per process)."""
    why = compilers.missing(name)
    if why:
        pytest.skip(why)
    code = (f"import json, sys; sys.path.insert(0, {ROOT!r}); from bench.contenders import check; "
            f"print('ERRORS' + json.dumps(check({name!r}, {dtype!r})))")
    proc = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NPUGRAD_THREADS": "2"})
    line = next((x for x in proc.stdout.splitlines() if x.startswith("ERRORS")), None)
    assert line is not None, proc.stderr[-3000:]
    errors = json.loads(line[len("ERRORS"):])
    tolerance = 1e-5 if dtype == "float32" else 2e-2  # bf16: G and the outputs rounded to bfloat16
    assert max(errors.values()) < tolerance, errors


def test_absent_compiler_is_a_note(monkeypatch):
    monkeypatch.setitem(compilers.REQUIRES, "xla", ("no_such_module_npugrad",))
    assert compilers.missing("xla") == ('xla: skipped, no_such_module_npugrad not installed '
                                        '(pip install -e ".[bench]")')


@pytest.mark.parametrize("op", bench_ops.OPS)
def test_cached_call_does_not_recompile(op):
    call = bench_ops.api_call(op)
    call()
    size = len(specialize._CACHE)
    for _ in range(3):
        call()
    bench_ops.api_call(op)()  # fresh arrays of the same class
    assert len(specialize._CACHE) == size


def test_rounds_pool_every_timed_call():
    runs = [Result("npugrad", 0.0, 5.0, 10.0, None, (3.0, 1.0)), Result("npugrad", 0.0, 6.0, 12.0, None, (2.0, 9.0, 4.0))]
    pooled = combine(runs)
    assert pooled.median == 3.0 and pooled.first == 5.0 and pooled.peak_mib == 12.0
    assert sorted(pooled.times) == [1.0, 2.0, 3.0, 4.0, 9.0] and pooled.error is None
    failed = Result("npugrad", float("nan"), float("nan"), float("nan"), "MemoryError")
    assert combine([runs[0], failed]).error == "MemoryError"


def test_loss_bench_rounds_take_turns_in_alternate_order_and_give_each_rounds_ratio(monkeypatch):
    """bench/loss.py's step and PyTorch eager's take turns, the first of them in alternate order
    (a drift of the machine's speed then falls on both), pooled over the rounds, with each
    round's own ratio; where eager's bfloat16 is not run, one round of the step alone."""
    calls = []
    seconds = {"npugrad_step": iter([2.0, 3.0, 4.0]), "torch_step": iter([4.0, 2.0, 4.0])}

    def fake_measure(name, spec, args, **options):
        function = spec.split(":")[1]
        calls.append(function)
        t = next(seconds[function])
        return Result(name, t, t, 1.0, times=(t,))

    monkeypatch.setattr(bench_loss, "measure", fake_measure)
    args = argparse.Namespace(rounds=3, predicted_limit=0.0, threads=2)
    case = {"bt": 8, "h": 8, "v": 8, "dtype": "float32"}
    ours, eager, ratios = bench_loss._taking_turns(args, case, {}, 1.0)
    assert calls == ["npugrad_step", "torch_step", "torch_step", "npugrad_step", "npugrad_step", "torch_step"]
    assert ratios == [0.5, 1.5, 1.0]
    assert (ours.median, eager.median) == (3.0, 4.0) and sorted(ours.times) == [2.0, 3.0, 4.0]
    calls.clear()
    predicted = Result("PyTorch eager", float("nan"), float("nan"), float("nan"), "not run", predicted=99.0)
    monkeypatch.setattr(bench_loss, "eager_not_run", lambda *a: predicted)
    seconds["npugrad_step"] = iter([5.0])
    ours, eager, ratios = bench_loss._taking_turns(args, {**case, "dtype": "bfloat16"}, {}, 1.0)
    assert calls == ["npugrad_step"] and eager is predicted and ratios == [] and ours.median == 5.0


@pytest.mark.skipif(bench_loss.torch_chunked_absent() is not None, reason="no PyTorch with F.linear_cross_entropy options")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_pytorch_chunked_loss_contender_computes_the_same_gradients(dtype):
    """bench/loss.py's contender for PyTorch's own chunked F.linear_cross_entropy computes the step
    the other rows do: its gradients are npugrad's and eager's on the same inputs."""
    size = {"bt": 48, "h": 16, "v": 200, "dtype": dtype, "ignored": 0.25}
    chunked = [g.float().numpy() for g in bench_loss.torch_chunked_step(**size)()]
    eager = [g.float().numpy() for g in bench_loss.torch_step(**size)()]
    step = bench_loss.npugrad_step(**size)()
    ours = [np.asarray(g, np.float32) for g in (step.input_grad, step.weight_grad)]
    tol = {"rtol": 2e-2, "atol": 2e-4} if dtype == "bfloat16" else {"rtol": 1e-4, "atol": 1e-7}
    for a, b, c in zip(chunked, eager, ours, strict=True):
        np.testing.assert_allclose(a, b, **tol)
        np.testing.assert_allclose(c, b, **tol)


def test_pytorch_bf16_on_its_fallback_loop_is_predicted_not_run(monkeypatch):
    """On a CPU without bf16 dot-product instructions PyTorch's bf16 GEMMs run in a fallback loop
    (about 1 GFLOP/s: an FLCE bf16 row would take a quarter of an hour per call): the row shows
    the time that rate predicts and the ratio to npugrad it implies, and is not run; under the
    limit, or without one, it is run."""
    calls = []

    def fake_measure(name, spec, args, *rest, **options):
        calls.append((name, args["dtype"]))
        return Result(name, 2.0, 2.0, 1.0, times=(2.0,))

    monkeypatch.setattr(bench_ops, "measure", fake_measure)
    case = next(c for c in bench_ops.cases(False) if c.op == "flce" and c.size["dtype"] == "bfloat16")
    ceilings = bench_ops.Ceilings(100.0, 100.0, (), torch_bf16_fallback=1.0)
    contenders = ["npugrad", "numpy", "torch"]
    text = bench_ops.run_table("t", [case], False, 1, 2, contenders, lambda s: None, ceilings=ceilings,
                               predicted_limit=300.0)
    assert calls == [("npugrad", "bfloat16"), ("numpy", "bfloat16")]
    predicted = case.work / 1e9  # seconds at 1 GFLOP/s
    row = next(line for line in text.splitlines() if line[41:].startswith("torch "))
    assert "not run" in row and "fallback loop" in row and f"~{predicted / 60:.0f} min" in row
    ours = next(line for line in text.splitlines() if line.startswith(case.label))
    assert ours.split()[-1] == f"~{predicted / 2.0:.0f}x"
    shared: dict = {}
    bench_ops.run_table("t", [case], False, 1, 2, contenders[:1], lambda s: None, extra=["torch.compile"],
                        ceilings=ceilings, shared=shared, predicted_limit=300.0)
    assert "torch.compile" not in [name for name, _ in calls[2:]]
    [compiled] = bench_ops.contender_compile_table(shared).splitlines()[3:]
    assert "not run" in compiled and "failed" not in compiled
    calls.clear()
    bench_ops.run_table("t", [case], False, 1, 2, contenders, lambda s: None, ceilings=ceilings,
                        predicted_limit=predicted + 1)
    assert ("torch", "bfloat16") in calls


def test_paired_costs_take_the_median_over_batches_of_their_differences(monkeypatch):
    """A fake clock that the measured callables advance: the call costs 5 units and its part 2,
    except in a slow spell (every call of the third and fourth batches of each side costs
    10x): the overhead is the median of the batches' differences, 3, and the spell shows only
    in the spread."""
    now = [0.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])
    calls = {"call": 0, "part": 0}
    size = 4

    def ticking(name: str, cost: float, before: int):
        def run():  # `before` calls ahead of the batches; the first batch of each side is the warm-up
            batch = (calls[name] - before) // size - 1
            calls[name] += 1
            now[0] += cost * (10 if batch in (2, 3) else 1)
        return run

    def setup():
        now[0] += 100.0  # imports, inputs: not the first call's
        return ticking("call", 5.0, 1)

    r = paired_costs(setup, lambda: ticking("part", 2.0, 0), batches=9, size=size)
    assert r["first"] == 5.0  # the first call alone
    assert r["call"] == 5.0 and r["part"] == 2.0 and r["overhead"] == 3.0
    assert r["spread"] == [5.0, 50.0] and "per_reference" not in r
    assert calls == {"call": 1 + size * 10, "part": size * 10}


def test_paired_costs_in_units_of_a_reference_call_survive_a_spell_over_the_whole_run(monkeypatch):
    """Every call 4x slower for the whole run: the overhead in seconds is 4x, in units of a
    reference call timed in the same batches (0.5) it is what it was, 6."""
    now = [0.0]
    monkeypatch.setattr(common.time, "perf_counter", lambda: now[0])

    def costing(units: float):
        def run():
            now[0] += 4 * units
        return run

    r = paired_costs(lambda: costing(5.0), lambda: costing(2.0), batches=5, size=3, reference=costing(0.5))
    assert r["overhead"] == 12.0 and r["reference"] == 2.0 and r["per_reference"] == 6.0


def test_loop_profile_charges_each_sample_to_its_innermost_loop():
    """bench/loop_profile.py's core on a hand-written disassembly: an outer loop (0x10-0x40)
    around an inner one (0x18-0x30) of two FMAs and a reload off %rsp."""
    from bench import loop_profile

    text = """
0000000000000000 <kernel>:
       0:	push   %rbp
      10:	mov    %rdi,%rax
      18:	vfmadd231ps %ymm1,%ymm2,%ymm3
      20:	vfmadd231ps %ymm1,%ymm4,%ymm5
      28:	cmp    0x28(%rsp),%rax
      30:	jne    18 <kernel+0x18>
      38:	add    $0x1,%rdi
      40:	jne    10 <kernel+0x10>
      48:	ret
"""
    code = loop_profile.instructions(text)
    assert code[0] == (0, "push   %rbp") and len(code) == 9
    found = loop_profile.loops(code)
    assert [(lp.start, lp.end) for lp in found] == [(0x18, 0x30), (0x10, 0x40)]
    inner, outer = found
    assert (inner.fmas, inner.stack, len(inner.instructions)) == (2, 1, 4)
    counts, inside = loop_profile.charge([0x20, 0x28, 0x38, 0x10, 0x48, 0x1000, -4], found, 0x50)
    assert inside == 5 and counts == {inner: 2, outer: 2, None: 1}
    rows = loop_profile.report(counts, inside, 5).splitlines()[1:]
    assert [r.split()[:3] for r in rows] == [["40.0%", "2", "0x18-0x30"], ["40.0%", "2", "0x10-0x40"],
                                             ["20.0%", "1", "outside"]]
    assert rows[0].split()[3:] == ["4", "2", "1", "-"]  # instructions, FMAs, stack operands, label
    shown = loop_profile.report(counts, inside, 5, show=1).splitlines()
    at = shown.index("loop 0x18-0x30 (-):")  # the hottest loop's instructions after the table, and no other's
    assert at == len(rows) + 2 and shown[at + 1:] == [f"    {i}" for i in inner.instructions]
    # With the samples per offset, each shown instruction follows its own count and offset.
    hits = collections.Counter([0x20, 0x20, 0x28, 0x38])
    annotated = loop_profile.report(counts, inside, 5, show=1, hits=hits).splitlines()
    assert [r.split(maxsplit=2) for r in annotated[at + 1:]] == [
        ["0", "18", "vfmadd231ps %ymm1,%ymm2,%ymm3"], ["2", "20", "vfmadd231ps %ymm1,%ymm4,%ymm5"],
        ["1", "28", "cmp    0x28(%rsp),%rax"], ["0", "30", "jne    18 <kernel+0x18>"]]

    # Labels from the line tables (objdump --dwarf=decodedline): a loop is named by its own
    # instructions, not by those of the loop inside it; code no pass labelled is `-`.
    decoded = """
kernel.o:     file format elf64-x86-64

Contents of the .debug_line section:

CU: -:
File name                            Line number    Starting address    View    Stmt
-                                              2                   0               x
logits                                         7                0x10               x
logits.k                                       7                0x18               x
logits                                         0                0x38
-                                             12                0x48               x
"""
    lines = loop_profile.line_rows(decoded)
    assert lines == [(0, "-"), (0x10, "logits"), (0x18, "logits.k"), (0x38, "logits"), (0x48, "-")]
    labels = {lp: loop_profile.label(lp, code, lines, found) for lp in found}
    assert labels == {inner: "logits.k", outer: "logits"}
    assert loop_profile.label(outer, code, lines) == "logits.k"  # counting the inner loop's, it would win
    assert loop_profile.label(inner, code, []) == "-"
    named = loop_profile.report(counts, inside, 5, labels=labels).splitlines()
    assert named[0].split()[-1] == "label" and [r.split()[-1] for r in named[1:3]] == ["logits.k", "logits"]


_CHUNK = 64 * 1024  # below glibc's mmap threshold: from the heap, kept there when freed


def heap_reuser(mib: int):
    """A contender whose setup leaves 2·mib MiB of freed chunks on the C heap (as the input
    generation leaves NumPy's temporaries) and whose call allocates and writes mib MiB in chunks
    of the same size: with the freed pages still resident, the call would need no new memory."""
    import ctypes

    libc = ctypes.CDLL("libc.so.6")
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    n = mib * 1024 * 1024 // _CHUNK
    left, pins = [], []
    for _ in range(2 * n):  # each chunk followed by a kept one: none is the heap's top, which free() trims
        left.append(libc.malloc(_CHUNK))
        pins.append(libc.malloc(_CHUNK // 2))
    for p in left:
        ctypes.memset(p, 1, _CHUNK)
    for p in left:
        libc.free(p)

    def call():
        taken = [libc.malloc(_CHUNK) for _ in range(n)]
        for p in taken:
            ctypes.memset(p, 2, _CHUNK)
        for p in taken:
            libc.free(p)

    call.pins = pins
    return call


def turn_taker(name: str, cost: float, log: list, clock: list):
    """A contender whose call appends its name to `log` and takes `cost` ticks of `clock`."""
    def call():
        log.append(name)
        clock[0] += cost

    return call


def first_of(costs, log, clock):
    return turn_taker("a", costs[0], log, clock)


def second_of(costs, log, clock):
    return turn_taker("b", costs[1], log, clock)


def test_paired_child_takes_turns_batch_by_batch_in_alternate_order(monkeypatch):
    """Each contender is set up and called once, then every turn runs a batch of each, the order
    reversed every other turn, a pause before each batch; each batch's median is its own."""
    clock, calls, pauses = [0.0], [], []
    monkeypatch.setattr(common.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(common.time, "sleep", pauses.append)
    got = common.paired_child({"a": "tests.test_bench:first_of", "b": "tests.test_bench:second_of"},
                              {"costs": [2.0, 5.0], "log": calls, "clock": clock}, batches=3, size=2, pause=0.5)
    assert calls == ["a", "b"] + ["a", "a", "b", "b"] + ["b", "b", "a", "a"] + ["a", "a", "b", "b"]
    assert got == {"medians": {"a": [2.0, 2.0, 2.0], "b": [5.0, 5.0, 5.0]}} and pauses == [0.5] * 6


def test_a_paired_ratio_is_the_median_of_each_turns_quotient():
    """vs: the median over turns of the other's batch median / npugrad's, not the quotient of
    their medians: a turn in which the machine's memory was slow for both counts as one."""
    r = common.Paired({"npugrad": (1.0, 10.0, 3.0), "torch": (2.0, 11.0, 9.0)})
    assert r.time("npugrad") == 3.0 and r.time("torch") == 9.0
    assert r.ratio("torch", "npugrad") == 2.0  # quotients 2, 1.1, 3 (the medians' quotient: 3)


def test_paired_runs_its_contenders_in_one_child_and_reports_an_error():
    r = common.paired({"x": "tests.test_bench:heap_reuser", "y": "tests.test_bench:heap_reuser"}, {"mib": 1},
                      batches=2, size=1)
    assert r.error is None and set(r.medians) == {"x", "y"}
    assert all(len(m) == 2 and all(t > 0 for t in m) for m in r.medians.values())
    r = common.paired({"x": "tests.test_bench:no_such_setup"}, {}, batches=1, size=1)
    assert r.error is not None and "no_such_setup" in r.error and not r.medians


def test_paired_table_has_the_memory_bound_rows_with_each_contenders_spec(monkeypatch):
    asked = []

    def fake_paired(specs, args, batches, size, threads, timeout):
        asked.append((specs, args, batches, size))
        if args.get("t") == 16384:
            return common.Paired({}, "boom")
        return common.Paired({"npugrad": (1e-3, 2e-3, 3e-3), "numpy": (4e-3, 4e-3, 4e-3), "torch": (2e-3, 2e-3, 6e-3)})

    monkeypatch.setattr(bench_ops, "paired", fake_paired)
    selected = bench_ops.cases(False)
    text = bench_ops.paired_table("T", selected, True, 2, ["npugrad", "numpy", "torch"], lambda s: None, 6, 5)
    lines = text.splitlines()
    assert lines[0] == "T" and lines[1].split() == ["case", "npugrad", "ms", "numpy", "ms", "torch", "ms",
                                                    "vs", "numpy", "vs", "torch"]
    memory = [c for c in selected if c.unit == "GB/s"]
    assert [line.split()[0] for line in lines[3:]] == [c.op for c in memory]
    assert [a[0] for a in asked] == [{c: bench_ops.spec_of(case, c) for c in ("npugrad", "numpy", "torch")}
                                     for case in memory]
    assert all(a[1]["alloc"] is True and a[2:] == (6, 5) for a in asked)
    embedding = next(line for line in lines if line.startswith("embedding"))
    assert embedding.endswith("failed: boom")
    nll = next(line for line in lines if line.startswith("nll")).split()
    assert nll[-5:] == ["2.00", "4.00", "2.00", "2.00x", "2.00x"]  # turns 4/1, 2/2, 4/3: 2; torch 2, 1, 2: 2


def test_paired_flce_table_has_the_gemm_bound_rows(monkeypatch):
    asked = []

    def fake_paired(specs, args, batches, size, threads, timeout):
        asked.append((tuple(specs), args["dtype"], batches, size))
        return common.Paired({"npugrad": (1.0, 2.0, 3.0), "torch": (1.2, 2.2, 3.6)})

    monkeypatch.setattr(bench_ops, "paired", fake_paired)
    selected = bench_ops.cases(False)
    text = bench_ops.paired_table("T", selected, False, 2, ["npugrad", "torch"], lambda s: None, 3, 1,
                                  unit="GFLOP/s")
    flce = [c for c in selected if c.op == "flce"]
    rows = text.splitlines()[3:]
    assert [r[:40].strip() for r in rows] == [c.label for c in flce]
    assert all(r.split()[-3:] == ["2000.00", "2200.00", "1.20x"] for r in rows), rows  # quotients 1.2, 1.1, 1.2
    assert asked == [(("npugrad", "torch"), c.size["dtype"], 3, 1) for c in flce]


def test_paired_flce_table_leaves_out_a_contender_predicted_too_slow(monkeypatch):
    asked = []

    def fake_paired(specs, args, batches, size, threads, timeout):
        asked.append((tuple(specs), args["dtype"]))
        return common.Paired({name: (1.0, 2.0, 3.0) for name in specs})

    monkeypatch.setattr(bench_ops, "paired", fake_paired)
    selected = [c for c in bench_ops.cases(False) if c.op == "flce"]
    slow = {"torch", "torch.compile"}
    text = bench_ops.paired_table("T", selected, True, 2, ["npugrad", "torch", "xla", "torch.compile"],
                                  lambda s: None, 3, 1, unit="GFLOP/s",
                                  left_out=lambda case, c: "fallback loop" if c in slow and case.size["dtype"] ==
                                  "bfloat16" else None)
    assert asked == [(("npugrad", "xla") if c.size["dtype"] == "bfloat16" else
                      ("npugrad", "torch", "xla", "torch.compile"), c.size["dtype"]) for c in selected]
    lines = text.splitlines()
    for case in selected:
        fields = next(line for line in lines if line.startswith(case.label))[41:].split()
        if case.size["dtype"] == "bfloat16":  # npugrad, torch, xla, torch.compile ms, then the three ratios
            assert fields == ["2000.00", "-", "2000.00", "-", "-", "1.00x", "-"], fields
            assert f"- {case.label}, torch: fallback loop" in lines
            assert f"- {case.label}, torch.compile: fallback loop" in lines
        else:
            assert fields[-3:] == ["1.00x"] * 3, fields


def test_bench_rejects_a_negative_paired_count():
    with pytest.raises(SystemExit, match="--paired must be at least 0"):
        bench_ops.main(["--paired", "-1", "--ops", "bce"])


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="glibc's malloc_trim and /proc/self/status")
def test_peak_counts_memory_the_setup_freed():
    """A call's peak extra memory is what it allocates, whatever free memory the setup left on
    the heap (release_free_memory gives that back before the baseline is read)."""
    got = common.child("tests.test_bench:heap_reuser", {"mib": 16}, repeats=0, warmup=0)
    assert got["exact_peak"] and 12.0 <= got["peak_mib"] <= 20.0, got  # 0 MiB without release_free_memory


def test_child_reads_the_sgemm_ceiling_around_its_timed_calls():
    """With `ceiling` n the child times NumPy's n³ SGEMM right before and right after the
    contender's timed calls; without, it reads none."""
    got = common.child("tests.test_bench:heap_reuser", {"mib": 1}, repeats=1, warmup=0, ceiling=64)
    assert len(got["ceilings"]) == 2 and all(r > 0 for r in got["ceilings"]), got
    assert common.child("tests.test_bench:heap_reuser", {"mib": 1}, repeats=1, warmup=0)["ceilings"] == []


def test_child_reads_the_memory_bandwidth_around_its_timed_calls():
    """With `bandwidth` m the child reads the in-place stream's GB/s (two m MiB arrays, mapped
    before the baseline of the peak: the contender's peak stays its own) right before and right
    after the contender's timed calls; without, it reads none."""
    got = common.child("tests.test_bench:heap_reuser", {"mib": 1}, repeats=1, warmup=0, bandwidth=8)
    assert len(got["bandwidths"]) == 2 and all(r > 0 for r in got["bandwidths"]), got
    assert got["peak_mib"] < 8.0, got
    assert common.child("tests.test_bench:heap_reuser", {"mib": 1}, repeats=1, warmup=0)["bandwidths"] == []


def test_stream_reading_counts_every_threads_bytes(monkeypatch):
    """A reading is 12 bytes an element (a += b: two reads, one write) over the span from the
    first thread's start to the last one's end; every thread adds its own share, once."""
    from bench import contenders

    reading = contenders.stream_numpy(1, count=3)
    a, b = reading.arrays
    clock = iter(range(100))
    monkeypatch.setattr(contenders.time, "perf_counter", lambda: float(next(clock)))  # a tick a call, 6 calls
    rate = reading()
    monkeypatch.undo()
    n = 2**20 // 4
    assert a.size == b.size == n and np.all(a == 2.0) and np.all(b == 1.0)  # 1 + 1, each element once
    assert 12 * n / 5 / 1e9 <= rate <= 12 * n / 1 / 1e9  # 6 distinct ticks: the span is 1 to 5 of them
    reading()
    assert np.all(a == 3.0)


def test_memory_rows_show_their_fraction_of_the_bandwidth(monkeypatch):
    """'of BW' / 'own BW': a memory-bound row's GB/s over the run's bandwidth reading and over
    the best of the readings in its own process; only memory-bound rows ask for those readings,
    at the run's size, and GEMM-bound rows leave the columns empty."""
    asked = {}

    def fake_measure(name, spec, args, *rest, bandwidth=0, **options):
        asked[spec] = bandwidth
        took = case.work / 30e9  # 30 GB/s
        return Result(name, took, took, 1.0, times=(took,), bandwidths=(40.0, 60.0) if bandwidth else ())

    monkeypatch.setattr(bench_ops, "measure", fake_measure)
    ceilings = bench_ops.Ceilings(50.0, 50.0, (), fma=100.0, n=4096, bandwidth=50.0, stream_mib=256)
    case = next(c for c in bench_ops.cases(False) if c.op == "ema_adam")
    text = bench_ops.run_table("t", [case], False, 1, 2, ["npugrad"], lambda s: None, ceilings=ceilings)
    header = text.splitlines()[1]
    row = next(line for line in text.splitlines() if line.startswith(case.label))
    assert row.split("GB/s")[1].split()[:2] == ["60%", "50%"]
    assert header.index("of BW") < header.index("own BW") and "of SGEMM" not in header
    assert asked == {"bench.ops:ema_adam_npugrad": 256}
    flce = next(c for c in bench_ops.cases(False) if c.op == "flce")
    asked.clear()
    text = bench_ops.run_table("t", [flce, case], False, 1, 2, ["npugrad"], lambda s: None, ceilings=ceilings)
    assert asked == {"bench.ops:flce_npugrad": 0, "bench.ops:ema_adam_npugrad": 256}
    header = text.splitlines()[1]
    flce_row = next(line for line in text.splitlines() if line.startswith(flce.label))
    assert flce_row[header.index("of BW"):header.index("own BW") + len("own BW")].strip() == ""
    no_stream = bench_ops.Ceilings(50.0, 50.0, (), fma=100.0, n=4096)  # not measured: no columns, no readings
    asked.clear()
    text = bench_ops.run_table("t", [case], False, 1, 2, ["npugrad"], lambda s: None, ceilings=no_stream)
    assert "own BW" not in text and asked == {"bench.ops:ema_adam_npugrad": 0}


def test_gemm_rows_show_their_fraction_of_their_own_sgemm_readings(monkeypatch):
    """'own SGEMM': a GEMM-bound row's rate over the best of the SGEMM readings taken in its own
    process (the run's ceiling drifted since: 'of SGEMM' differs); only GEMM-bound rows ask for
    the readings, at the run's SGEMM size."""
    asked = {}

    def fake_measure(name, spec, args, *rest, ceiling=0, **options):
        asked[spec] = ceiling
        took = case.work / 60e9  # 60 GFLOP/s
        return Result(name, took, took, 1.0, times=(took,), ceilings=(100.0, 80.0, 150.0) if ceiling else ())

    monkeypatch.setattr(bench_ops, "measure", fake_measure)
    ceilings = bench_ops.Ceilings(50.0, 50.0, (), fma=100.0, n=4096)
    case = next(c for c in bench_ops.cases(False) if c.op == "flce" and c.size["dtype"] == "float32")
    text = bench_ops.run_table("t", [case], False, 1, 2, ["npugrad"], lambda s: None, ceilings=ceilings)
    header = text.splitlines()[1]
    row = next(line for line in text.splitlines() if line.startswith(case.label))
    of_sgemm, own = row.split("GFLOP/s")[1].split()[:2]
    assert (of_sgemm, own) == ("120%", "40%") and header.index("of SGEMM") < header.index("own SGEMM")
    assert asked == {"bench.ops:flce_npugrad": 4096}
    bce = next(c for c in bench_ops.cases(False) if c.op == "bce")
    asked.clear()
    bench_ops.run_table("t", [bce], False, 1, 2, ["npugrad"], lambda s: None, ceilings=ceilings)
    assert asked == {"bench.ops:bce_npugrad": 0}


def test_gemm_rows_show_their_fraction_of_the_instruction_peak(monkeypatch):
    """'of instr pk': float32 rows against the FMA peak; bfloat16 rows against AMX's tdpbf16ps
    where the CPU has it (the kernels' whole blocks run on tiles), else vdpbf16ps's, or, where the
    CPU lacks both, the FMA's (the bf16 GEMMs then run on float32 FMAs)."""
    for dtype, dot, tile, peak in (("float32", 400.0, 1200.0, 100.0), ("bfloat16", 400.0, None, 400.0),
                                   ("bfloat16", 400.0, 1200.0, 1200.0), ("bfloat16", None, None, 100.0)):
        case = next(c for c in bench_ops.cases(False) if c.op == "flce" and c.size["dtype"] == dtype)
        took = case.work / 60e9  # 60 GFLOP/s
        monkeypatch.setattr(bench_ops, "measure", lambda name, *a, t=took, **k: Result(name, t, t, 1.0, times=(t,)))
        ceilings = bench_ops.Ceilings(50.0, 50.0, (), fma=100.0, dot_bf16=dot, tile_bf16=tile)
        text = bench_ops.run_table("t", [case], False, 1, 2, ["npugrad"], lambda s: None, ceilings=ceilings)
        assert "of instr pk" in text.splitlines()[1]
        row = next(line for line in text.splitlines() if line.startswith(case.label))
        fractions = [f for f in row.split() if f.endswith("%")]  # of SGEMM, (of bf16 pk), of instr pk
        assert len(fractions) == (3 if dtype == "bfloat16" else 2)
        assert fractions[-1] == f"{100 * 60 / peak:.0f}%"
