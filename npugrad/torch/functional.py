"""Losses and layers for PyTorch models whose backward is an npugrad kernel: the forward is
PyTorch's own (ATen) but for the linear cross entropy's (npugrad's forward kernels), the gradient
`torch.ops.npugrad.<op>` (kernels.py). Each is a custom operator (`torch.ops.npugrad.<name>`)
with its autograd formula registered.

    loss = npugrad.torch.linear_cross_entropy(hidden, lm_head_weight, target)   # LM head + CE
    loss.backward()        # dX, dW: fused_linear_cross_entropy_loss_grad (no BT×V buffer)

| function | forward | backward (npugrad kernel) |
|---|---|---|
| binary_cross_entropy(input, target, weight, reduction) | aten.binary_cross_entropy | binary_cross_entropy_grad |
| nll_loss(input, target, weight, ignore_index, reduction) | aten.nll_loss_forward | nll_loss_backward |
| embedding(input, weight, padding_idx, scale_grad_by_freq) | aten.embedding | embedding_dense_backward |
| linear_cross_entropy(input, linear_weight, target, ignore_index, reduction, label_smoothing, z_loss, softcap) | fused_linear_online_max_sum, fused_cross_entropy_loss_with_max_sum | fused_linear_cross_entropy_loss_grad (memory-saving mode) |

Gradients flow where PyTorch's do: BCE to `input` (the kernel) and to a floating `target`
(ATen's formula, −weight·logit(input), an elementwise product in PyTorch), NLL to `input`, the
embedding to `weight`, the linear cross entropy to `input` and `linear_weight`. As in ATen, a `weight`
of BCE or NLL that requires grad is an error (neither is differentiable in it), and so, when the
forward runs, is a tensor requiring grad in a dtype the kernels do not take (float64: they take
float32, float16 and bfloat16). Second derivatives are not supported (the kernels have no
backward of their own). Under torch.autocast they cast their arguments as ATen's autocast
does PyTorch's: linear_cross_entropy to the autocast dtype (F.linear's), the two losses to
float32.

`linear_cross_entropy` is the whole vocabulary on one rank (target_mask = ignored tokens,
masked_target = target); input and linear_weight in float32, float16 or bfloat16, as the kernel takes them; the
loss is float32. Its forward is two kernels too: fused_linear_online_max_sum (the logits' max,
sum of exponentials and target logit in one pass over the weight, no BT×V buffer), then
fused_cross_entropy_loss_with_max_sum.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

from npugrad.ops.common import REDUCTION_MEAN, REDUCTION_NONE, REDUCTION_SUM
from npugrad.ops.loss import loss_options
from npugrad.torch.kernels import KERNELS

K = torch.ops.npugrad
REDUCTIONS = {"none": REDUCTION_NONE, "mean": REDUCTION_MEAN, "sum": REDUCTION_SUM}

assert set(KERNELS) >= {"binary_cross_entropy_grad", "nll_loss_backward", "embedding_dense_backward",
                                 "fused_linear_cross_entropy_loss_grad", "fused_linear_online_max_sum",
                                 "fused_cross_entropy_loss_with_max_sum"}


def _reduction(reduction: str) -> int:
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {reduction!r}")
    return REDUCTIONS[reduction]


KERNEL_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _differentiable(op: str, **tensors: Tensor) -> None:
    """The tensors a gradient will flow to are in a dtype the kernels take, checked when the
    forward runs (not when the backward does): float32, float16 or bfloat16."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t.requires_grad and t.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{op}: parameter '{name}' requires grad, and npugrad's gradient kernels take float32, "
                            f"float16 or bfloat16, got {t.dtype}")


def _autocast(lower_precision: bool, *tensors: Tensor | None) -> tuple:
    """The tensors as ATen's autocast casts an op's arguments where it is on for their device:
    to the autocast dtype for a matmul (F.linear's policy: `lower_precision`), to float32 for a
    loss (F.nll_loss's and F.binary_cross_entropy's); float64 and integer tensors as they are.
    The kernels take one dtype for all their floating arguments, which autocast mixes."""
    device = tensors[0].device.type
    if not torch.is_autocast_enabled(device):
        return tensors
    dtype = torch.get_autocast_dtype(device) if lower_precision else torch.float32
    return tuple(t.to(dtype) if t is not None and t.is_floating_point() and t.dtype != torch.float64 else t
                 for t in tensors)


