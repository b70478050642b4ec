"""train.binary_cross_entropy_grad: dx = u·w·(x − y)/max(x(1 − x), 1e-12) (OPS.md §5)."""

from __future__ import annotations

import itertools

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.lowering.train_to_loops.bce import lower_binary_cross_entropy_grad, lower_elements, upstream
from npugrad.passes.tiling import elementwise
from npugrad.recipes.base import FLOAT_DTYPES, Example, OpRecipe, cast
from npugrad.reference import ops as ref


def _tiled(op: BinaryCrossEntropyGradOp) -> list[str]:
    """Operands with one value per element (each gets a tile): dloss only for reduction none."""
    tiled = {"input_x", "input_y", "weight", "dx"} | ({"dloss"} if op.prop_int("reduction") == 0 else set())
    return [n for n in op.operand_names() if n in tiled and getattr(op, n) is not None]


def _mean(op: BinaryCrossEntropyGradOp) -> bool:
    return op.prop_int("reduction") == 1


def _prepare(op: BinaryCrossEntropyGradOp):
    """Mean divides dloss by the whole N, once per block, as the untiled lowering does: a tile
    must not divide by its own element count."""
    return lambda e: upstream(op, e) if _mean(op) else None


def _compute(op: BinaryCrossEntropyGradOp):
    same = elementwise.same_op(op)

    def compute(e, tiles, u) -> None:
        if _mean(op):
            lower_elements(e, tiles["input_x"], tiles["input_y"], u, op.dloss, tiles.get("weight"), tiles["dx"])
        else:
            same(e, tiles, u)

    return compute


class BinaryCrossEntropyGrad(OpRecipe):
    op = BinaryCrossEntropyGradOp

    def lower(self, op, e):
        lower_binary_cross_entropy_grad(op, e)

    def tiled_operands(self, op):
        return _tiled(op)

    def choose_tile_sizes(self, op, target):
        return elementwise.choose_tile_sizes(op, _tiled(op), target)

    def footprint(self, op, sizes, target):
        return elementwise.footprint(op, _tiled(op), sizes, target)

    def load(self, op, sizes, target):
        return elementwise.load(op, _tiled(op), sizes, target)

    def tile(self, op, target, e):
        elementwise.tile_elementwise(op, target, e, _tiled(op), _prepare(op), _compute(op))

    def distribute(self, op, e):
        return elementwise.distribute_elementwise(op, e, _tiled(op), _prepare(op), _compute(op))

    def reference(self, arrays, props):
        a = arrays
        return {"dx": ref.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"),
                                                    props.get("reduction", 1))}

    def random_inputs(self, shapes, dtypes, props, rng):
        out = {
            "input_x": cast(rng.uniform(0.01, 0.99, shapes["input_x"]), dtypes["input_x"]),
            "input_y": cast(rng.uniform(0, 1, shapes["input_y"]), dtypes["input_y"]),
            "dloss": cast(rng.standard_normal(shapes["dloss"]) + 1.5, dtypes["dloss"]),
        }
        if "weight" in shapes:
            out["weight"] = cast(rng.uniform(0.5, 1.5, shapes["weight"]), dtypes["weight"])
        return out

    def api(self):
        from npugrad.ops import binary_cross_entropy_grad

        return binary_cross_entropy_grad

    def call_api(self, arrays, props):
        a = arrays
        return {"dx": self.api()(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), props.get("reduction", 1))}

    def examples(self):
        names = {0: "none", 1: "mean", 2: "sum"}
        for dtype, reduction, weighted in itertools.product(FLOAT_DTYPES, names, (False, True)):
            shape = (37, 53)
            shapes = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
            if weighted:
                shapes["weight"] = shape
            yield Example(f"{names[reduction]}{', weight' if weighted else ''}", shapes, dict.fromkeys(shapes, dtype),
                          {"reduction": reduction})
