"""`npugrad bench --quick`: the tables' shape (not the numbers), and the kernel cache on repeated calls."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import ops as bench_ops
from bench.common import Result, combine
from npugrad.runtime import specialize

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _tables(stdout: str) -> list[list[str]]:
    """The blocks of lines that start with a header naming the columns."""
    blocks = [b.splitlines() for b in stdout.split("\n\n")]
    return [b for b in blocks if any(line.startswith(("case ", "op ")) for line in b)]


def test_quick_bench_prints_every_op_with_ratio_columns():
    proc = subprocess.run(
        [sys.executable, "-m", "npugrad.tools.main", "bench", "--quick", "--repeats", "1", "--rounds", "2"],
        check=False, capture_output=True, text=True, timeout=300, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert "median of 1 timed call(s)" in proc.stdout and "pooled over 2 round(s)" in proc.stdout
    assert "(round 2 of 2)" in proc.stderr
    main, allocating, compile_times = _tables(proc.stdout)
    assert "preallocated" in main[0] and "allocated by every contender" in allocating[0]
    contenders = ["npugrad", "numpy", *(["torch"] if HAS_TORCH else [])]
    for table in (main, allocating):
        header = next(line for line in table if line.startswith("case "))
        assert "vs numpy" in header
        assert ("vs torch" in header) == HAS_TORCH
        rows = [line for line in table[3:] if line.strip()]
        assert not [r for r in rows if "failed" in r]
        for op in bench_ops.OPS:
            at = next(i for i, r in enumerate(rows) if r.startswith(op))
            group = rows[at:at + len(contenders)]
            assert [r[41:].split()[0] for r in group] == contenders
            ours = group[0].split()
            ratios = ours[-(len(contenders) - 1):]
            assert all(r.endswith("x") for r in ratios), ours
    compiled = {line.split()[0] for line in compile_times[3:]}
    assert compiled == set(bench_ops.OPS)


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
