"""binary_cross_entropy_grad and apply_fused_ema_adam through the tiled path (tile-for-target on
`host` and `npu-a2`): results within the reference's tolerance and bit-identical to the untiled
kernel, for every reduction/mode and dtype, any shape and layout, and any number of blocks."""

import contextlib

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dialect import ApplyFusedEmaAdamOp, BinaryCrossEntropyGradOp
from npugrad.dialect.attributes import TileSizesAttr
from npugrad.dialect.npu import AllocLocalOp, level_of
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness
from npugrad.runtime import pool
from npugrad.runtime.executable import Executable, block_kernels, signatures
from npugrad.runtime.launch import using
from npugrad.runtime.specialize import OperandClass, build_module
from npugrad.targets import get

TARGETS = ("host", "npu-a2")
BCE = "binary_cross_entropy_grad"
EMA = "apply_fused_ema_adam"
STATES = ("var", "m", "v", "s")
HYPER = {"lr": 0.01, "ema_decay": 0.99, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


@pytest.fixture
def threads():
    """set_threads for the test; the pool's size is restored afterwards."""
    before = pool.threads()
    yield pool.set_threads
    pool.set_threads(before)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}")


def assert_same_bits(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(_bits(got), _bits(want), err_msg=what)


def _bce_operands(rng, shape, dtype, reduction, weighted):
    shapes = {"input_x": shape, "input_y": shape, "dloss": shape if reduction == 0 else (1,)}
    if weighted:
        shapes["weight"] = shape
    return harness.random_operands(BCE, shapes, dict.fromkeys(shapes, dtype), {}, rng)


def _bce(a, reduction, target=None, out=None):
    """The API's result, compiled for `target` (None: untiled)."""
    with using(Pipeline(target=target)) if target else contextlib.nullcontext():
        return ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"), reduction, out=out)


def _ema_operands(rng, shape, dtype, step=3):
    a = harness.random_operands(EMA, {"grad": shape, "step": (1,)}, {"grad": dtype, "step": np.int64}, {}, rng)
    a["step"] = np.array([step], np.int64)
    return a


def _ema(a, props, target=None, states=None):
    """The updated states (copies of a's unless `states` are given, which are updated in place)."""
    states = states or {k: a[k].copy() for k in STATES}
    with using(Pipeline(target=target)) if target else contextlib.nullcontext():
        ops.apply_fused_ema_adam(a["grad"], *(states[k] for k in STATES), a["step"], **props)
    return states


def _check_bce(a, reduction, target):
    got = _bce(a, reduction, target)
    assert_close(got, harness.expected(BCE, a, {"reduction": reduction})["dx"])
    assert_same_bits(got, _bce(a, reduction))
    return got


def _check_ema(a, props, target):
    got = _ema(a, props, target)
    want = harness.expected(EMA, a, props)
    untiled = _ema(a, props)
    for k in STATES:
        assert_close(got[k], want[k])
        assert_same_bits(got[k], untiled[k], k)
    return got


# -- every reduction, weight, mode and dtype ----------------------------------------------------
# 100003 elements: many tiles of the default size on npu-a2, a partial last tile on both targets.


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_bce_matches_reference_and_untiled(rng, target, dtype, reduction, weighted):
    _check_bce(_bce_operands(rng, (100003,), dtype, reduction, weighted), reduction, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("bias_correction", [True, False])
def test_ema_matches_reference_and_untiled(rng, target, dtype, mode, bias_correction):
    props = dict(HYPER, mode=mode, bias_correction=bias_correction, weight_decay=0.05)
    _check_ema(_ema_operands(rng, (317, 331), dtype), props, target)


# -- shapes: empty, rank 0 to 3, sizes that are not a multiple of the tile ---------------------
SHAPES = [(), (0,), (3, 0, 2), (1,), (7,), (5, 7), (3, 5, 7), (2, 3, 4, 5), (301, 333)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1])
def test_bce_shapes(rng, target, shape, reduction):
    got = _check_bce(_bce_operands(rng, shape, np.float16, reduction, True), reduction, target)
    assert got.shape == shape


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s], ids=str)
def test_ema_shapes(rng, target, shape):
    props = dict(HYPER, mode=0, weight_decay=0.1)
    got = _check_ema(_ema_operands(rng, shape, np.float32), props, target)
    assert all(got[k].shape == shape for k in STATES)


