"""vectorize-contractions in the default pipeline: the linear cross-entropy gradient with its GEMMs
as register-blocked micro-kernels, against the NumPy reference, at sizes that exercise every
edge of the blocking (rows not a multiple of MR, columns not a multiple of NR vectors or of one
vector, tiny ones), untiled and tiled for the host; and run to run bit-identical."""

import numpy as np
import pytest
from conftest import FLOAT_DTYPES
from test_flce import MODES, _check, _operands

from npugrad import ops
from npugrad.compiler import Pipeline
from npugrad.dtypes import BFLOAT16
from npugrad.passes.vectorize_contractions import VectorizeContractionsPass
from npugrad.runtime.launch import using

# With the default 64×128 tiles: token tiles of 64 and 5 rows, vocabulary tiles of 128 and 3
# (GEMM 1 columns, GEMM 3 rows), H = 101 = one 64-column block, two vectors and 5 lanes.
SIZES = [(69, 101, 131), (37, 29, 131), (1, 16, 130), (6, 64, 128)]
TINY = [(1, 1, 1), (1, 7, 2), (3, 1, 3), (7, 3, 1)]


def _run(a, pipeline=None):
    if pipeline is None:
        return ops.fused_linear_cross_entropy_loss_grad(**a)
    with using(pipeline):
        return ops.fused_linear_cross_entropy_loss_grad(**a)


def test_default_pipeline_vectorizes():
    assert any(isinstance(p, VectorizeContractionsPass) for p in Pipeline().passes_to("vectorized"))
    assert not any(isinstance(p, VectorizeContractionsPass) for p in Pipeline(vectorize=False).passes_to("vectorized"))


@pytest.mark.parametrize(("bt", "h", "v"), SIZES, ids=str)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_matches_reference(rng, bt, h, v, mode, dtype):
    a = _operands(rng, bt=bt, h=h, v=v, dtype=dtype, mode=mode)
    _check(a, _run(a))


@pytest.mark.parametrize(("bt", "h", "v"), TINY, ids=str)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_tiny_memory_saving(rng, bt, h, v, dtype):
    a = _operands(rng, bt=bt, h=h, v=v, dtype=dtype, mode="memory-saving")
    _check(a, _run(a))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
def test_tiled_for_host_matches_reference(rng, mode, dtype):
    a = _operands(rng, bt=69, h=101, v=131, dtype=dtype, mode=mode)
    _check(a, _run(a, Pipeline(target="host")))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_deterministic(rng, mode, dtype):
    a = _operands(rng, bt=69, h=101, v=131, dtype=dtype, mode=mode)
    first = [x.tobytes() for x in _run(a)]
    assert [x.tobytes() for x in _run(a)] == first
