"""train.nll_loss_backward → a zero-fill nest over out, then one guarded store per sample.

    train.nll_loss_backward ... target(%t : memref<?xi64>) ... -> out(%o : memref<?x?xf32>)
becomes
    scf.for %i, %j { memref.store %zero, %o[%i, %j] }
    scf.for %n {
      %y = memref.load %t[%n]
      scf.if (%y != ignore_index) & (%y <u C) { memref.store −w[%y]·scale, %o[%n, %y] }
    }
With `out_zeroed` (out holds zeros already: a fresh mapping the API allocated) there is no fill.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import MemRefType, i64
from xdsl.ir import SSAValue

from npugrad import dtypes
from npugrad.dialect import NLLLossBackwardOp
from npugrad.ir import IRBuilder, index
from npugrad.lowering.fills import zero_fill


def load_scalar(e: IRBuilder, ref: SSAValue) -> SSAValue:
    """The only element of a one-element memref (rank 0, 1 or more), as float32."""
    return e.load_f32(ref, [e.idx(0)] * ref.type.get_num_dims())  # type: ignore[attr-defined]


def load_target(e: IRBuilder, target: SSAValue, indices: list[SSAValue]) -> SSAValue:
    """target[indices] as i64, extended as its dtype says (uint8 zero-, int32 sign-extended)."""
    t = target.type
    assert isinstance(t, MemRefType)
    y = e.load(target, indices)
    if dtypes.is_uint8(t.element_type):
        return e.emit(arith.ExtUIOp(y, i64))
    return y if y.type == i64 else e.emit(arith.ExtSIOp(y, i64))


def lower_nll_loss_backward(op: NLLLossBackwardOp, e: IRBuilder) -> None:
    reduction = op.prop_int("reduction")
    rank = op.self.type.get_num_dims()  # type: ignore[attr-defined]
    two_d = rank == 2
    per_sample = reduction == 0 and two_d
    # Sizes from out, the buffer written (the verifier/API make them those of self).
    c = e.dim(op.out, rank - 1)
    ignore = e.const(op.prop_int("ignore_index"), i64)

    if not op.prop_bool("out_zeroed"):
        zero_fill(e, op.out)
    if not per_sample:
        scale = load_scalar(e, op.grad_output)
        if reduction == 1:
            # total_weight as given: the forward pass defined it, and 0 follows IEEE rules.
            scale = e.emit(arith.DivfOp(scale, load_scalar(e, op.total_weight)))
        neg_scale = e.emit(arith.NegfOp(scale))

    def one_sample(sample: list[SSAValue]) -> None:
        y = load_target(e, op.target, sample)
        y_idx = e.emit(arith.IndexCastOp(y, index))
        # Unsigned: a negative y wraps to a huge value, so one compare is 0 <= y < C. The API
        # rejects such targets before launch; this keeps a bad value from ever writing memory.
        in_range = e.emit(arith.CmpiOp(y_idx, c, "ult"))
        kept = e.emit(arith.CmpiOp(y, ignore, "ne"))
        with e.if_(e.emit(arith.AndIOp(kept, in_range))):
            s = e.emit(arith.NegfOp(e.load_f32(op.grad_output, sample))) if per_sample else neg_scale
            w = e.load_f32(op.weight, [y_idx])
            e.store_f32(e.emit(arith.MulfOp(w, s)), op.out, [*sample, y_idx])

    if two_d:
        with e.loop(e.dim(op.out, 0)) as n:
            one_sample([n])
    else:
        one_sample([])
