"""train.fused_linear_online_max_sum and train.fused_cross_entropy_loss_with_max_sum → loops: the
unfused reference lowerings (the pipeline fuses the first, see fuse-linear-online-max-sum).

    train.fused_linear_online_max_sum input(%x ...) weight(%w ...) target(%t ...) -> logits_max_local_out(%m ...) ...
becomes
    scf.for %t {                                   // one token row
      m = -inf, s = 0, Σz = 0
      scf.for %v { z = softcap(x[t]·w[v]);  m' = max(m, z);  s = s·exp(m − m') + exp(z − m');  m = m' ... }
      %m[t] = m; %s[t] = s; %p[t] = z_target − m (in the shard) ...
    }
    scf.for %byte { mask[byte] = the 8 rows' bits, 1 = not in the shard or past BT }

The row maximum is online (updated as the logits come), the sum rescaled when it grows: the
statistics need one pass over the logits, as the fused kernel computes them.
"""

from __future__ import annotations

from xdsl.dialects import arith
from xdsl.dialects.builtin import IntegerType, UnrealizedConversionCastOp, i1, i64
from xdsl.ir import SSAValue

from npugrad.dialect import FusedCrossEntropyLossWithMaxSumOp, FusedLinearOnlineMaxSumOp
from npugrad.ir import IRBuilder, index
from npugrad.ir.expr import Float
from npugrad.lowering.train_to_loops.flce import dot, softcap


