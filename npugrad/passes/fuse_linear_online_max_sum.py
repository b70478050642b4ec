"""fuse-linear-online-max-sum: the forward statistics of one vocabulary shard as one loop nest
over vocabulary tiles and token tiles, with an online row maximum: no buffer grows with V unless
the logits themselves are asked for.

    train.fused_linear_online_max_sum input(%x ...) weight(%w ...) target(%t ...) -> ... {tile_sizes = #train.tiles<bt = 64, v = 128>}
becomes
    scf.for %byte { target_mask[byte], masked_target[8 rows] }       {train.role = #train.role<target_masks>}
    scf.for %t { m[t] = -inf; s[t] = 0; p[t] = 0 }                     {train.role = #train.role<statistics_init>}
    scf.for %v0 = 0 to V step 128 {                                   // one vocabulary tile: W_v packed transposed
      scf.for %t0 = 0 to BT step 64 {                                 {train.role = #train.role<token_loop>}
        linalg.generic ... #train.contraction<logits, ...>            // Z = X_t·W_vᵀ (then softcapped)
        scf.for %i {                                                  // per row of the tile
          m' = max(m[t], max_j Z[i, j]);  s[t] = s[t]·exp(m[t] − m') + Σ_j exp(Z[i, j] − m');  m[t] = m'
          p[t] = Z[i, target − v0] where the target is in this tile
          (logits_block B: per block of B columns, C[t, b] = max Z[i, ..]; E = f16(exp(Z − C)))
        }
      }
    } {train.fused = #train.fused<"train.fused_linear_online_max_sum", #train.tiles<bt = 64, v = 128>>}
    scf.for %t { p[t] = in the shard ? p[t] − m[t] : 0 }              {train.role = #train.role<statistics_final>}

The statistics are the outputs themselves (m, s; p holds the target's logit until the end).
With `ignore_index`, skipped rows end with statistics 0. Every loop runs in a fixed order, so
results are bit-identical from run to run; spread over cores (distribute-over-cores), each block
owns whole token tiles and mask bytes, so they stay so for any number of blocks.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, f32
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.dialect import FusedLinearOnlineMaxSumOp
from npugrad.dialect.attributes import FUSED, FusedNestAttr, NestRole
from npugrad.ir import IRBuilder, index
from npugrad.ir.expr import Float
from npugrad.lowering.train_to_loops.forward import skipped, target_local, write_masks
from npugrad.passes.linear_nests import (
    check_options,
    column_in_tile,
    logits_tile,
    loop_of,
    mark,
    nest_tiles,
    pack_transposed,
    tile_buffer,
    token_balance,
    token_step,
    within,
)
from npugrad.passes.source_op import record_source


def _row_update(e: IRBuilder, op: FusedLinearOnlineMaxSumOp, z_t: SSAValue, i: SSAValue, t: SSAValue,
                v0: SSAValue, tv: SSAValue) -> None:
    """Row t's running statistics after the logits z_t[i, :tv] of vocabulary tile v0."""
    m_out, s_out, p_out = op.logits_max_local_out, op.sum_exp_logits_local_out, op.predicted_logits_local_out
    tile_max = [e.f32(float("-inf"))]
    with e.carried_loop(tv, tile_max) as (j, (running,), updated):
        updated.append(Float(e, e.load(z_t, [i, j])).maximum(running).value)
    m_old = Float(e, e.load(m_out, [t]))
    m_new = m_old.maximum(tile_max[0])
    sums = [e.f32(0.0), e.f32(0.0)]  # Σ exp(z − m'), Σ z
    with e.carried_loop(tv, sums) as (j, (exp_sum, z_sum), updated):
        z = Float(e, e.load(z_t, [i, j]))
        updated += [(Float(e, exp_sum) + (z - m_new).exp()).value, (Float(e, z_sum) + z).value]
    s = Float(e, e.load(s_out, [t])) * (m_old - m_new).exp() + sums[0]
    e.store(s.value, s_out, [t])
    e.store(m_new.value, m_out, [t])
    if op.sum_logits_local_out is not None:
        e.store((Float(e, e.load(op.sum_logits_local_out, [t])) + sums[1]).value, op.sum_logits_local_out, [t])
    inside, local = target_local(e, op, t)
    hit, column = column_in_tile(e, e.emit(arith.IndexCastOp(local, index)), inside, v0, tv)
    with e.if_(hit):
        e.store(e.load(z_t, [i, column]), p_out, [t])