def _not_differentiable(op: str, **tensors: Tensor | None) -> None:
    """As ATen: these arguments have no derivative, and a gradient asked of them is an error."""
    if not torch.is_grad_enabled():
        return
    for name, t in tensors.items():
        if t is not None and t.requires_grad:
            raise RuntimeError(f"{op}: the function is not differentiable with respect to argument '{name}'. "
                               "This input cannot have requires_grad True.")


# -- binary cross entropy ----------------------------------------------------------------------


@torch.library.custom_op("npugrad::binary_cross_entropy", mutates_args=())
def _binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None, reduction: int) -> Tensor:
    return torch.ops.aten.binary_cross_entropy(input, target, weight, reduction).clone()


@_binary_cross_entropy.register_fake
def _(input, target, weight, reduction):
    return torch.ops.aten.binary_cross_entropy(input, target, weight, reduction)


def _bce_setup(ctx, inputs, output) -> None:
    input, target, weight, reduction = inputs
    ctx.save_for_backward(input, target, weight)
    ctx.reduction = reduction


def _bce_backward(ctx, grad: Tensor):
    input, target, weight = ctx.saved_tensors
    dloss = grad if ctx.reduction == REDUCTION_NONE else grad.reshape(1)
    # ATen's forward and backward take a weight of another floating dtype (float64 for float32
    # input, say); the kernel reads it in the input's.
    kernel_weight = weight if weight is None else weight.to(input.dtype)
    dx = (K.binary_cross_entropy_grad(input, target, dloss, kernel_weight, ctx.reduction)
          if ctx.needs_input_grad[0] else None)
    dy = None
    if ctx.needs_input_grad[1]:  # ∂/∂y of −w·(y·log x + (1 − y)·log(1 − x)) = −w·logit(x): ATen's own formula
        dy = torch.logit(input).neg_().mul_(grad)
        if weight is not None:
            dy.mul_(weight)
        if ctx.reduction == REDUCTION_MEAN:
            dy.div_(target.numel())
    return dx, dy, None, None


_binary_cross_entropy.register_autograd(_bce_backward, setup_context=_bce_setup)


def _legacy(reduction: str, size_average, reduce) -> str:
    """F.*'s deprecated `size_average`/`reduce`, as PyTorch reads them (with its warning)."""
    if size_average is None and reduce is None:
        return reduction
    from torch.nn import _reduction

    return _reduction.legacy_get_string(size_average, reduce)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, reduction: str = "mean", *,
                         size_average: bool | None = None, reduce: bool | None = None) -> Tensor:
    """torch.nn.functional.binary_cross_entropy; its gradient is npugrad's binary_cross_entropy_grad.
    As there, `weight` broadcasts to the target's shape (one weight per class, say) and a target
    of another size than the input is an error; the deprecated `size_average`/`reduce` are read
    as PyTorch reads them (keywords here)."""
    reduction = _legacy(reduction, size_average, reduce)
    if target.size() != input.size():
        raise ValueError(f"binary_cross_entropy: parameter 'target' must have the input's size {tuple(input.size())}, "
                         f"got {tuple(target.size())}")
    input, target, weight = _autocast(False, input, target, weight)
    _differentiable("binary_cross_entropy", input=input, target=target)
    _not_differentiable("binary_cross_entropy", weight=weight)
    if weight is not None:  # F.binary_cross_entropy expands it; the kernel reads one weight per element
        weight = weight.expand(torch.broadcast_shapes(target.size(), weight.size()))
    return _binary_cross_entropy(input, target, weight, _reduction(reduction))


# -- negative log-likelihood -------------------------------------------------------------------


@torch.library.custom_op("npugrad::nll_loss", mutates_args=())
def _nll_loss(input: Tensor, target: Tensor, weight: Tensor | None, reduction: int,
              ignore_index: int) -> tuple[Tensor, Tensor]:
    return torch.ops.aten.nll_loss_forward(input, target, weight, reduction, ignore_index)


