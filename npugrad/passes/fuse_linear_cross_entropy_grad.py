"""fuse-linear-cross-entropy-grad: the linear cross-entropy gradient as one loop nest over
vocabulary tiles and token tiles that never materialises the BT×V logit gradient.

    train.fused_linear_cross_entropy_loss_grad ... {tile_sizes = #train.tiles<bt = 64, v = 128>}
becomes
    scf.for %v0 = %c0 to %V step %c128 {            // one vocabulary tile of W and dW
      scf.for %t0 = %c0 to %BT step %c64 {          // one token tile of X {train.role = #train.role<token_loop>}
        linalg.generic ... {train.contraction = #train.contraction<logits, dims = [bt, h, v]>}
                                                    // Z = X_t·W_vᵀ (memory-saving mode only)
        scf.for ... math.exp ...                    // G = g·exp(Z − max)/sum, rounded to X's type
        scf.for ...                                 // G[t, j_t] = g·(P − 1), unmasked rows only
        linalg.generic ... #train.contraction<input_grad, ...>     // dX_t += G·W_v
        linalg.generic ... #train.contraction<weight_grad, ...>    // dW_v += Gᵀ·X_t
      }
    } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 64, v = 128>>}

With `balance_blocks` = P the token loop runs over tile indices instead, the tiles as even as
whole micro-kernel blocks make them and their count a multiple of P (linear_nests.balanced_starts),
so that a wavefront giving each of P blocks count/P consecutive tiles gives each BT/P rows:

      scf.for %token_tile = %c0 to %token_tiles step %c1 {
        %t0 = arith.minsi %row, %BT {train.role = #train.role<token_start>}   // min(BT, ceil(i·units/count)·MR)
        %tb = arith.subi %next_row, %t0                                        // start(i + 1) − start(i)

The only buffers are a bt×v tile (float32 logits, and G in the input type), the saved target
logits of a token tile, the W tile packed transposed (H×v), and float32 accumulators for fp16/bf16 outputs (BT×H and v×H): none grows
with V (they carry `npu.promote = #npu.role<vector>`: a tiling may move them into local memory).
Tile sizes come from the op's `tile_sizes` (hand-written or chosen by a pass); the pass options
only fill it in where it is absent. Every loop runs in a fixed order, so results are
bit-identical from run to run. The parts of the nest that later passes restructure carry
`#train.role` and `#train.contraction`: they find them by those, never by the IR's text.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, bf16, f32
from xdsl.ir import SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern

from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.dialect.attributes import FUSED, Contraction, FusedNestAttr, NestRole
from npugrad.ir import IRBuilder
from npugrad.lowering.train_to_loops.flce import Gradient, target_in_shard
from npugrad.passes.linear_nests import (
    TokenTiles,
    check_options,
    column_in_tile,
    contract,
    logits_tile,
    loop_of,
    nest_tiles,
    pack_transposed,
    round_into,
    start_accumulator,
    tile_buffer,
    token_balance,
    within,
)
from npugrad.passes.source_op import record_source
from npugrad.passes.vectorize_contractions import dot_bf16
from npugrad.targets import get


def target_in_tile(e: IRBuilder, op, t: SSAValue, v0: SSAValue, tv: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(the row's one-hot column lies in [v0, v0 + tv), that column relative to v0)."""
    column = e.int_to_index(e.load(op.masked_target, [t]))
    return column_in_tile(e, column, target_in_shard(e, op.target_mask, t), v0, tv)


