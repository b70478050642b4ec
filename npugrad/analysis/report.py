"""The tiled kernel in numbers, to compare two tilings (`npugrad-opt FILE --target T --report`):

- per memory level of the target: each local buffer (its SSA name as printed, type, bytes padded
  to the level's alignment, x2 when double-buffered) and the level's total against its capacity;
- the bytes every `npu.copy` moves over the whole run, grouped by (source level -> target level),
  global memory being the memrefs without a memory space; the total, the busiest block, and the
  global traffic against the bytes of the arguments (each moved once: 1.00x);
- the work every unit does (contraction FLOP, element operations on local buffers, element
  operations reaching into global memory), and what analysis/cost.py makes of it: the modelled
  time per stage (a top-level loop nest, or the straight-line code between two), what bounds
  it, the compute bound, the compulsory traffic, the intensity (FLOP per global byte).

The bytes come from interpreting the index arithmetic of each function on its static shapes: the
tile loops run (for every block: `block_idx` = 0 .. cores-1, `block_dim` = cores) and each copy
adds the bytes of the sizes it has at that point, so partial tiles count what they move. Where a
size cannot be evaluated it counts as the largest it can be and the figure is an upper bound;
where a trip count cannot, the figure is no bound; either way the report says why.

What a tiling may emit and still be measured exactly (EXACT, dispatching on op classes): index
arithmetic (`arith.constant`, the integer `arith` ops, casts, `arith.cmpi`, `arith.select`,
`affine.apply`/`affine.min`), `npu.block_idx`/`npu.block_dim`, `memref.dim`, `memref.subview`
(its sizes), `memref.collapse_shape`/`memref.cast` (shapes carried through), `npu.copy`, and
`scf.for`/`scf.if`/`scf.yield`. Only what copy sizes, trip counts and branch conditions are computed
from is interpreted; any other op there makes the figures bounds, with a caveat naming it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import NamedTuple

from xdsl.dialects import affine, arith, func, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, MemRefType, ModuleOp
from xdsl.dialects.linalg import ops as linalg
from xdsl.ir import Block, BlockArgument, Operation, OpResult, SSAValue

from npugrad.analysis.cost import format_prediction, of_report
from npugrad.analysis.footprint import local_buffer_bytes as footprint
from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import FUSED, TILES
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import AllocLocalOp, AllocSharedOp, BlockDimOp, BlockIdxOp, CopyOp, element_bytes, level_of
from npugrad.ir import defined_functions, iterator_kinds, operand_dims
from npugrad.passes.tiling.elementwise import work as elementwise_work
from npugrad.passes.vectorize_contractions import panel_level
from npugrad.recipes import recipe_of
from npugrad.targets import Target, TargetError

# Ops interpreted per function (all blocks) before loops of more than FALLBACK_TRIPS trips are
# counted as trips x one iteration instead of being run (exact where the sizes do not depend on
# the loop, an upper bound where they do).
BUDGET = 2_000_000
FALLBACK_TRIPS = 8


@dataclass
class Buffer:
    name: str
    type: str
    bytes: int  # one copy, padded to the level's alignment
    copies: int  # 2 when double-buffered
    unpadded: int

    @property
    def total(self) -> int:
        return self.bytes * self.copies


@dataclass
class Level:
    name: str
    capacity: int | None  # None: the function uses a level the target does not have
    buffers: list[Buffer] = field(default_factory=list)

    @property
    def used(self) -> int:
        return sum(b.total for b in self.buffers)


@dataclass
class Move:
    bytes: int = 0
    copies: int = 0
    exact: bool = True
    bounded: bool = True  # False: a trip count is unknown, so even `bytes` is no bound

    def add(self, other: Move) -> None:
        self.bytes += other.bytes
        self.copies += other.copies
        self.exact &= other.exact
        self.bounded &= other.bounded


@dataclass
class FunctionReport:
    name: str
    levels: list[Level]
    moves: dict[tuple[str, str], Move] | None  # None: shapes are not static
    dynamic: list[str] = field(default_factory=list)  # arguments with dynamic shapes
    argument_bytes: int = 0
    workspace_bytes: int = 0  # global buffers the function allocates (memref.alloc, npu.alloc_shared)
    block_bytes: list[int] = field(default_factory=list)  # bytes moved by each block
    caveats: list[str] = field(default_factory=list)
    untiled: list[str] = field(default_factory=list)  # train ops with every operand in global memory
    direct: dict[str, int] = field(default_factory=dict)  # other ops reaching into global memory
    work: dict[Work, Move] = field(default_factory=dict)  # over all blocks
    stages: list[Stage] = field(default_factory=list)


class Work(NamedTuple):
    """A key of the tallies next to the copies' paths: work of a kind (the target's WORK: matrix
    = contraction FLOP, vector = element operations on local buffers, scalar = element operations
    reaching into global memory) on an element type. Its Move counts the amount in `bytes` and
    the instructions (contractions, loops) in `copies`."""

    kind: str
    element: str


@dataclass
class Stage:
    """One top-level op of a function that moved bytes or did work (a loop nest, a fill): what each
    block did in it, path or Work -> tally."""

    blocks: list[dict] = field(default_factory=list)


class _OverBudget(Exception):
    pass




def _bytes(element: int, shape: tuple[int | None, ...]) -> int | None:
    n = static_product(shape)
    return None if n is None else n * element


def _static(t) -> tuple[int | None, ...]:
    return tuple(None if d == DYNAMIC_INDEX else d for d in t.get_shape())


def _div(a: int, b: int) -> int:
    """Division rounding toward zero, as arith.divsi."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY: dict[type[Operation], Callable[[int, int], int]] = {
    arith.AddiOp: operator.add,
    arith.SubiOp: operator.sub,
    arith.MuliOp: operator.mul,
    arith.DivSIOp: _div,
    arith.DivUIOp: operator.floordiv,
    arith.FloorDivSIOp: operator.floordiv,
    arith.CeilDivSIOp: lambda a, b: -(-a // b),
    arith.CeilDivUIOp: lambda a, b: -(-a // b),
    arith.RemSIOp: lambda a, b: a - _div(a, b) * b,
    arith.RemUIOp: operator.mod,
    arith.MinSIOp: min,
    arith.MinUIOp: min,
    arith.MaxSIOp: max,
    arith.MaxUIOp: max,
    arith.AndIOp: operator.and_,
    arith.OrIOp: operator.or_,
    arith.XOrIOp: operator.xor,
    arith.ShLIOp: operator.lshift,
    arith.ShRSIOp: operator.rshift,
    arith.ShRUIOp: operator.rshift,
}
_CASTS = (arith.IndexCastOp, arith.ExtSIOp, arith.ExtUIOp, arith.TruncIOp)
# arith.cmpi predicates: eq ne slt sle sgt sge ult ule ugt uge.
_CMP = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge) + (
    operator.lt,
    operator.le,
    operator.gt,
    operator.ge,
)