@_nll_loss.register_fake
def _(input, target, weight, reduction, ignore_index):
    return torch.ops.aten.nll_loss_forward(input, target, weight, reduction, ignore_index)


def _nll_setup(ctx, inputs, output) -> None:
    input, target, weight, reduction, ignore_index = inputs
    weight = weight if weight is not None else input.new_ones(input.shape[-1])
    ctx.save_for_backward(input, target, weight, output[1])
    ctx.reduction, ctx.ignore_index = reduction, ignore_index
    ctx.mark_non_differentiable(output[1])


def _nll_backward(ctx, grad: Tensor, _total_weight_grad):
    input, target, weight, total_weight = ctx.saved_tensors
    dx = K.nll_loss_backward(grad, input, target, weight, ctx.reduction, ctx.ignore_index, total_weight)
    return dx, None, None, None, None


_nll_loss.register_autograd(_nll_backward, setup_context=_nll_setup)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,
             reduction: str = "mean", *, size_average: bool | None = None, reduce: bool | None = None) -> Tensor:
    """torch.nn.functional.nll_loss (input (N, C) or (C,), or (N, C, d1, ...) with target (N, d1, ...):
    the classes moved last and the positions flattened into rows, as the kernel takes them); its
    gradient is npugrad's nll_loss_backward. The deprecated `size_average`/`reduce` are read as
    PyTorch reads them (keywords here)."""
    r = _reduction(_legacy(reduction, size_average, reduce))
    input, weight = _autocast(False, input, weight)
    _differentiable("nll_loss", input=input)
    _not_differentiable("nll_loss", weight=weight)
    if input.dim() <= 2:
        return _nll_loss(input, target, weight, r, ignore_index)[0]
    if target.shape != input.shape[:1] + input.shape[2:]:
        raise ValueError(f"nll_loss: parameter 'target' must have shape {tuple(input.shape[:1] + input.shape[2:])} "
                         f"for input {tuple(input.shape)}, got {tuple(target.shape)}")
    rows = input.movedim(1, -1).reshape(-1, input.shape[1])
    loss = _nll_loss(rows, target.reshape(-1), weight, r, ignore_index)[0]
    return loss.reshape(target.shape) if r == REDUCTION_NONE else loss


# -- embedding ---------------------------------------------------------------------------------


@torch.library.custom_op("npugrad::embedding", mutates_args=())
def _embedding(weight: Tensor, indices: Tensor, padding_idx: int, scale_grad_by_freq: bool) -> Tensor:
    return torch.ops.aten.embedding(weight, indices, padding_idx, scale_grad_by_freq).clone()


@_embedding.register_fake
def _(weight, indices, padding_idx, scale_grad_by_freq):
    return weight.new_empty((*indices.shape, weight.shape[-1]))


def _embedding_setup(ctx, inputs, output) -> None:
    weight, indices, padding_idx, scale_grad_by_freq = inputs
    ctx.save_for_backward(indices)
    ctx.num_weights, ctx.padding_idx, ctx.scale = weight.shape[0], padding_idx, scale_grad_by_freq


def _embedding_backward(ctx, grad: Tensor):
    (indices,) = ctx.saved_tensors
    dw = K.embedding_dense_backward(grad, indices, ctx.num_weights, ctx.padding_idx, ctx.scale)
    return dw, None, None, None


_embedding.register_autograd(_embedding_backward, setup_context=_embedding_setup)


