"""train.fused_cross_entropy_loss_with_max_sum: the loss per token from the global statistics, and
a shard's softmax from its logits (FORWARD.md §2, §4)."""

from __future__ import annotations

import itertools

import numpy as np

from npugrad.dialect import FusedCrossEntropyLossWithMaxSumOp
from npugrad.lowering.train_to_loops.forward import lower_fused_cross_entropy_loss_with_max_sum
from npugrad.passes.tiling import elementwise, online_max_sum
from npugrad.recipes.base import FLOAT_DTYPES, Example, OpRecipe, cast
from npugrad.reference import forward

F32 = np.dtype(np.float32)


def _none(e):
    return None


class FusedCrossEntropyLossWithMaxSum(OpRecipe):
    op = FusedCrossEntropyLossWithMaxSumOp

    def lower(self, op, e):
        lower_fused_cross_entropy_loss_with_max_sum(op, e)

    def choose_tile_sizes(self, op, target):
        return elementwise.choose_tile_sizes(op, online_max_sum.loss_rows(op), target)

    def footprint(self, op, sizes, target):
        return elementwise.footprint(op, online_max_sum.loss_rows(op), sizes, target)

    def load(self, op, sizes, target):
        return elementwise.load(op, online_max_sum.loss_rows(op), sizes, target)

    def tile(self, op, target, e):
        # In tiles of rows; with a shard's logits the op writes a BT × V softmax, a memory-bound
        # pass of its own that stays on global memory (the report says so).
        if op.vocab_parallel_logits is None:
            elementwise.tile_elementwise(op, target, e, online_max_sum.loss_rows(op), _none, elementwise.same_op(op))

    def distribute(self, op, e):
        return online_max_sum.distribute_loss_rows(op, e)

    def reference(self, arrays, props):
        a = arrays
        loss, softmax = forward.fused_cross_entropy_loss_with_max_sum(
            a["logits_max"], a["sum_exp_logits"], a["predicted_logits"], label_smoothing=props.get("label_smoothing", 0.0),
            vocab_size=props.get("vocab_size", 0), sum_logits=a.get("sum_logits"), z_loss=props.get("z_loss", 0.0),
            target=a.get("target"), ignore_index=props.get("ignore_index"),
            vocab_parallel_logits=a.get("vocab_parallel_logits"))
        return {"loss_out": loss} | ({"softmax_out": softmax} if softmax is not None else {})

    def random_inputs(self, shapes, dtypes, props, rng):
        bt = shapes["logits_max"][0]
        m = (rng.standard_normal(bt) * 3).astype(np.float32)
        out = {
            "logits_max": m,
            "sum_exp_logits": rng.uniform(1.0, 300.0, bt).astype(np.float32),
            "predicted_logits": -rng.uniform(0.0, 5.0, bt).astype(np.float32),
        }
        if "vocab_parallel_logits" in shapes:
            v = shapes["vocab_parallel_logits"][1]
            out["vocab_parallel_logits"] = cast(m[:, None] - rng.uniform(0, 6, (bt, v)), dtypes["vocab_parallel_logits"])
        if "sum_logits" in shapes:
            out["sum_logits"] = (rng.standard_normal(bt) * 50).astype(np.float32)
        if "target" in shapes:
            ignore = props.get("ignore_index", -100)
            out["target"] = np.where(rng.random(bt) < 0.3, ignore, rng.integers(0, 1000, bt)).astype(dtypes["target"])
        return out

    def api(self):
        from npugrad.ops import fused_cross_entropy_loss_with_max_sum

        return fused_cross_entropy_loss_with_max_sum

    def call_api(self, arrays, props):
        a = arrays
        loss, softmax = self.api()(
            a["logits_max"], a["sum_exp_logits"], a["predicted_logits"], props.get("label_smoothing", 0.0),
            a.get("vocab_parallel_logits"), sum_logits=a.get("sum_logits"), vocab_size=props.get("vocab_size", 0),
            z_loss=props.get("z_loss", 0.0), target=a.get("target"), ignore_index=props.get("ignore_index"))
        return {"loss_out": loss} | ({"softmax_out": softmax} if softmax is not None else {})

    def examples(self):
        bt, v = 300, 77
        base = {"logits_max": (bt,), "sum_exp_logits": (bt,), "predicted_logits": (bt,)}
        variants = [
            ("plain", {}, {}),
            ("label smoothing 0.1, z-loss 1e-3", {"sum_logits": (bt,)},
             {"label_smoothing": 0.1, "vocab_size": 5000, "z_loss": 1e-3}),
            ("ignore -100", {"target": (bt,)}, {"ignore_index": -100}),
        ]
        for (label, shapes, props), dtype in itertools.product(variants, FLOAT_DTYPES[:1]):
            yield Example(label, base | shapes, dict.fromkeys(base | shapes, F32) | {"target": np.dtype(np.int64)}, props)
        for dtype in FLOAT_DTYPES:
            yield Example("softmax of a shard's logits", base | {"vocab_parallel_logits": (bt, v)},
                          dict.fromkeys(base, F32) | {"vocab_parallel_logits": dtype})
