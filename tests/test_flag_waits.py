"""bench/flag_waits.py: the wavefront's waits at the flags, block by block (the report's
grouping on made-up waits, and a real FLCE call on two blocks in a process of its own, where
the tool binds npu.wait_flag's support function before npugrad does)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import flag_waits


def test_report_groups_waits_by_flag_and_names_the_waiter():
    base = 0x10000
    ms = 1e-3
    # (address, value, seconds waited, start, thread): flag 0 at base, flag 1 a line on; two
    # calls, the second with its counters elsewhere (a launch's workspace is its own).
    calls = [
        [(base, 1, 9 * ms, 0.0, 2), (base, 2, 0.0, 0.01, 2), (base, 3, 1 * ms, 0.02, 2), (base + 64, 1, 0.0, 0.0, 1)],
        [(2 * base, 1, 7 * ms, 0.0, 1), (2 * base, 2, 3 * ms, 0.01, 1), (2 * base, 3, 0.0, 0.02, 1),
         (2 * base + 64, 1, 2 * ms, 0.0, 2)],
    ]
    rows = flag_waits.report(calls, blocks=2)
    assert [r.flag for r in rows] == [0, 1]
    first, ring = rows
    assert first.waiter == "block 1 (on block 0)" and ring.waiter.startswith("block 0 (on block 1")
    assert first.per_call_ms == pytest.approx((9 + 1 + 7 + 3) / 2)
    assert (first.blocked, first.checks) == (2, 3)
    assert first.first_ms == pytest.approx(8.0)  # 9 and 7: each call's first blocked wait
    assert first.others_median_ms == pytest.approx(2.0)  # 1 and 3
    assert [v for v, _, _ in first.steps] == [1, 2]  # the last call's blocked waits
    assert ring.per_call_ms == pytest.approx(1.0) and (ring.blocked, ring.checks) == (0.5, 1.0)
    # Three blocks: flag 1 is block 2's, not the ring's.
    assert flag_waits.report(calls, blocks=3)[1].waiter == "block 2 (on block 1)"


def test_block_report_charges_each_thread_to_its_block_with_its_idle_end():
    base = 0x10000
    ms = 1e-3
    # Two blocks, no ring. Call 1: thread 7 is block 0 (it reads flag 0 at a count of 0 only), done
    # at 0.50 s of a 1 s call; thread 8 reads flag 0 at counts above 0, so it is block 1: it waits
    # 20 ms and 10 ms, its last check ending at 0.95 s. Call 2: the pool swapped the threads.
    calls = [
        [(base, 0, 0.0, 0.10, 7), (base, 0, 0.0, 0.50, 7),
         (base, 1, 20 * ms, 0.05, 8), (base, 2, 10 * ms, 0.94, 8)],
        [(2 * base, 0, 0.0, 0.70, 8), (2 * base, 1, 30 * ms, 0.10, 7), (2 * base, 2, 0.0, 0.99, 7)],
    ]
    b0, b1 = flag_waits.block_report(calls, [1.0, 1.0], blocks=2)
    assert (b0.block, b1.block) == (0, 1)
    assert b0.waited_ms == pytest.approx(0.0) and b0.drain_ms == pytest.approx((500 + 300) / 2)
    assert b1.waited_ms == pytest.approx((30 + 30) / 2) and b1.drain_ms == pytest.approx((50 + 10) / 2)
    # With a ring (3 blocks): block 0 reads flag 2, the last block's, at counts above 0.
    ring = [[(base + 128, 1, 4 * ms, 0.2, 5), (base, 1, 0.0, 0.3, 6), (base + 64, 1, 0.0, 0.4, 9)]]
    r0, r1, r2 = flag_waits.block_report(ring, [1.0], blocks=3)
    assert r0.waited_ms == pytest.approx(4.0) and r0.drain_ms == pytest.approx(796.0)
    assert r1.drain_ms == pytest.approx(700.0) and r2.drain_ms == pytest.approx(600.0)


def test_flag_waits_times_an_flce_call_on_two_blocks():
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "bench", "flag_waits.py"), "--size", "bt=512,h=256,v=2048,dtype=float32",
         "--calls", "2", "--steps"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "NPUGRAD_THREADS": "2"}, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert re.search(r"on 2 block\(s\), 2 call\(s\): [\d.]+ ms a call", proc.stdout), proc.stdout
    row = re.search(r"^\s+0\s+block 1 \(on block 0\)\s+([\d.]+) ms\s+[\d.]+%\s+([\d.]+)/([\d.]+)", proc.stdout, re.MULTILINE)
    assert row, proc.stdout
    waited, blocked, checks = (float(g) for g in row.groups())
    # 2048 / 256 = 8 vocabulary tiles: block 1 checks its flag at least once a step of them.
    assert checks >= 8 and 0 <= blocked <= checks and waited >= 0.0
    blocks = re.findall(r"^\s+([01])\s+([\d.]+) ms\s+([\d.]+) ms\s+[\d.]+%$", proc.stdout, re.MULTILINE)
    assert [b for b, _, _ in blocks] == ["0", "1"], proc.stdout
    assert float(blocks[1][1]) == pytest.approx(waited, abs=0.05)  # block 1's waits: the flag's


def test_install_refuses_after_npugrad_bound_its_own():
    code = (f"import sys; sys.path.insert(0, {ROOT!r})\n"
            "from npugrad.lowering import machine_code; machine_code.init()\n"
            "from bench import flag_waits\n"
            "try:\n    flag_waits.install()\nexcept RuntimeError as e:\n    print('REFUSED', e)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert "REFUSED flag_waits: npugrad's support functions are bound already" in proc.stdout, proc.stderr[-2000:]
