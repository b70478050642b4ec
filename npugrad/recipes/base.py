"""The protocol every op's recipe implements, and the registry the pipeline reads them from.

A recipe is a subclass of `OpRecipe` naming its op class (`op = BinaryCrossEntropyGradOp`) and
defining every part in PARTS. A part the op does not have is declared so, with the reason:

    distribute = not_supported("spread over cores as its fused nest; unfused it stays on one block")

A recipe that leaves a part undefined fails when its class is created (when `npugrad.recipes`
loads), with a RecipeError naming the op and the part; an op of the dialect without a recipe
fails the same way (`check_complete`). Nothing is skipped silently.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import numpy as np
from xdsl.ir import Dialect

from npugrad.dialect.train import TrainOp
from npugrad.dtypes import BFLOAT16

if TYPE_CHECKING:
    from xdsl.dialects import scf

    from npugrad.analysis.cost import Load
    from npugrad.analysis.footprint import TileBuffer
    from npugrad.ir import IRBuilder
    from npugrad.targets import Target


class RecipeError(TypeError):
    """A recipe that does not declare every part, or an op without a recipe."""


# Each part and what uses it (the error for a missing part quotes this).
PARTS: dict[str, str] = {
    "lower": "convert-train-to-loops: the op as loops (lower(op, builder))",
    "choose_tile_sizes": "choose-tile-sizes: tile sizes for a target (choose_tile_sizes(op, target) -> dict)",
    "footprint": "the local buffers its tiling allocates for tile sizes (footprint(op, sizes, target) -> [TileBuffer])",
    "load": "choose-tile-sizes' search: what its tiling moves and computes on the busiest core for tile sizes, per "
            "stage (load(op, sizes, target) -> [analysis.cost.Load])",
    "tile": "tile-for-target: the op in tiles of the target's local memories (tile(op, target, builder))",
    "distribute": "distribute-over-cores: the op's work split over blocks (distribute(op, builder) -> bool)",
    "reference": "the NumPy reference: expected outputs by operand name (reference(arrays, props) -> dict)",
    "random_inputs": "valid random inputs by operand name (random_inputs(shapes, dtypes, props, rng) -> dict)",
    "api": "the Python API function (api() -> the function, e.g. npugrad.ops.nll_loss_backward)",
    "call_api": "the API called with arrays by operand name, outputs by operand name (call_api(arrays, props))",
    "examples": "signatures the demo and the generic tests run (examples() -> [Example])",
}


@dataclass(frozen=True)
class NotSupported:
    """A part an op does not have, and why: the pass that would use it leaves the op as it is."""

    reason: str

    def __call__(self, *args, **kwargs):
        raise RecipeError(f"not supported: {self.reason}")


def not_supported(reason: str) -> NotSupported:
    return NotSupported(reason)


@dataclass(frozen=True)
class Example:
    """One signature of an op: operand shapes and dtypes (absent operands omitted) and property
    values. `label` says what it exercises ("mean, weight")."""

    label: str
    shapes: Mapping[str, tuple[int, ...]]
    dtypes: Mapping[str, np.dtype]
    props: Mapping[str, object] = field(default_factory=dict)


FLOAT_DTYPES = (np.dtype(np.float32), np.dtype(np.float16), BFLOAT16)


def cast(values, dtype) -> np.ndarray:
    """float32 values rounded once to `dtype`."""
    return np.asarray(values, np.float32).astype(dtype)


_RECIPES: dict[type[TrainOp], OpRecipe] = {}


def _source_file(cls: type) -> str:
    """Where a class is defined, relative to the working directory when it is below it."""
    path = inspect.getsourcefile(cls) or cls.__module__
    try:
        return os.path.relpath(path)
    except ValueError:
        return path


class OpRecipe:
    """Everything the pipeline knows about one op. Subclasses define every part of PARTS."""

    op: ClassVar[type[TrainOp]]
    fused: ClassVar[FusedNest | None] = None  # ops a fusion pass turns into a loop nest first

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        where = _source_file(cls)
        op = getattr(cls, "op", None)
        if not (isinstance(op, type) and issubclass(op, TrainOp)):
            raise RecipeError(f"{where}: recipe {cls.__name__} must name its op class (op = SomeTrainOp)")
        for part, use in PARTS.items():
            if not any(part in vars(k) for k in cls.__mro__ if k is not OpRecipe and k is not object):
                raise RecipeError(
                    f"{where}: the recipe of '{op.name}' has no '{part}' ({use}); define it, or declare "
                    f"{part} = not_supported(\"why\")"
                )
        if op in _RECIPES:
            raise RecipeError(f"{where}: '{op.name}' already has a recipe ({type(_RECIPES[op]).__name__})")
        _RECIPES[op] = cls()

    # The parts, with their signatures (subclasses override every one of them).
    def lower(self, op: TrainOp, e: IRBuilder) -> None: ...
    def choose_tile_sizes(self, op: TrainOp, target: Target) -> dict[str, int]: ...
    def footprint(self, op: TrainOp, sizes: Mapping[str, int], target: Target) -> list[TileBuffer]: ...
    def load(self, op: TrainOp, sizes: Mapping[str, int], target: Target) -> list[Load]: ...
    def tile(self, op: TrainOp, target: Target, e: IRBuilder) -> None: ...
    def distribute(self, op: TrainOp, e: IRBuilder) -> bool: ...
    def reference(self, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]: ...
    def random_inputs(self, shapes, dtypes, props, rng: np.random.Generator) -> dict[str, np.ndarray]: ...
    def api(self) -> Callable: ...
    def call_api(self, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]: ...
    def examples(self) -> Iterator[Example]: ...

    def magnitude(self, arrays: Mapping[str, np.ndarray], props: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Σ|terms| of each element of the outputs that are sums (a GEMM's |A|·|B|, a scatter-add's
        |rows|), by output name: a float32 sum's rounding error grows with it, not with the sum,
        whose terms may cancel (harness.max_error allows for it). {} for an op of no such output
        (optional: not one of PARTS)."""
        return {}

    def tiled_operands(self, op: TrainOp) -> tuple[str, ...]:
        """The operands an elementwise tiling cuts (one value per element), on which a tile that
        is the op itself computes: the report counts that tile's work from them. () for an op
        not tiled so (optional: not one of PARTS)."""
        return ()

    @classmethod
    def supports(cls, part: str) -> bool:
        return not isinstance(getattr(cls, part), NotSupported)


