"""PyTorch tensors (and any `__dlpack__` array) through the Python API: zero-copy both ways,
bfloat16 included, the caller's kind of array returned. Every op, through its recipe."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from npugrad import aclnn, ops
from npugrad.dialect.checks import SignatureTypeError
from npugrad.dtypes import BFLOAT16
from npugrad.recipes import public_recipes

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (pip install npugrad[torch])")

from npugrad.interop.dlpack import to_numpy, to_torch  # noqa: E402


class Producer:
    """An array of some other library: all it offers is the DLPack protocol."""

    def __init__(self, tensor):
        self.tensor = tensor

    def __dlpack__(self, *args, **kwargs):
        return self.tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self.tensor.__dlpack_device__()


DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.bool, torch.uint8, torch.int32, torch.int64]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_views_share_memory_both_ways(dtype):
    t = torch.arange(24).reshape(4, 6).to(dtype)
    for view in (t, t[:, ::2], t.t()):
        a = to_numpy(view)
        assert a.ctypes.data == view.data_ptr()
        assert a.shape == tuple(view.shape)
        assert a.strides == tuple(s * view.element_size() for s in view.stride())
        assert np.array_equal(a.astype(np.float64), view.double().numpy())
        assert to_torch(a).data_ptr() == a.ctypes.data
        assert to_torch(a).dtype == dtype


def test_a_bfloat16_array_of_any_dlpack_producer_is_read_in_place():
    t = torch.arange(12, dtype=torch.bfloat16).reshape(3, 4)[:, ::2]
    with pytest.raises(RuntimeError, match="Unsupported dtype"):
        np.from_dlpack(Producer(t))  # what NumPy alone does
    a = to_numpy(Producer(t))
    assert a.dtype == BFLOAT16 and a.ctypes.data == t.data_ptr() and a.strides == (8, 4)
    a[2, 1] = -3
    assert t[2, 1].item() == -3


def _example(recipe, dtype):
    return next(e for e in recipe.examples() if dtype in e.dtypes.values())


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16], ids=str)
@pytest.mark.parametrize("recipe", list(public_recipes().values()), ids=lambda r: r.op.short_name())
def test_every_op_takes_tensors_and_returns_tensors(recipe, dtype):
    example = _example(recipe, dtype)
    arrays = recipe.random_inputs(example.shapes, example.dtypes, example.props, np.random.default_rng(3))
    arrays = {k: np.ascontiguousarray(v) for k, v in arrays.items()}
    for name in recipe.op.outputs():  # in-place states (EMA-Adam) are inputs too
        if name in example.shapes and name not in arrays:
            arrays[name] = np.zeros(example.shapes[name], example.dtypes[name])
    want = recipe.call_api({k: v.copy() for k, v in arrays.items()}, example.props)
    tensors = {k: to_torch(v.copy()) for k, v in arrays.items()}
    got = recipe.call_api(tensors, example.props)
    for name, w in want.items():
        g = got[name]
        assert isinstance(g, torch.Tensor), (name, type(g))
        assert to_numpy(g).dtype == w.dtype
        assert np.array_equal(to_numpy(g).view(np.uint8), w.view(np.uint8), equal_nan=False), name
        if name in tensors:  # updated in place: the caller's own tensor
            assert g is tensors[name]


def test_out_tensors_are_written_where_they_lie_and_returned():
    x = torch.rand(40, 30) * 0.9 + 0.05
    y = torch.rand(40, 30)
    out = torch.full((80, 30), float("nan"))[::2]  # strided
    address = out.data_ptr()
    result = ops.binary_cross_entropy_grad(x, y, torch.ones(1), out=out)
    assert result is out and out.data_ptr() == address
    want = ops.binary_cross_entropy_grad(x.numpy(), y.numpy(), np.ones(1, np.float32))
    assert np.array_equal(out.numpy(), want)


def test_allocated_outputs_come_back_as_tensors_over_the_same_memory(monkeypatch):
    made = []
    real = np.empty

    def empty(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(np, "empty", empty)
    gi, gw = ops.fused_linear_cross_entropy_loss_grad(
        torch.ones(8), torch.randn(8, 16).bfloat16(), torch.randn(128, 16).bfloat16(), torch.zeros(8, dtype=torch.bool),
        torch.arange(8), logits_max=torch.zeros(8), sum_exp_logits=torch.full((8,), 128.0))
    assert gi.dtype == gw.dtype == torch.bfloat16
    assert {gi.data_ptr(), gw.data_ptr()} <= {a.ctypes.data for a in made}


def test_tensors_that_require_grad_are_read_through_detach():
    x = (torch.rand(16) * 0.9 + 0.05).requires_grad_()
    dx = ops.binary_cross_entropy_grad(x, torch.rand(16), torch.ones(1))
    assert not dx.requires_grad and dx.shape == (16,)


def test_ema_adam_updates_tensors_in_place_and_returns_them():
    var, m, v, s = (torch.randn(33) for _ in range(4))
    addresses = [t.data_ptr() for t in (var, m, v, s)]
    before = var.clone()
    result = ops.apply_fused_ema_adam(torch.randn(33), var, m, v, s, 1)
    assert all(r is t for r, t in zip(result, (var, m, v, s)))
    assert [t.data_ptr() for t in (var, m, v, s)] == addresses
    assert not torch.equal(var, before)


def test_tensors_a_kernel_writes_are_marked_changed_for_autograd():
    """A tensor written through `out=` or updated in place moves its version counter when the
    kernel runs (not when a two-phase call is planned), as PyTorch's in-place ops do: a backward
    that saved it then fails instead of using the new values."""
    x = torch.rand(16) * 0.9 + 0.05
    out = torch.empty(16)
    a = torch.ones(16, requires_grad=True)
    saved = a * out  # autograd keeps `out` for a's gradient
    version = out._version
    ops.binary_cross_entropy_grad(x, torch.rand(16), torch.ones(1), out=out)
    assert out._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.sum().backward()

    var, m, v, s = (torch.randn(33) for _ in range(4))
    versions = [t._version for t in (var, m, v, s)]
    grad = torch.randn(33)
    ops.apply_fused_ema_adam(grad, var, m, v, s, 1)
    assert all(t._version > n for t, n in zip((var, m, v, s), versions)) and grad._version == 0

    out = torch.empty(5, 7)
    _, executor = aclnn.NLLLossBackward.get_workspace_size(
        gradOutput=torch.ones(()), self=torch.randn(5, 7), target=torch.tensor([0, 3, 6, 1, 2]),
        weight=torch.ones(7), reduction=2, ignoreIndex=-100, totalWeight=torch.ones(()), out=out)
    assert out._version == 0  # planned: nothing written yet
    aclnn.execute(None, executor)
    assert out._version == 1


def test_other_producers_get_numpy_arrays_back():
    x = Producer((torch.rand(16) * 0.9 + 0.05).bfloat16())
    dx = ops.binary_cross_entropy_grad(x, Producer(torch.rand(16).bfloat16()), Producer(torch.ones(1).bfloat16()))
    assert isinstance(dx, np.ndarray) and dx.dtype == BFLOAT16


def test_mixed_numpy_and_tensor_arguments():
    dx = ops.binary_cross_entropy_grad(np.full(4, 0.5, np.float32), torch.zeros(4), np.ones(1, np.float32))
    assert isinstance(dx, torch.Tensor) and torch.allclose(dx, torch.full((4,), 0.5))


def test_the_checks_name_the_parameter_for_tensors_too():
    x = torch.rand(8)
    with pytest.raises(ValueError, match="parameters 'input_x' and 'out' overlap in memory"):
        ops.binary_cross_entropy_grad(x, x, torch.ones(1), out=x)
    with pytest.raises(TypeError, match="parameter 'input_y' must have the dtype of 'input_x' \\(float32\\), got float64"):
        ops.binary_cross_entropy_grad(torch.rand(8), torch.rand(8, dtype=torch.float64), torch.ones(1))


def test_an_array_off_the_cpu_is_rejected_by_name():
    class OnDevice(Producer):
        def __dlpack_device__(self):
            return (2, 0)  # kDLCUDA

    with pytest.raises(SignatureTypeError, match="parameter 'input_y' must be on the CPU"):
        ops.binary_cross_entropy_grad(torch.rand(4), OnDevice(torch.rand(4)), torch.ones(1))


def test_a_tensor_on_the_meta_device_is_rejected_by_name():
    """torch's own __dlpack_device__ raises a bare ValueError for the meta device (found by a probe)."""
    with pytest.raises(SignatureTypeError, match="parameter 'input_y' must be on the CPU, got a tensor on device meta"):
        ops.binary_cross_entropy_grad(torch.rand(4), torch.rand(4, device="meta"), torch.ones(1))
    with pytest.raises(SignatureTypeError, match="parameter 'out' must be on the CPU"):
        ops.binary_cross_entropy_grad(torch.rand(4), torch.rand(4), torch.ones(1), out=torch.empty(4, device="meta"))

    class Unnamed(Producer):
        def __dlpack_device__(self):
            raise ValueError("no device")

    with pytest.raises(SignatureTypeError, match="parameter 'input_y' must be on the CPU; its DLPack device cannot be read"):
        ops.binary_cross_entropy_grad(torch.rand(4), Unnamed(torch.rand(4)), torch.ones(1))


def test_the_vendor_two_phase_form_takes_tensors():
    go, s, t = torch.ones(()), torch.randn(5, 7), torch.tensor([0, 3, 6, 1, 2])
    out = torch.empty(5, 7)
    size, executor = aclnn.NLLLossBackward.get_workspace_size(
        gradOutput=go, self=s, target=t, weight=torch.ones(7), reduction=2, ignoreIndex=-100,
        totalWeight=torch.ones(()), out=out)
    assert aclnn.execute(None, executor) == 0
    assert torch.equal(out, torch.ops.aten.nll_loss_backward(go, s, t, None, 2, -100, torch.ones(())))


def test_torch_stays_optional():
    """The API never imports torch itself: only a caller that passes tensors has it loaded."""
    code = ("import sys, numpy as np, npugrad.ops as ops\n"
            "ops.binary_cross_entropy_grad(np.full(4, .5, np.float32), np.zeros(4, np.float32), np.ones(1, np.float32))\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True)
