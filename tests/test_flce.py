"""fused_linear_cross_entropy_loss_grad: JIT results against the NumPy reference and torch
autograd, the spec's rejects, and the mask encodings. Numerical tests run both the default fused
kernel and the unfused reference lowering (Pipeline(fuse=False))."""


import itertools

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close, assert_reference, compact_logits_cases
from hypothesis import given, settings
from hypothesis import strategies as st

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.dtypes import BFLOAT16
from npugrad.reference import harness, pack_target_mask, round_to, unpack_target_mask
from npugrad.runtime.launch import check, launch, using

OP = "fused_linear_cross_entropy_loss_grad"
MODES = ["memory-saving", "high-performance"]
PIPELINES = pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
BT, H, V = 37, 29, 131  # multiples of nothing


def _operands(rng, bt=BT, h=H, v=V, dtype=np.float32, mode="memory-saving", mask=np.bool_,
              target=np.int64, mask_bytes=None):
    mask_len = bt if mask == np.bool_ else (mask_bytes if mask_bytes is not None else -(-bt // 8))
    shapes = {"grad": (bt,), "input": (bt, h), "weight": (v, h), "target_mask": (mask_len,), "masked_target": (bt,)}
    if mode == "high-performance":
        shapes["softmax"] = (bt, v)
    else:
        shapes["logits_max"] = shapes["sum_exp_logits"] = (bt,)
    dts = dict.fromkeys(shapes, np.float32)
    dts |= {"input": dtype, "weight": dtype, "target_mask": mask, "masked_target": target}
    return harness.random_operands(OP, shapes, dts, {}, rng)


def _run(a, fuse=True, **outs):
    """The API call; fuse=False compiles it with the unfused reference lowering instead."""
    if fuse:
        return ops.fused_linear_cross_entropy_loss_grad(**a, **outs)
    with using(Pipeline(fuse=False)):
        return ops.fused_linear_cross_entropy_loss_grad(**a, **outs)


def _check(a, got):
    assert_reference(OP, a, {}, dict(zip(("input_grad_out", "weight_grad_out"), got)))


def _with_mask(a, masked):
    """Operands with the given per-row mask, in a's mask encoding; masked rows get target 0."""
    a = dict(a)
    masked = np.asarray(masked, bool)
    a["target_mask"] = masked if a["target_mask"].dtype == np.bool_ else pack_target_mask(masked)
    a["masked_target"] = np.where(masked, 0, a["masked_target"]).astype(a["masked_target"].dtype)
    return a


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("mask", [np.bool_, np.uint8], ids=["bool", "uint8"])
@pytest.mark.parametrize("target", [np.int32, np.int64], ids=["int32", "int64"])
def test_matches_reference(rng, fuse, mode, dtype, mask, target):
    a = _operands(rng, dtype=dtype, mode=mode, mask=mask, target=target)
    gi, gw = _run(a, fuse)
    assert gi.dtype == gw.dtype == dtype
    assert gi.shape == (BT, H) and gw.shape == (V, H)
    _check(a, (gi, gw))


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
def test_packed_mask_ignores_bits_past_bt_and_masked_targets(rng, fuse, mode):
    a = _operands(rng, mode=mode, mask=np.uint8, mask_bytes=-(-BT // 8) + 3)
    masked = rng.random(BT) < 0.5
    a = _with_mask(a, masked)
    garbage = np.array([0xFF, 0xA5, 0x3C], np.uint8)
    tail = np.uint8((0xFF << (BT % 8)) & 0xFF)  # the unused high bits of the last byte
    a["target_mask"] = np.concatenate([a["target_mask"][:-1], [a["target_mask"][-1] | tail], garbage])
    # Masked rows' targets are never read: even wild values must not matter.
    a["masked_target"] = np.where(masked, rng.integers(-(2**40), 2**40, BT), a["masked_target"])
    _check(a, _run(a, fuse))


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("mask", [np.bool_, np.uint8], ids=["bool", "uint8"])
@pytest.mark.parametrize("masked", [True, False], ids=["all-masked", "none-masked"])
def test_all_or_no_rows_masked(rng, fuse, mode, mask, masked):
    a = _with_mask(_operands(rng, mode=mode, mask=mask), np.full(BT, masked))
    _check(a, _run(a, fuse))


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_single_token(rng, fuse, mode, dtype):
    a = _operands(rng, bt=1, h=7, v=128, dtype=dtype, mode=mode, mask=np.uint8)
    _check(a, _run(a, fuse))


@PIPELINES
@pytest.mark.parametrize(
    ("bt", "h", "v", "mode"),
    [(0, 16, 130, "memory-saving"), (0, 16, 130, "high-performance"), (5, 0, 130, "high-performance"),
     (5, 8, 0, "memory-saving")],
)
def test_empty_gives_zeros(rng, fuse, bt, h, v, mode):
    a = _operands(rng, bt=bt, h=h, v=v, mode=mode, mask=np.uint8)
    gi = np.full((bt, h), np.nan, np.float32)
    gw = np.full((v, h), np.nan, np.float32)
    got = _run(a, fuse, input_grad_out=gi, weight_grad_out=gw)
    assert got[0] is gi and got[1] is gw
    assert not np.any(gi) and not np.any(gw)


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_strided_inputs_and_outputs(rng, fuse, mode, dtype):
    big = _operands(rng, bt=2 * BT, h=2 * H, v=2 * V, dtype=dtype, mode=mode, mask=np.bool_, target=np.int32)
    a = {
        "grad": big["grad"][::2],
        "input": big["input"][::2, 1::2],
        "weight": big["weight"][::-2, ::2],
        "target_mask": big["target_mask"][::2],
        "masked_target": np.minimum(big["masked_target"][::2], V - 1),
    }
    if mode == "high-performance":
        a["softmax"] = big["softmax"][::2, ::2]
    else:
        z = np.asarray(a["input"], np.float32) @ np.asarray(a["weight"], np.float32).T
        a["logits_max"] = np.repeat(z.max(axis=1), 2)[::2]
        a["sum_exp_logits"] = np.repeat(np.exp(z - z.max(axis=1, keepdims=True)).sum(axis=1), 2)[::2]
    gi = np.full((BT, 3 * H), np.nan, dtype)[:, ::3]
    gw = np.full((V, 2, H), np.nan, dtype)[:, 1, :]
    got = _run(a, fuse, input_grad_out=gi, weight_grad_out=gw)
    assert got[0] is gi and got[1] is gw
    _check(a, got)


def _at_offset(a: np.ndarray, floats: int) -> np.ndarray:
    """A contiguous copy of a whose first element lies `floats` float32s past a 64-byte line."""
    raw = np.empty(a.nbytes + 128, np.uint8)
    start = (-raw.ctypes.data) % 64 + 4 * floats
    out = raw[start:start + a.nbytes].view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


@pytest.mark.parametrize("h", [5, 29, 70, 144])
@pytest.mark.parametrize("out_offset", [0, 1, 4, 12, 15])
@pytest.mark.parametrize("in_offset", ["same", 3])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_outputs_and_inputs_at_any_offset_from_a_cache_line(rng, h, out_offset, in_offset, dtype):
    """The micro-kernel's column blocks start at C's first column that begins a cache line,
    found from the address at run time (vectorize-contractions, line_head): the columns before
    it and after the blocks run masked. Every split: no whole block (h = 5), head and tail of
    any length, X and W as aligned as the gradients or not."""
    a = _operands(rng, bt=BT, h=h, v=V, dtype=dtype)
    shift = out_offset if in_offset == "same" else in_offset
    a["input"], a["weight"] = _at_offset(a["input"], shift), _at_offset(a["weight"], shift)
    gi = _at_offset(np.full((BT, h), np.nan, dtype), out_offset)
    gw = _at_offset(np.full((V, h), np.nan, dtype), out_offset)
    got = _run(a, input_grad_out=gi, weight_grad_out=gw)
    assert got[0] is gi and got[1] is gw
    _check(a, got)


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
def test_deterministic(rng, fuse, mode):
    a = _operands(rng, dtype=BFLOAT16, mode=mode, mask=np.uint8)
    first = [x.tobytes() for x in _run(a, fuse)]
    for _ in range(2):
        assert [x.tobytes() for x in _run(a, fuse)] == first


@PIPELINES
def test_inputs_unchanged_and_statistics_ignored_with_softmax(rng, fuse):
    a = _operands(rng, mode="high-performance", mask=np.uint8)
    before = {k: x.copy() for k, x in a.items()}
    plain = _run(a, fuse)
    for k in ("grad", "input", "weight", "target_mask", "masked_target"):
        np.testing.assert_array_equal(a[k], before[k])
    bogus = np.zeros(BT, np.float32)
    with_stats = _run(a | {"softmax": before["softmax"], "logits_max": bogus, "sum_exp_logits": bogus}, fuse)
    assert [x.tobytes() for x in with_stats] == [x.tobytes() for x in plain]


@PIPELINES
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_kept_logits_give_memory_saving_modes_bits(rng, fuse, dtype):
    """softmax_is_logits: P made in the kernel from kept float32 logits and the statistics is
    what memory-saving mode makes from the logits it recomputes: the same bits (the unfused
    reference loops and the fused nest alike); logits kept in the input's dtype (rounded) match
    the reference, P made in NumPy from the same rounded logits, at the dtype's tolerance."""
    a = _operands(rng, dtype=dtype, mask=np.uint8)
    # Eighths: every product and sum exact, so the logits are the same bits in any order (the
    # kernel's GEMM 1, its reference loops, NumPy's): only how P is made from them is compared.
    for k in ("input", "weight"):
        a[k] = (rng.integers(-4, 5, a[k].shape) / 8).astype(dtype)
    z = np.asarray(a["input"], np.float32) @ np.asarray(a["weight"], np.float32).T
    # Statistics as a forward over all shards gives them: at least this shard's max, more mass.
    a["logits_max"] = (z.max(1) + 0.25).astype(np.float32)
    a["sum_exp_logits"] = (np.exp(z - a["logits_max"][:, None]).sum(1) + 0.5).astype(np.float32)
    recomputed = _run(a, fuse)
    kept = _run(a | {"softmax": z, "softmax_is_logits": True}, fuse)
    assert [x.tobytes() for x in kept] == [x.tobytes() for x in recomputed]
    if dtype != np.float32:
        narrow = z.astype(dtype)
        got = _run(a | {"softmax": narrow, "softmax_is_logits": True}, fuse)
        p = np.exp(np.asarray(narrow, np.float32) - a["logits_max"][:, None]) / a["sum_exp_logits"][:, None]
        _check(a | {"softmax": p.astype(np.float32), "logits_max": None, "sum_exp_logits": None}, got)


@compact_logits_cases((16, 48, 200), [(BFLOAT16, 48), (np.float32, 200)])
def test_compact_kept_logits_match_reference_and_memory_saving_mode(rng, fuse, dtype, block):
    """logits_block B: `softmax` holds the compact logits a forward keeps (float16 E = exp(Z − C),
    C each block's row maximum), P = (E·exp(C − M))/S made in the kernel, per block of columns
    whether blocks meet tiles or straddle them (V = 131: the last block short; B = 200: one
    block). Against the reference (P made in NumPy from the same E and C) at the dtype's
    tolerance, and against memory-saving mode (P from the recomputed logits) within E's rounding
    (2⁻¹¹ relative) on top of it."""
    from npugrad.reference.forward import compact_logits

    a = _operands(rng, dtype=dtype, mask=np.uint8)
    z = np.asarray(a["input"], np.float32) @ np.asarray(a["weight"], np.float32).T
    a["logits_max"] = (z.max(1) + 0.25).astype(np.float32)
    a["sum_exp_logits"] = (np.exp(z - a["logits_max"][:, None]).sum(1) + 0.5).astype(np.float32)
    e, c = compact_logits(z, block)
    assert e.dtype == np.float16 and c.shape == (BT, -(-V // block))
    compact = a | {"softmax": e, "softmax_block_max": c, "softmax_is_logits": True, "logits_block": block}
    got = _run(compact, fuse)
    assert all(g.dtype == dtype for g in got)
    assert_reference(OP, {k: v for k, v in compact.items() if k not in ("softmax_is_logits", "logits_block")},
                     {"softmax_is_logits": True, "logits_block": block},
                     dict(zip(("input_grad_out", "weight_grad_out"), got)))
    recomputed = _run(a, fuse)
    for g, r in zip(got, recomputed):
        g, r = np.asarray(g, np.float32), np.asarray(r, np.float32)
        scale = np.abs(r).max()
        assert np.abs(g - r).max() <= scale * (2e-3 if dtype == np.float32 else 1.6e-2), (np.abs(g - r).max(), scale)


def test_compact_kept_logits_rejects(rng):
    """The compact form's rules, each naming its operand or property."""
    a = _operands(rng, mask=np.uint8)
    e = np.ones((BT, V), np.float16)
    c = np.zeros((BT, -(-V // 32)), np.float32)
    a |= {"logits_max": np.zeros(BT, np.float32), "sum_exp_logits": np.ones(BT, np.float32), "softmax": e,
          "softmax_is_logits": True}
    f = ops.fused_linear_cross_entropy_loss_grad
    with pytest.raises(ValueError, match=f"{OP}: parameter 'logits_block' must be a non-negative integer"):
        f(**a, logits_block=-1, softmax_block_max=c)
    with pytest.raises(ValueError, match=f"{OP}: parameter 'softmax_block_max' holds the compact logits' block maxima"):
        f(**a | {"softmax": e.astype(np.float32)}, softmax_block_max=c)
    with pytest.raises(ValueError, match=f"{OP}: property 'logits_block' = 32 .* needs parameter 'softmax_block_max'"):
        f(**a, logits_block=32)
    with pytest.raises(ValueError, match=r"parameter 'softmax_block_max' must have shape \(BT, ceil\(V/32\)\) = \(37, 5\)"):
        f(**a, logits_block=32, softmax_block_max=np.zeros((BT, 4), np.float32))
    with pytest.raises(TypeError, match="parameter 'softmax' must have dtype float16, got float32"):
        f(**a | {"softmax": e.astype(np.float32)}, logits_block=32, softmax_block_max=c)
    with pytest.raises(TypeError, match="parameter 'softmax_block_max' must have dtype float32"):
        f(**a, logits_block=32, softmax_block_max=c.astype(np.float16))
    with pytest.raises(ValueError, match="property 'logits_block' = 32 reads compact kept logits: needs property 'softmax_is_logits'"):
        f(**a | {"softmax_is_logits": False}, logits_block=32, softmax_block_max=c)


def _rounding_allowance(a, dtype) -> np.ndarray:
    """How far a float32 dX may lie from the reference's where a grad logit G[t, v] sits so near
    a rounding boundary of `dtype` (both round G to it before the GEMMs) that the last bits of P,
    the kernel's exp against NumPy's, round it the other way: the gap between its two roundings
    times |W[v]|, summed over such logits (BT, H); 0 elsewhere. Memory-saving mode, no extensions."""
    x, w = (np.asarray(a[k], np.float32) for k in ("input", "weight"))
    p = np.exp(x @ w.T - a["logits_max"][:, None]) / a["sum_exp_logits"][:, None]
    rows = np.flatnonzero(unpack_target_mask(a["target_mask"], len(x)) == 0)
    p[rows, a["masked_target"][rows]] -= 1
    g = p * a["grad"][:, None]
    nudge = np.float32(2.0**-20)  # a few float32 ulps either way
    gap = np.abs(round_to(g * (1 + nudge), dtype) - round_to(g * (1 - nudge), dtype))
    return gap @ np.abs(w)


@PIPELINES
@pytest.mark.parametrize("dtype", [BFLOAT16, np.float16], ids=str)
def test_float32_input_grad_is_the_unrounded_accumulator(rng, fuse, dtype):
    """`float32_input_grad` (the extension): dX in float32 for a narrow input, the sum the
    default output rounds once (its rounding is that output, bit for bit), within float32's
    tolerance of the reference (plus, where a grad logit sits on a rounding boundary of the
    narrow dtype, what rounding it the other way moves: _rounding_allowance); it accumulates
    like the default one. Without the flag a float32
    dX is rejected (the vendor's rule: the input's dtype), and with it any other dtype."""
    a = _operands(rng, dtype=dtype, mask=np.uint8)
    narrow = _run(a, fuse)
    wide = _run(a | {"float32_input_grad": True}, fuse)
    assert wide[0].dtype == np.float32 and wide[1].dtype == dtype
    np.testing.assert_array_equal(wide[0].astype(dtype).view(np.uint16), narrow[0].view(np.uint16))
    np.testing.assert_array_equal(wide[1].view(np.uint16), narrow[1].view(np.uint16))
    want = harness.expected(OP, a, {})["input_grad_out"]
    allowed = harness.tolerance(np.float32) * (np.abs(want) + np.abs(want).max()) + _rounding_allowance(a, dtype)
    assert np.all(np.abs(wide[0] - want) <= allowed), f"max excess {np.max(np.abs(wide[0] - want) - allowed):.3e}"
    start = rng.standard_normal((BT, H)).astype(np.float32)
    gx, gw = start.copy(), np.zeros((V, H), dtype)
    _run(a | {"float32_input_grad": True, "accumulate": True}, fuse, input_grad_out=gx, weight_grad_out=gw)
    assert_close(gx, start + wide[0])
    with pytest.raises(TypeError, match="parameter 'input_grad_out' must have the dtype of 'input'"):
        ops.fused_linear_cross_entropy_loss_grad(**a, input_grad_out=np.zeros((BT, H), np.float32))
    with pytest.raises(TypeError, match="parameter 'input_grad_out' must have dtype float32"):
        ops.fused_linear_cross_entropy_loss_grad(**a, float32_input_grad=True, input_grad_out=np.zeros((BT, H), dtype))


@pytest.mark.parametrize("missing", ["logits_max", "sum_exp_logits", "softmax"])
def test_kept_logits_need_the_logits_and_both_statistics(rng, missing):
    a = _operands(rng, mask=np.uint8)
    a |= {"softmax": np.zeros((BT, V), np.float32), "logits_max": np.zeros(BT, np.float32),
          "sum_exp_logits": np.ones(BT, np.float32), missing: None}
    with pytest.raises(ValueError, match=f"{OP}: property 'softmax_is_logits' .* missing '{missing}'"):
        ops.fused_linear_cross_entropy_loss_grad(**a, softmax_is_logits=True)


@PIPELINES
def test_small_vocabulary_allowed_in_memory_saving_mode(rng, fuse):
    a = _operands(rng, v=5, mode="memory-saving")
    _check(a, _run(a, fuse))


@PIPELINES
@pytest.mark.parametrize("bad", [-1, V, 2**31 - 1])
def test_kernel_never_indexes_by_an_out_of_range_target(rng, fuse, bad):
    """Past the API's value check, a bad target on an unmasked row only fails to match any column:
    the row gets no one-hot term, as if it were masked, and no memory is touched."""
    a = _with_mask(_operands(rng, mask=np.uint8, target=np.int32), np.zeros(BT, bool))
    a["masked_target"][5] = bad
    outs = {"input_grad_out": np.empty((BT, H), np.float32), "weight_grad_out": np.empty((V, H), np.float32)}
    arrays = a | outs
    launch(FusedLinearCrossEntropyLossGradOp, arrays, check(FusedLinearCrossEntropyLossGradOp, arrays, {}),
           pipeline=Pipeline(fuse=fuse))
    masked = np.zeros(BT, bool)
    masked[5] = True
    _check(_with_mask(a, masked), (outs["input_grad_out"], outs["weight_grad_out"]))


@settings(max_examples=20, deadline=None)
@given(
    bt=st.integers(0, 40),
    h=st.integers(0, 24),
    v=st.integers(128, 200),
    mode=st.sampled_from(MODES),
    dtype=st.sampled_from(FLOAT_DTYPES),
    mask=st.sampled_from([np.bool_, np.uint8]),
    target=st.sampled_from([np.int32, np.int64]),
    fuse=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_hypothesis(bt, h, v, mode, dtype, mask, target, fuse, seed):
    a = _operands(np.random.default_rng(seed), bt, h, v, dtype, mode, mask, target)
    _check(a, _run(a, fuse))


# -- rejects (spec §1.7): every message names the op and the parameter --------------------------

def _f32(*shape):
    return np.ones(shape, np.float32)


REJECTS = {
    # name: (change to the memory-saving operands of (BT, H, V) = (37, 29, 131), parameter)
    "grad-null": ({"grad": None}, "grad"),
    "input-null": ({"input": None}, "input"),
    "weight-null": ({"weight": None}, "weight"),
    "mask-null": ({"target_mask": None}, "target_mask"),
    "target-null": ({"masked_target": None}, "masked_target"),
    "no-statistic": ({"sum_exp_logits": None}, "sum_exp_logits"),
    "no-statistics": ({"logits_max": None, "sum_exp_logits": None}, "softmax"),
    "label-smoothing": ({"label_smoothing": 0.1}, "label_smoothing"),
    "input-f64": ({"input": np.ones((BT, H))}, "input"),
    "weight-dtype": ({"weight": np.ones((V, H), np.float16)}, "weight"),
    "grad-f16": ({"grad": np.ones(BT, np.float16)}, "grad"),
    "mask-int8": ({"target_mask": np.zeros(BT, np.int8)}, "target_mask"),
    "target-int16": ({"masked_target": np.zeros(BT, np.int16)}, "masked_target"),
    "target-float": ({"masked_target": _f32(BT)}, "masked_target"),
    "max-f64": ({"logits_max": np.ones(BT)}, "logits_max"),
    "sum-f16": ({"sum_exp_logits": np.ones(BT, np.float16)}, "sum_exp_logits"),
    "input-grad-dtype": ({"input_grad_out": np.ones((BT, H), np.float16)}, "input_grad_out"),
    "weight-grad-dtype": ({"weight_grad_out": np.ones((V, H), BFLOAT16)}, "weight_grad_out"),
    "grad-2d": ({"grad": _f32(BT, 1)}, "grad"),
    "mask-2d": ({"target_mask": np.zeros((BT, 1), bool)}, "target_mask"),
    "target-2d": ({"masked_target": np.zeros((BT, 1), np.int64)}, "masked_target"),
    "max-2d": ({"logits_max": _f32(BT, 1)}, "logits_max"),
    "input-3d": ({"input": _f32(BT, H, 1)}, "input"),
    "weight-1d": ({"weight": _f32(V * H)}, "weight"),
    "input-grad-1d": ({"input_grad_out": _f32(BT * H)}, "input_grad_out"),
    "weight-grad-3d": ({"weight_grad_out": _f32(V, H, 1)}, "weight_grad_out"),
    "input-bt": ({"input": _f32(BT + 1, H)}, "input"),
    "weight-h": ({"weight": _f32(V, H + 1)}, "weight"),
    "target-bt": ({"masked_target": np.zeros(BT - 1, np.int64)}, "masked_target"),
    "bool-mask-long": ({"target_mask": np.zeros(BT + 1, bool)}, "target_mask"),
    "bool-mask-short": ({"target_mask": np.zeros(BT - 1, bool)}, "target_mask"),
    "uint8-mask-short": ({"target_mask": np.zeros(BT // 8, np.uint8)}, "target_mask"),
    "max-bt": ({"logits_max": _f32(BT + 1)}, "logits_max"),
    "sum-bt": ({"sum_exp_logits": _f32(BT - 1)}, "sum_exp_logits"),
    "input-grad-shape": ({"input_grad_out": _f32(BT, H + 1)}, "input_grad_out"),
    "weight-grad-shape": ({"weight_grad_out": _f32(H, V)}, "weight_grad_out"),
    "input-grad-readonly": ({"input_grad_out": np.broadcast_to(_f32(1, H), (BT, H))}, "input_grad_out"),
    "softmax-shape": ({"softmax": _f32(BT, V + 1)}, "softmax"),
    "softmax-f16": ({"softmax": np.ones((BT, V), np.float16)}, "softmax"),
    "softmax-1d": ({"softmax": _f32(BT * V)}, "softmax"),
    "softmax-small-vocab": (
        {"weight": _f32(127, H), "softmax": _f32(BT, 127), "weight_grad_out": _f32(127, H)}, "weight"),
}


@pytest.mark.parametrize("case", list(REJECTS))
def test_rejects(rng, case):
    change, param = REJECTS[case]
    a = _operands(rng)
    outs = {"input_grad_out": np.full((BT, H), 7.0, np.float32), "weight_grad_out": np.full((V, H), 7.0, np.float32)}
    args = a | {"label_smoothing": 0.0} | outs
    args.update(change)
    with pytest.raises((ValueError, TypeError)) as info:
        ops.fused_linear_cross_entropy_loss_grad(**args)
    message = str(info.value)
    assert OP in message and f"'{param}'" in message, message
    assert np.all(outs["input_grad_out"] == 7.0) and np.all(outs["weight_grad_out"] == 7.0)


@pytest.mark.parametrize("mask", [np.bool_, np.uint8], ids=["bool", "uint8"])
@pytest.mark.parametrize("bad", [-1, V, 2**40])
def test_rejects_out_of_range_target_on_unmasked_row(rng, mask, bad):
    masked = np.ones(BT, bool)
    masked[23] = False
    a = _with_mask(_operands(rng, mask=mask), masked)
    a["masked_target"][23] = bad
    gi = np.full((BT, H), 7.0, np.float32)
    with pytest.raises(ValueError, match=rf"{OP}: parameter 'masked_target' .* got {bad} at row 23"):
        _run(a, input_grad_out=gi)
    assert np.all(gi == 7.0)


# -- against torch autograd: linear + cross entropy, TP = 1 and TP = 2 --------------------------

def _autograd(torch, x, w, target, scale):
    """dL/dX and dL/dW of L = Σ_t scale_t · CE(x_t Wᵀ, target_t), in float32."""
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    loss = torch.nn.functional.cross_entropy(xt @ wt.T, torch.tensor(target), reduction="none")
    (loss * torch.tensor(scale)).sum().backward()
    return xt.grad.numpy(), wt.grad.numpy()


def _shard_operands(x, w, target, scale, lo, hi, row_max, row_sum, mode, dtype):
    """The operands of one TP rank holding vocabulary rows [lo, hi), as Megatron builds them."""
    masked = (target < lo) | (target >= hi)
    a = {
        "grad": scale,
        "input": x.astype(dtype),
        "weight": w[lo:hi].astype(dtype),
        "target_mask": pack_target_mask(masked),
        "masked_target": np.where(masked, 0, target - lo).astype(np.int64),
    }
    if mode == "high-performance":
        z = x @ w[lo:hi].T
        a["softmax"] = (np.exp(z - row_max[:, None]) / row_sum[:, None]).astype(np.float32)
    else:
        a["logits_max"], a["sum_exp_logits"] = row_max, row_sum
    return a


@PIPELINES
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tp", [1, 2])
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_matches_torch_autograd(rng, fuse, mode, tp, dtype):
    torch = pytest.importorskip("torch", reason="torch is needed for the autograd oracle")
    bt, h, v = 45, 40, 260
    # Values exactly representable in dtype, so both sides see the same operands.
    x = (rng.standard_normal((bt, h)) / 2).astype(dtype).astype(np.float32)
    w = (rng.standard_normal((v, h)) / 2).astype(dtype).astype(np.float32)
    target = rng.integers(0, v, bt)
    scale = rng.uniform(0.5, 1.5, bt).astype(np.float32) / bt
    z = x @ w.T
    row_max = z.max(axis=1).astype(np.float32)
    row_sum = np.exp(z - row_max[:, None]).sum(axis=1).astype(np.float32)
    bounds = np.linspace(0, v, tp + 1).astype(int)
    results = [
        _run(_shard_operands(x, w, target, scale, lo, hi, row_max, row_sum, mode, dtype), fuse)
        for lo, hi in itertools.pairwise(bounds)
    ]
    input_grad = sum(np.asarray(gi, np.float32) for gi, _ in results)  # the TP all-reduce
    weight_grad = np.concatenate([gw for _, gw in results]).astype(np.float32)
    want_x, want_w = _autograd(torch, x, w, target, scale)
    # The summed partials were each rounded to dtype: compare at dtype's tolerance.
    assert_close(input_grad, want_x, dtype)
    assert_close(weight_grad, want_w, dtype)
