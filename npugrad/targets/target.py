"""Hardware descriptions as data: memory levels (name, capacity, alignment, the unit that reads
them, the level they are filled from), core count, vector width, and what a cost model needs:
the clock, each unit's rate per kind of work and element type, each path's bandwidth between
levels. A target is a small TOML file:

    name = "my-npu"
    cores = 8
    vector_bits = 1024
    double_buffer = true
    [[level]]
    name = "gm"
    kind = "global"
    [[level]]
    name = "ub"
    capacity = "192KiB"
    alignment = 32
    unit = "vector"
    parent = "gm"

and, for the cost model (npugrad/analysis/cost.py; every figure optional, nominal defaults):

    clock_ghz = 1.8
    [[unit]]                  # who does which work, how fast (per core, per cycle)
    name = "vector"
    work = ["vector"]         # matrix: contraction FLOP; vector: element operations on local
    overhead = 12             # tiles; scalar: operations on global memory. Cycles per instruction.
    rate = { vector = { f32 = 64, bf16 = 128 } }      # per element type; "any" matches every type
    [[path]]                  # a copy between two levels: bytes per cycle per core, cycles per copy
    from = "gm"
    to = "ub"
    bandwidth = 56
    latency = 24

The global level may give `bandwidth` (bytes per cycle shared by all cores), a shared cache in
front of it (`cache`, `cache_bandwidth`) and `latency` (cycles from a load to its data: with the
bandwidth, how far ahead loops streaming from it prefetch, Target.stream_prefetch_bytes). Shipped: `npu-a2` (this folder, figures cited there) and
`host`, read off the machine it runs on (`npugrad calibrate` measures it instead).
"""

from __future__ import annotations

import math
import os
import platform
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache, cached_property
from pathlib import Path

HERE = Path(__file__).parent
UNITS = ("cube", "vector", "scalar", "mte", "cpu")
# What the cost model counts: matrix = FLOP of contractions (linalg.generic), vector = element
# operations of loops on local buffers, scalar = operations of loops reading or writing global memory.
WORK = ("matrix", "vector", "scalar")
# What the tiling passes place in local memory, and the level each goes to (the [roles] table):
# vector = operands and results of elementwise work; stage = matrix tiles fetched from global
# memory; matrix_a / matrix_b = the left / right operand of a matrix-unit contraction;
# accumulator = its float32 result.
ROLES = ("vector", "stage", "matrix_a", "matrix_b", "accumulator")
# The most cores a target may have: the cost model and the tiling report follow every core's
# blocks (a report for a million took 40 s), and no NPU or CPU socket comes near it.
MAX_CORES = 1 << 16
# The widest and the most vector registers a target may have (NEC SX-Aurora's: 64 of 16384 bits):
# the micro-kernels unroll lanes x registers, and 1024 registers or 2^20 bits compiled for minutes.
MAX_VECTOR_BITS = 1 << 14
MAX_VECTOR_REGISTERS = 64
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
_FACTORS = {None: 1, "b": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20, "gib": 1 << 30, "gb": 1 << 30}


# Type names as a TOML file spells them.
_TOML_TYPES = {int: "an integer", str: "a string", bool: "a boolean", list: "an array of tables", dict: "a table"}


class TargetError(ValueError):
    """A target description that cannot be used; the message names the file and the field."""


def x86_64() -> bool:
    """Whether this machine, which runs every target's kernels (the JIT's), is an x86-64 one."""
    return platform.machine().lower() in ("x86_64", "amd64")


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    capacity: int | None  # bytes per core; None for global memory
    alignment: int = 1
    unit: str = "cpu"
    parent: str | None = None
    # Global memory only: bytes per cycle shared by all cores, and a shared cache in front of it
    # (bytes, bytes per cycle) that serves what is read more than once when the arguments fit it;
    # `latency`: cycles from a load's request to its data (what a stream must be asked for ahead).
    bandwidth: float | None = None
    cache: int | None = None
    cache_bandwidth: float | None = None
    latency: float | None = None

    @property
    def is_global(self) -> bool:
        return self.capacity is None


