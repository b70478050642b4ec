"""train.apply_fused_ema_adam: one Adam/AdamW step, then the parameter EMA, in place (OPS.md §4)."""

from __future__ import annotations

import inspect
import itertools

import numpy as np

from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.lowering.train_to_loops.ema_adam import lower_apply_fused_ema_adam
from npugrad.passes.tiling import elementwise
from npugrad.recipes.base import FLOAT_DTYPES, Example, OpRecipe, cast
from npugrad.reference import ops as ref

STATES = ("var", "m", "v", "s")
TILED = ("grad", *STATES)  # one value per element; step and hyperparameters are read where they are
HYPERPARAMETERS = ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER
DEFAULTS = {k: p.default for k, p in inspect.signature(ref.apply_fused_ema_adam).parameters.items()
            if k in HYPERPARAMETERS}


def _prepare(e):
    return None


class ApplyFusedEmaAdam(OpRecipe):
    op = ApplyFusedEmaAdamOp

    def lower(self, op, e):
        lower_apply_fused_ema_adam(op, e)

    def tiled_operands(self, op):
        return TILED

    def choose_tile_sizes(self, op, target):
        return elementwise.choose_tile_sizes(op, TILED, target)

    def footprint(self, op, sizes, target):
        return elementwise.footprint(op, TILED, sizes, target)

    def load(self, op, sizes, target):
        return elementwise.load(op, TILED, sizes, target)

    def tile(self, op, target, e):
        elementwise.tile_elementwise(op, target, e, TILED, _prepare, elementwise.same_op(op))

    def distribute(self, op, e):
        return elementwise.distribute_elementwise(op, e, TILED, _prepare, elementwise.same_op(op))

    def reference(self, arrays, props):
        a = arrays
        state = {k: np.array(a[k], np.float32) for k in STATES}
        hyper = {k: props[k] for k in (*HYPERPARAMETERS, "mode", "bias_correction") if k in props}
        if a.get("hyperparameters") is not None:
            hyper.update(zip(HYPERPARAMETERS, map(float, np.asarray(a["hyperparameters"], np.float32))))
        ref.apply_fused_ema_adam(np.asarray(a["grad"], np.float32), state["var"], state["m"], state["v"], state["s"],
                                 a["step"], **hyper)
        return state

    def random_inputs(self, shapes, dtypes, props, rng):
        shape, dt = shapes["grad"], dtypes["grad"]
        out = {
            "grad": cast(rng.standard_normal(shape), dt),
            "var": cast(rng.standard_normal(shape), dt),
            "m": cast(0.1 * rng.standard_normal(shape), dt),
            "v": cast(rng.uniform(0.001, 0.1, shape), dt),
            "s": cast(rng.standard_normal(shape), dt),
            "step": np.full(shapes["step"], int(rng.integers(1, 20)), np.int64),
        }
        if "hyperparameters" in shapes:
            # The run-time operand carries the properties' values (the kernel then ignores the properties).
            out["hyperparameters"] = np.array([props.get(k, DEFAULTS[k]) for k in HYPERPARAMETERS], np.float32)
        return out

    def api(self):
        from npugrad.ops import apply_fused_ema_adam

        return apply_fused_ema_adam

    def call_api(self, arrays, props):
        """The API updates var, m, v, s (of `arrays`) in place."""
        a = arrays
        hyper = {k: v for k, v in props.items() if k in (*HYPERPARAMETERS, "mode", "bias_correction")}
        self.api()(a["grad"], a["var"], a["m"], a["v"], a["s"], a["step"], **hyper)
        return {k: a[k] for k in STATES}

    def examples(self):
        for dtype, mode, bias_correction in itertools.product(FLOAT_DTYPES, (0, 1), (True, False)):
            props = {"lr": 1e-2, "ema_decay": 0.99, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8,
                     "mode": mode, "bias_correction": bias_correction, "weight_decay": 0.05}
            shapes = {k: (61, 17) for k in TILED} | {"step": (1,)}
            dtypes = dict.fromkeys(TILED, dtype) | {"step": np.dtype(np.int64)}
            label = f"{'AdamW' if mode else 'Adam+L2'}, bias correction {'on' if bias_correction else 'off'}"
            yield Example(label, shapes, dtypes, props)
