"""PyTorch's own test inputs as the oracle: the sample inputs of its OpInfo database
(torch.testing._internal.common_methods_invocations, what PyTorch's test_ops runs) for the
functions npugrad replaces, through npugrad.torch and npugrad.ops, forward and every gradient
PyTorch gives, under one random upstream gradient, against PyTorch's own results. Where PyTorch
raises, ours must raise too, and the reverse.

Tolerances: float32 1e-5 (relative and absolute); float16/bfloat16 1.6e-2 relative, 1e-2 absolute
(both sides round to the dtype; the kernels accumulate in float32). float64 is not one of the
kernels' dtypes (OPS.md): it is rejected when the forward runs (test_torch_ops.py).

(This found binary_cross_entropy's target given no gradient where PyTorch gives one.)"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (pip install npugrad[torch])")
pytest.importorskip("expecttest", reason="PyTorch's OpInfo database imports expecttest (pip install npugrad[torch])")

import torch.nn.functional as F

import npugrad.torch as nt
from npugrad import ops
from npugrad.dtypes import BFLOAT16

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
NUMPY = {torch.float32: np.float32, torch.bfloat16: BFLOAT16, torch.float16: np.float16}
OURS = {  # OpInfo's name -> ours, called as the OpInfo's op is (embedding: weight first)
    "nn.functional.binary_cross_entropy": nt.binary_cross_entropy,
    "nn.functional.nll_loss": nt.nll_loss,
    "nn.functional.embedding": lambda weight, indices, **kw: nt.embedding(indices, weight, **kw),
}


def _tolerance(dtype):
    return {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1.6e-2, "atol": 1e-2}


@pytest.fixture(scope="module")
def op_db():
    from torch.testing._internal.common_methods_invocations import op_db

    return {o.name: o for o in op_db}


def _copy(value):
    return value.detach().clone().requires_grad_(value.requires_grad) if torch.is_tensor(value) else value


def _run(f, args, kwargs, upstream_seed: int):
    """f's result and the gradients of every argument that requires one, under a random upstream
    gradient; or the exception it raised."""
    args, kwargs = [_copy(a) for a in args], {k: _copy(v) for k, v in kwargs.items()}
    leaves = [a for a in [*args, *kwargs.values()] if torch.is_tensor(a) and a.requires_grad]
    try:
        out = f(*args, **kwargs)
    except (RuntimeError, ValueError, IndexError, TypeError) as e:
        return e
    if not out.requires_grad:
        return out.detach(), []
    upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(upstream_seed)).to(out.dtype)
    grads = torch.autograd.grad(out, leaves, upstream, allow_unused=True)
    return out.detach(), [torch.zeros_like(a) if d is None else d for a, d in zip(leaves, grads)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", sorted(OURS))
def test_pytorch_opinfo_samples_match(op_db, name, dtype):
    info = op_db[name]
    samples = list(info.sample_inputs("cpu", dtype, requires_grad=True))
    assert samples
    for i, s in enumerate(samples):
        label = f"{name} {dtype} sample {i}: input {tuple(s.input.shape)}, kwargs {sorted(s.kwargs)}"
        args = (s.input, *s.args)
        theirs = _run(info.op, args, s.kwargs, i)
        mine = _run(OURS[name], args, s.kwargs, i)
        assert isinstance(mine, Exception) == isinstance(theirs, Exception), (label, mine, theirs)
        if isinstance(mine, Exception):
            continue
        torch.testing.assert_close(mine[0].float(), theirs[0].float(), **_tolerance(dtype), equal_nan=True, msg=label)
        assert len(mine[1]) == len(theirs[1])
        for a, b in zip(mine[1], theirs[1]):
            torch.testing.assert_close(a.float(), b.float(), **_tolerance(dtype), equal_nan=True, msg=label)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pytorch_cross_entropy_samples_match_the_linear_cross_entropy(op_db, dtype):
    """F.cross_entropy's OpInfo samples with class ids over (N, C) logits (no class weight: the
    fused loss has none) as the linear cross entropy of the logits and an identity weight:
    npugrad.ops.linear_cross_entropy (with the samples' label smoothing) and, without it,
    npugrad.torch.linear_cross_entropy; loss and input gradient."""
    info = op_db["nn.functional.cross_entropy"]
    count = 0
    for i, s in enumerate(info.sample_inputs("cpu", dtype, requires_grad=True)):
        x, target, kw = s.input, s.args[0], dict(s.kwargs)
        if x.dim() != 2 or target.is_floating_point() or kw.get("weight") is not None:
            continue
        count += 1
        label = f"cross_entropy {dtype} sample {i}: input {tuple(x.shape)}, kwargs {kw}"
        theirs = _run(lambda a, t=target, kw=kw: F.cross_entropy(a.float(), t, **kw), [x], {}, i)
        upstream = torch.randn(theirs[0].shape, generator=torch.Generator().manual_seed(i))
        eye = torch.eye(x.shape[1], dtype=dtype)
        r = ops.linear_cross_entropy(x.detach().float().numpy().astype(NUMPY[dtype]),
                                     eye.float().numpy().astype(NUMPY[dtype]), target.numpy(),
                                     grad_output=upstream.numpy().reshape(-1) if upstream.dim() else [float(upstream)],
                                     **kw)
        torch.testing.assert_close(torch.from_numpy(np.asarray(r.loss, np.float32)), theirs[0].float(),
                                   **_tolerance(dtype), equal_nan=True, msg=label)
        torch.testing.assert_close(torch.from_numpy(np.asarray(r.input_grad, np.float32)), theirs[1][0].float(),
                                   **_tolerance(dtype), msg=label)
        if kw.get("label_smoothing"):
            continue
        mine = _run(lambda a, w, t=target, kw=kw: nt.linear_cross_entropy(a, w, t, **kw), [x, eye], {}, i)
        torch.testing.assert_close(mine[0].float(), theirs[0].float(), **_tolerance(dtype), equal_nan=True, msg=label)
        torch.testing.assert_close(mine[1][0].float(), theirs[1][0].float(), **_tolerance(dtype), msg=label)
    assert count >= 3


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_pytorch_linear_cross_entropy_samples_match_or_are_named_unsupported(dtype):
    """F.linear_cross_entropy's own OpInfo samples (PyTorch 2.13 on) through
    npugrad.torch.linear_cross_entropy, called as F's: those within its domain (a (V, H) weight,
    class ids, no class `weight` or `linear_bias`: unbatched (H,) inputs, F's ignore_index=None
    and its chunking `options` included) match PyTorch's loss and gradients; the others raise.
    (Unbatched inputs were rejected, naming a forward kernel's rank rule.)"""
    from torch.testing._internal.common_methods_invocations import op_db as variants

    info = next((o for o in variants if o.name == "nn.functional.linear_cross_entropy" and not o.variant_test_name), None)
    if info is None:
        pytest.skip("this PyTorch has no F.linear_cross_entropy")
    compared = 0
    for i, s in enumerate(info.sample_inputs("cpu", dtype, requires_grad=True)):
        x, w, target = s.input, *s.args
        label = f"linear_cross_entropy {dtype} sample {i}: {tuple(x.shape)} {tuple(w.shape)} {s.kwargs}"
        mine = _run(nt.linear_cross_entropy, [x, w, target], s.kwargs, i)
        if (w.dim() != 2 or target.is_floating_point() or s.kwargs.get("weight") is not None
                or s.kwargs.get("linear_bias") is not None):
            assert isinstance(mine, TypeError | ValueError), (label, mine)
            continue
        theirs = _run(info.op, [x, w, target], s.kwargs, i)
        assert not isinstance(mine, Exception), (label, mine)
        compared += 1
        torch.testing.assert_close(mine[0].float(), theirs[0].float(), **_tolerance(dtype), equal_nan=True, msg=label)
        for a, b in zip(mine[1], theirs[1], strict=True):
            torch.testing.assert_close(a.float(), b.float(), **_tolerance(dtype), msg=label)
    assert compared >= 8