def fuse(op: FusedLinearCrossEntropyLossGradOp, tiles: dict[str, int], e: IRBuilder, wide_grad: bool = False,
         balance: tuple[int, int] = (0, 1), dot_bf16: bool = False) -> None:
    """The nest. `wide_grad`: G, rounded to the input type as the op says, is kept in a float32
    tile (the logits tile, in place) instead of one of the input type: the same values, which a
    CPU's micro-kernels then broadcast without widening each one (GEMMs 2 and 3 read G as A);
    but for a bfloat16 G where `dot_bf16` (the CPU multiplies bfloat16 pairs: GEMMs 2 and 3 then
    read G and W or X as they are, vectorize_contractions.dot_bf16).
    `balance` (blocks, row multiple): the token tiles even over that many blocks
    (linear_nests.balanced_starts), the loop over them then over tile indices."""
    x, w, gx, gw = op.input, op.weight, op.input_grad_out, op.weight_grad_out
    in_t = x.type.element_type  # type: ignore[attr-defined]
    bt, h, v = e.dim(x, 0), e.dim(x, 1), e.dim(w, 0)
    tv_max = e.idx(tiles["v"])
    tokens = TokenTiles(e, bt, tiles["bt"], balance)
    hp = op.high_performance
    grad = Gradient(op, e)

    gx_acc = gx if gx.type.element_type == f32 else e.alloc([bt, h], f32)  # type: ignore[attr-defined]
    if gx_acc is not gx:
        gx_acc.name_hint = "input_grad_acc"
    accumulate = op.prop_bool("accumulate")
    start_accumulator(e, gx_acc, None if gx_acc is gx else gx, accumulate, NestRole.INPUT_GRAD_INIT)
    z_buf = None if hp else tile_buffer(e, [tiles["bt"], tiles["v"]], f32, "logits")
    g_type = f32 if wide_grad and not (dot_bf16 and in_t == bf16) else in_t
    g_buf = z_buf if (z_buf is not None and g_type == f32) else tile_buffer(e, [tiles["bt"], tiles["v"]], g_type, "grad_logits")
    saved = None if hp else tile_buffer(e, [tiles["bt"]], f32, "saved_logits")
    w_packed = None if hp else e.alloc([h, tiles["v"]], in_t)
    if w_packed is not None:
        w_packed.name_hint = "weight_tile_packed"
    gw_acc = None if gw.type.element_type == f32 else e.alloc([tiles["v"], h], f32)  # type: ignore[attr-defined]
    if gw_acc is not None:
        gw_acc.name_hint = "weight_grad_acc"

    with e.loop(v, step=tv_max) as v0:
        FUSED.set(loop_of(v0), FusedNestAttr(op.name, tiles))
        tv = e.emit(arith.MinSIOp(tv_max, e.emit(arith.SubiOp(v, v0))))
        w_t = e.subview(w, [v0, 0], [tv, h])
        gw_t = e.subview(gw if gw_acc is None else gw_acc, [v0 if gw_acc is None else 0, 0], [tv, h])
        start_accumulator(e, gw_t, None if gw_acc is None else e.subview(gw, [v0, 0], [tv, h]), accumulate,
                          NestRole.WEIGHT_GRAD_INIT)
        w_t_packed = None if hp else pack_transposed(e, w_t, w_packed, tv, h)
        with tokens.loop(e) as (t0, tb):
            x_t = e.subview(x, [t0, 0], [tb, h])
            if not hp:
                z_t = e.subview(z_buf, [0, 0], [tb, tv])
                logits_tile(e, x_t, w_t_packed, z_t, grad.cap)
                # G overwrites Z in place for float32: keep the one logit per row the one-hot needs.
                with e.labelled("target_logits"), e.loop(tb) as i:
                    t = e.emit(arith.AddiOp(t0, i))
                    hit, local = target_in_tile(e, op, t, v0, tv)
                    with e.if_(hit):
                        e.store(e.load(z_t, [i, local]), saved, [i])
            g_t = z_t if g_buf is z_buf else e.subview(g_buf, [0, 0], [tb, tv])
            # The tile's softmax (or kept logits), indexed by the loops' own variables: the row
            # loop's elementwise body then vectorises (its last index is the loop's).
            p_t = e.subview(op.softmax, [t0, v0], [tb, tv]) if hp else None

            def probability(row, i: SSAValue, j: SSAValue, logit: SSAValue | None) -> SSAValue:
                if hp:
                    kept = e.load_f32(p_t, [i, j])
                    return grad.probability(row, kept) if op.logits_kept else kept  # softmax_is_logits: a logit
                return grad.probability(row, logit)

            def store_g(value: SSAValue, at: list[SSAValue], into: SSAValue = g_t) -> None:
                """G rounded to the input type, stored in g_t's (float32 where wide)."""
                e.store_f32(e.to_f32(e.from_f32(value, in_t)) if g_type != in_t else value, into, at)

            def softmax_grad() -> None:
                """The tile's G, then its one-hot term."""
                block = op.compact_block
                with e.loop(tb) as i:
                    t = e.emit(arith.AddiOp(t0, i))
                    row = grad.row(t)
                    if block:  # compact kept logits: the tile's blocks, each with its scale exp(C − M)
                        compact_blocks(e, op, grad, row, t, i, v0, tv, p_t, g_t, store_g)
                    else:
                        with e.loop(tv) as j:
                            logit = None if hp else e.load(z_t, [i, j])
                            store_g(grad.element(row, probability(row, i, j, logit), logit, False), [i, j])
                with e.loop(tb) as i:  # the one-hot term: only the target column of unmasked rows
                    t = e.emit(arith.AddiOp(t0, i))
                    hit, local = target_in_tile(e, op, t, v0, tv)
                    with e.if_(hit):
                        row = grad.row(t)
                        logit = None if hp else e.load(saved, [i])
                        if block:
                            column = e.emit(arith.AddiOp(v0, local))
                            c = e.load(op.softmax_block_max, [t, e.emit(arith.DivUIOp(column, e.idx(block)))])
                            p = grad.from_compact(row, e.load_f32(p_t, [i, local]), grad.block_scale(row, c))
                        else:
                            p = probability(row, i, local, logit)
                        store_g(grad.element(row, p, logit, True), [i, local])

            with e.labelled("softmax_grad"):  # its loops named in line tables (Pipeline.line_tables)
                softmax_grad()
            gx_t = e.subview(gx_acc, [t0, 0], [tb, h])
            # GEMMs 2 and 3 reduce over the middle dimension, so the innermost loop runs along
            # H, contiguous in every operand: a broadcast-multiply-add that vectorises.
            contract(e, g_t, w_t, gx_t, [lambda t, v, h: (t, v), lambda t, v, h: (v, h), lambda t, v, h: (t, h)],
                     "GEMM 2: input grad tile dX_t += G * W_v", Contraction.INPUT_GRAD, ("bt", "v", "h"))
            contract(e, g_t, x_t, gw_t, [lambda v, t, h: (t, v), lambda v, t, h: (t, h), lambda v, t, h: (v, h)],
                     "GEMM 3: weight grad tile dW_v += G^T * X_t", Contraction.WEIGHT_GRAD, ("v", "bt", "h"))
        if gw_acc is not None:
            round_into(e, gw_t, e.subview(gw, [v0, 0], [tv, h]), NestRole.WEIGHT_GRAD_FINAL)
    if gx_acc is not gx:
        round_into(e, gx_acc, gx, NestRole.INPUT_GRAD_FINAL)
    for buf in {id(b): b for b in (z_buf, g_buf, saved, w_packed, gw_acc, None if gx_acc is gx else gx_acc) if b is not None}.values():
        e.dealloc(buf)