def _compact_row(e: IRBuilder, op: FusedLinearOnlineMaxSumOp, z_t: SSAValue, i: SSAValue, t: SSAValue,
                 out_t: SSAValue, v0: SSAValue, tv: SSAValue, block: int) -> None:
    """Row t's compact logits from tile z_t (logits_block B, tiles of whole blocks): for each block
    of the tile, C = the max of its logits, then E = exp(Z' − C) in float16 (out_t: the tile's
    window of the logits output)."""
    big_b = e.idx(block)
    first = e.emit(arith.DivUIOp(v0, big_b))  # v0 is a multiple of the tile, so of B
    with e.loop(e.emit(arith.CeilDivUIOp(tv, big_b))) as b:
        lo = e.emit(arith.MuliOp(b, big_b))
        width = e.emit(arith.MinSIOp(big_b, e.emit(arith.SubiOp(tv, lo))))
        z_b = e.subview(z_t, [0, lo], [e.dim(z_t, 0), width])
        out_b = e.subview(out_t, [0, lo], [e.dim(out_t, 0), width])
        best = [e.f32(float("-inf"))]
        with e.carried_loop(width, best) as (j, (running,), updated):
            updated.append(Float(e, e.load(z_b, [i, j])).maximum(running).value)
        e.store(best[0], op.logits_block_max_out, [t, e.emit(arith.AddiOp(first, b))])
        with e.loop(width) as j:
            e.store_f32((Float(e, e.load(z_b, [i, j])) - best[0]).exp().value, out_b, [i, j])


def _statistics(op: FusedLinearOnlineMaxSumOp) -> list[SSAValue]:
    return [op.logits_max_local_out, op.sum_exp_logits_local_out, op.predicted_logits_local_out,
            *((op.sum_logits_local_out,) if op.sum_logits_local_out is not None else ())]