def embedding(input: Tensor, weight: Tensor, padding_idx: int | None = None, scale_grad_by_freq: bool = False, *,
              max_norm: float | None = None, norm_type: float = 2.0, sparse: bool = False) -> Tensor:
    """torch.nn.functional.embedding; the weight's gradient is npugrad's embedding_dense_backward.
    F.embedding's other options as keywords: `max_norm` renormalises the rows looked up in place
    first, as PyTorch does (torch.embedding_renorm_, without autograd); `sparse=True` asks for a
    sparse gradient, which the kernel (a dense one) does not give: an error where a gradient of the
    weight is to be computed (a weight requiring grad, grad mode on), nothing where none is."""
    if sparse and weight.requires_grad and torch.is_grad_enabled():
        raise ValueError("embedding: parameter 'sparse' = True asks for a sparse gradient; npugrad's "
                         "embedding_dense_backward gives a dense one (sparse=False)")
    _differentiable("embedding", weight=weight)
    if padding_idx is None:
        padding_idx = -1
    else:  # as F.embedding counts it, and within the rows as it asserts (before max_norm writes)
        rows = weight.shape[0]
        if isinstance(padding_idx, bool | np.bool_) or not isinstance(padding_idx, numbers.Integral | torch.SymInt):
            raise TypeError(f"embedding: parameter 'padding_idx' must be an int, got {type(padding_idx).__name__}")
        padding_idx = int(padding_idx)
        if not -rows <= padding_idx < rows:
            raise ValueError(f"embedding: parameter 'padding_idx' must be within num_embeddings ({rows} rows: "
                             f"-{rows} to {rows - 1}), got {padding_idx}")
        if padding_idx < 0:
            padding_idx += rows
    if max_norm is not None:  # as F.embedding: the rows looked up renormalised in place, first
        input = input.contiguous()
        with torch.no_grad():
            torch.embedding_renorm_(weight.detach(), input, max_norm, norm_type)
    return _embedding(weight, input, padding_idx, scale_grad_by_freq)


# -- linear + cross entropy (LM head) ----------------------------------------------------------


@torch.library.custom_op("npugrad::linear_cross_entropy", mutates_args=())
def _linear_cross_entropy(input: Tensor, weight: Tensor, target: Tensor, ignore_index: int,
                          label_smoothing: float, z_loss: float, softcap: float) -> tuple[Tensor, Tensor, Tensor]:
    """Per-token loss, logits' max and sum of exp(logit − max), all float32 (BT,): the forward
    kernels on one shard holding the whole vocabulary (its max, sum, target logit and sum of
    logits are the global ones), the statistics of softcap(X·Wᵀ). Ignored rows are computed with
    target 0 (their statistics stay finite for the backward) and their loss is 0."""
    ignored = target == ignore_index
    v = weight.shape[0]
    # Here, in the operator, not in linear_cross_entropy: a data-dependent branch there would
    # break torch.compile's graph (fullgraph=True fails).
    bad = ~ignored & ((target < 0) | (target >= v))
    if bool(bad.any()):  # the forward kernel would count it as another shard's id: a wrong loss
        raise IndexError(f"linear_cross_entropy: Target {int(target[bad][0])} is out of bounds "
                         f"(vocabulary of {v}, ignore_index {ignore_index}).")
    stats = K.fused_linear_online_max_sum(input, weight, torch.where(ignored, 0, target), 0, v, softcap=softcap,
                                          return_sum_logits=label_smoothing > 0)
    maxes, sums, predicted, sum_logits = stats[0], stats[1], stats[2], stats[6]
    loss, _ = K.fused_cross_entropy_loss_with_max_sum(maxes, sums, predicted, label_smoothing, None, sum_logits,
                                                     target, vocab_size=v if label_smoothing > 0 else 0,
                                                     z_loss=z_loss, ignore_index=ignore_index)
    return loss, maxes, sums


@_linear_cross_entropy.register_fake
def _(input, weight, target, ignore_index, label_smoothing, z_loss, softcap):
    return tuple(input.new_empty(input.shape[0], dtype=torch.float32) for _ in range(3))


def _lce_setup(ctx, inputs, output) -> None:
    input, weight, target, ignore_index, label_smoothing, z_loss, softcap = inputs
    ctx.save_for_backward(input, weight, target, output[1], output[2])
    ctx.options = ignore_index, label_smoothing, z_loss, softcap
    ctx.mark_non_differentiable(output[1], output[2])


def _lce_backward(ctx, grad: Tensor, _max_grad, _sum_grad):
    input, weight, target, maxes, sums = ctx.saved_tensors
    ignore_index, label_smoothing, z_loss, softcap = ctx.options
    ignored = target == ignore_index
    g = torch.where(ignored, 0.0, grad.float()).contiguous()
    masked_target = torch.where(ignored, 0, target)
    dx, dw = K.fused_linear_cross_entropy_loss_grad(
        g, input, weight, ignored, masked_target, label_smoothing, maxes, sums, None,
        vocab_size=weight.shape[0] if label_smoothing > 0 else 0, z_loss=z_loss, softcap=softcap)
    return dx, dw, None, None, None, None, None


