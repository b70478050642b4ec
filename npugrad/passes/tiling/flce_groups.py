"""The wavefront's token loop in phases over groups of token tiles (host CPUs): each GEMM that
reads the W tile packs it a chunk at a time, once per group, instead of all of it before the
token loop.

The one-block nest runs, per token tile, GEMM 1 (the logits tile), the softmax gradient, GEMM 2
(dX += G·W) and GEMM 3 (dW += Gᵀ·X). GEMMs 1 and 2 read the same W tile (v × H) for every token
tile, so vectorize-contractions packs all of it, for each, before the token loop
(hoisted_panels): two v × H float32 copies per block, 11.5 MB of the 12.7 MB the FLCE float32
4096 x 4096 x 8192 took on 2 blocks. Here the block's token tiles go in groups, and a group
runs the loop body one phase at a time over all of its tiles, each tile's logits (then G) kept
in a stash entry of their own:

    scf.for %g0 = %first_token_tile to %end_token_tile step %group {      // group's tiles [g0, g1)
      scf.for %i = %g0 to %g1 { <start the logits tile> }                  // phase 0 (zero fill)
      scf.for %c = 0 to H step KC {                                        // phase 1: GEMM 1
        %w_c = W tile's columns [c, c + KC)            // packed once here, for the group's tiles
        scf.for %i = %g0 to %g1 { logits[i] += X_i[:, c:c+KC] · w_cᵀ }
      }
      scf.for %i = %g0 to %g1 { <softmax gradient: logits[i] -> G[i]> }   // phase 2
      scf.for %c ... {                                                     // phase 3: GEMM 2
        %w_c = W tile's columns [lo, hi)                                   // on dX's cache lines
        scf.for %i = %g0 to %g1 { dX_i[:, lo:hi] += G[i] · w_c }
      }
      npu.wait_flag (the block before is done with this vocabulary tile)
      scf.for %i = %g0 to %g1 { dW_v += G[i]ᵀ · X_i }                      // phase 4: GEMM 3
    }
    npu.wait_flag (again, for a block with no token tiles: the chain of flags stays whole)

Each pack is then KC × v floats (360 KB for v = 176, KC = 512), and the stash holds a group's
rows × v float32: a group is ceil(max(2·H, 2048) / bt) token tiles (or the block's, if fewer),
so where H ≥ 1024 the stash is the size of the two packs it replaces, give or take a tile (at
4096 x 4096 on 2 blocks: one group of 2046 rows, 1.4 MB; the FLCE float32 4096 x 4096 x 8192
took 3.6-3.8 MiB on 2 threads of a Zen 3, where it took 12.7), and below that each group's W
packs stay about 1 % of its time (a packed
element cost about 48 FLOPs' time, read off X's pack in GEMM 3; two per v·H, against the
group's 6·rows·v·H FLOPs: 16/rows). A group holds no more tiles than the level holding the
accumulator tiles (the L2) holds stash entries, but at least 1024 rows' worth (group_cap), and
the block's tiles split evenly over the groups that takes: the stash stays about an L2 per
block whatever H (the float32 4096 x 4096 x 8192 on a 2 MiB L2: 3 + 3 tiles of 384 x 320 where
one group of 6 held 2.8 MiB; 7.4 -> 5.2 MiB on 2 threads). Each group past the first costs its
W packs again, and on the second block, once, the GEMMs 1 and 2 it ran before its first wait
(about a third of a step: a split in two, 1.3 % of 26 steps).

Every sum runs in the order it did: GEMM 1's chunks add into the logits tile one after the
other in H's order, on the micro-kernel's own chunks (vectorize_contractions.summing_chunk:
bfloat16 pairs on vdpbf16ps take twice float32's KC; chunks of float32's there summed the
logits in another association on 2 threads than on 1), GEMM 2's chunks split columns, not its
sum. The results stay bit-identical for any number of blocks, and any grouping.

Measured and not kept: GEMM 3 over chunks of dW's columns (KC of them, on dW's cache lines),
each chunk summing the group's tiles in turn (the same bits), so that a chunk of the dW tile
stays in the L2 across the group instead of the whole tile (4 MiB of float32 at H = 4096) going
through memory once per token tile. On a Zen 5 (FLCE float32, 2 threads) GEMM 3's epilogue fell
from 5.1 % of the kernel's samples to 2.1 % at 4096 x 4096 x 8192, and the calls took as long:
1.001x and 1.000x there and at 2048 x 2048 x 32000 (10 rounds each of bench/ab.py).
Also measured and not kept: larger groups than group_cap allows (Zen 5, 1 MiB L2, 32 MiB L3,
bfloat16 unless said otherwise, 2 threads, bench/ab.py). Measured as the block's tiles split
into N groups, against group_cap's groups of at most 5 tiles of 252 x 256 (1.3 MiB of stash):
- BT = 4096 (9 tiles a block): one group of 9 (2.3 MiB) ran 1.014x and 1.019x (10 and 16
  rounds, 0.98-1.06), and 1.008x in float32 (6 rounds). That is W's packs once a step instead
  of twice, and block 1's first wait after GEMMs 1 and 2 of all its tiles.
- BT = 16384 (33 tiles a block, 7 groups by group_cap): one group (8.5 MiB) ran 0.962x, three
  groups 0.996x and four 1.018x (5 rounds each, 0.89-1.03).
The best here is 8 or 9 tiles a group, about twice the L2, where the stash already spills to
the L3. Nothing in the target's description gives that size, and the float32 4096 x 4096 x 8192
gradient's memory would go from 3.1 to about 5.2 MiB for 0.8 %. Measured again in a later
session (the same machine and size, 10 rounds each): one group 0.989x; only the last block in
one group (its lag behind the block before then GEMM 3's phases alone, the other blocks capped)
0.997x; groups of at most 3 tiles (3 + 3 + 3) 0.992x and of 2 0.978x.
Also measured and not kept: GEMM 3's phase before GEMM 2's, after the same wait. The idea was
that GEMM 3's pack would find the group's X rows still in the L3, where GEMM 1 had read them,
before GEMM 2 streamed dX's float32 accumulator through it. The pack's share of the samples
did not move, though: 3.9 % against 3.8 % (FLCE bfloat16 4096 x 4096 x 8192, 2 threads, Zen 5).
Block 1's waits grew from 25 to 31 ms a call, since only GEMM 1 and the softmax were now left
to run before its first wait. The calls were 1.017x as fast, 0.84-1.03 round by round (10
rounds of bench/ab.py).

The wait for the block before moves from the start of the step to GEMM 3: GEMMs 1 and 2 and the
softmax read nothing another block writes, so a block runs them while the block before finishes
the tile: on 2 blocks the second waits about a third of a step, once, at the start (GEMMs 1 and
2 of its first tile while the first block runs all three), where a wait at the start of each
step left it idle for the whole first step.
"""