def compact_blocks(e: IRBuilder, op: FusedLinearCrossEntropyLossGradOp, grad: Gradient, row, t: SSAValue,
                   i: SSAValue, v0: SSAValue, tv: SSAValue, p_t: SSAValue, g_t: SSAValue, store_g) -> None:
    """Row i of a tile's G from compact kept logits (logits_block B): for each block b that
    columns [v0, v0 + tv) meet, its scale exp(C[t, b] − M) once, then P = (E·scale)/S along the
    block's columns of the tile (the tile need not be whole blocks)."""
    block = e.idx(op.compact_block)
    end = e.emit(arith.AddiOp(v0, tv))
    with e.loop(e.emit(arith.CeilDivUIOp(end, block)), lb=e.emit(arith.DivUIOp(v0, block))) as b:
        start = e.emit(arith.MuliOp(b, block))
        lo = e.emit(arith.SubiOp(e.emit(arith.MaxSIOp(start, v0)), v0))
        hi = e.emit(arith.SubiOp(e.emit(arith.MinSIOp(e.emit(arith.AddiOp(start, block)), end)), v0))
        width = e.emit(arith.SubiOp(hi, lo))
        scale = grad.block_scale(row, e.load(op.softmax_block_max, [t, b]))
        p_b = e.subview(p_t, [0, lo], [e.dim(p_t, 0), width])
        g_b = e.subview(g_t, [0, lo], [e.dim(g_t, 0), width])
        with e.loop(width) as j:
            p = grad.from_compact(row, e.load_f32(p_b, [i, j]), scale)
            store_g(grad.element(row, p, None, False), [i, j], g_b)


@dataclass(frozen=True)
class FuseOp(RewritePattern):
    tiles: dict[str, int]
    wide_grad: bool = False
    balance: tuple[int, int] = (0, 1)
    dot_bf16: bool = False

    @op_type_rewrite_pattern
    def match_and_rewrite(self, op: FusedLinearCrossEntropyLossGradOp, rewriter: PatternRewriter) -> None:
        record_source(op, rewriter)
        fuse(op, within({**self.tiles, **(op.tiles() or {})}, op), IRBuilder(rewriter, op), self.wide_grad, self.balance,
             self.dot_bf16)
        rewriter.erase(op)


@dataclass(frozen=True)
class FuseLinearCrossEntropyGradPass(ModulePass):
    name = "fuse-linear-cross-entropy-grad"

    tile_bt: int = 0
    tile_v: int = 0
    cpu: str = "host"
    wide_grad: bool = False
    balance_blocks: int = 0  # > 0: token tiles even over this many blocks (linear_nests.balanced_starts)

    def __post_init__(self) -> None:
        check_options(self.name, tile_bt=self.tile_bt, tile_v=self.tile_v, balance_blocks=self.balance_blocks)

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        pattern = FuseOp(nest_tiles(self.tile_bt, self.tile_v, self.cpu), self.wide_grad, token_balance(self.balance_blocks, self.cpu),
                         dot_bf16(get(self.cpu)))
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
