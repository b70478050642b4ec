"""Outputs written past the caches (vectorize-elementwise-loops: a loop storing at least the
target's stream_store_bytes of an output it does not read; non-temporal stores from the first
element on a cache line, scalar iterations before it and after the last whole vector, then an
sfence). The CPU targets here are AVX2 ones (any x86-64 machine of this kind runs them) that
differ only in their cache: 64 KiB (a core streams from 16 Ki float32 on) or 1 GiB (never).

Every output position gives the same bits either way, matches the reference, and nothing
outside the output is written, wherever the output starts relative to a line; an output whose
elements cannot start a line (a float32 array at an odd byte address) runs through the caches."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_close

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.reference import harness
from npugrad.runtime import launch

TARGET = """\
name = "avx2-{name}"
cores = 2
vector_bits = 256
vector_registers = 16
llvm_cpu = "x86-64-v3"

[roles]
vector = "l2"
stage = "l2"
matrix_a = "l2"
matrix_b = "l2"
accumulator = "l2"

[[level]]
name = "dram"
kind = "global"

[[level]]
name = "l2"
capacity = "{l2}"
alignment = 64
unit = "cpu"
parent = "dram"

[[level]]
name = "l1"
capacity = "32KiB"
alignment = 64
unit = "cpu"
parent = "l2"
"""

N = 100_003  # elements: about 50 000 a block on 2, odd, not a whole number of vectors


@pytest.fixture(scope="module")
def cpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("targets")
    paths = {}
    for name, l2 in (("streams", "64KiB"), ("caches", "1GiB")):
        paths[name] = d / f"{name}.toml"
        paths[name].write_text(TARGET.format(name=name, l2=l2))
    return paths


def _inputs(rng, n):
    x = rng.uniform(0.01, 0.99, n).astype(np.float32)
    y = (rng.random(n) < 0.5).astype(np.float32)
    w = rng.uniform(0.5, 2.0, n).astype(np.float32)
    return x, y, w


def _bce_sum(x, y, w, dloss):
    """The reference's BCE gradient, sum reduction (npugrad.reference)."""
    arrays = {"input_x": x, "input_y": y, "dloss": np.array([dloss], np.float32), "weight": w}
    return harness.expected("binary_cross_entropy_grad", arrays, {"reduction": 2})["dx"]


def _run(cpu, x, y, w, out):
    with launch.using(Pipeline(cpu=str(cpu))):
        return ops.binary_cross_entropy_grad(x, y, np.float32(0.75), w, 2, out=out)


@pytest.mark.parametrize("start", [0, 1, 3, 4, 15, 16, 17])
def test_streamed_output_anywhere_on_a_line(cpus, start):
    """The output `start` float32 into a fresh line-aligned buffer (NaN around it): the scalar
    iterations before its first line take 16 − start mod 16 elements, then whole vectors."""
    x, y, w = _inputs(np.random.default_rng(start), N)
    got = {}
    for name, cpu in cpus.items():
        raw = np.full(N + 64, np.nan, np.float32)
        base = (-raw.ctypes.data % 64) // 4  # the buffer's first line-aligned element
        out = raw[base + start: base + start + N]
        assert _run(cpu, x, y, w, out) is out
        assert np.isnan(raw[: base + start]).all() and np.isnan(raw[base + start + N:]).all(), name
        got[name] = out.copy()
    assert np.array_equal(got["streams"].view(np.uint32), got["caches"].view(np.uint32))
    assert_close(got["streams"], _bce_sum(x, y, w, 0.75))


def test_output_at_an_odd_byte_address(cpus):
    """float32 elements 2 bytes past a 4-byte boundary never start a line: the loop runs through
    the caches (or the call refuses the array), and the answer is the same."""
    x, y, w = _inputs(np.random.default_rng(7), N)
    raw = np.zeros(4 * N + 64 + 2, np.uint8)
    skew = (-raw.ctypes.data % 64) + 2
    out = raw[skew: skew + 4 * N].view(np.float32)
    assert out.ctypes.data % 4 == 2
    try:
        got = _run(cpus["streams"], x, y, w, out)
    except ValueError as e:
        assert str(e).startswith("binary_cross_entropy_grad")
        return
    assert got is out
    assert_close(out, _bce_sum(x, y, w, 0.75))


