"""Tiling of the fused linear cross-entropy gradient (the nest fuse-linear-cross-entropy-grad
built, marked `train.fused` with tiles {bt, v, h}). On a target whose matrix and vector units
share no local memory (npu-a2) the nest is restructured into vocabulary slabs instead
(flce_phased.py); elsewhere, as follows: each of its three contractions (marked
`#train.contraction`) is tiled into the matrix levels (operands) and the accumulator level
(float32 results), H in chunks of `h`; the tile-sized scratch (logits, G, saved target logits,
marked `npu.promote`) moves into the level of its role.

    linalg.generic ins(%x_t, %w_packed) outs(%z_t) {train.contraction = #train.contraction<logits, ...>}
becomes
    %A = npu.alloc_local : memref<bt x h x T, #npu.mem<l0a>> ...               // see contraction.py
    scf.for %h0 ... { npu.copy ...; linalg.generic ins(%A, %B) outs(%C); ... }  // %z_t in #npu.mem<ub>

Spreading the nest over cores: the weight gradient of a vocabulary tile sums over all tokens,
the input gradient of a token tile over all vocabulary tiles, so whichever loop is split, one of
the two sums crosses cores. The nest runs as a wavefront instead: block b of P owns the
contiguous token tiles [b·nt/P, (b+1)·nt/P) (the fuse pass balances them, their first rows
from the loop's token_start: tiling.blocks.TokenLoop; their dX rows: zeroed, accumulated over every
vocabulary tile in order, rounded, by b alone) and, at step u, runs GEMM 3 on vocabulary tile
u − 1 − b. A vocabulary tile's float32 dW accumulator thus goes from block 0 to block P − 1 one
step at a time, collecting the token tiles in order. Block 0 starts (zeroes) tile u at step u,
the step before its GEMM 3 on it; for a bfloat16/float16 dW, block P − 1 rounds it into dW right
after its own GEMM 3 on it. Every sum runs in the order of the one-block nest (v outer, t inner),
so the results are bit-identical for any number of blocks, and the work is the one-block nest's
— three GEMMs, 6·BT·V·H FLOP — whatever P.

The blocks wait for each other point to point, not at a barrier: each block counts the steps it
has done in a flag of the launch's `%progress` (npu.set_flag at the end of a step), and block b
starts step u once block b − 1 is done with step u − 1 (npu.wait_flag), the step in which it ran
GEMM 3 on the tile block b takes now. Block 0 waits for nobody (but, for a ring, for a free
slot), so a block slowed for a while (another process on its core, a page fault) holds up only
the blocks after it and only once they have caught up with it; at a barrier every step it ran
late cost every block. (Measured on a Zen 3, FLCE float32 2048 x 2048 x 32000 on 2 threads,
7 calls, per-step times of each block logged at the barriers of the previous version: the
blocks waited 3–7 % of their time there; replaying the same step times with point-to-point waits
gave 1.7–5.6 % shorter calls.) A flag is one i64 counter on a 64-byte line of its own.

Starting a tile is block 0's alone, and it shows: on a Zen 5 (FLCE float32 4096 x 4096 x 8192,
2 threads, bench/flag_waits.py) block 1 waited on block 0 at 25 of 33 steps, 0.48 ms each (the
zero fill of a 4 MiB dW tile), 56 ms a call with the wavefront's fill; with the fill left out (a
wrong result, for the timing) it waited once, at the fill (39 ms), and the call ran 1.011x as
fast (8 rounds of bench/ab.py). Measured and not kept: the fill moved into the tile's first
GEMM 3 (token tile 0's: `scf.if` row 0 { the fill } before it, which vectorize-contractions ran
as one pass with the GEMM, its first chunk adding its sums to zero without reading C, BLAS's
beta = 0; block 0 then zeroed nothing ahead): the same bits, and 0.992x, 0.995x and 0.998x
(float32 4096² twice and 2048² x 32000, 10 rounds each, Zen 5). In those minutes block 1
waited at 4.7 of 33 steps a call with the fill as without it: the per-step waits above come
and go with the machine's state.

Measured and not kept: a thin first vocabulary tile, so that block 1's first wait is shorter.
Tile 0 took a quarter (or an eighth) of v rows, rounded to 16, and the tiles after it started
that much earlier. Block 1's first wait fell from 18.9 ms to 4.1 ms a call (bench/flag_waits.py,
FLCE bfloat16 4096 x 4096 x 8192, 2 threads, Zen 5). Its other waits grew from 9 to 20 blocked
checks a call, though, and the total barely moved: 25.4 ms against 23.4. With no lag to absorb
them, block 0's slow steps held block 1 up instead. The calls were 1.011x and 1.012x as fast,
0.96-1.07 round by round (8 rounds of bench/ab.py). Kept, it would also change the sums' order
from the one-block nest's.

Also measured and not kept: the vocabulary tiled half a tile later, so that both the first and
the last tile are half tiles (tile u the rows [max(u·v − v/2, 0), min((u + 1)·v − v/2, V)),
one tile more), for a shorter fill and a shorter drain. In the same measurement (bfloat16 4096
x 4096 x 8192, Zen 5, 2 threads) block 1's first wait fell to 3.5 ms, but it then waited at
25.7 of 33 steps, 27.7 ms in all, and block 0 was still done 20.5 ms before the end: GEMM 3's
pack of X's token tiles costs a half tile what it costs a whole one. The calls ran 0.988x as
fast (12 rounds, 0.94-1.08). (This was the wavefront's tiling only: the one-block nest, which
one thread runs, would have needed it too.)

What the wavefront costs in all (bench/flag_waits.py's table per block, the same size): block 1's
waits and block 0's idle end, 2.8-3.6 % of both cores' time in bfloat16 and 2.2-2.6 % in
float32. Blocks that never wait would not win it back, though. This was measured for the timing
only, with wrong sums. Every wait was made a count of 0, and block b worked on vocabulary tile
(u − b − 1 + b·⌊nv/2⌋) mod nv, so that the two blocks stayed half the vocabulary apart and never
worked on one tile at once. The bfloat16 ring had 13 slots, so that its slots never met either.
The calls ran 0.978x and 0.969x as fast in bfloat16 (10 and 12 rounds, 0.93-1.06) and 1.016x in
float32 (6 rounds, 0.98-1.02). What else differs: in the wavefront both blocks read the same W
tile within a step (GEMMs 1 and 2 pack it once per group), and block 1 reads the dW
accumulator rows that block 0 has just written. Half the vocabulary apart, each block reads its
own. (With the ring's 5 slots the blocks had shared slots: 0.920x.)

Which block is the slower one can move with the machine's state as much as with the blocks' extra
work. On a Zen 5 in a slow state (bfloat16 4096 x 4096 x 8192, 2 threads, bench/flag_waits.py)
block 0 was done 76 ms before the end and waited 19 ms a call for ring slots: block 1 was the
slower, as if rounding the ring's tiles were its extra cost. With the rounding left out (wrong
sums, for the timing) block 0 became the slower (block 1 waited 74 ms on it), although rounding a
tile costs a small fraction of a step (weight_grad_final: 0.2 % of the call's samples). Measured
and not kept: the rounding split between the two ends of the chain, block P − 1 rounding
half of each tile's rows right after its GEMM 3 and block 0 the other half S = P + 1 + SLACK steps
later (after its slot wait; the loop 1 + SLACK steps longer), each zeroing the rows it
rounded so that the zero-filled slots (npu.alloc_shared) needed no start. The same bits; 1105 ms
against 1097 (median of 6 fresh processes each, taking turns, 4 calls each), and the waits grew:
block 1 116 ms a call on block 0, block 0 51 ms on the ring (its half read the tile back from
memory, 3 steps after block P − 1 had written it).

Only GEMM 3 has to wait for the block before: GEMMs 1 and 2 of a block's token tiles depend on
no other block. The distributed nest (distribute_fused_flce) runs its token loop in phases over
groups of token tiles (flce_groups.py: GEMMs 1 and 2 and the softmax gradient of the group's
tiles, each tile's logits in a stash, then GEMM 3 once the block before is done), and waits
there; the step's wait below then only keeps the chain of flags whole for a block with no token
tiles. A bfloat16/float16 dW accumulates in a ring of P + 1 + SLACK float32 tiles
((P + 3)·v·H·4 bytes, npu.alloc_shared) where the one-block nest has one: block 0 starts tile u
in the slot tile u − P − 1 − SLACK had, once block P − 1 has rounded that (SLACK steps of room).

    %progress = npu.alloc_shared(P·8) : memref<?xi64>       // one counter per 64-byte line
    scf.for %u = 0 to nv + P {
      scf.if (%u < nv && %bid == 0) { [npu.wait_flag %progress[last], u − SLACK]; start tile %u }
      npu.wait_flag %progress[%bid − 1], (%bid == 0 ? 0 : %u)   // flce_groups: moved after the work
      %vtile = %u - %bid - 1
      scf.if (%vtile is a tile) {
        scf.for %i = %first_token_tile to %end_token_tile { %t0 = start(%i) ...   // rows [rows_lo, rows_hi)
          GEMM 1 -> logits tile, G, GEMM 2 (dX), GEMM 3 -> dW's tile %vtile (float32)
        }
      }
      scf.if (%vtile is a tile && %bid == P - 1) { round tile %vtile into %dw }   // a ring only
      npu.set_flag %progress[%bid], %u + 1
    }
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import lru_cache

from xdsl.dialects import arith, func, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, AffineMapAttr, ArrayAttr, MemRefType, f32, i64
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.rewriter import InsertPoint
from xdsl.transforms.dead_code_elimination import region_dce

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, budget
from npugrad.dialect.attributes import CONTRACTION, FUSED, ROLE, Contraction, NestRole, NestRoleAttr
from npugrad.dialect.npu import (
    PROMOTE,
    AllocLocalOp,
    AllocSharedOp,
    BlockDimOp,
    SetFlagOp,
    WaitFlagOp,
    element_bytes,
    local_type,
)
from npugrad.ir import IRBuilder, enclosing_function, integer_constant
from npugrad.passes.tiling import flce_groups, flce_phased
from npugrad.passes.tiling.blocks import (
    TokenLoop,
    block_range,
    contraction_of,
    given_or,
    mixed_sizes,
    nest_role,
    start_accumulator,
    started,
)
from npugrad.passes.tiling.contraction import staged, tile_contraction
from npugrad.passes.vectorize_contractions import panel_level
from npugrad.targets import Target

# How many steps block 0 may run ahead of the last block before a slot of the dW ring (bfloat16 or
# float16 dW) it would start is still being rounded: the ring has P + 1 + SLACK slots.
SLACK = 2
_FLAG_STRIDE = 8  # i64 counters per block's flag: one 64-byte line each, not shared with another's

# The names of each contraction's local buffers (%gemm1_lhs, ...), in the order of the nest.
_GEMM = {Contraction.LOGITS: "gemm1", Contraction.INPUT_GRAD: "gemm2", Contraction.WEIGHT_GRAD: "gemm3"}


def promote(alloc: memref.AllocOp, target: Target, e: IRBuilder) -> None:
    """A heap tile buffer -> a local buffer of the level its role names; its dealloc goes."""
    role = PROMOTE.get(alloc)
    assert role is not None
    t = alloc.memref.type
    assert isinstance(t, MemRefType)
    local = AllocLocalOp(local_type(t.element_type, t.get_shape(), target.role(role.data.value).name), target.double_buffer)
    local.location = alloc.location
    local.result.name_hint = alloc.memref.name_hint
    e.rewriter.insert(local, InsertPoint.before(alloc))
    e.drop_deallocs(alloc.memref)
    alloc.memref.replace_all_uses_with(local.result)
    e.erase(alloc)
    _retype_views(local.result, e)


def _retype_views(buffer, e: IRBuilder) -> None:
    """Views of a buffer that moved to a local level live there too."""
    space = buffer.type.memory_space
    for use in list(buffer.uses):
        view = use.operation
        if isinstance(view, memref.SubviewOp) and view.source is buffer:
            t = view.result.type
            new_type = MemRefType(t.element_type, t.get_shape(), t.layout, space)
            moved = e.rewriter.replace_value_with_new_type(view.result, new_type)
            _retype_views(moved, e)


def spread(loop: scf.ForOp, bid, nblk, e: IRBuilder) -> None:
    """for i = lb to ub step s  →  for i = lb + bid·s to ub step nblk·s (block-cyclic tiles)."""
    e = e.at(loop)
    first = e.emit(arith.MuliOp(bid, loop.step))
    starts_at_zero = integer_constant(loop.lb) == 0
    lb = first if starts_at_zero else e.emit(arith.AddiOp(loop.lb, first))
    step = e.emit(arith.MuliOp(nblk, loop.step))
    loop.operands = [lb, loop.ub, step, *loop.iter_args]
    e.modified(loop)


def _share(e: IRBuilder, bid, nblk, n):
    """[first, end) of this block's share of n: [bid·n/P, (bid+1)·n/P)."""
    lo = e.emit(arith.DivUIOp(e.emit(arith.MuliOp(bid, n)), nblk))
    hi = e.emit(arith.DivUIOp(e.emit(arith.MuliOp(e.emit(arith.AddiOp(bid, e.idx(1))), n)), nblk))
    return lo, hi


