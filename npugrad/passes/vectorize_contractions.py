"""vectorize-contractions{target=host}: every three-dimensional contraction `linalg.generic`
(float32 accumulator, float32/float16/bfloat16 operands, the innermost dimension parallel and
contiguous in the accumulator and the second operand) becomes a register-blocked micro-kernel in
the `vector` dialect: MR rows × NR vectors of the accumulator stay in registers over the whole
reduction, each step broadcasting one first-operand scalar per row into NR fused multiply-adds.

    linalg.generic {maps (i,k,j) -> A(i,k), B(k,j), C(i,j)} ins(%a, %b) outs(%c)
becomes (MR×NR = 6×4 on 32 registers of 16 float32 lanes; the reduction in chunks of KC)
    %head = the columns of C before its first 64-byte line (its address, at run time)
    scf.for %k0 = 0 to K step KC {
    scf.for %j0 = %head to %head + (N-%head) - (N-%head)%64 step 64 {
      scf.for %k = %k0 to min(%k0+KC, K) { %b_panel[%k - %k0, :] = B[%k, %j0 : %j0+64]     // packed;
        memref.prefetch %b[%k, min(%j0 + 127, N - 1)], read ... }      // the next panel's line
      scf.for %i0 = 0 to M-M%6 step 6 {
      memref.prefetch %c[%i0, %j0], read, locality<2>, data : ...       // each C line the block
      memref.prefetch %c[%i0, %j0 + 16] ... %c[%i0, %j0 + 63] ...          // touches (line_offsets),
                                                                         // into the L2 (c_prefetch)
      %sum:24 = scf.for %k = %k0 to min(%k0+KC, K) iter_args(%acc... = 0) {
        %b0 = vector.load %b_panel[%k - %k0, 0] ...                     // 4 vectors of B's row k
        %a0 = vector.broadcast (memref.load %a[%i0, %k]) ...            // one scalar per row
        %x00 = vector.fma %a0, %b0, %acc00 : vector<16xf32> ... scf.yield %x00, ... }
      %c00 = vector.load %c[%i0, %j0] ; %s00 = arith.addf %c00, %sum#0   // C += the chunk's sum:
      ... vector.store %s00, %c[%i0, %j0] ... }                          // all loads, then stores
      rows M%6: one more block of 6, its rows past M - 1 clamped to it (rows) }
    columns [0, %head) and those after the blocks: a line's worth of vectors at a time, masked
    (vector.maskedload/maskedstore) to the columns left, B read in place }

The accumulators start at zero and C is read after the reduction chunk, its lines prefetched
when the block starts: C's load then follows the previous block's stores by a whole chunk of
FMAs. Loaded before the chunk, C rows a power of two apart (H = 2048 float32 rows are 8 KiB
apart) alias the stores just made in the low 12 address bits, and the FMA chains waited on
them (measured on a 64 x 128 x 2048 GEMM: 58 GFLOP/s where a 2064-column C gave 86; 72 with
this order). The block's 24 loads of C all come before its 24 stores, for the same reason.
B's panel is always packed (as BLIS does): read in place, rows a power of two
apart fall into a few cache sets (W's packed tile, 128 float32 columns, keeps 64 of its 512
rows in the L1), and narrower types would widen once per row block instead of once per panel.

B the same in every iteration of the loop around the contraction (`invariant_loop`: W's tile in
the token loop of the linear cross-entropy nests, for GEMMs 1 and 2) has all its full panels
packed once, before that loop, into %b_panels[p, k, :] (freed after it); the micro-kernel reads
panel j0 / (NR·lanes) there and packs nothing per call. Measured on one Zen 3 core, FLCE float32
1024 x 2048 x 4096: the GEMMs' k-loops went from 79 % to 85 % of the samples (perf), the run
6 % shorter; the price is B's size in float32 per core. B a view of rows [t, t + K) of every
column of a base the loop around B's loop leaves unchanged (`invariant_rows`: GEMM 3 reading X's
token tile, in the token loop, in the vocabulary loop) has all the base's panels packed before
that outer loop and row t + k read from them, where the base's float32 size is at most the
largest local level per core (the L3, at most 8 L2s: row_pack_budget; tested at run time, the
per-call pack otherwise): X is then packed once per call, not once per vocabulary tile.

Two bfloat16 operands on a target whose vectors multiply bfloat16 pairs (`dot_bf16`: AVX512-BF16,
as the target's llvm_features say) take two reduction steps per instruction instead:

    %acc1 = x86vector.avx512.dot %acc, %a_pair, %b_pairs : vector<32xbf16> -> vector<16xf32>

B's panel holds KC/2 rows of pairs (B[k, j], B[k + 1, j]) for 16 columns a vector (pack_pairs:
rows k and k + 1 interleaved; for a B read [j, k], whose pair is one i32 of its row, 16 x 16 i32
blocks transposed in registers), and A's pairs (A[i, k], A[i, k + 1]) are broadcast as one i32:
read in place where A is read [i, k] (a pair is 4 contiguous bytes of its row), packed once per
chunk where it is read [k, i] (pack_a_pairs: two rows interleaved). The 6 x 4 block is 24
vdpbf16ps per pair of steps, from the operands as they are (nothing widened), with KC twice as
long for the same panel bytes. An odd count's last pair has a zero second half in both operands,
read in bounds (A in place: that step comes alone, after the chunk's whole pairs). Each instruction adds
the odd step's product, then the even one's, each exact and each sum rounded: the float32 FMAs'
rounding, pairwise in the other order; vdpbf16ps reads bfloat16 subnormals as zero and flushes
subnormal sums. The masked columns at the edges run on the same dots, their pairs packed a
column at a time (pack_pair_columns). Elsewhere (no AVX512-BF16, or float16) the operands widen
to float32 as above.

Where the target also has AMX (`amx_bf16`: +amx-tile and +amx-bf16), each whole 32 x 32 block of
C runs on tiles instead (amx_block), over the chunk's whole groups of 32 steps:

    %c00 = amx.tile_load %c[%i0, %j] : memref<?x?xf32, ...> into !amx.tile<16x16xf32>  // and 3 more
    %s:4 = scf.for %g = 0 to %groups iter_args(%t00 = %c00, ...) {
      %a0 = amx.tile_load %a[%i0, %k] ... into !amx.tile<16x32xbf16>        // 16 rows, 32 steps
      %b0 = amx.tile_load %b_panel[%q, 2 * (%j - %j0)] ... into !amx.tile<16x32xbf16>  // 16 pairs
      %u00 = amx.tile_mulf %a0, %b0, %t00 : ...            // tdpbf16ps: 16 x 16 x 32 products
      ... scf.yield %u00, %u01, %u10, %u11 }
    amx.tile_store %c[%i0, %j], %s#0 ...

B's panel of pairs is already the right tile's layout (row q: the pairs of 16 columns), A is read
in place where it is read [i, k], and where it is read [k, i] its pairs are transposed once per
chunk into rows (pack_a_rows). The rows below the blocks and the steps after the last group run
on vdpbf16ps as above. tdpbf16ps sums a group's 32 products into C's running value, the even
step of each pair first; results are deterministic, and differ from vdpbf16ps's in association.

Each accumulator element sums its products in reduction order, a chunk of KC at a time, each
chunk's sum then added to C: results are deterministic (they differ from the scalar loops by the
rounding FMA saves and by that association). A target without
vector registers (`vector_registers = 0`) has nothing to block for: its contractions stay loops,
as do those whose B or C may not be contiguous along the innermost dimension (dynamic strides).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    DenseArrayBase,
    IntegerAttr,
    MemRefType,
    ModuleOp,
    NameLoc,
    StridedLayoutAttr,
    VectorType,
    bf16,
    f16,
    f32,
    i1,
    i16,
    i32,
    i64,
)
from xdsl.dialects.linalg.ops import GenericOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint

from npugrad.dialect.attributes import CONTRACTION
from npugrad.dialect.upstream import (
    LOOP_ANNOTATION,
    DotBF16Op,
    LoopAnnotationAttr,
    PrefetchOp,
    TileLoadOp,
    TileMulFOp,
    TileStoreOp,
    TileType,
)
from npugrad.ir import IRBuilder, enclosing_function, integer_constant, iterator_kinds, unit_innermost_stride
from npugrad.targets import Target, get

_OPERAND_TYPES = (f32, f16, bf16)
_BODY_OPS = {"arith.extf", "arith.mulf", "arith.addf", "linalg.yield"}


def block_shape(target: Target) -> tuple[int, int]:
    """(MR, NR): MR·NR accumulators, NR vectors of B, a broadcast of A and one register to
    spare in the register file (6×4 of 32 registers, 6×2 of 16); or the target description's
    `register_block` where it gives one (a block to compare: bench/ab.py's cpu= variants)."""
    if target.register_block is not None:
        return target.register_block
    nr = 4 if target.vector_registers >= 32 else 2
    return max(1, (target.vector_registers - nr - 2) // nr), nr


def panel_width(target: Target) -> int:
    """The float32 columns of B's packed panel: NR vectors (block_shape)."""
    return block_shape(target)[1] * max(1, target.vector_bits // 32)


def reduction_chunk(target: Target, columns: int, element_bytes: int = 4) -> int:
    """KC: the reduction steps whose packed panel of B (KC rows of `element_bytes` elements,
    `columns` wide: float32, or bfloat16 pairs) fills half the smallest local memory level (the
    L1 data cache on a CPU; BLIS's rule for the B micro-panel), or a sixteenth of the level the
    target gives the vector role (the L2), whichever is more. Every row block of the chunk reads
    the panel again, NR vectors per MR x NR FMAs, which the L2 serves; and each chunk ends with
    C's MR x NR vector loads, adds and stores, so its steps amortise them. With 512-bit vectors
    the panel is 4 vectors (256 bytes) a row and half a 32 KiB L1 held 64 steps: C's epilogue
    every 64 steps was 9-11 % of the FLCE gradient's samples on a Zen 4 (1 MiB L2), and 256
    steps made it 8-10 % faster (float32 and bfloat16, 4096 x 4096 x 8192 and 2048 x 2048 x
    32000, 2 threads, fresh processes taking turns). The rest of the L2 is for A's rows of the
    chunk, C and the nest's tiles (the linear cross-entropy's logits tile takes a quarter). Even:
    pairs of steps never straddle two chunks. On a Zen 5 (48 KiB L1, 1 MiB L2), the bfloat16
    FLCE gradient at 4096 x 4096 x 8192 with KC 256 (B's 32 KiB panel in the L1) and 768 instead
    of this rule's 512: 1.003x and 0.988x as fast (10 rounds of bench/ab.py, calls taking turns)."""
    smallest = min(lv.capacity for lv in target.local_levels())
    l2 = target.role("vector").capacity or 0
    return max(16, smallest // 2 // (element_bytes * columns), l2 // 16 // (element_bytes * columns)) // 2 * 2


def dot_bf16(target: Target) -> bool:
    """Whether `target`'s vectors multiply bfloat16 pairs into float32 lanes (x86vector.avx512.dot,
    AVX512-BF16's vdpbf16ps: 512 bits, or 128/256 with AVX512-VL), as its `llvm_features` say
    (`host`: the machine's own). Contractions of two bfloat16 operands then run on it."""
    if not target.has_feature("avx512bf16"):
        return False
    return target.vector_bits == 512 or (target.vector_bits in (128, 256) and target.has_feature("avx512vl"))


# AMX's tiles: 16 rows of 64 bytes. A bfloat16 product tile is 16 rows of 32 reduction steps (the
# left operand) or of 16 pairs of steps for 16 columns (the right one); its float32 accumulator
# 16 x 16. The micro-kernel's block is 2 x 2 accumulator tiles, 32 x 32 of C: with two tiles of
# each operand, all eight tile registers.
AMX_TILE = 16
AMX_BLOCK = 2 * AMX_TILE
AMX_STEPS = 2 * AMX_TILE  # reduction steps a product tile holds
# The tiles' reduction loop, unrolled this many times (its accumulators stay in tile registers
# over the loop's back edge: lowering/to_llvm.py converts the branches with convert-to-llvm, which
# knows the tile type).
AMX_UNROLL = 2


def amx_bf16(target: Target) -> bool:
    """Whether `target` multiplies bfloat16 tiles (AMX-BF16's tdpbf16ps, as its `llvm_features`
    say: +amx-tile and +amx-bf16), alongside vdpbf16ps (dot_bf16) for the rows and reduction
    steps a whole block of tiles does not cover, and 512-bit vectors: B's packed panel (NR
    vectors of 16 columns' pairs) is then 64 columns, two blocks of 2 x 2 tiles, and A's pairs
    transpose in blocks of 16 x 16 (pack_a_rows). One tdpbf16ps is 16 x 16 x 32 products
    (16384 FLOP) where a vdpbf16ps is 16 x 2 (64): on a Sapphire-Rapids-class core 1024 FLOP a
    cycle in tiles against 64 (or 32) in vectors."""
    return (target.has_feature("amx-tile") and target.has_feature("amx-bf16") and dot_bf16(target)
            and target.vector_bits == 512 and panel_width(target) % AMX_BLOCK == 0)


def row_multiple(target: Target) -> int:
    """The row count the nests' token tiles are a multiple of on `target`: the micro-kernel's MR
    (block_shape), and where contractions run on AMX tiles (amx_bf16), also of their 32-row
    blocks, whose rows left over run on vectors."""
    mr = block_shape(target)[0]
    return math.lcm(mr, AMX_BLOCK) if amx_bf16(target) else mr


def interleaved(e: IRBuilder, lo: SSAValue, hi: SSAValue) -> SSAValue:
    """The pairs (lo[l], hi[l]) of two vectors of n lanes, as one of 2n: what a dot product of
    pairs reads for n columns of two reduction steps."""
    n = lo.type.get_shape()[0]  # type: ignore[attr-defined]
    mask = DenseArrayBase.from_list(i64, [x for lane in range(n) for x in (lane, n + lane)])
    return e.emit(vector.ShuffleOp(lo, hi, mask, result_type=VectorType(lo.type.element_type, [2 * n])))  # type: ignore[attr-defined]


def pair_bits(e: IRBuilder, lo: SSAValue, hi: SSAValue, odd: SSAValue | None = None) -> SSAValue:
    """The i32 holding bfloat16 scalars lo (bits 0-15) and hi (bits 16-31; zero where `odd`, the
    last reduction step of an odd count, is false): a pair as vdpbf16ps reads it."""
    def bits(x: SSAValue) -> SSAValue:
        return e.emit(arith.ExtUIOp(e.emit(arith.BitcastOp(x, i16)), i32))
    high = bits(hi)
    if odd is not None:
        high = e.emit(arith.SelectOp(odd, high, e.const(0, i32)))
    return e.emit(arith.OrIOp(bits(lo), e.emit(arith.ShLIOp(high, e.const(16, i32)))))


def second(e: IRBuilder, k: SSAValue, k_hi: SSAValue) -> tuple[SSAValue, SSAValue]:
    """(min(k + 1, k_hi − 1), k + 1 < k_hi): where the second step of the pair at k is read
    from, always in bounds, and whether it is one (otherwise it counts as zero)."""
    next_k = _plus(e, k, 1)
    return e.emit(arith.MinSIOp(next_k, e.emit(arith.SubiOp(k_hi, e.idx(1))))), e.emit(arith.CmpiOp(next_k, k_hi, "slt"))


def pack_pairs(e: IRBuilder, b: SSAValue, transposed_b: bool, k_lo: SSAValue, k_hi: SSAValue, j0: SSAValue,
               lanes: int, nr: int, store: Callable[[SSAValue, SSAValue, SSAValue], None], ahead: SSAValue | None = None,
               locality: int = 3) -> None:
    """store(q, at, v) for each pair q of reduction steps k = k_lo + 2q, k + 1 (k + 1 zero past
    k_hi) and the panel's nr·lanes columns j0 + c: v holds the pairs (B[k, j], B[k + 1, j]) of
    consecutive columns, what x86vector.avx512.dot reads, the first of them column j0 + at / 2
    (`at` counts bfloat16 elements along the panel's row). B read [k, j]: a vector of lanes
    columns at a time, rows k and k + 1 interleaved (a shuffle), the row after next panel's line
    prefetched at column `ahead`, over the whole pairs, then an odd count's last row alone. B
    read [j, k], where a column's pair is one i32 of B's row: lanes x lanes blocks of i32, each
    row a vector load and the block transposed in registers, the panel's nr blocks of columns
    in a loop (each is lanes loads, 4·lanes shuffles and lanes stores already: unrolled, the
    two copies of this pack, the hoisted one and the micro-kernel's own, were 1338 of the 4563
    ops vectorize-contractions emitted for the FLCE bfloat16 gradient on a host with AMX); the
    last pairs (fewer than lanes) a column at a time (lane_tail). B read [j, k] asks for no
    lines ahead: its lanes rows' lines one or two blocks of pairs on, into the L2, made the
    FLCE bfloat16 gradient 0.981x and 0.985x as fast (GEMM 1's pack of W's tile; Zen 5, 4096 x
    4096 x 8192, 10 rounds of bench/ab.py).

    What GEMM 3's pack of X's token tile costs there (the same size and machine, 10 rounds, for
    the timing only): with the pack left out (the panel stale, the sums wrong) the calls ran
    1.044x as fast; with every panel packed twice, the second time from lines just read, 0.972x.
    The pack costs about what its reads of X's lines do, not its shuffles. A column panel of
    X's rows, 8 KiB apart (H = 4096), falls into a few sets of the L1 and the L2. A
    microbenchmark on one core (gcc -O3, the tile's 228 rows, a panel of 64 columns at a time)
    took 26-37 cycles a pair of rows whichever way it interleaved them: vpermt2w from two
    halves (as here), from whole vectors, vpmovzxwd with a shift and an or, or vpunpck with
    vpermt2q. Packing the tile row by row instead (all panels at once, reading rows
    contiguously) took 0.69x the time, but it writes 1.8 MiB a tile that GEMM 3 then reads
    back: with that read, 0.93x, about 0.2 % of the call."""
    words = VectorType(i32, [lanes])
    pairs_t = VectorType(bf16, [2 * lanes])
    count = e.emit(arith.DivUIOp(e.emit(arith.AddiOp(e.emit(arith.SubiOp(k_hi, k_lo)), e.idx(1))), e.idx(2)))
    js = [] if transposed_b else [_plus(e, j0, c * lanes) for c in range(nr)]
    if transposed_b:
        blocks = e.emit(arith.DivUIOp(e.emit(arith.SubiOp(k_hi, k_lo)), e.idx(2 * lanes)))
        rest = e.emit(arith.MuliOp(blocks, e.idx(lanes)))
        with e.loop(rest, step=e.idx(lanes)) as q0:
            k0 = e.emit(arith.AddiOp(k_lo, e.emit(arith.AddiOp(q0, q0))))
            with e.loop(e.idx(nr * lanes), step=e.idx(lanes)) as c:  # the panel's column blocks, rolled
                j = e.emit(arith.AddiOp(j0, c))
                rows = [e.emit(vector.BitcastOp(e.emit(vector.LoadOp(b, [_plus(e, j, r), k0], pairs_t)), words))
                        for r in range(lanes)]
                at = e.emit(arith.AddiOp(c, c))
                for r, column in enumerate(transposed(e, rows)):
                    store(_plus(e, q0, r), at, e.emit(vector.BitcastOp(column, pairs_t)))
        pack_pair_columns(e, b, True, k_lo, k_hi, j0, nr * lanes, store, count, first=rest)
        return
    # Rows k and k + 1 interleaved: the whole pairs, then an odd count's last row alone (its
    # pair's second half zero). A select of the second row in the loop became a branch per
    # vector (GEMM 3's pack of X's token tile, the bfloat16 FLCE gradient on vdpbf16ps).
    half = VectorType(bf16, [lanes])
    whole = e.emit(arith.DivUIOp(e.emit(arith.SubiOp(k_hi, k_lo)), e.idx(2)))
    for lb, ub, last in ((None, whole, False), (whole, count, True)):
        with e.loop(ub, lb=lb) as q:
            k = e.emit(arith.AddiOp(k_lo, e.emit(arith.AddiOp(q, q))))
            k1 = None if last else _plus(e, k, 1)
            for c, j in enumerate(js):
                lo = e.emit(vector.LoadOp(b, [k, j], half))
                hi = e.const(0.0, half) if k1 is None else e.emit(vector.LoadOp(b, [k1, j], half))
                store(q, e.idx(2 * c * lanes), interleaved(e, lo, hi))
            if ahead is not None and k1 is not None:
                e.emit(PrefetchOp(b, [k, ahead], write=False, locality=locality))
                e.emit(PrefetchOp(b, [k1, ahead], write=False, locality=locality))


def panel_level(target: Target) -> str | None:
    """Where this pass's micro-kernels keep packed B panels on `target`: its smallest local level
    (the L1 on a CPU; reduction_chunk sizes the panels for it). None for a target without vector
    registers to block for (an NPU's matrix unit reads its operand tiles in place)."""
    local = [lv for lv in target.local_levels() if lv.capacity]
    return min(local, key=lambda lv: lv.capacity).name if target.vector_registers and local else None


def line_bytes(target: Target) -> int:
    """The cache line: the alignment of the level the micro-kernels keep their panels in (the
    L1 on a CPU), or a vector where the target names none."""
    level = panel_level(target)
    alignment = target.level(level).alignment if level is not None else 1
    return alignment if alignment > 1 else target.vector_bytes


def _plus(e: IRBuilder, base: SSAValue, n: int) -> SSAValue:
    """base + n (base itself for n = 0)."""
    return base if n == 0 else e.emit(arith.AddiOp(base, e.idx(n)))


def next_panel(e: IRBuilder, j0: SSAValue, wide: int, n: SSAValue) -> SSAValue:
    """The column whose line a pack of the panel at j0 prefetches in each row of an untransposed
    B: the last of the next panel, min(j0 + 2·wide − 1, N − 1). B's rows are a row stride
    apart (16 KiB for H = 4096 float32), each panel reading one new line of every row: too
    many streams for the hardware prefetchers, so the pack waited on every line (GEMM 3 of the
    linear cross-entropy gradient packing X's token tile: 6.5 % of one Zen 3 core's samples).
    Prefetched a panel ahead, the line arrives while the panel's row blocks run. The first
    column of the next panel lies in the same line as its last or in this panel's last. With
    512-bit vectors a panel's row is four lines and only the last is asked for: on a Zen 4
    (float32 FLCE 2048 x 2048 x 32000, 2 threads) asking for all four left GEMM 3's pack at 1.9 %
    of the samples (2.0-2.4 before; bench/loop_profile.py), waiting on all four of its loads
    alike (about 14 GB/s a core), and the call's time where it was (0.998x, 8 rounds of
    bench/ab.py); every line of the row 16 steps ahead in the same panel, 2.1 %. A bfloat16
    panel's row is two lines: asking for both of the next panel's read 1.002x (16 rounds), and
    both of the panel after it 1.013x (20 rounds, single rounds 0.93-1.06; GEMM 3's pack of X's
    token tile 2.8 % of the samples instead of 3.3), within the noise (Zen 5, FLCE bfloat16
    4096 x 4096 x 8192, 2 threads, bench/ab.py): not kept. Into which level: ahead_locality.
    With the bfloat16 lines in the L2 (prefetcht1), both lines of the next panel's row ran
    0.980x, and the last line two panels ahead 0.997x (10 rounds each, the same size)."""
    last = e.emit(arith.SubiOp(n, e.idx(1)))
    return e.emit(arith.MinUIOp(_plus(e, j0, 2 * wide - 1), last))


def lane_by_lane(e: IRBuilder, ref: SSAValue, at: Callable[[SSAValue], list[SSAValue]], j: SSAValue, lanes: int,
                 last: SSAValue | None = None) -> SSAValue:
    """Float32 lanes ref[at(j + l)] for l < lanes, one scalar load each (where no vector load
    reads them: a transposed B, a bfloat16 tail); with `last`, column min(j + l, last)."""
    v = e.const(0.0, VectorType(f32, [lanes]))
    for lane in range(lanes):
        column = _plus(e, j, lane)
        if lane and last is not None:
            column = e.emit(arith.MinSIOp(column, last))
        v = e.emit(vector.InsertOp(e.load_f32(ref, at(column)), v, [lane]))
    return v


def pack_pair_columns(e: IRBuilder, b: SSAValue, transposed_b: bool, k_lo: SSAValue, k_hi: SSAValue, j0: SSAValue,
                      width: int, store: Callable[[SSAValue, SSAValue, SSAValue], None], count: SSAValue,
                      first: SSAValue | None = None, last: SSAValue | None = None) -> None:
    """store(q, at, v) as pack_pairs, for pairs q in [first, count) (None: 0) of the panel's
    `width` columns, a column at a time (lane_tail: with `last`, columns past it read at it):
    each pair two scalar loads made one i32. The cold packs: a transposed B's pairs past its
    last lanes x lanes block, and an edge's panel (pack, for bfloat16 pairs at the edges)."""
    pair_t = VectorType(bf16, [2])
    with lane_tail(e, j0, width, last) as (col, column):
        at = e.emit(arith.AddiOp(col, col))
        with e.loop(count, lb=first) as q:
            k = e.emit(arith.AddiOp(k_lo, e.emit(arith.AddiOp(q, q))))
            k1, odd = second(e, k, k_hi)
            lo, hi = ([column, k], [column, k1]) if transposed_b else ([k, column], [k1, column])
            pair = pair_bits(e, e.load(b, lo), e.load(b, hi), odd)
            store(q, at, e.emit(vector.BitcastOp(e.emit(vector.BroadcastOp(pair, VectorType(i32, [1]))), pair_t)))


def edge_vectors(target: Target) -> int:
    """The vectors of a masked block at the edges (masked): a cache line's worth of float32, at
    most NR (2 of 8 lanes, 1 of 16)."""
    lanes = max(1, target.vector_bits // 32)
    return min(block_shape(target)[1], -(-(line_bytes(target) // 4) // lanes))


@contextmanager
def lane_tail(e: IRBuilder, j0: SSAValue, width: int, last: SSAValue | None = None) -> Iterator[tuple[SSAValue, SSAValue]]:
    """A loop over the columns c < width of a panel (yields c and its column of B, j0 + c, or
    with `last` min(j0 + c, last)): a transposed B's elements a column at a time, along B's
    row, in the cold packs no vector load reads (an edge's panel, the reduction steps past the
    last lanes x lanes block). Unrolled over the columns, as lane_by_lane, each step of the
    loop around had a scalar load per column, width of them (2 x 64 in the bfloat16 pairs'
    tail), each its own induction-variable use, over which LLVM's loop strength reduction,
    the code generator's dearest pass (a third of its time), searched for most of its time.
    The same elements land in the same places: the results are the same bits. The FLCE
    gradient kernel the API compiles (any shape), O3 and code generation on an Emerald Rapids:
    float32 1.72-1.95 s instead of 2.23-2.50, bfloat16 3.1-4.2 s instead of 3.5-4.9, its
    objects 9 and 17 % smaller."""
    with e.loop(e.idx(width)) as col:
        column = e.emit(arith.AddiOp(j0, col))
        if last is not None:
            column = e.emit(arith.MinSIOp(column, last))
        yield col, column


def transposed(e: IRBuilder, rows: list[SSAValue]) -> list[SSAValue]:
    """The columns of the L x L block whose rows are `rows` (L vectors of L lanes, L a power of
    two): log2 L rounds, each interleaving row i with row i + L/2 into rows 2i (their low halves)
    and 2i + 1 (their high halves), as vector.shuffle; after the last round row j is column j.
    LLVM lowers the shuffles to the target's unpack and permute instructions."""
    n = len(rows)
    half = n // 2
    low = DenseArrayBase.from_list(i64, [x for i in range(half) for x in (i, n + i)])
    high = DenseArrayBase.from_list(i64, [x for i in range(half, n) for x in (i, n + i)])
    t = rows[0].type
    for _ in range(n.bit_length() - 1):
        rows = [e.emit(vector.ShuffleOp(rows[i], rows[i + half], mask, result_type=t))
                for i in range(half) for mask in (low, high)]
    return rows


@dataclass(frozen=True)
class _Contraction:
    """C[i, j] += A[i, k]·B[k, j] (or A[k, i]): which operand index is which."""

    lhs_transposed: bool  # A is indexed [k, i]
    rhs_transposed: bool = False  # B is indexed [j, k] (only packed, a lane at a time)

    def a(self, i: SSAValue, k: SSAValue) -> list[SSAValue]:
        return [k, i] if self.lhs_transposed else [i, k]

    def b(self, k: SSAValue, j: SSAValue) -> list[SSAValue]:
        return [j, k] if self.rhs_transposed else [k, j]


def _match(gen: GenericOp) -> _Contraction | None:
    if len(gen.inputs) != 2 or len(gen.outputs) != 1:
        return None
    a, b, c = (*gen.inputs, *gen.outputs)
    types = [v.type for v in (a, b, c)]
    if not all(isinstance(t, MemRefType) and t.get_num_dims() == 2 for t in types):
        return None
    if types[2].element_type != f32 or not all(t.element_type in _OPERAND_TYPES for t in types[:2]):
        return None
    if not (unit_innermost_stride(types[1]) and unit_innermost_stride(types[2])):
        return None
    kinds = iterator_kinds(gen)
    if len(kinds) != 3 or kinds.count("reduction") != 1:
        return None
    body = [o.name for o in gen.body.block.ops]
    if set(body) - _BODY_OPS or body.count("arith.mulf") != 1 or body.count("arith.addf") != 1:
        return None
    k = kinds.index("reduction")
    dims = [[r.position if hasattr(r, "position") else None for r in m.data.results] for m in gen.indexing_maps.data]
    c_dims, b_dims, a_dims = dims[2], dims[1], dims[0]
    if len(c_dims) != 2 or None in c_dims or k in c_dims:
        return None
    i, j = c_dims
    if b_dims not in ([k, j], [j, k]) or a_dims not in ([i, k], [k, i]):
        return None
    return _Contraction(lhs_transposed=a_dims == [k, i], rhs_transposed=b_dims == [j, k])


def dots(gen: GenericOp, shape: _Contraction, target: Target) -> bool:
    """Whether the contraction runs on bfloat16 pairs (x86vector.avx512.dot): the target has the dot
    product (dot_bf16) and A and B are both bfloat16, contiguous along their rows."""
    a, b = (v.type for v in gen.inputs)
    return (dot_bf16(target) and a.element_type == bf16 == b.element_type  # type: ignore[attr-defined]
            and unit_innermost_stride(a) and unit_innermost_stride(b))  # type: ignore[arg-type]


def kernel_chunk(target: Target, dot: bool) -> int:
    """KC of the micro-kernel on `target`: the reduction steps whose panel of B (float32, or
    with `dot` bfloat16 pairs: twice the steps) it packs and sums in registers before adding
    them into C."""
    return reduction_chunk(target, panel_width(target), 2 if dot else 4)


def half_panel_level(target: Target) -> int:
    """Half the bytes of the level the panels live in (panel_level): what lines a block asks
    for ahead may take there without taking the panel's room (c_prefetch, ahead_locality)."""
    return target.level(panel_level(target)).capacity // 2


def ahead_locality(target: Target, dot: bool) -> int:
    """The locality hint (memref.prefetch) of the lines B's pack asks for a panel ahead
    (next_panel): one line for each of the chunk's rows of B, KC of them (kernel_chunk:
    bfloat16 pairs take twice float32's rows). Into the smallest level (3) where they take at
    most half of it, else into the next (2: prefetcht1), where they wait out the row blocks'
    stream of the current panel without taking its room. Measured on a Zen 5 (48 KiB L1; FLCE
    gradient, 2 threads, bench/ab.py, calls taking turns):
    - bfloat16 pairs' 512 lines (32 KiB) into the L2: 1.024x as fast at 4096 x 4096 x 8192 (16
      rounds, 1.00-1.06; prefetcht2 there 1.027x and 1.029x), 1.028x at 2048 x 2048 x 32000
      (10 rounds), 1.000x at 4096 x 4000 x 8192 (6 rounds). At 4096 x 4096 x 8192 the
      k-loops went from 84.7 % of the kernel's samples to 88.7 %, and the packs of W's tile
      and X's token tile from 6.5 % to 5.1 % (bench/loop_profile.py). The bfloat16 forward
      statistics (fuse-linear-online-max-sum, 4096 x 4096 x 32000): 1.007x (10 rounds, 0.98-1.02).
    - float32's 256 lines (16 KiB) into the L2, against this rule: 0.982x, 0.996x and 0.990x at
      4096 x 4096 x 8192 (10-12 rounds), 1.013x at 2048 x 2048 x 32000 (8 rounds).
    - An AVX2 CPU's float32 panels (zen3.toml: KC 512, 32 KiB of lines on a 32 KiB L1) take the
      L2 by this rule: compiled for that description and run on the Zen 5, 1.007x and 1.005x
      (2048 x 2048 x 32000 and 4096 x 4096 x 8192, 6 rounds each)."""
    return 3 if kernel_chunk(target, dot) * line_bytes(target) <= half_panel_level(target) else 2


def c_prefetch(target: Target, dot: bool) -> tuple[bool, int]:
    """How a block prefetches C's lines when it starts (block): (write, locality hint). Into
    the smallest level, for writing (the stores to come: prefetchw on an x86 with PRFCHW, else
    prefetcht0), where B's panel, which the block's reduction loop streams before C is read,
    takes at most half of it; else for reading into the next level (locality 2: prefetcht1),
    where the lines outlive the panel's stream. In the L1 they were evicted by it before the
    epilogue read them, and took the panel's room there while they lasted. Measured on a Zen 4
    (a 64 KiB panel, a 32 KiB L1; bench/ab.py, calls taking turns, 10-12 rounds), the FLCE
    gradient against prefetchw into the L1: bfloat16 1.039x as fast at 4096 x 4096 x 8192 and
    1.021x and 1.030x at 2048 x 2048 x 32000, float32 1.011x and 1.012x (2048 x 2048 x 32000,
    4096 x 4096 x 8192); a read prefetch into the L1 (prefetcht0) 1.002x (bfloat16 2048 x 2048
    x 32000). On a Zen 5 (a 64 KiB panel, a 48 KiB L1; 10 and 16 rounds): bfloat16 0.98x and
    1.00x at 4096 x 4096 x 8192, float32 1.02x at 2048 x 2048 x 32000."""
    panel = kernel_chunk(target, dot) * panel_width(target) * (2 if dot else 4)
    return (True, 3) if panel <= half_panel_level(target) else (False, 2)


def late_c_prefetch(target: Target, dot: bool) -> int:
    """Where c_prefetch asks for a block's C lines into the next level (the L2), the reduction
    steps (bfloat16 pairs: pairs of steps) before the end of the block's reduction loop at which
    it asks for them again, into the smallest level (prefetcht0), so that the epilogue's loads of
    C find them there; 0 where c_prefetch takes them into the smallest level itself, or the
    target gives no copy path or matrix rate to size it by. The steps are those whose products,
    at the target's matrix rate, take the cycles its copy path from that level to the smallest
    one needs for the block's lines (the path's latency, then MR x the lines of a row of NR
    vectors at its bandwidth): 6 pairs (bfloat16) and 11 steps (float32) on the host's defaults
    with 512-bit vectors. The loop runs in two parts with the prefetches between them: the same
    steps in the same order, the same bits. Measured on a Zen 5 (family 26, 48 KiB L1, 1 MiB L2,
    where B's 64 KiB panel sends C's first prefetches to the L2; FLCE gradient, 2 threads,
    bench/ab.py, calls taking turns, 10-14 rounds) against no late prefetch: float32 1.066x at
    2048 x 2048 x 32000 (every round faster: 1.03-1.11) and 1.039x at 4096 x 4096 x 8192;
    bfloat16 1.023x at 4096 x 4096 x 8192 (0.99-1.08) and 1.020x at 2048 x 2048 x 32000
    (1.00-1.07). Before the rule, fixed distances for bfloat16 at 4096 x 4096 x 8192: 12 pairs
    1.042x, 24 pairs 1.008-1.073x over five runs, 48 pairs 0.995x. In bench/loop_profile.py's
    shares (24 pairs) the input_grad epilogue, C's loads of the float32 dX accumulator, went from
    4.1 to 2.4 % of the bfloat16 gradient's samples."""
    level = panel_level(target)
    if level is None or c_prefetch(target, dot)[1] == 3:
        return 0
    parent = target.level(level).parent
    path = target.path(parent, level) if parent is not None else None
    unit = target.unit_for("matrix")
    rate = unit.rate("matrix", "bf16" if dot else "f32") if unit is not None else None
    if path is None or not path.bandwidth or not rate:
        return 0
    mr, width = block_shape(target)[0], panel_width(target)
    line = line_bytes(target)
    lines = mr * -(-width * 4 // line)
    cycles = path.latency + lines * line / path.bandwidth
    step = mr * width * 2 * (2 if dot else 1) / rate  # cycles of one (pair) step's products
    return max(1, math.ceil(cycles / step))


def summing_chunk(gen: GenericOp, target: Target) -> int | None:
    """KC for `gen` on `target` (kernel_chunk), or None where the contraction is not vectorized
    here. A pass that splits the reduction itself (flce_groups) splits it on multiples of this,
    so that every sum keeps its association."""
    shape = _match(gen)
    if shape is None or target.vector_registers == 0:
        return None
    return kernel_chunk(target, dots(gen, shape, target))


def kernel_label(gen: GenericOp) -> str:
    """What the code of `gen` is labelled (IRBuilder.labelled): the linear cross-entropy nests'
    contraction it is (`logits`, `input_grad`, `weight_grad`), or `contraction`. Its parts add a
    suffix: `.pack_b` (B's panels), `.pack_a` (A's pairs), `.widen_a`, the reduction loops `.k`
    (whole blocks), `.k_tail` (the rows below them) and `.k_edge` (the masked columns); the
    rest (C's prefetches, loads, adds and stores, the loops over blocks) is the label alone."""
    attr = CONTRACTION.get(gen)
    if attr is not None:
        return attr.contraction.value
    # After convert-train-to-loops the kind is its location's label (a NameLoc).
    return gen.location.desc.data if isinstance(gen.location, NameLoc) else "contraction"


class _Kernels:
    def __init__(self, gen: GenericOp, shape: _Contraction, target: Target, e: IRBuilder, panel: SSAValue,
                 hoisted: _Hoisted | None = None):
        self.e = e
        self.shape = shape
        self.a, self.b = gen.inputs
        (self.c,) = gen.outputs
        self.mr, self.nr = block_shape(target)
        self.edge_nr = edge_vectors(target)
        self.lanes = target.vector_bits // 32
        self.line_bytes = line_bytes(target)
        self.f32x = VectorType(f32, [self.lanes])
        e = self.e
        self.m, self.n = e.dim(self.c, 0), e.dim(self.c, 1)
        self.k = e.dim(self.b, 1 if shape.rhs_transposed else 0)
        self.dot = dots(gen, shape, target)  # bfloat16 pairs into x86vector.avx512.dot (dots)
        self.amx = self.dot and amx_bf16(target)  # and whole 32 x 32 blocks on AMX tiles (amx_block)
        self.rows_full = self._floor(self.m, self.mr)  # rows that fill whole MR-row blocks
        self.amx_rows = self._floor(self.m, AMX_BLOCK) if self.amx else None  # rows in whole AMX blocks
        self.q0: SSAValue | None = None  # pairs of the chunk already summed on tiles (amx_block)
        self.pairs = VectorType(bf16, [2 * self.lanes])
        self.kc = kernel_chunk(target, self.dot)
        self.c_prefetch = c_prefetch(target, self.dot)
        self.late = late_c_prefetch(target, self.dot)
        self.ahead_locality = ahead_locality(target, self.dot)
        self.k_lo = self.k_hi = self.k  # the current reduction chunk, set by emit()
        self.panel = panel  # KC x NR vectors of float32 (dot: KC/2 x NR vectors of pairs): B's panel, packed (emit)
        self.a_wide: SSAValue | None = None  # A's rows over the chunk, widened to float32 (widen_a)
        self.a_pairs: SSAValue | None = None  # dot: A's pairs over the chunk, as i32 (pack_a_pairs)
        self.a_rows: SSAValue | None = None  # amx: A's rows over the chunk, for tiles (pack_a_rows)
        self.hoisted = hoisted  # or all of B's panels, packed before an enclosing loop (hoisted_panels)
        self.label = kernel_label(gen)
        self.packed = None if hoisted is None else hoisted.packed
        # (panel, delta, k_first): B's row k at row k + delta of `panel` (pairs: pair q of the
        # chunk at row q + delta), a 2-D view the whole blocks read (columns_either: a hoisted
        # panel or the chunk's own, chosen at run time), and the step its row 0 holds (AMX
        # tiles, tile_panel; else None), or None.
        self.view: tuple[SSAValue, SSAValue, SSAValue | None] | None = None

    # -- one block --------------------------------------------------------------------------
    def _load(self, ref: SSAValue, indices: list[SSAValue], mask: SSAValue | None) -> SSAValue:
        """A vector of `ref` widened to float32; masked-off lanes read as zero, touch nothing."""
        e = self.e
        vt = VectorType(ref.type.element_type, [self.lanes])  # type: ignore[attr-defined]
        if mask is None:
            v = e.emit(vector.LoadOp(ref, indices, vt))
        elif vt.element_type == bf16:
            return self._clamped_lanes(ref, indices)
        else:
            v = e.emit(vector.MaskedLoadOp(ref, indices, mask, e.const(0.0, vt)))
        return v if vt == self.f32x else e.emit(arith.ExtFOp(v, self.f32x))

    def _b_lanes(self, k: SSAValue, j: SSAValue, mask: SSAValue | None) -> SSAValue:
        """B[k, j : j + lanes] as float32: a (masked) vector load, or for a transposed B (read
        [j, k]) one scalar load per lane, at column min(j + lane, N − 1) where masked."""
        if not self.shape.rhs_transposed:
            return self._load(self.b, [k, j], mask)
        last = None if mask is None else self.e.emit(arith.SubiOp(self.n, self.e.idx(1)))
        return lane_by_lane(self.e, self.b, lambda column: [column, k], j, self.lanes, last)

    def _clamped_lanes(self, ref: SSAValue, indices: list[SSAValue]) -> SSAValue:
        """A row tail of B (bfloat16) as float32 lanes, one scalar load each at column
        min(j + lane, N − 1): always in bounds, and the lanes past N feed only accumulator lanes
        that the masked store drops. (A bfloat16 masked load would do, but LLVM legalises it
        through float on CPUs without AVX512-BF16, calling a rounding routine for every lane.)"""
        *outer, j = indices
        last = self.e.emit(arith.SubiOp(self.n, self.e.idx(1)))
        return lane_by_lane(self.e, ref, lambda column: [*outer, column], j, self.lanes, last)

    def _broadcast(self, scalar: SSAValue) -> SSAValue:
        """A scalar of A in every float32 lane. bfloat16 widens as a scalar (an integer shift);
        float16 is broadcast first and widened as a vector (one vcvtph2ps, where a scalar
        conversion costs three shuffle-port instructions per row: measured 120 -> 195 GFLOP/s)."""
        e = self.e
        if scalar.type != f16:
            return e.emit(vector.BroadcastOp(e.to_f32(scalar), self.f32x))
        halves = e.emit(vector.BroadcastOp(scalar, VectorType(f16, [self.lanes])))
        return e.emit(arith.ExtFOp(halves, self.f32x))

    def block(self, i0: SSAValue, j0: SSAValue, nr: int, masks: list[SSAValue] | None = None,
              last: SSAValue | None = None, every_row: bool = False) -> None:
        """C[i0:i0+MR, j0:j0+nr·lanes] += A·B over the chunk, the MR×nr accumulators in registers
        from zero, C's lines prefetched first (c_prefetch), where they went to the L2 into the
        L1 again late_c_prefetch's steps before the reduction loop ends (not at the edges), and
        read last; B's rows read from the packed panel (the block's view, if any:
        columns_either), or, with `masks` (one per vector, for the columns at the edges), from
        the edge's own, C read and written masked.
        With `last` (≥ i0), row i0 + r is row min(i0 + r, last). Its reduction loop is labelled
        `.k_edge` with `masks`, `.k_tail` with `last`, unless the block is one of a loop over
        `every_row` (rows), and `.k` otherwise.
        Measured and not kept: the next row block's lines of an A read in place (GEMM 1's rows
        of X, over the chunk) prefetched into the L2 when a block starts: logits.k held 2255
        samples against 2233 (FLCE float32 4096 x 4096 x 8192, Zen 5, 2 threads). Also not
        kept: GEMM 2's C stored past the caches (non-temporal stores, the float32 dX
        accumulator of a bfloat16 gradient, whose lines come back a whole step later), so that
        they would not push X and W out of the L3. The k-loops went from 84.7 to 86.9 % of the
        samples and GEMM 3's pack of X from 3.8 to 3.3 %, but the calls ran 1.013x, 0.997x
        (4096 x 4096 x 8192; 10 and 16 rounds) and 0.994x (2048 x 2048 x 32000) as fast."""
        e = self.e
        rows = [_plus(e, i0, r) for r in range(self.mr)]
        if last is not None:
            rows = rows[:1] + [e.emit(arith.MinUIOp(i, last)) for i in rows[1:]]
        cols = [self._column(j0, c, masks is not None) for c in range(nr)]
        starts = {c * self.lanes: j for c, j in enumerate(cols)}
        lines = [j0] if masks is not None else [
            starts[c] if c in starts else e.emit(arith.AddiOp(j0, e.idx(c))) for c in self.line_offsets(nr)]
        def prefetch_c(write: bool, locality: int) -> None:
            for i in rows:
                for j in lines:
                    e.emit(PrefetchOp(self.c, [i, j], write=write, locality=locality))

        prefetch_c(*self.c_prefetch)
        zero = e.const(0.0, self.f32x)
        accs = [zero] * (self.mr * nr)
        part = ".k_edge" if masks is not None else ".k_tail" if last is not None and not every_row else ".k"
        late = functools.partial(prefetch_c, False, 3) if masks is None and self.late else None
        with e.labelled(self.label + part):
            if self.dot:
                self.pair_steps(rows, nr, accs, late)
            else:
                for loop in self.steps(rows, nr, accs, masks, late):
                    _unrolled(loop.results[0], 2 if masks is None and last is None else 1)
        for result in accs:
            result.name_hint = "sum"
        # Every load of C before any store: C's rows a power of two apart share their low 12
        # address bits, and a load behind a store that may alias them waits for it.
        at = [(i, c) for i in rows for c in range(nr)]
        sums = [e.emit(arith.AddfOp(self._load(self.c, [i, cols[c]], masks and masks[c]), acc)) for (i, c), acc in zip(at, accs)]
        for (i, c), total in zip(at, sums):
            if masks is None:
                e.emit(vector.StoreOp(total, self.c, [i, cols[c]]))
            else:
                e.emit(vector.MaskedStoreOp(self.c, [i, cols[c]], masks[c], total))

    def reduction_loops(self, ub: SSAValue, accs: list[SSAValue], lb: SSAValue | None, late: Callable[[], None] | None,
                        body: Callable[[SSAValue, list[SSAValue], list[SSAValue]], None]) -> list[scf.ForOp]:
        """The reduction loop over [lb, ub) carrying `accs` (e.carried_loop), `body(iv, carried,
        updated)` emitting its steps; with `late`, two such loops, the second over the last
        self.late iterations (late_c_prefetch), late() emitting the prefetches between them.
        The loops, in order."""
        e = self.e
        spans = [(lb, ub)]
        if late is not None:
            split = e.emit(arith.MaxSIOp(e.emit(arith.SubiOp(ub, e.idx(self.late))), lb or e.idx(0)))
            spans = [(lb, split), (split, ub)]
        loops = []
        for lo, hi in spans:
            if loops and late is not None:
                late()
            with e.carried_loop(hi, accs, lb=lo) as (iv, carried, updated):
                body(iv, carried, updated)
            loop = accs[0].owner
            assert isinstance(loop, scf.ForOp), loop
            loops.append(loop)
        return loops

    def steps(self, rows: list[SSAValue], nr: int, accs: list[SSAValue], masks: list[SSAValue] | None,
              late: Callable[[], None] | None = None) -> list[scf.ForOp]:
        """The chunk's reduction steps into `accs`, one FMA per accumulator per step (with
        `late`, in two loops: reduction_loops); the loops."""
        e = self.e

        def step(k: SSAValue, carried: list[SSAValue], updated: list[SSAValue]) -> None:
            k.name_hint = "k"
            for arg in carried:
                arg.name_hint = "acc"
            if masks is None and self.view is not None:
                panel, delta, _ = self.view
                at = e.emit(arith.AddiOp(k, delta))
                bs = [e.emit(vector.LoadOp(panel, [at, e.idx(c * self.lanes)], self.f32x)) for c in range(nr)]
            else:  # the chunk's own panel (at the edges, packed masked: masked)
                row = e.emit(arith.SubiOp(k, self.k_lo))
                bs = [e.emit(vector.LoadOp(self.panel, [row, e.idx(c * self.lanes)], self.f32x)) for c in range(nr)]
            for r, i in enumerate(rows):
                if self.a_wide is None:
                    a = self._broadcast(e.load(self.a, self.shape.a(i, k)))
                else:
                    a = e.emit(vector.BroadcastOp(e.load(self.a_wide, [i, e.emit(arith.SubiOp(k, self.k_lo))]), self.f32x))
                a.name_hint = "a"
                updated += [e.emit(vector.FMAOp(a, b, carried[r * nr + c])) for c, b in enumerate(bs)]

        return self.reduction_loops(self.k_hi, accs, self.k_lo, late, step)

    def pair_steps(self, rows: list[SSAValue], nr: int, accs: list[SSAValue],
                   late: Callable[[], None] | None = None) -> None:
        """The chunk's reduction steps into `accs` two at a time, one x86vector.avx512.dot per
        accumulator per pair: B's pairs from the packed panel (pair q0 + q of the chunk at row
        q0 + q of its own, q0 + q + delta of the block's view: columns_either), A's pair for
        each row broadcast as one i32. A read [i, k] holds
        its pairs as they are, contiguous along its rows: they are read in place, and where the
        chunk's count is odd its last step comes alone, after the whole pairs, its second half
        zero (no read past the row). A read [k, i] interleaves two rows: its pairs come from a pack (pack_a_pairs).
        (The pack was a copy of X's token tile per chunk for GEMM 1 of the linear cross-entropy
        nests: a 19-instruction loop with 3 % of the bfloat16 gradient's samples, Zen 4.) B's
        panel is left to the hardware's prefetchers: a prefetcht0 of each of its row's lines 4 or
        12 pairs ahead made the bfloat16 FLCE gradient 0.973x and 0.977x as fast on a Zen 5
        (4096 x 4096 x 8192, 10 rounds of bench/ab.py)."""
        e = self.e
        words = VectorType(i32, [self.lanes])
        in_place = not self.shape.lhs_transposed
        whole = (e.emit(arith.DivUIOp(e.emit(arith.SubiOp(self.k_hi, self.k_lo)), e.idx(2))) if in_place
                 else self.chunk_pairs())

        def pair(q: SSAValue, carried: list[SSAValue], updated: list[SSAValue],
                 a_bits: Callable[[SSAValue], SSAValue]) -> None:
            q.name_hint = "q"
            for arg in carried:
                arg.name_hint = "acc"
            if self.view is not None:  # pair q0 + q of the chunk (amx_rows_block's steps left)
                panel, delta, _ = self.view
                at = e.emit(arith.AddiOp(q if self.q0 is None else e.emit(arith.AddiOp(q, self.q0)), delta))
                bs = [e.emit(vector.LoadOp(panel, [at, e.idx(2 * c * self.lanes)], self.pairs)) for c in range(nr)]
            else:
                row = q if self.q0 is None else e.emit(arith.AddiOp(q, self.q0))
                bs = [e.emit(vector.LoadOp(self.panel, [row, e.idx(2 * c * self.lanes)], self.pairs)) for c in range(nr)]
            for r, i in enumerate(rows):
                a = e.emit(vector.BitcastOp(e.emit(vector.BroadcastOp(a_bits(i), words)), self.pairs))
                a.name_hint = "a"
                updated += [e.emit(DotBF16Op(carried[r * nr + c], a, b)) for c, b in enumerate(bs)]

        def a_step(q: SSAValue) -> SSAValue:
            return e.emit(arith.AddiOp(self.k_lo, e.emit(arith.AddiOp(q, q))))

        def pairs(q: SSAValue, carried: list[SSAValue], updated: list[SSAValue]) -> None:
            if in_place:
                k = a_step(q)
                pair(q, carried, updated, lambda i: e.emit(vector.ExtractOp(e.emit(vector.BitcastOp(
                    e.emit(vector.LoadOp(self.a, [i, k], VectorType(bf16, [2]))), VectorType(i32, [1]))), [0], i32)))
            else:
                a_pairs = self.a_pairs
                assert a_pairs is not None
                row = q if self.q0 is None else e.emit(arith.AddiOp(q, self.q0))
                pair(q, carried, updated, lambda i: e.load(a_pairs, [row, i]))

        self.reduction_loops(whole, accs, None, late, pairs)
        if in_place:  # the odd count's last step: 0 or 1 iterations
            with e.carried_loop(self.chunk_pairs(), accs, lb=whole) as (q, carried, updated):
                k = a_step(q)
                pair(q, carried, updated,
                     lambda i: e.emit(arith.ExtUIOp(e.emit(arith.BitcastOp(e.load(self.a, [i, k]), i16)), i32)))

    def chunk_pairs(self) -> SSAValue:
        """The chunk's pairs of reduction steps, the last one alone where the count is odd."""
        e = self.e
        return e.emit(arith.DivUIOp(e.emit(arith.AddiOp(e.emit(arith.SubiOp(self.k_hi, self.k_lo)), e.idx(1))), e.idx(2)))

    def pack_a_pairs(self, buffer: SSAValue) -> None:
        """buffer[q, i] = the pair (A[k, i], A[k + 1, i]) of A read [k, i] as i32, for k = k_lo + 2q,
        its second half zero past the chunk: rows k and k + 1 interleaved a vector at a time, the
        columns left a pair at a time."""
        e = self.e
        lanes = self.lanes
        words = VectorType(i32, [lanes])
        half = VectorType(bf16, [lanes])
        full = self._floor(self.m, lanes)
        with e.loop(self.chunk_pairs()) as q:
            k = e.emit(arith.AddiOp(self.k_lo, e.emit(arith.AddiOp(q, q))))
            k1, odd = second(e, k, self.k_hi)
            with e.loop(full, step=e.idx(lanes)) as i:
                lo = e.emit(vector.LoadOp(self.a, [k, i], half))
                hi = e.emit(arith.SelectOp(odd, e.emit(vector.LoadOp(self.a, [k1, i], half)), e.const(0.0, half)))
                e.emit(vector.StoreOp(e.emit(vector.BitcastOp(interleaved(e, lo, hi), words)), buffer, [q, i]))
            with e.loop(self.m, lb=full) as i:
                e.store(pair_bits(e, e.load(self.a, [k, i]), e.load(self.a, [k1, i]), odd), buffer, [q, i])

    def line_offsets(self, nr: int) -> list[int]:
        """Column offsets, within a row of a block nr vectors wide, of one float32 in each cache
        line the row may touch: every line's worth from the first, and the last column. A C
        whose rows are not line-aligned (NumPy's large arrays start 16 bytes past a 64-byte
        line) has a row straddle one more line than its width; unprefetched, that line's miss
        fell on the block's epilogue (GEMMs 2 and 3 of the linear cross-entropy gradient, C in
        L3 or DRAM: their epilogues took 10.5 % of one Zen 3 core's samples, 6.7 % with every
        line prefetched and C's loads before its stores). Prefetching the next row block's lines
        as well, a block earlier, measured 1.000x and 1.006x on a Zen 4 (FLCE float32 2048 x
        2048 x 32000, bfloat16 4096 x 4096 x 8192; 8 and 10 rounds of bench/ab.py)."""
        wide = nr * self.lanes
        line = max(1, self.line_bytes // 4)
        return sorted({*range(0, wide, line), wide - 1})

    # -- tiling M×N into blocks ------------------------------------------------------------
    def _floor(self, n: SSAValue, step: int) -> SSAValue:
        """n rounded down to a multiple of step."""
        e = self.e
        return e.emit(arith.SubiOp(n, e.emit(arith.RemUIOp(n, e.idx(step)))))

    def _column(self, j0: SSAValue, c: int, edge: bool) -> SSAValue:
        """The first column of vector c from j0. At an edge (masked), a vector wholly past the
        columns reads and writes nothing, from column N − 1 (always in bounds)."""
        e = self.e
        j = _plus(e, j0, c * self.lanes)
        return e.emit(arith.MinUIOp(j, e.emit(arith.SubiOp(self.n, e.idx(1))))) if edge and c else j

    def pack(self, j0: SSAValue, masks: list[SSAValue] | None = None) -> None:
        """panel[k − k_lo, :] = B[k, j0 : j0 + NR·lanes] as float32, for the chunk's k: the row
        blocks then read B from KC contiguous lines that stay in the innermost cache, whatever
        B's row stride (a power-of-two stride maps every row of B to one cache set) and element
        type (bfloat16/float16 widened once per panel, not once per row block). With `masks`
        (the columns at the edges), len(masks) vectors, each read masked (bfloat16 pairs: their
        columns past N − 1 read at N − 1)."""
        with self.e.labelled(self.label + ".pack_b"):
            self._pack(j0, masks)

    def _pack(self, j0: SSAValue, masks: list[SSAValue] | None) -> None:
        e = self.e
        ahead = None if self.shape.rhs_transposed or masks is not None else next_panel(e, j0, self.nr * self.lanes, self.n)
        if self.dot:
            def store(q: SSAValue, at: SSAValue, v: SSAValue) -> None:
                e.emit(vector.StoreOp(v, self.panel, [q, at]))

            if masks is None:
                pack_pairs(e, self.b, self.shape.rhs_transposed, self.k_lo, self.k_hi, j0, self.lanes, self.nr, store, ahead,
                           self.ahead_locality)
            else:  # an edge: a column at a time, columns past N − 1 read at N − 1, for lanes the masked stores drop
                last = e.emit(arith.SubiOp(self.n, e.idx(1)))
                pack_pair_columns(e, self.b, self.shape.rhs_transposed, self.k_lo, self.k_hi, j0, len(masks) * self.lanes,
                                  store, self.chunk_pairs(), last=last)
            return
        nr = self.nr if masks is None else len(masks)
        if self.shape.rhs_transposed and masks is not None:
            # B read [j, k] at an edge: a column at a time (at most column N − 1). The whole
            # blocks' pack stays a lane at a time (_b_lanes): a column at a time, a scalar store
            # per element, it was 1.1-1.2x slower (FLCE float32 256 x 2048 x 32000, one token
            # tile: GEMM 1 packs W's panels per call).
            last = e.emit(arith.SubiOp(self.n, e.idx(1)))
            with lane_tail(e, j0, nr * self.lanes, last) as (col, column), e.loop(self.k_hi, lb=self.k_lo) as k:
                e.store(e.load_f32(self.b, [column, k]), self.panel, [e.emit(arith.SubiOp(k, self.k_lo)), col])
            return
        with e.loop(self.k_hi, lb=self.k_lo) as k:
            row = e.emit(arith.SubiOp(k, self.k_lo))
            for c in range(nr):
                j = self._column(j0, c, masks is not None)
                e.emit(vector.StoreOp(self._b_lanes(k, j, masks and masks[c]), self.panel, [row, e.idx(c * self.lanes)]))
            if ahead is not None:
                e.emit(PrefetchOp(self.b, [k, ahead], write=False, locality=self.ahead_locality))

    def widens_a(self) -> bool:
        """Whether A (bfloat16 or float16, read [i, k], contiguous along k) is widened once per
        reduction chunk (widen_a) rather than once per use: each of A's elements is broadcast
        once per column block, and a bfloat16 scalar costs a load, a shift and a broadcast
        where a float32 one is a single broadcast from memory (GEMM 1 of the linear
        cross-entropy nests reads X this way: its k-loop issued 32 micro-ops per 12 FMAs
        instead of 20)."""
        t = self.a.type
        return (not self.dot and t.element_type != f32 and not self.shape.lhs_transposed  # type: ignore[attr-defined]
                and unit_innermost_stride(t))  # type: ignore[arg-type]

    def widen_a(self, buffer: SSAValue) -> None:
        """buffer[i, k − k_lo] = A[i, k] as float32 for the chunk's k, a vector at a time (the
        chunk's last k % lanes one by one)."""
        e = self.e
        width = e.emit(arith.SubiOp(self.k_hi, self.k_lo))
        full = e.emit(arith.AddiOp(self.k_lo, self._floor(width, self.lanes)))
        narrow = VectorType(self.a.type.element_type, [self.lanes])  # type: ignore[attr-defined]
        with e.loop(self.m) as i:
            with e.loop(full, lb=self.k_lo, step=e.idx(self.lanes)) as k:
                wide = e.emit(arith.ExtFOp(e.emit(vector.LoadOp(self.a, [i, k], narrow)), self.f32x))
                e.emit(vector.StoreOp(wide, buffer, [i, e.emit(arith.SubiOp(k, self.k_lo))]))
            with e.loop(self.k_hi, lb=full) as k:
                e.store(e.load_f32(self.a, [i, k]), buffer, [i, e.emit(arith.SubiOp(k, self.k_lo))])

    def rows(self, j0: SSAValue, nr: int, masks: list[SSAValue] | None = None, tiles_done: bool = False) -> None:
        """Blocks of MR rows, and the rows left (fewer than MR) in one more block of MR rows
        whose rows past the last are the last row again (block's `last`): they compute its
        values and store them where it does, after every load of C, so C is what it would be.
        One row block to compile per column block instead of one per binary digit of MR - 1
        (4, 2 and 1 rows for MR = 6): the FLCE float32 kernel has 484 FMAs instead of 689 and
        compiles in 1.3-1.8 s instead of 1.9-2.6 (Zen 3, fresh processes taking turns), for at
        most MR - 1 rows' FMAs per row tail. The tail block comes first: its row indices are
        dead before the whole blocks start. Emitted after them, they kept registers busy
        through the whole blocks' reduction loops, and GEMM 2's compared its bound with a stack
        slot on every step (10 % more samples, FLCE 5-10 % slower; tests/test_microkernel_registers.py).

        Where the reduction loop is not unrolled, a whole block differs from the tail block in
        nothing but the MR - 1 row indices the tail clamps (computed once per block, before the
        loop), and one loop of blocks as the tail block takes all the rows: one block to compile,
        not two. So for the masked columns at the edges (a few columns: none of C's lines are
        whole there), for bfloat16 pairs (their loop of vdpbf16ps is not unrolled), and with AMX
        tiles for the rows below the whole 32-row blocks on tiles (amx_rows_block; fewer than 32,
        none where the rows are a multiple of 32, as the linear cross-entropy nests' token tiles
        are). The second blocks were 1078 of the 5230 ops this pass emitted for the FLCE
        bfloat16 gradient on a host with AMX, and 655 of 2799 for an AVX512-BF16 CPU without
        (avx512bf16.toml: its cold compile 2.2-2.4 s instead of 3.5-4.1 on an Emerald Rapids;
        the same bits, and the same time, both kernels in one process taking turns: 0.996x over
        8 rounds of FLCE 2048 x 2048 x 32000)."""
        e = self.e
        tiles = self.amx_rows is not None and masks is None
        if tiles and not tiles_done:  # (columns_either runs them itself)
            with e.loop(self.amx_rows, step=e.idx(AMX_BLOCK)) as i0:
                self.amx_rows_block(i0, j0, nr)
        if tiles or masks is not None or self.dot:
            last = e.emit(arith.SubiOp(self.m, e.idx(1)))
            with e.loop(self.m, lb=self.amx_rows if tiles else None, step=e.idx(self.mr)) as i0:
                self.block(i0, j0, nr, masks, last=last, every_row=not tiles)
            return
        full = self.rows_full
        with e.if_(e.emit(arith.CmpiOp(full, self.m, "ult"))):
            self.block(full, j0, nr, masks, last=e.emit(arith.SubiOp(self.m, e.idx(1))))
        with e.loop(full, step=e.idx(self.mr)) as i0:
            self.block(i0, j0, nr, masks)

    # -- AMX tiles ------------------------------------------------------------------------------
    def amx_rows_block(self, i0: SSAValue, j0: SSAValue, nr: int) -> None:
        """Rows i0 .. i0 + 32 of the panel's columns j0 .. j0 + nr·lanes: the chunk's whole
        32-step groups on tiles, a 32 x 32 block at a time (amx_block), then the steps left (the
        chunk's last, fewer than 32: where the reduction is not a multiple of 32) on vectors,
        MR rows at a time in one rolled loop (one block to compile), rows past the block's last
        repeating its last as `rows` does."""
        e = self.e
        groups = e.emit(arith.DivUIOp(e.emit(arith.SubiOp(self.k_hi, self.k_lo)), e.idx(AMX_STEPS)))
        groups.name_hint = "tile_steps"
        b, k_first = self.tile_panel()
        for h in range(nr * self.lanes // AMX_BLOCK):
            self.amx_block(i0, j0, h * AMX_BLOCK, groups, b, k_first)
        k_lo = self.k_lo
        tiled = e.emit(arith.AddiOp(k_lo, e.emit(arith.MuliOp(groups, e.idx(AMX_STEPS)))))
        with e.if_(e.emit(arith.CmpiOp(tiled, self.k_hi, "ult"))):
            self.k_lo, self.q0 = tiled, e.emit(arith.MuliOp(groups, e.idx(AMX_STEPS // 2)))
            last = _plus(e, i0, AMX_BLOCK - 1)
            with e.loop(_plus(e, i0, AMX_BLOCK), lb=i0, step=e.idx(self.mr)) as i:
                self.block(i, j0, nr, None, last=last)
            self.k_lo, self.q0 = k_lo, None

    def tile_panel(self) -> tuple[SSAValue, SSAValue]:
        """B's panel of pairs as the right tiles read it, a 2-D memref (the block's view,
        columns_either: its hoisted panel or the chunk's own; else the chunk's own), and the
        reduction step its row 0 holds (0 for a hoisted panel, which holds every pair)."""
        if self.view is not None:
            k_first = self.view[2]
            assert k_first is not None
            return self.view[0], k_first
        return self.panel, self.k_lo

    def amx_block(self, i0: SSAValue, j0: SSAValue, offset: int, groups: SSAValue, b: SSAValue,
                  k_first: SSAValue) -> None:
        """C[i0 : i0 + 32, j : j + 32] += A·B over the chunk's first 32·groups steps (j = j0 +
        offset), on four accumulator tiles: A's two 16-row tiles of 32 steps (read in place
        where A is read [i, k], from pack_a_rows otherwise), B's two tiles of 16 pairs x 16
        columns from the packed panel `b` (tile_panel; its layout is the tiles': row q, the pairs of 16
        columns at 2·(j − j0)), four tdpbf16ps a group. C's tiles are loaded before the loop
        and stored after it; in between the loop carries them in tile registers.

        A group's loads and products interleave: A0, B0, A0·B0, B1, A0·B1, A1, A1·B0, A1·B1,
        each product issued as soon as its operands are in (oneDNN's brgemm kernels order
        them so), not the four loads first. The four accumulators and the operand tiles take
        the tile registers (LLVM gives A1 the register of A0, dead after A0·B1), so a group's
        loads wait for the products before them that read the registers they fill; interleaved,
        a group's first product starts after two loads instead of four and its last loads
        overlap its first products. Measured on an Emerald Rapids (2 vCPUs, KVM) whose AMX rate
        moved between two regimes from minute to minute (a 2 x 2 block over L1 operands: about
        2700 or 650 GFLOP/s per core): the FLCE bfloat16 gradient with both orders compiled in
        one process, calls taking turns, ran 1.10x and 1.25x faster at 4096 x 4096 x 8192 (10
        rounds, twice) and 1.21x at 2048 x 2048 x 32000 (8 rounds), each the median of the
        rounds' ratios; the 2 x 2 block alone (a C microbenchmark, the slow regime) 690-770
        GFLOP/s per core in this order against 530-550 loads first, over 64 and 512 KiB operands.

        Measured and not kept on an Intel Xeon with AMX (family 6, 2 vCPUs, 48 KiB L1d, 2 MiB L2;
        FLCE bfloat16 gradient 4096 x 4096 x 8192, 2 threads, variants compiled in one process,
        calls taking turns, 6-8 rounds): A read [i, k] in place (X in GEMM 1, rows 8 KiB apart)
        copied a chunk at a time into rows a line more than the chunk apart, as pack_a_rows
        leaves them: 1.004x and 1.007x. GEMM 1's k-loops fell from 30 % of the samples to 18 %
        and the copy took 8 %: the wait on X's lines moved into it. With each row's lines
        prefetched two or four rows ahead: 1.002x and 1.001x. KC 384 and 256 instead of 1024
        (A's 32-row block then in the L1, reused by every panel): 1.015x and 1.010x, within
        the rounds' spread (0.98-1.14). C's lines (32 rows x 2) prefetched for writing a block
        ahead into the L1, two blocks ahead, and two ahead into the L2, before C's tiles load:
        0.985x, 1.007x and 1.005x (8 rounds), though the loads of C (GEMM 2's float32 dX
        accumulator, GEMM 3's dW tile) hold most of those k-loops' samples. What did pay was
        X's rows spread over the cache sets once a call, before the kernel
        (ops/common.spread_rows: 1.08x)."""
        e = self.e
        op_tile = TileType(AMX_TILE, AMX_STEPS, bf16)
        acc_tile = TileType(AMX_TILE, AMX_TILE, f32)
        rows = [i0, _plus(e, i0, AMX_TILE)]
        cols = [_plus(e, j0, offset), _plus(e, j0, offset + AMX_TILE)]
        b_cols = [e.idx(2 * offset), e.idx(2 * (offset + AMX_TILE))]
        a = self.a if self.a_rows is None else self.a_rows

        def b_row(k: SSAValue) -> SSAValue:
            return e.emit(arith.DivUIOp(e.emit(arith.SubiOp(k, k_first)), e.idx(2)))

        def a_at(i: SSAValue, k: SSAValue) -> list[SSAValue]:
            # A read [k, i] was transposed into the chunk's rows (pack_a_rows); read [i, k], in place.
            return [i, e.emit(arith.SubiOp(k, self.k_lo))] if self.a_rows is not None else [i, k]

        at_c = [(i, j) for i in rows for j in cols]
        with e.labelled(self.label + ".k"):
            tiles = [e.emit(TileLoadOp(self.c, [i, j], acc_tile)) for i, j in at_c]
            with e.carried_loop(groups, tiles) as (g, carried, updated):
                g.name_hint = "g"
                k = e.emit(arith.AddiOp(self.k_lo, e.emit(arith.MuliOp(g, e.idx(AMX_STEPS)))))
                q = b_row(k)
                # Each product as soon as its operands are loaded (the docstring says why).
                a0 = e.emit(TileLoadOp(a, a_at(rows[0], k), op_tile))
                b0 = e.emit(TileLoadOp(b, [q, b_cols[0]], op_tile))
                u00 = e.emit(TileMulFOp(a0, b0, carried[0]))
                b1 = e.emit(TileLoadOp(b, [q, b_cols[1]], op_tile))
                u01 = e.emit(TileMulFOp(a0, b1, carried[1]))
                a1 = e.emit(TileLoadOp(a, a_at(rows[1], k), op_tile))
                updated += [u00, u01, e.emit(TileMulFOp(a1, b0, carried[2])), e.emit(TileMulFOp(a1, b1, carried[3]))]
            _unrolled(tiles[0], AMX_UNROLL)
            for (i, j), tile in zip(at_c, tiles):
                e.emit(TileStoreOp(self.c, [i, j], tile))

    def pack_a_rows(self, pairs: SSAValue, buffer: SSAValue) -> None:
        """buffer[i, k − k_lo] = A[k, i] for A read [k, i], the rows of whole AMX blocks and the
        chunk's whole 32-step groups: what a left tile reads, row i its steps in order. From
        pack_a_pairs' pairs (row q: (A[k, i], A[k + 1, i]) as one i32 per i), 16 x 16 blocks of
        i32 transposed in registers (row i: its pairs q in order, the tile's row)."""
        e = self.e
        assert self.amx_rows is not None
        words = VectorType(i32, [self.lanes])
        groups = e.emit(arith.DivUIOp(e.emit(arith.SubiOp(self.k_hi, self.k_lo)), e.idx(AMX_STEPS)))
        with (e.loop(e.emit(arith.MuliOp(groups, e.idx(AMX_STEPS // 2))), step=e.idx(self.lanes)) as q0,
              e.loop(self.amx_rows, step=e.idx(self.lanes)) as i0):
            block = [e.emit(vector.LoadOp(pairs, [_plus(e, q0, r), i0], words)) for r in range(self.lanes)]
            at = e.emit(arith.AddiOp(q0, q0))
            for r, row in enumerate(transposed(e, block)):
                e.emit(vector.StoreOp(e.emit(vector.BitcastOp(row, self.pairs)), buffer, [_plus(e, i0, r), at]))

    def emit(self) -> None:
        """All of it labelled (kernel_label), in _emit."""
        with self.e.labelled(self.label):
            self._emit()

    def _emit(self) -> None:
        """The reduction in chunks of KC steps; in each, columns in blocks of NR vectors, B's
        KC×NR-vector panel packed first (pack) and shared by all row blocks, then the columns
        at the edges a line's worth of vectors at a time, masked to what is left (masked).
        Chunks run in order, each added to C once. A narrower A is widened into a float32
        buffer at the start of each chunk (widens_a).

        Where B's panels are packed here, the blocks start at C's first column that begins a
        cache line (line_head: NumPy's large arrays start 16 bytes past one), the columns
        before it masked, as those after the last block: a block's row of C is then one
        line, not two, and so is the row of B the pack reads where B's rows are aligned as C's
        (X and dW, in GEMM 3 of the linear cross-entropy gradient). On one Zen 3, FLCE float32
        2048 x 2048 x 16000, 2 threads (bench/loop_profile.py): X's pack and GEMM 3's row
        blocks took 1.4 and 1.5 % of the samples with line-aligned arrays, 3.1 and 2.4 % with
        NumPy's. Hoisted panels start where C's memory, if it is there before their loop, has
        its first line (hoisted_panels). Not for bfloat16 pairs (dot): their C is a float32
        accumulator of the nest's own, line-aligned. Their B can still be NumPy's, 16 bytes past a
        line: X in GEMM 3 of the FLCE bfloat16 gradient. Its pack then took 613 samples where it
        took 500 with X and W on lines (6 calls at 4096 x 4096 x 8192, Zen 5, 2 threads), and the
        calls ran about 1.03x as fast with X on lines (two runs of 8 and 14 rounds, calls taking
        turns, single rounds 0.98-1.08). Measured and not kept: for dot, the blocks started at
        B's first line instead. The aligned pack took 500 samples again, but the edges took 64
        columns a row, packed a column at a time (156 samples) and run as 6 x 1 blocks (156),
        and C's rows were no longer on lines (GEMM 3's epilogue: 303 samples against 114). The
        calls ran 1.002x as fast with X 16 bytes past a line (10 rounds).
        With the blocks so placed, NumPy's outputs cost no more than line-aligned ones: FLCE
        float32 2048 x 2048 x 32000 into outputs 48 and 16 bytes past a line (np.full) and into
        the output pool's (runtime/memory.py), calls taking turns, 1.002x (8 rounds, 0.98-1.04;
        Zen 5, 2 threads)."""
        e = self.e
        buffer = None
        rows_buffer = None
        if self.dot and self.shape.lhs_transposed:  # A read [i, k] is read in place (pair_steps)
            buffer = e.alloc([self.kc // 2, self.m], i32)
            buffer.name_hint = "a_pairs"
            if self.amx_rows is not None:
                # A line more than the chunk a row: rows 2·KC bytes apart (a power of two) fell
                # into one or two of the L1's sets, and a tile's 16 rows evicted each other.
                rows_buffer = e.alloc([self.amx_rows, self.kc + self.line_bytes // 2], bf16)
                rows_buffer.name_hint = "a_rows"
        elif self.widens_a():
            buffer = e.alloc([self.m, self.kc], f32)
            buffer.name_hint = "a_wide"
        head = None
        if not self.dot:
            head = e.line_head(self.c, self.n, 4, self.line_bytes)
            head.name_hint = "head"
        first = None if self.hoisted is None else self.hoisted.first
        with e.loop(self.k, step=e.idx(self.kc)) as k0:
            self.k_lo, self.k_hi = k0, e.emit(arith.MinSIOp(e.emit(arith.AddiOp(k0, e.idx(self.kc))), self.k))
            if buffer is not None and self.dot:
                with e.labelled(self.label + ".pack_a"):
                    self.pack_a_pairs(buffer)
                    if rows_buffer is not None:
                        self.pack_a_rows(buffer, rows_buffer)
                self.a_pairs, self.a_rows = buffer, rows_buffer
            elif buffer is not None:
                with e.labelled(self.label + ".widen_a"):
                    self.widen_a(buffer)
                self.a_wide = buffer
            if self.hoisted is None:
                self.columns(head)
            else:
                self.columns_either(first, head)
        if buffer is not None:
            e.dealloc(buffer)
        if rows_buffer is not None:
            e.dealloc(rows_buffer)

    def columns(self, start: SSAValue | None) -> None:
        """The chunk over all of C's columns, no panels hoisted: blocks of NR vectors from column
        `start` on (None: 0), each packing B's panel; the columns before `start` and after the
        last block masked (masked). Measured on a Zen 4 and not kept: each block's panel packed
        while the block before ran (two panels in the buffer, the next one's steps copied a
        slice after each whole row block, the slice two blocks on prefetched into the L2), for
        GEMM 3's pack of X's token tile at 2 % of the FLCE float32 gradient's samples: 0.982x
        (2048 x 2048 x 32000, 10 rounds of bench/ab.py); the copies waited on X's lines as the
        pack had, now between the row blocks."""
        e = self.e
        begin = e.idx(0) if start is None else start
        blocks_end = self._blocks_end(begin)
        with e.loop(blocks_end, begin, e.idx(self.nr * self.lanes)) as j0:
            self.pack(j0)
            self.rows(j0, self.nr)
        self.edges(start, blocks_end)

    def _blocks_end(self, start: SSAValue) -> SSAValue:
        """Where the whole blocks of NR vectors from column `start` end."""
        e = self.e
        return e.emit(arith.AddiOp(start, self._floor(e.emit(arith.SubiOp(self.n, start)), self.nr * self.lanes)))

    def _panel_of(self, j0: SSAValue, start: SSAValue) -> SSAValue:
        """The hoisted panel of the block at column `j0`, blocks of NR vectors from `start`."""
        e = self.e
        return e.emit(arith.DivUIOp(e.emit(arith.SubiOp(j0, start)), e.idx(self.nr * self.lanes)))

    def edges(self, start: SSAValue | None, blocks_end: SSAValue) -> None:
        """The columns before the blocks (from 0 to `start`), then those after them (from
        `blocks_end` to N), masked: one loop body for both; only those after them where the
        blocks start at column 0 (`start` None)."""
        e = self.e
        if start is None:
            self.masked(blocks_end, self.n)
            return
        with e.loop(e.idx(2)) as edge:
            before = e.emit(arith.CmpiOp(edge, e.idx(0), "eq"))
            self.masked(e.emit(arith.SelectOp(before, e.idx(0), blocks_end)), e.emit(arith.SelectOp(before, start, self.n)))

    def columns_either(self, first: SSAValue | None, head: SSAValue | None) -> None:
        """`columns` over the hoisted panels where they were packed (`fits`), else over panels
        packed here a block at a time, in one copy of the column blocks: each block reads a 2-D
        view, its hoisted panel or the chunk's own just packed, chosen at run time (self.view),
        where two copies of the blocks, one per case under an scf.if, were a third of the FLCE
        float32 gradient's LLVM IR and of LLVM's time on it. Each case's blocks start where
        columns' would (`first` or `head`; bfloat16 pairs: column 0 in both), so every element
        sums the same products in the same order: the same bits.

        With AMX tiles, the blocks run in passes: where `fits`, one pass over every block, its
        whole 32-row blocks first, each over all the panels (the row block outermost), then the
        panels' other rows; else one pass per block, its panel packed first, as `columns` runs
        them. A's rows of a block (32 x the chunk: 64 KiB of bfloat16 for GEMM 1's chunk of
        1024) are then read from memory once per chunk and reused from the L2 by every panel,
        and B's panels (all of the chunk's hoisted: 640 KiB for a 320-column tile) stay in the
        L2 from one row block to the next. Panel outermost, every panel read A's whole chunk
        again (X's token tile, 384 x 1024 bfloat16, 768 KiB, which with the panels and the
        logits tile outgrows a 2 MiB L2). Each element sums the same products in the same order
        either way: the same bits. Measured on an Emerald Rapids (2 vCPUs), both orders
        compiled in one process, calls taking turns: the FLCE bfloat16 gradient 1.08x and 1.14x
        faster at 4096 x 4096 x 8192 (12 and 16 rounds) and 1.14x at 2048 x 2048 x 32000 (8
        rounds), each the median of the rounds' ratios. GEMM 2 (dX += G·W, its panels the whole
        of W's tile, 2.5 MiB, read again by each row block, whose G rows, 20 KiB, stay in the
        L1) gained too: this order for GEMM 1 alone was 1.07x slower than for both (16 rounds).
        The passes replaced a copy of the blocks per case under an scf.if: 2136 of the 7366 ops
        this pass emitted for the FLCE bfloat16 gradient on a host with AMX, whose cold compile
        went from 5.0-6.2 s to 3.1 (Emerald Rapids, fresh processes)."""
        e = self.e
        assert self.hoisted is not None
        fits, offset = self.hoisted.fits, self.hoisted.offset
        wide = self.nr * self.lanes
        start = None  # pairs (dot): the blocks start at column 0 in both cases
        if head is not None:
            start = e.emit(arith.SelectOp(fits, e.idx(0) if first is None else first, head))
            start.name_hint = "start"
        else:
            assert first is None
        begin = e.idx(0) if start is None else start
        blocks_end = self._blocks_end(begin)
        if self.dot:  # a row of pairs: the hoisted panels hold every pair, the chunk's own from k_lo on
            hoisted_row, own = e.emit(arith.DivUIOp(self.k_lo, e.idx(2))), e.idx(0)
        else:  # the chunk's panel holds step k at row k - k_lo
            hoisted_row, own = e.idx(0) if offset is None else offset, e.emit(arith.SubiOp(e.idx(0), self.k_lo))
        delta = e.emit(arith.SelectOp(fits, hoisted_row, own))
        delta.name_hint = "delta"
        tiles = self.amx_rows is not None
        k_first = None  # the reduction step row 0 of a tile's view holds (tile_panel)
        if tiles:
            k_first = e.emit(arith.SelectOp(fits, e.idx(0), self.k_lo))
            k_first.name_hint = "k_first"
        columns = 2 * wide if self.dot else wide
        view = MemRefType(bf16 if self.dot else f32, [DYNAMIC_INDEX, columns], StridedLayoutAttr([columns, 1], None))
        packed = self.packed
        assert packed is not None

        def viewed(j0: SSAValue, pack: bool) -> None:
            def hoisted_panel() -> list[SSAValue]:
                p = self._panel_of(j0, begin)
                return [e.emit(memref.SubviewOp.get(packed, [p, 0, 0], [1, e.dim(packed, 1), columns], [1, 1, 1], view))]

            def own_panel() -> list[SSAValue]:
                if pack:
                    self.pack(j0)
                return [e.emit(memref.CastOp.get(self.panel, view))]

            (panel,) = e.if_else(fits, hoisted_panel, own_panel, [view])
            panel.name_hint = "b_view"
            self.view = (panel, delta, k_first)

        if not tiles:
            with e.loop(blocks_end, begin, e.idx(wide)) as j0:
                viewed(j0, pack=True)
                self.rows(j0, self.nr)
        else:
            # A pass over every block where `fits` (its loop to 1 past the start: once, if there
            # are blocks), else a pass per block: its blocks from `lo` to `hi`.
            once = e.emit(arith.MinUIOp(blocks_end, _plus(e, begin, 1)))
            passes_end = e.emit(arith.SelectOp(fits, once, blocks_end))
            passes_end.name_hint = "passes_end"
            own = e.emit(arith.XOrIOp(fits, e.const(True, i1)))
            own.name_hint = "own"
            with e.loop(passes_end, begin, e.idx(wide)) as o:
                lo = e.emit(arith.SelectOp(fits, begin, o))
                hi = e.emit(arith.SelectOp(fits, blocks_end, _plus(e, o, wide)))
                lo.name_hint, hi.name_hint = "pass_start", "pass_end"
                with e.if_(own):
                    self.pack(o)
                with e.loop(self.amx_rows, step=e.idx(AMX_BLOCK)) as i0, e.loop(hi, lo, e.idx(wide)) as j0:
                    viewed(j0, pack=False)
                    self.amx_rows_block(i0, j0, self.nr)
                with e.loop(hi, lo, e.idx(wide)) as j0:
                    viewed(j0, pack=False)
                    self.rows(j0, self.nr, tiles_done=True)
        self.view = None
        self.edges(start, blocks_end)

    def masked(self, lo: SSAValue, hi: SSAValue) -> None:
        """Columns [lo, hi) in blocks of the vectors a cache line of float32 spans (at most NR:
        2 of 8 lanes, 1 of 16), each vector masked to the columns left (create_mask clamps: all
        lanes but in the last vectors, none past hi). B's columns are packed first, masked, as
        a panel the row blocks read (pack): read in place, a power-of-two row stride made every
        row block wait on B's lines (GEMMs 2 and 3 of the FLCE gradient at H = 2048: their
        edges, 16 columns of 2048, took 2.7 % of the samples). bfloat16 pairs (dot) pack their
        pairs a column at a time (pack_pair_columns) and run on dots as the whole blocks do. They
        read B in place a lane at a time on float32 FMAs before: the FLCE bfloat16 gradient at
        4096 x 4000 x 8192 (32 edge columns of 4000) spent 6.7 % of its samples in those edges,
        and ran 1.06x faster on dots, 1.33x at 2048 x 1000 x 32000 (Zen 5, 2 threads, 6 rounds
        of bench/ab.py each; 1.006x at 4096 x 4096 x 8192, which has no edges)."""
        e = self.e
        nr = self.edge_nr
        with e.loop(hi, lo, e.idx(nr * self.lanes)) as j0:
            masks = [e.emit(vector.CreateMaskOp([e.emit(arith.SubiOp(hi, _plus(e, j0, c * self.lanes)))], VectorType(i1, [self.lanes])))
                     for c in range(nr)]
            self.pack(j0, masks)
            self.rows(j0, nr, masks)


def _unrolled(result: SSAValue, count: int) -> None:
    """The float32 reduction loop whose result this is gets `count` steps an iteration
    (#llvm.loop_annotation: count, or disable for 1). LLVM unrolls no loop npugrad did not
    annotate (lowering/machine_code.py), so this is the decision: a whole block's loop by two,
    a tail block's rolled.

    Whole blocks by two, on every target. LLVM's own heuristics, which decided before, unrolled
    the 12-FMA steps of 256-bit vectors (6 x 2 blocks) by two for znver3 and x86-64-v3 (the
    FLCE gradient's reduction loops assembled for zen3.toml are the same instructions as before,
    tests/test_microkernel_registers.py), and for 512-bit ones (6 x 4, 24 FMAs a step) unrolled
    one of the FLCE's loops by two and left the others rolled (znver4, znver5, x86-64-v4). By two
    matters where it was measured: on a Zen 3 the forward's (fused_linear_online_max_sum,
    2048 x 4096 x 8192 float32, 2 threads) ran at 0.84-0.89 of the same-shape SGEMM in the same
    process unrolled and at 0.68-0.79 rolled (three pairs of fresh processes); by four it read
    the same as by two. BLAS micro-kernels unroll their reduction loops too (OpenBLAS's and
    BLIS's x86 kernels by 4 to 8).

    Tails rolled (the columns at the edges, or the rows left below the whole blocks): their
    FMAs per step are as many either way: unrolling them by two at run time cloned every
    tail's loop with a remainder copy, for a few percent of the samples. On a Zen 3, LLVM's O3
    and code generation of the FLCE gradient kernel took 1.3-1.5 s with the tails rolled and
    1.7-2.0 s unrolled in float32, 1.9-2.0 s and 2.3-2.4 s in bfloat16 (the best of 3 in each
    of two processes taking turns). The rolled tails' loops model
    at 6.07 cycles per 12 FMAs and the unrolled ones at 6.04 (llvm-mca 14, Skylake and Zen 3;
    one tail at 7.1 on Zen 2). At 2048 x 2048 x 32000 (bench/loop_profile.py, 2 threads) the
    tails held 1.8 % of the samples rolled and 2.0 % unrolled; the whole blocks' loops, unrolled
    as before, held 87 %.

    bfloat16 pairs' loops (pair_steps) are not annotated, so they stay rolled: by two, the FLCE
    bfloat16 gradient at 2048 x 2048 x 32000 ran 0.998x as fast on a Zen 4 (10 rounds of
    bench/ab.py), its three reduction loops at 87.5 % of the samples (86.1 % rolled)."""
    loop = result.owner
    assert isinstance(loop, scf.ForOp), loop
    LOOP_ANNOTATION.set(loop, LoopAnnotationAttr(disable=True) if count == 1 else LoopAnnotationAttr(count=count))


_VIEWS = {"memref.subview", "memref.cast", "memref.reinterpret_cast", "memref.collapse_shape", "memref.expand_shape"}
_READS = {"memref.load", "vector.load", "vector.maskedload", "memref.dim", "memref.prefetch", "memref.dealloc"}


def view_root(ref: SSAValue) -> SSAValue:
    """The memory a view is of: `ref` through subviews, casts and reshapes."""
    while isinstance(ref.owner, Operation) and ref.owner.name in _VIEWS:
        ref = ref.owner.operands[0]
    return ref


def _column_offsets(ref: SSAValue, loop: scf.ForOp) -> list | None:
    """The column offsets (ints and values) of the 2-D subviews between `ref` and its root, the
    zero ones left out, or None where one is a value defined inside `loop`."""
    parts: list = []
    while isinstance(ref.owner, Operation) and ref.owner.name in _VIEWS:
        view = ref.owner
        if isinstance(view, memref.SubviewOp) and len(view.static_offsets.get_values()) == 2:
            static = view.static_offsets.get_values()[1]
            if static == DYNAMIC_INDEX:
                offset = view.offsets[-1]
                owner = offset.owner if isinstance(offset.owner, Operation) else offset.owner.parent_op()
                if owner is not None and loop.is_ancestor(owner):
                    return None
                parts.append(offset)
            elif static:
                parts.append(static)
        ref = view.operands[0]
    return parts


def _writes(scope: Operation, root: SSAValue) -> bool:
    """Whether an op in `scope` may write memory `root` (any use but a read, a view or an input
    of a linalg op counts). It follows the uses of `root` and of the views of it (the values
    whose view_root is `root`) rather than walking `scope`: a function of thousands of ops holds
    a few dozen uses of one buffer."""
    values = [root]
    while values:
        value = values.pop()
        if not isinstance(value.type, MemRefType):
            continue
        for use in value.uses:
            op = use.operation
            if op.name in _VIEWS:
                if use.index == 0:  # a view of `value`: its uses are uses of `root` too
                    values.extend(op.results)
                continue
            if op.name in _READS or not scope.is_ancestor(op):
                continue
            inputs = len(op.inputs) if isinstance(op, GenericOp) else 0  # type: ignore[attr-defined]
            if use.index >= inputs:
                return True
    return False


def invariant_loop(gen: GenericOp) -> scf.ForOp | None:
    """The loop around `gen` (the nearest scf.for) over which B, its second operand, holds the
    same values, or None: B is a value defined outside the loop, of memory nothing in the loop
    writes, and that memory is either allocated in the function or an argument the function
    never writes (an input: the train ops' operands never share memory with their outputs, and
    the API rejects overlapping arrays before launch; the panel packing inside the loop makes the
    same assumption about B and C)."""
    loop = gen.parent_op()
    while loop is not None and not isinstance(loop, scf.ForOp | func.FuncOp):
        loop = loop.parent_op()
    if not isinstance(loop, scf.ForOp):
        return None
    b = gen.inputs[1]
    owner = b.owner if isinstance(b.owner, Operation) else b.owner.parent_op()
    if owner is not None and loop.is_ancestor(owner):
        return None
    root = view_root(b)
    fresh = isinstance(root.owner, Operation) and root.owner.name in ("memref.alloc", "memref.alloca")
    argument = isinstance(root.owner, Block) and isinstance(root.owner.parent_op(), func.FuncOp)
    if not (fresh or (argument and not _writes(enclosing_function(gen), root))) or _writes(loop, root):
        return None
    return loop


def _enclosing_loop(op: Operation) -> scf.ForOp | None:
    """The nearest scf.for around `op`, or None (a function first)."""
    loop = op.parent_op()
    while loop is not None and not isinstance(loop, scf.ForOp | func.FuncOp):
        loop = loop.parent_op()
    return loop if isinstance(loop, scf.ForOp) else None


def _unchanged(root: SSAValue, gen: GenericOp, loop: scf.ForOp) -> bool:
    """Whether memory `root` holds the same values over `loop` (invariant_loop's rule)."""
    fresh = isinstance(root.owner, Operation) and root.owner.name in ("memref.alloc", "memref.alloca")
    argument = isinstance(root.owner, Block) and isinstance(root.owner.parent_op(), func.FuncOp)
    return (fresh or (argument and not _writes(enclosing_function(gen), root))) and not _writes(loop, root)


def _whole_columns(view: memref.SubviewOp, base: SSAValue) -> bool:
    """Whether `view` takes every column of 2-D `base` from column 0 with unit strides: sizes[1]
    is base's static width or a memref.dim of base's dimension 1."""
    t = base.type
    offsets, sizes, strides = (list(a.get_values()) for a in (view.static_offsets, view.static_sizes, view.static_strides))
    if offsets[1:] != [0] or strides != [1, 1]:
        return False
    width = t.get_shape()[1]  # type: ignore[attr-defined]
    if sizes[1] != DYNAMIC_INDEX:
        return sizes[1] == width != DYNAMIC_INDEX
    size = view.sizes[-1].owner
    if not isinstance(size, memref.DimOp) or view_root(size.source) is not view_root(base):
        return False
    return integer_constant(size.index) == 1


def invariant_rows(gen: GenericOp) -> tuple[scf.ForOp, SSAValue, SSAValue] | None:
    """(loop, base, row offset) where B, the second operand (read [k, j]), is rows
    [offset, offset + K) of every column of `base`, a view made in the loop around `gen` (so
    not invariant there: GEMM 3 of the linear cross-entropy gradient reading X's token tile in
    the token loop), and `base` holds the same values over the loop around that one (the
    vocabulary loop, and any loop around that over which it still does): all of base's panels
    can be packed once, before it, and row k of B read at row offset + k (hoisted_panels, where
    base is small enough)."""
    view = gen.inputs[1].owner
    inner = _enclosing_loop(gen)
    if not isinstance(view, memref.SubviewOp) or inner is None or not inner.is_ancestor(view):
        return None
    outer = _enclosing_loop(inner)
    base = view.source
    t = base.type
    if outer is None or not isinstance(t, MemRefType) or t.get_num_dims() != 2 or t.element_type not in _OPERAND_TYPES:
        return None
    if not unit_innermost_stride(t) or not _whole_columns(view, base) or view.static_offsets.get_values()[0] != DYNAMIC_INDEX:
        return None
    owner = base.owner if isinstance(base.owner, Operation) else base.owner.parent_op()
    if owner is not None and outer.is_ancestor(owner):
        return None
    root = view_root(base)
    if not _unchanged(root, gen, outer):
        return None
    # Out of every loop more that base holds still over: the vocabulary loop, where the token
    # loop runs in groups of tiles (tiling/flce_groups.py) inside it.
    while (around := _enclosing_loop(outer)) is not None:
        if (owner is not None and around.is_ancestor(owner)) or not _unchanged(root, gen, around):
            break
        outer = around
    return outer, base, view.offsets[0]


# How many of the vector role's level (the L2 on a CPU) a base packed before the loop around B's
# (invariant_rows) may take at most, whatever the largest level says (row_pack_budget).
ROW_PACK_L2S = 8


def row_pack_budget(target: Target) -> int:
    """The bytes of packed bases (invariant_rows: X for GEMM 3, packed once before the loop around
    B's loop) for all cores: one base's float32 size must be at most this divided by the cores.
    The largest local level (the L3's share per core), but at most ROW_PACK_L2S of the level the
    vector role has: a VM that shows 2 of a socket's cores sees them share all of its
    L3 (an Emerald Rapids: 300 MiB, 150 MiB "per core"), and X of 4096 x 4096 was packed whole,
    64 MiB of float32 per core: the FLCE gradient's peak extra memory went from 5 to 134 MiB (the
    issue's bound is 1/50 of the compilers'), for a pack that pays where X is a chunk of rows that
    stays in cache (the chunked schedule's 315 x 4096, 5 MiB)."""
    largest = max((lv.capacity for lv in target.local_levels() if lv.capacity), default=0)
    l2 = target.role("vector").capacity or largest
    return min(largest, ROW_PACK_L2S * l2)


@dataclass(frozen=True)
class _Hoisted:
    """B's panels packed before a loop (hoisted_panels): packed[p, k, :], B's row k at row
    offset + k of them (None: k), where `fits` holds (a condition at run time: otherwise none
    are packed, and the micro-kernel packs its own); panel p holds columns first + p·W onwards."""

    packed: SSAValue
    fits: SSAValue
    offset: SSAValue | None = None
    first: SSAValue | None = None  # the column panel 0 starts at (None: 0)


@dataclass(frozen=True)
class VectorizeContraction(RewritePattern):
    target: Target
    panels: dict = field(default_factory=dict)  # (function, dot) -> its B panel (one per function and kind, on the heap)
    hoisted: dict = field(default_factory=dict)  # (loop, B, transposed) -> B's panels, packed before the loop

    def hoisted_panels(self, gen: GenericOp, shape: _Contraction, rewriter: PatternRewriter) -> _Hoisted | None:
        """All of B's full panels, packed once before the loop B is invariant in (invariant_loop):
        %packed[p, k, :] = B[k, p·W : (p + 1)·W] as float32 (W = NR·lanes), what the micro-kernel
        packs per reduction chunk otherwise, for every chunk at once. The token loops of the
        linear cross-entropy nests read one W tile for every token tile: GEMMs 1 and 2 then pack it
        once per vocabulary tile instead of once per token tile. Costs B's size in float32 (in
        bfloat16 pairs), so only where the loop runs more than once, a condition at run time
        (otherwise the micro-kernel packs per call, as below): the chunked loss schedule's
        bfloat16 chunks are one token tile each (ops/loss.py), and there the W tile's packs,
        2 MiB a core in the forward and in GEMM 2 (256 x 4096, Zen 5), were 4 of the 36 MiB the
        step allocated beyond the gradients at its peak, for nothing.

        B a view of rows of a base invariant in the loop around B's loop (invariant_rows: GEMM 3
        reading X's token tile): all of the base is packed before that loop, if its float32 size
        is at most the target's largest local level shared by its cores (the L3: one chunk of
        the chunked loss schedule's rows, 315 x 4096 float32, not a batch of 4096), a condition
        on the sizes at run time; otherwise nothing is packed there and the micro-kernel packs
        per call as before. One Zen 3 core, the chunked schedule's backward (315 x 4096 x
        16000): X's pack, once per (vocabulary tile, token tile), was 4.5-4.7 % of the samples.

        Measured and not kept: bfloat16 pairs of the base's rows (GEMM 3 of the bfloat16 FLCE
        gradient: X's pairs packed before the vocabulary loop, a token tile's rows read at pair
        (offset + k) / 2 where the offset is even). On a Zen 5 (4096 x 4096 x 8192, 2 threads;
        each core packed all of X, 32 MiB) GEMM 3's pack went from 3.6 % of the kernel's samples
        to 0.3 %, but its reduction loop from 29.2 % to 32.4 %: the first row block of each
        panel read it from memory. With the next panel's rows prefetched into the L2 a few per
        row block, that loop held 29.8 %, yet the call ran 0.965x as fast (16 rounds of
        bench/ab.py, 0.89-1.00): what it lost lies outside the samples of the kernel's code.
        Measured again with each core packing only its own rows (a span [lo, hi) computed before
        the loop: the offset with the group and token loops' indices at their lower bounds, and
        at their upper ones; 16 MiB a core; a token tile's pairs read where its rows fall in the
        span, start a pair and end one, else packed per call as before): 1.002x (10 rounds). GEMM 3's reduction loop
        went from 29.5 % of the samples to 31.0 % as its pack's 2.9 % went. Each row block
        prefetching a slice of the next panel's pairs: 1.008x and 1.005x, into the L2 or the
        L1; each panel's pairs copied into the micro-kernel's own panel before its row blocks:
        0.978x (the same size and machine, 10 rounds each)."""
        loop, b, offset = invariant_loop(gen), gen.inputs[1], None
        dot = dots(gen, shape, self.target)
        if loop is None and not shape.rhs_transposed and not dot and (rows := invariant_rows(gen)) is not None:
            loop, b, offset = rows
        if loop is None:
            return None
        key = (loop, b, shape.rhs_transposed, dot)  # W's tile is B of GEMM 1 (transposed) and of GEMM 2
        if key in self.hoisted:
            return self.hoisted[key]
        e = IRBuilder(rewriter, loop)
        with e.labelled(kernel_label(gen) + ".pack_b"):
            self.hoisted[key] = self._hoisted_panels(e, gen, shape, rewriter, loop, b, offset, dot)
        return self.hoisted[key]

    def _hoisted_panels(self, e: IRBuilder, gen: GenericOp, shape: _Contraction, rewriter: PatternRewriter,
                        loop: scf.ForOp, b: SSAValue, offset: SSAValue | None, dot: bool) -> _Hoisted:
        nr = block_shape(self.target)[1]
        wide = panel_width(self.target)
        lanes = self.target.vector_bits // 32
        k, n = (e.dim(b, 1), e.dim(b, 0)) if shape.rhs_transposed else (e.dim(b, 0), e.dim(b, 1))
        repeats = None
        if offset is None:  # B invariant in `loop`: packed ahead only where the loop runs more than once
            repeats = e.emit(arith.CmpiOp(e.emit(arith.AddiOp(loop.lb, loop.step)), loop.ub, "slt"))
            repeats.name_hint = "repeats"
        if dot:
            panels = e.emit(arith.DivUIOp(n, e.idx(wide)))
            assert repeats is not None  # B's rows (invariant_rows) are not hoisted for pairs
            panels = e.emit(arith.SelectOp(repeats, panels, e.idx(0)))
            # Pairs of reduction steps (pack_pairs), ceil(K / 2) rows of 2W bfloat16 per panel.
            rows = e.emit(arith.DivUIOp(_plus(e, k, 1), e.idx(2)))
            packed = e.emit(memref.AllocOp([panels, rows], [], MemRefType(bf16, [DYNAMIC_INDEX, DYNAMIC_INDEX, 2 * wide]),
                                           alignment=IntegerAttr(64, 64)))
            packed.name_hint = "b_panels"
            with e.loop(panels) as p:
                j0 = e.emit(arith.MuliOp(p, e.idx(wide)))

                def store(q: SSAValue, at: SSAValue, v: SSAValue, p: SSAValue = p) -> None:
                    e.emit(vector.StoreOp(v, packed, [p, q, at]))

                ahead = None if shape.rhs_transposed else next_panel(e, j0, wide, n)
                pack_pairs(e, b, shape.rhs_transposed, e.idx(0), k, j0, lanes, nr, store, ahead)
            after = loop.next_op
            assert after is not None
            IRBuilder(rewriter, after).dealloc(packed)
            return _Hoisted(packed, fits=repeats)
        # The panels start at the first column that begins a line of C (line_head, as the
        # micro-kernel's own packs do), where C's memory is there before the loop.
        first = None
        c_root = view_root(gen.outputs[0])
        columns = _column_offsets(gen.outputs[0], loop)
        if not loop.is_ancestor(c_root.owner) and columns is not None:
            # C's first line from the column its view starts at (a chunk of dX's columns: the
            # token loop in phases, tiling/flce_groups.py), in its root's first row.
            row = c_root
            if columns and c_root.type.get_num_dims() == 2:  # type: ignore[attr-defined]
                parts = [e.idx(p) if isinstance(p, int) else p for p in columns]
                column = functools.reduce(lambda a, b: e.emit(arith.AddiOp(a, b)), parts)
                row = e.subview(c_root, [0, column], [1, n])
            first = e.line_head(row, n, 4, line_bytes(self.target))
            first.name_hint = "first"
        panels = e.emit(arith.DivUIOp(n if first is None else e.emit(arith.SubiOp(n, first)), e.idx(wide)))
        fits = repeats
        if repeats is not None:
            panels = e.emit(arith.SelectOp(repeats, panels, e.idx(0)))
        if offset is not None:
            size = e.emit(arith.MuliOp(e.emit(arith.MuliOp(k, n)), e.idx(4)))
            budget = row_pack_budget(self.target)
            fits = e.emit(arith.CmpiOp(size, e.idx(budget // max(1, self.target.cores)), "ule"))
            fits.name_hint = "fits"
            panels = e.emit(arith.SelectOp(fits, panels, e.idx(0)))
        packed = e.emit(memref.AllocOp([panels, k], [], MemRefType(f32, [DYNAMIC_INDEX, DYNAMIC_INDEX, wide]),
                                       alignment=IntegerAttr(64, 64)))
        packed.name_hint = "b_panels"
        f32x = VectorType(f32, [lanes])
        loaded = VectorType(b.type.element_type, [lanes])  # type: ignore[attr-defined]

        def widened(v: SSAValue) -> SSAValue:
            return v if v.type == f32x else e.emit(arith.ExtFOp(v, f32x))

        with e.loop(panels) as p:
            j0 = e.emit(arith.MuliOp(p, e.idx(wide)))
            if first is not None:
                j0 = e.emit(arith.AddiOp(j0, first))
            if shape.rhs_transposed:
                # B read [j, k]: lanes x lanes blocks, each row a vector load along B's row and
                # the block transposed in registers (where packing a lane at a time cost a
                # scalar load per element: 12 % of a forward's samples, Zen 3, against 5 %), the
                # panel's blocks of columns in a loop (as pack_pairs'); the last k % lanes
                # columns (B's k) a column of the panel at a time (lane_tail).
                rest = e.emit(arith.MuliOp(e.emit(arith.DivUIOp(k, e.idx(lanes))), e.idx(lanes)))
                with e.loop(rest, step=e.idx(lanes)) as k0, e.loop(e.idx(wide), step=e.idx(lanes)) as c:
                    j = e.emit(arith.AddiOp(j0, c))
                    rows = [widened(e.emit(vector.LoadOp(b, [_plus(e, j, r), k0], loaded))) for r in range(lanes)]
                    for r, column in enumerate(transposed(e, rows)):
                        e.emit(vector.StoreOp(column, packed, [p, _plus(e, k0, r), c]))
                with lane_tail(e, j0, wide) as (col, column), e.loop(k, lb=rest) as kk:
                    e.store(e.load_f32(b, [column, kk]), packed, [p, kk, col])
            else:
                js = [_plus(e, j0, c * lanes) for c in range(wide // lanes)]
                ahead = next_panel(e, j0, wide, n)
                with e.loop(k) as kk:
                    e.emit(PrefetchOp(b, [kk, ahead], write=False))
                    for c, j in enumerate(js):
                        v = widened(e.emit(vector.LoadOp(b, [kk, j], loaded)))
                        e.emit(vector.StoreOp(v, packed, [p, kk, e.idx(c * lanes)]))
        after = loop.next_op
        assert after is not None  # a loop is never its block's terminator
        IRBuilder(rewriter, after).dealloc(packed)
        assert fits is not None  # (repeats where B is invariant in the loop, else the size's)
        return _Hoisted(packed, fits, offset, first)

    def panel(self, gen: GenericOp, rewriter: PatternRewriter, dot: bool) -> SSAValue:
        """The function's packed panel of B: KC rows of NR vectors of float32, or (`dot`) KC/2
        rows of NR vectors of bfloat16 pairs; allocated on the heap when the function starts and
        freed before each of its returns. Not on the stack: sized from the L2 (reduction_chunk),
        it is 64 KiB on a 1 MiB L2, and a thread's stack may be small (musl's default is 128 KiB;
        without stack probes an alloca past the guard page writes over whatever lies below)."""
        f = enclosing_function(gen)
        if (f, dot) not in self.panels:
            wide = panel_width(self.target)
            if dot:
                alloc = memref.AllocOp.get(bf16, 64, [kernel_chunk(self.target, True) // 2, 2 * wide])
            else:
                alloc = memref.AllocOp.get(f32, 64, [kernel_chunk(self.target, False), wide])
            alloc.memref.name_hint = "b_panel"
            rewriter.insert(alloc, InsertPoint.at_start(f.body.blocks[0]))
            for ret in [op for op in f.walk() if isinstance(op, func.ReturnOp)]:
                rewriter.insert(memref.DeallocOp.get(alloc.memref), InsertPoint.before(ret))
            self.panels[(f, dot)] = alloc.memref
        return self.panels[(f, dot)]

    @op_type_rewrite_pattern
    def match_and_rewrite(self, gen: GenericOp, rewriter: PatternRewriter) -> None:
        if (shape := _match(gen)) is not None:
            hoisted = self.hoisted_panels(gen, shape, rewriter)
            panel = self.panel(gen, rewriter, dots(gen, shape, self.target))
            _Kernels(gen, shape, self.target, IRBuilder(rewriter, gen), panel, hoisted).emit()
            rewriter.erase(gen)


@dataclass(frozen=True)
class VectorizeContractionsPass(ModulePass):
    name = "vectorize-contractions"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get(self.target)
        if target.vector_registers == 0:
            return
        PatternRewriteWalker(VectorizeContraction(target), apply_recursively=False).rewrite_module(op)
