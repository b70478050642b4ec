"""nll_loss_backward and embedding_dense_backward through the tiled path (tile-for-target for
`host` and `npu-a2`, blocks on the thread pool): results against the reference, bit for bit those
of the untiled kernels, and the same for 1 and 2 threads; hand-set tiles force many tiles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from test_embedding import _expected as _emb_want
from test_embedding import _operands as _emb_operands
from test_nll import _call as _nll
from test_nll import _operands as _nll_operands
from test_nll import _want as _nll_want
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dialect import EmbeddingDenseBackwardOp, NLLLossBackwardOp
from npugrad.dialect.attributes import TileSizesAttr
from npugrad.dtypes import BFLOAT16
from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass
from npugrad.runtime import pool
from npugrad.runtime.launch import launch, using

TARGETS = ["host", "npu-a2"]
F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
TARGET_DTYPES = [np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.uint8)]
INDEX_DTYPES = [np.dtype(np.int32), np.dtype(np.int64)]


@dataclass(frozen=True)
class SetTiles(ModulePass):
    """Hand-set tile sizes on every op of one kind (after choose-tile-sizes, which keeps them)."""

    name = "test-set-tiles"
    op: str
    tiles: tuple[tuple[str, int], ...]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for g in op.walk():
            if g.name == self.op:
                g.tile_sizes = TileSizesAttr(dict(self.tiles))


def pipeline(target: str, op: str | None = None, **tiles: int) -> Pipeline:
    """The tiled pipeline for `target`; with tiles, those replace the chosen ones for `op`."""
    if not tiles:
        return Pipeline(target=target)
    forced = SetTiles(op, tuple(sorted(tiles.items())))  # type: ignore[arg-type]
    return Pipeline(target=target, fused_passes=[FuseLinearCrossEntropyGradPass(), forced])


@pytest.fixture
def threads():
    """set_threads, restored afterwards."""
    before = pool.threads()
    yield pool.set_threads
    pool.set_threads(before)


def assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8), np.ascontiguousarray(want).view(np.uint8))


# -- nll_loss_backward ---------------------------------------------------------------------------

NLL = "nll_loss_backward"
NLL_OP = NLLLossBackwardOp.name


def _nll_tiled(a, reduction, p: Pipeline, ignore_index=-100):
    """The tiled result, checked against the reference and bit for bit against the untiled kernel."""
    with using(p):
        got = _nll(a, reduction, ignore_index)
    with np.errstate(divide="ignore", invalid="ignore"):
        assert_close(got, _nll_want(a, reduction, ignore_index))
    assert_bits(got, _nll(a, reduction, ignore_index))
    return got


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("one_d", [False, True], ids=["2d", "1d"])
def test_nll_matches_reference_and_untiled(rng, target, dtype, reduction, one_d):
    a = _nll_operands(rng, 37, 19, dtype, np.int64, reduction, one_d=one_d)
    got = _nll_tiled(a, reduction, pipeline(target))
    assert got.dtype == dtype and got.shape == a["self"].shape


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("target_dtype", TARGET_DTYPES, ids=str)
@pytest.mark.parametrize("one_d", [False, True], ids=["2d", "1d"])
def test_nll_target_dtypes(rng, target, target_dtype, one_d):
    a = _nll_operands(rng, 30, 256, F16, target_dtype, 0, one_d=one_d)
    if target_dtype == np.uint8 and not one_d:
        a["target"][:6] = [200, 255, 0, 128, 127, 1]  # zero-extended: none of them is negative
    _nll_tiled(a, 0, pipeline(target, NLL_OP, rows=4, c=48))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("ignore", [3, -100, 0])
def test_nll_ignore_index(rng, target, reduction, ignore):
    a = _nll_operands(rng, 40, 8, F32, np.int32, reduction, ignore)
    a["target"][:4] = ignore  # certainly ignored rows, among 10% random ones
    got = _nll_tiled(a, reduction, pipeline(target, NLL_OP, rows=3, c=3), ignore)
    ignored = a["target"] == ignore
    assert not np.any(got[ignored]) and np.all(np.count_nonzero(got[~ignored], axis=1) == 1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("ignore", [4, 5, -100])
def test_nll_one_d_ignored_or_not(rng, target, ignore):
    a = _nll_operands(rng, 1, 26, F32, np.int64, 2, ignore, one_d=True)
    a["target"] = np.array(4)
    got = _nll_tiled(a, 2, pipeline(target, NLL_OP, rows=1, c=4), ignore)
    assert np.count_nonzero(got) == (0 if ignore == 4 else 1)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n,c", [(1, 1), (1, 7), (5, 1), (0, 4), (0, 0), (3, 0), (129, 257)], ids=str)
@pytest.mark.parametrize("reduction", [0, 1])
def test_nll_sizes_not_multiples_of_tiles(rng, target, n, c, reduction):
    a = _nll_operands(rng, n, c, F32, np.int64, reduction)
    got = _nll_tiled(a, reduction, pipeline(target, NLL_OP, rows=4, c=5))
    assert got.shape == (n, c)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tiles", [{}, {"rows": 3, "c": 4}], ids=["chosen", "hand"])
def test_nll_strided_inputs_and_output(rng, target, tiles):
    a = _nll_operands(rng, 40, 30, F16, np.int32, 0)
    views = {
        "grad_output": a["grad_output"][::2],
        "self": a["self"][::2, ::3],
        "target": np.where(a["target"] < 0, a["target"], a["target"] % 10)[::2],
        "weight": a["weight"][::-3],
        "total_weight": a["total_weight"],
    }
    base = np.full((20, 20), np.nan, F16)
    out = base[:, ::2]
    with using(pipeline(target, NLL_OP, **tiles)):
        got = _nll(views, 0, out=out)
    assert got is out
    assert_close(out, _nll_want(views, 0))
    assert_bits(out, _nll(views, 0))
    assert np.all(np.isnan(base[:, 1::2])), "wrote between the elements of a strided out"


@pytest.mark.parametrize("target", TARGETS)
def test_nll_mean_with_zero_total_weight_follows_ieee(rng, target):
    a = _nll_operands(rng, 4, 3, F32, np.int64, 1) | {"total_weight": np.zeros(1, np.float32)}
    a["target"][:] = [0, -100, 2, -100]
    got = _nll_tiled(a, 1, pipeline(target, NLL_OP, rows=1, c=2))
    assert np.all(np.isinf(got[[0, 2], a["target"][[0, 2]]]))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll_one_and_two_threads_agree(rng, threads, target, reduction):
    a = _nll_operands(rng, 100, 50, BFLOAT16, np.int64, reduction)
    results = []
    for n in (1, 2):
        threads(n)
        results.append(_nll_tiled(a, reduction, pipeline(target, NLL_OP, rows=7, c=9)))
    assert_bits(results[1], results[0])


# -- embedding_dense_backward ---------------------------------------------------------------------

EMB_OP = EmbeddingDenseBackwardOp.name


def _emb_tiled(a, num_weights, p: Pipeline, padding_idx=-1, scale=False, out_dtype=None):
    """The tiled result, checked against the reference and bit for bit against the untiled kernel."""
    d = a["grad"].shape[-1]

    def out():
        return None if out_dtype is None else np.full((num_weights, d), np.nan, out_dtype)

    with using(p):
        got = ops.embedding_dense_backward(a["grad"], a["indices"], num_weights, padding_idx, scale, out=out())
    assert_close(got, _emb_want(a, num_weights, padding_idx, scale))
    assert_bits(got, ops.embedding_dense_backward(a["grad"], a["indices"], num_weights, padding_idx, scale, out=out()))
    return got


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("scale", [False, True], ids=["sum", "scaled"])
@pytest.mark.parametrize("padding_idx", [-1, 3, 23], ids=["none", "3", "last"])
def test_embedding_matches_reference_and_untiled(rng, target, dtype, scale, padding_idx):
    index_dtype = INDEX_DTYPES[padding_idx % 2]
    a = _emb_operands(rng, (37, 13), (37,), 24, dtype, index_dtype, padding_idx)
    got = _emb_tiled(a, 24, pipeline(target), padding_idx, scale)
    assert got.dtype == dtype and got.shape == (24, 13)
    if padding_idx >= 0:
        assert np.all(np.asarray(got, F32)[padding_idx] == 0)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "grad_dtype,out_dtype", [(F32, F16), (F32, BFLOAT16), (F16, F32), (BFLOAT16, F32), (F16, BFLOAT16)], ids=str
)
def test_embedding_out_dtype_differs_from_grad(rng, target, grad_dtype, out_dtype):
    a = _emb_operands(rng, (6, 11, 17), (66,), 10, grad_dtype, np.int32, padding_idx=0)
    _emb_tiled(a, 10, pipeline(target, EMB_OP, rows=3, d=5), 0, True, out_dtype)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "grad_shape,indices_shape",
    [((3, 5, 8), (5, 3)), ((15, 8), (3, 1, 5)), ((8,), ()), ((2, 1, 3, 1, 2, 1, 2, 5), (4, 6))],
    ids=str,
)
def test_embedding_indices_and_grad_of_any_rank(rng, target, grad_shape, indices_shape):
    a = _emb_operands(rng, grad_shape, indices_shape, 9)
    _emb_tiled(a, 9, pipeline(target, EMB_OP, rows=2, d=3), scale=True)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize(
    "grad_shape,indices_shape,num_weights",
    [((0, 4), (0,), 5), ((2, 0, 4), (0, 3), 5), ((4, 0), (4,), 5), ((0, 3), (0,), 0), ((3, 0), (3,), 0)],
    ids=str,
)
def test_embedding_empty(rng, target, grad_shape, indices_shape, num_weights):
    grad = rng.standard_normal(grad_shape).astype(np.float32)
    indices = rng.integers(0, 5, indices_shape)
    out = np.full((num_weights, grad_shape[-1]), np.nan, np.float32)
    with using(pipeline(target, EMB_OP, rows=2, d=3)):
        got = ops.embedding_dense_backward(grad, indices, num_weights, out=out)
    assert got is out
    np.testing.assert_array_equal(out, np.zeros_like(out))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("tiles", [{}, {"rows": 5, "d": 4}], ids=["chosen", "hand"])
def test_embedding_strided_inputs_and_output(rng, target, tiles):
    a = _emb_operands(rng, (20, 9, 30), (60,), 12, padding_idx=4)
    grad = a["grad"][::2, 1::3, ::2]  # (10, 3, 15)
    indices = a["indices"].reshape(30, 2).astype(np.int32)[::2, ::-1]  # (15, 2)
    big = np.full((12, 40), np.nan, BFLOAT16)
    out = big[:, 5::2][:, :15]
    with using(pipeline(target, EMB_OP, **tiles)):
        got = ops.embedding_dense_backward(grad, indices, 12, 4, True, out=out)
    assert got is out
    assert_close(out, _emb_want({"grad": grad, "indices": indices}, 12, 4, True))
    assert_bits(out, ops.embedding_dense_backward(grad, indices, 12, 4, True, out=np.empty((12, 15), BFLOAT16)))
    assert np.all(np.isnan(np.asarray(big[:, :5], F32)))  # nothing outside the view is written


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_embedding_one_and_two_threads_agree(rng, threads, target, dtype):
    # Many contributions per row, rows and D not multiples of the tiles.
    a = _emb_operands(rng, (3000, 37), (3000,), 29, dtype, padding_idx=5)
    results = []
    for n in (1, 2):
        threads(n)
        results.append(_emb_tiled(a, 29, pipeline(target, EMB_OP, rows=4, d=16), 5, True))
    assert_bits(results[1], results[0])


@pytest.mark.parametrize("target", TARGETS)
def test_embedding_kernel_skips_indices_out_of_range(rng, target):
    # The API rejects them; the tiled kernel itself must still neither read nor write out of bounds.
    grad = rng.standard_normal((6, 4)).astype(np.float32)
    indices = np.array([1, -1, 3, 2**40, 1, 3], np.int64)
    out = np.full((4, 4), np.nan, np.float32)
    props = {"num_weights": 4, "padding_idx": -1, "scale_grad_by_freq": True}
    launch(EmbeddingDenseBackwardOp, {"grad": grad, "indices": indices, "out": out}, props,
           pipeline=pipeline(target, EMB_OP, rows=1, d=3))
    want = np.zeros((4, 4), np.float32)
    want[1] = (grad[0] + grad[4]) / 2
    want[3] = (grad[2] + grad[5]) / 2
    assert_close(out, want)