def _tile_rows(e: IRBuilder, tile, tv, v):
    """(first row, rows) of vocabulary tile `tile`: [tile·tv, min((tile+1)·tv, V))."""
    v0 = e.emit(arith.MuliOp(tile, tv))
    return v0, e.emit(arith.MinSIOp(tv, e.emit(arith.SubiOp(v, v0))))


def wavefront(nest: scf.ForOp, e: IRBuilder) -> scf.ForOp:
    """Spread the nest over the blocks (the module docstring). Block b takes the contiguous
    token tiles [b·nt/P, (b+1)·nt/P); at step u it works on vocabulary tile u − 1 − b, once
    block b − 1 has set its flag to u (done with step u − 1); it sets its own to u + 1 when
    done. The float32 accumulator of a vocabulary tile's dW (the dW output itself when it is
    float32, else a ring of P + 1 + SLACK tiles shared by the blocks) goes from block to block
    in token order. Block 0 starts a tile one step before its GEMM 3 on it (in a ring, once
    block P − 1 has rounded the slot's previous tile); block P − 1 rounds it into dW right after
    its GEMM 3 on it. Returns the new outermost loop, which carries the nest's #train.fused."""
    fused = FUSED.get(nest)
    e = e.at(nest)
    bid, nblk = block_range(e)
    tokens = next(o for o in nest.walk() if nest_role(o) is NestRole.TOKEN_LOOP)
    token_loop = TokenLoop(tokens)
    v, tv = nest.ub, nest.step
    nt = token_loop.count(e)
    nv = e.emit(arith.CeilDivUIOp(v, tv))
    one = e.idx(1)
    first_tile, end_tile = _share(e, bid, nblk, nt)
    first_tile.name_hint, end_tile.name_hint = "first_token_tile", "end_token_tile"
    t_lo, t_hi = token_loop.start(e, first_tile), token_loop.start(e, end_tile)
    t_lo.name_hint, t_hi.name_hint = "rows_lo", "rows_hi"
    rows = e.emit(arith.SubiOp(t_hi, t_lo))

    # dX: each block starts (zeroes, or widens the output into), accumulates and rounds its own rows.
    for op in [o for o in nest.parent.ops if nest_role(o) in (NestRole.INPUT_GRAD_INIT, NestRole.INPUT_GRAD_FINAL)]:
        if nest_role(op) is NestRole.INPUT_GRAD_INIT:
            acc, out = started(op)
            start_accumulator(e, e.subview(acc, [t_lo, 0], [rows, e.dim(acc, 1)]),
                              None if out is None else e.subview(out, [t_lo, 0], [rows, e.dim(out, 1)]),
                              out is not None, NestRole.INPUT_GRAD_INIT)
        else:
            load = next(o for o in op.walk() if isinstance(o, memref.LoadOp))
            store = next(o for o in op.walk() if isinstance(o, memref.StoreOp))
            at = e.at(op)
            _round(at, load.memref, store.memref, t_lo, t_lo, rows, NestRole.INPUT_GRAD_FINAL)
        e.erase(op)

    # dW: where a tile accumulates (a view of dW, or of a heap tile that becomes the ring). With
    # `accumulate` and a float32 dW, nothing starts it (GEMM 3 adds into dW itself).
    init = next((o for o in nest.walk() if nest_role(o) is NestRole.WEIGHT_GRAD_INIT), None)
    final = next((o for o in nest.walk() if nest_role(o) is NestRole.WEIGHT_GRAD_FINAL), None)
    if init is not None:
        tile_acc, widened = started(init)
    else:
        tile_acc, widened = next(o for o in nest.walk() if contraction_of(o) is Contraction.WEIGHT_GRAD).outputs[0], None
    widen = widened is not None  # each tile starts from dW's rows, widened
    view = tile_acc.owner
    assert isinstance(view, memref.SubviewOp)
    dw = view.source
    ring = heap = slots = None
    if isinstance(dw.owner, memref.AllocOp):
        assert final is not None
        heap = dw.owner
        store = next(o for o in final.walk() if isinstance(o, memref.StoreOp))
        slots = e.emit(arith.AddiOp(nblk, e.idx(1 + SLACK)))
        ring = _ring(heap, e)
        dw = store.memref.owner.source  # the dW output the final loop rounded into
    h = dw.type.get_shape()[1]  # type: ignore[attr-defined]
    h = e.dim(dw, 1) if h == DYNAMIC_INDEX else h  # a static width keeps the views' types static
    if init is not None:
        e.erase(init)
    if final is not None:
        e.erase(final)

    def acc_rows(at: IRBuilder, tile, first, count):
        """Rows [first, first + count) of `tile`'s accumulator."""
        if ring is None:
            v0 = at.emit(arith.MuliOp(tile, tv))
            return at.subview(dw, [at.emit(arith.AddiOp(v0, first)), 0], [count, h])
        slot = at.emit(arith.RemUIOp(tile, slots))
        start = at.emit(arith.AddiOp(at.emit(arith.MuliOp(slot, tv)), first))
        return at.subview(ring, [start, 0], [count, h])

    # Each block's progress: steps done, one 64-byte line per block (npu.set_flag, npu.wait_flag).
    assert isinstance(nest.parent_op(), func.FuncOp), "the fused nest is at a function's top level"
    line = e.idx(_FLAG_STRIDE)
    flags = MemRefType(i64, [DYNAMIC_INDEX])

    def own() -> list[SSAValue]:
        """One block alone (a small call, runtime/kernel.py) waits only for its own flag: a
        counter on its stack, with no call into the runtime for a workspace."""
        mine = e.emit(memref.AllocaOp.get(i64, 64, [_FLAG_STRIDE]))
        e.store(e.const(0, i64), mine, [e.idx(0)])
        return [e.emit(memref.CastOp.get(mine, flags))]

    shared = e.emit(arith.CmpiOp(nblk, one, "ugt"))
    progress = e.if_else(shared, lambda: [e.emit(AllocSharedOp(flags, [e.emit(arith.MuliOp(nblk, line))]))],
                         own, [flags])[0]
    progress.name_hint = "progress"
    first_block = e.emit(arith.CmpiOp(bid, e.idx(0), "eq"))
    mine = e.emit(arith.MuliOp(bid, line))
    before = e.emit(arith.MuliOp(e.emit(arith.SubiOp(e.emit(arith.MaxUIOp(bid, one)), one)), line))
    first_block.name_hint, mine.name_hint, before.name_hint = "first_block", "my_flag", "flag_before"
    if ring is not None:  # the last block rounds the ring's tiles, block 0 waits for it to
        final = e.emit(arith.SubiOp(nblk, one))
        last_block = e.emit(arith.CmpiOp(bid, final, "eq"))
        last = e.emit(arith.MuliOp(final, line))
        last_block.name_hint, last.name_hint = "last_block", "last_flag"
    steps = e.emit(arith.AddiOp(nv, nblk))
    with e.loop(steps) as step:
        if init is not None:  # block 0 starts tile u, a step before its GEMM 3 on it
            with e.if_(e.emit(arith.AndIOp(e.emit(arith.CmpiOp(step, nv, "ult")), first_block))):
                if ring is not None:  # the slot's tile u - P - 1 - SLACK: rounded (by block P - 1)
                    free = e.emit(arith.SubiOp(e.emit(arith.MaxUIOp(step, e.idx(SLACK))), e.idx(SLACK)))
                    e.emit(WaitFlagOp(progress, last, free))
                r0, count = _tile_rows(e, step, tv, v)
                out = e.subview(dw, [r0, 0], [count, h]) if widen else None
                start_accumulator(e, acc_rows(e, step, e.idx(0), count), out, widen, NestRole.WEIGHT_GRAD_INIT)
        # Step u of block b > 0 (GEMM 3 on tile u - b - 1) waits for block b - 1 to be done with
        # step u - 1 (its GEMM 3 on that tile); block 0 waits for nobody (a count of 0).
        e.emit(WaitFlagOp(progress, before, e.emit(arith.SelectOp(first_block, e.idx(0), step))))
        behind = e.emit(arith.AddiOp(bid, one))
        vi = e.emit(arith.SubiOp(step, behind))
        vi.name_hint = "vtile"
        active = e.emit(arith.AndIOp(e.emit(arith.CmpiOp(step, behind, "uge")), e.emit(arith.CmpiOp(vi, nv, "ult"))))
        with e.if_(active):
            v0 = e.emit(arith.MuliOp(vi, tv))
        if ring is not None:  # the last block rounds tile u - P into dW, after every block's GEMM 3 on it
            with e.if_(e.emit(arith.AndIOp(active, last_block))):
                r0, count = _tile_rows(e, vi, tv, v)
                _round(e, acc_rows(e, vi, e.idx(0), count), dw, None, r0, count, NestRole.WEIGHT_GRAD_FINAL)
        e.emit(SetFlagOp(progress, mine, e.emit(arith.AddiOp(step, one))))
    wave = step.owner.parent_op()
    then = v0.owner.parent_block()
    e.rewriter.inline_block(nest.body.block, InsertPoint.before(then.last_op), [v0])
    e.erase(then.last_op.prev_op)  # the nest's scf.yield
    e.erase(nest)
    FUSED.set(wave, fused)
    token_loop.take(e, (first_tile, end_tile), (t_lo, t_hi))
    # The body's view of its tile's accumulator: the ring's slot of vtile.
    if ring is not None:
        at = e.at(view)
        moved = acc_rows(at, vi, at.idx(0), mixed_sizes(view)[0])
        view.result.replace_all_uses_with(moved)
        e.erase(view)
    if heap is not None:
        e.erase(heap)
    region_dce(then.parent, e.rewriter)  # the views and sizes only the erased init and final used
    return wave