# -- strided (non-contiguous) arrays ---------------------------------------------------------------
VIEWS = {  # (6, 7) views of (12, 20) arrays
    "grad": lambda x: x[::-2, 1::3],
    "var": lambda x: x[1::2, ::3],
    "m": lambda x: x[::2, ::-3],
    "v": lambda x: x.T[:6, :7],
    "s": lambda x: x[2:8, 5:12],
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_bce_strided(rng, target, dtype, reduction):
    """Strided inputs and output; one contiguous operand among strided ones; rank 1 and 3 views."""
    for base_shape, view in (((20, 30), lambda x: x[::2, 1::3]), ((31,), lambda x: x[::-3]),
                             ((4, 10, 9), lambda x: x[:, ::2, 1:].transpose(1, 0, 2))):
        a = _bce_operands(rng, base_shape, dtype, reduction, True)
        views = {k: x if k == "dloss" and reduction else view(x) for k, x in a.items()}
        views["input_y"] = np.ascontiguousarray(views["input_y"])
        assert not views["input_x"].flags.c_contiguous
        out_base = np.full(base_shape, np.nan, dtype)
        got = _bce(views, reduction, target, out=view(out_base))
        assert_close(got, harness.expected(BCE, views, {"reduction": reduction})["dx"])
        assert_same_bits(got, _bce(views, reduction))
        untouched = np.ones(base_shape, bool)
        view(untouched)[...] = False
        assert np.isnan(out_base[untouched].astype(np.float32)).all()


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_ema_strided(rng, target, dtype):
    """Steps, offsets, reversed and transposed axes; only the viewed elements are written."""
    props = dict(HYPER, mode=1, weight_decay=0.02)
    bases = _ema_operands(rng, (12, 20), dtype)
    untiled = {k: VIEWS[k](bases[k].copy()) for k in STATES}
    _ema({"grad": VIEWS["grad"](bases["grad"]), "step": bases["step"]}, props, states=untiled)
    before = {k: bases[k].copy() for k in STATES}
    views = {k: VIEWS[k](bases[k]) for k in ("grad", *STATES)}
    want = harness.expected(EMA, {k: x.copy() for k, x in views.items()} | {"step": bases["step"]}, props)
    _ema({"grad": views["grad"], "step": bases["step"]}, props, target, states={k: views[k] for k in STATES})
    for k in STATES:
        assert_close(views[k], want[k])
        assert_same_bits(views[k], untiled[k], k)
        untouched = np.ones(bases[k].shape, bool)
        VIEWS[k](untouched)[...] = False
        assert_same_bits(bases[k][untouched], before[k][untouched], k)


# -- blocks: 1 thread and N threads give the same bits ------------------------------------------------
@pytest.mark.parametrize("target", TARGETS)
def test_thread_count_does_not_change_results(rng, target, threads):
    bce = _bce_operands(rng, (513, 1001), BFLOAT16, 1, True)
    ema = _ema_operands(rng, (700, 999), BFLOAT16)
    props = dict(HYPER, mode=1, weight_decay=0.01)
    results = []
    for n in (1, 2, 3):
        threads(n)
        results.append((_bce(bce, 1, target), _ema(ema, props, target)))
    for dx, states in results[1:]:
        assert_same_bits(dx, results[0][0], "dx")
        for k in STATES:
            assert_same_bits(states[k], results[0][1][k], k)


# -- hand-chosen tiles -------------------------------------------------------------------------------
def _kernel(op_cls, arrays, props, target, n):
    """The op compiled for `target` with tile_sizes = {n = n} written by hand."""
    module = build_module(op_cls, {k: OperandClass.of(v, False) for k, v in arrays.items()}, props)
    next(o for o in module.walk() if isinstance(o, op_cls)).tile_sizes = TileSizesAttr({"n": n})
    sigs = signatures(module)
    executable = Executable(Pipeline(target=target).lower(module, "llvm-ir"), sigs, block_kernels(module))
    return executable[op_cls.short_name()]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("n", [1, 7, 64])
def test_small_hand_chosen_tile(rng, target, n, threads):
    """Thousands of tiles of a few elements, over more blocks than tiles of a row."""
    threads(3)
    a = _bce_operands(rng, (37, 129), np.float32, 1, True)
    dx = np.empty_like(a["input_x"])
    arrays = {k: a[k] for k in ("input_x", "input_y", "dloss", "weight")} | {"dx": dx}
    _kernel(BinaryCrossEntropyGradOp, arrays, {"reduction": 1}, target, n)(*arrays.values())
    assert_same_bits(dx, _bce(a, 1))

    e = _ema_operands(rng, (37, 129), np.float16)
    props = dict(HYPER, mode=0, weight_decay=0.01)
    states = {k: e[k].copy()[:, ::-1] for k in STATES}  # strided: tiles of rows
    arrays = {"grad": e["grad"], "step": e["step"],
              "hyperparameters": np.array([props.get(h, 0.0) for h in ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER], np.float32)}
    arrays |= states
    _kernel(ApplyFusedEmaAdamOp, arrays, {"mode": 0, "bias_correction": True}, target, n)(*arrays.values())
    untiled = _ema(e | {k: e[k].copy()[:, ::-1] for k in STATES}, props)
    for k in STATES:
        assert_same_bits(states[k], untiled[k], k)


# -- capacity: the chosen tiles fit both targets for realistic sizes -------------------------------------
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("case", ["bce-none-weighted", "bce-mean", "bce-sum-weighted", "ema", "ema-hyperparameters"])
def test_tiles_fit_the_target(target, dtype, case):
    """16M elements, static shapes: the tiled stage (check-capacity included) compiles, and the
    local buffers are exactly the tiled operands, n elements each, in the vector level."""
    big = (1 << 24,)
    if case.startswith("bce"):
        reduction = {"none": 0, "mean": 1, "sum": 2}[case.split("-")[1]]
        operands = {"input_x": big, "input_y": big, "dloss": big if reduction == 0 else (1,), "dx": big}
        if case.endswith("weighted"):
            operands["weight"] = big
        op_cls, props, types = BinaryCrossEntropyGradOp, {"reduction": reduction}, dict.fromkeys(operands, dtype)
    else:
        operands = {"grad": big, "step": (1,), **dict.fromkeys(STATES, big)}
        types = dict.fromkeys(operands, dtype) | {"step": np.int64}
        if case == "ema-hyperparameters":
            operands["hyperparameters"], types["hyperparameters"] = (6,), np.float32
        op_cls, props = ApplyFusedEmaAdamOp, {"mode": 1, "bias_correction": True}
    classes = {k: OperandClass(str(np.dtype(types[k])), s, False) for k, s in operands.items()}
    module = build_module(op_cls, classes, props)
    Pipeline(target=target).to_xdsl_stage(module, "tiled")
    buffers = [o for o in module.walk() if isinstance(o, AllocLocalOp)]
    tiled = [k for k, s in operands.items() if s == big]
    assert len(buffers) == len(tiled)
    level = get(target).role("vector").name
    shapes = {b.result.type.get_shape() for b in buffers}
    assert len(shapes) == 1 and all(level_of(b.result.type) == level for b in buffers)
    n = shapes.pop()[0]
    assert n * sum(np.dtype(types[k]).itemsize for k in tiled) * (2 if get(target).double_buffer else 1) <= get(target).role("vector").capacity
