"""Local-memory footprints: what a tiling allocates for given tile sizes, level by level, and
whether it fits. Recipes describe their tiling's buffers (`footprint`); choose-tile-sizes searches
sizes whose buffers fit; check-capacity proves the tiled IR itself fits, counting the same way
(aligned sizes, double-buffered ones twice).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from npugrad.dialect.npu import AllocLocalOp, level_of
from npugrad.targets import Target


@dataclass(frozen=True)
class TileBuffer:
    """One local buffer of a tiling: the role of the tile (which level holds it, see the target's
    [roles]), its bytes, and whether it is double-buffered (two copies, so that the transfer of
    the next tile overlaps work on this one)."""

    role: str
    bytes: int
    double_buffered: bool = False


def padded(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def usage(buffers: Iterable[TileBuffer], target: Target) -> dict[str, int]:
    """Bytes in use per level: each buffer padded to its level's alignment, twice when double-buffered."""
    used: dict[str, int] = {}
    for b in buffers:
        level = target.role(b.role)
        used[level.name] = used.get(level.name, 0) + padded(b.bytes, level.alignment) * (2 if b.double_buffered else 1)
    return used


def overflow(buffers: Iterable[TileBuffer], target: Target) -> dict[str, int]:
    """Bytes by which each level that does not fit is exceeded (empty: everything fits)."""
    return {name: n - target.level(name).capacity  # type: ignore[operator]
            for name, n in usage(buffers, target).items() if n > target.level(name).capacity}  # type: ignore[operator]


def fits(buffers: Iterable[TileBuffer], target: Target) -> bool:
    return not overflow(buffers, target)


def budget(target: Target, role: str) -> int:
    """Bytes one set of tiles may take in the level holding `role` (half when double-buffered)."""
    level = target.role(role)
    assert level.capacity is not None
    return level.capacity // (2 if target.double_buffer else 1)


def largest(ok: Callable[[int], bool], most: int) -> int:
    """The largest n in [1, most] with ok(n) (ok holds up to some n), or 1."""
    lo, hi = 1, max(1, most)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def round_down(n: int, multiple: int) -> int:
    return max(multiple, n // multiple * multiple)


def clamp(size: int, extent: int | None) -> int:
    """A tile size at most its dimension's static extent (the tilings allocate no more)."""
    return size if extent is None else max(1, min(size, extent))


def vector_elements(target: Target, element_bytes: int) -> int:
    return max(1, target.vector_bytes // element_bytes)


def local_buffer_bytes(buf: AllocLocalOp, target: Target) -> tuple[int, int]:
    """(bytes of one copy of a local buffer padded to its level's alignment, copies: 2 when
    double-buffered). TargetError when the target has no such level."""
    level = target.level(level_of(buf.result.type))  # type: ignore[arg-type]
    return padded(buf.size_bytes(), level.alignment), 2 if buf.double_buffer is not None else 1