def _round(e: IRBuilder, src, out, src_row, out_row, rows, role: NestRole) -> None:
    """out[out_row : out_row + rows] = src[src_row : ...] rounded to out's type (src_row None: src
    is already those rows)."""
    h = e.dim(out, 1)
    if src_row is not None:
        src = e.subview(src, [src_row, 0], [rows, h])
    dst = e.subview(out, [out_row, 0], [rows, h])
    with e.loop_nest([rows, h]) as ivs:
        e.store_f32(e.load(src, ivs), dst, ivs)
    ROLE.set(ivs[0].owner.parent_op(), NestRoleAttr(role))


def _ring(alloc: memref.AllocOp, e: IRBuilder):
    """The heap accumulator of one vocabulary tile's dW → a ring of P + 1 + SLACK such tiles
    shared by the blocks (npu.alloc_shared), placed where the heap tile was (the function's top
    level)."""
    tv, h = alloc.memref.type.get_shape()
    top = e.at(alloc)
    slots = top.emit(arith.AddiOp(top.emit(BlockDimOp()), top.idx(1 + SLACK)))
    rows = top.emit(arith.MuliOp(slots, top.idx(tv)))
    sizes = [rows] + ([] if h != DYNAMIC_INDEX else list(alloc.dynamic_sizes))
    ring = top.emit(AllocSharedOp(MemRefType(f32, [DYNAMIC_INDEX, h]), sizes))
    ring.name_hint = "weight_grad_ring"
    e.drop_deallocs(alloc.memref)
    return ring


