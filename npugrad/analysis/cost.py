"""A model of time on a target: what bounds a kernel, and by how much.

Input: per stage (a top-level loop nest of the kernel), what the busiest core moves on each path
between memory levels (bytes, copies) and the work it does of each kind (target.WORK), plus what
all cores move in and out of global memory. Each becomes cycles on the target:

    unit   work / rate(kind, element type) + instructions x overhead      (per core)
    path   bytes / bandwidth + copies x latency                            (per core)
    global bytes of all cores / the global level's shared bandwidth, except what a shared cache
           in front of it serves (below)

With double buffering the copies of the next tile overlap work on this one: a stage takes as long
as its slowest unit or path. Without, a core does one thing at a time: the sum. The kernel is the
sum of its stages. Lower bounds: the compute bound (all work spread evenly over all cores at full
rate) and the compulsory traffic (the arguments moved once over global memory).

The shared cache: the kernel's global footprint F is its arguments and the workspaces it
allocates in global memory. The first touch of F comes from memory; of the rest of the traffic
(re-reads, partial results written and read again), the cache serves the fraction min(1, C / F)
of a cache of C bytes (as if any byte of F were as likely to be resident as any other: a
first-order estimate, exact when F fits) at its bandwidth, memory the remainder.

A path the target does not list (a copy the hardware cannot do in one step) is costed along the
shortest route of listed paths, and said so.

Two sources feed it: the tiled IR (`of_report`, bytes and work counted by analysis/report.py) and
the recipes' models of their tilings (`Load` built by the recipe, for choose-tile-sizes' search).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from npugrad.targets import Target
from npugrad.targets.target import CopyPath

# What a target without cost figures is costed with (so that every target has a model; its
# report says the figures are nominal).
NOMINAL_RATE = {"matrix": 64.0, "vector": 16.0, "scalar": 1.0}
NOMINAL_BANDWIDTH = 16.0


@dataclass
class Load:
    """What one stage costs on the busiest core, and what all cores move over global memory."""

    moves: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # path -> (bytes, copies)
    work: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)  # (kind, element) -> (amount, count)
    global_bytes: float = 0.0  # all cores
    workspace: float = 0.0  # bytes of global buffers the tiling allocates (beyond the arguments)
    total_work: dict[tuple[str, str], float] = field(default_factory=dict)  # all cores
    # The extent of each tile dimension (a model's first stage says): where tile counts change.
    extents: dict[str, int] = field(default_factory=dict)

    def add_move(self, path: tuple[str, str], nbytes: float, copies: float) -> None:
        b, c = self.moves.get(path, (0.0, 0.0))
        self.moves[path] = (b + nbytes, c + copies)

    def add_work(self, kind: str, element: str, amount: float, count: float, cores: int = 1) -> None:
        """`amount` on one core (the busiest), `cores` of them doing as much."""
        a, c = self.work.get((kind, element), (0.0, 0.0))
        self.work[(kind, element)] = (a + amount, c + count)
        self.total_work[(kind, element)] = self.total_work.get((kind, element), 0.0) + amount * cores


@dataclass(frozen=True)
class Term:
    name: str  # a unit's name, "a -> b" for a path, "<global> (shared)"
    cycles: float


@dataclass
class Prediction:
    stages: list[list[Term]]  # per stage, its terms, slowest first
    cycles: float
    clock_ghz: float
    overlapped: bool  # double buffering: a stage is its slowest term
    compute: dict[str, float]  # unit -> cycles of all its work spread over all cores at full rate
    traffic_bound: float  # cycles
    bound: str  # the term that bounds most of the time
    shares: dict[str, float]  # term name -> cycles it bounds
    caveats: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return self.cycles / (self.clock_ghz * 1e9)

    @property
    def compute_bound(self) -> float:
        return max(self.compute.values(), default=0.0)

    @property
    def lower_bound(self) -> float:
        return max(self.compute_bound, self.traffic_bound)


def _rate(target: Target, kind: str, element: str) -> tuple[str, float, float]:
    """(unit name, rate per cycle, cycles per instruction) doing `kind` work on `element`."""
    unit = target.unit_for(kind)
    if unit is None:
        return kind, NOMINAL_RATE[kind], 0.0
    rate = unit.rate(kind, element) or unit.rate(kind, "f32") or NOMINAL_RATE[kind]
    return unit.name, rate, unit.overhead


def route(target: Target, source: str, dest: str) -> list[CopyPath] | None:
    """The listed paths a copy from `source` to `dest` takes: itself, or the shortest chain
    (None: no chain; [] for a target listing no paths)."""
    if not target.paths:
        return []
    direct = target.path(source, dest)
    if direct is not None:
        return [direct]
    queue: deque[tuple[str, list[CopyPath]]] = deque([(source, [])])
    seen = {source}
    while queue:
        at, chain = queue.popleft()
        for p in target.paths:
            if p.source == at and p.target not in seen:
                if p.target == dest:
                    return chain + [p]
                seen.add(p.target)
                queue.append((p.target, chain + [p]))
    return None


def path_cycles(target: Target, path: tuple[str, str], nbytes: float, copies: float, caveats: list[str]) -> float:
    chain = route(target, *path)
    if chain == []:
        return nbytes / NOMINAL_BANDWIDTH
    if chain is None:
        caveats.append(f"{path[0]} -> {path[1]} is no route of {target.name}: costed at {NOMINAL_BANDWIDTH:g} B/cycle")
        return nbytes / NOMINAL_BANDWIDTH
    if len(chain) > 1:
        via = " -> ".join([chain[0].source] + [p.target for p in chain])
        caveats.append(f"{path[0]} -> {path[1]} is not a path of {target.name}: costed as {via}")
    return sum(nbytes / p.bandwidth + copies * p.latency for p in chain)


def global_cycles(target: Target, nbytes: float, footprint: float) -> float | None:
    """Cycles all cores' global traffic (`nbytes`) takes over the shared bandwidth, through the
    shared cache for a kernel whose global buffers take `footprint` bytes (module docstring;
    None: the target gives no bandwidth)."""
    g = target.global_level
    if g.bandwidth is None:
        return None
    if not (g.cache and g.cache_bandwidth):
        return nbytes / g.bandwidth
    first = min(nbytes, footprint)
    hit = min(1.0, g.cache / footprint) if footprint > 0 else 1.0
    again = nbytes - first
    return (first + again * (1 - hit)) / g.bandwidth + again * hit / g.cache_bandwidth


def stage_terms(load: Load, target: Target, footprint: float, caveats: list[str]) -> list[Term]:
    units: dict[str, float] = {}
    for (kind, element), (amount, count) in load.work.items():
        name, rate, overhead = _rate(target, kind, element)
        units[name] = units.get(name, 0.0) + amount / rate + count * overhead
    terms = [Term(name, c) for name, c in units.items()]
    terms += [Term(f"{a} -> {b}", path_cycles(target, (a, b), n, k, caveats)) for (a, b), (n, k) in load.moves.items()]
    shared = global_cycles(target, load.global_bytes, footprint)
    if shared is not None:
        terms.append(Term(f"{target.global_level.name} (shared)", shared))
    return sorted(terms, key=lambda t: -t.cycles)


def predict(stages: list[Load], target: Target, argument_bytes: float, workspace: float | None = None) -> Prediction:
    """`workspace`: the bytes of global buffers the kernel allocates (default: what the stages say)."""
    caveats: list[str] = []
    overlapped = target.double_buffer
    if workspace is None:
        workspace = max((s.workspace for s in stages), default=0.0)
    per_stage = [stage_terms(s, target, argument_bytes + workspace, caveats) for s in stages]
    shares: dict[str, float] = {}
    cycles = 0.0
    for terms in per_stage:
        if not terms:
            continue
        if overlapped:
            t = terms[0].cycles
            shares[terms[0].name] = shares.get(terms[0].name, 0.0) + t
        else:
            t = sum(x.cycles for x in terms)
            for x in terms:
                shares[x.name] = shares.get(x.name, 0.0) + x.cycles
        cycles += t
    total_work: dict[str, float] = {}
    for s in stages:
        for (kind, element), amount in s.total_work.items():
            name, rate, _ = _rate(target, kind, element)
            total_work[name] = total_work.get(name, 0.0) + amount / rate / target.cores
    traffic = global_cycles(target, argument_bytes, argument_bytes)
    if traffic is None:
        first = next((p for p in target.paths if p.source == target.global_level.name), None)
        traffic = argument_bytes / ((first.bandwidth if first else NOMINAL_BANDWIDTH) * target.cores)
    bound = max(shares, key=shares.__getitem__) if shares else "-"
    return Prediction(per_stage, cycles, target.clock_ghz, overlapped, total_work, traffic, bound, shares,
                      list(dict.fromkeys(caveats)))


def of_report(report, target: Target) -> Prediction | None:
    """The prediction for a function the report interpreted (None: shapes not static)."""
    from npugrad.analysis.report import Work

    if report.moves is None:
        return None
    g = target.global_level.name
    stages = []
    for stage in report.stages:
        load = Load()
        # The busiest core: the one whose own terms add up to most (a fair proxy for its slowest term).
        busiest = max(stage.blocks, key=lambda tallies: sum(m.bytes for k, m in tallies.items() if not isinstance(k, Work)))
        for key, m in busiest.items():
            if isinstance(key, Work):
                load.add_work(key.kind, key.element, m.bytes, m.copies, 0)
            else:
                load.add_move(key, m.bytes, m.copies)
        for tallies in stage.blocks:
            for key, m in tallies.items():
                if isinstance(key, Work):
                    load.total_work[tuple(key)] = load.total_work.get(tuple(key), 0.0) + m.bytes  # type: ignore[index]
                elif g in key:
                    load.global_bytes += m.bytes
        stages.append(load)
    return predict(stages, target, report.argument_bytes, report.workspace_bytes)


def _time(cycles: float, clock_ghz: float) -> str:
    s = cycles / (clock_ghz * 1e9)
    for unit, f in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if s >= f:
            return f"{s / f:.4g} {unit}"
    return f"{s / 1e-9:.4g} ns"


def format_prediction(p: Prediction, target: Target, flop: float, global_bytes: float) -> list[str]:
    """The cost lines of a report."""
    lines = [f"modelled time on {target.name} at {target.clock_ghz:g} GHz "
             f"({'copies overlap work: a stage is its slowest term' if p.overlapped else 'no overlap: a stage is the sum of its terms'}; "
             f"figures: {target.costs or 'nominal (the target gives none)'}):"]
    for i, terms in enumerate(p.stages):
        shown = ", ".join(f"{t.name} {t.cycles:.4g}" for t in terms[:4])
        lines.append(f"  stage {i + 1}: {shown} cycles")
    lines.append(f"  predicted: {p.cycles:.4g} cycles = {_time(p.cycles, p.clock_ghz)}, bound by {p.bound} "
                 f"({100 * p.shares.get(p.bound, 0) / p.cycles if p.cycles else 0:.0f}% of the time)")
    units = ", ".join(f"{u} {c:.4g}" for u, c in sorted(p.compute.items(), key=lambda x: -x[1]))
    lines.append(f"  compute bound: {p.compute_bound:.4g} cycles = {_time(p.compute_bound, p.clock_ghz)} ({units}); "
                 f"compulsory traffic: {p.traffic_bound:.4g} cycles = {_time(p.traffic_bound, p.clock_ghz)}; "
                 f"predicted / lower bound = {p.cycles / p.lower_bound if p.lower_bound else 0:.2f}x")
    if flop:
        lines.append(f"  intensity: {flop / global_bytes if global_bytes else float('inf'):.4g} FLOP per global byte "
                     f"({flop:.4g} FLOP)")
    lines += [f"  note: {c}" for c in p.caveats]
    return lines
