"""Tiling of the fused linear cross-entropy gradient (the nest fuse-linear-cross-entropy-grad
built, marked `train.fused` with tiles {bt, v, h}): each of its three contractions (marked
`#train.contraction`) is tiled into the matrix levels (operands) and the accumulator level
(float32 results), H in chunks of `h`; the tile-sized scratch (logits, G, saved target logits,
marked `npu.promote`) moves into the level of its role.

    linalg.generic ins(%x_t, %w_packed) outs(%z_t) {train.contraction = #train.contraction<logits, ...>}
becomes
    %A = npu.alloc_local : memref<bt x h x T, #npu.mem<l0a>> ...               // see contraction.py
    scf.for %h0 ... { npu.copy ...; linalg.generic ins(%A, %B) outs(%C); ... }  // %z_t in #npu.mem<ub>

Spreading the nest over cores: the weight gradient of a vocabulary tile sums over all tokens,
the input gradient of a token tile over all vocabulary tiles, so whichever loop is split, one of
the two sums would cross cores. Instead the nest runs twice, in two phases that write disjoint
outputs: phase A spreads the vocabulary tiles over the blocks and computes dW (GEMM 2 dropped),
phase B spreads the token tiles and computes dX (GEMM 3 dropped). No block waits for another,
every sum runs in the same order whatever the number of blocks (bit-identical results for any
thread count), and no workspace is needed; the price is GEMM 1 and the exponentials done twice.
The parts each phase keeps or drops are found by their `#train.role` and `#train.contraction`.
"""

from __future__ import annotations

from collections.abc import Callable

from dataclasses import dataclass
from functools import lru_cache

from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import MemRefType
from xdsl.dialects.builtin import AffineMapAttr, ArrayAttr
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir.affine import AffineMap
from xdsl.rewriter import InsertPoint

from npugrad.analysis.cost import Load
from npugrad.analysis.footprint import TileBuffer, budget
from npugrad.dialect.attributes import CONTRACTION, FUSED, ROLE, Contraction, NestRole
from npugrad.dialect.npu import PROMOTE, AllocLocalOp, BlockDimOp, BlockIdxOp, element_bytes, local_type
from npugrad.ir import IRBuilder, enclosing_function
from npugrad.passes.tiling.contraction import staged, tile_contraction
from npugrad.targets import Target

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
    for use in list(alloc.memref.uses):
        if isinstance(use.operation, memref.DeallocOp):
            e.erase(use.operation)
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


def _role(op) -> NestRole | None:
    attr = ROLE.get(op)
    return attr.data if attr is not None else None


def _contraction(op) -> Contraction | None:
    attr = CONTRACTION.get(op) if isinstance(op, GenericOp) else None
    return attr.contraction if attr is not None else None


def spread(loop: scf.ForOp, bid, nblk, e: IRBuilder) -> None:
    """for i = lb to ub step s  →  for i = lb + bid·s to ub step nblk·s (block-cyclic tiles)."""
    e = e.at(loop)
    first = e.emit(arith.MuliOp(bid, loop.step))
    starts_at_zero = isinstance(loop.lb.owner, arith.ConstantOp) and loop.lb.owner.value.value.data == 0
    lb = first if starts_at_zero else e.emit(arith.AddiOp(loop.lb, first))
    step = e.emit(arith.MuliOp(nblk, loop.step))
    loop.operands = [lb, loop.ub, step, *loop.iter_args]
    e.modified(loop)


def _token_rows(e: IRBuilder, bid, nblk, acc, tb: int, body) -> None:
    """body(rows of acc) for each token tile of this block."""
    bt, h = e.dim(acc, 0), e.dim(acc, 1)
    with e.loop(bt, lb=e.emit(arith.MuliOp(bid, e.idx(tb))), step=e.emit(arith.MuliOp(nblk, e.idx(tb)))) as t0:
        body(t0, e.emit(arith.MinSIOp(e.idx(tb), e.emit(arith.SubiOp(bt, t0)))), h)


