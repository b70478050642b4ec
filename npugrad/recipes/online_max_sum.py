"""train.fused_linear_online_max_sum: one vocabulary shard's statistics of the logits (FORWARD.md §1).
The pipeline fuses it first (fuse-linear-online-max-sum): its nest, not the op, is tiled and
spread over cores; unfused, it lowers to the reference loops."""

from __future__ import annotations

import itertools

import numpy as np

from npugrad.dialect import FusedLinearOnlineMaxSumOp
from npugrad.lowering.train_to_loops.forward import lower_fused_linear_online_max_sum
from npugrad.passes.tiling import online_max_sum
from npugrad.recipes.base import FLOAT_DTYPES, Example, FusedNest, OpRecipe, cast, not_supported
from npugrad.reference import forward

IGNORE = -100
OPTIONAL = ("vocab_parallel_logits_out", "sum_logits_local_out", "logits_block_max_out")


class OnlineMaxSumNest(FusedNest):
    def tile(self, nest, target, e):
        online_max_sum.tile_fused(nest, target, e)

    def distribute(self, nest, e, cpu):
        online_max_sum.distribute_fused(nest, e, align=online_max_sum.row_alignment(cpu))


class FusedLinearOnlineMaxSum(OpRecipe):
    op = FusedLinearOnlineMaxSumOp
    fused = OnlineMaxSumNest()

    def lower(self, op, e):
        lower_fused_linear_online_max_sum(op, e)

    def choose_tile_sizes(self, op, target):
        return online_max_sum.choose_tile_sizes(op, target)

    def footprint(self, op, sizes, target):
        return online_max_sum.footprint(op, sizes, target)

    def load(self, op, sizes, target):
        return online_max_sum.load(op, sizes, target)

    tile = not_supported("tiled as its fused nest (fuse-linear-online-max-sum first); unfused it stays whole")
    distribute = not_supported("spread over cores as its fused nest; unfused it stays on one block")

    def reference(self, arrays, props):
        a = arrays
        st = forward.fused_linear_online_max_sum(
            a["input"], a["weight"], a["target"], *_shard(a, props),
            softcap=props.get("softcap", 0.0), ignore_index=props.get("ignore_index"),
            return_logits="vocab_parallel_logits_out" in a, float32_logits=bool(props.get("float32_logits")),
            logits_block=props.get("logits_block", 0))
        out = {"logits_max_local_out": st.logits_max, "sum_exp_logits_local_out": st.sum_exp_logits,
               "predicted_logits_local_out": st.predicted_logits, "target_mask_out": st.target_mask,
               "masked_target_out": st.masked_target}
        if "vocab_parallel_logits_out" in a:
            out["vocab_parallel_logits_out"] = st.logits
        if "sum_logits_local_out" in a:
            out["sum_logits_local_out"] = st.sum_logits
        if "logits_block_max_out" in a:
            out["logits_block_max_out"] = st.logits_block_max
        return out

    def random_inputs(self, shapes, dtypes, props, rng):
        bt, h = shapes["input"]
        v = shapes["weight"][0]
        # A module given the shard at run time (vocab_range) gets one past the first V ids.
        start = props.get("vocab_start_index", v)
        end = props.get("vocab_end_index", start + v)
        x = cast(rng.standard_normal((bt, h)) / max(h, 1) ** 0.25, dtypes["input"])
        w = cast(rng.standard_normal(shapes["weight"]) / max(h, 1) ** 0.25, dtypes["weight"])
        # Targets inside the shard, on either side of it, and ignored ones.
        target = rng.integers(max(0, start - (end - start)), end + (end - start) + 1, bt)
        ignore = props.get("ignore_index")
        if ignore is not None and bt:
            target = np.where(rng.random(bt) < 0.25, ignore, target)
        out = {"input": x, "weight": w, "target": target.astype(dtypes["target"])}
        if "vocab_range" in shapes:
            out["vocab_range"] = np.array([start, end], np.int64)
        for name in OPTIONAL:  # requested optional outputs: NaN until written
            if name in shapes:
                out[name] = np.full(shapes[name], np.nan, dtypes.get(name, np.float32))
        return out

    def api(self):
        from npugrad.ops import fused_linear_online_max_sum

        return fused_linear_online_max_sum

    def call_api(self, arrays, props):
        a = arrays
        r = self.api()(a["input"], a["weight"], a["target"], *_shard(a, props),
                       softcap=props.get("softcap", 0.0), ignore_index=props.get("ignore_index"),
                       float32_logits=bool(props.get("float32_logits")), logits_block=props.get("logits_block", 0),
                       logits_out=a.get("vocab_parallel_logits_out"), sum_logits_out=a.get("sum_logits_local_out"),
                       logits_block_max_out=a.get("logits_block_max_out"))
        out = {"logits_max_local_out": r.logits_max, "sum_exp_logits_local_out": r.sum_exp_logits,
               "predicted_logits_local_out": r.predicted_logits, "target_mask_out": r.target_mask,
               "masked_target_out": r.masked_target}
        if r.logits is not None:
            out["vocab_parallel_logits_out"] = r.logits
        if r.sum_logits is not None:
            out["sum_logits_local_out"] = r.sum_logits
        if r.logits_block_max is not None:
            out["logits_block_max_out"] = r.logits_block_max
        return out

    def examples(self):
        options = [("plain", {}, False), ("softcap 20, logits and their sum", {"softcap": 20.0}, True),
                   ("ignore -100", {"ignore_index": IGNORE}, False),
                   ("float32 logits (extension)", {"float32_logits": True}, True),
                   ("compact logits in blocks of 64 (extension), ignore -100",
                    {"logits_block": 64, "ignore_index": IGNORE}, True),
                   ("compact logits in blocks of 128 (extension), softcap 20", {"logits_block": 128, "softcap": 20.0}, True)]
        for dtype, (label, extra, outputs) in itertools.product(FLOAT_DTYPES, options):
            bt, h, v, start = 75, 40, 300, 300
            shapes = {"input": (bt, h), "weight": (v, h), "target": (bt,)}
            block = extra.get("logits_block", 0)
            if outputs:
                shapes |= {"vocab_parallel_logits_out": (bt, v), "sum_logits_local_out": (bt,)}
            if block:
                shapes["logits_block_max_out"] = (bt, -(-v // block))
            logits_t = np.dtype(np.float16) if block else np.dtype(np.float32) if extra.get("float32_logits") else dtype
            dtypes = {"input": dtype, "weight": dtype, "target": np.dtype(np.int64), "vocab_parallel_logits_out": logits_t,
                      "sum_logits_local_out": np.dtype(np.float32), "logits_block_max_out": np.dtype(np.float32)}
            yield Example(label, shapes, dtypes, {"vocab_start_index": start, "vocab_end_index": start + v, **extra})


def _shard(arrays, props) -> tuple[int, int]:
    """[start, end) of the shard: the op's properties, or its vocab_range operand."""
    if "vocab_start_index" in props:
        return props["vocab_start_index"], props["vocab_end_index"]
    start, end = arrays["vocab_range"].tolist()
    return start, end
