"""The per-call path of the runtime: array addresses, argument checks against the kernel's
signature, descriptors, and the table of signatures that passed the metadata rules."""

from __future__ import annotations

from types import SimpleNamespace

import ml_dtypes
import numpy as np
import pytest

from npugrad import ops
from npugrad.dialect import BinaryCrossEntropyGradOp
from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.reference import ops as ref
from npugrad.runtime import address, launch
from npugrad.runtime.kernel import ArgumentError
from npugrad.runtime.specialize import OperandClass, compile_op


def arrays_of_every_kind():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    readonly = np.arange(7.0)
    readonly.flags.writeable = False
    yield "contiguous", base
    yield "window", base[1:, 2:]
    yield "transposed", base.T
    yield "reversed", base[::-1, ::-2]  # the first element is at the end of the buffer
    yield "read-only", readonly
    yield "zero-size", np.zeros((0, 3))
    yield "0-d", np.array(2.5)
    yield "bfloat16", np.ones(5, ml_dtypes.bfloat16)
    yield "large", np.empty(1 << 22, np.float32)
    yield "subclass", base.view(np.recarray)
    yield "memmap-like subclass", np.lib.stride_tricks.as_strided(base, (3,), (8,))
    yield "broadcast", np.broadcast_to(np.float32(1), (3, 4))


@pytest.mark.parametrize("kind,array", list(arrays_of_every_kind()), ids=[k for k, _ in arrays_of_every_kind()])
def test_data_address_is_what_numpy_says(kind, array):
    assert address.data_address(array) == array.ctypes.data


def test_the_fast_address_path_is_taken_on_this_interpreter():
    # CPython 3.11 with a two-word object header: the struct read is checked and used.
    assert address._FAST


def bce_kernel(n, strided=False):
    shape = (n,)
    classes = {name: OperandClass("float32", shape, strided) for name in ("input_x", "input_y", "dx")}
    classes["dloss"] = OperandClass("float32", (), False)
    return compile_op(BinaryCrossEntropyGradOp, classes, {"reduction": 2})


def bce_arrays(rng, n):
    x = rng.uniform(0.05, 0.95, n).astype(np.float32)
    y = rng.uniform(0, 1, n).astype(np.float32)
    return x, y, np.array(1.5, np.float32)


def test_a_kernel_called_directly_matches_the_reference(rng):
    x, y, d = bce_arrays(rng, 37)
    out = np.full(37, np.nan, np.float32)
    bce_kernel(37)(x, y, d, out)
    np.testing.assert_allclose(out, ref.binary_cross_entropy_grad(x, y, d, reduction=2), rtol=1e-5, atol=1e-6)


def test_a_bound_kernel_keeps_its_arrays_alive(rng):
    """bind() packs the arrays' addresses: the caller's names for the arrays may go (a loop
    binding one kernel per thread rebinds them), and the bound kernel still writes where it
    was bound, not into freed memory another array has taken."""
    import gc
    import weakref

    x, y, d = bce_arrays(rng, 4096)
    out = np.full(4096, np.nan, np.float32)
    expected = ref.binary_cross_entropy_grad(x, y, d, reduction=2)
    run = bce_kernel(4096).bind(x, y, d, out)
    alive = weakref.ref(out)
    del out
    gc.collect()
    assert alive() is not None
    taken = [np.zeros(4096, np.float32) for _ in range(8)]  # what freed memory would have gone to
    run()
    assert all(not t.any() for t in taken)
    np.testing.assert_allclose(alive(), expected, rtol=1e-5, atol=1e-6)


def test_a_strided_kernel_reads_and_writes_through_views(rng):
    x, y, d = bce_arrays(rng, 80)
    out = np.full(160, -7.0, np.float32)
    kernel = bce_kernel(None, strided=True)
    kernel(x[::-2], y[1::2], d, out[::4])  # negative and positive strides, an output view
    np.testing.assert_allclose(out[::4], ref.binary_cross_entropy_grad(x[::-2], y[1::2], d, reduction=2),
                               rtol=1e-5, atol=1e-6)
    untouched = np.ones(160, bool)
    untouched[::4] = False
    assert np.all(out[untouched] == -7.0)