from __future__ import annotations

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import DYNAMIC_INDEX, MemRefType
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Operation, SSAValue
from xdsl.rewriter import InsertPoint

from npugrad.analysis.footprint import budget
from npugrad.dialect.attributes import ROLE, Contraction, NestRole
from npugrad.dialect.npu import WaitFlagOp, element_bytes, static_bytes
from npugrad.ir import IRBuilder, integer_constant
from npugrad.passes.tiling.blocks import body_closure, contraction_of, mixed_offsets, mixed_sizes, nest_role
from npugrad.passes.vectorize_contractions import kernel_chunk, line_bytes, summing_chunk, view_root
from npugrad.targets import Target

# The fewest rows a group holds (see the module docstring: W's two packs ≈ 16/rows of its time)
# and, where the stash would outgrow the level holding the tiles (group_cap), the fewest it
# is cut down to.
MIN_GROUP_ROWS = 2048
FEWEST_CAPPED_ROWS = 1024

# The contractions whose W operand goes in chunks: GEMM 1, X (t, h) · W (v, h)ᵀ -> Z (t, v), and
# GEMM 2, G (t, v) · W (v, h) -> dX (t, h); the chunks are of h.
_GEMM1_MAPS = ["(d0, d1, d2) -> (d0, d1)", "(d0, d1, d2) -> (d2, d1)", "(d0, d1, d2) -> (d0, d2)"]
_GEMM2_MAPS = ["(d0, d1, d2) -> (d0, d1)", "(d0, d1, d2) -> (d1, d2)", "(d0, d1, d2) -> (d0, d2)"]

