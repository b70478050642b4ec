"""choose-tile-sizes{target=...}: the one place tile sizes are decided. For every grad op
without a `tile_sizes`, pick sizes whose tiles (double-buffered where the target says so) fit
the memory levels the target assigns to them, and write them on the op:

    grad.binary_cross_entropy_grad ...                          (target npu-a2: UB of 192 KiB)
becomes
    grad.binary_cross_entropy_grad ... {tile_sizes = {n = 4096 : i64}}

Sizes written by hand are kept. The passes that tile read only the attribute; the footprint of
what they allocate is proven to fit by check-capacity.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr, MemRefType, ModuleOp, f32, i64
from xdsl.passes import ModulePass

from npugrad.dialect import (
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedLinearCrossEntropyLossGradOp,
    GradOp,
    NLLLossBackwardOp,
)
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import element_bytes
from npugrad.targets import Target, get

# Beyond this many elements a tile buys nothing more and only wastes local memory.
MAX_ELEMENTWISE_TILE = 1 << 16


def _bytes(value) -> int:
    t = value.type
    assert isinstance(t, MemRefType)
    return element_bytes(t.element_type)


def _dim(value, axis: int) -> int | None:
    d = value.type.get_shape()[axis]
    return None if d < 0 else d


def _budget(target: Target, role: str) -> int:
    """Bytes one set of tiles may take in the level holding `role` (half when double-buffered)."""
    level = target.role(role)
    assert level.capacity is not None
    return level.capacity // (2 if target.double_buffer else 1)


def _round_down(n: int, multiple: int) -> int:
    return max(multiple, n // multiple * multiple)


def _vector_elements(target: Target, element: int) -> int:
    return max(1, target.vector_bytes // element)


def elementwise_tiled_operands(op: BinaryCrossEntropyGradOp | ApplyFusedEmaAdamOp) -> list[str]:
    """The operands of an elementwise op with one element per element of the op, each given a
    local tile of n elements by its tiling (passes/tiling/elementwise.py); the others (a
    reduced dloss, step, hyperparameters) are read where they are."""
    if isinstance(op, BinaryCrossEntropyGradOp):
        tiled = {"input_x", "input_y", "weight", "dx"} | ({"dloss"} if op.prop_int("reduction") == 0 else set())
    else:
        tiled = {"grad", "var", "m", "v", "s"}
    return [n for n in op.operand_names() if n in tiled and getattr(op, n) is not None]


def _elementwise(op: BinaryCrossEntropyGradOp | ApplyFusedEmaAdamOp, target: Target) -> dict[str, int]:
    """n elements of every tiled operand fit the vector level. n is a multiple of the level's
    alignment (so no tile is padded) and of a float32 vector, or all elements of a smaller
    static shape."""
    names = elementwise_tiled_operands(op)
    per_element = sum(_bytes(getattr(op, name)) for name in names)
    n = _budget(target, "vector") // max(per_element, 1)
    multiple = math.lcm(target.role("vector").alignment, _vector_elements(target, 4))
    shape = [None if d < 0 else d for d in getattr(op, names[0]).type.get_shape()]
    return {"n": _clamp(_round_down(min(n, MAX_ELEMENTWISE_TILE), multiple), static_product(shape))}


def _clamp(size: int, extent: int | None) -> int:
    """A tile size at most its dimension's static extent (the tilings allocate no more)."""
    return size if extent is None else max(1, min(size, extent))