@pytest.mark.parametrize(
    "bad,message",
    [
        (lambda a: a.astype(np.float64), "argument 'input_x' must have dtype float32, got float64"),
        (lambda a: a.reshape(1, -1), r"argument 'input_x' must have shape \(16,\), got \(1, 16\)"),
        (lambda a: np.concatenate([a, a]), r"argument 'input_x' must have shape \(16,\), got \(32,\)"),
        (lambda a: np.repeat(a, 2)[::2], "argument 'input_x' is not C-contiguous"),
        (lambda a: list(a), "argument 'input_x' must be a numpy array, got list"),
    ],
    ids=["dtype", "rank", "size", "layout", "type"],
)
def test_a_kernel_rejects_arrays_outside_its_signature(rng, bad, message):
    x, y, d = bce_arrays(rng, 16)
    out = np.full(16, -7.0, np.float32)
    with pytest.raises(ArgumentError, match=message):
        bce_kernel(16)(bad(x), y, d, out)
    assert np.all(out == -7.0)


def test_a_strided_kernel_rejects_strides_between_elements(rng):
    _, y, d = bce_arrays(rng, 16)
    odd = np.frombuffer(np.zeros(16 * 4 + 2, np.uint8).data, np.float32, 16, offset=0)
    skewed = np.lib.stride_tricks.as_strided(odd, (8,), (6,))
    with pytest.raises(ArgumentError, match="'input_x' has strides that are not a multiple of its element size"):
        bce_kernel(None, strided=True)(skewed, y[:8], d, np.zeros(8, np.float32))


def test_a_signature_that_failed_fails_every_time(rng):
    x, y, _ = bce_arrays(rng, 16)
    for _ in range(3):
        with pytest.raises(SignatureError, match="binary_cross_entropy_grad: parameter 'input_y' must have shape"):
            ops.binary_cross_entropy_grad(x, y[:8], np.float32(1.0))
        with pytest.raises(SignatureTypeError, match="parameter 'input_y' must have the dtype of 'input_x'"):
            ops.binary_cross_entropy_grad(x, y.astype(np.float16), np.float32(1.0))


def test_signatures_that_passed_are_remembered_and_not_confused(rng, monkeypatch):
    runs = []
    original = BinaryCrossEntropyGradOp.check.__func__
    # Counts the API's runs of the rules (the verifier's, on IR being compiled, say "operand").
    monkeypatch.setattr(BinaryCrossEntropyGradOp, "check",
                        classmethod(lambda cls, c: (runs.append(1) if c.word == "parameter" else None, original(cls, c))))
    launch._PASSED.clear()
    x, y, d = bce_arrays(rng, 16)
    for _ in range(3):
        np.testing.assert_allclose(ops.binary_cross_entropy_grad(x, y, d, reduction=2),
                                   ref.binary_cross_entropy_grad(x, y, d, reduction=2), rtol=1e-5, atol=1e-6)
    assert len(runs) == 1
    # Another shape, dtype or property is another signature: the rules run (and may fail) again.
    ops.binary_cross_entropy_grad(x[:8], y[:8], d, reduction=2)
    ops.binary_cross_entropy_grad(x, y, d, reduction=1)
    with pytest.raises(SignatureError, match="property 'reduction'"):
        ops.binary_cross_entropy_grad(x, y, d, reduction=5)
    assert len(runs) == 4


def test_equal_property_values_of_other_types_are_other_signatures():
    # 1 == 1.0 == True, but a rule may accept one and reject another: each is checked.
    class Strict:
        @staticmethod
        def short_name():
            return "strict"

        @staticmethod
        def get_irdl_definition():
            return SimpleNamespace(properties={})

        @staticmethod
        def check(c):
            if type(c.prop("k")) is not int:
                c.fail(f"property 'k' must be an int, got {type(c.prop('k')).__name__}")

    launch._PASSED.clear()
    assert launch.check(Strict, {}, {"k": 1}) == {"k": 1}
    for other in (1.0, True):
        with pytest.raises(SignatureError, match="property 'k' must be an int"):
            launch.check(Strict, {}, {"k": other})


def test_the_table_of_passed_signatures_is_bounded(rng, monkeypatch):
    monkeypatch.setattr(launch, "_PASSED_MAX", 8)
    launch._PASSED.clear()
    x, y, d = bce_arrays(rng, 16)
    for n in range(1, 20):
        ops.binary_cross_entropy_grad(x[:n], y[:n], d)
        assert len(launch._PASSED) <= 8
