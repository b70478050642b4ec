"""The tiled kernel in numbers, to compare two tilings: per memory level the local buffers and
how full the level is, and the bytes every `npu.copy` moves between levels over the whole run.

    npugrad-opt bce.mlir --target npu-a2 --report

The bytes come from interpreting the index arithmetic of each function on its static shapes: the
tile loops run (for every block: `block_idx` = 0 .. cores-1, `block_dim` = cores) and each copy
adds the bytes of the sizes it has at that point, so partial tiles count what they move. Where a
size or a trip count cannot be evaluated the figure is an upper bound and says so.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerAttr, MemRefType, ModuleOp
from xdsl.ir import Block, Operation, SSAValue

from npugrad.dialect import GradOp
from npugrad.dialect.npu import AllocLocalOp, BlockDimOp, BlockIdxOp, CopyOp, element_bytes, level_of
from npugrad.passes.check_capacity import footprint
from npugrad.targets import Target, TargetError

# Ops interpreted per function before loops of more than FALLBACK_TRIPS trips are counted as
# trips x one iteration at full tile size (an upper bound) instead of being run.
BUDGET = 400_000
FALLBACK_TRIPS = 8


@dataclass
class Buffer:
    name: str
    type: str
    bytes: int  # one copy, padded to the level's alignment
    copies: int  # 2 when double-buffered

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


@dataclass
class FunctionReport:
    name: str
    levels: list[Level]
    moves: dict[tuple[str, str], Move] | None  # None: shapes are not static
    dynamic: list[str] = field(default_factory=list)  # arguments with dynamic shapes
    argument_bytes: int = 0
    block_bytes: list[int] = field(default_factory=list)  # bytes moved by each block
    caveats: list[str] = field(default_factory=list)
    untiled: list[str] = field(default_factory=list)  # grad ops still on global memory


class _OverBudget(Exception):
    pass


def _bytes(t: MemRefType, shape: tuple[int | None, ...]) -> int | None:
    n = 1
    for d in shape:
        if d is None:
            return None
        n *= d
    return n * element_bytes(t.element_type)


def _static(t) -> tuple[int | None, ...]:
    return tuple(None if d == DYNAMIC_INDEX else d for d in t.get_shape())


def _div(a: int, b: int) -> int:
    """Division rounding toward zero, as arith.divsi."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_BINARY: dict[str, Callable[[int, int], int]] = {
    "arith.addi": operator.add,
    "arith.subi": operator.sub,
    "arith.muli": operator.mul,
    "arith.divsi": _div,
    "arith.divui": operator.floordiv,
    "arith.floordivsi": operator.floordiv,
    "arith.ceildivsi": lambda a, b: -(-a // b),
    "arith.ceildivui": lambda a, b: -(-a // b),
    "arith.remsi": lambda a, b: a - _div(a, b) * b,
    "arith.remui": operator.mod,
    "arith.minsi": min,
    "arith.minui": min,
    "arith.maxsi": max,
    "arith.maxui": max,
    "arith.andi": operator.and_,
    "arith.ori": operator.or_,
    "arith.xori": operator.xor,
    "arith.shli": operator.lshift,
    "arith.shrsi": operator.rshift,
    "arith.shrui": operator.rshift,
}
_CASTS = ("arith.index_cast", "arith.index_castui", "arith.extsi", "arith.extui", "arith.trunci")
# arith.cmpi predicates: eq ne slt sle sgt sge ult ule ugt uge.
_CMP = (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge) + (
    operator.lt, operator.le, operator.gt, operator.ge)


class _Interpreter:
    """Runs one function's index arithmetic and loops on constants, adding up what copies move."""

    def __init__(self, f: func.FuncOp, target: Target, block: int, blocks: int, fallback: bool):
        self.target = target
        self.block, self.blocks = block, blocks
        self.fallback = fallback
        self.values: dict[SSAValue, int | None] = {}
        self.shapes: dict[SSAValue, tuple[int | None, ...]] = {}
        self.bounds: dict[SSAValue, int] = {}  # elements a view cannot exceed
        self.moves: dict[tuple[str, str], Move] = {}
        self.caveats: set[str] = set()
        self.steps = 0
        self.weight = 1  # times the op being interpreted runs (loops counted, not run)
        self.bounded = True
        for arg in f.body.block.args:
            if isinstance(arg.type, MemRefType):
                self._memref(arg, _static(arg.type))
        self.run(f.body.block)

    def _memref(self, v: SSAValue, shape: tuple[int | None, ...], bound: int | None = None) -> None:
        self.shapes[v] = shape
        n = 1
        for d in shape:
            n = n * d if d is not None and n is not None else None  # type: ignore[operator]
        self.bounds[v] = n if n is not None else bound if bound is not None else 0

    def run(self, block: Block) -> list[int | None]:
        """Interpret a block; the values it yields."""
        for op in block.ops:
            self.steps += 1
            if self.steps > BUDGET and not self.fallback:
                raise _OverBudget
            if op.name in ("scf.yield", "affine.yield"):
                return [self.values.get(v) for v in op.operands]
            self.op(op)
        return []

    def op(self, op: Operation) -> None:
        get = self.values.get
        name = op.name
        if name == "arith.constant":
            value = op.properties.get("value") or op.attributes.get("value")
            self.values[op.results[0]] = value.value.data if isinstance(value, IntegerAttr) else None
        elif name in _BINARY:
            a, b = get(op.operands[0]), get(op.operands[1])
            try:
                self.values[op.results[0]] = None if a is None or b is None else _BINARY[name](a, b)
            except (ZeroDivisionError, ValueError):
                self.values[op.results[0]] = None
        elif name in _CASTS:
            self.values[op.results[0]] = get(op.operands[0])
        elif name == "arith.cmpi":
            a, b = get(op.operands[0]), get(op.operands[1])
            p = op.properties["predicate"].value.data  # type: ignore[attr-defined]
            self.values[op.results[0]] = None if a is None or b is None else int(_CMP[p](a, b))
        elif name == "arith.select":
            c, a, b = (get(v) for v in op.operands)
            self.values[op.results[0]] = None if c is None else a if c else b
        elif name in ("affine.apply", "affine.min", "affine.max"):
            self._affine(op)
        elif isinstance(op, BlockIdxOp):
            self.values[op.result] = self.block
        elif isinstance(op, BlockDimOp):
            self.values[op.result] = self.blocks
        elif name == "memref.dim":
            shape, i = self.shapes.get(op.operands[0]), get(op.operands[1])
            self.values[op.results[0]] = shape[i] if shape is not None and i is not None and 0 <= i < len(shape) else None
        elif name == "memref.subview":
            self._subview(op)
        elif isinstance(op, CopyOp):
            self._copy(op)
        elif name == "scf.for":
            self._for(op)
        elif name == "scf.if":
            self._if(op)
        else:
            self._other(op)

    def _affine(self, op: Operation) -> None:
        m = op.properties["map"].data  # type: ignore[attr-defined]
        args = [self.values.get(v) for v in op.operands]
        result = None
        if None not in args:
            try:
                out = m.eval(args[: m.num_dims], args[m.num_dims :])  # type: ignore[arg-type]
                result = out[0] if op.name == "affine.apply" else min(out) if op.name == "affine.min" else max(out)
            except ZeroDivisionError:
                pass
        self.values[op.results[0]] = result

    def _subview(self, op: Operation) -> None:
        dynamic = iter(op.sizes)  # type: ignore[attr-defined]
        sizes = [self.values.get(next(dynamic)) if s == DYNAMIC_INDEX else s for s in op.static_sizes.get_values()]  # type: ignore[attr-defined]
        result = op.results[0]
        kept = _drop_units(sizes, result.type.get_shape())  # type: ignore[attr-defined]
        self._memref(result, kept if kept is not None else _static(result.type), self.bounds.get(op.operands[0]))

    def _copy(self, op: CopyOp) -> None:
        src, dst = self.shapes.get(op.source), self.shapes.get(op.target)
        t = op.source.type
        assert isinstance(t, MemRefType)
        shape = tuple(a if a is not None else b for a, b in zip(src or (), dst or ())) if src and dst else src or dst or ()
        size = _bytes(t, shape) if src is not None or dst is not None else None
        exact = size is not None
        if size is None:
            size = min(self.bounds.get(op.source, 0), self.bounds.get(op.target, 0)) * element_bytes(t.element_type)
            self.caveats.add("copy sizes that could not be evaluated are counted as their largest possible tile")
        g = self.target.global_level.name
        key = (level_of(op.source.type) or g, level_of(op.target.type) or g)
        m = self.moves.setdefault(key, Move())
        m.bytes += size * self.weight
        m.copies += self.weight
        m.exact &= exact
        m.bounded &= self.bounded

    @contextmanager
    def _repeated(self, times: int | None, why: str) -> Iterator[None]:
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

    def _for(self, op: Operation) -> None:
        lb, ub, step = (self.values.get(v) for v in op.operands[:3])
        carried = [self.values.get(v) for v in op.operands[3:]]
        body = op.regions[0].block
        iv, *args = body.args
        trips = None if None in (lb, ub, step) or step <= 0 else max(0, -(-(ub - lb) // step))  # type: ignore[operator]
        if trips is None or (self.fallback and trips > FALLBACK_TRIPS):
            why = (f"loop at {_where(op)} has bounds that are not constants: its copies are counted once"
                   if trips is None else
                   f"loops of more than {FALLBACK_TRIPS} trips are counted as trips x one tile at full size "
                   "(the exact count takes too long)")
            with self._repeated(trips, why):
                self.values[iv] = None
                for a in args:
                    self.values[a] = None
                self.run(body)
            for r in op.results:
                self.values[r] = None
            return
        for k in range(trips):
            self.values[iv] = lb + k * step  # type: ignore[operator]
            for a, v in zip(args, carried):
                self.values[a] = v
            carried = self.run(body)
        for r, v in zip(op.results, carried):
            self.values[r] = v

    def _if(self, op: Operation) -> None:
        cond = self.values.get(op.operands[0])
        regions = [r for r in op.regions if r.blocks]
        if cond is not None:
            region = op.regions[0] if cond else op.regions[1]
            out = self.run(region.block) if region.blocks else []
            for r, v in zip(op.results, out):
                self.values[r] = v
            return
        # Both branches may run as far as we know: count the larger of the two.
        saved, branches = self.moves, []
        for region in regions:
            self.moves = {}
            self.run(region.block)
            branches.append(self.moves)
        self.moves = saved
        for key in {k for b in branches for k in b}:
            best = max((b.get(key, Move()) for b in branches), key=lambda m: m.bytes)
            m = self.moves.setdefault(key, Move())
            m.bytes += best.bytes
            m.copies += best.copies
            m.exact = False
            m.bounded &= best.bounded
        self.caveats.add(f"the condition of the scf.if at {_where(op)} is not a constant: the larger branch is counted")
        for r in op.results:
            self.values[r] = None

    def _other(self, op: Operation) -> None:
        for r in op.results:
            if isinstance(r.type, MemRefType):
                source = next((v for v in op.operands if isinstance(v.type, MemRefType)), None)
                shape = _static(r.type)
                if op.name == "memref.cast" and source is not None and len(self.shapes.get(source, ())) == len(shape):
                    shape = self.shapes[source]
                elif op.name == "memref.collapse_shape" and source is not None:
                    shape = self._collapsed(op, source) or shape
                self._memref(r, shape, self.bounds.get(source) if source is not None else None)
            else:
                self.values[r] = None
        for region in op.regions:
            for block in region.blocks:
                with self._repeated(None, f"{op.name} at {_where(op)} is not interpreted: its copies are counted once"):
                    for a in block.args:
                        self.values[a] = None
                    self.run(block)

    def _collapsed(self, op: Operation, source: SSAValue) -> tuple[int | None, ...] | None:
        shape = self.shapes.get(source)
        groups = op.properties.get("reassociation") or op.attributes.get("reassociation")
        if shape is None or groups is None:
            return None
        out: list[int | None] = []
        for group in groups.data:  # type: ignore[attr-defined]
            n: int | None = 1
            for i in group.data:
                d = shape[i.value.data]
                n = n * d if n is not None and d is not None else None
            out.append(n)
        return tuple(out)


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
            n = _bytes(arg.type, _static(arg.type))
            if n is None:
                dynamic.append(f"%{arg.name_hint or i}: {arg.type}")
            else:
                total += n
    return total, dynamic


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
        level.buffers.append(Buffer(f"%{label}", str(buf.result.type), size, copies))
    argument_bytes, dynamic = _argument_bytes(f)
    report = FunctionReport(f.sym_name.data, list(levels.values()), None, dynamic, argument_bytes)
    report.untiled = [
        o.name for o in f.walk()
        if isinstance(o, GradOp) and any(level_of(v.type) is None for v in o.operands if isinstance(v.type, MemRefType))
    ]
    if dynamic:
        return report
    blocks = target.cores if any(isinstance(o, BlockIdxOp | BlockDimOp) for o in f.walk()) else 1
    runs = _interpret_blocks(f, target, blocks)
    report.moves = {}
    for run in runs:
        report.block_bytes.append(sum(m.bytes for m in run.moves.values()))
        for key, m in run.moves.items():
            total = report.moves.setdefault(key, Move())
            total.bytes += m.bytes
            total.copies += m.copies
            total.exact &= m.exact
            total.bounded &= m.bounded
        report.caveats += [c for c in sorted(run.caveats) if c not in report.caveats]
    return report


def _interpret_blocks(f: func.FuncOp, target: Target, blocks: int) -> list[_Interpreter]:
    try:
        return [_Interpreter(f, target, b, blocks, fallback=False) for b in range(blocks)]
    except _OverBudget:
        return [_Interpreter(f, target, b, blocks, fallback=True) for b in range(blocks)]


def _human(n: int) -> str:
    for unit, factor in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= factor:
            return f"{n / factor:.4g} {unit}"
    return f"{n} B"


def _amount(n: int, exact: bool, bounded: bool) -> str:
    if not bounded:
        return f"unknown ({n} B counting each loop with non-constant bounds once)"
    return f"{n} B" if exact else f"<= {n} B"


def format_report(r: FunctionReport, target: Target) -> list[str]:
    """Exact byte counts first, readable units in parentheses."""
    lines = [f"report of @{r.name} on {target.name} ({target.cores} cores)", "local memory per core:"]
    for lv in r.levels:
        if lv.capacity is None:
            lines.append(f"  {lv.name}: {lv.used} B, not a level of {target.name}")
        else:
            lines.append(
                f"  {lv.name}: {lv.used} B of {lv.capacity} B = {100 * lv.used / lv.capacity:.1f}% "
                f"({_human(lv.used)} of {_human(lv.capacity)})"
            )
        for b in lv.buffers:
            twice = f" x2 double-buffered = {b.total} B" if b.copies == 2 else ""
            lines.append(f"    {b.name} : {b.type} {b.bytes} B{twice}")
    for op in r.untiled:
        lines.append(f"untiled: {op} works on global memory directly, its traffic is not counted")
    if r.moves is None:
        lines.append("bytes moved: the report needs static shapes (dynamic: " + ", ".join(r.dynamic) + ")")
        return lines
    blocks = len(r.block_bytes)
    lines.append(f"bytes moved (all {blocks} blocks):" if blocks > 1 else "bytes moved:")
    if not r.moves:
        lines.append("  none (no npu.copy)")
    g = target.global_level.name
    total, copies, exact, bounded, global_bytes = 0, 0, True, True, 0
    for (src, dst), m in sorted(r.moves.items()):
        lines.append(f"  {src} -> {dst}: {_amount(m.bytes, m.exact, m.bounded)} in {m.copies} copies ({_human(m.bytes)})")
        total += m.bytes
        copies += m.copies
        exact &= m.exact
        bounded &= m.bounded
        if g in (src, dst):
            global_bytes += m.bytes
    lines.append(f"  total: {_amount(total, exact, bounded)} in {copies} copies ({_human(total)})")
    if blocks > 1:
        busiest = max(range(blocks), key=r.block_bytes.__getitem__)
        lines.append(f"  busiest block: {busiest} with {_amount(r.block_bytes[busiest], exact, bounded)}")
    if r.argument_bytes:
        # Flops are fixed by the shapes, so arithmetic intensity (flops per global byte) compares
        # two tilings as this ratio does.
        intensity = f"{r.argument_bytes / global_bytes:.2f}" if global_bytes else "-"
        lines.append(
            f"global traffic: {_amount(global_bytes, exact, bounded)} = {global_bytes / r.argument_bytes:.2f}x "
            f"the {r.argument_bytes} B of the arguments; intensity {intensity} argument bytes per global byte"
        )
    if exact:
        lines.append("exact: trip counts and tile sizes evaluated on the static shapes")
    else:
        lines += ["upper bound:" if bounded else "not a bound:", *(f"  {c}" for c in r.caveats)]
    return lines


def report(module: ModuleOp, target: Target, names: dict[SSAValue, str] | None = None) -> str:
    """The report of every function with a body, as `//` comment lines (the output stays MLIR)."""
    out: list[str] = []
    for f in (o for o in module.walk() if isinstance(o, func.FuncOp) and not o.is_declaration):
        out += format_report(analyze(f, target, names), target)
    return "".join(f"// {line}\n" for line in out)
