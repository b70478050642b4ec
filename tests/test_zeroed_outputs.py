"""Outputs the API allocates come zeroed (np.zeros: pages the system zeroes as they are first
touched), and the kernels of the ops whose output is mostly zeros are told so (`out_zeroed`):
nll_loss_backward then writes only the samples' elements, embedding_dense_backward only the rows
some index names. A caller's `out=` holds whatever it holds and is written everywhere, and so is
an allocated output large enough for the output pool (runtime/memory.py): it may be memory an
earlier output left, whatever that held."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close

from npugrad import ops
from npugrad.ops import common
from npugrad.reference import harness
from npugrad.runtime import pool

NLL, EMB = "nll_loss_backward", "embedding_dense_backward"
# Sizes on one block and over several (distribute-over-cores splits out's rows from 2 x 65536
# elements on).
NLL_SIZES = [(37, 11), (700, 300)]
EMB_SIZES = [(40, 9, 30), (3000, 64, 5000)]  # (indices, D, num_weights): most rows named by none


def _nll(rng, n, c, dtype, reduction):
    shapes = {"grad_output": (n,) if reduction == 0 else (), "self": (n, c), "target": (n,), "weight": (c,),
              "total_weight": (1,)}
    dts = dict.fromkeys(shapes, dtype) | {"target": np.dtype(np.int64)}
    a = harness.random_operands(NLL, shapes, dts, {"ignore_index": -100}, rng)
    a["target"][::5] = -100  # ignored samples write nothing either
    props = {"reduction": reduction, "ignore_index": -100}
    written = np.zeros((n, c), bool)
    kept = np.flatnonzero(a["target"] != -100)
    written[kept, a["target"][kept]] = True
    return a, props, written


def _call_nll(a, props, **kw):
    return ops.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"], props["reduction"],
                                 props["ignore_index"], a["total_weight"], **kw)


def _emb(rng, t, d, rows, dtype, padding_idx=-1):
    a = harness.random_operands(EMB, {"grad": (t, d), "indices": (t,)}, {"grad": dtype, "indices": np.int64},
                                {"num_weights": rows, "padding_idx": padding_idx}, rng)
    props = {"num_weights": rows, "padding_idx": padding_idx, "scale_grad_by_freq": False}
    named = np.zeros(rows, bool)
    named[a["indices"][a["indices"] != padding_idx]] = True
    return a, props, named


def _call_emb(a, props, **kw):
    return ops.embedding_dense_backward(a["grad"], a["indices"], props["num_weights"], props["padding_idx"],
                                        props["scale_grad_by_freq"], **kw)


@pytest.fixture(params=[1, 2, 3], ids=lambda n: f"{n}-threads")
def threads(request):
    before = pool.threads()
    pool.set_threads(request.param)
    yield request.param
    pool.set_threads(before)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("n,c", NLL_SIZES)
@pytest.mark.parametrize("reduction", [0, 1])
def test_nll_allocated_and_given_out_match_the_reference(rng, threads, dtype, n, c, reduction):
    a, props, _ = _nll(rng, n, c, dtype, reduction)
    want = harness.expected(NLL, a, props)["out"]
    for _ in range(2):  # the second call replays the first's plan: a fresh zeroed array again
        got = _call_nll(a, props)
        assert_close(got, want)
        assert np.all(np.asarray(got, np.float32)[want == 0] == 0)
    given = np.full((n, c), np.nan, dtype)
    assert _call_nll(a, props, out=given) is given
    assert_close(given, want)
    assert not np.isnan(np.asarray(given, np.float32)).any()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("t,d,rows", EMB_SIZES)
@pytest.mark.parametrize("padding_idx", [-1, 4])
def test_embedding_allocated_and_given_out_match_the_reference(rng, threads, dtype, t, d, rows, padding_idx):
    a, props, named = _emb(rng, t, d, rows, dtype, padding_idx)
    assert not named.all()  # rows left to the zeros the allocation brings
    want = harness.expected(EMB, a, props)["out"]
    for _ in range(2):
        got = _call_emb(a, props)
        assert_close(got, want)
        assert np.all(np.asarray(got, np.float32)[~named] == 0)
    given = np.full((rows, d), np.nan, dtype)
    assert _call_emb(a, props, out=given) is given
    assert_close(given, want)
    assert not np.isnan(np.asarray(given, np.float32)).any()


@pytest.fixture
def unzeroed_allocations(monkeypatch):
    """Planned zero-filled outputs allocated full of NaN instead: what the kernel leaves unwritten
    shows (the zeros themselves would hide it)."""
    new = common.Planned.new

    def nan_instead_of_zeros(self):
        if self.fill == 0:
            return np.full(self.shape, np.nan, self.dtype)
        return new(self)

    monkeypatch.setattr(common.Planned, "new", nan_instead_of_zeros)


@pytest.mark.parametrize("n,c", NLL_SIZES)
def test_nll_kernel_writes_only_the_samples_into_an_allocated_out(rng, threads, unzeroed_allocations, n, c):
    a, props, written = _nll(rng, n, c, np.dtype(np.float32), 1)
    got = _call_nll(a, props)
    want = harness.expected(NLL, a, props)["out"]
    np.testing.assert_array_equal(got[written], want[written])
    assert np.isnan(got[~written]).all()


@pytest.mark.parametrize("t,d,rows", EMB_SIZES)
def test_embedding_kernel_writes_only_the_named_rows_of_an_allocated_out(rng, threads, unzeroed_allocations,
                                                                        t, d, rows):
    a, props, named = _emb(rng, t, d, rows, np.dtype(np.float32), padding_idx=4)
    got = _call_emb(a, props)
    want = harness.expected(EMB, a, props)["out"]
    np.testing.assert_array_equal(got[named], want[named])
    assert np.isnan(got[~named]).all()


@pytest.mark.parametrize("op", [NLL, EMB])
def test_a_pooled_allocated_out_is_written_everywhere(rng, threads, op):
    """An allocated output of the output pool's size reuses the memory of one that died (here
    full of NaN): its kernel is not told out_zeroed and writes every zero itself."""
    from npugrad.runtime import memory

    if memory.limit() == 0:
        pytest.skip("NPUGRAD_OUTPUT_POOL=0: allocated outputs are np.zeros")
    if op == NLL:
        a, props, _ = _nll(rng, 3000, 400, np.dtype(np.float32), 1)  # 4.6 MB of out
        shape, call = (3000, 400), lambda: _call_nll(a, props)
    else:
        a, props, _ = _emb(rng, 3000, 64, 20000, np.dtype(np.float32), padding_idx=4)  # 5.1 MB
        shape, call = (20000, 64), lambda: _call_emb(a, props)
    assert common.Planned(shape, np.dtype(np.float32), "").nbytes >= memory.MIN_BYTES
    memory.release()
    dead = memory.empty(shape, np.float32)
    dead.fill(np.nan)
    del dead  # its block goes back to the pool, NaN and all
    assert memory.kept_bytes() > 0
    got = call()
    assert memory.kept_bytes() == 0  # the output took that block
    np.testing.assert_array_equal(got, harness.expected(op, a, props)["out"])