def nest_tiles(nest: scf.ForOp) -> dict[str, int]:
    """The tile sizes fuse-linear-cross-entropy-grad put on its nest."""
    fused = FUSED.get(nest)
    assert fused is not None
    return fused.tiles.as_dict()


def distribute_fused_flce(nest: scf.ForOp, e: IRBuilder, cpu: Target) -> None:
    """The nest over blocks in a wavefront (module docstring), every sum in one-block order, its
    token loop in phases over groups of token tiles (flce_groups: W's tile packed a chunk at a
    time, once per group), or, where the body is not one flce_groups knows, as it is. GEMM 1
    reads the W tile in place (read_weight_in_place): the CPU's micro-kernel packs its panels
    from it, transposing as it goes (vectorize-contractions), where the nest's transposed copy
    cost each block a scalar loop of scattered stores per tile."""
    read_weight_in_place(nest, e)
    phased = flce_groups.applies(nest)
    wave = wavefront(nest, e)
    if phased:
        flce_groups.split(wave, cpu, e)


def read_weight_in_place(nest: scf.ForOp, e: IRBuilder) -> None:
    """GEMM 1 reads the W tile as it is stored (v × h) and its tiling transposes each chunk on the
    way into the matrix level (npu.copy {transpose}): the scalar loops packing the tile
    transposed in global memory (#train.role<weight_pack>) and their buffer go.

        scf.for %j { scf.for %k { %p[k, j] = %w_t[j, k] } } {train.role = #train.role<weight_pack>}
        linalg.generic {maps (t,h,v) -> (t,h), (h,v), (t,v)} ins(%x_t, %p) outs(%z)
    becomes
        linalg.generic {maps (t,h,v) -> (t,h), (v,h), (t,v)} ins(%x_t, %w_t) outs(%z)
    """
    for pack in [o for o in nest.walk() if nest_role(o) is NestRole.WEIGHT_PACK]:
        load = next(o for o in pack.walk() if isinstance(o, memref.LoadOp))
        store = next(o for o in pack.walk() if isinstance(o, memref.StoreOp))
        weight, packed = load.memref, store.memref
        readers = [u for u in packed.uses if not pack.is_ancestor(u.operation)]
        if not all(isinstance(u.operation, GenericOp) and contraction_of(u.operation) is Contraction.LOGITS
                   and u.index == 1 for u in readers):
            continue  # GEMM 1 already lowered (vectorize-contractions ran first): it reads the copy
        for use in readers:
            gen = use.operation
            assert isinstance(gen, GenericOp)
            a, c = gen.indexing_maps.data[0].data, gen.indexing_maps.data[2].data  # type: ignore[attr-defined]
            b = gen.indexing_maps.data[1].data  # type: ignore[attr-defined]
            flipped = AffineMap(b.num_dims, b.num_symbols, b.results[::-1])
            new = GenericOp([gen.inputs[0], weight], list(gen.outputs), gen.body.clone(),
                            ArrayAttr([AffineMapAttr(m) for m in (a, flipped, c)]), gen.iterator_types, doc=gen.doc)
            new.attributes.update(gen.attributes)
            new.location = gen.location
            e.rewriter.replace(gen, new)
        e.erase(pack)
        view = packed.owner
        if isinstance(view, memref.SubviewOp) and not view.result.uses:
            buffer = view.source
            e.erase(view)
            e.erase_if_dead(buffer)


