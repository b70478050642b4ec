"""train.binary_cross_entropy_grad → one loop nest over the elements of input_x."""

from __future__ import annotations

from xdsl.ir import SSAValue

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.ir import IRBuilder
from npugrad.ir.expr import Float


def upstream(op: BinaryCrossEntropyGradOp, e: IRBuilder) -> SSAValue | None:
    """The float32 upstream gradient u shared by every element (dloss, or dloss/N for mean);
    None for reduction none, whose dloss is read element by element."""
    reduction = op.prop_int("reduction")
    if reduction == 0:
        return None
    zeros = [e.idx(0)] * op.dloss.type.get_num_dims()  # type: ignore[attr-defined]
    u = Float(e, e.load_f32(op.dloss, zeros))
    if reduction == 1:
        u = u / e.index_to_f32(e.numel(op.input_x))
    return u.value


def lower_elements(
    e: IRBuilder, x: SSAValue, y: SSAValue, u: SSAValue | None, dloss: SSAValue, weight: SSAValue | None, dx: SSAValue
) -> None:
    """dx = u·w·(x − y)/max(x(1 − x), 1e-12) over the elements of x; `u` None: dloss per element.
    The tiling of this op (passes/tiling/elementwise.py) emits it on tiles, so that tiled and
    untiled kernels compute every element with the same operations."""
    dims = e.dims(x)
    one = Float(e, e.f32(1.0))
    eps = e.f32(BinaryCrossEntropyGradOp.EPSILON)
    with e.loop_nest(dims) as ivs:
        xv = Float(e, e.load_f32(x, ivs))
        yv = Float(e, e.load_f32(y, ivs))
        uv = Float(e, e.load_f32(dloss, ivs) if u is None else u)
        den = (xv * (one - xv)).maximum(eps)
        d = uv * (xv - yv) / den
        if weight is not None:
            d = d * e.load_f32(weight, ivs)
        e.store_f32(d.value, dx, ivs)


def lower_binary_cross_entropy_grad(op: BinaryCrossEntropyGradOp, e: IRBuilder) -> None:
    lower_elements(e, op.input_x, op.input_y, upstream(op, e), op.dloss, op.weight, op.dx)
