"""The fused linear cross-entropy gradient on a target whose matrix and vector units share no
local memory (Ascend A2: the cube unit's L0C has no path to the vector unit's UB, so every logit
tile reaches the vector unit through global memory, and every G tile goes back to the cube unit
the same way). There, fusing GEMMs 2 and 3 into the (token tile, vocabulary tile) pair loop buys
nothing and costs much: their float32 dX and dW accumulator tiles would travel to global memory
and back for every pair. This schedule keeps the fusion where it pays (the logit tile never
exists beyond one pair: GEMM 1, the softmax gradient and G's rounding per pair) and runs GEMMs 2
and 3 as large GEMMs over a vocabulary slab of G, with accumulators resident in the accumulator
level across their whole reduction:

    %G  = npu.alloc_shared(BT) : memref<BT x vs x T>          // a slab of G: vs columns, never all V
    %L  = npu.alloc_shared(P · bt) : memref<(P·bt) x v x f32>  // each block's logit tile
    scf.for %s0 = 0 to V step vs {                             // vocabulary slabs
      scf.for %p = %bid to pairs(slab) step P {                // phase 1: (vocabulary tile, token tile) pairs
        GEMM 1: %L[block's tile] = X_t · W_vᵀ                  // accumulator resident over all of H
        scf.for %r0 = 0 to bt step rb {                        // the vector unit's rows
          npu.copy %L[rows] -> %logits (ub); G = softmax-grad(...) in ub; npu.copy G -> %G[rows, cols]
        }
      }
      npu.barrier
      GEMM 2 tiles (dealt over blocks): dX[tile] (+)= %G[:, slab] · W[slab]      // copy-out accumulates after slab 0
      GEMM 3 tiles (dealt over blocks): dW[slab][tile] = %G[:, slab]ᵀ · X       // copy-out rounds (A2's FixPipe)
      npu.barrier
    }
    dX's float32 accumulator rounded into dX, a share of the rows per block, through ub

Every output tile of every GEMM is computed by one block in a fixed order (dX's slabs summed in
slab order), so results do not depend on the number of blocks. The three GEMMs share one
accumulator tile (bt × v, float32, single: it fills the level, as the canonical A2 GEMM tiling's
128 × 256 does) and one pair of operand tiles (bt × h, h × v, double-buffered); `h` is every
GEMM's reduction chunk. The slab width vs is derived from the target: what a phase re-reads (G's
slab, W's slab, X) fits in half the global level's cache, and the slab is at most half of G.
"""

from __future__ import annotations

from collections.abc import Mapping

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, AffineMapAttr, ArrayAttr, MemRefType, f32, i1
from xdsl.dialects.linalg.ops import FillOp, GenericOp
from xdsl.ir import SSAValue
from xdsl.ir.affine import AffineExpr, AffineMap
from xdsl.rewriter import InsertPoint
from xdsl.transforms.dead_code_elimination import region_dce

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, fits, padded
from npugrad.diagnostics import PassFailure
from npugrad.dialect.attributes import FUSED, ROLE, Contraction, NestRole, NestRoleAttr
from npugrad.dialect.npu import (
    PROMOTE,
    AllocLocalOp,
    AllocSharedOp,
    BarrierOp,
    BlockDimOp,
    CopyOp,
    TileRole,
    TileRoleAttr,
    element_bytes,
    local_type,
)
from npugrad.ir import IRBuilder, enclosing_function, static_shape
from npugrad.passes.tiling.blocks import (
    TokenLoop,
    block_range,
    contraction_of,
    given_or,
    mixed_sizes,
    nest_role,
    started,
)
from npugrad.targets import Target


def applies(target: Target) -> bool:
    """Whether the target needs this schedule: its accumulator and vector levels differ and no
    copy path joins them (tiles between the two units go through global memory)."""
    acc, vec = target.role("accumulator").name, target.role("vector").name
    return acc != vec and not target.has_path(acc, vec) and bool(target.paths)