def tile_fused_flce(nest: scf.ForOp, target: Target, e: IRBuilder) -> None:
    tiles = complete_tiles(nest, nest_tiles(nest), target, flce_phased.largest_fitting if flce_phased.applies(target)
                           else functools.partial(largest_fitting_tiles, footprint_bytes))
    f = enclosing_function(nest)
    read_weight_in_place(nest, e)
    buffers: dict = {}
    if flce_phased.applies(target):
        wave, buffers = flce_phased.tile_phased(nest, tiles, target, e)
    else:
        wave = wavefront(nest, e)
    gens = [o for o in wave.walk() if contraction_of(o) is not None]
    # The scratch first, so that a contraction tiled after it knows which operands are local.
    for alloc in [o for o in f.walk() if isinstance(o, memref.AllocOp) and PROMOTE.on(o)]:
        promote(alloc, target, e)
    for gen in gens:
        attr = CONTRACTION.get(gen)
        assert attr is not None
        tile_contraction(gen, [tiles[n] for n in attr.loop_dims], target, target.double_buffer, _GEMM[attr.contraction],
                         buffers, e.at(gen))


def footprint_bytes(bt: int, v: int, h: int, b: int, stage: bool) -> dict[str, int]:
    """Bytes per role of the tiled nest: the three contractions' accumulator tiles (float32) and
    operand tiles, the staging tiles of the operands read from global memory (GEMM 1's X and W,
    GEMM 2's W, GEMM 3's X) where `stage`, and the vector-level logit tile (float32), G tile
    (input type; the logit tile itself for float32) and saved target logits."""
    return {
        "accumulator": (bt * v + bt * h + v * h) * 4,
        "matrix_a": (bt * h + 2 * bt * v) * b,
        "matrix_b": (h * v + v * h + bt * h) * b,
        "vector": bt * v * 4 + (bt * v * b if b != 4 else 0) + bt * 4,
        **({"stage": (bt * h + 2 * v * h + bt * h) * b} if stage else {}),
    }


