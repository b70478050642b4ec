"""One recipe per op: everything the pipeline knows about an op, reached from one declaration.

Each module of this package holds the recipe of one op (a subclass of `OpRecipe`, see base.py):
its lowering to loops, tile-size heuristic and footprint model, tiling, split over cores,
reference, random valid inputs, API binding and example signatures. Importing this package
imports every recipe and checks that every op of the `train` dialect has one, complete.

    from npugrad.recipes import recipe_of
    recipe_of(op).lower(op, builder)
"""

import importlib
import pkgutil

from npugrad.recipes.base import (
    PARTS,
    Example,
    FusedNest,
    NotSupported,
    OpRecipe,
    RecipeError,
    check_complete,
    not_supported,
    public_recipes,
    recipe_of,
    recipes,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

from npugrad.dialect import Train

check_complete(Train)

__all__ = [
    "PARTS",
    "Example",
    "FusedNest",
    "NotSupported",
    "OpRecipe",
    "RecipeError",
    "check_complete",
    "not_supported",
    "public_recipes",
    "recipe_of",
    "recipes",
]
