"""docs/extending.md, followed: a new op (the gradient of a mean-squared-error loss) is one op
class and one recipe, and the whole pipeline — untiled, spread over cores, tiled for npu-a2 — runs
it against its NumPy reference without any registry being edited."""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from xdsl.dialects.builtin import I64, IntegerAttr
from xdsl.irdl import ParsePropInAttrDict, opt_prop_def, prop_def

from npugrad.compiler import Pipeline
from npugrad.dialect.attributes import TileSizesAttr
from npugrad.dialect.checks import FLOATS, Checker
from npugrad.dialect.train import TrainOp, input_def, output_def, train_op
from npugrad.ir.expr import Float
from npugrad.passes.tiling import elementwise
from npugrad.recipes import Example, OpRecipe, not_supported
from npugrad.runtime import pool
from npugrad.runtime.specialize import OperandClass, compile_op

TILED = ["x", "y", "dx"]


@train_op
class MseLossGradOp(TrainOp):
    """dx = 2·u·(x − y), u = dloss[0] (sum) or dloss[0]/N (mean)."""

    name = "train.mse_loss_grad"
    x = input_def()
    y = input_def()
    dloss = input_def()
    dx = output_def()
    reduction = prop_def(IntegerAttr[I64], default_value=IntegerAttr(1, 64))
    tile_sizes = opt_prop_def(TileSizesAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)
    irdl_options = (ParsePropInAttrDict(),)

    @classmethod
    def check(cls, c: Checker) -> None:
        c.prop_check("reduction", c.prop("reduction") in (1, 2), "1 (mean) or 2 (sum)")
        c.element("x", FLOATS)
        for name in ("y", "dx", "dloss"):
            c.same_element(name, "x")
        for name in ("y", "dx"):
            c.shape_is(name, c.dims("x"), "the shape of 'x'")
        c.one_element("dloss")


def _upstream(op, e):
    u = Float(e, e.load_f32(op.dloss, [e.idx(0)] * op.dloss.type.get_num_dims()))
    return (u / e.index_to_f32(e.numel(op.x)) if op.prop_int("reduction") == 1 else u).value


def _elements(e, x, y, u, dx):
    with e.loop_nest(e.dims(x)) as ivs:
        d = 2.0 * Float(e, u) * (Float(e, e.load_f32(x, ivs)) - e.load_f32(y, ivs))
        e.store_f32(d.value, dx, ivs)


class MseLossGrad(OpRecipe):
    op = MseLossGradOp

    def lower(self, op, e):
        _elements(e, op.x, op.y, _upstream(op, e), op.dx)

    def choose_tile_sizes(self, op, target):
        return elementwise.choose_tile_sizes(op, TILED, target)

    def footprint(self, op, sizes, target):
        return elementwise.footprint(op, TILED, sizes, target)

    def load(self, op, sizes, target):
        return elementwise.load(op, TILED, sizes, target)

    def _compute(self, op):
        return lambda e, tiles, u: _elements(e, tiles["x"], tiles["y"], u, tiles["dx"])

    def tile(self, op, target, e):
        elementwise.tile_elementwise(op, target, e, TILED, lambda e: _upstream(op, e), self._compute(op))

    def distribute(self, op, e):
        return elementwise.distribute_elementwise(op, e, TILED, lambda e: _upstream(op, e), self._compute(op))

    def reference(self, arrays, props):
        x, y = (np.asarray(arrays[k], np.float32) for k in ("x", "y"))
        u = np.float32(np.asarray(arrays["dloss"], np.float32).reshape(-1)[0])
        if props.get("reduction", 1) == 1:
            u = u / np.float32(x.size)
        return {"dx": (np.float32(2) * u * (x - y)).astype(np.float32)}

    def random_inputs(self, shapes, dtypes, props, rng):
        return {k: rng.standard_normal(shapes[k]).astype(dtypes[k]) for k in ("x", "y", "dloss")}

    api = not_supported("a test op has no public API")
    call_api = not_supported("a test op has no public API")

    def examples(self):
        yield Example("mean", {"x": (300,), "y": (300,), "dloss": (1,)}, dict.fromkeys(("x", "y", "dloss"), np.float32))


@pytest.mark.parametrize("pipeline", [Pipeline(distribute=False), Pipeline(), Pipeline(target="npu-a2")],
                         ids=["untiled", "over-cores", "npu-a2"])
@pytest.mark.parametrize("reduction", [1, 2])
def test_a_new_op_runs_through_every_pipeline(rng, pipeline, reduction):
    recipe = MseLossGrad()
    n = 200_003  # spread over cores (> 2 blocks' worth), not a multiple of any tile or vector
    shapes = {"x": (n,), "y": (n,), "dloss": (1,), "dx": (n,)}
    dtypes = dict.fromkeys(shapes, np.dtype(np.float32))
    arrays = recipe.random_inputs(shapes, dtypes, {}, rng)
    arrays["dx"] = np.full(n, np.nan, np.float32)
    classes = {k: OperandClass("float32", (None,), False) for k in shapes}
    kernel = compile_op(MseLossGradOp, classes, {"reduction": reduction}, pipeline)
    kernel(*(arrays[k] for k in MseLossGradOp.operand_names()), threads=pool.threads())
    want = recipe.reference(arrays, {"reduction": reduction})["dx"]
    np.testing.assert_allclose(arrays["dx"], want, rtol=1e-6, atol=0)
