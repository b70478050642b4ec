"""apply_fused_ema_adam: JIT results against the NumPy reference and torch.optim, in place updates,
one kernel for every value of the float hyper-parameters, and the spec's rejects."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from hypothesis import given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.dialect import ApplyFusedEmaAdamOp
from npugrad.reference import harness
from npugrad.reference import ops as ref
from npugrad.runtime import specialize
from npugrad.runtime.launch import check, launch

OP = "apply_fused_ema_adam"
STATES = ("var", "m", "v", "s")
HYPER = {"lr": 0.01, "ema_decay": 0.99, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8}


def _operands(rng, shape, dtype, step=None):
    a = harness.random_operands(OP, {"grad": shape, "step": (1,)}, {"grad": dtype, "step": np.int64}, {}, rng)
    if step is not None:
        a["step"] = np.array([step], np.int64)
    return a


def _run(a, **props):
    """Call the API on copies of the states; return the updated copies."""
    states = [a[k].copy() for k in STATES]
    result = ops.apply_fused_ema_adam(a["grad"], *states, a["step"], **props)
    assert all(r is x for r, x in zip(result, states))
    return dict(zip(STATES, states))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("bias_correction", [True, False])
@pytest.mark.parametrize("weight_decay", [0.0, 0.05])
def test_matches_reference(rng, dtype, mode, bias_correction, weight_decay):
    a = _operands(rng, (37, 129), dtype)
    props = dict(HYPER, mode=mode, bias_correction=bias_correction, weight_decay=weight_decay)
    got = _run(a, **props)
    want = harness.expected(OP, a, props)
    for k in STATES:
        assert got[k].dtype == dtype
        assert_close(got[k], want[k])
        # Same float32 operation order and one rounding as the reference: identical bits.
        np.testing.assert_array_equal(got[k], want[k].astype(dtype), err_msg=k)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mode", [0, 1])
def test_consecutive_steps_with_ema_warmup(rng, dtype, mode):
    """k = 1..5 with MindSpeed's EMA warm-up d = min(decay, (1 + n)/(10 + n)), which changes every call."""
    a = _operands(rng, (23, 11), dtype)
    mine = {k: a[k].copy() for k in STATES}
    theirs = {k: a[k].copy() for k in STATES}
    for k in range(1, 6):
        grad = np.asarray(rng.standard_normal(a["grad"].shape), np.float32).astype(dtype)
        props = dict(HYPER, mode=mode, weight_decay=0.01, ema_decay=min(0.999, (1 + k) / (10 + k)))
        ops.apply_fused_ema_adam(grad, *mine.values(), np.array([k], np.int64), **props)
        ref.apply_fused_ema_adam(grad, *theirs.values(), np.array([k], np.int64), **props)
        for name in STATES:
            assert_close(mine[name], theirs[name].astype(np.float32))
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"{name} after step {k}")


