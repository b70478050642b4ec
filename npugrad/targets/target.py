"""Hardware descriptions as data: memory levels (name, capacity, alignment, the unit that reads
them, the level they are filled from), core count, vector width. A target is a small TOML file:

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

Shipped: `npu-a2` (this folder) and `host`, read off the machine it runs on.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

HERE = Path(__file__).parent
UNITS = ("cube", "vector", "scalar", "mte", "cpu")
# What the tiling passes place in local memory, and the level each goes to (the [roles] table):
# vector = operands and results of elementwise work; stage = matrix tiles fetched from global
# memory; matrix_a / matrix_b = the left / right operand of a matrix-unit contraction;
# accumulator = its float32 result.
ROLES = ("vector", "stage", "matrix_a", "matrix_b", "accumulator")
_SIZE = re.compile(r"^\s*(\d+)\s*([KMG]i?B|B)?\s*$", re.IGNORECASE)
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$.]*$")
_FACTORS = {None: 1, "b": 1, "kib": 1 << 10, "kb": 1 << 10, "mib": 1 << 20, "mb": 1 << 20, "gib": 1 << 30, "gb": 1 << 30}


# Type names as a TOML file spells them.
_TOML_TYPES = {int: "an integer", str: "a string", bool: "a boolean", list: "an array of tables", dict: "a table"}


class TargetError(ValueError):
    """A target description that cannot be used; the message names the file and the field."""


@dataclass(frozen=True)
class MemoryLevel:
    name: str
    capacity: int | None  # bytes per core; None for global memory
    alignment: int = 1
    unit: str = "cpu"
    parent: str | None = None

    @property
    def is_global(self) -> bool:
        return self.capacity is None


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

    def role(self, role: str) -> MemoryLevel:
        """The level that holds `role` (one of ROLES)."""
        return self.level(dict(self.roles)[role])

    def level(self, name: str) -> MemoryLevel:
        for lv in self.levels:
            if lv.name == name:
                return lv
        raise TargetError(f"target '{self.name}' has no memory level '{name}' (levels: {', '.join(lv.name for lv in self.levels)})")

    @property
    def global_level(self) -> MemoryLevel:
        return next(lv for lv in self.levels if lv.is_global)

    def local_levels(self, unit: str | None = None) -> list[MemoryLevel]:
        return [lv for lv in self.levels if not lv.is_global and (unit is None or lv.unit == unit)]

    @property
    def vector_bytes(self) -> int:
        return self.vector_bits // 8

    def key(self) -> tuple:
        """What compiled code depends on (for compile caches)."""
        return (self.name, self.cores, self.vector_bits, self.vector_registers, self.double_buffer, self.levels,
                self.roles, self.llvm_cpu, self.llvm_features)


def _size(where: str, value) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        size = value
    elif isinstance(value, str) and (m := _SIZE.match(value)):
        size = int(m.group(1)) * _FACTORS[m.group(2).lower() if m.group(2) else None]
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
             "llvm_features"}
    if unknown := set(data) - known:
        raise TargetError(f"{source}: unknown field(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")
    name = _field(source, data, "name", str)
    cores = _field(source, data, "cores", int)
    if cores < 1:
        raise TargetError(f"{source}: field 'cores' must be >= 1, got {cores}")
    vector_bits = _field(source, data, "vector_bits", int)
    if vector_bits < 32 or vector_bits % 32:
        raise TargetError(f"{source}: field 'vector_bits' must be a positive multiple of 32, got {vector_bits}")
    levels_data = _field(source, data, "level", list)
    levels: list[MemoryLevel] = []
    for i, lv in enumerate(levels_data):
        where = f"{source}: level {i + 1}"
        if not isinstance(lv, dict):
            raise TargetError(f"{where} must be a table ([[level]])")
        if unknown := set(lv) - {"name", "kind", "capacity", "alignment", "unit", "parent"}:
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
            levels.append(MemoryLevel(lname, None, 1, "mte", None))
            continue
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
    if vector_registers < 0:
        raise TargetError(f"{source}: field 'vector_registers' must be >= 0, got {vector_registers}")
    return Target(
        name, cores, vector_bits, tuple(levels),
        vector_registers,
        _field(source, data, "double_buffer", bool, False, required=False),
        tuple(sorted(roles.items())),
        source,
        _field(source, data, "llvm_cpu", str, "", required=False),
        _field(source, data, "llvm_features", str, "", required=False),
    )


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


@cache
def host() -> Target:
    """This machine: its cores, data caches as the local levels, and its vector width."""
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    vector_bits = 512 if features.get("avx512f") else 256 if features.get("avx2") or features.get("avx") else 128
    registers = 32 if features.get("avx512f") else 16
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    levels = [MemoryLevel("dram", None, 1, "mte", None)]
    parent = "dram"
    for lvl, fallback in ((3, 8 << 20), (2, 1 << 20), (1, 32 << 10)):
        size = _cache_bytes(lvl) or fallback
        levels.append(MemoryLevel(f"l{lvl}", size, 64, "cpu", parent))
        parent = f"l{lvl}"
    # On a CPU "local buffers" are tiles sized to stay in a cache level of one core.
    roles = {"vector": "l2", "stage": "l3", "matrix_a": "l2", "matrix_b": "l2", "accumulator": "l2"}
    return Target("host", cores, vector_bits, tuple(levels), registers, False, tuple(sorted(roles.items())), "host",
                  llvm.get_host_cpu_name(), features.flatten())


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