Step = Callable[["_Run"], None]


@dataclass
class _Body:
    """A block compiled to Python closures, one per op (xDSL's accessors are too slow to walk
    the IR on every trip)."""

    steps: list[Step]
    yields: list[SSAValue]
    nests: list[bool] = field(default_factory=list)  # per step: whether its op is a loop


@dataclass
class _Run:
    """Interpreting a function for one block (core): index values, the runtime shape of every
    memref with the elements it cannot exceed, and what the copies moved."""

    block: int
    blocks: int
    budget: int | None  # ops to interpret before _OverBudget; None: long loops are counted, not run
    values: dict[SSAValue, int | None] = field(default_factory=dict)
    memrefs: dict[SSAValue, tuple[tuple[int | None, ...], int | None]] = field(default_factory=dict)
    moves: dict[tuple[str, str], Move] = field(default_factory=dict)
    caveats: set[str] = field(default_factory=set)
    steps: int = 0
    weight: int = 1  # how many times the op being interpreted runs (loops counted, not run)
    bounded: bool = True

    def run_stages(self, body: _Body) -> list[dict]:
        """Run a function's body, what each stage (a top-level loop, or the ops between two)
        moved and did apart."""
        self.steps += len(body.steps)
        stages: list[dict] = []
        total = self.moves
        for i, step in enumerate(body.steps):
            if i == 0 or body.nests[i] or body.nests[i - 1]:
                stages.append({})
            self.moves = {}
            step(self)
            for key, m in self.moves.items():
                total.setdefault(key, Move()).add(m)
                stages[-1].setdefault(key, Move()).add(m)
        self.moves = total
        return stages

    def tally(self, key, amount: int, count: int = 1, exact: bool = True) -> None:
        m = self.moves.setdefault(key, Move())
        m.bytes += amount * self.weight
        m.copies += count * self.weight
        m.exact &= exact
        m.bounded &= self.bounded

    def run(self, body: _Body) -> list[int | None]:
        self.steps += len(body.steps)
        if self.budget is not None and self.steps > self.budget:
            raise _OverBudget
        for step in body.steps:
            step(self)
        return [self.values.get(v) for v in body.yields]

    def memref(self, v: SSAValue, shape: tuple[int | None, ...], bound: int | None = None) -> None:
        n: int | None = 1
        for d in shape:
            n = n * d if n is not None and d is not None else None
        self.memrefs[v] = (shape, n if n is not None else bound)

    def bound(self, v: SSAValue) -> int | None:
        return self.memrefs[v][1] if v in self.memrefs else None

    @contextmanager
    def repeated(self, times: int | None, why: str) -> Iterator[None]:
        """Interpret a region once, standing for `times` runs of it (None: unknown). What it
        computes from the loop variable is unknown, so a copy whose size still evaluates has the
        same size on every run and its count stays exact."""
        saved = self.weight, self.bounded
        self.weight *= times if times is not None else 1
        self.bounded &= times is not None
        self.caveats.add(why)
        try:
            yield
        finally:
            self.weight, self.bounded = saved


