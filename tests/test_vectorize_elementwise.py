"""vectorize-elementwise-loops: every op's results with the pass match the reference and are
bit-identical to the scalar loops (each lane runs the scalar iteration's ops in the same order;
the remainder runs the scalar loop itself), on sizes that are not multiples of the lane count;
and the IR: which loops become vector loops, which stay scalar."""

from pathlib import Path

import numpy as np
import pytest
from conftest import FLOAT_DTYPES, assert_close
from xdsl.dialects import scf, vector
from xdsl.dialects.builtin import VectorType, f32
from xdsl.transforms.convert_linalg_to_loops import ConvertLinalgToLoopsPass

from npugrad import ops
from npugrad.compiler import Pipeline, make_context, parse
from npugrad.dialect.attributes import VECTORIZED
from npugrad.lowering.npu_to_cpu import LowerNpuToCpuPass
from npugrad.lowering.train_to_loops import ConvertTrainToLoopsPass
from npugrad.passes.vectorize_contractions import VectorizeContractionsPass
from npugrad.passes.vectorize_elementwise import VectorizeElementwiseLoopsPass
from npugrad.reference import harness
from npugrad.runtime.launch import using
from npugrad.targets import get as get_target

ROOT = Path(__file__).parents[1]
SIZES = [1, 15, 17, 1003]  # none a multiple of 16 lanes but 0
# The default pipeline, and the same with vectorize-elementwise-loops left out.
VECTOR = Pipeline()
SCALAR = Pipeline(
    vectorize=False, final_passes=[VectorizeContractionsPass(), ConvertLinalgToLoopsPass(), LowerNpuToCpuPass()]
)
dtypes = pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
sizes = pytest.mark.parametrize("n", SIZES)


def _both(call):
    """call() compiled without and with the pass; the results must have the same bits."""
    with using(SCALAR):
        scalar = call()
    with using(VECTOR):
        vectorized = call()
    for s, v in zip(scalar, vectorized, strict=True):
        np.testing.assert_array_equal(s.view(np.uint8), v.view(np.uint8))
    return vectorized


# -- numerics --------------------------------------------------------------------------------
@dtypes
@sizes
@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("weighted", [False, True])
def test_bce(rng, dtype, n, reduction, weighted):
    shapes = {"input_x": (3, n), "input_y": (3, n), "dloss": (3, n) if reduction == 0 else (1,)}
    if weighted:
        shapes["weight"] = (3, n)
    a = harness.random_operands("binary_cross_entropy_grad", shapes, dict.fromkeys(shapes, dtype), {}, rng)
    got = _both(lambda: (ops.binary_cross_entropy_grad(a["input_x"], a["input_y"], a["dloss"], a.get("weight"),
                                                        reduction),))
    want = harness.expected("binary_cross_entropy_grad", a, {"reduction": reduction})["dx"]
    assert_close(got[0], want)


@dtypes
@sizes
@pytest.mark.parametrize("mode", [0, 1])
def test_ema_adam(rng, dtype, n, mode):
    op = "apply_fused_ema_adam"
    a = harness.random_operands(op, {"grad": (2, n), "step": (1,)}, {"grad": dtype, "step": np.int64}, {}, rng)
    props = {"lr": 0.01, "weight_decay": 0.05, "mode": mode}

    def call():
        states = [a[k].copy() for k in ("var", "m", "v", "s")]
        return ops.apply_fused_ema_adam(a["grad"], *states, a["step"], **props)

    got = _both(call)
    want = harness.expected(op, a, props)
    for g, k in zip(got, ("var", "m", "v", "s")):
        assert_close(g, want[k])


@dtypes
@sizes
@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_nll(rng, dtype, n, reduction):
    op = "nll_loss_backward"
    shapes = {"grad_output": (5,) if reduction == 0 else (), "self": (5, n), "target": (5,), "weight": (n,),
              "total_weight": (1,)}
    dts = dict.fromkeys(shapes, dtype) | {"target": np.int64}
    a = harness.random_operands(op, shapes, dts, {"ignore_index": -100}, rng)
    got = _both(lambda: (ops.nll_loss_backward(a["grad_output"], a["self"], a["target"], a["weight"], reduction,
                                               -100, a["total_weight"]),))
    assert_close(got[0], harness.expected(op, a, {"reduction": reduction, "ignore_index": -100})["out"])


@dtypes
@sizes
@pytest.mark.parametrize("scale", [False, True])
def test_embedding(rng, dtype, n, scale):
    op = "embedding_dense_backward"
    props = {"num_weights": 11, "padding_idx": 2, "scale_grad_by_freq": scale}
    a = harness.random_operands(op, {"grad": (4, 9, n), "indices": (4, 9)}, {"grad": dtype, "indices": np.int64},
                                props, rng)
    got = _both(lambda: (ops.embedding_dense_backward(a["grad"], a["indices"], 11, 2, scale),))
    assert_close(got[0], harness.expected(op, a, props)["out"])


