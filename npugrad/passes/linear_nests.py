"""Pieces the fused nests of the linear cross-entropy ops are built from, forward
(fuse-linear-online-max-sum) and backward (fuse-linear-cross-entropy-grad): parts marked with
#train.role, contractions with #train.contraction, tile scratch a tiling may move into local memory
with npu.promote, the W tile packed transposed once per vocabulary tile, the logits tile
Z = X_t·W_vᵀ (softcapped when asked), and the target's column in a tile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from math import isqrt

from xdsl.dialects import arith
from xdsl.ir import Operation, SSAValue

from npugrad.dialect.attributes import CONTRACTION, ROLE, Contraction, ContractionAttr, NestRole, NestRoleAttr
from npugrad.dialect.npu import PROMOTE, TileRole, TileRoleAttr
from npugrad.ir import IRBuilder
from npugrad.ir.expr import Float
from npugrad.lowering.train_to_loops.flce import softcap
from npugrad.passes.tiling.blocks import start_accumulator
from npugrad.passes.vectorize_contractions import panel_width, row_multiple
from npugrad.targets import Target, get


def cpu_tiles(cpu: Target) -> dict[str, int]:
    """{bt, v} for the nests on CPU `cpu` when nothing chose them (no target to tile for): the
    float32 logits tile fills a quarter of the level the target gives the vector role (the L2 on
    a CPU; the rest is for the panels of X and W that the three GEMMs stream past it), about
    square, v a multiple of the micro-kernel's block width and bt of its row count (and of AMX's
    32-row blocks where the CPU has them: vectorize_contractions.row_multiple). Square:
    GEMM 3 reads and writes its v × H accumulator once per token tile and GEMM 2 its bt × H
    one once per vocabulary tile, traffic per FLOP 1/bt and 1/v; GEMM 3 packs X's bt × H once
    per vocabulary tile (GEMMs 1 and 2 pack W's tile once, before the token loop:
    vectorize_contractions.invariant_loop). (512 KiB L2, AVX2:
    bt = 186, v = 176; measured on a Zen 3, FLCE 2048 x 2048 x 8192 float32 on 2 threads, 0.74x
    the same run's SGEMM where the 64 x 128 tiles used before gave 0.63x. 1 MiB L2, AVX-512:
    252 x 256; on a Zen 4, v = 384 with bt = 168, 192 or 252 (GEMM 3's rows whole 6-row blocks,
    GEMM 2's reduction 1.5 times as long) ran 0.996-1.015x as fast at both bench sizes in both
    dtypes, 16 rounds of bench/ab.py each. On a Zen 5, 1 MiB L2, bfloat16 4096 x 4096 x 8192
    on vdpbf16ps, 2 threads, 8 rounds: v = 512 ran 0.908x as fast, v = 384 0.969x, bt = 504
    0.984x.)"""
    mr = row_multiple(cpu)
    width = panel_width(cpu)
    capacity = cpu.role("vector").capacity or 1 << 20
    area = capacity // 4 // 4  # float32 elements in a quarter of the level
    v = max(width, isqrt(area) // width * width)
    return {"bt": max(mr, area // v // mr * mr), "v": v}


def check_options(pass_name: str, **options: int) -> None:
    """A fuse pass's integer options (tile_bt, tile_v, balance_blocks) are >= 0 (0: from the
    CPU, or off), or ValueError naming the pass and the option: npugrad-opt reports it as a
    usage error before any IR is read (a negative tile reached #train.tiles' verifier, which
    named neither)."""
    for name, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{pass_name}: option '{name}' must be a non-negative integer, "
                             f"got {value!r}")


def nest_tiles(tile_bt: int, tile_v: int, cpu: str) -> dict[str, int]:
    """The tile sizes a fuse pass's options give: each as set, or (0) cpu_tiles of `cpu`."""
    if tile_bt and tile_v:
        return {"bt": tile_bt, "v": tile_v}
    derived = cpu_tiles(get(cpu))
    return {"bt": tile_bt or derived["bt"], "v": tile_v or derived["v"]}


def within(tiles: dict[str, int], op) -> dict[str, int]:
    """A fuse pass's tile sizes (its options, the CPU's, or the op's `tile_sizes`) no larger
    than the op's static dimensions (BT and H, the input's; V, the weight's rows): a tile past
    them holds the same rows and columns in larger buffers (`tile_bt=1000000000` allocated 1 TB
    of logits tile for BT = 16), and choose-tile-sizes models and fits them clamped so."""
    (bt, h), v = op.input.type.get_shape(), op.weight.type.get_shape()[0]
    return {**tiles, **{k: min(tiles[k], n) for k, n in (("bt", bt), ("v", v), ("h", h)) if k in tiles and n > 0}}


def token_balance(blocks: int, cpu: str) -> tuple[int, int]:
    """A fuse pass's `balance_blocks` option as the (blocks, multiple) of token_step (the
    forward) and TokenTiles (the gradient): the row multiple is the micro-kernel's row count on
    `cpu` (row_multiple); (0, 1) leaves the tiles at steps of the tile."""
    return (blocks, row_multiple(get(cpu))) if blocks > 0 else (0, 1)