SHAPES = [(1,), (7,), (1, 1), (3, 5, 7), (2, 1, 3, 1, 2), (1,) * 8, (2, 3, 1, 2, 1, 2, 1, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shapes(rng, shape):
    a = _operands(rng, shape, np.float32)
    props = dict(HYPER, mode=0, weight_decay=0.1)
    got = _run(a, **props)
    want = harness.expected(OP, a, props)
    for k in STATES:
        assert got[k].shape == shape
        assert_close(got[k], want[k])


@pytest.mark.parametrize("shape", [(0,), (3, 0, 2)], ids=str)
def test_empty(rng, shape):
    a = _operands(rng, shape, np.float16)
    got = _run(a)
    assert all(got[k].shape == shape for k in STATES)


VIEWS = {
    "grad": lambda x: x[::-2, 1::3],
    "var": lambda x: x[1::2, ::3],
    "m": lambda x: x[::2, ::-3],
    "v": lambda x: x.T[:6, :7],
    "s": lambda x: x[2:8, 5:12],
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_strided_arrays(rng, dtype):
    """(6, 7) views of (12, 20) arrays with steps, offsets, reversed and transposed axes: the kernel
    takes any layout and writes only the viewed elements."""
    bases = _operands(rng, (12, 20), dtype)
    views = {k: VIEWS[k](bases[k]) for k in ("grad", *STATES)}
    assert all(x.shape == (6, 7) and not x.flags.c_contiguous for x in views.values())
    before = {k: bases[k].copy() for k in STATES}
    a = {k: x.copy() for k, x in views.items()} | {"step": bases["step"]}
    props = dict(HYPER, mode=1, weight_decay=0.02)
    want = harness.expected(OP, a, props)
    ops.apply_fused_ema_adam(views["grad"], *(views[k] for k in STATES), bases["step"], **props)
    for k in STATES:
        assert_close(views[k], want[k])
        untouched = np.ones(bases[k].shape, bool)
        VIEWS[k](untouched)[...] = False
        np.testing.assert_array_equal(bases[k][untouched], before[k][untouched], err_msg=k)


def test_step_forms(rng):
    """step as an int64 (1,) array, a Python int, a NumPy integer, or a one-element array of another rank."""
    a = _operands(rng, (5, 6), np.float32, step=3)
    want = harness.expected(OP, a, HYPER)
    for step in (np.array([3]), 3, np.int64(3), np.array(3), np.array([[3]])):
        got = _run(a | {"step": step}, **HYPER)
        for k in STATES:
            np.testing.assert_array_equal(got[k], want[k])


def test_step_zero_without_bias_correction(rng):
    a = _operands(rng, (9,), np.float32, step=0)
    got = _run(a, bias_correction=False)
    want = harness.expected(OP, a, {"bias_correction": False})
    for k in STATES:
        assert_close(got[k], want[k])


def test_one_kernel_for_every_float_hyperparameter(rng):
    """lr schedules and EMA warm-ups go through the run-time operand: no new kernel per value."""
    a = _operands(rng, (2, 1, 3, 1, 2, 5), np.float32)  # a rank no other test uses: its kernels are new here
    _run(a, mode=1, bias_correction=True)
    size = len(specialize._CACHE)
    values = [(0.1, 0.5, 0.8, 0.99, 1e-6, 0.1), (3e-4, 0.999, 0.0, 0.5, 0.0, 0.0), (0.0, 1.0, 0.95, 0.9, 1e-3, 1.0)]
    for lr, d, b1, b2, eps, wd in values:
        props = {"lr": lr, "ema_decay": d, "beta1": b1, "beta2": b2, "eps": eps, "weight_decay": wd}
        got = _run(a, **props)
        want = harness.expected(OP, a, props)
        for k in STATES:
            np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} with {props}")
    assert len(specialize._CACHE) == size
    _run(a, mode=0)  # mode is compile-time: one more kernel
    assert len(specialize._CACHE) == size + 1


@pytest.mark.parametrize(
    "props",
    [
        pytest.param({"lr": 1e-4, "beta2": 0.95, "weight_decay": 0.01}, id="adamw"),
        pytest.param({"mode": 0, "bias_correction": False, "lr": 0.01, "beta2": 0.95, "weight_decay": 0.01}, id="adam-l2"),
        pytest.param({}, id="spec-defaults"),  # 0.999 etc.: decimal literals the seam must round
    ],
)
def test_compile_time_hyperparameters(rng, props):
    """Without the `hyperparameters` operand (hand-written modules) the properties become constants."""
    a = _operands(rng, (9, 13), np.float32)
    arrays = {k: a[k].copy() for k in ("grad", "step", *STATES)}
    full = check(ApplyFusedEmaAdamOp, arrays, props)
    launch(ApplyFusedEmaAdamOp, arrays, full)
    want = harness.expected(OP, a, full)
    for k in STATES:
        np.testing.assert_array_equal(arrays[k], want[k], err_msg=k)


def test_lr_zero_and_ema_extremes(rng):
    a = _operands(rng, (40,), np.float32)
    got = _run(a, lr=0.0, ema_decay=1.0)
    np.testing.assert_array_equal(got["var"], a["var"])
    np.testing.assert_array_equal(got["s"], a["s"])
    got = _run(a, ema_decay=0.0)
    np.testing.assert_array_equal(got["s"], got["var"])


FINITE = {"allow_nan": False, "allow_infinity": False}


@settings(max_examples=30, deadline=None)
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4).map(tuple),
    dtype=st.sampled_from(FLOAT_DTYPES),
    mode=st.sampled_from([0, 1]),
    bias_correction=st.booleans(),
    lr=st.floats(0, 0.1, **FINITE),
    ema_decay=st.floats(0, 1, **FINITE),
    beta1=st.floats(0, 0.99, **FINITE),
    beta2=st.floats(0, 0.9999, **FINITE),
    eps=st.floats(1e-10, 1e-3, **FINITE),
    weight_decay=st.floats(0, 0.2, **FINITE),
    step=st.integers(1, 10_000),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis(shape, dtype, mode, bias_correction, lr, ema_decay, beta1, beta2, eps, weight_decay, step, seed):
    a = _operands(np.random.default_rng(seed), shape, dtype, step)
    props = {"mode": mode, "bias_correction": bias_correction, "lr": lr, "ema_decay": ema_decay, "beta1": beta1,
                 "beta2": beta2, "eps": eps, "weight_decay": weight_decay}
    got = _run(a, **props)
    want = harness.expected(OP, a, props)
    for k in STATES:
        assert_close(got[k], want[k])


# -- rejects (spec §4.3): ValueError/TypeError naming the op and the parameter, nothing written ------


def _f64(a):
    a.update({k: a[k].astype(np.float64) for k in ("grad", *STATES)})


def _shared(a, first, second):
    a[second] = a[first][::-1]


def _readonly(a):
    a["m"].setflags(write=False)


REJECTS = [
    # (id, change the valid arguments, error, words the message must contain)
    ("grad-int32", lambda a: a.update(grad=np.ones((4, 5), np.int32)), TypeError, ["'grad'", "dtype"]),
    ("all-float64", _f64, TypeError, ["'grad'", "dtype"]),
    ("var-dtype", lambda a: a.update(var=a["var"].astype(np.float16)), TypeError, ["'var'", "dtype"]),
    ("s-dtype", lambda a: a.update(s=a["s"].astype(np.float64)), TypeError, ["'s'", "dtype"]),
    ("m-shape", lambda a: a.update(m=a["m"][:, :4]), ValueError, ["'m'", "shape"]),
    ("v-shape", lambda a: a.update(v=a["v"].reshape(5, 4)), ValueError, ["'v'", "shape"]),
    ("grad-shape", lambda a: a.update(grad=a["grad"][:3]), ValueError, ["'var'", "shape"]),
    ("rank-0", lambda a: a.update({k: a[k][0, 0, ...] for k in ("grad", *STATES)}), ValueError, ["'grad'", "rank"]),
    ("rank-9", lambda a: a.update({k: a[k][:1, :1].reshape((1,) * 9) for k in ("grad", *STATES)}), ValueError,
     ["'grad'", "rank"]),
    ("step-int32", lambda a: a.update(step=np.array([1], np.int32)), TypeError, ["'step'", "int64"]),
    ("step-float", lambda a: a.update(step=1.0), TypeError, ["'step'", "int64"]),
    ("step-two-elements", lambda a: a.update(step=np.array([1, 2])), ValueError, ["'step'", "one element"]),
    ("step-zero", lambda a: a.update(step=np.array([0])), ValueError, ["'step'", ">= 1"]),
    ("step-negative", lambda a: a.update(step=-3), ValueError, ["'step'", ">= 1"]),
    ("grad-null", lambda a: a.update(grad=None), TypeError, ["'grad'"]),
    ("step-null", lambda a: a.update(step=None), TypeError, ["'step'"]),
    ("var-null", lambda a: a.update(var=None), TypeError, ["'var'"]),
    ("v-list", lambda a: a.update(v=a["v"].tolist()), TypeError, ["'v'", "numpy array"]),
    ("m-read-only", _readonly, ValueError, ["'m'", "read-only"]),
    ("mode-2", lambda a: a.update(mode=2), ValueError, ["'mode'"]),
    ("mode-minus-1", lambda a: a.update(mode=-1), ValueError, ["'mode'"]),
    ("lr-negative", lambda a: a.update(lr=-1e-3), ValueError, ["'lr'", ">= 0"]),
    ("lr-nan", lambda a: a.update(lr=float("nan")), ValueError, ["'lr'"]),
    ("lr-string", lambda a: a.update(lr="0.1"), TypeError, ["'lr'"]),
    ("eps-negative", lambda a: a.update(eps=-1e-8), ValueError, ["'eps'", ">= 0"]),
    ("beta1-one", lambda a: a.update(beta1=1.0), ValueError, ["'beta1'", "[0, 1)"]),
    ("beta1-negative", lambda a: a.update(beta1=-0.1), ValueError, ["'beta1'"]),
    ("beta2-one", lambda a: a.update(beta2=1.0), ValueError, ["'beta2'", "[0, 1)"]),
    # Below 1 as a double, 1.0 as the float32 the kernel computes with: bias correction 1 - 1^k = 0
    # made every parameter NaN (found by a probe).
    ("beta1-float32-one", lambda a: a.update(beta1=0.99999999), ValueError, ["'beta1'", "[0, 1)", "float32"]),
    ("beta2-float32-one", lambda a: a.update(beta2=1 - 2.0 ** -26), ValueError, ["'beta2'", "[0, 1)", "float32"]),
    ("weight_decay-negative", lambda a: a.update(weight_decay=-0.01), ValueError, ["'weight_decay'", ">= 0"]),
    ("ema_decay-above-one", lambda a: a.update(ema_decay=1.5), ValueError, ["'ema_decay'", "[0, 1]"]),
    ("ema_decay-negative", lambda a: a.update(ema_decay=-0.5), ValueError, ["'ema_decay'"]),
    ("var-is-grad", lambda a: a.update(var=a["grad"]), ValueError, ["'grad'", "'var'", "overlap"]),
    ("s-views-grad", lambda a: _shared(a, "grad", "s"), ValueError, ["'grad'", "'s'", "overlap"]),
    ("v-views-m", lambda a: _shared(a, "m", "v"), ValueError, ["'m'", "'v'", "overlap"]),
    ("s-is-var", lambda a: a.update(s=a["var"]), ValueError, ["'var'", "'s'", "overlap"]),
]


@pytest.mark.parametrize("change, error, words", [r[1:] for r in REJECTS], ids=[r[0] for r in REJECTS])
def test_rejects(rng, change, error, words):
    args = _operands(rng, (4, 5), np.float32)
    change(args)
    states = [args[k] for k in STATES if isinstance(args[k], np.ndarray)]
    before = [x.tobytes() for x in states]
    with pytest.raises(error) as info:
        ops.apply_fused_ema_adam(**args)
    message = str(info.value)
    for word in [OP, *words]:
        assert word in message, f"{word!r} not in {message!r}"
    assert [x.tobytes() for x in states] == before


# -- oracle: torch.optim (mode 1 = AdamW, mode 0 = Adam with L2) plus the parameter EMA ---------


@pytest.mark.parametrize("mode, weight_decay", [(1, 0.0), (1, 0.05), (0, 0.0), (0, 0.05)])
def test_matches_torch_optim(rng, mode, weight_decay):
    torch = pytest.importorskip("torch", reason="torch is not installed: no oracle test against torch.optim")
    shape, lr, decay, (b1, b2), eps, k0 = (13, 17), 2e-3, 0.99, (0.9, 0.999), 1e-8, 3
    a = _operands(rng, shape, np.float32, step=k0)
    param = torch.nn.Parameter(torch.tensor(a["var"]))
    opt_cls = torch.optim.AdamW if mode == 1 else torch.optim.Adam
    opt = opt_cls([param], lr=lr, betas=(b1, b2), eps=eps, weight_decay=weight_decay)
    # Resume from a state in progress (step k0 done, non-zero moments), like the kernel's inputs.
    opt.state[param] = {
        "step": torch.tensor(float(k0)), "exp_avg": torch.tensor(a["m"]), "exp_avg_sq": torch.tensor(a["v"]),
    }
    ema = torch.tensor(a["s"])
    var, m, v, s = (a[k].copy() for k in STATES)
    for k in range(k0 + 1, k0 + 6):
        grad = rng.standard_normal(shape).astype(np.float32)
        param.grad = torch.tensor(grad)
        opt.step()
        with torch.no_grad():
            ema = decay * ema + (1 - decay) * param
        ops.apply_fused_ema_adam(grad, var, m, v, s, k, lr=lr, ema_decay=decay, beta1=b1, beta2=b2, eps=eps,
                                 mode=mode, weight_decay=weight_decay)
    state = opt.state[param]
    assert_close(var, param.detach().numpy())
    assert_close(m, state["exp_avg"].numpy())
    assert_close(v, state["exp_avg_sq"].numpy())
    assert_close(s, ema.numpy())