# Phases, in the order the body runs them.
_START, _LOGITS, _SOFTMAX, _INPUT_GRAD, _WEIGHT_GRAD = range(5)


def weight_chunk(target: Target) -> int:
    """Columns of W's tile per chunk (KC): the reduction chunk of the micro-kernels' panels."""
    return kernel_chunk(target, False)


def weight_pack_bytes(target: Target, v: int, h: int) -> int:
    """The most a group's pack of one chunk of a v × h W tile takes (float32): what GEMM 1 or
    GEMM 2 holds of W at a time, where packing all of the tile took v·h·4 bytes. GEMM 2's first
    chunk reaches dX's first cache line besides its KC columns."""
    return v * min(h, weight_chunk(target) + line_bytes(target) // 4) * 4


def group_cap(target: Target, entry_bytes: int, entry_rows: int) -> int | None:
    """The most token tiles a group holds: as many stash entries (`entry_bytes` each, of
    `entry_rows` rows: a token tile's logits, and whatever else more than one phase uses) as
    the level holding the accumulator tiles holds, but never fewer than FEWEST_CAPPED_ROWS rows'
    worth (the W packs then cost at most 16/1024, 1.6 % of a group's time); None where that
    level has no capacity. The stash is then about that level's bytes per block whatever H,
    where groups of max(2·H, 2048) rows grew with H: the FLCE float32 4096 x 4096 x 8192 on a
    2 MiB L2 held 6 tiles of 384 x 320 (2.8 MiB) per block in one group, now at most 4 a group:
    two groups of 3 (1.4 MiB)."""
    capacity = target.role("accumulator").capacity
    if capacity is None or entry_bytes <= 0:
        return None
    return max(budget(target, "accumulator") // entry_bytes, -(-FEWEST_CAPPED_ROWS // max(entry_rows, 1)), 1)


def _token_loop(root: Operation) -> scf.ForOp | None:
    return next((o for o in root.walk() if nest_role(o) is NestRole.TOKEN_LOOP), None)


def _body_ops(loop: scf.ForOp) -> list[Operation]:
    block = loop.body.block
    return [o for o in block.ops if o is not block.last_op]


def _phases(loop: scf.ForOp) -> dict[Operation, int] | None:
    """The phase of each op of the token loop's body that writes memory or yields nothing used
    (the roots: what the body is run for), or None if the body is not the gradient's: GEMMs 2
    and 3 (and GEMM 1 where the nest computes the logits) at its top level, in that order."""
    ops = _body_ops(loop)
    where = {contraction_of(o): n for n, o in enumerate(ops) if contraction_of(o) is not None}
    if Contraction.INPUT_GRAD not in where or Contraction.WEIGHT_GRAD not in where:
        return None
    g1 = where.get(Contraction.LOGITS)
    g2, g3 = where[Contraction.INPUT_GRAD], where[Contraction.WEIGHT_GRAD]
    if g3 < g2 or (g1 is not None and g1 > g2):
        return None
    phases = {}
    for n, op in enumerate(ops):
        if any(r.uses for r in op.results):
            continue  # a value the roots use: kept with whichever phase needs it
        if g1 is not None and n < g1:
            phases[op] = _START
        elif n == g1:
            phases[op] = _LOGITS
        elif n < g2:
            phases[op] = _SOFTMAX
        elif n == g2:
            phases[op] = _INPUT_GRAD
        else:
            phases[op] = _WEIGHT_GRAD
    return phases


def _scratch(loop: scf.ForOp, phases: dict[Operation, int] | None) -> dict[Operation, set[int]] | None:
    """The phases that use each tile of scratch of the body (a heap buffer allocated outside the
    loop, of static shape: the logits tile, G, the saved target logits), or None where the body
    is not one to run in phases (_phases) or a scratch more than one phase uses is used other
    than through views the body makes of it (which the stash can move). `phases`: _phases(loop)."""
    if phases is None:
        return None
    body = loop.body.block
    used: dict[Operation, set[int]] = {}
    direct: set[Operation] = set()
    for root, phase in phases.items():
        for op in body_closure([root], body):
            for inner in op.walk():
                for operand in inner.operands:
                    owner = operand.owner
                    if not isinstance(owner, memref.AllocOp) or loop.is_ancestor(owner):
                        continue
                    t = owner.memref.type
                    if not isinstance(t, MemRefType) or DYNAMIC_INDEX in t.get_shape():
                        continue  # a buffer of the whole block (dX's float32 accumulator), not a tile
                    used.setdefault(owner, set()).add(phase)
                    if not (isinstance(inner, memref.SubviewOp) and inner.parent_block() is body):
                        direct.add(owner)
    if any(len(used[a]) > 1 for a in direct):
        return None
    return used


def applies(nest: scf.ForOp) -> bool:
    """Whether the fused nest's token loop can run in phases."""
    tokens = _token_loop(nest)
    return tokens is not None and _scratch(tokens, _phases(tokens)) is not None


def _only(loop: scf.ForOp, roots: list[Operation], e: IRBuilder) -> None:
    """Erase every op of the loop's body but `roots` and what they use."""
    body = loop.body.block
    keep = body_closure(roots, body)
    for op in reversed(_body_ops(loop)):
        if op not in keep:
            e.erase(op)


def _surround(loop: scf.ForOp, e: IRBuilder, ub: SSAValue, lb: SSAValue | None = None,
              step: SSAValue | None = None) -> tuple[SSAValue, IRBuilder]:
    """Move `loop` into a new `scf.for` (its index, and a builder before `loop` inside it)."""
    with e.at(loop).loop(ub, lb, step) as index:
        pass
    outer = loop.prev_op
    assert isinstance(outer, scf.ForOp)
    loop.detach()
    outer.body.block.insert_op_before(loop, outer.body.block.last_op)
    return index, e.at(loop)


def _chunks(gen: GenericOp, loop: scf.ForOp, e: IRBuilder, chunk: int, narrow: int, weight: SSAValue,
            line: int) -> None:
    """Run `gen` (in `loop`) over chunks of W's columns: a loop around `loop` over [lo, hi),
    W's view (`gen`'s B, defined outside `loop`: its panels are then packed once per chunk) and
    operand `narrow`'s columns narrowed to the chunk: GEMM 1's X tile (operand 0: the chunk is
    of the reduction) or GEMM 2's dX tile (operand 2, C: chunks after the first start on C's
    cache lines, where C's memory is there before the loop)."""
    at = e.at(loop)
    width = at.dim(weight, 1)
    first = None
    root = view_root(gen.outputs[0])
    owner = root.owner if isinstance(root.owner, Operation) else root.owner.parent_op()
    if narrow == 2 and not (owner is not None and loop.is_ancestor(owner)):
        first = at.line_head(root, width, element_bytes(root.type.element_type), line)  # type: ignore[attr-defined]
        first.name_hint = "first_line"
    step = at.idx(chunk)
    if first is None:
        count = at.emit(arith.CeilDivUIOp(width, step))
    else:  # [0, first + KC), then [first + c·KC, first + (c + 1)·KC): at least one chunk
        after = at.emit(arith.CeilDivUIOp(at.emit(arith.SubiOp(width, first)), step))
        count = at.emit(arith.MaxUIOp(after, at.idx(1)))
    c, inner = _surround(loop, at, count)
    c.name_hint = "chunk"
    lo = inner.emit(arith.MuliOp(c, step))
    hi = inner.emit(arith.AddiOp(lo, step))
    if first is not None:
        later = inner.emit(arith.AddiOp(lo, first))
        lo = inner.emit(arith.SelectOp(inner.emit(arith.CmpiOp(c, inner.idx(0), "eq")), inner.idx(0), later))
        hi = inner.emit(arith.AddiOp(hi, first))
    hi = inner.emit(arith.MinUIOp(hi, width))
    size = inner.emit(arith.SubiOp(hi, lo))
    lo.name_hint, size.name_hint = "chunk_lo", "chunk_size"
    gen.operands[1] = inner.subview(weight, [0, lo], [inner.dim(weight, 0), size])
    here = e.at(gen)
    operand = gen.operands[narrow]
    gen.operands[narrow] = here.subview(operand, [0, lo], [here.dim(operand, 0), size])
    e.modified(gen)


def _maps(gen: GenericOp) -> list[str]:
    return [str(m.data) for m in gen.indexing_maps.data]  # type: ignore[attr-defined]


def split(wave: scf.ForOp, target: Target, e: IRBuilder) -> None:
    """The wavefront's token loop (flce.wavefront) in phases over groups of token tiles (the
    module docstring), the kernels shaped for `target`."""
    tokens = _token_loop(wave)
    assert tokens is not None
    phases = _phases(tokens)
    used = _scratch(tokens, phases)
    assert phases is not None and used is not None
    body = tokens.body.block
    # The token loop runs over tile indices (balance_blocks: step 1) or over rows in steps of
    # the tile (balance_blocks=0): a group of `group` tiles spans `group` steps of it.
    first_tile, end_tile, tile_step = tokens.lb, tokens.ub, tokens.step
    step_one = integer_constant(tile_step) == 1
    gemm2 = next(o for o in phases if contraction_of(o) is Contraction.INPUT_GRAD)
    weight = gemm2.inputs[1]  # the W tile: GEMM 1's B (read transposed) and GEMM 2's

    # Groups: up to max(2·H, MIN_GROUP_ROWS) rows of token tiles each, and no more tiles than
    # the level holding the tiles (the accumulator's) holds stash entries of (group_cap); then
    # the block's tiles split evenly over as many groups as that takes (the same W packs, the
    # stash of the largest group: 3 + 3 tiles where 4 + 2 held 4 entries).
    top = e.at(wave)
    tiles = top.emit(arith.SubiOp(end_tile, first_tile))
    if not step_one:
        tiles = top.emit(arith.CeilDivUIOp(tiles, tile_step))
    tiles.name_hint = "block_tiles"
    tile_rows = max((s.memref.type.get_shape()[0] for s in used), default=1)  # type: ignore[union-attr]
    h = top.dim(view_root(weight), 1)
    rows = top.emit(arith.MaxUIOp(top.emit(arith.MuliOp(h, top.idx(2))), top.idx(MIN_GROUP_ROWS)))
    rows.name_hint = "group_rows"
    most = top.emit(arith.MaxUIOp(top.emit(arith.CeilDivUIOp(rows, top.idx(tile_rows))), top.idx(1)))
    cap = group_cap(target, sum(static_bytes(s.memref.type) for s, p in used.items() if len(p) > 1), tile_rows)  # type: ignore[union-attr]
    if cap is not None:
        most = top.emit(arith.MinUIOp(most, top.idx(cap)))
    most.name_hint = "most_tiles"
    some = top.emit(arith.MaxUIOp(tiles, top.idx(1)))  # a block without tiles: one (empty) group
    groups = top.emit(arith.CeilDivUIOp(some, most))
    groups.name_hint = "groups"
    group = top.emit(arith.CeilDivUIOp(some, groups))
    group.name_hint = "group_tiles"
    entries = top.emit(arith.MinUIOp(group, tiles))
    entries.name_hint = "stash_tiles"
    span = group if step_one else top.emit(arith.MuliOp(group, tile_step))  # the group's extent in the loop's units

    g0, inner = _surround(tokens, e, end_tile, first_tile, span)
    g0.name_hint = "group_start"
    g1 = inner.emit(arith.MinUIOp(inner.emit(arith.AddiOp(g0, span)), end_tile))
    tokens.operands = [g0, g1, *tokens.operands[2:]]
    e.modified(tokens)
    # The scratch more than one phase uses gets a stash entry per tile of the group.
    stashes = {}
    for scratch in [s for s, p in used.items() if len(p) > 1]:
        t = scratch.memref.type  # type: ignore[union-attr]
        shape = t.get_shape()
        stash = top.alloc([top.emit(arith.MuliOp(entries, top.idx(shape[0]))), *shape[1:]], t.element_type)
        stash.name_hint = f"{scratch.memref.name_hint or 'tile'}_stash"  # type: ignore[union-attr]
        e.rewriter.insert(memref.DeallocOp.get(stash), InsertPoint.after(wave))
        stashes[scratch] = (stash, shape[0])
    entry = None
    views = [o for o in body.ops if isinstance(o, memref.SubviewOp) and o.source.owner in stashes]
    for view in views:
        stash, n = stashes[view.source.owner]
        at = e.at(view)
        if entry is None:
            at_first = e.at(body.first_op)
            entry = at_first.emit(arith.SubiOp(body.args[0], g0))
            if not step_one:
                entry = at_first.emit(arith.DivUIOp(entry, tile_step))
            entry.name_hint = "stash_entry"
        offsets = mixed_offsets(view)
        row = at.emit(arith.MuliOp(entry, at.idx(n)))
        if offsets[0] != 0:
            row = at.emit(arith.AddiOp(row, offsets[0] if isinstance(offsets[0], SSAValue) else at.idx(offsets[0])))
        moved = at.subview(stash, [row, *offsets[1:]], mixed_sizes(view))
        view.result.replace_all_uses_with(moved)
        e.erase(view)
    for scratch in stashes:
        e.erase_if_dead(scratch.memref)  # type: ignore[union-attr]

    # One loop per phase, in order, before the token loop, which keeps GEMM 3's.
    present = sorted(set(phases.values()))
    ops = _body_ops(tokens)
    loops = {}
    for phase in present:
        if phase == _WEIGHT_GRAD:
            loops[phase] = tokens
            continue
        clone = tokens.clone()
        ROLE.remove(clone)
        e.rewriter.insert(clone, InsertPoint.before(tokens))
        mapped = dict(zip(ops, _body_ops(clone)))
        _only(clone, [mapped[o] for o, p in phases.items() if p == phase], e)
        loops[phase] = clone
    _only(tokens, [o for o, p in phases.items() if p == _WEIGHT_GRAD], e)

    # GEMMs 1 and 2 over chunks of W's columns, each chunk packed once for the group's tiles.
    # GEMM 1's chunks split its reduction: on the micro-kernel's own chunks (summing_chunk:
    # bfloat16 pairs take twice float32's), so that its sums associate as they did unsplit.
    line = line_bytes(target)
    for phase, kind, maps, narrow in ((_LOGITS, Contraction.LOGITS, _GEMM1_MAPS, 0),
                                      (_INPUT_GRAD, Contraction.INPUT_GRAD, _GEMM2_MAPS, 2)):
        gen = next((o for o in loops[phase].walk() if contraction_of(o) is kind), None) if phase in loops else None
        if gen is not None and gen.inputs[1] is weight and _maps(gen) == maps:
            kc = (summing_chunk(gen, target) if narrow == 0 else None) or weight_chunk(target)
            _chunks(gen, loops[phase], e, kc, narrow, weight, line)

    # The wait for the block before: before GEMM 3, and again once the step's work is done.
    wait = next(o for o in wave.body.block.ops if isinstance(o, WaitFlagOp))
    e.rewriter.insert(wait.clone(), InsertPoint.before(tokens))
    step_work = tokens
    while step_work.parent_op() is not wave:
        step_work = step_work.parent_op()  # type: ignore[assignment]
    wait.detach()
    e.rewriter.insert(wait, InsertPoint.after(step_work))