def split_over_blocks(nest: scf.ForOp, tiles: dict[str, int], e: IRBuilder) -> scf.ForOp:
    """Make `nest` phase A and return phase B (see the module docstring)."""
    top = nest.parent
    e = e.at(nest)
    bid, nblk = e.emit(BlockIdxOp()), e.emit(BlockDimOp())
    phase_b = nest.clone()
    e.rewriter.insert(phase_b, InsertPoint.after(nest))
    for gen in [o for o in nest.walk() if _contraction(o) is Contraction.INPUT_GRAD]:
        e.erase(gen)
    for op in list(phase_b.walk()):
        if _contraction(op) is Contraction.WEIGHT_GRAD or _role(op) in (NestRole.WEIGHT_GRAD_INIT, NestRole.WEIGHT_GRAD_FINAL):
            e.erase(op)
    spread(nest, bid, nblk, e)
    spread(next(o for o in phase_b.walk() if _role(o) is NestRole.TOKEN_LOOP), bid, nblk, e)

    # dX is zeroed and rounded per block, on that block's token rows only.
    for op in [o for o in top.ops if _role(o) in (NestRole.INPUT_GRAD_INIT, NestRole.INPUT_GRAD_FINAL)]:
        if _role(op) is NestRole.INPUT_GRAD_INIT:
            acc = op.outputs[0]
            at = e.at(phase_b)
            _token_rows(at, bid, nblk, acc, tiles["bt"], lambda t0, n, h, at=at, acc=acc: at.fill(0.0, at.subview(acc, [t0, 0], [n, h])))
        else:
            load = next(o for o in op.walk() if isinstance(o, memref.LoadOp))
            store = next(o for o in op.walk() if isinstance(o, memref.StoreOp))
            acc, out = load.memref, store.memref
            at = e.at(op)

            def round_rows(t0, n, h, at=at, acc=acc, out=out):
                src, dst = at.subview(acc, [t0, 0], [n, h]), at.subview(out, [t0, 0], [n, h])
                with at.loop_nest([n, h]) as ivs:
                    at.store_f32(at.load(src, ivs), dst, ivs)

            _token_rows(at, bid, nblk, acc, tiles["bt"], round_rows)
        e.erase(op)
    return phase_b


def nest_tiles(nest: scf.ForOp) -> dict[str, int]:
    """The tile sizes fuse-linear-cross-entropy-grad put on its nest."""
    fused = FUSED.get(nest)
    assert fused is not None
    return fused.tiles.as_dict()


def distribute_fused_flce(nest: scf.ForOp, e: IRBuilder) -> None:
    """The nest over blocks: the two phases (module docstring), every sum in one-phase order."""
    split_over_blocks(nest, nest_tiles(nest), e)


def read_weight_in_place(nest: scf.ForOp, e: IRBuilder) -> None:
    """GEMM 1 reads the W tile as it is stored (v × h) and its tiling transposes each chunk on the
    way into the matrix level (npu.copy {transpose}): the scalar loops packing the tile
    transposed in global memory (#train.role<weight_pack>) and their buffer go.

        scf.for %j { scf.for %k { %p[k, j] = %w_t[j, k] } } {train.role = #train.role<weight_pack>}
        linalg.generic {maps (t,h,v) -> (t,h), (h,v), (t,v)} ins(%x_t, %p) outs(%z)
    becomes
        linalg.generic {maps (t,h,v) -> (t,h), (v,h), (t,v)} ins(%x_t, %w_t) outs(%z)
    """
    for pack in [o for o in nest.walk() if _role(o) is NestRole.WEIGHT_PACK]:
        load = next(o for o in pack.walk() if isinstance(o, memref.LoadOp))
        store = next(o for o in pack.walk() if isinstance(o, memref.StoreOp))
        weight, packed = load.memref, store.memref
        for use in list(packed.uses):
            gen = use.operation
            if not (isinstance(gen, GenericOp) and _contraction(gen) is Contraction.LOGITS and use.index == 1):
                continue
            a, c = gen.indexing_maps.data[0].data, gen.indexing_maps.data[2].data  # type: ignore[attr-defined]
            b = gen.indexing_maps.data[1].data  # type: ignore[attr-defined]
            flipped = AffineMap(b.num_dims, b.num_symbols, b.results[::-1])
            new = GenericOp([gen.inputs[0], weight], list(gen.outputs), gen.body.clone(),
                            ArrayAttr([AffineMapAttr(m) for m in (a, flipped, c)]), gen.iterator_types, doc=gen.doc)
            new.attributes.update(gen.attributes)
            new.location = gen.location
            e.rewriter.replace_op(gen, new)
        e.erase(pack)
        view = packed.owner
        if isinstance(view, memref.SubviewOp) and not view.result.uses:
            buffer = view.source
            e.erase(view)
            if all(isinstance(u.operation, memref.DeallocOp) for u in buffer.uses):
                for u in list(buffer.uses):
                    e.erase(u.operation)
                e.erase(buffer.owner)  # type: ignore[arg-type]


