"""grad.binary_cross_entropy_grad → one loop nest over the elements of input_x."""

from __future__ import annotations

from xdsl.ir import SSAValue

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.lowering.emit import Emitter


def upstream(op: BinaryCrossEntropyGradOp, e: Emitter) -> SSAValue | None:
    """The float32 upstream gradient u shared by every element (dloss, or dloss/N for mean);
    None for reduction none, whose dloss is read element by element."""
    reduction = op.prop_int("reduction")
    if reduction == 0:
        return None
    zeros = [e.idx(0)] * op.dloss.type.get_num_dims()  # type: ignore[attr-defined]
    u = e.load_f32(op.dloss, zeros)
    if reduction == 1:
        u = e.divf(u, e.index_to_f32(e.numel(op.input_x)))
    return u


def lower_elements(
    e: Emitter, x: SSAValue, y: SSAValue, u: SSAValue | None, dloss: SSAValue, weight: SSAValue | None, dx: SSAValue
) -> None:
    """dx = u·w·(x − y)/max(x(1 − x), 1e-12) over the elements of x; `u` None: dloss per element.
    The tiling of this op (passes/tiling/elementwise.py) emits it on tiles, so that tiled and
    untiled kernels compute every element with the same operations."""
    dims = e.dims(x)
    one = e.f32(1.0)
    eps = e.f32(BinaryCrossEntropyGradOp.EPSILON)
    with e.loop_nest(dims) as ivs:
        xv = e.load_f32(x, ivs)
        yv = e.load_f32(y, ivs)
        uv = e.load_f32(dloss, ivs) if u is None else u
        den = e.maxf(e.mulf(xv, e.subf(one, xv)), eps)
        d = e.divf(e.mulf(uv, e.subf(xv, yv)), den)
        if weight is not None:
            d = e.mulf(d, e.load_f32(weight, ivs))
        e.store_f32(d, dx, ivs)


def lower_binary_cross_entropy_grad(op: BinaryCrossEntropyGradOp, e: Emitter) -> None:
    lower_elements(e, op.input_x, op.input_y, upstream(op, e), op.dloss, op.weight, op.dx)
