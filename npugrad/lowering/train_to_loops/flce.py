"""train.fused_linear_cross_entropy_loss_grad → the unfused reference loop nest: for each token t
and vocabulary row v, the logit gradient G[t, v] is formed once in float32 and scattered into
both GEMMs, whose float32 accumulators are rounded once to the outputs at the end.

    train.fused_linear_cross_entropy_loss_grad grad(%g ...) input(%x ...) weight(%w ...) ...
        -> input_grad_out(%dx : memref<?x?xbf16>) weight_grad_out(%dw : memref<?x?xbf16>)
becomes
    %ax = memref.alloc(...) : memref<?x?xf32>   (%aw likewise; both zeroed)
    scf.for %t { scf.for %v {
      %p = exp(x[t]·w[v] − max[t]) / sum[t]      (softmax[t, v] in high-performance mode)
      %G = g[t]·(%p − select(m[t] = 0 ∧ v = target[t], 1, 0)), rounded through bf16
      scf.for %h { ax[t, h] += %G·w[v, h]; aw[v, h] += %G·x[t, h] } } }
    dx = truncf(ax); dw = truncf(aw); memref.dealloc %ax, %aw

Float32 outputs are their own accumulators. The loops run in a fixed order, so results are
deterministic. The target enters only a compare with v, never an index: an out-of-range target
cannot touch memory.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import DYNAMIC_INDEX, IntegerType, MemRefType, f32, i1
from xdsl.ir import SSAValue

from npugrad import dtypes
from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.ir import IRBuilder
from npugrad.ir.expr import Float
from npugrad.lowering.fills import zero_fill


def lower_fused_linear_cross_entropy_loss_grad(op: FusedLinearCrossEntropyLossGradOp, e: IRBuilder) -> None:
    element = op.input.type.element_type  # type: ignore[attr-defined]
    bt, h = e.dim(op.input, 0), e.dim(op.input, 1)
    v = e.dim(op.weight, 0)
    outputs = (op.input_grad_out, op.weight_grad_out)
    acc_in, acc_w = accumulators = [_accumulator(e, out) for out in outputs]
    for acc in accumulators:
        zero_fill(e, acc)
    with e.loop(bt) as t:
        g = e.load_f32(op.grad, [t])
        in_shard = target_in_shard(e, op.target_mask, t)
        target = e.int_to_index(e.load(op.masked_target, [t]))
        if not op.high_performance:
            row_max = e.load_f32(op.logits_max, [t])
            row_sum = e.load_f32(op.sum_exp_logits, [t])
        with e.loop(v) as j:
            if op.high_performance:
                p = e.load_f32(op.softmax, [t, j])
            else:
                p = ((Float(e, dot(e, op.input, op.weight, t, j, h)) - row_max).exp() / row_sum).value
            is_target = e.emit(arith.AndIOp(in_shard, e.emit(arith.CmpiOp(j, target, "eq"))))
            one_hot = e.emit(arith.SelectOp(is_target, e.f32(1.0), e.f32(0.0)))
            grad_logit = (Float(e, g) * (Float(e, p) - one_hot)).value
            # The device feeds both GEMMs from G stored in the input dtype (spec §1.6).
            grad_logit = e.to_f32(e.from_f32(grad_logit, element))
            with e.loop(h) as k:
                _accumulate(e, acc_in, [t, k], e.emit(arith.MulfOp(grad_logit, e.load_f32(op.weight, [j, k]))))
                _accumulate(e, acc_w, [j, k], e.emit(arith.MulfOp(grad_logit, e.load_f32(op.input, [t, k]))))
    for acc, out in zip(accumulators, outputs):
        if acc is not out:
            with e.loop_nest(e.dims(out)) as ivs:
                e.store_f32(e.load(acc, ivs), out, ivs)
            e.dealloc(acc)


def _accumulator(e: IRBuilder, out: SSAValue) -> SSAValue:
    """A float32 buffer of out's shape: out itself when it is float32, else a fresh allocation."""
    t = out.type
    assert isinstance(t, MemRefType)
    if t.element_type == f32:
        return out
    return e.alloc([e.dim(out, a) if d == DYNAMIC_INDEX else d for a, d in enumerate(t.get_shape())], f32)


def _accumulate(e: IRBuilder, acc: SSAValue, ivs: list[SSAValue], value: SSAValue) -> None:
    e.store(e.emit(arith.AddfOp(e.load(acc, ivs), value)), acc, ivs)


def target_in_shard(e: IRBuilder, mask: SSAValue, t: SSAValue) -> SSAValue:
    """i1: m_t = 0, from a bool mask or bit t % 8 (LSB first) of byte t // 8 of a packed one."""
    if not dtypes.is_uint8(mask.type.element_type):  # type: ignore[attr-defined]
        return e.emit(arith.CmpiOp(e.load(mask, [t]), e.const(False, i1), "eq"))
    i8 = IntegerType(8)
    byte = e.load(mask, [e.emit(arith.DivUIOp(t, e.idx(8)))])
    shift = e.emit(arith.IndexCastOp(e.emit(arith.RemUIOp(t, e.idx(8))), i8))
    return e.emit(arith.CmpiOp(e.emit(arith.AndIOp(e.emit(arith.ShRUIOp(byte, shift)), e.const(1, i8))), e.const(0, i8), "eq"))


def dot(e: IRBuilder, x: SSAValue, w: SSAValue, t: SSAValue, v: SSAValue, h: SSAValue) -> SSAValue:
    """Σ_k x[t, k]·w[v, k] in float32, in order of k: an scf.for carrying the partial sum."""
    total = [e.f32(0.0)]
    with e.carried_loop(h, total) as (k, (partial,), updated):
        updated.append((Float(e, partial) + Float(e, e.load_f32(x, [t, k])) * e.load_f32(w, [v, k])).value)
    return total[0]