def slab_width(bt_total: int, v_total: int, h_total: int, b: int, v: int, target: Target) -> int:
    """vs: the largest multiple of the vocabulary tile whose phase re-reads (G's slab, W's slab
    and X: (BT + H)·vs·b + BT·H·b bytes) fit in half the global level's cache, at most half of
    the vocabulary (so the whole BT × V G never exists), at least one tile."""
    cache = target.global_level.cache
    tiles = -(-v_total // v)
    most = max(1, tiles // 2) if tiles > 1 else 1
    if cache:
        room = cache // 2 - bt_total * h_total * b
        fit = room // max(1, (bt_total + h_total) * b * v) if room > 0 else 1
        most = min(most, max(1, fit))
    return most * v


def vector_rows(bt: int, v: int, b: int, target: Target) -> int:
    """rb: rows of a logit tile the vector level takes at once (its float32 logits, its G in the
    input type, its saved target logits; double-buffered where the target says), a multiple of 8
    (at most bt), or 8 when even that does not fit (check-capacity then says by how much)."""
    level = target.role("vector")
    copies = 2 if target.double_buffer else 1
    capacity = level.capacity or 0
    per_row = (v * (4 + (b if b != 4 else 0)) + 4) * copies  # before padding: an upper bound on rb
    rb = max(8, min(bt, capacity // max(1, per_row)) // 8 * 8) if bt >= 8 else bt
    while rb > 8 and _vector_bytes(rb, v, b, level.alignment) * copies > capacity:
        rb -= 8
    return rb


def _vector_bytes(rb: int, v: int, b: int, align: int) -> int:
    """One copy of the vector-level buffers for rb rows: the float32 logit rows, their G (in the
    input type; the logits themselves for float32), the saved target logits; each padded."""
    return padded(rb * v * 4, align) + (padded(rb * v * b, align) if b != 4 else 0) + padded(rb * 4, align)


def footprint_bytes(bt: int, v: int, h: int, b: int, target: Target) -> list[TileBuffer]:
    """The local buffers of the schedule (the module docstring)."""
    rb = vector_rows(bt, v, b, target)
    double = target.double_buffer
    stage = target.role("stage").alignment
    # Buffers of one level and kind summed, each padded as check-capacity pads it (fewer
    # entries: the search calls this thousands of times).
    return [
        TileBuffer("accumulator", bt * v * 4, False),
        TileBuffer("matrix_a", bt * h * b, double),
        TileBuffer("matrix_b", h * v * b, double),
        # X's and G's chunks (GEMMs 1, 2), W's as stored (GEMM 1), W's and X's (GEMMs 2, 3), G's as stored (GEMM 3)
        TileBuffer("stage", 2 * padded(bt * h * b, stage) + 2 * padded(v * h * b, stage), double),
        TileBuffer("vector", _vector_bytes(rb, v, b, target.role("vector").alignment), double),
    ]


def largest_fitting(b: int, target: Target, given: Mapping[str, int] | None = None) -> dict[str, int]:
    """The largest bt × v accumulator tile (then the largest h) whose buffers fit every level;
    the sizes in `given` kept."""
    best = None
    given = given or {}
    for bt in given_or("bt", given, (256, 128, 64, 32, 16, 8)):
        for v in given_or("v", given, (256, 128, 64, 32, 16)):
            for h in given_or("h", given, (256, 128, 64, 32, 16)):
                if fits(footprint_bytes(bt, v, h, b, target), target):
                    score = (bt * v, h)
                    if best is None or score > best[0]:
                        best = (score, {"bt": bt, "v": v, "h": h})
    return best[1] if best else {"bt": 8, "v": 16, "h": 16, **given}


def _source(view: SSAValue) -> SSAValue:
    """The buffer a chain of subviews looks into."""
    while isinstance(view.owner, memref.SubviewOp):
        view = view.owner.source
    return view


def _shared(alloc: memref.AllocOp, e: IRBuilder) -> SSAValue:
    """A heap buffer of the function (one per block) → one buffer all blocks share."""
    t = alloc.memref.type
    assert isinstance(t, MemRefType)
    shared = e.at(alloc).emit(AllocSharedOp(MemRefType(t.element_type, t.get_shape()), list(alloc.dynamic_sizes)))
    shared.name_hint = alloc.memref.name_hint
    e.drop_deallocs(alloc.memref)
    alloc.memref.replace_all_uses_with(shared)
    e.erase(alloc)
    return shared


def _resize(alloc: memref.AllocOp, rows: int, e: IRBuilder) -> SSAValue:
    """A promoted scratch tile of bt rows → rb rows (the vector level takes rb at once)."""
    t = alloc.memref.type
    assert isinstance(t, MemRefType)
    shape = list(t.get_shape())
    shape[0] = rows
    new = memref.AllocOp([], [], MemRefType(t.element_type, shape), alignment=alloc.alignment)
    new.attributes.update(alloc.attributes)
    new.location = alloc.location
    new.memref.name_hint = alloc.memref.name_hint
    e.rewriter.insert(new, InsertPoint.before(alloc))
    alloc.memref.replace_all_uses_with(new.memref)
    e.erase(alloc)
    return new.memref


class _Locals:
    """The schedule's local buffers, made once at the function's entry, keyed by role and shape."""

    def __init__(self, e: IRBuilder, entry, location, target: Target):
        self.e, self.entry, self.location, self.target = e, entry, location, target
        self.made: dict[tuple, SSAValue] = {}

    def get(self, name: str, element, shape: list[int], role: str, double: bool) -> SSAValue:
        key = (role, str(element), tuple(shape))
        if key not in self.made:
            alloc = AllocLocalOp(local_type(element, shape, self.target.role(role).name), double)
            alloc.location = self.location
            alloc.result.name_hint = name
            self.e.rewriter.insert(alloc, InsertPoint.at_start(self.entry))
            self.made[key] = alloc.result
        return self.made[key]


def _maps():
    d = [AffineExpr.dimension(i) for i in range(3)]
    return ArrayAttr([AffineMapAttr(AffineMap(3, 0, tuple(r))) for r in ((d[0], d[1]), (d[1], d[2]), (d[0], d[2]))])


def _gemm(e: IRBuilder, a, a_flipped: bool, b, c, mkn: tuple, tiles: tuple[int, int, int], locals_: _Locals,
          proto: GenericOp, blocks: tuple, accumulate, double: bool) -> None:
    """c (+)= a · b in output tiles dealt round-robin over the blocks: a is M × K (K × M when
    a_flipped), b K × N, c M × N. Each tile's float32 accumulator stays in the accumulator level
    across all of K (chunks of tk through the staging and matrix levels) and is copied out once,
    rounded where c is narrower, added to c where `accumulate` (an i1) holds."""
    m, k, n = mkn
    tm, tn, tk = tiles
    bid, nblk = blocks
    element = a.type.element_type
    acc = locals_.get("gemm_acc", f32, [tm, tn], "accumulator", False)
    lhs = locals_.get("gemm_lhs", element, [tm, tk], "matrix_a", double)
    rhs = locals_.get("gemm_rhs", element, [tk, tn], "matrix_b", double)
    lhs_stage = locals_.get("gemm_lhs_stage" if not a_flipped else "gemm_lhs_t_stage", element,
                            [tk, tm] if a_flipped else [tm, tk], "stage", double)
    rhs_stage = locals_.get("gemm_rhs_stage", element, [tk, tn], "stage", double)
    ntn = e.emit(arith.CeilDivUIOp(n, e.idx(tn)))
    count = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(m, e.idx(tm))), ntn))
    with e.loop(count, lb=bid, step=nblk) as p:
        p.name_hint = "tile"
        i = e.emit(arith.MuliOp(e.emit(arith.DivUIOp(p, ntn)), e.idx(tm)))
        j = e.emit(arith.MuliOp(e.emit(arith.RemUIOp(p, ntn)), e.idx(tn)))
        mc = e.emit(arith.MinSIOp(e.idx(tm), e.emit(arith.SubiOp(m, i))))
        nc = e.emit(arith.MinSIOp(e.idx(tn), e.emit(arith.SubiOp(n, j))))
        c_local = e.subview(acc, [0, 0], [mc, nc])
        e.fill(0.0, c_local)
        with e.loop(k, step=e.idx(tk)) as r:
            kc = e.emit(arith.MinSIOp(e.idx(tk), e.emit(arith.SubiOp(k, r))))
            if a_flipped:
                staged = e.subview(lhs_stage, [0, 0], [kc, mc])
                e.emit(CopyOp(e.subview(a, [r, i], [kc, mc]), staged))
            else:
                staged = e.subview(lhs_stage, [0, 0], [mc, kc])
                e.emit(CopyOp(e.subview(a, [i, r], [mc, kc]), staged))
            a_local = e.subview(lhs, [0, 0], [mc, kc])
            e.emit(CopyOp(staged, a_local, transpose=a_flipped))
            staged_b = e.subview(rhs_stage, [0, 0], [kc, nc])
            e.emit(CopyOp(e.subview(b, [r, j], [kc, nc]), staged_b))
            b_local = e.subview(rhs, [0, 0], [kc, nc])
            e.emit(CopyOp(staged_b, b_local))
            e.emit(GenericOp([a_local, b_local], [c_local], proto.body.clone(), _maps(), proto.iterator_types,
                             doc=proto.doc))
        out = e.subview(c, [i, j], [mc, nc])
        if accumulate is None:
            e.emit(CopyOp(c_local, out))
        else:
            e.if_else(accumulate, lambda: e.emit(CopyOp(c_local, out, accumulate=True)),
                      lambda: e.emit(CopyOp(c_local, out)))


def tile_phased(nest: scf.ForOp, tiles: dict[str, int], target: Target, e: IRBuilder) -> tuple[scf.ForOp, dict]:
    """Restructure and tile the fused nest (after read_weight_in_place) into the schedule of the
    module docstring; returns the slab loop, which carries the nest's #train.fused, and the
    local buffers GEMM 1 shares (tile_contraction's `buffers`: the caller tiles GEMM 1, left a
    contraction, with them)."""
    fused = FUSED.get(nest)
    f = enclosing_function(nest)
    entry = f.body.block
    tokens = next(o for o in nest.walk() if nest_role(o) is NestRole.TOKEN_LOOP)
    assert isinstance(tokens, scf.ForOp)
    body = tokens.body.block
    gemm1, gemm2, gemm3 = (next((o for o in body.ops if contraction_of(o) is c), None)
                           for c in (Contraction.LOGITS, Contraction.INPUT_GRAD, Contraction.WEIGHT_GRAD))
    assert gemm2 is not None and gemm3 is not None
    token_loop = TokenLoop(tokens)
    t0_old, v0_old = token_loop.first_row, nest.body.block.args[0]
    g_view = gemm2.inputs[0]
    # The logit tile GEMM 1 writes (high-performance mode has no GEMM 1: G comes from the softmax).
    logits_view = gemm1.outputs[0] if gemm1 is not None else None
    lv_op = (logits_view or g_view).owner
    assert isinstance(lv_op, memref.SubviewOp)
    sizes_old = mixed_sizes(lv_op)  # the tile's rows and columns (SSA values where dynamic)
    x = _source(gemm3.inputs[1])
    w = _source(gemm2.inputs[1])
    dx_acc = _source(gemm2.outputs[0])
    init = next((o for o in nest.walk() if nest_role(o) is NestRole.WEIGHT_GRAD_INIT), None)
    final_w = next((o for o in nest.walk() if nest_role(o) is NestRole.WEIGHT_GRAD_FINAL), None)
    dw = _source(started(init)[0] if init is not None else gemm3.outputs[0])
    # `accumulate`: GEMMs 2 and 3 add into the outputs from the first slab on (the float32 outputs
    # accumulate themselves: nothing starts them).
    accumulate = init is None
    if init is not None and started(init)[1] is not None:
        raise PassFailure(nest, "accumulate into a bfloat16/float16 output is not supported by the slab schedule "
                                "(its copies out add in float32 only): give float32 outputs")
    heap = dw.owner if isinstance(dw.owner, memref.AllocOp) else None  # dW's float32 tile: not needed here
    if final_w is not None:
        dw = _source(next(o for o in final_w.walk() if isinstance(o, memref.StoreOp)).memref)
    bt_total = token_loop.rows
    v_total, tv = nest.ub, nest.step
    element = g_view.type.element_type
    b = element_bytes(element)
    bt, v, h = tiles["bt"], tiles["v"], tiles["h"]
    (bt_static, h_static), v_static = static_shape(x.type), static_shape(w.type)[0]  # type: ignore[arg-type]
    rb = vector_rows(bt, v, b, target)
    vs = slab_width(bt_static or 4096, v_static or 4096, h_static or 4096, b, v, target)

    # The scratch tiles take rb rows; dX's accumulator (if any) is shared by the blocks.
    scratch = [_resize(alloc, rb, e) for alloc in [o for o in f.walk() if isinstance(o, memref.AllocOp) and PROMOTE.on(o)]]
    outside = [o for o in nest.parent.ops if nest_role(o) in (NestRole.INPUT_GRAD_INIT, NestRole.INPUT_GRAD_FINAL)]
    dx = dx_acc
    final_x = next((o for o in outside if nest_role(o) is NestRole.INPUT_GRAD_FINAL), None)
    if final_x is not None:
        dx = _source(next(o for o in final_x.walk() if isinstance(o, memref.StoreOp)).memref)
    if isinstance(dx_acc.owner, memref.AllocOp):
        dx_acc = _shared(dx_acc.owner, e)

    e = e.at(nest)
    bid, nblk = block_range(e)
    h_total = e.dim(x, 1)
    nt = token_loop.count(e)
    top = IRBuilder(e.rewriter, entry.first_op)
    g_ws = top.emit(AllocSharedOp(MemRefType(element, [DYNAMIC_INDEX if bt_static is None else bt_static, vs]),
                                  [] if bt_static is not None else [top.dim(x, 0)]))
    g_ws.name_hint = "grad_logits_slab"
    if gemm1 is not None:
        logit_ws = top.emit(AllocSharedOp(MemRefType(f32, [DYNAMIC_INDEX, v]),
                                          [top.emit(arith.MuliOp(top.emit(BlockDimOp()), top.idx(bt)))]))
        logit_ws.name_hint = "logits_tiles"
    mine = e.emit(arith.MuliOp(bid, e.idx(bt)))  # this block's logit tile's first row
    # What the G computation reads from the vocabulary tile's and the token tile's prologues,
    # then the computation itself (everything between GEMMs 1 and 2): cloned per row block.
    skip = {init, gemm1, tokens, next((o for o in body.ops if isinstance(o, FillOp) and o.outputs[0] is logits_view), None)}
    cloned = [op for op in [*_ops_between(nest.body.block, None, tokens), *_ops_between(body, None, gemm2)]
              if op not in skip and nest_role(op) is None]
    locals_ = _Locals(e, entry, nest.location, target)
    double = target.double_buffer
    # GEMM 1 (tiled by tile_contraction, its buffers named gemm1_*) shares the schedule's buffers.
    buffers = {"gemm1_acc": locals_.get("gemm_acc", f32, [bt, v], "accumulator", False),
               "gemm1_lhs": locals_.get("gemm_lhs", element, [bt, h], "matrix_a", double),
               "gemm1_rhs": locals_.get("gemm_rhs", element, [h, v], "matrix_b", double),
               "gemm1_lhs_stage": locals_.get("gemm_lhs_stage", element, [bt, h], "stage", double),
               "gemm1_rhs_stage": locals_.get("gemm_rhs_t_stage", element, [v, h], "stage", double)}

    with e.loop(v_total, step=e.idx(vs)) as s0:
        s0.name_hint = "slab"
        vsl = e.emit(arith.MinSIOp(e.idx(vs), e.emit(arith.SubiOp(v_total, s0))))
        pairs = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(vsl, tv)), nt))
        with e.loop(pairs, lb=bid, step=nblk) as p:
            p.name_hint = "pair"
            vv0 = e.emit(arith.AddiOp(s0, e.emit(arith.MuliOp(e.emit(arith.DivUIOp(p, nt)), tv))))
            vcnt = e.emit(arith.MinSIOp(tv, e.emit(arith.SubiOp(v_total, vv0))))
            ti = e.emit(arith.RemUIOp(p, nt))
            tt0 = token_loop.start(e, ti)
            tcnt = token_loop.tile_rows(e, ti, tt0)
            if gemm1 is not None:
                x_t = e.subview(x, [tt0, 0], [tcnt, h_total])
                w_v = e.subview(w, [vv0, 0], [vcnt, h_total])
                lw = e.subview(logit_ws, [mine, 0], [tcnt, vcnt])
                e.fill(0.0, lw)
                g1 = GenericOp([x_t, w_v], [lw], gemm1.body.clone(), gemm1.indexing_maps, gemm1.iterator_types,
                               doc=gemm1.doc)
                g1.attributes.update(gemm1.attributes)
                e.emit(g1)
            with e.loop(tcnt, step=e.idx(rb)) as r0:
                rcnt = e.emit(arith.MinSIOp(e.idx(rb), e.emit(arith.SubiOp(tcnt, r0))))
                mapping: dict[SSAValue, SSAValue] = {token_loop.index: ti}  # (the rows' start as cloned: unused)
                mapping.update({t0_old: e.emit(arith.AddiOp(tt0, r0)), v0_old: vv0})
                if logits_view is not None:
                    lv = e.subview(_source(logits_view), [0, 0], [rcnt, vcnt])
                    e.emit(CopyOp(e.subview(logit_ws, [e.emit(arith.AddiOp(mine, r0)), 0], [rcnt, vcnt]), lv))
                    mapping[logits_view] = lv
                for old, new in zip(sizes_old, (rcnt, vcnt)):
                    if isinstance(old, SSAValue):
                        mapping[old] = new
                if g_view is not logits_view:
                    mapping[g_view] = e.subview(_source(g_view), [0, 0], [rcnt, vcnt])
                for op in cloned:
                    if not (op.results and all(r in mapping for r in op.results)):  # not replaced above
                        e.emit(op.clone(value_mapper=mapping))
                g_tile = mapping[g_view]
                e.emit(CopyOp(g_tile, e.subview(g_ws, [mapping[t0_old], e.emit(arith.SubiOp(vv0, s0))], [rcnt, vcnt])))
        e.emit(BarrierOp())
        first = e.const(True, i1) if accumulate else e.emit(arith.CmpiOp(s0, e.idx(0), "ne"))
        first.name_hint = "accumulate" if accumulate else "after_first_slab"
        g_slab = e.subview(g_ws, [0, 0], [bt_total, vsl])
        w_slab = e.subview(w, [s0, 0], [vsl, h_total])
        _gemm(e, g_slab, False, w_slab, dx_acc, (bt_total, vsl, h_total), (bt, v, h), locals_, gemm2, (bid, nblk),
              first, double)
        _gemm(e, g_slab, True, x, e.subview(dw, [s0, 0], [vsl, h_total]), (vsl, bt_total, h_total), (bt, v, h),
              locals_, gemm3, (bid, nblk), e.const(True, i1) if accumulate else None, double)
        e.emit(BarrierOp())
    slabs = s0.owner.parent_op()
    FUSED.set(slabs, fused)

    for op in outside:
        e.erase(op)
    if final_x is not None:
        _round_rows(e.at(nest), dx_acc, dx, bt_total, h_total, scratch, rb, v, (bid, nblk))
    e.erase(nest)
    region_dce(f.body, e.rewriter)
    if heap is not None:
        e.erase_if_dead(heap.memref)
    return slabs, buffers