def fuse(op: FusedLinearOnlineMaxSumOp, tiles: dict[str, int], e: IRBuilder, balance: tuple[int, int] = (0, 1)) -> None:
    """The nest; `balance` (blocks, row multiple): the token tiles' step (linear_nests.token_step).
    With compact logits (logits_block B) the vocabulary tile is whole blocks: a multiple of B,
    rounded down, at least B (B at most V where V is static: one block then holds the row)."""
    block = op.prop_int("logits_block")
    v_static = op.weight.type.get_shape()[0]  # type: ignore[attr-defined]
    if block and v_static > 0:  # a block past V is one block of V columns: the same E and C
        block = min(block, v_static)
    if block:
        v_tile = block * max(1, tiles["v"] // block)
        if v_tile > tiles["v"]:
            # Wider than the tile chosen for the levels (B past it): as many fewer rows, and as
            # many fewer steps of H in a chunk, so that the bt x v logits tile and the h x v
            # weight tile (a target's accumulator and matrix operand, double-buffered) keep the
            # sizes the tiles were chosen for; each in the same multiples (whole bytes of the
            # bit-packed mask, whole fractals) where the chosen sizes were.
            def narrower(n: int, unit: int) -> int:
                fewer = n * tiles["v"] // v_tile
                return fewer // unit * unit if n % unit == 0 and fewer >= unit else max(1, fewer)

            tiles = {**tiles, "bt": narrower(tiles["bt"], 8)}
            if "h" in tiles:
                tiles["h"] = narrower(tiles["h"], 16)
        tiles = {**tiles, "v": v_tile}
    x, w = op.input, op.weight
    in_t = x.type.element_type  # type: ignore[attr-defined]
    bt, h, v = e.dim(x, 0), e.dim(x, 1), e.dim(w, 0)
    tv_max = e.idx(tiles["v"])
    tb_max = token_step(e, bt, tiles["bt"], *balance)
    m_out, p_out = op.logits_max_local_out, op.predicted_logits_local_out

    z_buf = tile_buffer(e, [tiles["bt"], tiles["v"]], f32, "logits")
    w_packed = e.alloc([h, tiles["v"]], in_t)
    w_packed.name_hint = "weight_tile_packed"
    mark(write_masks(e, op), NestRole.TARGET_MASKS)
    with e.loop(bt) as t:
        for out, value in zip(_statistics(op), (float("-inf"), 0.0, 0.0, 0.0)):
            e.store(e.f32(value), out, [t])
    mark(loop_of(t), NestRole.STATISTICS_INIT)

    with e.loop(v, step=tv_max) as v0:
        FUSED.set(loop_of(v0), FusedNestAttr(op.name, tiles))
        tv = e.emit(arith.MinSIOp(tv_max, e.emit(arith.SubiOp(v, v0))))
        packed = pack_transposed(e, e.subview(w, [v0, 0], [tv, h]), w_packed, tv, h)
        with e.loop(bt, step=tb_max) as t0:
            mark(loop_of(t0), NestRole.TOKEN_LOOP)
            tb = e.emit(arith.MinSIOp(tb_max, e.emit(arith.SubiOp(bt, t0))))
            z_t = e.subview(z_buf, [0, 0], [tb, tv])
            logits_tile(e, e.subview(x, [t0, 0], [tb, h]), packed, z_t, op.prop_float("softcap"))
            out_t = None
            if op.vocab_parallel_logits_out is not None:
                out_t = e.subview(op.vocab_parallel_logits_out, [t0, v0], [tb, tv])
            if out_t is not None and not block:
                with e.loop(tb) as i, e.loop(tv) as j:
                    e.store_f32(e.load(z_t, [i, j]), out_t, [i, j])
            with e.loop(tb) as i:
                t = e.emit(arith.AddiOp(t0, i))
                _row_update(e, op, z_t, i, t, v0, tv)
                if block:
                    _compact_row(e, op, z_t, i, t, out_t, v0, tv, block)

    with e.loop(bt) as t:
        inside, _ = target_local(e, op, t)
        p = Float(e, e.load(p_out, [t])) - e.load(m_out, [t])
        e.store(e.emit(arith.SelectOp(inside, p.value, e.f32(0.0))), p_out, [t])
        skip = skipped(e, op, t)
        if skip is not None:
            with e.if_(skip):
                for out in _statistics(op):
                    e.store(e.f32(0.0), out, [t])
                if op.vocab_parallel_logits_out is not None:
                    with e.loop(v) as j:
                        e.store_f32(e.f32(0.0), op.vocab_parallel_logits_out, [t, j])
                if block:
                    with e.loop(e.dim(op.logits_block_max_out, 1)) as b:
                        e.store(e.f32(0.0), op.logits_block_max_out, [t, b])
    mark(loop_of(t), NestRole.STATISTICS_FINAL)
    e.dealloc(z_buf)
    e.dealloc(w_packed)


@dataclass(frozen=True)
class FuseOp(RewritePattern):
    tiles: dict[str, int]
    balance: tuple[int, int] = (0, 1)

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedLinearOnlineMaxSumOp, rewriter: PatternRewriter) -> None:
        record_source(op, rewriter)
        fuse(op, within({**self.tiles, **(op.tiles() or {})}, op), IRBuilder(rewriter, op), self.balance)
        rewriter.erase(op)


@dataclass(frozen=True)
class FuseLinearOnlineMaxSumPass(ModulePass):
    name = "fuse-linear-online-max-sum"

    tile_bt: int = 0
    tile_v: int = 0
    cpu: str = "host"
    balance_blocks: int = 0  # > 0: token tiles even over this many blocks (linear_nests.token_step)

    def __post_init__(self) -> None:
        check_options(self.name, tile_bt=self.tile_bt, tile_v=self.tile_v, balance_blocks=self.balance_blocks)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FuseOp(nest_tiles(self.tile_bt, self.tile_v, self.cpu), token_balance(self.balance_blocks, self.cpu))
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