def _fits(target: Target, role: str, buffers: list[tuple[int, bool]]) -> bool:
    """Whether local buffers of (bytes, double-buffered) fit the level holding `role`, each
    padded to its alignment and counted twice when double-buffered (as check-capacity counts)."""
    level = target.role(role)
    assert level.capacity is not None
    a = level.alignment
    return sum(-(-n // a) * a * (2 if twice else 1) for n, twice in buffers) <= level.capacity


def _largest(fits: Callable[[int], bool], most: int) -> int:
    """The largest n in [1, most] with fits(n) (fits holds up to some n), or 1."""
    lo, hi = 1, max(1, most)
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
    return lo


def _nll(op: NLLLossBackwardOp, target: Target) -> dict[str, int]:
    """What passes/tiling/nll.py allocates: a rows × c tile of `out`, the rows' targets (and
    upstream gradients for reduction none), the c weights, all double-buffered where the target
    says so. c takes up to a quarter of the level; rows fill the rest."""
    b, tb = _bytes(op.out), _bytes(op.target)
    two_d = op.out.type.get_num_dims() == 2  # type: ignore[attr-defined]
    per_sample = two_d and op.prop_int("reduction") == 0
    c_total = _dim(op.out, 1 if two_d else 0)
    db = target.double_buffer
    quarter = _budget(target, "vector") // (4 * b)
    if c_total is not None and c_total <= quarter:
        c = max(1, c_total)
    else:
        c = _round_down(min(quarter, c_total or 4096), _vector_elements(target, b))
    if not two_d:
        return {"rows": 1, "c": c}

    def fits(rows: int) -> bool:
        tiles = [rows * c * b, rows * tb, c * b] + ([rows * b] if per_sample else [])
        return _fits(target, "vector", [(n, db) for n in tiles])

    return {"rows": _largest(fits, _clamp(4096, _dim(op.out, 0))), "c": c}


def _embedding(op: EmbeddingDenseBackwardOp, target: Target) -> dict[str, int]:
    """What passes/tiling/embedding.py allocates: a rows × d float32 accumulator (copied out
    itself, so double-buffered, when `out` is float32), else a rows × d tile of `out`, and a
    d-chunk of one grad row; the copied ones double-buffered where the target says so."""
    d_total = _dim(op.grad, op.grad.type.get_num_dims() - 1)  # type: ignore[attr-defined]
    b_out, b_in = _bytes(op.out), _bytes(op.grad)
    f32_out = op.out.type.element_type == f32  # type: ignore[attr-defined]
    db = target.double_buffer
    most = _budget(target, "vector") // (4 * (4 + b_out + b_in))
    if d_total is not None and d_total <= most:
        d = max(1, d_total)
    else:
        d = _round_down(min(most, d_total or 1024), _vector_elements(target, 4))

    def fits(rows: int) -> bool:
        tiles = [(rows * d * 4, db and f32_out), (d * b_in, db)] + ([] if f32_out else [(rows * d * b_out, db)])
        return _fits(target, "vector", tiles)

    return {"rows": _largest(fits, _clamp(256, op.prop_int("num_weights"))), "d": d}


def flce_footprint(bt: int, v: int, h: int, b: int) -> dict[str, int]:
    """Bytes per role of the tiled linear cross-entropy gradient (passes/tiling/flce.py): the
    three contractions' accumulator tiles (float32) and operand tiles, and the vector-level
    logit tile (float32), G tile (input type; the logit tile itself for float32) and saved
    target logits."""
    return {
        "accumulator": (bt * v + bt * h + v * h) * 4,
        "matrix_a": (bt * h + 2 * bt * v) * b,
        "matrix_b": (h * v + v * h + bt * h) * b,
        "vector": bt * v * 4 + (bt * v * b if b != 4 else 0) + bt * 4,
    }


def _flce(op: FusedLinearCrossEntropyLossGradOp, target: Target) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) whose tiles fit every level at once."""
    b = _bytes(op.input)
    best = None
    for bt in (128, 64, 32, 16, 8):
        for v in (256, 128, 64, 32, 16):
            for h in (512, 256, 128, 64, 32, 16):
                used: dict[str, int] = {}
                budget: dict[str, int] = {}
                for role, size in flce_footprint(bt, v, h, b).items():
                    level = target.role(role).name
                    used[level] = used.get(level, 0) + size
                    budget[level] = _budget(target, role)
                if all(used[level] <= budget[level] for level in used):
                    score = (bt * v, h)
                    if best is None or score > best[0]:
                        best = (score, {"bt": bt, "v": v, "h": h})
    if best is None:
        return {"bt": 8, "v": 16, "h": 16}  # check-capacity will say why even this does not fit
    return best[1]


HEURISTICS: dict[type[GradOp], Callable[..., dict[str, int]]] = {
    BinaryCrossEntropyGradOp: _elementwise,
    ApplyFusedEmaAdamOp: _elementwise,
    NLLLossBackwardOp: _nll,
    EmbeddingDenseBackwardOp: _embedding,
    FusedLinearCrossEntropyLossGradOp: _flce,
}


def tile_sizes_attr(sizes: dict[str, int]) -> DictionaryAttr:
    return DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()})


@dataclass(frozen=True)
class ChooseTileSizesPass(ModulePass):
    name = "choose-tile-sizes"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get(self.target)
        for g in [o for o in op.walk() if isinstance(o, GradOp)]:
            chosen = HEURISTICS[type(g)](g, target)
            given = g.tiles() or {}
            g.tile_sizes = tile_sizes_attr({**chosen, **given})