def target_local(e: IRBuilder, op: FusedLinearOnlineMaxSumOp, t: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(the row's target is in [start, end), target − start as i64). The start is the property,
    or read from `vocab_range` at run time; end − start is then V, weight's rows (the API
    checked that the range is V wide), so that no range makes a column past the shard's."""
    y = e.load(op.target, [t])
    if y.type != i64:
        y = e.emit(arith.ExtSIOp(y, i64))
    if op.vocab_range is None:
        start = e.const(op.prop_int("vocab_start_index"), i64)
        v = e.const(op.prop_int("vocab_end_index") - op.prop_int("vocab_start_index"), i64)
    else:
        start = e.load(op.vocab_range, [e.idx(0)])
        v = e.emit(arith.IndexCastOp(e.dim(op.weight, 0), i64))
    local = e.emit(arith.SubiOp(y, start))
    # Unsigned: below the shard wraps to a huge value, so one compare bounds both ends.
    return e.emit(arith.CmpiOp(local, v, "ult")), local


def skipped(e: IRBuilder, op, t: SSAValue) -> SSAValue | None:
    """i1: the row's target is the op's ignore_index (None when the op ignores no row)."""
    ignore = op.ignore_index
    if ignore is None:
        return None
    y = e.load(op.target, [t])
    if y.type != i64:
        y = e.emit(arith.ExtSIOp(y, i64))
    return e.emit(arith.CmpiOp(y, e.const(ignore.value.data, i64), "eq"))


def write_masks(e: IRBuilder, op: FusedLinearOnlineMaxSumOp, rows: tuple[SSAValue, SSAValue] | None = None):
    """target_mask_out (bit-packed, LSB first, 1 = not in the shard, padding bits 1) and
    masked_target_out (target − start in the shard, else 0), for bytes [first, last) of the mask
    (all of them when `rows` is None) and the rows they cover. Returns the loop over the bytes."""
    bt = e.dim(op.input, 0)
    i8 = IntegerType(8)
    first, last = rows if rows is not None else (e.idx(0), e.dim(op.target_mask_out, 0))
    with e.loop(last, lb=first) as byte:
        bits = e.const(0, i8)
        for b in range(8):
            t = e.emit(arith.AddiOp(e.emit(arith.MuliOp(byte, e.idx(8))), e.idx(b)))
            real = e.emit(arith.CmpiOp(t, bt, "ult"))  # the last byte's bits past BT are padding
            safe_t = e.emit(arith.SelectOp(real, t, e.idx(0)))
            inside, local = target_local(e, op, safe_t)
            inside = e.emit(arith.AndIOp(inside, real))
            with e.if_(real):
                zero = e.const(0, i64)
                masked = e.emit(arith.SelectOp(inside, local, zero))
                out_t = op.masked_target_out.type.element_type  # type: ignore[attr-defined]
                if out_t != i64:
                    masked = e.emit(arith.TruncIOp(masked, out_t))
                e.store(masked, op.masked_target_out, [safe_t])
            bit = e.emit(arith.ExtUIOp(e.emit(arith.XOrIOp(inside, e.const(True, i1))), i8))
            bits = e.emit(arith.OrIOp(bits, e.emit(arith.ShLIOp(bit, e.const(b, i8)))))
        e.store(_unsigned(e, bits, op.target_mask_out), op.target_mask_out, [byte])
    return byte.owner.parent_op()  # type: ignore[union-attr]


def _unsigned(e: IRBuilder, value: SSAValue, ref: SSAValue) -> SSAValue:
    """A signless i8 as the ui8 element a uint8 memref stores."""
    element = ref.type.element_type  # type: ignore[attr-defined]
    return value if value.type == element else e.emit(UnrealizedConversionCastOp.get([value], [element]))


def lower_fused_linear_online_max_sum(op: FusedLinearOnlineMaxSumOp, e: IRBuilder) -> None:
    bt, h = e.dim(op.input, 0), e.dim(op.input, 1)
    v = e.dim(op.weight, 0)
    cap = op.prop_float("softcap")
    block = op.prop_int("logits_block")
    write_masks(e, op)
    outputs = [op.logits_max_local_out, op.sum_exp_logits_local_out, op.predicted_logits_local_out]
    with e.loop(bt) as t:
        skip = skipped(e, op, t)

        def statistics() -> None:
            inside, local = target_local(e, op, t)
            local_index = e.emit(arith.IndexCastOp(local, index))
            state = [e.f32(float("-inf")), e.f32(0.0), e.f32(0.0), e.f32(0.0)]  # m, s, Σz, z_target
            with e.carried_loop(v, state) as (j, (m, s, sum_z, z_target), updated):
                z = softcap(e, Float(e, dot(e, op.input, op.weight, t, j, h)), cap)
                if op.vocab_parallel_logits_out is not None and not block:
                    e.store_f32(z.value, op.vocab_parallel_logits_out, [t, j])
                m_new = z.maximum(m)
                s_new = Float(e, s) * (Float(e, m) - m_new).exp() + (z - m_new).exp()
                is_target = e.emit(arith.CmpiOp(j, local_index, "eq"))
                updated += [m_new.value, s_new.value, (Float(e, sum_z) + z).value,
                            e.emit(arith.SelectOp(is_target, z.value, z_target))]
            m, s, sum_z, z_target = state
            p = e.emit(arith.SelectOp(inside, (Float(e, z_target) - m).value, e.f32(0.0)))
            for value, out in zip((m, s, p), outputs):
                e.store(value, out, [t])
            if op.sum_logits_local_out is not None:
                e.store(sum_z, op.sum_logits_local_out, [t])
            if block:
                compact_row(e, op, t, block, lambda j: softcap(e, Float(e, dot(e, op.input, op.weight, t, j, h)), cap))

        def zeros() -> None:
            for out in (*outputs, *((op.sum_logits_local_out,) if op.sum_logits_local_out is not None else ())):
                e.store(e.f32(0.0), out, [t])
            if op.vocab_parallel_logits_out is not None:
                with e.loop(v) as j:
                    e.store_f32(e.f32(0.0), op.vocab_parallel_logits_out, [t, j])
            if block:
                with e.loop(e.dim(op.logits_block_max_out, 1)) as b:
                    e.store(e.f32(0.0), op.logits_block_max_out, [t, b])

        if skip is None:
            statistics()
        else:
            e.if_else(skip, zeros, statistics)


def compact_row(e: IRBuilder, op: FusedLinearOnlineMaxSumOp, t: SSAValue, block: int, logit) -> None:
    """Row t's compact logits (logits_block B): for each block b of B columns, C[t, b] = the max
    of its logits, then E[t, v] = exp(Z'[t, v] − C[t, b]) in float16. `logit(v)`: Z'[t, v] as a
    Float, computed again for each use (the reference loops keep no row of logits)."""
    v = e.dim(op.weight, 0)
    big_b = e.idx(block)
    with e.loop(e.dim(op.logits_block_max_out, 1)) as b:
        lo = e.emit(arith.MuliOp(b, big_b))
        width = e.emit(arith.MinSIOp(big_b, e.emit(arith.SubiOp(v, lo))))
        best = [e.f32(float("-inf"))]
        with e.carried_loop(width, best) as (j, (running,), updated):
            updated.append(logit(e.emit(arith.AddiOp(lo, j))).maximum(running).value)
        e.store(best[0], op.logits_block_max_out, [t, b])
        with e.loop(width) as j:
            col = e.emit(arith.AddiOp(lo, j))
            e.store_f32((logit(col) - best[0]).exp().value, op.vocab_parallel_logits_out, [t, col])


def loss_rows(e: IRBuilder, op: FusedCrossEntropyLossWithMaxSumOp, m: Float, s: SSAValue, p: SSAValue,
              sum_z: SSAValue | None) -> Float:
    """The loss of one row from its global statistics, in the reference's float32 operation order."""
    log_s = Float(e, s).log()
    alpha = op.prop_float("label_smoothing")
    if alpha:
        # lse − (1 − α)·z_y − (α/K)·Σz as log S − (1 − α)·P + α·(M − Σz/K): a −∞ target logit
        # (P = −∞, and then Σz = −∞) gives +∞, as PyTorch's loss, where grouping α·P with
        # −P gave ∞ − ∞ = NaN.
        k = float(op.prop_int("vocab_size"))
        loss = log_s - (1.0 - alpha) * Float(e, p) + alpha * (m - Float(e, sum_z) / k)
    else:
        loss = log_s - p
    z = op.prop_float("z_loss")
    if z:
        lse = m + log_s
        loss = loss + z * lse * lse
    return loss


def lower_fused_cross_entropy_loss_with_max_sum(op: FusedCrossEntropyLossWithMaxSumOp, e: IRBuilder) -> None:
    bt = e.dim(op.logits_max, 0)
    with e.loop(bt) as t:
        m = Float(e, e.load(op.logits_max, [t]))
        s = e.load(op.sum_exp_logits, [t])
        p = e.load(op.predicted_logits, [t])
        sum_z = e.load(op.sum_logits, [t]) if op.sum_logits is not None else None
        loss = loss_rows(e, op, m, s, p, sum_z).value
        skip = skipped(e, op, t)
        if skip is not None:
            loss = e.emit(arith.SelectOp(skip, e.f32(0.0), loss))
        e.store(loss, op.loss_out, [t])
        if op.vocab_parallel_logits is not None:
            with e.loop(e.dim(op.vocab_parallel_logits, 1)) as j:
                prob = ((Float(e, e.load_f32(op.vocab_parallel_logits, [t, j])) - m).exp() / s).value
                if skip is not None:
                    prob = e.emit(arith.SelectOp(skip, e.f32(0.0), prob))
                e.store(prob, op.softmax_out, [t, j])

