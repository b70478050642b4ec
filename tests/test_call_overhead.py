"""What a repeated API call remembers, and what it checks again every time.

A call signature met before (op, properties, thread count, every operand's dtype, shape and
strides) skips the compile-cache key and the kernel's argument checks (runtime/launch.py,
_specialised); an API call whose arguments' signature was met before replays its plan
(launch.Replay). Everything that depends on more than that is checked on every call: alignment
(the address), writeability, memory overlap (addresses), the values. A one-block launch of a
synchronized kernel builds no barrier (runtime/sync.py)."""

from __future__ import annotations

import numpy as np
import pytest
import forward_cases
from api_cases import BCE, EMA_ADAM, EMBEDDING, FLCE, NLL, OPS, OUTPUTS, Case, bce, default_case, overlapping
from conftest import assert_close
from test_fuzz_forward import run as run_forward_case
from test_sync import _expected, barriers_built, in_threads, rotate_kernel

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dtypes import BFLOAT16
from npugrad.ops.common import all_in_range
from npugrad.runtime import launch, sync
from npugrad.runtime.kernel import ArgumentError, Kernel


def _misaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` (same dtype, shape and strides) at an address one byte off."""
    raw = np.zeros(a.nbytes + 1, np.uint8)
    moved = raw[1:].view(a.dtype).reshape(a.shape)
    moved[...] = a
    return moved


def _remembered(case: Case) -> None:
    """Run `case` twice: its signature is then in the table."""
    for _ in range(2):
        case.copy().call()
    assert launch._SPECIALISED


@pytest.fixture
def counted(monkeypatch):
    """How many times calls compiled (looked up the compile cache) and checked a kernel's arguments."""
    counts = {"compile": 0, "layout": 0}
    compile_op, layout = launch.compile_op, Kernel.layout

    def counting_compile(*args, **kwargs):
        counts["compile"] += 1
        return compile_op(*args, **kwargs)

    def counting_layout(self, *args, **kwargs):
        counts["layout"] += 1
        return layout(self, *args, **kwargs)

    monkeypatch.setattr(launch, "compile_op", counting_compile)
    monkeypatch.setattr(Kernel, "layout", counting_layout)
    return counts


def test_a_repeated_signature_is_specialised_once(rng, counted):
    launch._SPECIALISED.clear()
    case = bce(rng, (6, 8), out=True)
    for _ in range(3):
        assert_close(case.copy().call()["out"], case.expected()["out"])
    assert counted == {"compile": 1, "layout": 1}
    # Other strides (same shape and dtype), another shape, another property: another signature.
    wide = case.copy()
    buf = np.zeros((6, 16), np.float32)
    buf[:, ::2] = wide.arrays["input_x"]
    wide.arrays["input_x"] = buf[:, ::2]
    assert_close(wide.call()["out"], case.expected()["out"])
    assert counted == {"compile": 2, "layout": 2}
    bce(rng, (6, 9), out=True).call()
    summed = case.copy()
    summed.scalars["reduction"] = 2
    assert_close(summed.call()["out"], summed.expected()["out"])
    assert counted == {"compile": 4, "layout": 4}


def test_a_non_contiguous_array_after_a_contiguous_one_gets_the_strided_kernel(rng):
    case = bce(rng, (6, 8), out=True)
    _remembered(case)
    contiguous = ops.binary_cross_entropy_grad.plan(**case.arrays, **case.scalars).kernel
    transposed = case.copy()
    for k in ("input_x", "input_y", "weight", "out"):
        transposed.arrays[k] = np.ascontiguousarray(case.arrays[k].T).T
    assert not transposed.arrays["input_x"].flags.c_contiguous
    assert_close(transposed.call()["out"], case.expected()["out"])
    # The contiguous kernel itself still refuses such arrays.
    t = transposed.arrays
    with pytest.raises(ArgumentError, match="is not C-contiguous"):
        contiguous(t["input_x"], t["input_y"], t["dloss"], t["weight"], t["out"])


@pytest.mark.parametrize("op", OPS)
def test_a_read_only_output_after_a_remembered_signature_is_rejected(rng, op):
    case = default_case(op, rng)
    _remembered(case)
    for name in OUTPUTS[op]:
        bad = case.copy()
        bad.arrays[name].flags.writeable = False
        bad.rejected(f"^{op}: parameter '{name}' is read-only")


@pytest.mark.parametrize("op", OPS)
def test_a_misaligned_array_after_a_remembered_signature_is_rejected(rng, op):
    case = default_case(op, rng)
    _remembered(case)
    for name, a in case.arrays.items():
        if not isinstance(a, np.ndarray) or a.itemsize == 1:
            continue
        bad = case.copy()
        bad.arrays[name] = _misaligned(a)
        assert (bad.arrays[name].shape, bad.arrays[name].strides) == (a.shape, a.strides)
        bad.rejected(f"^{op}: parameter '{name}' is not aligned")


@pytest.mark.parametrize("op", OPS)
def test_an_overlapping_output_after_a_remembered_signature_is_rejected(rng, op):
    """Same dtypes, shapes and strides as the remembered call; only the addresses differ."""
    case = default_case(op, rng)
    _remembered(case)
    for out in OUTPUTS[op]:
        for other, a in case.arrays.items():
            b = case.arrays[out]
            if other == out or not isinstance(a, np.ndarray) or not a.size or not b.size:
                continue
            bad = case.copy()
            bad.arrays[other], bad.arrays[out] = overlapping(a, b)
            bad.rejected(f"^{op}: .*overlap")


@pytest.mark.parametrize("op", OPS)
def test_an_output_that_is_an_input_after_a_remembered_signature_is_rejected(rng, op):
    case = default_case(op, rng)
    _remembered(case)
    for out in OUTPUTS[op]:
        b = case.arrays[out]
        for other, a in case.arrays.items():
            if other == out or not isinstance(a, np.ndarray) or (a.dtype, a.shape) != (b.dtype, b.shape):
                continue
            bad = case.copy()
            bad.arrays[out] = bad.arrays[other]
            with pytest.raises(ValueError, match=f"^{op}: .*overlap"):
                bad.call()


def test_the_table_of_specialised_signatures_is_bounded(rng, monkeypatch):
    monkeypatch.setattr(launch, "_SPECIALISED_MAX", 4)
    launch._SPECIALISED.clear()
    launch._REPLAYS.clear()
    for n in range(1, 12):
        case = bce(rng, (n,), out=True)
        assert_close(case.call()["out"], case.expected()["out"])
        assert len(launch._SPECIALISED) <= 4 and 0 < len(launch._REPLAYS) <= 4


def test_calls_under_a_pipeline_of_the_caller_are_not_remembered(rng):
    launch._SPECIALISED.clear()
    case = bce(rng, (6,), out=True)
    launch._REPLAYS.clear()
    with launch.using(Pipeline(vectorize=False)):
        for _ in range(2):
            assert_close(case.copy().call()["out"], case.expected()["out"])
    assert not launch._SPECIALISED and not launch._REPLAYS


def test_one_signature_from_several_threads(rng):
    cases = [default_case(op, np.random.default_rng(i)) for i, op in enumerate(OPS * 3)]
    for case in cases[:len(OPS)]:
        case.copy().call()  # compiled, and remembered
    wanted = [c.expected() for c in cases]
    results: list = [None] * len(cases)

    def run(i: int) -> None:
        for _ in range(20):
            results[i] = cases[i].copy().call()

    _, errors = in_threads(run, range(len(cases)), timeout=120)
    assert not errors
    for got, want in zip(results, wanted):
        for k in want:
            assert_close(got[k], want[k])


# -- launches ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def rotate():
    return rotate_kernel()


def test_a_one_block_launch_builds_no_barrier(rotate, monkeypatch):
    built = barriers_built(monkeypatch)
    out = np.full((5, 1), -1, np.int64)
    rotate(out, threads=1)
    np.testing.assert_array_equal(out, _expected(5, 1))
    assert built == []
    out = np.full((5, 3), -1, np.int64)
    rotate(out, threads=3)
    np.testing.assert_array_equal(out, _expected(5, 3))
    assert built == [3]


def test_one_block_launches_from_several_threads_take_turns_and_free_their_workspaces(rotate):
    """One-block launches share one set of launch services: they take turns, and each frees
    its workspaces when it ends."""
    outs = [np.full((20, 1), -1, np.int64) for _ in range(6)]

    def run(out):
        for _ in range(10):
            out[...] = -1
            rotate(out, threads=1)
            np.testing.assert_array_equal(out, _expected(20, 1))

    _, errors = in_threads(run, outs)
    assert not errors
    assert sync._current is None and not sync.launch(1).buffers


def test_a_launch_that_fails_releases_the_launch_services(rotate):
    for blocks in (1, 2):
        with pytest.raises(RuntimeError, match="failed"), sync.launch(blocks):
            assert sync._state() is not None
            raise RuntimeError("failed")
        assert sync._state() is None and not sync._turn.locked()
    out = np.full((3, 2), -1, np.int64)
    rotate(out, threads=2)
    np.testing.assert_array_equal(out, _expected(3, 2))


def test_flce_and_ema_adam_results_stay_right_on_repeated_calls(rng):
    for op in (FLCE, EMA_ADAM, BCE):
        case = default_case(op, rng)
        want = case.expected()
        for _ in range(3):
            got = case.copy().call()
            for k in want:
                assert_close(got[k], want[k])


# -- value checks: they read the data on every call ------------------------------------------------


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, ">i8"])
def test_all_in_range(dtype):
    a = np.array([0, 3, 4, 2], dtype)
    assert all_in_range(a, 5) and not all_in_range(a, 4)
    assert all_in_range(a[::2], 5) and all_in_range(a[:0], 0) and all_in_range(np.array(3, dtype), 4)
    if np.dtype(dtype).kind == "i":
        info = np.iinfo(dtype)
        for bad in (-1, info.min):
            assert not all_in_range(np.array([0, bad], dtype), 5)
            assert not all_in_range(np.array([bad], dtype), 1 << 70)  # n beyond the dtype: still no negatives
        assert all_in_range(np.array([info.max], dtype), 1 << 70)


def test_the_range_checks_read_a_broadcast_index_array_without_copying_it():
    """np.broadcast_to(t, shape) (one id for every row) is checked on its distinct elements:
    NumPy's reductions copied it whole (2**27 int64: 1 GiB and 2.5 s); the first bad id is
    still its position in the broadcast array."""
    import tracemalloc

    from npugrad.ops.common import first_bad_id

    big = np.broadcast_to(np.int64(3), (2**24,))
    tracemalloc.start()
    try:
        assert all_in_range(big, 4) and not all_in_range(big, 3)
        assert first_bad_id(big, -100, 3) == 0 and first_bad_id(big, 3, 3) is None
        assert tracemalloc.get_traced_memory()[1] < 1 << 20
    finally:
        tracemalloc.stop()
    rng = np.random.default_rng(11)
    for _ in range(300):
        shape = tuple(int(d) for d in rng.integers(1, 5, int(rng.integers(1, 4))))
        kept = tuple(d if rng.random() < 0.5 else 1 for d in shape)
        ids = np.broadcast_to(rng.integers(-3, 12, kept), shape)
        flat = ids.ravel()
        bad = np.flatnonzero(((flat < 0) | (flat >= 10)) & (flat != -1))
        assert first_bad_id(ids, -1, 10) == (int(bad[0]) if bad.size else None)
        assert all_in_range(ids, 10) == bool(((flat >= 0) & (flat < 10)).all())


@pytest.mark.parametrize("bad", [-1, 9, 2**40])
def test_an_out_of_range_target_after_a_remembered_signature_is_rejected(rng, bad):
    case = default_case(FLCE, rng)
    case.arrays["target_mask"][:] = False  # every row's target in this shard
    _remembered(case)
    wrong = case.copy()
    wrong.arrays["masked_target"][3] = bad
    wrong.rejected(rf"^{FLCE}: parameter 'masked_target' .* got {bad} at row 3")
    wrong.arrays["target_mask"][3] = True  # that row's target is in another shard: not read
    got = wrong.call()
    want = wrong.expected()
    for k in want:
        assert_close(got[k], want[k])


def test_an_out_of_range_index_after_a_remembered_signature_is_rejected(rng):
    case = default_case(EMBEDDING, rng)
    _remembered(case)
    for bad in (-1, case.scalars["num_weights"]):
        wrong = case.copy()
        wrong.arrays["indices"][2] = bad
        with pytest.raises(ValueError, match=rf"^{EMBEDDING}: parameter 'indices' .* got {bad} at position \(2,\)"):
            wrong.call()


def test_an_out_of_range_target_of_nll_after_a_remembered_signature_is_rejected(rng):
    case = default_case(NLL, rng)
    _remembered(case)
    ignored = case.copy()
    ignored.arrays["target"][1] = case.scalars["ignore_index"]  # ignored: not a class, and fine
    assert_close(ignored.call()["out"], ignored.expected()["out"])
    for bad in (-1, 5, 1 << 40):
        wrong = case.copy()
        wrong.arrays["target"][1] = bad
        with pytest.raises(ValueError, match=rf"^{NLL}: parameter 'target' has value {bad} at position 1"):
            wrong.call()


# -- replay: a signature met before is not planned again (launch.Replay) -----------------------------


@pytest.fixture
def replayed(monkeypatch):
    """How many calls replayed a plan (Replay.call made their Call) rather than planning."""
    count = [0]
    original = launch.Replay.call

    def counting(self, *args, **kwargs):
        call = original(self, *args, **kwargs)
        count[0] += call is not None
        return call

    monkeypatch.setattr(launch.Replay, "call", counting)
    launch._REPLAYS.clear()
    return count


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("out", [True, False], ids=["outputs given", "outputs allocated"])
def test_a_signature_met_before_is_replayed_on_new_arrays(rng, replayed, op, out):
    """Each call after the first replays the plan on other arrays of the same signature, with
    the right results, in the caller's outputs or in fresh ones (never the last call's)."""
    case = default_case(op, rng, out=out)
    results = []
    for i in range(3):
        fresh = default_case(op, np.random.default_rng(i), out=out)
        fresh = Case(op, {k: None if a is None else a.astype(case.arrays[k].dtype) for k, a in fresh.arrays.items()},
                     dict(case.scalars))
        want = fresh.expected()
        got = fresh.call()
        for k in want:
            assert_close(got[k], want[k])
            if k in fresh.arrays and fresh.arrays[k] is not None:
                assert got[k] is fresh.arrays[k]
        results.append(got)
    assert replayed[0] == 2
    for k in results[0]:
        assert len({id(r[k]) for r in results}) == 3


def test_ema_adam_replays_a_new_step_and_new_hyper_parameters(rng, replayed):
    """The step count and the float hyper-parameters change from call to call (a schedule): a
    call with new ones still replays, and the kernel reads the new values."""
    for i, (step, lr) in enumerate([(1, 1e-3), (2, 5e-4), (7, 2e-2), (8, 0.0)]):
        case = default_case(EMA_ADAM, np.random.default_rng(i))
        case.scalars |= {"step": step, "lr": lr, "weight_decay": 0.01 * i}
        want = case.expected()
        got = case.call()
        for k in want:
            assert_close(got[k], want[k])
    assert replayed[0] == 3


GOOD_PER_CALL = {"step": 3, "lr": 1e-3, "eps": 1e-8, "beta1": 0.9, "beta2": 0.999, "ema_decay": 0.9999,
                 "weight_decay": 0.01}


@pytest.mark.parametrize("bad, match", [
    ({"step": 0}, r"parameter 'step' must be >= 1 when bias_correction is on, got 0"),
    ({"step": 1 << 63}, r"parameter 'step' must be an int64 step count, an int64, got 9223372036854775808"),
    ({"step": True}, r"parameter 'step' must have dtype int64, got bool"),
    ({"lr": float("nan")}, r"parameter 'lr' must be a finite real number, got nan"),
    ({"eps": 1e39}, r"parameter 'eps' must be finite as a float32"),
    # In range for the op's check, not only finite (a replay once took these: var became NaN/inf).
    ({"beta2": 1.5}, r"property 'beta2' must be in \[0, 1\) as a float32, got 1.5"),
    ({"beta1": 1.0}, r"property 'beta1' must be in \[0, 1\) as a float32, got 1.0"),
    ({"beta1": 0.99999999}, r"property 'beta1' must be in \[0, 1\) as a float32, got 0.99999999"),
    ({"lr": -5.0}, r"property 'lr' must be >= 0, got -5.0"),
    ({"eps": -1.0}, r"property 'eps' must be >= 0, got -1.0"),
    ({"ema_decay": 2.0}, r"property 'ema_decay' must be in \[0, 1\], got 2.0"),
    ({"weight_decay": -3.0}, r"property 'weight_decay' must be >= 0, got -3.0"),
])
def test_a_bad_per_call_value_after_a_remembered_signature_is_rejected_as_when_planned(rng, bad, match, replayed):
    """What a replayed call makes again from its arguments is checked again, with the plan's
    message, before anything is written."""
    case = default_case(EMA_ADAM, rng)
    # The good call passes the same parameters, good values of the same types: the same signature.
    case.scalars |= {k: GOOD_PER_CALL[k] for k in bad}
    messages = []
    for turn in range(2):  # planned, then (the signature remembered) replayed
        wrong = case.copy()
        wrong.scalars |= bad
        with pytest.raises((ValueError, TypeError), match=rf"^{EMA_ADAM}: {match}") as info:
            before = wrong.snapshot()
            wrong.call()
        assert wrong.snapshot() == before
        messages.append(str(info.value))
        done = replayed[0]
        case.copy().call()  # the good call of that signature: remembered, then replayed
        if turn:  # replayed: so the second bad call had a remembered signature
            assert replayed[0] == done + 1
    assert messages[0] == messages[1]


def test_an_array_passed_for_two_parameters_is_not_replayed_from_one(rng, replayed):
    """A plan given one array for two parameters says nothing of which operand came from
    which: it is not remembered, and a later call with two arrays gets each in its place."""
    case = default_case(FLCE, rng)
    same = case.copy()
    same.arrays["sum_exp_logits"] = same.arrays["logits_max"]
    same.call()
    assert not launch._REPLAYS
    for i in range(2):
        fresh = case.copy()
        fresh.arrays["sum_exp_logits"] = fresh.arrays["sum_exp_logits"] + np.float32(i)
        want = fresh.expected()
        got = fresh.call()
        for k in want:
            assert_close(got[k], want[k])
    assert replayed[0] == 1


def test_foreign_arrays_and_step_arrays_are_planned_on_every_call(rng, replayed):
    """Only plain ndarrays and Python scalars make a signature; an EMA-Adam step given as an
    int64 array (what the plan makes of an int) is planned on every call."""
    case = default_case(EMA_ADAM, rng)
    case.scalars["step"] = np.array([3], np.int64)
    for _ in range(3):
        case.copy().call()
    sub = default_case(BCE, rng, out=True)
    sub.arrays["input_x"] = sub.arrays["input_x"].view(np.recarray)
    for _ in range(2):
        sub.call()
    assert replayed[0] == 0 and not launch._REPLAYS


# -- replay of the forward ops: results that are NamedTuples and tuples holding Nones ---------------

FORWARD_CASES = {
    "max_sum": lambda rng, out: forward_cases.max_sum(rng, bt=9, h=12, v=20, start=40, outputs=out),
    "max_sum_logits_softcap_ignore": lambda rng, out: forward_cases.max_sum(
        rng, bt=9, h=12, v=20, start=40, outputs=out,
        options={"return_logits": True, "return_sum_logits": True, "softcap": 5.0, "ignore_index": 41}),
    "max_sum_logits_block": lambda rng, out: forward_cases.max_sum(
        rng, bt=9, h=12, v=20, dtype=BFLOAT16, outputs=out, options={"logits_block": 8}),
    "loss": lambda rng, out: forward_cases.loss_with_max_sum(rng, bt=9, outputs=out),
    "loss_softmax_smoothing": lambda rng, out: forward_cases.loss_with_max_sum(
        rng, bt=9, v=14, outputs=out, options={"label_smoothing": 0.1, "vocab_size": 30, "ignore_index": -1}),
}


@pytest.mark.parametrize("name", FORWARD_CASES)
@pytest.mark.parametrize("out", [True, False], ids=["outputs given", "outputs allocated"])
def test_the_forward_ops_replay_a_signature_met_before_on_new_arrays(replayed, name, out):
    """The forward ops' results (an OnlineMaxSum, a (loss, softmax) tuple, Nones where a result
    is not asked for) come back of their type, holding the new call's arrays (the caller's
    outputs, or fresh ones), with the values of the reference; the shard's vocabulary range,
    an array the plan makes of two scalars, is the signature's."""
    make = FORWARD_CASES[name]
    outputs = tuple(forward_cases.OUTPUTS[make(np.random.default_rng(0), ()).op])
    seen = []
    for i in range(3):
        case = make(np.random.default_rng(i), outputs if out else ())
        assert run_forward_case(case, valid=True) == "correct"
        seen.append(getattr(ops, case.op)(**case.kwargs()))
    assert replayed[0] == 5
    assert type(seen[0]) is type(seen[1]) is type(seen[2])
    for fields in zip(*seen):
        present = [f for f in fields if f is not None]
        assert len(present) in (0, 3)
        assert len({id(f) for f in present}) == len(present)  # each call's own arrays


def test_a_new_vocabulary_range_of_a_remembered_signature_is_its_own(replayed):
    """Two shards of the same shapes differ only by their range's values: each call reads its
    own range (the range is part of the signature), replayed or not."""
    rng = np.random.default_rng(3)
    for start in (0, 20, 0, 20, 7):
        assert run_forward_case(forward_cases.max_sum(rng, bt=9, h=12, v=20, start=start), valid=True) == "correct"
    assert replayed[0] == 2


def test_overlapping_forward_outputs_after_a_remembered_signature_are_rejected(replayed):
    """Outputs sharing memory are rejected with the plan's message, replayed signature or not,
    and nothing is written."""
    rng = np.random.default_rng(4)
    for _ in range(2):
        assert run_forward_case(forward_cases.max_sum(rng, bt=9, h=12, v=20, outputs=("logits_max_out",
                                                                                    "sum_exp_logits_out")),
                                valid=True) == "correct"
    case = forward_cases.max_sum(rng, bt=9, h=12, v=20)
    buffer = np.full(17, np.nan, np.float32)
    case.arrays["logits_max_out"], case.arrays["sum_exp_logits_out"] = buffer[:9], buffer[8:]
    before = buffer.copy()
    with pytest.raises(ValueError, match=r"^fused_linear_online_max_sum: .*'sum_exp_logits_out'.*overlap"):
        ops.fused_linear_online_max_sum(**case.kwargs())
    assert np.array_equal(buffer, before, equal_nan=True)


def test_scalars_given_as_0d_arrays_are_not_replayed_from_another_value(replayed):
    """A scalar parameter may be a 0-d array (ops/common.real and integer read it): its value
    shapes the plan, but a signature keys an array by its dtype and shape only. A second call
    with another 0-d value replayed the first call's plan: BCE's mean after its sum (-4 for -1),
    an embedding gradient of the first num_weights, another shard's range, and a dloss the
    second reduction rejects let through (found by a probe). Such a call is planned anew."""
    x, y, d = np.full(4, 0.25, np.float32), np.ones(4, np.float32), np.ones(1, np.float32)
    ops.binary_cross_entropy_grad(x, y, d, None, np.array(2))
    assert np.array_equal(ops.binary_cross_entropy_grad(x, y, d, None, np.array(1)),
                          ops.binary_cross_entropy_grad(x, y, d, None, 1))
    g, k = np.ones((3, 2), np.float32), np.array([0, 1, 1])
    ops.embedding_dense_backward(g, k, np.array(3))
    assert ops.embedding_dense_backward(g, k, np.array(5)).shape == (5, 2)
    xf, w, t = np.ones((1, 2), np.float32), np.ones((10, 2), np.float32), np.array([105], np.int64)
    ops.fused_linear_online_max_sum(xf, w, t, np.array(0), np.array(10))
    r = ops.fused_linear_online_max_sum(xf, w, t, np.array(100), np.array(110))
    assert r.masked_target[0] == 5 and r.target_mask[0] & 1 == 0
    ops.binary_cross_entropy_grad(x, y, np.ones(4, np.float32), None, np.array(0))
    with pytest.raises(ValueError, match="binary_cross_entropy_grad: parameter 'dloss'"):
        ops.binary_cross_entropy_grad(x, y, np.ones(4, np.float32), None, np.array(1))
    assert replayed[0] == 0