_linear_cross_entropy.register_autograd(_lce_backward, setup_context=_lce_setup)


def linear_cross_entropy(input: Tensor, linear_weight: Tensor, target: Tensor, ignore_index: int | None = -100,
                         reduction: str = "mean", *, linear_bias: Tensor | None = None, weight: Tensor | None = None,
                         label_smoothing: float = 0.0, options=None, z_loss: float = 0.0,
                         softcap: float = 0.0) -> Tensor:
    """cross_entropy(softcap(input @ linear_weight.T), target, label_smoothing=label_smoothing) +
    z_loss·logsumexp² for input (BT, H), linear_weight (V, H), target (BT,), without a BT×V gradient:
    the backward is npugrad's fused_linear_cross_entropy_loss_grad. F.linear_cross_entropy's
    signature (PyTorch 2.13), so that a call of it runs here unchanged: its `linear_bias` and class
    `weight` must be None (the fused kernels have neither: an error naming the parameter), and its
    `options`, which pick PyTorch's chunked implementation of the same loss, are accepted and have
    nothing to pick here (npugrad's is always fused). The extensions are FORWARD.md §4's
    (0 turns each off): `label_smoothing` α in [0, 1] as F.cross_entropy's, `z_loss` λ >= 0 adds
    λ·lse² per counted token (PaLM's auxiliary loss), `softcap` c >= 0 computes on
    c·tanh(logits / c) (Gemma 2). `mean` divides by the tokens not ignored, as F.cross_entropy
    does (NaN where there are none: an empty batch, every token ignored; the gradients are then
    zero, as PyTorch's). As F.linear_cross_entropy, an unbatched input (H,) with a 0-d target is one
    token, and `ignore_index=None` is -100."""
    r = _reduction(reduction)
    label_smoothing, z_loss, softcap = loss_options("linear_cross_entropy", label_smoothing, z_loss, softcap)
    if linear_bias is not None:
        raise ValueError("linear_cross_entropy: parameter 'linear_bias' must be None: the fused kernels compute "
                         "input @ linear_weight.T, without a bias")
    if weight is not None:
        raise ValueError("linear_cross_entropy: parameter 'weight' (class weights) must be None: the fused kernels "
                         "weigh every class alike (the linear layer's weight is 'linear_weight')")
    if options is not None and type(options).__name__ != "LinearCrossEntropyOptions":
        raise TypeError(f"linear_cross_entropy: parameter 'options' must be None or a "
                        f"torch.nn.LinearCrossEntropyOptions, got {type(options).__name__}")
    input, linear_weight = _autocast(True, input, linear_weight)
    if input.dtype != linear_weight.dtype:  # the kernels' error would name their own 'weight'
        raise TypeError(f"linear_cross_entropy: parameter 'linear_weight' must have the dtype of 'input' "
                        f"({input.dtype}), got {linear_weight.dtype}")
    if target.is_floating_point() or target.is_complex() or target.dtype == torch.bool:
        # Before the operator's range check, which read class probabilities as ids out of range.
        raise TypeError(f"linear_cross_entropy: parameter 'target' must hold class ids (an integer tensor), got "
                        f"{target.dtype}; class probabilities (F.cross_entropy's floating target) are not supported")
    if ignore_index is None:
        ignore_index = -100
    unbatched = input.dim() == 1 and target.dim() == 0  # one token: a batch of one, its loss a 0-d tensor
    if unbatched:
        input, target = input.unsqueeze(0), target.unsqueeze(0)
    loss = _linear_cross_entropy(input, linear_weight, target, ignore_index, label_smoothing, z_loss, softcap)[0]
    if r == REDUCTION_NONE:
        return loss.squeeze(0) if unbatched else loss
    if r == REDUCTION_SUM:
        return loss.sum()
    return loss.sum() / (target != ignore_index).sum()
