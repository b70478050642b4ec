"""train.fused_linear_cross_entropy_loss_grad: the backward of a vocabulary-parallel LM head and
cross entropy on one rank (OPS.md §1). The pipeline fuses it first (fuse-linear-cross-entropy-grad):
its nest, not the op, is tiled and spread over cores; unfused, it lowers to the reference loops."""

from __future__ import annotations

import itertools

import numpy as np

from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.lowering.train_to_loops.flce import lower_fused_linear_cross_entropy_loss_grad
from npugrad.passes.tiling import flce
from npugrad.recipes.base import FLOAT_DTYPES, Example, FusedNest, OpRecipe, cast, not_supported
from npugrad.reference import forward
from npugrad.reference import ops as ref

# FORWARD.md §4's options, alone and together (the vendor's defaults: all 0).
EXTENSIONS = [
    ("label smoothing 0.1", {"label_smoothing": 0.1, "vocab_size": 1000}),
    ("z-loss 1e-3", {"z_loss": 1e-3}),
    ("softcap 15", {"softcap": 15.0}),
    ("all three", {"label_smoothing": 0.1, "vocab_size": 1000, "z_loss": 1e-3, "softcap": 15.0}),
]


def _extensions(props) -> dict:
    return {k: props.get(k, d) for k, d in (("label_smoothing", 0.0), ("vocab_size", 0), ("z_loss", 0.0),
                                            ("softcap", 0.0))}


class LinearCrossEntropyNest(FusedNest):
    def tile(self, nest, target, e):
        flce.tile_fused_flce(nest, target, e)

    def distribute(self, nest, e, cpu):
        flce.distribute_fused_flce(nest, e, cpu)


