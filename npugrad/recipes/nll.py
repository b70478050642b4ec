"""train.nll_loss_backward: −w[y]·scale at (t, y_t), zero elsewhere (OPS.md §3)."""

from __future__ import annotations

import itertools

import numpy as np

from npugrad.dialect import NLLLossBackwardOp
from npugrad.lowering.train_to_loops.nll import lower_nll_loss_backward
from npugrad.passes.tiling import nll
from npugrad.recipes.base import FLOAT_DTYPES, Example, OpRecipe, cast
from npugrad.reference import ops as ref


class NLLLossBackward(OpRecipe):
    op = NLLLossBackwardOp

    def lower(self, op, e):
        lower_nll_loss_backward(op, e)

    def choose_tile_sizes(self, op, target):
        return nll.choose_tile_sizes(op, target)

    def footprint(self, op, sizes, target):
        return nll.footprint(op, sizes, target)

    def load(self, op, sizes, target):
        return nll.load(op, sizes, target)

    def tile(self, op, target, e):
        nll.tile_nll_loss_backward(op, target, e)

    def distribute(self, op, e):
        return nll.distribute_nll(op, e)

    def reference(self, arrays, props):
        a = arrays
        return {"out": ref.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"],
                                             props.get("reduction", 1), props.get("ignore_index", -100),
                                             a["total_weight"])}

    def random_inputs(self, shapes, dtypes, props, rng):
        s = shapes["self"]
        c = s[-1]
        ignore = int(props.get("ignore_index", -100))
        info = np.iinfo(dtypes["target"])
        can_ignore = info.min <= ignore <= info.max
        if c == 0:
            # No class to pick: every sample must be ignored (impossible if ignore_index does not fit).
            target = np.full(shapes["target"], ignore if can_ignore else 0)
        else:
            target = rng.integers(0, c, shapes["target"])
            if target.size and can_ignore:
                target = np.where(rng.random(target.shape) < 0.1, ignore, target)
        weight = rng.uniform(0.5, 1.5, (c,))
        kept = np.asarray(target).reshape(-1)
        kept = kept[kept != ignore].astype(np.int64)
        tw = float(weight[kept].sum()) if kept.size else 1.0
        return {
            "grad_output": cast(rng.standard_normal(shapes["grad_output"]) + 0.5, dtypes["grad_output"]),
            "self": cast(rng.standard_normal(s), dtypes["self"]),
            "target": np.asarray(target).astype(dtypes["target"]),
            "weight": cast(weight, dtypes["weight"]),
            "total_weight": cast(np.full(shapes["total_weight"], tw), dtypes["total_weight"]),
        }

    def api(self):
        from npugrad.ops import nll_loss_backward

        return nll_loss_backward

    def call_api(self, arrays, props):
        a = arrays
        out = self.api()(a["grad_output"], a["self"], a["target"], a["weight"], props.get("reduction", 1),
                         props.get("ignore_index", -100), a["total_weight"])
        return {"out": out}

    def examples(self):
        names = {0: "none", 1: "mean", 2: "sum"}
        for dtype, reduction, self_rank in itertools.product(FLOAT_DTYPES, names, (2, 1)):
            n, c = 300, 37
            shapes = {
                "self": (n, c) if self_rank == 2 else (c,),
                "target": (n,) if self_rank == 2 else (),
                "weight": (c,),
                "total_weight": (1,),
                "grad_output": (n,) if reduction == 0 and self_rank == 2 else (),
            }
            dtypes = dict.fromkeys(shapes, dtype) | {"target": np.dtype(np.int64)}
            yield Example(f"{names[reduction]}, {self_rank}-D self", shapes, dtypes,
                          {"reduction": reduction, "ignore_index": -100})