class _Compiler:
    """Compiles only what the bytes moved depend on: the ops holding copies, and the slice of
    values that copy sizes, trip counts and branch conditions are computed from (not offsets,
    not the element loops of a tile)."""

    def __init__(self, f: func.FuncOp, target: Target):
        self.global_level = target.global_level.name
        self.panel = panel_level(target)  # where B panels are packed (None: read in place)
        self.moving: set[Operation] = set()
        self.leaves = {o for o in f.walk() if _leaf_loop(o)}
        counted = (CopyOp, linalg.GenericOp, linalg.FillOp)
        for copy in (o for o in f.walk() if isinstance(o, counted) or o in self.leaves):
            parent = copy.parent_op()
            while parent is not None and parent not in self.moving:
                self.moving.add(parent)
                parent = parent.parent_op()
        # Tiles of an elementwise op computed by the op itself on local buffers (EMA-Adam, BCE
        # none/sum): the model's work for their elements (elementwise.work), by their tiled operands.
        self.tiles = {o: names for o in f.walk() if isinstance(o, TrainOp) and (names := _tile_operands(o))}
        self.relevant = _slice(f)
        # A loop run once for a set of inputs is replayed, not rerun: inner tile loops recur with
        # the same bounds and sizes for every outer tile, and for every block.
        self.memo: dict[tuple, tuple[dict[tuple[str, str], Move], set[str], list[int | None]]] = {}

    def body(self, block: Block) -> _Body:
        steps: list[Step] = []
        yields: list[SSAValue] = []
        for op in block.ops:
            if isinstance(op, scf.YieldOp | affine.YieldOp):
                yields = list(op.operands)
            elif self._kept(op):
                steps.append(self.step(op))
        return _Body(steps, yields, [isinstance(o, scf.ForOp) for o in block.ops
                                     if not isinstance(o, scf.YieldOp | affine.YieldOp) and self._kept(o)])

    def _kept(self, op: Operation) -> bool:
        return (op in self.moving or isinstance(op, CopyOp | linalg.GenericOp | linalg.FillOp) or op in self.leaves
                or op in self.tiles
                or any(r in self.relevant for r in op.results))

    def step(self, op: Operation) -> Step:
        if op in self.leaves:
            return self.leaf(op)  # type: ignore[arg-type]
        if op in self.tiles:
            return self.tile(op, self.tiles[op])  # type: ignore[arg-type]
        impl = EXACT.get(type(op))
        return impl(self, op) if impl is not None else self.other(op)

    def leaf(self, op: scf.ForOp) -> Step:
        """An element loop (no loops inside, nothing counted inside): trips x its body's element
        operations (of the longer branch of a condition), without running it. Scalar work when it
        reads or writes global memory, else vector work."""
        n = _element_ops(op.body.block)
        kind = "scalar" if any(_global_access(o) for o in op.walk()) else "vector"
        lb, ub, by = op.lb, op.ub, op.step

        def step(run: _Run) -> None:
            start, stop, s = run.values.get(lb), run.values.get(ub), run.values.get(by)
            if start is None or stop is None or s is None or s <= 0:
                run.caveats.add(f"the element loop at {_where(op)} has bounds that are not constants: counted once")
                trips, exact = 1, False
            else:
                trips, exact = max(0, -(-(stop - start) // s)), True
            run.tally(Work(kind, "f32"), trips * n, 1, exact)

        return step

    def tile(self, op: TrainOp, names: tuple[str, ...]) -> Step:
        """A tile that is the elementwise op itself, on local buffers: vector work, as the cost
        model counts it (elementwise.work) for the elements of its first tiled operand."""
        first = getattr(op, names[0])

        def step(run: _Run) -> None:
            shape = run.memrefs[first][0] if first in run.memrefs else _static(first.type)
            elements = static_product(shape)
            exact = elements is not None
            if elements is None:
                elements = run.bound(first) or 0
                run.caveats.add(_UNSIZED_WORK)
            run.tally(Work("vector", "f32"), elementwise_work(elements, names), 1, exact)

        return step

    def work(self, op: linalg.GenericOp | linalg.FillOp) -> Step:
        """A contraction (a reduction over two inputs): 2 FLOP per point of its iteration space on
        the inputs' element type; any other generic or fill: element operations."""
        if isinstance(op, linalg.FillOp):
            maps, operands, per_point = None, [op.outputs[0]], 1
            kinds = []
        else:
            maps = operand_dims(op)
            operands = [*op.inputs, *op.outputs]
            kinds = iterator_kinds(op)
            per_point = sum(_element_op(o) for o in op.body.block.ops)
        contraction = "reduction" in kinds and len(op.inputs) >= 2
        local = all(level_of(v.type) is not None for v in operands)
        pack = None  # (path, bytes per element) of B's panel copy, where the kernel packs it
        if contraction:
            key = Work("matrix", str(operands[0].type.element_type))  # type: ignore[attr-defined]
            per_point = 2
            b = op.inputs[1].type
            if self.panel is not None and isinstance(b, MemRefType) and b.get_num_dims() == 2:
                # vectorize-contractions copies B's K x N panel, widened to float32, into the
                # smallest level once per call, for all row blocks to read.
                pack = ((level_of(b) or self.global_level, self.panel), element_bytes(b.element_type) + 4)
        else:
            key = Work("vector" if local else "scalar", "f32")

        def step(run: _Run) -> None:
            extents: dict[int, int | None] = {}
            for v, dims in zip(operands, maps or [None]):
                shape = run.memrefs[v][0] if v in run.memrefs else _static(v.type)
                for axis, d in enumerate(dims if dims is not None else range(len(shape))):
                    if extents.get(d) is None:
                        extents[d] = shape[axis]
            points = static_product(extents.values()) if extents else 1
            exact = points is not None
            if points is None:
                points = max((run.bound(v) or 0) for v in operands)
                run.caveats.add(_UNSIZED_WORK)
            run.tally(key, points * per_point, 1, exact)
            if pack is not None:
                b_points = static_product(extents.get(d) for d in maps[1])  # type: ignore[index]
                if b_points is not None:
                    run.tally(pack[0], b_points * pack[1], 1, exact)

        return step

    def copy(self, op: CopyOp) -> Step:
        src, dst = op.source, op.target
        t = dst.type
        assert isinstance(t, MemRefType)
        element = element_bytes(t.element_type)  # what is written: a converting copy writes the narrower type
        key = (level_of(src.type) or self.global_level, level_of(dst.type) or self.global_level)
        where = _where(op)

        flip = op.transpose is not None  # the target's sizes, in the source's order

        def step(run: _Run) -> None:
            a, b = run.memrefs.get(src), run.memrefs.get(dst)
            if b is not None and flip:
                b = (b[0][::-1], b[1])
            shape = (
                tuple(x if x is not None else y for x, y in zip(a[0], b[0])) if a and b else (a or b or ((None,), 0))[0]
            )
            size = _bytes(element, shape)
            exact = bounded = size is not None
            if size is None:
                limits = [n for n in (run.bound(src), run.bound(dst)) if n is not None]
                bounded = bool(limits)
                size = min(limits, default=0) * element
                run.caveats.add(
                    "copies of sizes that could not be evaluated count as the largest tile they can be"
                    if bounded
                    else f"the copy at {where} has a size that could be neither evaluated nor bounded: it counts 0 B"
                )
            m = run.moves.setdefault(key, Move())
            m.bytes += size * run.weight
            m.copies += run.weight
            m.exact &= exact
            m.bounded &= run.bounded and bounded

        return step

    def loop(self, op: Operation) -> Step:
        lb, ub, step_, *inits = op.operands
        body = self.body(op.regions[0].block)
        iv, *args = op.regions[0].block.args
        results = list(op.results)
        unknown = f"loop at {_where(op)} has bounds that are not constants: its copies are counted once"
        long = (
            f"loops of more than {FALLBACK_TRIPS} trips are counted as trips x one trip, whose copies "
            "count as the largest tile they can be (running them all takes too long)"
        )
        inputs = _inputs(op, self.relevant)
        by_block = any(isinstance(o, BlockIdxOp | BlockDimOp) for o in op.walk())
        memo = self.memo

        def execute(run: _Run, start, stop, by, carried: list[int | None]) -> list[int | None]:
            trips = None if start is None or stop is None or by is None or by <= 0 else max(0, -(-(stop - start) // by))
            if trips is None or (run.budget is None and trips > FALLBACK_TRIPS):
                with run.repeated(trips, unknown if trips is None else long):
                    for a in (iv, *args):
                        run.values[a] = None
                    run.run(body)
                return [None] * len(results)
            for k in range(trips):
                run.values[iv] = start + k * by
                for a, v in zip(args, carried):
                    run.values[a] = v
                carried = run.run(body)
            return carried

        def step(run: _Run) -> None:
            get = run.values.get
            start, stop, by = get(lb), get(ub), get(step_)
            carried = [get(v) for v in inits]
            key = (
                op,
                start,
                stop,
                by,
                *carried,
                *(run.memrefs.get(v) or get(v) for v in inputs),
                *((run.block, run.blocks) if by_block else ()),
            )
            if key not in memo:
                saved = run.moves, run.caveats, run.weight, run.bounded
                run.moves, run.caveats, run.weight, run.bounded = {}, set(), 1, True
                try:
                    out = execute(run, start, stop, by, carried)
                    memo[key] = (run.moves, run.caveats, out)
                finally:
                    run.moves, run.caveats, run.weight, run.bounded = saved
            else:
                run.steps += 1
            moves, caveats, carried = memo[key]
            for where, m in moves.items():
                total = run.moves.setdefault(where, Move())
                total.bytes += m.bytes * run.weight
                total.copies += m.copies * run.weight
                total.exact &= m.exact
                total.bounded &= m.bounded and run.bounded
            run.caveats |= caveats
            for r, v in zip(results, carried):
                run.values[r] = v

        return step

    def branch(self, op: Operation) -> Step:
        cond = op.operands[0]
        then, other = (self.body(r.block) if r.blocks else _Body([], []) for r in op.regions)
        results = list(op.results)
        why = f"the condition of the scf.if at {_where(op)} is not a constant: the larger branch is counted"

        def step(run: _Run) -> None:
            c = run.values.get(cond)
            if c is not None:
                out = run.run(then if c else other)
            else:
                # Either branch may run as far as we know: count the larger.
                saved, branches = run.moves, []
                for body in (then, other):
                    run.moves = {}
                    run.run(body)
                    branches.append(run.moves)
                run.moves = saved
                for key in {k for b in branches for k in b}:
                    m = run.moves.setdefault(key, Move())
                    m.add(max((b.get(key, Move()) for b in branches), key=lambda m: m.bytes))
                    m.exact = False
                run.caveats.add(why)
                out = [None] * len(results)
            for r, v in zip(results, out):
                run.values[r] = v

        return step

    def other(self, op: Operation) -> Step:
        """Any other op: memref results get the shape of their type (or, for casts and
        collapses, of their source), the rest is unknown; regions run once, as an unknown loop."""
        source = next((v for v in op.operands if isinstance(v.type, MemRefType)), None)
        groups = op.properties.get("reassociation", op.attributes.get("reassociation"))
        collapse = None
        if isinstance(op, memref.CollapseShapeOp) and groups is not None:
            collapse = [[i.value.data for i in g.data] for g in groups.data]  # type: ignore[attr-defined]
        bodies = [(self.body(b), list(b.args)) for r in op.regions for b in r.blocks]
        why = f"{op.name} at {_where(op)} is not interpreted: its copies are counted once"

        def step(run: _Run) -> None:
            for r in op.results:
                if not isinstance(r.type, MemRefType):
                    run.values[r] = None
                    continue
                shape = _static(r.type)
                known = run.memrefs.get(source)[0] if source in run.memrefs else None  # type: ignore[index]
                if known is not None and isinstance(op, memref.CastOp) and len(known) == len(shape):
                    shape = known
                elif known is not None and collapse is not None:
                    shape = tuple(static_product(known[i] for i in g) for g in collapse)
                run.memref(r, shape, run.bound(source) if source is not None else None)
            for body, args in bodies:
                with run.repeated(None, why):
                    for a in args:
                        run.values[a] = None
                    run.run(body)

        return step


_UNSIZED_WORK = "work of sizes that could not be evaluated counts as the largest tile it can be"


def _tile_operands(op: TrainOp) -> tuple[str, ...]:
    """The tiled operands of `op` (its recipe's) where every one is in a local level: a tile
    computed by the op itself; else ()."""
    names = recipe_of(op).tiled_operands(op)
    return names if names and all(level_of(getattr(op, n).type) is not None for n in names) else ()


def _leaf_loop(op: Operation) -> bool:
    """A loop of element operations: nothing inside is a loop, a copy or counted work."""
    return isinstance(op, scf.ForOp) and _element_ops(op.body.block) > 0 and not any(
        isinstance(o, scf.ForOp | CopyOp | linalg.GenericOp | linalg.FillOp) for o in op.body.walk())


def _element_ops(block: Block) -> int:
    """Element operations one run of `block` does, counting the longer branch of each condition."""
    n = 0
    for o in block.ops:
        if o.regions:
            n += max((_element_ops(b) for r in o.regions for b in r.blocks), default=0)
        else:
            n += _element_op(o)
    return n


def _element_op(op: Operation) -> bool:
    """An operation on elements: a load or store, or arithmetic on floats."""
    if isinstance(op, memref.LoadOp | memref.StoreOp) or op.dialect_name() == "math":
        return True
    return op.dialect_name() == "arith" and any(isinstance(getattr(r.type, "bitwidth", None), int)
                                                and "Float" in type(r.type).__name__ for r in op.results)


def _global_access(op: Operation) -> bool:
    return isinstance(op, memref.LoadOp | memref.StoreOp) and level_of(op.memref.type) is None


def _const(r: SSAValue, value: int | None) -> Step:
    def step(run: _Run) -> None:
        run.values[r] = value

    return step


def _binary(fn: Callable[[int, int], int], a: SSAValue, b: SSAValue, r: SSAValue) -> Step:
    def step(run: _Run) -> None:
        x, y = run.values.get(a), run.values.get(b)
        try:
            run.values[r] = None if x is None or y is None else int(fn(x, y))
        except (ZeroDivisionError, ValueError):
            run.values[r] = None

    return step


def _select(c: SSAValue, a: SSAValue, b: SSAValue, r: SSAValue) -> Step:
    def step(run: _Run) -> None:
        cond = run.values.get(c)
        run.values[r] = None if cond is None else run.values.get(a if cond else b)

    return step


def _affine(op: Operation) -> Step:
    m = op.properties["map"].data  # type: ignore[attr-defined]
    args, r = list(op.operands), op.results[0]
    pick = min if isinstance(op, affine.MinOp) else (lambda out: out[0])

    def step(run: _Run) -> None:
        values = [run.values.get(v) for v in args]
        try:
            run.values[r] = None if None in values else pick(m.eval(values[: m.num_dims], values[m.num_dims :]))
        except ZeroDivisionError:
            run.values[r] = None

    return step


def _block(op: BlockIdxOp | BlockDimOp) -> Step:
    r, idx = op.result, isinstance(op, BlockIdxOp)

    def step(run: _Run) -> None:
        run.values[r] = run.block if idx else run.blocks

    return step


def _dim(v: SSAValue, i: SSAValue, r: SSAValue) -> Step:
    def step(run: _Run) -> None:
        shape, k = run.memrefs.get(v, ((), None))[0], run.values.get(i)
        run.values[r] = shape[k] if k is not None and 0 <= k < len(shape) else None

    return step


def _subview(op: Operation) -> Step:
    source, r = op.operands[0], op.results[0]
    static = list(op.static_sizes.get_values())  # type: ignore[attr-defined]
    dynamic = list(op.sizes)  # type: ignore[attr-defined]
    want = r.type.get_shape()  # type: ignore[attr-defined]
    fallback = _static(r.type)

    def step(run: _Run) -> None:
        given = iter(dynamic)
        sizes = [run.values.get(next(given)) if s == DYNAMIC_INDEX else s for s in static]
        run.memref(r, _drop_units(sizes, want) or fallback, run.bound(source))

    return step


def _constant(op: Operation) -> Step:
    value = op.properties.get("value", op.attributes.get("value"))
    return _const(op.results[0], value.value.data if isinstance(value, IntegerAttr) else None)


def _binary_step(c: _Compiler, op: Operation) -> Step:
    return _binary(_BINARY[type(op)], *op.operands, op.results[0])


# The ops interpreted exactly, by class (see the module docstring); any other is `other`.
EXACT: dict[type[Operation], Callable[[_Compiler, Operation], Step]] = {
    arith.ConstantOp: lambda c, op: _constant(op),
    **{cls: _binary_step for cls in _BINARY},
    **{cls: lambda c, op: _binary(lambda a, _: a, op.operands[0], op.operands[0], op.results[0]) for cls in _CASTS},
    arith.CmpiOp: lambda c, op: _binary(_CMP[op.properties["predicate"].value.data], *op.operands, op.results[0]),  # type: ignore[attr-defined]
    arith.SelectOp: lambda c, op: _select(*op.operands, op.results[0]),
    affine.ApplyOp: lambda c, op: _affine(op),
    affine.MinOp: lambda c, op: _affine(op),
    BlockIdxOp: lambda c, op: _block(op),  # type: ignore[arg-type]
    BlockDimOp: lambda c, op: _block(op),  # type: ignore[arg-type]
    memref.DimOp: lambda c, op: _dim(*op.operands, op.results[0]),
    memref.SubviewOp: lambda c, op: _subview(op),
    CopyOp: lambda c, op: c.copy(op),  # type: ignore[arg-type]
    linalg.GenericOp: lambda c, op: c.work(op),  # type: ignore[arg-type]
    linalg.FillOp: lambda c, op: c.work(op),  # type: ignore[arg-type]
    scf.ForOp: lambda c, op: c.loop(op),
    scf.IfOp: lambda c, op: c.branch(op),
}


def _slice(f: func.FuncOp) -> set[SSAValue]:
    """The values the bytes moved depend on: the shapes of what is copied (not where from), trip
    counts, branch conditions, and everything those are computed from."""
    work: list[SSAValue] = []
    for op in f.walk():
        if isinstance(op, CopyOp):
            work += [op.source, op.target]
        elif isinstance(op, linalg.GenericOp | linalg.FillOp):
            work += [v for v in op.operands if isinstance(v.type, MemRefType)]
        elif isinstance(op, scf.ForOp):
            work += op.operands[:3]
        elif isinstance(op, scf.IfOp):
            work.append(op.operands[0])
    seen: set[SSAValue] = set()
    while work:
        v = work.pop()
        if v in seen:
            continue
        seen.add(v)
        if isinstance(v, OpResult):
            op = v.op
            if isinstance(op, memref.SubviewOp):
                work += [op.operands[0], *op.sizes]  # type: ignore[attr-defined]
            elif op.regions:  # a result of scf.for / scf.if: what is yielded, and where it starts
                work += list(op.operands)
                work += [y.operands[v.index] for y in op.walk() if isinstance(y, scf.YieldOp) and y.parent_op() is op]
            else:
                work += list(op.operands)
        elif isinstance(v, BlockArgument) and v.index > 0 and isinstance(loop := v.block.parent_op(), scf.ForOp):
            # An iteration argument: its start and what each trip yields. (The loop variable is
            # its bounds, which are in the slice already.)
            work.append(loop.operands[2 + v.index])
            work += [y.operands[v.index - 1] for y in loop.walk() if isinstance(y, scf.YieldOp) and y.parent_op() is loop]
    return seen


def _inputs(op: Operation, relevant: set[SSAValue]) -> list[SSAValue]:
    """The relevant values defined outside `op` that its regions read."""
    inside: set[SSAValue] = set()
    for o in op.walk():
        inside.update(o.results)
        for region in o.regions:
            for block in region.blocks:
                inside.update(block.args)
    found: dict[SSAValue, None] = {}
    for o in op.walk():
        if o is not op:
            found.update((v, None) for v in o.operands if v in relevant and v not in inside)
    return list(found)


def _drop_units(sizes: list[int | None], want: tuple[int, ...]) -> tuple[int | None, ...] | None:
    """The sizes a rank-reducing subview keeps: it drops unit sizes the result type has no room for."""
    out: list[int | None] = []
    extra = len(sizes) - len(want)
    for s in sizes:
        if extra and s == 1 and (len(out) >= len(want) or want[len(out)] != 1):
            extra -= 1
            continue
        out.append(s)
    return tuple(out) if len(out) == len(want) else None


def _where(op: Operation) -> str:
    loc = op.location
    line = getattr(loc, "line", None)
    return f"line {line.data}" if line is not None else op.name


def _argument_bytes(f: func.FuncOp) -> tuple[int, list[str]]:
    total, dynamic = 0, []
    for i, arg in enumerate(f.body.block.args):
        if isinstance(arg.type, MemRefType):
            n = _bytes(element_bytes(arg.type.element_type), _static(arg.type))
            if n is None:
                dynamic.append(f"%{arg.name_hint or i}: {arg.type}")
            else:
                total += n
    return total, dynamic


def _index_value(v: SSAValue, target: Target) -> int | None:
    """A size computed from constants, npu.block_dim (the target's cores) and static dims."""
    op = v.owner
    if isinstance(op, arith.ConstantOp) and isinstance(op.value, IntegerAttr):
        return op.value.value.data
    if isinstance(op, BlockDimOp):
        return target.cores
    if isinstance(op, memref.DimOp):
        axis = _index_value(op.index, target)
        shape = _static(op.source.type)
        return shape[axis] if axis is not None and axis < len(shape) else None
    if isinstance(op, arith.MuliOp | arith.AddiOp):
        a, b = _index_value(op.lhs, target), _index_value(op.rhs, target)
        if a is None or b is None:
            return None
        return a * b if isinstance(op, arith.MuliOp) else a + b
    return None


def _workspace_bytes(f: func.FuncOp, target: Target) -> int:
    """Bytes of the global buffers `f` allocates whose sizes can be evaluated, each once (what
    the blocks touch of a heap buffer each allocates: their own rows of it, in the tilings)."""
    total = 0
    for o in f.walk():
        if not isinstance(o, AllocSharedOp | memref.AllocOp):
            continue
        t = o.results[0].type
        if not isinstance(t, MemRefType) or level_of(t) is not None:
            continue
        dynamic = iter(o.sizes if isinstance(o, AllocSharedOp) else o.dynamic_sizes)
        n: int | None = element_bytes(t.element_type)
        for d in t.get_shape():
            size = _index_value(next(dynamic), target) if d == DYNAMIC_INDEX else d
            n = None if n is None or size is None else n * size
        if n is not None:
            total += n
    return total


def analyze(f: func.FuncOp, target: Target, names: dict[SSAValue, str] | None = None) -> FunctionReport:
    """The report of one function; `names` are the SSA names the IR was printed with."""
    names = names or {}
    levels = {lv.name: Level(lv.name, lv.capacity) for lv in target.local_levels()}
    for buf in (o for o in f.walk() if isinstance(o, AllocLocalOp)):
        name = level_of(buf.result.type)
        try:
            size, copies = footprint(buf, target)
        except TargetError:
            size, copies = buf.size_bytes(), 2 if buf.double_buffer is not None else 1
        level = levels.setdefault(name, Level(name, None))  # type: ignore[arg-type]
        label = names.get(buf.result) or buf.result.name_hint or "?"
        level.buffers.append(Buffer(f"%{label}", str(buf.result.type), size, copies, buf.size_bytes()))
    argument_bytes, dynamic = _argument_bytes(f)
    report = FunctionReport(f.sym_name.data, list(levels.values()), None, dynamic, argument_bytes)
    report.workspace_bytes = _workspace_bytes(f, target)
    for o in f.walk():
        if not isinstance(o, TrainOp | memref.LoadOp | memref.StoreOp):
            continue
        spaces = [level_of(v.type) for v in o.operands if isinstance(v.type, MemRefType)]
        if isinstance(o, TrainOp) and all(s is None for s in spaces):
            report.untiled.append(o.name)
        elif None in spaces:
            report.direct[o.name] = report.direct.get(o.name, 0) + 1
    if dynamic:
        return report
    blocks = target.cores if any(isinstance(o, BlockIdxOp | BlockDimOp) for o in f.walk()) else 1
    runs, stages = _interpret_blocks(f, target, blocks)
    report.moves = {}
    for run in runs:
        report.block_bytes.append(sum(m.bytes for k, m in run.moves.items() if not isinstance(k, Work)))
        for key, m in run.moves.items():
            (report.work if isinstance(key, Work) else report.moves).setdefault(key, Move()).add(m)  # type: ignore[arg-type]
        report.caveats += [c for c in sorted(run.caveats) if c not in report.caveats]
    report.stages = [Stage(blocks) for blocks in stages]
    return report


def _interpret_blocks(f: func.FuncOp, target: Target, blocks: int) -> tuple[list[_Run], list[list[dict]]]:
    """Each block's run, and per stage (top-level step that moved or did anything) each block's tallies."""
    compiler = _Compiler(f, target)
    body = compiler.body(f.body.block)
    steps: list[list[dict]] = []

    def interpret(block: int, budget: int | None) -> _Run:
        run = _Run(block, blocks, budget)
        for arg in f.body.block.args:
            if isinstance(arg.type, MemRefType):
                run.memref(arg, _static(arg.type))
        steps.append(run.run_stages(body))
        return run

    runs: list[_Run] = []
    budget = BUDGET
    try:
        for b in range(blocks):
            runs.append(interpret(b, budget))
            budget -= runs[-1].steps
    except _OverBudget:
        steps.clear()
        runs = [interpret(b, None) for b in range(blocks)]
    used = [i for i in range(len(steps[0]) if steps else 0) if any(s[i] for s in steps)]
    return runs, [[s[i] for s in steps] for i in used]


def _human(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.4g} {unit}"
    return f"{n} B"


def _copies(n: int) -> str:
    return f"{n} copy" if n == 1 else f"{n} copies"


def _amount(m: Move) -> str:
    if not m.bounded:
        return f"unknown ({m.bytes} B counted; see below)"
    return f"{m.bytes} B" if m.exact else f"<= {m.bytes} B"


def format_report(r: FunctionReport, target: Target) -> list[str]:
    """Exact byte counts first, readable units in parentheses."""
    lines = [f"report of @{r.name} on {target.name} ({target.cores} cores)"]
    if over := [lv for lv in r.levels if lv.capacity is not None and lv.used > lv.capacity]:
        lines.append("does not fit " + target.name + ": " + ", ".join(
            f"{lv.name} by {lv.used - lv.capacity} B ({_human(lv.used - lv.capacity)}, "
            f"{lv.used / lv.capacity:.2f}x its capacity)" for lv in over) + "; the figures below are what it would cost")
    lines.append("local memory per core:")
    for lv in r.levels:
        if lv.capacity is None:
            lines.append(f"  {lv.name}: {lv.used} B, not a local level of {target.name}")
        else:
            over = f", does not fit: {lv.used - lv.capacity} B ({_human(lv.used - lv.capacity)}) over" if (
                lv.used > lv.capacity) else ""
            lines.append(
                f"  {lv.name}: {lv.used} B of {lv.capacity} B = {100 * lv.used / lv.capacity:.1f}% "
                f"({_human(lv.used)} of {_human(lv.capacity)}){over}"
            )
        for b in lv.buffers:
            padded = f" ({b.unpadded} B aligned)" if b.unpadded != b.bytes else ""
            twice = f" x2 double-buffered = {b.total} B" if b.copies == 2 else ""
            lines.append(f"    {b.name} : {b.type} {b.bytes} B{padded}{twice}")
    for op in r.untiled:
        lines.append(f"untiled: {op} works on global memory directly, its traffic is not counted")
    if r.direct:
        ops = ", ".join(f"{n} {name}" for name, n in sorted(r.direct.items()))
        lines.append(f"not counted: {ops} reading or writing {target.global_level.name} directly")
    if r.moves is None:
        lines.append("bytes moved: the report needs static shapes (dynamic: " + ", ".join(r.dynamic) + ")")
        return lines
    blocks = len(r.block_bytes)
    lines.append(f"bytes moved (all {blocks} blocks):" if blocks > 1 else "bytes moved:")
    if not r.moves:
        lines.append("  none (no npu.copy)")
    g = target.global_level.name
    total, global_ = Move(), Move()
    for (src, dst), m in sorted(r.moves.items()):
        lines.append(f"  {src} -> {dst}: {_amount(m)} in {_copies(m.copies)} ({_human(m.bytes)})")
        total.add(m)
        if g in (src, dst):
            global_.add(m)
    lines.append(f"  total: {_amount(total)} in {_copies(total.copies)} ({_human(total.bytes)})")
    if blocks > 1:
        busiest = max(range(blocks), key=r.block_bytes.__getitem__)
        lines.append(
            f"  busiest block: {busiest} with {_amount(Move(r.block_bytes[busiest], 0, total.exact, total.bounded))}"
        )
    if r.argument_bytes:
        lines.append(
            f"global traffic: {_amount(global_)} = {global_.bytes / r.argument_bytes:.2f}x the {r.argument_bytes} B "
            f"of the arguments"
        )
    work = sorted(r.work.items())
    if work:
        lines.append("work (all blocks): " + ", ".join(
            f"{k.kind} {_amount(m).removesuffix(' B')} {'FLOP' if k.kind == 'matrix' else 'ops'} on {k.element}"
            for k, m in work))
    prediction = of_report(r, target)
    if prediction is not None:
        flop = sum(m.bytes for k, m in r.work.items() if k.kind == "matrix")
        lines += format_prediction(prediction, target, flop, global_.bytes)
    if total.exact and total.bounded:
        lines.append("exact: trip counts and tile sizes evaluated on the static shapes")
        if not all(m.exact for m in r.work.values()):
            lines += ["work: an upper bound:", *(f"  {c}" for c in r.caveats)]
    else:
        lines += ["upper bound:" if total.bounded else "not a bound:", *(f"  {c}" for c in r.caveats)]
    return lines


def _tilings(f: func.FuncOp) -> str:
    """The tile sizes the function's tile loops and fused nests were made with."""
    found: list[str] = []
    for o in f.walk():
        attr = FUSED.get(o)
        tiles = attr.tiles if attr is not None else TILES.get(o)
        if tiles is not None:
            text = ", ".join(f"{k} = {v}" for k, v in tiles.as_dict().items())
            if text not in found:
                found.append(text)
    return "; ".join(found) or "-"


def _figures(f: func.FuncOp, target: Target) -> dict[str, str]:
    """One function's figures by name, for a side-by-side table."""
    r = analyze(f, target)
    rows = {"tiles": _tilings(f)}
    for lv in r.levels:
        if lv.capacity is not None:
            rows[f"{lv.name} used"] = f"{_human(lv.used)} ({100 * lv.used / lv.capacity:.0f}%)"
    if r.moves is None:
        return rows
    g = target.global_level.name
    for (src, dst), m in sorted(r.moves.items()):
        rows[f"{src} -> {dst}"] = _human(m.bytes)
    rows["global traffic"] = _human(sum(m.bytes for k, m in r.moves.items() if g in k))
    for k, m in sorted(r.work.items()):
        rows[f"{k.kind} work ({k.element})"] = f"{m.bytes:.4g}"
    p = of_report(r, target)
    if p is not None:
        rows["predicted"] = f"{p.cycles:.4g} cycles ({p.seconds * 1e3:.4g} ms)"
        rows["bound by"] = p.bound
        rows["/ lower bound"] = f"{p.cycles / p.lower_bound:.2f}x" if p.lower_bound else "-"
    return rows


def compare(a: ModuleOp, b: ModuleOp, target: Target, labels: tuple[str, str]) -> str:
    """Two tiled modules' figures side by side, function by function (in order), as `//` lines."""
    out: list[str] = []
    fa, fb = defined_functions(a), defined_functions(b)
    for x, y in zip(fa, fb):
        left, right = _figures(x, target), _figures(y, target)
        keys = list(dict.fromkeys([*left, *right]))
        width = max(len(k) for k in keys)
        col = max(16, *(len(v) for v in left.values()), len(labels[0]))
        out.append(f"compare @{x.sym_name.data} with @{y.sym_name.data} on {target.name}")
        out.append(f"{'':{width}}  {labels[0]:<{col}}  {labels[1]}")
        out += [f"{k:{width}}  {left.get(k, '-'):<{col}}  {right.get(k, '-')}" for k in keys]
    if len(fa) != len(fb):
        out.append(f"the inputs have {len(fa)} and {len(fb)} functions: only the first {min(len(fa), len(fb))} compared")
    return "".join(f"// {line}\n" for line in out)


def report(module: ModuleOp, target: Target, names: dict[SSAValue, str] | None = None) -> str:
    """The report of every function with a body, as `//` comment lines (the output stays MLIR)."""
    out: list[str] = []
    for f in defined_functions(module):
        out += format_report(analyze(f, target, names), target)
    return "".join(f"// {line}\n" for line in out)