def token_step(e: IRBuilder, bt: SSAValue, tile: int, blocks: int, multiple: int) -> SSAValue:
    """The forward's token loop step (fuse-linear-online-max-sum; the gradient's tiles are
    balanced_starts'): `tile` rows, or, with `blocks` (> 0), the same number of tiles or a few
    more, as even as uniform steps can be. The tile count ceil(BT / tile) is rounded up to a
    multiple of `blocks`, and the step is ceil(BT / count) rounded up to a multiple of
    `multiple` (the micro-kernel's rows), at most `tile`. A wavefront over `blocks` blocks, each
    taking count / blocks consecutive tiles, then gives every block about BT / blocks rows:

        BT = 2048, tile = 186, 2 blocks:  steps of 186, 11 tiles and one of 2 rows: 1116 + 932
                                          steps of 174, 11 tiles and one of 134:   1044 + 1004

    (measured on a Zen 3, FLCE 2048 x 2048 x 8192 float32 on 2 threads: the busier core had 9 %
    more rows than the average before). The step follows from BT and the pass options, never
    from the number of threads a kernel runs on: the sums a token tile associates (GEMM 3's
    over its rows) are those of every thread count."""
    if not blocks:
        return e.idx(tile)
    count = e.emit(arith.MaxUIOp(e.emit(arith.CeilDivUIOp(bt, e.idx(tile))), e.idx(1)))
    count = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(count, e.idx(blocks))), e.idx(blocks)))
    rows = e.emit(arith.CeilDivUIOp(bt, count))
    step = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(rows, e.idx(multiple))), e.idx(multiple)))
    step = e.emit(arith.MaxUIOp(e.emit(arith.MinUIOp(step, e.idx(tile))), e.idx(1)))
    step.name_hint = "token_step"
    return step