class FusedLinearCrossEntropyLossGrad(OpRecipe):
    op = FusedLinearCrossEntropyLossGradOp
    fused = LinearCrossEntropyNest()

    def lower(self, op, e):
        lower_fused_linear_cross_entropy_loss_grad(op, e)

    def choose_tile_sizes(self, op, target):
        return flce.choose_tile_sizes(op, target)

    def footprint(self, op, sizes, target):
        return flce.footprint(op, sizes, target)

    def load(self, op, sizes, target):
        return flce.load(op, sizes, target)

    tile = not_supported("tiled as its fused nest (fuse-linear-cross-entropy-grad first); unfused it stays whole")
    distribute = not_supported("spread over cores as its fused nest; unfused it stays on one block")

    def reference(self, arrays, props):
        return self._gradients(arrays, props, magnitude=False)

    def magnitude(self, arrays, props):
        return self._gradients(arrays, props, magnitude=True)

    def _gradients(self, arrays, props, magnitude):
        """The gradients (magnitude=False), or each element's Σ|terms| (True)."""
        a = arrays
        dt = np.dtype(a["input"].dtype)
        softmax = a.get("softmax")
        if props.get("logits_block"):  # compact kept logits E and their blocks' maxima C
            softmax = forward.probability_from_compact(softmax, a["softmax_block_max"], props["logits_block"],
                                                       a["logits_max"], a["sum_exp_logits"])
        elif props.get("softmax_is_logits"):  # the kept logits: P from them and the statistics
            z = np.asarray(softmax, np.float32)
            softmax = (np.exp(z - a["logits_max"][:, None]) / a["sum_exp_logits"][:, None]).astype(np.float32)
        gi, gw = forward.fused_linear_cross_entropy_loss_grad(
            a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"], a.get("logits_max"),
            a.get("sum_exp_logits"), softmax, **_extensions(props),
            round_grad_logits_to=None if dt == np.float32 else dt, magnitude=magnitude,
        )
        if props.get("accumulate"):  # out += grad: what the outputs held, plus the gradients
            held = np.abs if magnitude else (lambda x: x)
            gi = gi + held(np.asarray(a["input_grad_out"], np.float32))
            gw = gw + held(np.asarray(a["weight_grad_out"], np.float32))
        return {"input_grad_out": gi, "weight_grad_out": gw}

    def random_inputs(self, shapes, dtypes, props, rng):
        bt, h = shapes["input"]
        v = shapes["weight"][0]
        dt = dtypes["input"]
        x = cast(rng.standard_normal((bt, h)) / max(h, 1) ** 0.25, dt)
        w = cast(rng.standard_normal((v, h)) / max(h, 1) ** 0.25, dt)
        z = forward.softcapped(np.asarray(x, np.float32) @ np.asarray(w, np.float32).T, props.get("softcap", 0.0))
        # Global statistics over all shards: at least this shard's max, and more mass than it has.
        local_max = z.max(axis=1) if v else np.zeros(bt, np.float32)
        m = (local_max + rng.uniform(0, 1, bt)).astype(np.float32)
        s = (np.exp(z - m[:, None]).sum(axis=1) + rng.uniform(0.5, 2, bt)).astype(np.float32)
        masked = (rng.random(bt) < 0.3) | (v == 0)  # an empty shard holds no target
        target = np.where(masked, 0, rng.integers(0, max(v, 1), bt))
        mask = masked if dtypes["target_mask"] == np.bool_ else ref.pack_target_mask(masked)
        if dtypes["target_mask"] == np.uint8 and shapes["target_mask"][0] > mask.size:
            padding = rng.integers(0, 256, shapes["target_mask"][0] - mask.size).astype(np.uint8)
            mask = np.concatenate([mask, padding])
        out = {
            "grad": rng.uniform(0.5, 1.5, bt).astype(np.float32),
            "input": x,
            "weight": w,
            "target_mask": np.asarray(mask, dtypes["target_mask"]),
            "masked_target": target.astype(dtypes["masked_target"]),
        }
        if "softmax" in shapes and props.get("logits_block"):  # compact: E = exp(Z − C), C
            out["softmax"], out["softmax_block_max"] = forward.compact_logits(z, props["logits_block"])
        elif "softmax" in shapes:
            kept = props.get("softmax_is_logits")  # the logits themselves, in the dtype asked for
            out["softmax"] = cast(z, dtypes["softmax"]) if kept else (np.exp(z - m[:, None]) / s[:, None]).astype(np.float32)
        if "logits_max" in shapes:
            out["logits_max"] = m
            out["sum_exp_logits"] = s
        if props.get("accumulate"):  # what the outputs hold before: the gradients are added to it
            for name in ("input_grad_out", "weight_grad_out"):
                if name in shapes:
                    out[name] = cast(rng.standard_normal(shapes[name]), dtypes[name])
        return out

    def api(self):
        from npugrad.ops import fused_linear_cross_entropy_loss_grad

        return fused_linear_cross_entropy_loss_grad

    def call_api(self, arrays, props):
        a = arrays
        ext = _extensions(props)
        gi, gw = self.api()(a["grad"], a["input"], a["weight"], a["target_mask"], a["masked_target"],
                            ext.pop("label_smoothing"), a.get("logits_max"), a.get("sum_exp_logits"), a.get("softmax"),
                            softmax_is_logits=bool(props.get("softmax_is_logits", False)),
                            logits_block=props.get("logits_block", 0), softmax_block_max=a.get("softmax_block_max"),
                            float32_input_grad=bool(props.get("float32_input_grad", False)), **ext)
        return {"input_grad_out": gi, "weight_grad_out": gw}

    def examples(self):
        for dtype, mode, packed in itertools.product(FLOAT_DTYPES, ("memory-saving", "high-performance"), (False, True)):
            bt, h, v = 75, 40, 300
            shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h),
                      "target_mask": ((bt + 7) // 8,) if packed else (bt,), "masked_target": (bt,)}
            if mode == "high-performance":
                shapes["softmax"] = (bt, v)
            else:
                shapes |= {"logits_max": (bt,), "sum_exp_logits": (bt,)}
            dtypes = dict.fromkeys(shapes, np.dtype(np.float32)) | {
                "input": dtype, "weight": dtype, "target_mask": np.dtype(np.uint8 if packed else np.bool_),
                "masked_target": np.dtype(np.int32)}
            yield Example(f"{mode}, {'uint8 bit-packed' if packed else 'bool'} mask", shapes, dtypes)
        for dtype, narrow in itertools.product(FLOAT_DTYPES, (False, True)):
            if narrow and dtype == np.float32:
                continue
            bt, h, v = 75, 40, 300  # the logits kept by a forward (softmax_is_logits), float32 or in the dtype
            shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": ((bt + 7) // 8,),
                      "masked_target": (bt,), "logits_max": (bt,), "sum_exp_logits": (bt,), "softmax": (bt, v)}
            dtypes = dict.fromkeys(shapes, np.dtype(np.float32)) | {
                "input": dtype, "weight": dtype, "target_mask": np.dtype(np.uint8), "masked_target": np.dtype(np.int64)}
            if narrow:
                dtypes["softmax"] = dtype
            yield Example(f"high-performance, kept {'narrow' if narrow else 'float32'} logits", shapes, dtypes,
                          {"softmax_is_logits": True, "label_smoothing": 0.1, "vocab_size": 1000})
        for dtype, block in itertools.product(FLOAT_DTYPES, (64, 100)):
            bt, h, v = 75, 40, 300  # compact kept logits: E in float16, C per block (the last one short)
            shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": ((bt + 7) // 8,),
                      "masked_target": (bt,), "logits_max": (bt,), "sum_exp_logits": (bt,), "softmax": (bt, v),
                      "softmax_block_max": (bt, -(-v // block))}
            dtypes = dict.fromkeys(shapes, np.dtype(np.float32)) | {
                "input": dtype, "weight": dtype, "target_mask": np.dtype(np.uint8), "masked_target": np.dtype(np.int64),
                "softmax": np.dtype(np.float16)}
            wide = block == 100 and dtype != np.float32  # and a float32 dX (float32_input_grad)
            yield Example(f"high-performance, compact kept logits in blocks of {block}"
                          + (", float32 input grad" if wide else ""), shapes, dtypes,
                          {"softmax_is_logits": True, "logits_block": block,
                           **({"label_smoothing": 0.1, "vocab_size": 1000} if block == 100 else {}),
                           **({"float32_input_grad": True} if wide else {})})
        for dtype, (label, props) in itertools.product(FLOAT_DTYPES, EXTENSIONS):
            bt, h, v = 75, 40, 300
            shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": ((bt + 7) // 8,),
                      "masked_target": (bt,), "logits_max": (bt,), "sum_exp_logits": (bt,)}
            dtypes = dict.fromkeys(shapes, np.dtype(np.float32)) | {
                "input": dtype, "weight": dtype, "target_mask": np.dtype(np.uint8), "masked_target": np.dtype(np.int64)}
            yield Example(f"memory-saving, {label}", shapes, dtypes, props)