@pytest.mark.parametrize("n", [1, 15, 16, 17, 16 * 1024 * 2 + 5])
def test_sizes_around_the_threshold(cpus, n):
    """Below the threshold, at it and just above (64 KiB per block: 16 Ki float32 on each of
    two): the same bits as through the caches."""
    x, y, w = _inputs(np.random.default_rng(n), n)
    a = _run(cpus["streams"], x, y, w, np.empty(n, np.float32))
    b = _run(cpus["caches"], x, y, w, np.empty(n, np.float32))
    assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    assert_close(a, _bce_sum(x, y, w, 0.75))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("start", [0, 5])
def test_embedding_rows_streamed(cpus, dtype, start):
    """The embedding gradient writes `out` a row at a time from a float32 scratch row: the
    nest's rows x D elements decide (here 300 rows of 260, 305 KiB of float32: past a 64 KiB
    cache), each row from its first line on, whatever the row's offset in a line (a row of 260
    float32 shifts each next row by 16 bytes). The same bits as through the caches, the
    reference's values, nothing written around `out`."""
    rng = np.random.default_rng(start)
    n, d, rows = 700, 260, 300
    grad = rng.standard_normal((n, d)).astype(dtype)
    idx = rng.integers(0, rows, n).astype(np.int64)
    got = {}
    for name, cpu in cpus.items():
        raw = np.full(rows * d + 64, np.nan, dtype)
        base = (-raw.ctypes.data % 64) // raw.itemsize
        out = raw[base + start: base + start + rows * d].reshape(rows, d)
        with launch.using(Pipeline(cpu=str(cpu))):
            res = ops.embedding_dense_backward(grad, idx, rows, padding_idx=3, scale_grad_by_freq=True, out=out)
        assert res is out
        assert np.isnan(raw[: base + start]).all() and np.isnan(raw[base + start + rows * d:]).all(), name
        got[name] = out.copy()
    assert np.array_equal(got["streams"].view(np.uint8), got["caches"].view(np.uint8))
    want = harness.expected("embedding_dense_backward", {"grad": grad, "indices": idx},
                            {"num_weights": rows, "padding_idx": 3, "scale_grad_by_freq": True})["out"]
    assert_close(got["streams"], want)


def test_strided_output_rows_streamed(cpus):
    """An output whose rows are apart (every other row of a wider buffer, each row starting 12
    bytes further into a line than the one before): written a row at a time, each row from its
    first line on. The same bits as through the caches, the reference's values, and the gaps
    between the rows untouched."""
    rng = np.random.default_rng(3)
    rows, cols, pitch = 120, 1001, 2 * 1001 + 3
    x, y, w = (a.reshape(rows, cols) for a in _inputs(rng, rows * cols))
    got = {}
    for name, cpu in cpus.items():
        raw = np.full(rows * pitch + 64, np.nan, np.float32)
        base = (-raw.ctypes.data % 64) // 4
        out = raw[base: base + rows * pitch].reshape(rows, pitch)[:, 5: 5 + cols]
        assert not out.flags.c_contiguous
        assert _run(cpu, x, y, w, out) is out
        keep = np.ones(raw.shape, bool)
        keep[base: base + rows * pitch].reshape(rows, pitch)[:, 5: 5 + cols] = False
        assert np.isnan(raw[keep]).all(), name
        got[name] = out.copy()
    assert np.array_equal(got["streams"].view(np.uint32), got["caches"].view(np.uint32))
    assert_close(got["streams"], _bce_sum(x, y, w, 0.75))
