"""train.fused_linear_cross_entropy_loss_grad → the unfused reference loop nest: for each token t
and vocabulary row v, the logit gradient G[t, v] is formed once in float32 and scattered into
both GEMMs, whose float32 accumulators are rounded once to the outputs at the end.

    train.fused_linear_cross_entropy_loss_grad grad(%g ...) input(%x ...) weight(%w ...) ...
        -> input_grad_out(%dx : memref<?x?xbf16>) weight_grad_out(%dw : memref<?x?xbf16>)
becomes
    %ax = memref.alloc(...) : memref<?x?xf32>   (%aw likewise; both zeroed, or, with
                                                 `accumulate`, the outputs widened)
    scf.for %t { scf.for %v {
      %p = exp(x[t]·w[v] − max[t]) / sum[t]      (softmax[t, v] in high-performance mode; with
                                                 softmax_is_logits exp(softmax[t, v] − max[t]) / sum[t],
                                                 and logits_block B (softmax[t, v]·exp(C[t, v/B] − max[t])) / sum[t])
      %G = g[t]·(%p − select(m[t] = 0 ∧ v = target[t], 1, 0)), rounded through bf16
      scf.for %h { ax[t, h] += %G·w[v, h]; aw[v, h] += %G·x[t, h] } } }
    dx = truncf(ax); dw = truncf(aw); memref.dealloc %ax, %aw

FORWARD.md §4's extensions (label smoothing, z-loss, softcap) enter G through `Gradient`, the
same code the fused nest uses. Float32 outputs are their own accumulators. The loops run in a fixed order, so results are
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
from npugrad.lowering.fills import widen_into, zero_fill


def lower_fused_linear_cross_entropy_loss_grad(op: FusedLinearCrossEntropyLossGradOp, e: IRBuilder) -> None:
    element = op.input.type.element_type  # type: ignore[attr-defined]
    bt, h = e.dim(op.input, 0), e.dim(op.input, 1)
    v = e.dim(op.weight, 0)
    outputs = (op.input_grad_out, op.weight_grad_out)
    acc_in, acc_w = accumulators = [_accumulator(e, out) for out in outputs]
    accumulate = op.prop_bool("accumulate")
    for acc, out in zip(accumulators, outputs):
        if not accumulate:
            zero_fill(e, acc)
        elif acc is not out:  # the sums start from what the output holds, widened
            widen_into(e, out, acc)
    gradient = Gradient(op, e)
    with e.loop(bt) as t:
        row = gradient.row(t)
        in_shard = target_in_shard(e, op.target_mask, t)
        target = e.int_to_index(e.load(op.masked_target, [t]))
        with e.loop(v) as j:
            logit = None
            if op.high_performance:
                p = e.load_f32(op.softmax, [t, j])
                if op.compact_block:  # compact: exp(Z − C) and C of the column's block
                    c = e.load(op.softmax_block_max, [t, e.emit(arith.DivUIOp(j, e.idx(op.compact_block)))])
                    p = gradient.from_compact(row, p, gradient.block_scale(row, c))
                elif op.logits_kept:  # the logit itself: P made from it (softmax_is_logits)
                    p = gradient.probability(row, p)
            else:
                logit = softcap(e, Float(e, dot(e, op.input, op.weight, t, j, h)), gradient.cap).value
                p = gradient.probability(row, logit)
            is_target = e.emit(arith.AndIOp(in_shard, e.emit(arith.CmpiOp(j, target, "eq"))))
            grad_logit = gradient.element(row, p, logit, is_target)
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


class Gradient:
    """G = g·d of one element, d = P [+ 2λ·lse·P] [− α/K] [− (1 − α) at the target]
    [· (1 − (Z'/c)²)], in the reference's float32 operation order (reference/forward.py).
    Shared by the unfused lowering and the fused nest, so both compute the same bits."""

    def __init__(self, op: FusedLinearCrossEntropyLossGradOp, e: IRBuilder):
        self.op, self.e = op, e
        self.alpha = op.prop_float("label_smoothing")
        self.k = float(op.prop_int("vocab_size"))
        self.z_loss = op.prop_float("z_loss")
        self.cap = op.prop_float("softcap")

    def row(self, t: SSAValue) -> dict[str, Float | SSAValue]:
        """What every element of row t shares: g, and M, S (and 2λ·lse) in memory-saving mode."""
        e, op = self.e, self.op
        row: dict[str, Float | SSAValue] = {"g": e.load(op.grad, [t])}
        if not op.high_performance or op.logits_kept:
            row["m"] = e.load(op.logits_max, [t])
            row["s"] = e.load(op.sum_exp_logits, [t])
            if self.z_loss:
                row["zl"] = 2 * self.z_loss * (Float(e, row["m"]) + Float(e, row["s"]).log())
        return row

    def element(self, row, probability: SSAValue, logit: SSAValue | None, target: bool | SSAValue) -> SSAValue:
        """G of one element; `target`: whether it is the row's target column (an i1 when only
        known at run time: then 0 is subtracted elsewhere, which changes no bit)."""
        e = self.e
        d = Float(e, probability)
        if self.z_loss:
            d = d + row["zl"] * d
        if self.alpha:
            d = d - (Float(e, e.f32(self.alpha)) / self.k)
        if target is not False:  # the one-hot's weight, 1 − α, at the target column
            one = (1.0 - Float(e, e.f32(self.alpha))) if self.alpha else Float(e, e.f32(1.0))
            d = d - (e.emit(arith.SelectOp(target, one.value, e.f32(0.0))) if isinstance(target, SSAValue) else one)
        if self.cap:
            zc = Float(e, logit) / self.cap
            d = d * (1.0 - zc * zc)
        return (Float(e, row["g"]) * d).value

    def probability(self, row, logit: SSAValue) -> SSAValue:
        return ((Float(self.e, logit) - row["m"]).exp() / row["s"]).value

    def block_scale(self, row, block_max: SSAValue) -> SSAValue:
        """exp(C − M): what a block's compact logits E = exp(Z − C) are scaled by (logits_block)."""
        return (Float(self.e, block_max) - row["m"]).exp().value

    def from_compact(self, row, compact: SSAValue, scale: SSAValue) -> SSAValue:
        """P = (E·exp(C − M))/S from a compact logit E (float32) and its block's scale."""
        return ((Float(self.e, compact) * scale) / row["s"]).value


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


def softcap(e: IRBuilder, z: Float, cap: float) -> Float:
    """Z' = c·tanh(Z/c) (0: no cap)."""
    if not cap:
        return z
    return (z / cap).tanh() * cap


def dot(e: IRBuilder, x: SSAValue, w: SSAValue, t: SSAValue, v: SSAValue, h: SSAValue) -> SSAValue:
    """Σ_k x[t, k]·w[v, k] in float32, in order of k: an scf.for carrying the partial sum."""
    total = [e.f32(0.0)]
    with e.carried_loop(h, total) as (k, (partial,), updated):
        updated.append((Float(e, partial) + Float(e, e.load_f32(x, [t, k])) * e.load_f32(w, [v, k])).value)
    return total[0]