@dataclass(frozen=True)
class Unit:
    """A unit of a core that does work: the kinds of work (WORK) it does, at `rates`
    ((work, element type or "any", per cycle)), and the cycles each instruction costs on top."""

    name: str
    work: tuple[str, ...]
    rates: tuple[tuple[str, str, float], ...]
    overhead: float = 0.0

    def rate(self, work: str, element: str) -> float | None:
        found = {(w, t): r for w, t, r in self.rates}
        return found.get((work, element), found.get((work, "any")))


@dataclass(frozen=True)
class CopyPath:
    """Copies from level `source` to level `target`: bytes per cycle per core, and the cycles
    each copy costs on top (its setup)."""

    source: str
    target: str
    bandwidth: float
    latency: float = 0.0


@dataclass(frozen=True)
class Target:
    name: str
    cores: int
    vector_bits: int
    levels: tuple[MemoryLevel, ...]
    vector_registers: int = 0
    double_buffer: bool = False
    roles: tuple[tuple[str, str], ...] = ()
    source: str = field(default="", compare=False)
    # The instruction set of a CPU target, as LLVM names it (e.g. "x86-64-v3", "+avx512bf16"):
    # what the `asm` stage prints code for. Empty: the machine running npugrad.
    llvm_cpu: str = ""
    llvm_features: str = ""
    clock_ghz: float = 1.0
    units: tuple[Unit, ...] = ()
    paths: tuple[CopyPath, ...] = ()
    # Where the cost figures come from ("" = none given: the cost model uses nominal ones).
    costs: str = field(default="", compare=False)
    # The micro-kernel's register block (MR rows, NR vectors) where the description gives it;
    # None: derived from vector_registers (vectorize_contractions.block_shape).
    register_block: tuple[int, int] | None = None

    def has_feature(self, feature: str) -> bool:
        """Whether `llvm_features` enables `feature` (LLVM's name, e.g. "avx512bf16")."""
        return self._says("+", feature)

    def lacks_feature(self, feature: str) -> bool:
        """Whether `llvm_features` disables `feature` (as the host's list does for every feature
        the CPU lacks: "-fma" on a CPU without FMA instructions). A target file that names only
        what it adds lacks nothing it does not name."""
        return self._says("-", feature)

    def _says(self, sign: str, feature: str) -> bool:
        return sign + feature in self.llvm_features.split(",")

    def unit_for(self, work: str) -> Unit | None:
        """The unit doing `work` (one of WORK), or None when the target names none."""
        return next((u for u in self.units if work in u.work), None)

    # Lookup tables, built once per target (a tile search asks tens of thousands of times);
    # derived from the fields, so equality and hashing stay the fields'. The first entry wins.
    @cached_property
    def _paths_by_ends(self) -> dict[tuple[str, str], CopyPath]:
        table: dict[tuple[str, str], CopyPath] = {}
        for p in self.paths:
            table.setdefault((p.source, p.target), p)
        return table

    @cached_property
    def _levels_by_name(self) -> dict[str, MemoryLevel]:
        table: dict[str, MemoryLevel] = {}
        for lv in self.levels:
            table.setdefault(lv.name, lv)
        return table

    @cached_property
    def _role_levels(self) -> dict[str, str]:
        return dict(self.roles)

    def path(self, source: str, target: str) -> CopyPath | None:
        return self._paths_by_ends.get((source, target))

    def has_path(self, source: str, target: str) -> bool:
        """Whether a copy can go straight from `source` to `target`: a target that lists no paths
        (a CPU, a file without cost figures) can copy between any two levels."""
        return not self.paths or self.path(source, target) is not None

    def role(self, role: str) -> MemoryLevel:
        """The level that holds `role` (one of ROLES)."""
        return self.level(self._role_levels[role])

    def level(self, name: str) -> MemoryLevel:
        if (lv := self._levels_by_name.get(name)) is not None:
            return lv
        raise TargetError(f"target '{self.name}' has no memory level '{name}' (levels: {', '.join(lv.name for lv in self.levels)})")

    @cached_property
    def global_level(self) -> MemoryLevel:
        return next(lv for lv in self.levels if lv.is_global)

    def local_levels(self, unit: str | None = None) -> list[MemoryLevel]:
        return [lv for lv in self.levels if not lv.is_global and (unit is None or lv.unit == unit)]

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    @cached_property
    def stream_prefetch_bytes(self) -> int:
        """How far ahead a loop streaming from global memory asks for each stream's lines: what
        one core consumes while a load is in flight (Little's law: the global level's latency
        times one core's share of its bandwidth), in whole lines of the smallest local level's
        alignment; no further than the largest local level holds (lines asked for earlier would
        be gone before their turn). 0 where the target gives neither (no prefetch)."""
        g = self.global_level
        if not g.latency or not g.bandwidth:
            return 0
        line = min((lv.alignment for lv in self.local_levels()), default=64)
        line = line if line >= 16 else 64
        held = max((lv.capacity or 0 for lv in self.local_levels()), default=0) or 1 << 20
        return -(-int(min(g.latency * g.bandwidth / self.cores, held)) // line) * line

    @cached_property
    def stream_store_bytes(self) -> int:
        """From how many bytes a core writes to global memory in one loop, writing nothing it
        reads there, the loop's stores bypass the caches (x86 non-temporal stores): one core's
        share of the largest local level. Written through the caches, each line is first read
        from memory (the write-allocate), one more transfer per line written, to be kept for a
        reader the caches could not hold that much for anyway (glibc's memcpy takes its
        non-temporal path at a similar share of the shared cache). 0 where the target has no
        local level, or where the machine code is not x86-64's: every target's kernels run on
        this machine, and the loop's store fence (sfence) is an x86 instruction."""
        if not x86_64():
            return 0
        return max((lv.capacity or 0 for lv in self.local_levels()), default=0)

    def key(self) -> tuple:
        """What compiled code depends on (for compile caches)."""
        return (self.name, self.cores, self.vector_bits, self.vector_registers, self.double_buffer, self.levels,
                self.roles, self.llvm_cpu, self.llvm_features, self.clock_ghz, self.units, self.paths,
                self.register_block)


def size_bytes(text: str) -> int | None:
    """A size written in bytes ("65536", "64KiB", "1 MiB"), or None where `text` is not one."""
    m = _SIZE.match(text)
    return int(m.group(1)) * _FACTORS[m.group(2).lower() if m.group(2) else None] if m else None


def _size(where: str, value) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (size := size_bytes(value)) is not None:
        pass
    else:
        raise TargetError(f"{where} must be a size in bytes (e.g. 65536 or \"64KiB\"), got {value!r}")
    if size <= 0:
        raise TargetError(f"{where} must be positive, got {value!r}")
    return size


def _field(where: str, table: dict, name: str, kind, default=None, required: bool = True):
    if name not in table:
        if required:
            raise TargetError(f"{where}: missing field '{name}'")
        return default
    value = table[name]
    if kind is int and (not isinstance(value, int) or isinstance(value, bool)):
        raise TargetError(f"{where}: field '{name}' must be an integer, got {value!r}")
    if kind is not int and not isinstance(value, kind):
        names = " or ".join(_TOML_TYPES[k] for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise TargetError(f"{where}: field '{name}' must be {names}, got {value!r}")
    return value


def from_dict(data: dict, source: str = "<dict>") -> Target:
    known = {"name", "cores", "vector_bits", "vector_registers", "double_buffer", "level", "roles", "llvm_cpu",
             "llvm_features", "clock_ghz", "unit", "path", "costs", "register_block"}
    if unknown := set(data) - known:
        raise TargetError(f"{source}: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    name = _field(source, data, "name", str)
    if not name.strip():
        raise TargetError(f"{source}: field 'name' must not be empty (reports, caches and errors name the target by it)")
    cores = _field(source, data, "cores", int)
    if not 1 <= cores <= MAX_CORES:
        raise TargetError(f"{source}: field 'cores' must be from 1 to {MAX_CORES}, got {cores}")
    vector_bits = _field(source, data, "vector_bits", int)
    # A power of two: the micro-kernels transpose blocks of lanes x lanes in log2(lanes) rounds of
    # shuffles (vectorize_contractions.transposed); 384 bits' 12 lanes transposed wrongly, 96's 3
    # built a vector.shuffle the verifier rejected.
    if vector_bits < 32 or vector_bits & (vector_bits - 1) or vector_bits > MAX_VECTOR_BITS:
        raise TargetError(f"{source}: field 'vector_bits' must be a power of two from 32 to {MAX_VECTOR_BITS}, "
                          f"got {vector_bits}")
    levels_data = _field(source, data, "level", list)
    levels: list[MemoryLevel] = []
    misplaced: list[str] = []  # said once the file has one global level (a second is the error then)
    for i, lv in enumerate(levels_data):
        where = f"{source}: level {i + 1}"
        if not isinstance(lv, dict):
            raise TargetError(f"{where} must be a table ([[level]])")
        if unknown := set(lv) - {"name", "kind", "capacity", "alignment", "unit", "parent", "bandwidth", "cache",
                                 "cache_bandwidth", "latency"}:
            raise TargetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
        lname = _field(where, lv, "name", str)
        where = f"{source}: level '{lname}'"
        # The name is written bare in IR, `#npu.mem<name>`, which must parse back.
        if not _IDENTIFIER.match(lname):
            raise TargetError(f"{where}: field 'name' must be an identifier (a letter or _, then letters, digits, _ $ .)")
        kind = _field(where, lv, "kind", str, "local", required=False)
        if kind not in ("global", "local"):
            raise TargetError(f"{where}: field 'kind' must be 'global' or 'local', got {kind!r}")
        if kind == "global":
            if extra := {"capacity", "alignment", "unit", "parent"} & set(lv):
                misplaced.append(f"{where}: field '{min(extra)}' is for local levels only")
            cache = lv.get("cache")
            levels.append(MemoryLevel(
                lname, None, 1, "mte", None, _rate(where, lv, "bandwidth"),
                None if cache is None else _size(f"{where}: field 'cache'", cache), _rate(where, lv, "cache_bandwidth"),
                _rate(where, lv, "latency")))
            continue
        if extra := {"bandwidth", "cache", "cache_bandwidth", "latency"} & set(lv):
            raise TargetError(f"{where}: field '{min(extra)}' is for the global level only")
        capacity = _size(f"{where}: field 'capacity'", _field(where, lv, "capacity", (int, str)))
        alignment = _field(where, lv, "alignment", int, 1, required=False)
        if alignment < 1 or alignment & (alignment - 1):
            raise TargetError(f"{where}: field 'alignment' must be a power of two, got {alignment}")
        unit = _field(where, lv, "unit", str)
        if unit not in UNITS:
            raise TargetError(f"{where}: field 'unit' must be one of {', '.join(UNITS)}, got {unit!r}")
        parent = _field(where, lv, "parent", str)
        levels.append(MemoryLevel(lname, capacity, alignment, unit, parent))
    names = [lv.name for lv in levels]
    if dup := next((n for i, n in enumerate(names) if n in names[:i]), None):
        raise TargetError(f"{source}: level '{dup}' is defined twice (field 'name' must be unique)")
    if sum(lv.is_global for lv in levels) != 1:
        raise TargetError(f"{source}: exactly one level must have kind = \"global\"")
    if misplaced:
        raise TargetError(misplaced[0])
    parents = {lv.name: lv.parent for lv in levels}
    for lv in levels:
        if lv.parent is not None and lv.parent not in names:
            raise TargetError(f"{source}: level '{lv.name}' has parent '{lv.parent}', which is not a level")
        seen, up = {lv.name}, lv.parent
        while up is not None:
            if up in seen:
                raise TargetError(f"{source}: level '{lv.name}': field 'parent' makes a cycle, which never reaches global memory")
            seen.add(up)
            up = parents[up]
    roles = _field(source, data, "roles", dict)
    local = [lv.name for lv in levels if not lv.is_global]
    # A misspelt role is named as such, before the role it was meant to be is missed.
    for role, level in roles.items():
        if role not in ROLES:
            raise TargetError(f"{source}: [roles] has unknown role '{role}' (known: {', '.join(ROLES)})")
        if level not in local:
            raise TargetError(f"{source}: [roles] {role} = {level!r} must name a local level ({', '.join(local)})")
    for role in ROLES:
        if role not in roles:
            raise TargetError(f"{source}: [roles] needs '{role}' (the level holding {role} tiles)")
    vector_registers = _field(source, data, "vector_registers", int, 0, required=False)
    if not 0 <= vector_registers <= MAX_VECTOR_REGISTERS:
        raise TargetError(f"{source}: field 'vector_registers' must be from 0 to {MAX_VECTOR_REGISTERS}, "
                          f"got {vector_registers}")
    register_block = _register_block(source, data.get("register_block"), vector_registers)
    clock = _rate(source, data, "clock_ghz")
    units = tuple(_unit(f"{source}: unit {i + 1}", u) for i, u in enumerate(_field(source, data, "unit", list, [], required=False)))
    paths = tuple(_path(f"{source}: path {i + 1}", p, names) for i, p in enumerate(_field(source, data, "path", list, [], required=False)))
    given = "clock_ghz" in data or units or paths
    return Target(
        name, cores, vector_bits, tuple(levels),
        vector_registers,
        _field(source, data, "double_buffer", bool, False, required=False),
        tuple(sorted(roles.items())),
        source,
        _field(source, data, "llvm_cpu", str, "", required=False),
        _features(source, _field(source, data, "llvm_features", str, "", required=False)),
        clock if clock is not None else 1.0,
        units,
        paths,
        _field(source, data, "costs", str, source if given else "", required=False),
        register_block,
    )


def _register_block(where: str, value, vector_registers: int) -> tuple[int, int] | None:
    """`register_block = [MR, NR]`: the micro-kernel's MR x NR accumulators, NR vectors of B and a
    broadcast of A, all in registers (MR·NR + NR + 1 of them); None where it is not given."""
    if value is None:
        return None
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in value)):
        raise TargetError(f"{where}: field 'register_block' must be two positive integers [MR, NR] (rows of C, "
                          f"vectors of B), got {value!r}")
    mr, nr = value
    if vector_registers == 0:
        raise TargetError(f"{where}: field 'register_block' needs 'vector_registers' (the micro-kernel's block is "
                          f"held in them)")
    if mr * nr + nr + 1 > vector_registers:
        raise TargetError(f"{where}: field 'register_block' = [{mr}, {nr}] needs {mr * nr + nr + 1} vector registers "
                          f"({mr} x {nr} accumulators, {nr} vectors of B, a broadcast of A), more than the "
                          f"{vector_registers} of 'vector_registers'")
    return mr, nr


_FEATURE = re.compile(r"^[+-][A-Za-z0-9_.-]+$")


def _features(where: str, features: str) -> str:
    """LLVM's feature string: +name or -name, comma-separated (LLVM asserts on anything else)."""
    if bad := [f for f in features.split(",") if not _FEATURE.match(f)] if features else []:
        raise TargetError(f"{where}: field 'llvm_features' must list features as +name or -name, comma-separated "
                          f"(\"+avx2,-avx512f\"), got {bad[0]!r}")
    return features


def _rate(where: str, table: dict, name: str) -> float | None:
    """A positive number (bytes or operations per cycle, GHz), or None when absent."""
    if name not in table:
        return None
    value = table[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise TargetError(f"{where}: field '{name}' must be a finite positive number, got {value!r}")
    return float(value)


def _unit(where: str, data) -> Unit:
    if not isinstance(data, dict):
        raise TargetError(f"{where} must be a table ([[unit]])")
    if unknown := set(data) - {"name", "work", "rate", "overhead"}:
        raise TargetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    name = _field(where, data, "name", str)
    where = f"{where} ('{name}')"
    work = _field(where, data, "work", list)
    if not work or any(w not in WORK for w in work):
        raise TargetError(f"{where}: field 'work' must list some of {', '.join(WORK)}, got {work!r}")
    rates = []
    for kind, table in _field(where, data, "rate", dict).items():
        if kind not in work:
            raise TargetError(f"{where}: [rate] names '{kind}', which is not in its 'work' ({', '.join(work)})")
        if not isinstance(table, dict):
            raise TargetError(f"{where}: rate.{kind} must be a table of element type = per cycle")
        for element in table:
            rates.append((kind, element, _rate(f"{where}: rate.{kind}", table, element)))
    overhead = data.get("overhead", 0)
    if isinstance(overhead, bool) or not isinstance(overhead, int | float) or not 0 <= overhead < math.inf:
        raise TargetError(f"{where}: field 'overhead' must be a finite number >= 0, got {overhead!r}")
    return Unit(name, tuple(work), tuple(rates), float(overhead))


def _path(where: str, data, levels: list[str]) -> CopyPath:
    if not isinstance(data, dict):
        raise TargetError(f"{where} must be a table ([[path]])")
    if unknown := set(data) - {"from", "to", "bandwidth", "latency"}:
        raise TargetError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}")
    ends = [_field(where, data, end, str) for end in ("from", "to")]
    for end, level in zip(("from", "to"), ends):
        if level not in levels:
            raise TargetError(f"{where}: field '{end}' names '{level}', which is not a level ({', '.join(levels)})")
    bandwidth = _rate(where, data, "bandwidth")
    if bandwidth is None:
        raise TargetError(f"{where}: missing field 'bandwidth'")
    latency = data.get("latency", 0)
    if isinstance(latency, bool) or not isinstance(latency, int | float) or not 0 <= latency < math.inf:
        raise TargetError(f"{where}: field 'latency' must be a finite number >= 0, got {latency!r}")
    return CopyPath(ends[0], ends[1], bandwidth, float(latency))


def load(path: str | os.PathLike) -> Target:
    """A target from a TOML file; TargetError with the file and field when it is malformed."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise TargetError(f"cannot read target file {p}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise TargetError(f"{p}: not valid TOML: the file is not UTF-8 text") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TargetError(f"{p}: not valid TOML: {e}") from None
    return from_dict(data, str(p))


def _cpus(cpu_list: str) -> int:
    n = 0
    for part in cpu_list.strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def _cache_bytes(level: int) -> int | None:
    """One core's share of the level-`level` data cache (a shared L3 divided among its cores)."""
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    for index in sorted(base.glob("index*")) if base.exists() else []:
        try:
            if int((index / "level").read_text()) == level and (index / "type").read_text().strip() in ("Data", "Unified"):
                size = _size(str(index / "size"), (index / "size").read_text().strip() + "iB")
                return size // max(1, _cpus((index / "shared_cpu_list").read_text()))
        except (OSError, ValueError, TargetError):
            continue
    return None


def _clock_ghz() -> float | None:
    """The highest clock this machine's first CPU runs at, from /sys or /proc/cpuinfo."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e6
    except (OSError, ValueError):
        pass
    try:
        mhz = [float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines()
               if line.startswith("cpu MHz")]
    except (OSError, ValueError, IndexError):
        return None
    return max(mhz) / 1e3 if mhz else None


# Bytes per cycle one core copies out of each level of `host` when nothing was measured: rough
# figures for the scalar loops copies become (estimates; `npugrad calibrate` measures them).
_HOST_COPY = {"l1": 32.0, "l2": 16.0, "l3": 8.0, "dram": 4.0}
HOST_LOOP = 16.0  # cycles to enter a loop nest (an instruction's overhead)
# A load's latency from DRAM behind a server CPU's caches: typically 80-120 ns (estimated, not
# measured here); in cycles at the host's clock it is the dram level's `latency`.
HOST_DRAM_LATENCY_NS = 100.0
HOST_COPY_SETUP = 32.0  # cycles to start a copy loop nest
HOST_DEFAULTS = (
    "defaults read off this machine: the clock from /sys (or /proc/cpuinfo), the contraction rate "
    "as two FMA pipes of the vector width (2 x lanes x 2 FLOP per cycle), elementwise work as two vector "
    "ALUs, copy bandwidths estimated (l1 32, l2 16, l3 8, dram 4 bytes per cycle per core, dram shared by "
    "all cores at 2 x that, 100 ns from a load to its data), 16 cycles per loop nest and 32 per copy on top "
    "(estimated); run `npugrad calibrate` to measure them"
)


def host_costs(levels: list[str], lanes: int) -> tuple[tuple[Unit, ...], tuple[CopyPath, ...], float]:
    """The defaults above: one unit doing all work, a path between every two levels (a CPU copies
    anything), and the dram's shared bandwidth.

    Measured and not kept: a bfloat16 matrix rate of AMX's tdpbf16ps (1024 FLOP a cycle) where
    the host has AMX-BF16. The model then found the FLCE bfloat16 gradient bound by memory and
    chose a 416 x 296 tile for 4096 x 4096 x 8192 where it chose 512 x 256; 296 columns are no
    multiple of AMX's 32-column blocks, whose edge then ran on vdpbf16ps, and the calls ran
    0.666x as fast (416 x 320: 1.009x; Intel Xeon with AMX, 2 threads, 8 rounds of bench/ab.py).
    The tile search knows no micro-kernel's block to round to."""
    cpu = Unit("cpu", WORK, (("matrix", "any", 4.0 * lanes), ("vector", "any", 2.0 * lanes), ("scalar", "any", 2.0)),
               HOST_LOOP)
    paths = tuple(CopyPath(a, b, min(_HOST_COPY.get(a, 4.0), _HOST_COPY.get(b, 4.0)), HOST_COPY_SETUP)
                  for a in levels for b in levels)
    return (cpu,), paths, 2 * _HOST_COPY["dram"]


@cache
def host() -> Target:
    """This machine: its cores, data caches as the local levels, its vector width, and the cost
    figures HOST_DEFAULTS says."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    vector_bits = 512 if features.get("avx512f") else 256 if features.get("avx2") or features.get("avx") else 128
    registers = 32 if features.get("avx512f") else 16
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    names = ["dram", "l3", "l2", "l1"]
    units, paths, shared = host_costs(names, vector_bits // 32)
    clock = _clock_ghz() or 2.0
    levels = [MemoryLevel("dram", None, 1, "mte", None, shared, latency=HOST_DRAM_LATENCY_NS * clock)]
    parent = "dram"
    for lvl, fallback in ((3, 8 << 20), (2, 1 << 20), (1, 32 << 10)):
        size = _cache_bytes(lvl) or fallback
        levels.append(MemoryLevel(f"l{lvl}", size, 64, "cpu", parent))
        parent = f"l{lvl}"
    # On a CPU "local buffers" are tiles sized to stay in a cache level of one core.
    roles = {"vector": "l2", "stage": "l3", "matrix_a": "l2", "matrix_b": "l2", "accumulator": "l2"}
    return Target("host", cores, vector_bits, tuple(levels), registers, False, tuple(sorted(roles.items())), "host",
                  llvm.get_host_cpu_name(), features.flatten(), clock, units, paths, HOST_DEFAULTS)


def get(name_or_path: str | os.PathLike) -> Target:
    """`host`, a shipped target's name (`npu-a2`), or the path of a target file."""
    name = str(name_or_path)
    if name == "host":
        return host()
    shipped = HERE / f"{name}.toml"
    # A path is never a shipped name (HERE / "/abs/x.toml" would be that absolute path).
    if os.sep not in name and shipped.exists():
        return load(shipped)
    if os.path.exists(name):
        return load(name)
    known = ["host", *sorted(p.stem for p in HERE.glob("*.toml"))]
    raise TargetError(f"unknown target '{name}': neither a shipped target ({', '.join(known)}) nor a file")