def footprint(op, sizes: dict[str, int], target: Target) -> list[TileBuffer]:
    b = gemm_shape(op).b
    if flce_phased.applies(target):
        return flce_phased.footprint_bytes(sizes["bt"], sizes["v"], sizes["h"], b, target)
    return [TileBuffer(role, n, target.double_buffer)
            for role, n in footprint_bytes(sizes["bt"], sizes["v"], sizes["h"], b, staged(target, "matrix_b")).items()]


@dataclass(frozen=True)
class GemmShape:
    """What the cost models of the linear nests read off the op (once: xDSL's accessors are slow
    for a search's thousands of calls): BT, V, H (4096 where dynamic), element bytes and type."""

    bt: int
    v: int
    h: int
    b: int
    element: str


@lru_cache(maxsize=64)
def gemm_shape(op) -> GemmShape:
    bt, h = (d if d != -1 else 4096 for d in op.input.type.get_shape())
    v = op.weight.type.get_shape()[0]
    t = op.input.type.element_type
    return GemmShape(bt, v if v != -1 else 4096, h, element_bytes(t), str(t))


def operand_in(load: Load, role: str, nbytes: float, copies: float, target: Target) -> None:
    """An operand's chunks from global memory into the level of `role`, through the staging
    level where the tiling stages them (contraction.staged)."""
    g, level = target.global_level.name, target.role(role).name
    if staged(target, role):
        stage = target.role("stage").name
        load.add_move((g, stage), nbytes, copies)
        load.add_move((stage, level), nbytes, copies)
    else:
        load.add_move((g, level), nbytes, copies)