@dtypes
@sizes
@pytest.mark.parametrize("mode", ["memory-saving", "high-performance"])
def test_flce(rng, dtype, n, mode):
    op = "fused_linear_cross_entropy_loss_grad"
    bt, v = 9, 131
    shapes = {"grad": (bt,), "input": (bt, n), "weight": (v, n), "target_mask": (bt,), "masked_target": (bt,)}
    if mode == "high-performance":
        shapes["softmax"] = (bt, v)
    else:
        shapes["logits_max"] = shapes["sum_exp_logits"] = (bt,)
    dts = dict.fromkeys(shapes, np.float32) | {"input": dtype, "weight": dtype, "target_mask": np.bool_,
                                               "masked_target": np.int64}
    a = harness.random_operands(op, shapes, dts, {}, rng)
    got = _both(lambda: ops.fused_linear_cross_entropy_loss_grad(**a))
    want = harness.expected(op, a, {})
    assert_close(got[0], want["input_grad_out"])
    assert_close(got[1], want["weight_grad_out"])


# -- IR --------------------------------------------------------------------------------------
def _vectorized(text: str, target: str = "host"):
    ctx = make_context()
    module = parse(text, ctx=ctx)
    ConvertTrainToLoopsPass().apply(ctx, module)
    VectorizeElementwiseLoopsPass(target).apply(ctx, module)
    module.verify()
    return module


def _main_loops(module) -> list[scf.ForOp]:
    return [op for op in module.walk() if isinstance(op, scf.ForOp) and VECTORIZED.on(op)]


def _vector_loads(module) -> list[vector.LoadOp]:
    return [op for op in module.walk() if isinstance(op, vector.LoadOp)]


@pytest.mark.parametrize("example", ["bce_grad", "apply_fused_ema_adam"])
def test_examples_are_vectorized(example):
    module = _vectorized((ROOT / "examples" / f"{example}.mlir").read_text())
    assert len(_main_loops(module)) == 1
    lanes = get_target("host").vector_bits // 32  # 16 with AVX-512
    loads = _vector_loads(module)
    assert loads and all(ld.result.type.get_shape() == (lanes,) for ld in loads)
    if example == "bce_grad":
        assert VectorType(f32, [lanes]) in [ld.result.type for ld in loads]


ELEMENTWISE = """
func.func @f(%a: memref<?x?xf32>, %b: memref<?x?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x?xf32>
  scf.for %r = %c0 to %n step %c1 {
    scf.for %i = %c0 to %n step %c1 {
      %x = memref.load %a[%r, %i] : memref<?x?xf32>
      memref.store %x, %b[BODY] : memref<?x?xf32>
    }
  }
  func.return
}
"""


@pytest.mark.parametrize(
    "store, lanes",
    [
        ("%r, %i", get_target("host").vector_bits // 32),  # the same pattern as the load: vectorised
        ("%i, %r", 0),  # transposed: not contiguous in %i
        ("%r, %j", 0),  # %i in arithmetic
    ],
)
def test_access_patterns(store, lanes):
    text = ELEMENTWISE.replace("BODY", store)
    if "%j" in store:
        text = text.replace("memref.store", "%j = arith.addi %i, %c1 : index\n      memref.store")
    module = _vectorized(text)
    loads = _vector_loads(module)
    # Vectorised twice: %b is an output the loop does not read, written past the caches or
    # through them, a run-time choice (vectorize-elementwise-loops-stream.mlir).
    assert [ld.result.type.get_shape() for ld in loads] == ([(lanes,)] * 2 if lanes else [])


def test_in_place_needs_the_same_index_list():
    """a[r, i] = a[r, i] + a[0, i] stays scalar: lane i of row r could read a[0, i] after it changed."""
    text = ELEMENTWISE.replace("%b[BODY]", "%a[%r, %i]").replace(
        "memref.store %x", "%y = memref.load %a[%c0, %i] : memref<?x?xf32>\n      %z = arith.addf %x, %y : f32\n"
        "      memref.store %z")
    assert not _main_loops(_vectorized(text))
    assert _main_loops(_vectorized(text.replace("%a[%c0, %i]", "%a[%r, %i]")))


def test_lanes_follow_the_target():
    """npu-a2: 2048-bit vectors, 64 float32 lanes."""
    module = _vectorized((ROOT / "examples/bce_grad.mlir").read_text(), "npu-a2")
    assert {ld.result.type.get_shape() for ld in _vector_loads(module)} == {(64,)}