def balanced_starts(e: IRBuilder, bt: SSAValue, tile: int, blocks: int, multiple: int) \
        -> tuple[SSAValue, Callable[[IRBuilder, SSAValue], SSAValue]]:
    """(count, start): BT's rows as `count` token tiles of at most `tile` rows, tile i the rows
    [start(i), start(i + 1)), as even as whole units of `multiple` rows (the micro-kernel's; 1
    where the tile is smaller) make them, and `count` a multiple of `blocks` (where BT has that
    many units: a tile is never empty but for BT = 0):

        units = ceil(BT / multiple)
        count = ceil(units / floor(tile / multiple)) rounded up to a multiple of blocks
        start(i) = min(BT, ceil(i · units / count) · multiple)

    A wavefront over `blocks` blocks, each taking count / blocks consecutive tiles, then gives
    every block BT / blocks rows to within `multiple`, where uniform steps put the whole
    shortfall of the last tile on the last block:

        BT = 2048, tile = 186, multiple 6, 2 blocks: 12 tiles of 174 and 168 rows (the last 164),
            1026 + 1022
            (uniform steps of 174: 11 tiles and one of 134, 1044 + 1004)
        BT = 4096: 24 tiles, 2052 + 2044 (uniform steps of 174: 2088 + 2008)

    A tile has at most ceil(units / count) · multiple <= tile rows. The tiles follow from BT and
    the pass options, never from the number of threads a kernel runs on: the sums a token tile
    associates (GEMM 3's over its rows) are those of every thread count."""
    unit = multiple if tile >= multiple else 1
    units = e.emit(arith.CeilDivUIOp(bt, e.idx(unit)))
    units.name_hint = "token_units"
    count = e.emit(arith.CeilDivUIOp(units, e.idx(tile // unit)))
    count = e.emit(arith.MuliOp(e.emit(arith.CeilDivUIOp(count, e.idx(blocks))), e.idx(blocks)))
    count = e.emit(arith.MaxUIOp(e.emit(arith.MinUIOp(count, units)), e.idx(1)))
    count.name_hint = "token_tiles"

    def start(at: IRBuilder, i: SSAValue) -> SSAValue:
        spread = at.emit(arith.CeilDivUIOp(at.emit(arith.MuliOp(i, units)), count))
        return at.emit(arith.MinSIOp(at.emit(arith.MuliOp(spread, at.idx(unit))), bt))

    return count, start


class TokenTiles:
    """How a fused nest tiles its token rows, decided before its loops (what it computes is
    loop-invariant, and passes splitting the token loop over blocks use it from outside the
    nest): without `balance` (blocks 0), steps of `tile` rows; with `balance` (blocks,
    multiple), the tiles of balanced_starts."""

    def __init__(self, e: IRBuilder, bt: SSAValue, tile: int, balance: tuple[int, int]):
        self.bt, self.tile = bt, tile
        self.count, self.start = balanced_starts(e, bt, tile, *balance) if balance[0] else (None, None)

    @contextmanager
    def loop(self, e: IRBuilder) -> Iterator[tuple[SSAValue, SSAValue]]:
        """The loop over the token tiles (#train.role<token_loop>); the body gets (first row t0,
        rows tb) of its tile. Over rows, `for t0 = 0 to BT step tile`, tb = min(tile, BT − t0);
        balanced, over tile indices, `for i = 0 to count`, t0 = start(i) (marked
        #train.role<token_start>: passes that split the loop compute other tiles' starts from
        it, tiling.blocks.TokenLoop), tb = start(i + 1) − t0."""
        if self.start is None:
            step = e.idx(self.tile)
            with e.loop(self.bt, step=step) as t0:
                mark(loop_of(t0), NestRole.TOKEN_LOOP)
                yield t0, e.emit(arith.MinSIOp(step, e.emit(arith.SubiOp(self.bt, t0))))
            return
        with e.loop(self.count) as i:
            i.name_hint = "token_tile"
            mark(loop_of(i), NestRole.TOKEN_LOOP)
            t0 = self.start(e, i)
            mark(t0.owner, NestRole.TOKEN_START)  # type: ignore[arg-type]
            t0.name_hint = "t0"
            tb = e.emit(arith.SubiOp(self.start(e, e.emit(arith.AddiOp(i, e.idx(1)))), t0))
            tb.name_hint = "tb"
            yield t0, tb


def mark(op: Operation, role: NestRole) -> Operation:
    """Name the part of the nest an op is, for passes that restructure it (see tiling/flce.py)."""
    ROLE.set(op, NestRoleAttr(role))
    return op


def loop_of(iv: SSAValue) -> Operation:
    """The scf.for whose induction variable `iv` is."""
    return iv.owner.parent_op()  # type: ignore[union-attr, return-value]


def contract(e: IRBuilder, lhs, rhs, acc, maps, doc: str, kind: Contraction, dims: tuple[str, str, str]) -> None:
    """acc += lhs·rhs over the middle of three loop dims, typed as `kind` for the passes after."""
    gen = e.contract(lhs, rhs, acc, maps, doc, reduction_dim=1)
    CONTRACTION.set(gen, ContractionAttr(kind, dims))


def tile_buffer(e: IRBuilder, shape: list[int], element, name: str) -> SSAValue:
    """A heap tile of fixed shape that a tiling may move into the vector level."""
    buf = e.alloc(shape, element)
    PROMOTE.set(buf.owner, TileRoleAttr(TileRole.VECTOR))  # type: ignore[arg-type]
    buf.name_hint = name
    return buf


def pack_transposed(e: IRBuilder, w_t: SSAValue, packed: SSAValue, tv: SSAValue, h: SSAValue) -> SSAValue:
    """packed[k, j] = w_t[j, k] for the tv × h tile: GEMM 1 reads W_v transposed, and packed once
    per vocabulary tile (amortised over all tokens) its innermost loop runs along a contiguous
    dimension too."""
    view = e.subview(packed, [0, 0], [h, tv])
    with e.loop(tv) as j, e.loop(h) as k:
        e.store(e.load(w_t, [j, k]), view, [k, j])
    mark(loop_of(j), NestRole.WEIGHT_PACK)
    return view


def logits_tile(e: IRBuilder, x_t: SSAValue, w_packed: SSAValue, z_t: SSAValue, cap: float) -> None:
    """z_t = X_t·W_vᵀ (GEMM 1, float32), then Z' = c·tanh(Z/c) elementwise when capped."""
    e.fill(0.0, z_t)
    contract(e, x_t, w_packed, z_t, [lambda t, h, v: (t, h), lambda t, h, v: (h, v), lambda t, h, v: (t, v)],
             "GEMM 1: logits tile Z = X_t * W_v^T", Contraction.LOGITS, ("bt", "h", "v"))
    if cap:
        rows, cols = e.dims(z_t)
        with e.loop(rows) as i, e.loop(cols) as j:
            e.store(softcap(e, Float(e, e.load(z_t, [i, j])), cap).value, z_t, [i, j])


def column_in_tile(e: IRBuilder, column: SSAValue, valid: SSAValue, v0: SSAValue, tv: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(a row's target `column` (index, of the shard) is `valid` and lies in [v0, v0 + tv), that
    column relative to v0). A column outside [0, V) matches no tile: a bad index never addresses
    memory."""
    local = e.emit(arith.SubiOp(column, v0))
    inside = e.emit(arith.AndIOp(e.emit(arith.CmpiOp(local, e.idx(0), "sge")), e.emit(arith.CmpiOp(local, tv, "slt"))))
    return e.emit(arith.AndIOp(valid, inside)), local


def round_into(e: IRBuilder, acc: SSAValue, out: SSAValue, role: NestRole) -> None:
    """out = acc rounded once to out's element type (the accumulators are float32)."""
    with e.loop_nest(e.dims(acc)) as ivs:
        e.store_f32(e.load(acc, ivs), out, ivs)
    mark(loop_of(ivs[0]), role)


__all__ = [
    "TokenTiles",
    "balanced_starts",
    "check_options",
    "column_in_tile",
    "contract",
    "cpu_tiles",
    "logits_tile",
    "loop_of",
    "mark",
    "nest_tiles",
    "pack_transposed",
    "round_into",
    "start_accumulator",
    "tile_buffer",
    "token_balance",
    "token_step",
]
