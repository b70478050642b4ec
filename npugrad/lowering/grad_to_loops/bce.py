"""grad.binary_cross_entropy_grad → one loop nest over the elements of input_x."""

from __future__ import annotations

from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.lowering.emit import Emitter


def lower_binary_cross_entropy_grad(op: BinaryCrossEntropyGradOp, e: Emitter) -> None:
    reduction = op.prop_int("reduction")
    dims = e.dims(op.input_x)
    if reduction != 0:
        zeros = [e.idx(0)] * op.dloss.type.get_num_dims()  # type: ignore[attr-defined]
        upstream = e.load_f32(op.dloss, zeros)
        if reduction == 1:
            upstream = e.divf(upstream, e.index_to_f32(e.numel(op.input_x)))
    one = e.f32(1.0)
    eps = e.f32(op.EPSILON)
    with e.loop_nest(dims) as ivs:
        x = e.load_f32(op.input_x, ivs)
        y = e.load_f32(op.input_y, ivs)
        u = e.load_f32(op.dloss, ivs) if reduction == 0 else upstream
        den = e.maxf(e.mulf(x, e.subf(one, x)), eps)
        dx = e.divf(e.mulf(u, e.subf(x, y)), den)
        if op.weight is not None:
            dx = e.mulf(dx, e.load_f32(op.weight, ivs))
        e.store_f32(dx, op.dx, ivs)