def _ops_between(block, after, stop) -> list:
    """The ops of `block` after `after` (None: from the start) and before `stop`."""
    ops = list(block.ops)
    return ops[(ops.index(after) + 1 if after is not None else 0):ops.index(stop)]


def _round_rows(e: IRBuilder, acc, out, rows_total, h_total, scratch, rb: int, v: int, blocks) -> None:
    """out = acc rounded to out's type, this block's share of the rows, through the vector
    level in rb × v tiles (the float32 logits scratch in, the G scratch out)."""
    bid, nblk = blocks
    narrow = next(s for s in scratch if s.type.element_type != f32 and s.type.get_num_dims() == 2)
    logits = next((s for s in scratch if s.type.element_type == f32 and s.type.get_num_dims() == 2), None)
    if logits is None:  # high-performance mode has no logit tile: a float32 tile of the same size
        top = e.at(narrow.owner)
        logits = top.alloc([rb, v], f32)
        logits.name_hint = "rounding"
        PROMOTE.set(logits.owner, TileRoleAttr(TileRole.VECTOR))
    lo = e.emit(arith.DivUIOp(e.emit(arith.MuliOp(bid, rows_total)), nblk))
    hi = e.emit(arith.DivUIOp(e.emit(arith.MuliOp(e.emit(arith.AddiOp(bid, e.idx(1))), rows_total)), nblk))
    with e.loop(hi, lb=lo, step=e.idx(rb)) as r0:
        rc = e.emit(arith.MinSIOp(e.idx(rb), e.emit(arith.SubiOp(hi, r0))))
        with e.loop(h_total, step=e.idx(v)) as c0:
            cc = e.emit(arith.MinSIOp(e.idx(v), e.emit(arith.SubiOp(h_total, c0))))
            src = e.subview(logits, [0, 0], [rc, cc])
            dst = e.subview(narrow, [0, 0], [rc, cc])
            e.emit(CopyOp(e.subview(acc, [r0, c0], [rc, cc]), src))
            with e.loop_nest([rc, cc]) as ivs:
                e.store_f32(e.load(src, ivs), dst, ivs)
            ROLE.set(ivs[0].owner.parent_op(), NestRoleAttr(NestRole.INPUT_GRAD_FINAL))
            e.emit(CopyOp(dst, e.subview(out, [r0, c0], [rc, cc])))