class FusedNest:
    """What the passes after a fusion need to know about the loop nest it made (marked
    `train.fused`): how to tile it for a target and how to spread it over cores."""

    def tile(self, nest: scf.ForOp, target: Target, e: IRBuilder) -> None:
        raise NotImplementedError

    def distribute(self, nest: scf.ForOp, e: IRBuilder, cpu: Target) -> None:
        """Spread the nest over the blocks of a launch on `cpu` (the CPU its kernels are shaped for)."""
        raise NotImplementedError


def recipe_of(op: TrainOp | type[TrainOp] | str) -> OpRecipe:
    """The recipe of an op (instance, class, or name such as 'train.nll_loss_backward' or
    'nll_loss_backward')."""
    if isinstance(op, str):
        name = op if "." in op else f"train.{op}"
        found = next((r for cls, r in _RECIPES.items() if cls.name == name), None)
        if found is None:
            raise KeyError(f"no op '{name}' with a recipe (known: {', '.join(c.name for c in _RECIPES)})")
        return found
    cls = op if isinstance(op, type) else type(op)
    recipe = _RECIPES.get(cls)
    if recipe is None:
        raise RecipeError(f"'{cls.name}' has no recipe (add a module to npugrad/recipes/)")
    return recipe


def recipes() -> dict[type[TrainOp], OpRecipe]:
    return dict(_RECIPES)


def public_recipes() -> dict[type[TrainOp], OpRecipe]:
    """The recipes of ops with a Python API (an op added without one, e.g. a test's, has none):
    what the API's bridges (npugrad.torch, the two-phase form) can expose."""
    return {op: r for op, r in _RECIPES.items() if r.supports("api")}


def check_complete(dialect: Dialect) -> None:
    """Every op of `dialect` that is a TrainOp has a recipe."""
    missing = [op.name for op in dialect.operations if issubclass(op, TrainOp) and op not in _RECIPES]
    if missing:
        raise RecipeError(
            f"op(s) {', '.join(repr(m) for m in missing)} of dialect '{dialect.name}' have no recipe: add a module "
            "to npugrad/recipes/ with a subclass of OpRecipe naming the op (see docs/extending.md)"
        )
