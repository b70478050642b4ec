"""Every op with every array against an inaccessible page (ending at one, or starting right after
one), in sizes that leave masked or remainder tails: not multiples of the 8/16 vector lanes, of
64-element lines, of the FLCE tiles (64 tokens x 128 vocabulary rows) or of the GEMM register
blocks, past the size above which work is split into blocks (1 << 17 elements), and past the
size above which zero fills stream (8 MiB). A read or write one element out of bounds kills
the test process with SIGSEGV."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from api_cases import Case, bce, ema_adam, embedding, flce, nll
from conftest import FLOAT_DTYPES, assert_close
from guard_pages import PAGE, against_guard, touches_guard

from npugrad.dtypes import BFLOAT16

F32, F16 = np.dtype(np.float32), np.dtype(np.float16)
LENGTHS = [1, 7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 1000, 4097, 131_073]


def _reversed(a: np.ndarray) -> np.ndarray:
    """The same values with negative strides on every axis."""
    if a.ndim == 0:
        return a
    flipped = np.flip(a).copy()
    return np.flip(flipped)


def _guarded_run(case: Case, at: str, layout: str = "contiguous") -> None:
    want = case.copy().expected()
    for name, a in case.arrays.items():
        if isinstance(a, np.ndarray):
            if layout == "reversed":
                a = _reversed(a)
            case.arrays[name] = against_guard(a, at)
            assert touches_guard(case.arrays[name], at)
    got = case.call()
    for name, array in got.items():
        assert_close(array, want[name])


GUARD_FAULTS = """
import numpy as np
from guard_pages import against_guard
a = against_guard(np.zeros(3, np.float32))
a[2] = 1  # the last element: fine
np.lib.stride_tricks.as_strided(a, (4,), (4,))[3] = 1  # one past it: the guard page
"""


def test_the_guard_page_faults():
    """The helper's promise, checked in a child process: touching the byte past the end faults."""
    result = subprocess.run([sys.executable, "-c", GUARD_FAULTS], capture_output=True, timeout=120, check=False,
                            cwd=Path(__file__).parent)
    assert result.returncode < 0, result  # killed by a signal (SIGSEGV), not a Python error
    assert against_guard(np.zeros(5, np.int8), "start").__array_interface__["data"][0] % PAGE == 0


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_bce(rng, at, n, dtype):
    _guarded_run(bce(rng, (n,), dtype, reduction=0, weighted=True, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("shape", [(3, 17), (9, 65), (5, 7, 33), (1000, 3)], ids=str)
@pytest.mark.parametrize("reduction", [1, 2])
def test_bce_strided(rng, at, shape, reduction):
    _guarded_run(bce(rng, shape, F32, reduction=reduction, weighted=True, out=True), at, "reversed")


NLL_SHAPES = [(1, 1), (3, 7), (5, 17), (9, 33), (2, 65), (17, 129), (1031, 2053)]  # the last one streams its zero fill


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("n, c", NLL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [F32, BFLOAT16], ids=str)
def test_nll(rng, at, n, c, dtype):
    _guarded_run(nll(rng, n, c, dtype, np.int64, reduction=0, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("c", [1, 9, 65])
def test_nll_one_d(rng, at, c):
    _guarded_run(nll(rng, 1, c, F16, np.uint8, reduction=1, one_d=True, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("n, d", [(1, 1), (6, 7), (11, 9), (3, 17), (40, 33), (7, 65), (2, 131_073)], ids=str)
@pytest.mark.parametrize("dtype, scale", [(F32, False), (BFLOAT16, True)], ids=["f32-sum", "bf16-scaled"])
def test_embedding(rng, at, n, d, dtype, scale):
    # 17 rows x 131073 floats: an 8.9 MB output, zero-filled by streaming stores.
    _guarded_run(embedding(rng, (n, d), (n,), 17, dtype, np.int32, padding_idx=2, scale=scale, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_ema_adam(rng, at, n, dtype):
    _guarded_run(ema_adam(rng, (n,), dtype), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("shape", [(3, 17), (9, 65)], ids=str)
def test_ema_adam_strided(rng, at, shape):
    _guarded_run(ema_adam(rng, shape, F32, mode=0, bias_correction=False), at, "reversed")


FLCE_SHAPES = [(1, 1, 1), (5, 7, 9), (13, 19, 37), (70, 17, 131), (7, 33, 3)]


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("bt, h, v", FLCE_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [BFLOAT16, F16, F32], ids=str)
def test_flce_memory_saving(rng, at, bt, h, v, dtype):
    _guarded_run(flce(rng, bt, h, v, dtype, "memory-saving", np.uint8, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
@pytest.mark.parametrize("bt, h, v", [(1, 1, 128), (5, 7, 129), (70, 17, 131)], ids=str)
@pytest.mark.parametrize("dtype", [BFLOAT16, F32], ids=str)
def test_flce_high_performance(rng, at, bt, h, v, dtype):
    _guarded_run(flce(rng, bt, h, v, dtype, "high-performance", np.bool_, out=True), at)


@pytest.mark.parametrize("at", ["end", "start"])
def test_flce_strided(rng, at):
    _guarded_run(flce(rng, 13, 19, 37, BFLOAT16, "memory-saving", np.bool_, out=True), at, "reversed")