def load(shape, sizes: dict[str, int], target: Target) -> list[Load]:
    """What the schedule does on its busiest core (module docstring), phase by phase."""
    BT, V, H, b, element = shape.bt, shape.v, shape.h, shape.b, shape.element
    bt, v, h = (min(sizes[d], n) for d, n in zip(("bt", "v", "h"), (BT, V, H)))
    g = target.global_level.name
    a_, b_, acc, vec, stage = (target.role(r).name for r in ("matrix_a", "matrix_b", "accumulator", "vector", "stage"))
    P = target.cores
    vs = slab_width(BT, V, H, b, v, target)
    rb = vector_rows(bt, v, b, target)
    one = Load()

    def gemm(m: int, n: int, k: int, tiles: int, out_bytes: int) -> None:
        """`tiles` output tiles (m × n) on this core, each over all of k in chunks of h."""
        chunks = -(-k // h)
        for level, nbytes in ((a_, m * k * b), (b_, k * n * b)):
            one.add_move((g, stage), tiles * nbytes, tiles * chunks)
            one.add_move((stage, level), tiles * nbytes, tiles * chunks)
        one.add_move((acc, g), tiles * m * n * out_bytes, tiles)
        one.add_work("matrix", element, tiles * 2 * m * n * k, tiles * chunks, 0)

    nt = -(-BT // bt)
    dx_tiles = nt * -(-H // v)  # GEMM 2's output tiles, per slab
    full, rest = divmod(V, vs)
    for width, count in ((vs, full), (rest, 1 if rest else 0)):
        if not count:
            continue
        # A tile is no wider than the dimension it tiles: v cuts the slab (GEMM 1) and H (GEMMs 2
        # and 3), bt the slab's rows of dW (GEMM 3).
        vw, vh = min(v, width), min(v, H)
        pairs = -(-(-(-width // v) * nt) // P) * count
        gemm(bt, vw, H, pairs, 4)  # GEMM 1 into the block's logit tile
        one.add_move((g, vec), pairs * bt * vw * 4, pairs * -(-bt // rb))
        one.add_work("vector", "f32", pairs * (8 * bt * vw + 30 * bt), pairs * 4 * -(-bt // rb), 0)
        one.add_work("scalar", "f32", pairs * 24 * bt, pairs * 2, 0)  # the target-logit loops
        one.add_move((vec, g), pairs * bt * vw * b, pairs * -(-bt // rb))
        dw_tiles = -(-width // bt) * -(-H // v)
        gemm2 = -(-dx_tiles // P) * count
        gemm3 = -(-dw_tiles // P) * count
        gemm(bt, vh, width, gemm2, 4)
        gemm(min(bt, width), vh, BT, gemm3, b)
    if b != 4:  # dX's float32 accumulator rounded, a share of the rows each
        rows = -(-BT // P)
        one.add_move((g, vec), rows * H * 4, -(-rows // rb) * -(-H // v))
        one.add_work("vector", "f32", rows * H, -(-rows // rb) * -(-H // v), 0)
        one.add_move((vec, g), rows * H * b, -(-rows // rb) * -(-H // v))
    # All cores: the FLOP of three GEMMs, the rest as the busiest core's times P.
    for key, (amount, _) in one.work.items():
        one.total_work[key] = amount * P
    one.total_work[("matrix", element)] = 6.0 * BT * V * H
    one.global_bytes = sum(n for (s, t), (n, _) in one.moves.items() if g in (s, t)) * P
    one.extents = {"bt": BT, "v": V, "h": H}
    one.workspace = BT * vs * b + P * bt * v * 4 + (BT * H * 4 if b != 4 else 0)
    return [one]
