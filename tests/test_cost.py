"""The cost model (npugrad.analysis.cost): cycles per unit and path from a target's figures, a
stage as its slowest term with double buffering and as the sum without, routes for copies the
target cannot do in one step, and the lower bounds."""

from __future__ import annotations

import dataclasses

import pytest

from npugrad.analysis import cost
from npugrad.targets import get

A2 = get("npu-a2")


def gemm_stage(flop: float, gm_l1: float) -> cost.Load:
    load = cost.Load()
    load.add_work("matrix", "bf16", flop, 1, A2.cores)
    load.add_move(("gm", "l1"), gm_l1, 1)
    load.global_bytes = gm_l1  # one core busy
    return load


def test_unit_and_path_cycles():
    [terms] = cost.predict([gemm_stage(8192 * 1000, 75 * 500)], A2, 1 << 40).stages
    got = {t.name: t.cycles for t in terms}
    assert got["cube"] == pytest.approx(1000 + 6)  # 8192 FLOP per cycle, 6 cycles of head
    assert got["gm -> l1"] == pytest.approx(500 + 24)  # 75 B per cycle, 24 of latency
    assert got["gm (shared)"] == pytest.approx(75 * 500 / 888.9)


def test_double_buffering_overlaps_and_without_it_adds():
    stages = [gemm_stage(8192 * 1000, 75 * 500), gemm_stage(8192 * 100, 75 * 2000)]
    p = cost.predict(stages, A2, 1 << 40)
    assert p.cycles == pytest.approx(1006 + 2024)
    assert p.bound == "gm -> l1" and p.shares["cube"] == pytest.approx(1006)
    serial = cost.predict(stages, dataclasses.replace(A2, double_buffer=False), 1 << 40)
    assert serial.cycles == pytest.approx(sum(t.cycles for s in serial.stages for t in s))


def test_lower_bounds():
    p = cost.predict([gemm_stage(8192 * 1000, 0)], A2, 888.9 * 10)
    assert p.compute == {"cube": pytest.approx(1000)}  # 20 cores x 1000 cycles of work, over 20 cores
    assert p.traffic_bound == pytest.approx(10)
    assert p.lower_bound == pytest.approx(1000)


def test_routes():
    assert [(p.source, p.target) for p in cost.route(A2, "gm", "l0a")] == [("gm", "l1"), ("l1", "l0a")]
    assert cost.route(A2, "gm", "l0c") is None
    notes: list[str] = []
    cost.path_cycles(A2, ("gm", "l0b"), 1000, 1, notes)
    assert notes == ["gm -> l0b is not a path of npu-a2: costed as gm -> l1 -> l0b"]
    # host lists a path between any two levels
    assert len(cost.route(get("host"), "dram", "l1")) == 1


def test_shared_cache_serves_re_reads_in_proportion_to_what_fits():
    """npu-a2: 192 MiB of L2 in front of HBM (888.9 B/cycle), the L2 at 4444 B/cycle. The first
    touch of the footprint comes from HBM; of the re-reads, the fraction cache / footprint hits."""
    g = A2.global_level
    mib = 1 << 20
    # Fits: first touch from HBM, the rest from the cache.
    assert cost.global_cycles(A2, 1000 * mib, 100 * mib) == pytest.approx(100 * mib / 888.9 + 900 * mib / 4444)
    # Twice the cache: half the re-reads hit.
    footprint = 2 * g.cache
    want = (footprint + (1000 * mib - footprint) * 0.5) / 888.9 + (1000 * mib - footprint) * 0.5 / 4444
    assert cost.global_cycles(A2, 1000 * mib, footprint) == pytest.approx(want)
    # Less traffic than the footprint: all of it a first touch.
    assert cost.global_cycles(A2, 10 * mib, footprint) == pytest.approx(10 * mib / 888.9)
    # A stage's workspace counts in the footprint: more workspace, fewer hits, more cycles.
    load = gemm_stage(8192 * 1000, 0)
    load.global_bytes = 4000 * mib
    small = cost.predict([load], A2, 100 * mib).cycles
    load.workspace = 300 * mib
    assert cost.predict([load], A2, 100 * mib).cycles > small