def tile_fused_flce(nest: scf.ForOp, target: Target, e: IRBuilder) -> None:
    tiles = nest_tiles(nest)
    f = enclosing_function(nest)
    read_weight_in_place(nest, e)
    phase_b = split_over_blocks(nest, tiles, e)
    buffers: dict = {}
    gens = [o for n in (nest, phase_b) for o in n.walk() if _contraction(o) is not None]
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
    """What the tiled nest does on its busiest core, per phase (see the module docstring): per
    (token tile, vocabulary tile) its logit tile (logit_tiles), then GEMM 3 (phase A) or GEMM 2
    (phase B) in chunks of h, whose float32 accumulator tile goes to global memory and back for
    every chunk; dX and dW zeroed and rounded in global memory (4 operations per element)."""
    shape = gemm_shape(op)
    BT, V, H, b = shape.bt, shape.v, shape.h, shape.b
    bt, v, h = (min(sizes[d], n) for d, n in zip(("bt", "v", "h"), (BT, V, H)))
    g = target.global_level.name
    a, bb, acc, vec = (target.role(r).name for r in ("matrix_a", "matrix_b", "accumulator", "vector"))
    cores = target.cores
    nt, nv, hc = -(-BT // bt), -(-V // v), -(-H // h)

    def pairs(n: int, rows: int, rhs_rows: int) -> Load:
        """n pairs whose second GEMM accumulates a rows × H tile from G and a rhs_rows × H operand."""
        load = Load()
        logit_tiles(load, n, (bt, v, h), op, target)
        load.add_work("matrix", shape.element, n * 2 * bt * v * H, n * hc, 0)
        load.add_move((g, acc), n * rows * H * 4, n * hc)
        load.add_move((acc, g), n * rows * H * 4, n * hc)
        load.add_move((vec, a), n * hc * bt * v * b, n * hc)
        operand_in(load, "matrix_b", n * rhs_rows * H * b, n * hc, target)
        return load

    va, tb = -(-nv // cores), -(-nt // cores)
    phase_a = pairs(va * nt, v, bt)  # vocabulary tiles over cores, each with all token tiles: dW
    phase_a.add_work("scalar", "f32", va * v * H * 4, va * 2, 0)
    spread_totals(phase_a, nv / va, nv * v * H * 4, target)
    phase_b = pairs(tb * nv, bt, v)  # token tiles over cores, each with all vocabulary tiles: dX
    phase_b.add_work("scalar", "f32", tb * bt * H * 4, 2 * tb, 0)
    spread_totals(phase_b, nt / tb, BT * H * 4, target)
    phase_a.extents = {"bt": BT, "v": V, "h": H}
    return [phase_a, phase_b]


def choose_tile_sizes(op, target: Target) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) whose tiles fit every level at once."""
    return largest_fitting_tiles(footprint_bytes, element_bytes(op.input.type.element_type), target)


def largest_fitting_tiles(footprint: Callable[[int, int, int, int, bool], dict[str, int]], b: int,
                          target: Target) -> dict[str, int]:
    """The largest bt × v tile (then the largest h) of a linear nest whose `footprint` (bytes per
    role, as footprint_bytes) fits every level at once; bt a multiple of 8."""
    best = None
    for bt in (128, 64, 32, 16, 8):
        for v in (256, 128, 64, 32, 16):
            for h in (512, 256, 128, 64, 32, 16):
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
    if best is None:
        return {"bt": 8, "v": 16, "h": 16}  # check-capacity will say why even this does not fit
    return best[1]
