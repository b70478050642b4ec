"""choose-tile-sizes{target=...}: the one place tile sizes are decided. For every train op, search
the sizes whose tiles (double-buffered where the target says so) fit the memory levels the target
assigns to them, for the one the cost model (analysis/cost.py) predicts fastest on the target,
from what the op's recipe says its tiling moves and computes (`load`); write the sizes and the
predicted cycles on the op:

    train.binary_cross_entropy_grad ...                          (target npu-a2: UB of 192 KiB)
becomes
    train.binary_cross_entropy_grad ... {tile_sizes = #train.tiles<n = 4096>,
                                         train.predicted_cycles = 2.1e+04 : f64}

The search, for ops whose shapes are all static (the model needs them; otherwise the recipe's
heuristic decides alone): the recipe's own heuristic choice, every combination of powers of two
(from 8) and of the sizes where a dimension's tile count changes, random samples (seeded), then
coordinate descent from the best few points found, over nearby multiples of 8. Sizes
written by hand are kept (the search chooses only the others, and the prediction is for them
all). The passes that tile read only the attribute; the footprint of what they allocate is proven
to fit by check-capacity.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass
from functools import lru_cache

from xdsl.context import Context
from xdsl.dialects.builtin import FloatAttr, ModuleOp, f64
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.analysis import cost
from npugrad.analysis.footprint import fits, padded
from npugrad.dialect import TrainOp
from npugrad.dialect.attributes import PREDICTED, TileSizesAttr
from npugrad.dialect.checks import static_product
from npugrad.dialect.npu import element_bytes
from npugrad.ir import static_shape
from npugrad.recipes import recipe_of
from npugrad.targets import Target, get

POWERS = [1 << k for k in range(3, 13)]  # 8 .. 4096 per dimension
GRAIN = 8  # every size a multiple of 8 elements: whole 32-byte lines of 4-byte elements
LARGEST_N = 1 << 16  # one-dimensional (elementwise) tiles: up to 64 Ki elements
ROUNDS = 3
COARSE = 16  # breakpoints of up to 16 tiles per dimension in the grid, 64 in the descent
SAMPLES = 400
SAMPLE_MAX = 1024  # random samples: multiples of 8 up to this (or the extent)
STARTS = 4  # descents from the best few points found


def modelled(op: TrainOp, sizes: dict[str, int], target: Target) -> cost.Prediction | None:
    """The predicted time of `op` tiled with `sizes` (None: its tiles do not fit)."""
    recipe = recipe_of(op)
    if not fits(recipe.footprint(op, sizes, target), target):
        return None
    return cost.predict(recipe.load(op, sizes, target), target, _argument_bytes(op))


@lru_cache(maxsize=64)
def _argument_bytes(op: TrainOp) -> int:
    """The bytes of the op's operands (dynamic ones count nothing)."""
    return sum((static_product(static_shape(v.type)) or 0) * element_bytes(v.type.element_type)  # type: ignore[attr-defined]
               for v in op.operands)


def static(op: TrainOp) -> bool:
    """Whether every operand's shape is known: the model needs concrete shapes."""
    return all(static_product(static_shape(v.type)) is not None for v in op.operands)  # type: ignore[arg-type]


def _breakpoints(extent: int, most: int = 64) -> list[int]:
    """Sizes where the number of tiles of a dimension changes: the smallest multiples of GRAIN
    cutting `extent` into 1 .. `most` tiles."""
    return sorted({min(padded(-(-extent // k), GRAIN), padded(extent, GRAIN)) for k in range(1, most + 1)})


def search(op: TrainOp, target: Target, given: dict[str, int] | None = None) -> tuple[dict[str, int], cost.Prediction | None]:
    """The fastest fitting sizes the model finds (the dimensions in `given` fixed), and their
    prediction; the recipe's heuristic sizes, unpredicted, when no candidate fits or the shapes
    are not all static."""
    recipe = recipe_of(op)
    given = dict(given or {})
    heuristic = {**recipe.choose_tile_sizes(op, target), **given}
    if not recipe.supports("load") or not static(op):
        return heuristic, None
    free = [d for d in op.TILE_DIMS if d not in given]
    extents = recipe.load(op, heuristic, target)[0].extents
    best: tuple[float, dict[str, int], cost.Prediction] | None = None

    ranked: list[tuple[float, dict[str, int]]] = []
    cycles: dict[tuple[int, ...], float | None] = {}

    def consider(sizes: dict[str, int]) -> float | None:
        """The predicted cycles of `sizes` (None: they do not fit), remembered."""
        nonlocal best
        sizes = {d: min(n, extents.get(d, n)) for d, n in sizes.items()}  # the tilings clamp the same way
        key = tuple(sizes[d] for d in op.TILE_DIMS)
        if key not in cycles:
            p = modelled(op, sizes, target)
            cycles[key] = None if p is None else p.cycles
            if p is not None:
                ranked.append((p.cycles, sizes))
                if best is None or p.cycles < best[0] * (1 - 1e-9):
                    best = (p.cycles, dict(sizes), p)
        return cycles[key]

    def better(point: dict[str, int], other: dict[str, int]) -> dict[str, int]:
        mine, theirs = consider(point), consider(other)
        return other if theirs is not None and (mine is None or theirs < mine * (1 - 1e-9)) else point

    consider(heuristic)
    grid = [1 << k for k in range(3, 17)] if len(op.TILE_DIMS) == 1 else POWERS
    axes = [sorted(set(grid) | set(_breakpoints(extents[d], COARSE) if d in extents else ())) for d in free]
    for combo in itertools.product(*axes):
        consider({**heuristic, **dict(zip(free, combo))})
    # Random samples of the whole space (a fixed seed: the choice is reproducible), then coordinate
    # descent from the best few: each dimension in turn over nearby multiples of 8, its breakpoints
    # and multiples of an eighth of its size.
    rng = random.Random(0)
    for _ in range(SAMPLES):
        consider({**heuristic, **{d: GRAIN * rng.randint(1, max(1, min(extents.get(d, SAMPLE_MAX), SAMPLE_MAX) // GRAIN))
                                  for d in free}})
    for start in sorted(ranked, key=lambda r: r[0])[:STARTS]:
        point = dict(start[1])
        for _ in range(ROUNDS):
            before = dict(point)
            for d in free:
                step = max(GRAIN, point[d] // 8 // GRAIN * GRAIN)
                values = [min(k * step, LARGEST_N) for k in range(4, 17)]
                values += [point[d] + GRAIN * k for k in range(-8, 9) if point[d] + GRAIN * k > 0]
                if d in extents:
                    values += _breakpoints(extents[d])
                for n in values:
                    point = better(point, {**point, d: n})
            if point == before:
                break
    if best is None:
        return heuristic, None
    return best[1], best[2]


@dataclass(frozen=True)
class ChooseTiles(RewritePattern):
    target: Target

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: TrainOp, rewriter: PatternRewriter) -> None:
        given = op.tiles() or {}
        if not op.TILE_DIMS or PREDICTED.on(op):
            return
        chosen, p = search(op, self.target, given)
        op.tile_sizes = TileSizesAttr({**chosen, **given})
        if p is not None:
            PREDICTED.set(op, FloatAttr(float(f"{p.cycles:.4g}"), f64))
        rewriter.notify_op_modified(op)


@dataclass(frozen=True)
class ChooseTileSizesPass(ModulePass):
    name = "choose-tile-sizes"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        PatternRewriteWalker(ChooseTiles(get(self.target)), apply_recursively=False).rewrite_module(op)
