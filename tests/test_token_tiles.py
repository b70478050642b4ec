"""The gradient's balanced token tiles (linear_nests.balanced_starts), evaluated from the IR the
fuse pass emits, and the starts a pass splitting the loop computes from the loop itself
(tiling.blocks.TokenLoop): every row in exactly one tile, no tile over the tile size or empty,
and each block of a wavefront over `blocks` blocks within a micro-kernel block of BT / blocks."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith, func, scf
from xdsl.dialects.builtin import IndexType, IntegerAttr, ModuleOp
from xdsl.ir import Block, Region, SSAValue

from npugrad.diagnostics import PassFailure
from npugrad.dialect.attributes import ROLE, NestRole, NestRoleAttr
from npugrad.ir import IRBuilder
from npugrad.passes.linear_nests import TokenTiles, balanced_starts
from npugrad.passes.tiling.blocks import TokenLoop, nest_role

_FOLD = {
    arith.CeilDivUIOp: lambda a, b: -(-a // b),
    arith.DivUIOp: lambda a, b: a // b,
    arith.MuliOp: lambda a, b: a * b,
    arith.AddiOp: lambda a, b: a + b,
    arith.SubiOp: lambda a, b: a - b,
    arith.MinSIOp: min,
    arith.MinUIOp: min,
    arith.MaxUIOp: max,
}


def value_of(v: SSAValue, known: dict[SSAValue, int] | None = None) -> int:
    """An index value computed by constants and the arith ops above (`known`: given values)."""
    if known and v in known:
        return known[v]
    op = v.owner
    if isinstance(op, arith.ConstantOp):
        return op.value.value.data  # type: ignore[attr-defined]
    return _FOLD[type(op)](*(value_of(o, known) for o in op.operands))


def evaluator(v: SSAValue, given: SSAValue) -> Callable[[int], int]:
    """value_of(v, {given: i}) as a function of i: what does not depend on `given` is computed
    once (the property test evaluates a tile's start at up to 60,000 indices)."""
    built: dict[SSAValue, tuple[Callable[[int], int], bool]] = {}

    def build(w: SSAValue) -> tuple[Callable[[int], int], bool]:  # (the function, whether it reads i)
        if w not in built:
            if w is given:
                built[w] = (lambda i: i), True
            else:
                fold = _FOLD.get(type(w.owner))
                parts = [build(o) for o in w.owner.operands] if fold else []
                fns = [f for f, _ in parts]
                if any(reads for _, reads in parts):
                    built[w] = (lambda i: fold(*(f(i) for f in fns))), True
                else:
                    constant = fold(*(f(0) for f in fns)) if fold else value_of(w)
                    built[w] = (lambda i: constant), False
        return built[w]

    return build(v)[0]


def _builder():
    block = Block()
    ret = func.ReturnOp()
    block.add_op(ret)
    ModuleOp([func.FuncOp("f", ([], []), Region(block))])
    return IRBuilder.before(ret)


def balanced_loop(bt: int, tile: int, balance: tuple[int, int]):
    """(builder, the token loop TokenTiles builds over `bt` rows, its t0, its tb), in a function."""
    e = _builder()
    tiles = TokenTiles(e, e.idx(bt), tile, balance)
    with tiles.loop(e) as (t0, tb):
        e.emit(arith.AddiOp(t0, tb))
    return e, next(o for o in e.anchor.parent.ops if isinstance(o, scf.ForOp)), t0, tb


def starts(bt: int, tile: int, blocks: int, multiple: int) -> list[int]:
    """start(0), ..., start(count), as the emitted IR computes them: the start of a tile index
    emitted once, evaluated at every index."""
    e = _builder()
    count, start = balanced_starts(e, e.idx(bt), tile, blocks, multiple)
    index = e.emit(arith.ConstantOp(IntegerAttr(0, IndexType())))  # a value of its own, given at evaluation
    first = start(e, index)
    first_at = evaluator(first, index)
    return [first_at(i) for i in range(value_of(count) + 1)]


def block_rows(s: list[int], blocks: int) -> list[int]:
    """Rows of each block of a wavefront taking [b·count/P, (b+1)·count/P) of the tiles."""
    count = len(s) - 1
    return [s[(b + 1) * count // blocks] - s[b * count // blocks] for b in range(blocks)]


def test_the_documented_examples():
    s = starts(2048, 186, 2, 6)
    assert len(s) - 1 == 12 and block_rows(s, 2) == [1026, 1022]
    assert [b - a for a, b in itertools.pairwise(s)] == [174, 168] * 5 + [174, 164]
    assert block_rows(starts(4096, 186, 2, 6), 2) == [2052, 2044]
    # BT = 100, tiles of 32, 3 blocks (the fuse pass's lit test): 6 tiles, 18 rows but the last.
    assert starts(100, 32, 3, 6) == [0, 18, 36, 54, 72, 90, 100]


@settings(max_examples=300, deadline=None)
@given(bt=st.integers(0, 60000), tile=st.integers(1, 512), blocks=st.integers(1, 8),
       multiple=st.sampled_from([1, 4, 6, 8, 14]))
def test_tiles_cover_bt_within_the_tile_size_and_balance_the_blocks(bt, tile, blocks, multiple):
    unit = multiple if tile >= multiple else 1
    s = starts(bt, tile, blocks, multiple)
    count = len(s) - 1
    assert count >= 1 and s[0] == 0 and s[-1] == bt
    sizes = [b - a for a, b in itertools.pairwise(s)]
    assert max(sizes) <= tile
    assert bt == 0 or min(sizes) >= 1, "an empty tile"
    assert all(a % unit == 0 for a in s[:-1]), "a tile starts inside a micro-kernel block"
    units = -(-bt // unit)
    assert count % blocks == 0 or count == max(units, 1)
    if count % blocks == 0:
        rows = block_rows(s, blocks)
        assert max(rows) - min(rows) <= 2 * unit - 1, rows


def test_a_split_of_the_loop_computes_each_tiles_start_from_the_loop():
    """TokenLoop.start clones the body's computation of its first row: it agrees with the
    fuse pass's formula at every index, and its clone carries no token_start mark."""
    e, loop, t0, tb = balanced_loop(1001, 64, (3, 6))
    tokens = TokenLoop(loop)
    assert tokens.rows is e.idx(1001) and tokens.first_row is t0
    count = value_of(tokens.count(e))
    assert count % 3 == 0
    want = starts(1001, 64, 3, 6)
    got = [value_of(tokens.start(e, e.idx(i))) for i in range(count + 1)]
    assert got == want
    marked = [o for o in loop.walk() if nest_role(o) is NestRole.TOKEN_START]
    assert marked == [t0.owner]
    assert [o for o in e.anchor.parent.ops if nest_role(o) is NestRole.TOKEN_START] == []
    # The body's own tile size: start(i + 1) - start(i), at every index.
    for i in range(count):
        assert value_of(tb, {loop.body.block.args[0]: i}) == want[i + 1] - want[i]


def test_a_loop_over_tile_indices_that_lost_its_mark_is_an_error_not_a_loop_over_rows():
    _, loop, t0, _ = balanced_loop(1001, 64, (2, 6))
    ROLE.remove(t0.owner)
    with pytest.raises(PassFailure, match="token_start"):
        TokenLoop(loop)
    uniform, loop, t0, _ = balanced_loop(1001, 64, (0, 1))
    by_rows = TokenLoop(loop)
    assert by_rows.first_row is t0
    assert [value_of(by_rows.start(uniform, uniform.idx(i))) for i in range(value_of(by_rows.count(uniform)) + 1)] == \
        [0, 64, 128, 192, 256, 320, 384, 448, 512, 576, 640, 704, 768, 832, 896, 960, 1001]


def test_a_token_start_mark_on_another_op_is_an_error_naming_it():
    _, loop, t0, tb = balanced_loop(1001, 64, (2, 6))
    ROLE.remove(t0.owner)
    ROLE.set(tb.owner, NestRoleAttr(NestRole.TOKEN_START))
    with pytest.raises(PassFailure, match="token_start.*not 'arith.subi'"):
        TokenLoop(loop)