def logit_tiles(load: Load, n: int, tile: tuple[int, int, int], op, target: Target) -> None:
    """n bt × v logit tiles on one core: GEMM 1 in chunks of h (X's and W's chunks in, W's
    transposed by its copy; the tile zeroed in the accumulator level and copied out to the
    vector level), 2 FLOP per MAC; the vector work on the tile (about 8 operations per element
    and 30 per row)."""
    bt, v, h = tile
    shape = gemm_shape(op)
    H, b = shape.h, shape.b
    acc, vec = target.role("accumulator").name, target.role("vector").name
    hc = -(-H // h)
    operand_in(load, "matrix_a", n * bt * H * b, n * hc, target)
    operand_in(load, "matrix_b", n * H * v * b, n * hc, target)
    load.add_move((acc, vec), n * bt * v * 4, n)
    load.add_work("matrix", shape.element, n * 2 * bt * v * H, n * hc, 0)
    load.add_work("vector", "f32", n * (8 * bt * v + 30 * bt), n * 4, 0)


def spread_totals(load: Load, scale: float, scalar_all: float, target: Target) -> None:
    """All cores' work and global bytes: `scale` times the busiest core's, scalar work as given."""
    g = target.global_level.name
    for key, (amount, _) in load.work.items():
        load.total_work[key] = amount * scale
    load.total_work[("scalar", "f32")] = scalar_all
    load.global_bytes = sum(n for (s, t), (n, _) in load.moves.items() if g in (s, t)) * scale


def load(op, sizes: dict[str, int], target: Target) -> list[Load]:
    """What the tiled nest does on its busiest core (the wavefront of the module docstring): per
    (token tile, vocabulary tile) its logit tile (logit_tiles), then GEMM 2 (the dX tile) and
    GEMM 3 (the dW tile) in chunks of h, each float32 accumulator tile going to global memory and
    back for every chunk; a block's ceil(nt/P) token tiles for each of nv + P steps (the P steps
    where it waits cost as long as one that works); its dX rows zeroed and rounded, and every dW
    tile's rows (block 0 starts each tile, block P − 1 rounds it), in global memory (4 operations
    per element)."""
    shape = gemm_shape(op)
    if flce_phased.applies(target):
        return flce_phased.load(shape, sizes, target)
    BT, V, H, b = shape.bt, shape.v, shape.h, shape.b
    bt, v, h = (min(sizes[d], n) for d, n in zip(("bt", "v", "h"), (BT, V, H)))
    g = target.global_level.name
    a, acc, vec = (target.role(r).name for r in ("matrix_a", "accumulator", "vector"))
    cores = target.cores
    nt, nv, hc = -(-BT // bt), -(-V // v), -(-H // h)
    tb = -(-nt // cores)
    n = tb * (nv + cores)  # pairs' worth of time on the busiest core
    one = Load()
    logit_tiles(one, n, (bt, v, h), op, target)
    for rows, rhs_rows in ((bt, v), (v, bt)):  # GEMM 2: dX tile += G·W tile; GEMM 3: dW tile += Gᵀ·X tile
        one.add_work("matrix", shape.element, n * 2 * bt * v * H, n * hc, 0)
        one.add_move((g, acc), n * rows * H * 4, n * hc)
        one.add_move((acc, g), n * rows * H * 4, n * hc)
        one.add_move((vec, a), n * hc * bt * v * b, n * hc)
        operand_in(one, "matrix_b", n * rhs_rows * H * b, n * hc, target)
    panel = panel_level(target)
    if panel is not None:
        # A CPU's micro-kernels pack each GEMM's B panel, widened to float32, into the smallest
        # level (vectorize-contractions): W's v x H for GEMMs 1 and 2, X's bt x H for GEMM 3.
        one.add_move((target.role("matrix_b").name, panel), n * (2 * v + bt) * H * (b + 4), 3 * n * hc)
    one.add_work("scalar", "f32", (tb * bt + nv * v) * H * 4, 2 * (tb + nv), 0)
    spread_totals(one, nt * nv / n, (BT + V) * H * 4, target)
    one.extents = {"bt": BT, "v": V, "h": H}
    one.workspace = (BT * H + (cores + 1 + SLACK) * v * H) * 4 if b != 4 else 0  # dX's accumulator, dW's ring
    return [one]


def choose_tile_sizes(op, target: Target) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) whose tiles fit every level at once."""
    if flce_phased.applies(target):
        return flce_phased.largest_fitting(element_bytes(op.input.type.element_type), target)
    return largest_fitting_tiles(footprint_bytes, element_bytes(op.input.type.element_type), target)


def largest_fitting_tiles(footprint: Callable[[int, int, int, int, bool], dict[str, int]], b: int,
                          target: Target, given: Mapping[str, int] | None = None) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) of a linear nest whose `footprint` (bytes per
    role, as footprint_bytes) fits every level at once; bt a multiple of 8. The sizes in `given`
    are kept (the others chosen around them)."""
    best = None
    given = given or {}
    for bt in given_or("bt", given, (128, 64, 32, 16, 8)):
        for v in given_or("v", given, (256, 128, 64, 32, 16)):
            for h in given_or("h", given, (512, 256, 128, 64, 32, 16)):
                used: dict[str, int] = {}
                limit: dict[str, int] = {}
                for role, size in footprint(bt, v, h, b, staged(target, "matrix_b")).items():
                    level = target.role(role).name
                    used[level] = used.get(level, 0) + size
                    limit[level] = budget(target, role)
                if all(used[level] <= limit[level] for level in used):
                    score = (bt * v, h)
                    if best is None or score > best[0]:
                        best = (score, {"bt": bt, "v": v, "h": h})
    if best is None:  # check-capacity will say why even this does not fit
        return {"bt": 8, "v": 16, "h": 16, **given}
    return best[1]


def complete_tiles(nest: scf.ForOp, tiles: dict[str, int], target: Target,
                   choose: Callable[[int, Target, Mapping[str, int]], dict[str, int]]) -> dict[str, int]:
    """The tiles of a fused nest with the sizes its tiling needs: a nest fused without a target
    (fuse-linear-*{} alone, or the `fused` stage fed back with -t) has bt and v only; its h is
    then the largest `choose` (the target's search, bt and v fixed) finds to fit."""
    if "h" in tiles:
        return tiles
    gemm1 = next(o for o in nest.walk() if contraction_of(o) is Contraction.LOGITS)
    return choose(element_bytes(gemm1.inputs[0].type.element_type), target, tiles)  # type: ignore[attr-defined]
