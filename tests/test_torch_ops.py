"""npugrad's kernels as PyTorch operators (npugrad.torch): one per op, made from its recipe and
checked by torch.library.opcheck; losses and layers whose backward is a kernel, against PyTorch's
own autograd; the EMA-Adam optimizer against torch.optim."""

from __future__ import annotations

import copy
import inspect

import numpy as np
import pytest
from xdsl.irdl import OptOperandDef

from npugrad.recipes import public_recipes

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (pip install npugrad[torch])")

import torch.nn.functional as F  # noqa: E402
from torch.library import opcheck  # noqa: E402

import npugrad.torch as nt  # noqa: E402
from npugrad.interop.dlpack import to_torch  # noqa: E402
from npugrad.torch import kernels  # noqa: E402

RECIPES = list(public_recipes().values())


def test_every_op_is_a_torch_operator_with_a_schema_from_its_recipe():
    assert set(nt.KERNELS) == {r.op.short_name() for r in RECIPES}
    bce = next(r for r in RECIPES if r.op.short_name() == "binary_cross_entropy_grad")
    assert kernels.schema(bce) == (
        "(Tensor input_x, Tensor input_y, Tensor dloss, Tensor? weight=None, int reduction=1) -> Tensor")
    ema = next(r for r in RECIPES if r.op.short_name() == "apply_fused_ema_adam")
    assert "Tensor(a!) var, Tensor(b!) m, Tensor(c!) v, Tensor(d!) s" in kernels.schema(ema)
    assert kernels.schema(ema).endswith("-> ()")
    for recipe in RECIPES:
        assert str(getattr(torch.ops.npugrad, recipe.op.short_name()).default._schema).startswith(
            f"npugrad::{recipe.op.short_name()}(")


def test_the_forward_operators_take_the_api_keywords_and_return_optional_outputs():
    max_sum = next(r for r in RECIPES if r.op.short_name() == "fused_linear_online_max_sum")
    assert kernels.schema(max_sum).endswith(
        "int vocab_end_index, *, float softcap=0.0, int? ignore_index=None, bool return_logits=False, "
        "bool return_sum_logits=False, bool float32_logits=False, int logits_block=0) -> "
        "(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor?, Tensor?, Tensor?)")
    g = torch.Generator().manual_seed(7)
    x, w = torch.randn(10, 8, generator=g).bfloat16(), torch.randn(30, 8, generator=g).bfloat16()
    t = torch.randint(0, 30, (10,), generator=g)
    plain = torch.ops.npugrad.fused_linear_online_max_sum(x, w, t, 0, 30)
    assert plain[5] is None and plain[6] is None
    stats = torch.ops.npugrad.fused_linear_online_max_sum(x, w, t, 0, 30, return_logits=True)
    assert stats[5].shape == (10, 30) and stats[5].dtype == torch.bfloat16 and stats[6] is None
    wide = torch.ops.npugrad.fused_linear_online_max_sum(x, w, t, 0, 30, return_logits=True, float32_logits=True)
    assert wide[5].dtype == torch.float32
    torch.testing.assert_close(wide[5], x.float() @ w.float().T)
    assert torch.equal(wide[5].bfloat16(), stats[5])
    compact = torch.ops.npugrad.fused_linear_online_max_sum(x, w, t, 0, 30, logits_block=16)
    assert compact[5].dtype == torch.float16 and compact[7].shape == (10, 2) and compact[7].dtype == torch.float32
    blocks = (x.float() @ w.float().T).split(16, dim=1)
    torch.testing.assert_close(compact[7], torch.stack([b.amax(dim=1) for b in blocks], dim=1))
    torch.testing.assert_close(compact[5].float(), torch.cat([(b - b.amax(dim=1, keepdim=True)).exp() for b in blocks], 1),
                               rtol=2**-11, atol=2**-24)
    loss, softmax = torch.ops.npugrad.fused_cross_entropy_loss_with_max_sum(*stats[:3])
    assert softmax is None
    torch.testing.assert_close(loss, F.cross_entropy(x.float() @ w.float().T, t, reduction="none"))


def _asks_optional_outputs(recipe, example) -> bool:
    return any(n in example.shapes for n, d in recipe.op.get_irdl_definition().operands
               if isinstance(d, OptOperandDef) and recipe.op.operand_roles()[n] == "out")


def _operator_args(recipe, example):
    """Arrays by operand name; the operator's positional arguments and keyword arguments."""
    arrays = recipe.random_inputs(example.shapes, example.dtypes, example.props, np.random.default_rng(5))
    values = {k: to_torch(np.ascontiguousarray(v)) for k, v in arrays.items()}
    asked = _asks_optional_outputs(recipe, example)
    args, kwargs = [], {}
    for p in kernels.parameters(recipe):
        if p.kind.startswith("Tensor"):
            value = values.get(p.name)
        elif p.name in example.props:
            value = example.props[p.name]
        elif p.kind == "bool" and p.name not in recipe.op.get_irdl_definition().properties:
            value = asked  # a switch for optional outputs (return_logits)
        else:
            assert p.default is not inspect.Parameter.empty, p
            value = p.default
        if p.keyword_only:
            kwargs[p.schema_name] = value
        else:
            args.append(value)
    return arrays, args, kwargs


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda r: r.op.short_name())
def test_every_operator_passes_opcheck_and_matches_the_api(recipe):
    examples = list(recipe.examples())  # the first asking for optional outputs, else the first
    example = next((e for e in examples if _asks_optional_outputs(recipe, e)), examples[0])
    arrays, args, kwargs = _operator_args(recipe, example)
    op = getattr(torch.ops.npugrad, recipe.op.short_name()).default
    opcheck(op, tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args), kwargs)
    want = recipe.call_api({k: np.ascontiguousarray(v).copy() for k, v in arrays.items()}, example.props)
    result = op(*args, **kwargs)
    outputs = [n for n, r in recipe.op.operand_roles().items() if r == "out"]
    got = {k: v for k, v in zip(outputs, result if isinstance(result, tuple) else (result,)) if v is not None} \
        if outputs else {p.name: a for p, a in zip(kernels.parameters(recipe), args) if p.kind.endswith("!)")}
    assert set(got) == set(want)
    for name, w in want.items():
        assert np.array_equal(got[name].view(torch.int16 if got[name].dtype == torch.bfloat16 else got[name].dtype)
                              .numpy().view(np.uint8), w.view(np.uint8)), name


# -- losses and layers: forward PyTorch's, backward a kernel ----------------------------------------


def _grads(loss, inputs):
    return torch.autograd.grad(loss, inputs)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_binary_cross_entropy_matches_pytorch(reduction, dtype):
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(17, 9, generator=g) * 0.98 + 0.01).to(dtype).requires_grad_()
    y = torch.rand(17, 9, generator=g).to(dtype)
    w = torch.rand(17, 9, generator=g).to(dtype)
    for weight in (None, w):
        ours = nt.binary_cross_entropy(x, y, weight, reduction)
        theirs = F.binary_cross_entropy(x, y, weight, reduction=reduction)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(_grads((ours * 1.5).sum(), x)[0], _grads((theirs * 1.5).sum(), x)[0])


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_matches_pytorch(reduction):
    g = torch.Generator().manual_seed(2)
    logp = torch.randn(13, 7, generator=g).log_softmax(1).requires_grad_()
    target = torch.randint(0, 7, (13,), generator=g)
    target[4] = -100
    weight = torch.rand(7, generator=g)
    for w in (None, weight):
        ours = nt.nll_loss(logp, target, w, reduction=reduction)
        theirs = F.nll_loss(logp, target, w, reduction=reduction)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(_grads(ours.sum() * 2, logp)[0], _grads(theirs.sum() * 2, logp)[0])


@pytest.mark.parametrize("padding_idx, scale", [(None, False), (3, False), (-2, True)])
def test_embedding_matches_pytorch(padding_idx, scale):
    g = torch.Generator().manual_seed(3)
    weight = torch.randn(20, 8, generator=g).requires_grad_()
    idx = torch.randint(0, 20, (4, 6), generator=g)
    ours = nt.embedding(idx, weight, padding_idx, scale)
    theirs = F.embedding(idx, weight, padding_idx, scale_grad_by_freq=scale)
    assert torch.equal(ours, theirs)
    torch.testing.assert_close(_grads((ours ** 2).sum(), weight)[0], _grads((theirs ** 2).sum(), weight)[0])


@pytest.mark.parametrize("padding_idx, error, match", [
    (20, ValueError, r"must be within num_embeddings \(20 rows: -20 to 19\), got 20"),
    (-21, ValueError, r"must be within num_embeddings \(20 rows: -20 to 19\), got -21"),
    (True, TypeError, r"must be an int, got bool"),
    (2.0, TypeError, r"must be an int, got float"),
])
def test_embedding_rejects_a_padding_index_pytorch_rejects(padding_idx, error, match):
    """F.embedding asserts -rows <= padding_idx < rows (and aten takes an int): so does ours, before
    max_norm renormalises anything."""
    weight = torch.randn(20, 8).requires_grad_()
    before = weight.detach().clone()
    idx = torch.tensor([[0, 19], [3, 3]])
    with pytest.raises(Exception):  # (PyTorch's max_norm renormalises the rows before aten's type check)
        F.embedding(idx, before.clone(), padding_idx, max_norm=0.1)
    with pytest.raises(error, match=rf"^embedding: parameter 'padding_idx' {match}$"):
        nt.embedding(idx, weight, padding_idx, max_norm=0.1)
    assert torch.equal(weight.detach(), before)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_linear_cross_entropy_matches_pytorch_in_float32(reduction, dtype):
    g = torch.Generator().manual_seed(4)
    x = torch.randn(70, 24, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(300, 24, generator=g) * 0.3).to(dtype).requires_grad_()
    target = torch.randint(0, 300, (70,), generator=g)
    target[[3, 9]] = -100
    ours = nt.linear_cross_entropy(x, w, target, reduction=reduction)
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    theirs = F.cross_entropy(xf @ wf.T, target, reduction=reduction)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    dx, dw = _grads((ours * 3).sum(), (x, w))
    dxf, dwf = _grads((theirs * 3).sum(), (xf, wf))
    assert dx.dtype == dw.dtype == dtype
    # The kernel rounds G and its results to the input dtype (OPS.md §1.6): two ulps of it.
    tol = 1.6e-2 if dtype == torch.bfloat16 else 2e-3
    for ours_grad, exact in ((dx, dxf), (dw, dwf)):
        assert (ours_grad.float() - exact).abs().max() <= tol * exact.abs().max()
    assert torch.all(dx[[3, 9]] == 0)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("label_smoothing, z_loss, softcap", [(0.1, 0, 0), (0, 1e-2, 0), (0, 0, 4.0), (0.2, 1e-2, 3.0),
                                                               (1.0, 0, 0)])
def test_linear_cross_entropy_extensions_match_pytorch(label_smoothing, z_loss, softcap, dtype, reduction):
    """FORWARD.md §4's extensions: F.cross_entropy(softcap(X·Wᵀ), label_smoothing=α) + λ·lse² per
    counted token, loss and both gradients as PyTorch's autograd of that (float32: to float32
    rounding; bfloat16: two ulps of it, the kernel rounding G and its results), ignored rows 0."""
    g = torch.Generator().manual_seed(8)
    x = torch.randn(70, 24, generator=g).to(dtype).requires_grad_()
    w = (torch.randn(300, 24, generator=g) * 0.5).to(dtype).requires_grad_()
    target = torch.randint(0, 300, (70,), generator=g)
    target[[3, 9]] = -100
    ours = nt.linear_cross_entropy(x, w, target, reduction=reduction, label_smoothing=label_smoothing,
                                   z_loss=z_loss, softcap=softcap)
    xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
    z = xf @ wf.T
    if softcap:
        z = softcap * torch.tanh(z / softcap)
    counted = target != -100
    per_token = (F.cross_entropy(z, target, reduction="none", label_smoothing=label_smoothing)
                 + z_loss * torch.logsumexp(z, 1) ** 2 * counted)
    theirs = {"none": per_token, "sum": per_token.sum(), "mean": per_token.sum() / counted.sum()}[reduction]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    upstream = torch.randn(ours.shape, generator=g)
    dx, dw = _grads((ours * upstream).sum(), (x, w))
    dxf, dwf = _grads((theirs * upstream).sum(), (xf, wf))
    tol = 2e-5 if dtype == torch.float32 else 1.6e-2
    for ours_grad, exact in ((dx, dxf), (dw, dwf)):
        assert ours_grad.dtype == dtype
        assert (ours_grad.float() - exact).abs().max() <= tol * exact.abs().max()
    assert torch.all(dx[[3, 9]] == 0)


@pytest.mark.parametrize("name, value, match", [
    ("label_smoothing", 1.5, "must be in \\[0, 1\\], got 1.5"), ("label_smoothing", -0.1, "must be in"),
    ("z_loss", -1.0, "must be >= 0"), ("softcap", -2.0, "must be >= 0"), ("softcap", float("nan"), "must be a finite real number"),
    ("z_loss", "0.1", "must be a real number"),
])
def test_linear_cross_entropy_rejects_an_extension_out_of_range_before_any_kernel(name, value, match):
    x = torch.randn(5, 8, requires_grad=True)
    w = torch.randn(30, 8, requires_grad=True)
    with pytest.raises((ValueError, TypeError), match=f"^linear_cross_entropy: parameter '{name}' {match}"):
        nt.linear_cross_entropy(x, w, torch.tensor([0, 1, 2, 3, 4]), **{name: value})


def test_an_lm_head_step_compiles_as_one_graph_with_the_eager_results():
    """torch.compile(fullgraph=True) of embedding + linear_cross_entropy with its extensions: no
    graph break (the target range check is inside the operator, not a data-dependent branch in
    the function), and the loss and gradients are eager's, bit for bit (the same kernels run)."""
    g = torch.Generator().manual_seed(10)
    emb = torch.randn(50, 16, generator=g).requires_grad_()
    head = torch.randn(80, 16, generator=g).requires_grad_()
    tokens = torch.randint(0, 50, (4, 9), generator=g)
    target = torch.randint(0, 80, (36,), generator=g)
    target[5] = -100

    def step(emb, head, tokens, target):
        h = nt.embedding(tokens, emb, padding_idx=0).reshape(-1, 16)
        return nt.linear_cross_entropy(h, head, target, label_smoothing=0.1, z_loss=1e-3, softcap=4.0)

    eager = step(emb, head, tokens, target)
    compiled = torch.compile(step, fullgraph=True)
    loss = compiled(emb, head, tokens, target)
    assert torch.equal(loss, eager)
    for ours, theirs in zip(_grads(loss, (emb, head)), _grads(eager, (emb, head))):
        assert torch.equal(ours, theirs)
    target[7] = 80
    with pytest.raises(IndexError, match="Target 80 is out of bounds"):
        compiled(emb, head, tokens, target)


def test_an_lm_head_step_compiles_with_dynamic_shapes_as_one_graph():
    """torch.compile(dynamic=True, fullgraph=True), batches of changing sizes: the extensions'
    range checks trace (Dynamo cannot trace math.isfinite there, which broke the graph), and
    each loss and gradient is eager's."""
    g = torch.Generator().manual_seed(14)
    head = torch.randn(40, 8, generator=g).requires_grad_()

    def loss(x, head, target):
        return nt.linear_cross_entropy(x, head, target, label_smoothing=0.1)

    compiled = torch.compile(loss, dynamic=True, fullgraph=True)
    for rows in (6, 4, 9):
        x = torch.randn(rows, 8, generator=g).requires_grad_()
        target = torch.randint(0, 40, (rows,), generator=g)
        ours, eager = compiled(x, head, target), loss(x, head, target)
        torch.testing.assert_close(ours, eager)
        for a, b in zip(_grads(ours, (x, head)), _grads(eager, (x, head))):
            torch.testing.assert_close(a, b)


def test_the_losses_follow_autocast_as_pytorchs_do():
    """Under torch.autocast('cpu', bfloat16) a layer's output is bfloat16 and the parameters stay
    float32: linear_cross_entropy computes in the autocast dtype (as F.linear), nll_loss and
    binary_cross_entropy in float32 (ATen's policy for them), and the losses and the layer's
    gradients are PyTorch's. linear_cross_entropy refused the bfloat16 input with a float32
    head, binary_cross_entropy's backward a bfloat16 input with a float32 target, and nll_loss
    gave a bfloat16 loss."""
    g = torch.Generator().manual_seed(15)
    x = torch.randn(12, 16, generator=g)
    target, classes, y = torch.randint(0, 40, (12,), generator=g), torch.randint(0, 16, (12,), generator=g), torch.rand(12, 16, generator=g)
    layer, head = torch.randn(16, 16, generator=g), torch.randn(40, 16, generator=g)

    def losses(lce, nll, bce):
        w, h = layer.clone().requires_grad_(), head.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            z = F.linear(x, w)
            out = [lce(z, h, target), nll(z.log_softmax(1), classes), bce(z.sigmoid(), y)]
        return [loss.detach() for loss in out] + list(_grads(sum(out), (w, h)))

    ours = losses(nt.linear_cross_entropy, nt.nll_loss, nt.binary_cross_entropy)
    theirs = losses(lambda z, h, t: F.cross_entropy(F.linear(z, h), t), F.nll_loss, F.binary_cross_entropy)
    for a, b in zip(ours, theirs):
        assert a.dtype == b.dtype
        torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)


def test_the_other_losses_and_the_optimizer_step_compile_as_one_graph():
    """nll_loss, binary_cross_entropy and FusedEmaAdam.step under torch.compile(fullgraph=True):
    eager's losses, gradients and updated parameters, bit for bit."""
    g = torch.Generator().manual_seed(12)
    logp = torch.randn(7, 11, generator=g).log_softmax(1).requires_grad_()
    target = torch.randint(0, 11, (7,), generator=g)
    target[2] = -100
    p = (torch.rand(6, 5, generator=g) * 0.9 + 0.05).requires_grad_()
    y = torch.rand(6, 5, generator=g)

    def losses(logp, target, p, y):
        return nt.nll_loss(logp, target, torch.linspace(0.5, 1.5, 11)) + nt.binary_cross_entropy(p, y, reduction="sum")

    eager = losses(logp, target, p, y)
    compiled = torch.compile(losses, fullgraph=True)(logp, target, p, y)
    assert torch.equal(compiled, eager)
    for ours, theirs in zip(_grads(compiled, (logp, p)), _grads(eager, (logp, p))):
        assert torch.equal(ours, theirs)
    params = [torch.nn.Parameter(torch.randn(20, generator=g)) for _ in range(2)]
    grads = [torch.randn(20, generator=g) for _ in range(2)]
    results = []
    for step in (lambda opt: opt.step(), lambda opt: torch.compile(opt.step, fullgraph=True)()):
        copies = [torch.nn.Parameter(q.detach().clone()) for q in params]
        opt = nt.FusedEmaAdam(copies, lr=0.1, weight_decay=0.01, ema_decay=0.5)
        for _ in range(2):
            for c, d in zip(copies, grads):
                c.grad = d.clone()
            step(opt)
        results.append([c.detach() for c in copies] + [opt.ema(c) for c in copies])
    assert all(torch.equal(a, b) for a, b in zip(*results))


@pytest.mark.parametrize("shape", [(5,), (1, 9), (17, 1)], ids=str)
def test_binary_cross_entropy_broadcasts_its_weight_as_pytorch_does(shape):
    """F.binary_cross_entropy expands `weight` to the target's shape (one weight per class, per
    row, a scalar-like one): so does npugrad's, values and gradient; a weight that does not
    broadcast, or a target of another size, is an error as there."""
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(17, 5 if shape != (1, 9) else 9, generator=g) * 0.98 + 0.01).requires_grad_()
    y = torch.rand(x.shape, generator=g)
    w = torch.rand(shape, generator=g) + 0.5
    for reduction in ("none", "mean", "sum"):
        ours = nt.binary_cross_entropy(x, y, w, reduction)
        theirs = F.binary_cross_entropy(x, y, w, reduction=reduction)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(_grads((ours * 1.5).sum(), x)[0], _grads((theirs * 1.5).sum(), x)[0])
    with pytest.raises(RuntimeError):
        nt.binary_cross_entropy(x, y, torch.rand(3))
    with pytest.raises(ValueError, match="target"):
        nt.binary_cross_entropy(x, y[:-1])


@pytest.mark.parametrize("weight_dtype", [torch.float64, torch.bfloat16, torch.float16], ids=str)
def test_binary_cross_entropy_takes_a_weight_of_another_floating_dtype_as_pytorch_does(weight_dtype):
    """F.binary_cross_entropy's forward and backward take a float32 input with, say, a float64
    class weight (PyTorch's test_nn weights are often made in another dtype than the input);
    ours failed in the backward, the kernel refusing the weight's dtype."""
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(6, 4, generator=g) * 0.98 + 0.01).requires_grad_()
    y = torch.rand(x.shape, generator=g)
    w = (torch.rand(4, generator=g) + 0.5).to(weight_dtype)
    for reduction in ("none", "mean", "sum"):
        ours = nt.binary_cross_entropy(x, y, w, reduction)
        theirs = F.binary_cross_entropy(x, y, w, reduction=reduction)
        torch.testing.assert_close(ours, theirs)
        torch.testing.assert_close(_grads((ours * 1.5).sum(), x)[0], _grads((theirs * 1.5).sum(), x)[0])


@pytest.mark.parametrize("shape", [(4, 7, 3), (2, 5, 3, 2), (0, 4, 3)], ids=str)
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_of_positions_matches_pytorch(shape, reduction):
    """F.nll_loss's (N, C, d1, ...) input with an (N, d1, ...) target (a loss per position, as
    for images or sequences with the classes second): the classes moved last and the positions
    made rows for the kernel, values and gradients as PyTorch's, ignored positions included."""
    g = torch.Generator().manual_seed(6)
    logp = torch.randn(shape, generator=g).log_softmax(1).requires_grad_()
    target = torch.randint(0, shape[1], shape[:1] + shape[2:], generator=g)
    if target.numel():
        target.view(-1)[1] = -100
    for w in (None, torch.rand(shape[1], generator=g)):
        ours = nt.nll_loss(logp, target, w, reduction=reduction)
        theirs = F.nll_loss(logp, target, w, reduction=reduction)
        torch.testing.assert_close(ours, theirs, equal_nan=True)
        upstream = torch.randn(ours.shape, generator=g)
        torch.testing.assert_close(_grads((ours * upstream).sum(), logp)[0], _grads((theirs * upstream).sum(), logp)[0])
    with pytest.raises(ValueError, match="target"):
        nt.nll_loss(logp, target.reshape(-1))


@pytest.mark.parametrize("rows", [0, 5], ids=lambda n: f"rows{n}")
def test_linear_cross_entropy_with_no_token_counted_is_nan_with_zero_gradients_as_pytorch(rows):
    """Reduction 'mean' over no token (an empty batch, or every target ignore_index) is 0/0:
    NaN, as F.cross_entropy gives, and the gradients are zero, as PyTorch's."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(rows, 16, generator=g).requires_grad_()
    w = torch.randn(40, 16, generator=g).requires_grad_()
    target = torch.full((rows,), -100)
    ours = nt.linear_cross_entropy(x, w, target)
    theirs = F.cross_entropy(x @ w.T, target)
    assert torch.isnan(ours) and torch.isnan(theirs)
    dx, dw = _grads(ours, (x, w))
    dxt, dwt = _grads(theirs, (x, w))
    assert torch.equal(dx, dxt) and torch.equal(dw, dwt) and not dw.abs().sum()


@pytest.mark.parametrize("bad", [40, 1000, -1, -101])
def test_linear_cross_entropy_rejects_a_target_outside_the_vocabulary(bad):
    """A target id outside [0, V) that is not ignore_index is PyTorch's IndexError, raised before
    the kernels run (the forward kernel would count it as another shard's id: a wrong loss)."""
    x = torch.randn(3, 16)
    w = torch.randn(40, 16)
    target = torch.tensor([0, bad, 1])
    with pytest.raises(IndexError):
        F.cross_entropy(x @ w.T, target)
    with pytest.raises(IndexError, match=f"Target {bad} is out of bounds"):
        nt.linear_cross_entropy(x, w, target)


def test_linear_cross_entropy_names_a_target_of_class_probabilities_as_unsupported():
    """F.linear_cross_entropy's error inputs give floating targets (class probabilities): ours said
    "Target 8 is out of bounds" of such a target's values, or, within [0, V), named the forward
    kernel's dtype rule."""
    x, w = torch.randn(2, 3), torch.randn(4, 3)
    for target in (torch.rand(2) * 8, torch.tensor([0.0, 1.0]), torch.rand(2, 4).softmax(1), torch.tensor([True, False])):
        with pytest.raises(TypeError, match=r"^linear_cross_entropy: parameter 'target' must hold class ids"):
            nt.linear_cross_entropy(x, w, target)


def test_linear_cross_entropy_is_called_as_pytorchs():
    """F.linear_cross_entropy's signature (PyTorch 2.13): its keywords run unchanged (the second
    parameter was `weight`, which F names the class weights); its bias and class weights, which the
    fused kernels do not have, are errors naming them; its chunking options pick nothing here."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(6, 5, generator=g, requires_grad=True)
    w = torch.randn(9, 5, generator=g, requires_grad=True)
    target = torch.tensor([0, 8, 3, -100, 2, 2])
    ours = nt.linear_cross_entropy(input=x, linear_weight=w, target=target, reduction="sum", ignore_index=-100,
                                   label_smoothing=0.1, linear_bias=None, weight=None)
    theirs = F.cross_entropy(x @ w.T, target, reduction="sum", label_smoothing=0.1)
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert torch.autograd.grad(ours, (x, w)) is not None
    with pytest.raises(ValueError, match=r"^linear_cross_entropy: parameter 'linear_bias' must be None"):
        nt.linear_cross_entropy(x, w, target, linear_bias=torch.zeros(9))
    with pytest.raises(ValueError, match=r"^linear_cross_entropy: parameter 'weight' \(class weights\) must be None"):
        nt.linear_cross_entropy(x, w, target, weight=torch.ones(9))
    with pytest.raises(TypeError, match=r"^linear_cross_entropy: parameter 'linear_weight' must have the dtype of "
                                        r"'input' \(torch.float32\), got torch.bfloat16"):
        nt.linear_cross_entropy(x, w.bfloat16(), target)
    with pytest.raises(TypeError, match=r"^linear_cross_entropy: parameter 'options' must be None or"):
        nt.linear_cross_entropy(x, w, target, options={"batch_chunk_size": 2})
    try:
        from torch.nn.modules.linear_cross_entropy_options import LinearCrossEntropyOptions
    except ImportError:  # a PyTorch before F.linear_cross_entropy
        return
    chunked = nt.linear_cross_entropy(x, w, target, reduction="sum", label_smoothing=0.1,
                                      options=LinearCrossEntropyOptions(batch_chunk_size=2, chunking_method=None))
    torch.testing.assert_close(chunked, ours, rtol=0, atol=0)


def _random_loss_cases(seed: int, count: int):
    """(name, ours, theirs, inputs, differentiable input indices, tolerance) for `count` random
    configurations of the four torch-facing functions: dtypes, empty batches, ignored rows,
    weights of every accepted shape, every reduction, padding and frequency scaling."""
    import random

    pick = random.Random(seed)
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        dtype = pick.choice([torch.float32, torch.bfloat16, torch.float16])
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        reduction = pick.choice(["none", "mean", "sum"])
        n, c = pick.choice([0, 1, 17]), pick.choice([1, 5, 40])
        ignore = pick.choice([-100, 0])
        target = torch.randint(0, c, (n,), generator=g)
        if n and pick.random() < 0.5:
            target[: max(1, n // 3)] = ignore
        weight = pick.choice([None, torch.rand(c, generator=g).to(dtype)])
        logp = torch.randn(n, c, generator=g).log_softmax(-1).to(dtype)
        out.append((f"nll {n}x{c} {dtype} {reduction}", lambda i, t, w=weight, r=reduction, ig=ignore: nt.nll_loss(i, t, w, ig, r),
                    lambda i, t, w=weight, r=reduction, ig=ignore: F.nll_loss(i, t, w, ignore_index=ig, reduction=r),
                    [logp, target], [0], tol))
        p = (torch.rand(n, c, generator=g) * 0.98 + 0.01).to(dtype)
        bw = pick.choice([None, torch.rand(n, c, generator=g).to(dtype), torch.rand(c, generator=g).to(dtype)])
        out.append((f"bce {n}x{c} {dtype} {reduction}", lambda i, t, w=bw, r=reduction: nt.binary_cross_entropy(i, t, w, r),
                    lambda i, t, w=bw, r=reduction: F.binary_cross_entropy(i, t, w, reduction=r),
                    [p, torch.rand(n, c, generator=g).to(dtype)], [0, 1], tol))  # the target's gradient too
        rows, width = pick.choice([(5, 3), (50, 16)])
        idx = torch.randint(0, rows, pick.choice([(n,), (2, n)]), generator=g)
        pad, scale = pick.choice([None, 0, -1]), pick.choice([False, True])
        out.append((f"embedding {tuple(idx.shape)} {dtype} pad={pad} scale={scale}",
                    lambda i, w, pad=pad, scale=scale: nt.embedding(i, w, pad, scale),
                    lambda i, w, pad=pad, scale=scale: F.embedding(i, w, pad, scale_grad_by_freq=scale),
                    [idx, torch.randn(rows, width, generator=g).to(dtype)], [1], tol))
        if dtype != torch.float16:
            h = pick.choice([1, 33])
            x = (torch.randn(n, h, generator=g) * 0.5).to(dtype)
            w = (torch.randn(7 * c, h, generator=g) * 0.5).to(dtype)
            t = torch.randint(0, 7 * c, (n,), generator=g)
            if n and pick.random() < 0.5:
                t[: pick.choice([1, n])] = -100
            out.append((f"linear_cross_entropy {n}x{h}x{7 * c} {dtype} {reduction}",
                        lambda a, b, t, r=reduction: nt.linear_cross_entropy(a, b, t, -100, r),
                        lambda a, b, t, r=reduction: F.cross_entropy(a.float() @ b.float().T, t, reduction=r),
                        [x, w, t], [0, 1], tol if dtype == torch.float32 else 5e-2))
    return out


@pytest.mark.parametrize("seed", [11, 12])
def test_losses_match_pytorch_on_random_cases(seed):
    """A differential check against torch.nn.functional on random configurations (_random_loss_cases),
    forward and gradients, the same upstream gradient on both sides; where PyTorch raises, ours
    raises too. (This found a per-class BCE weight rejected, an (N, C, d) NLL input rejected,
    the linear cross entropy's mean over no token 0 instead of NaN, and an out-of-vocabulary
    target taken for a loss.)"""
    for name, ours, theirs, inputs, diff, tol in _random_loss_cases(seed, 8):
        results = []
        for f in (ours, theirs):
            args = [a.detach().clone().requires_grad_(i in diff) if a.is_floating_point() else a
                    for i, a in enumerate(inputs)]
            try:
                loss = f(*args)
            except (RuntimeError, ValueError, IndexError) as e:
                results.append(e)
                continue
            upstream = torch.randn(loss.shape, generator=torch.Generator().manual_seed(1)).to(loss.dtype)
            loss.backward(upstream)
            results.append((loss.detach().float(), [args[i].grad.float() for i in diff]))
        a, b = results
        assert isinstance(a, Exception) == isinstance(b, Exception), (name, a, b)
        if isinstance(a, Exception):
            continue
        torch.testing.assert_close(a[0], b[0], rtol=tol, atol=tol, equal_nan=True, msg=name)
        for mine, want in zip(a[1], b[1]):
            torch.testing.assert_close(mine, want, rtol=tol, atol=tol, msg=name)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_binary_cross_entropy_gives_the_target_its_gradient_as_pytorch(reduction, dtype):
    """F.binary_cross_entropy is differentiable in a floating target (−weight·logit(input)); ours
    gave it none, silently (a None gradient where PyTorch has one)."""
    g = torch.Generator().manual_seed(5)
    x = (torch.rand(6, 4, generator=g) * 0.98 + 0.01).to(dtype)
    y = torch.rand(6, 4, generator=g).to(dtype)
    upstream = torch.randn((6, 4) if reduction == "none" else (), generator=g).to(dtype)
    for weight in (None, torch.rand(4, generator=g).to(dtype)):
        grads = []
        for f in (nt.binary_cross_entropy, lambda a, b, w, r: F.binary_cross_entropy(a, b, w, reduction=r)):
            a, b = x.clone().requires_grad_(), y.clone().requires_grad_()
            loss = f(a, b, weight, reduction)
            grads.append(torch.autograd.grad(loss, [a, b], upstream))
        assert grads[0][1] is not None
        assert grads[0][1].abs().sum() > 0
        for mine, want in zip(*grads):
            torch.testing.assert_close(mine, want)
        b = y.clone().requires_grad_()  # the target alone
        (dy,) = torch.autograd.grad(nt.binary_cross_entropy(x, b, weight, reduction).sum(), [b])
        (want,) = torch.autograd.grad(F.binary_cross_entropy(x, b, weight, reduction=reduction).sum(), [b])
        torch.testing.assert_close(dy, want)


def test_loss_arguments_without_a_derivative_or_a_kernel_dtype_are_errors_when_the_forward_runs():
    """As ATen: a BCE or NLL weight requiring grad is an error (no derivative; ours dropped it
    silently). A float64 tensor requiring grad is an error when the forward runs, naming the op
    and the parameter (the kernels take float32/float16/bfloat16; it failed in the backward);
    without grad, float64 runs as PyTorch's forward does."""
    p = torch.rand(5, 3) * 0.9 + 0.05
    y = torch.rand(5, 3)
    logp = torch.randn(5, 3).log_softmax(1)
    t = torch.tensor([0, 2, 1, 1, 0])
    w3 = torch.rand(3, requires_grad=True)
    for ours, theirs in ((lambda: nt.binary_cross_entropy(p.clone().requires_grad_(), y, w3)),
                         (lambda: F.binary_cross_entropy(p.clone().requires_grad_(), y, w3))), \
                        ((lambda: nt.nll_loss(logp.clone().requires_grad_(), t, w3)),
                         (lambda: F.nll_loss(logp.clone().requires_grad_(), t, w3))):
        with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'weight'"):
            theirs()
        with pytest.raises(RuntimeError, match="not differentiable with respect to argument 'weight'"):
            ours()
    with torch.no_grad():  # no gradient asked: the weight may require one
        torch.testing.assert_close(nt.nll_loss(logp, t, w3), F.nll_loss(logp, t, w3))
    for call, name in ((lambda d: nt.binary_cross_entropy(p.to(d).requires_grad_(), y.to(d)), "binary_cross_entropy"),
                       (lambda d: nt.nll_loss(logp.to(d).requires_grad_(), t), "nll_loss"),
                       (lambda d: nt.embedding(t, torch.randn(4, 2, dtype=d, requires_grad=True)), "embedding")):
        with pytest.raises(TypeError, match=f"{name}: parameter '.*' requires grad.*float32, float16 or bfloat16, got torch.float64"):
            call(torch.float64)
    torch.testing.assert_close(nt.nll_loss(logp.double(), t), F.nll_loss(logp.double(), t))


def test_the_keywords_of_torch_nn_functional_are_taken_as_there():
    """F.embedding's max_norm (rows renormalised in place first) and norm_type, the deprecated
    size_average/reduce of F.nll_loss and F.binary_cross_entropy: the same results and weights
    as PyTorch's; sparse=True (a sparse gradient the dense kernel does not give) is an error."""
    g = torch.Generator().manual_seed(9)
    idx = torch.tensor([[0, 3, 3], [5, 1, 0]])
    base = torch.randn(7, 4, generator=g) * 3
    for norm_type in (2.0, 1.0):
        ours, theirs = base.clone().requires_grad_(), base.clone().requires_grad_()
        a = nt.embedding(idx, ours, max_norm=1.5, norm_type=norm_type)
        b = F.embedding(idx, theirs, max_norm=1.5, norm_type=norm_type)
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(ours.detach(), theirs.detach())  # renormalised alike, in place
        assert not torch.equal(ours.detach(), base)
        up = torch.randn(a.shape, generator=g)
        torch.testing.assert_close(*(torch.autograd.grad(t, [w], up)[0] for t, w in ((a, ours), (b, theirs))))
    with pytest.raises(ValueError, match="embedding: parameter 'sparse'"):
        nt.embedding(idx, base.clone().requires_grad_(), sparse=True)
    # Where no gradient of the weight is computed, sparse=True changes nothing (it raised, where
    # F.embedding runs): a frozen table, or an inference pass under no_grad.
    torch.testing.assert_close(nt.embedding(idx, base, sparse=True), F.embedding(idx, base, sparse=True))
    with torch.no_grad():
        torch.testing.assert_close(nt.embedding(idx, base.clone().requires_grad_(), sparse=True), F.embedding(idx, base))
    logp = torch.randn(6, 5, generator=g).log_softmax(1)
    t = torch.randint(0, 5, (6,), generator=g)
    p = torch.rand(6, 5, generator=g) * 0.9 + 0.05
    y = torch.rand(6, 5, generator=g)
    with pytest.warns(UserWarning):
        for size_average, reduce in ((None, False), (False, None), (True, True)):
            torch.testing.assert_close(nt.nll_loss(logp, t, size_average=size_average, reduce=reduce),
                                       F.nll_loss(logp, t, size_average=size_average, reduce=reduce))
            torch.testing.assert_close(nt.binary_cross_entropy(p, y, size_average=size_average, reduce=reduce),
                                       F.binary_cross_entropy(p, y, size_average=size_average, reduce=reduce))


@pytest.mark.parametrize("op, args", [
    ("binary_cross_entropy", lambda: (torch.rand(6, 5).mul(.9).add(.05).requires_grad_(), torch.rand(6, 5), None, 1)),
    ("nll_loss", lambda: (torch.randn(7, 11).log_softmax(1).requires_grad_(), torch.randint(0, 11, (7,)), None, 1, -100)),
    ("embedding", lambda: (torch.randn(20, 8, requires_grad=True), torch.randint(0, 20, (4, 6)), -1, False)),
    ("linear_cross_entropy", lambda: (torch.randn(33, 16).bfloat16().requires_grad_(),
                                      torch.randn(200, 16).bfloat16().requires_grad_(), torch.randint(0, 200, (33,)), -100,
                                      0.0, 0.0, 0.0)),
    ("linear_cross_entropy", lambda: (torch.randn(33, 16).requires_grad_(), torch.randn(200, 16).requires_grad_(),
                                      torch.randint(0, 200, (33,)), -100, 0.1, 1e-3, 5.0)),
])
def test_the_losses_and_layers_pass_opcheck(op, args):
    opcheck(getattr(torch.ops.npugrad, op).default, args())


# -- the optimizer -------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(4, 25), (), (2,) * 9], ids=["matrix", "0-d", "rank-9"])
@pytest.mark.parametrize("mode, reference", [(1, "AdamW"), (0, "Adam")])
def test_fused_ema_adam_steps_like_torch_optim(mode, reference, shape):
    """Any parameter torch.optim steps: a 0-d one (a learnable scale) and one of more dimensions
    than the kernel's 8 go to it as views of one dimension."""
    g = torch.Generator().manual_seed(6)
    start = torch.randn(shape, generator=g)
    ours = torch.nn.Parameter(start.clone())
    theirs = torch.nn.Parameter(start.clone())
    opt = nt.FusedEmaAdam([ours], lr=0.05, weight_decay=0.1, ema_decay=0.9, mode=mode)
    ref = getattr(torch.optim, reference)([theirs], lr=0.05, weight_decay=0.1)
    ema = start.clone()
    for _ in range(6):
        for p in (ours, theirs):
            p.grad = torch.sin(3 * p.detach()) + 0.1
        opt.step()
        ref.step()
        ema = 0.9 * ema + 0.1 * theirs.detach()
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(opt.ema(ours), ema, rtol=1e-5, atol=1e-6)
    assert opt.state[ours]["step"].item() == 6


def test_a_compiled_fused_ema_adam_step_follows_a_tensor_learning_rate_without_recompiling():
    """A tensor lr (torch.optim's way to let a scheduler drive a compiled step) reached the
    operator's float lr as a FakeTensor under torch.compile: an error. It now goes to the kernel
    as a tensor of the hyper-parameters: the compiled steps are eager's, bit for bit, and a new
    lr each step compiles nothing new."""
    torch.manual_seed(3)
    eager_p = torch.nn.Parameter(torch.randn(40, 9))
    compiled_p = torch.nn.Parameter(eager_p.detach().clone())
    opts = [nt.FusedEmaAdam([p], lr=torch.tensor(0.01), weight_decay=0.01) for p in (eager_p, compiled_p)]
    schedules = [torch.optim.lr_scheduler.LambdaLR(o, lambda k: 0.5**k) for o in opts]
    graphs = []

    def count(gm, _inputs):
        graphs.append(gm)
        return gm.forward

    step = torch.compile(opts[1].step, backend=count)
    for _ in range(6):
        g = torch.randn(40, 9)
        eager_p.grad, compiled_p.grad = g.clone(), g.clone()
        opts[0].step()
        step()
        for s in schedules:
            s.step()
        assert torch.equal(eager_p, compiled_p) and torch.equal(opts[0].ema(eager_p), opts[1].ema(compiled_p))
    assert len(graphs) <= 2, f"{len(graphs)} graphs for 6 learning rates"  # the first step's, the stepping one


def test_fused_ema_adam_ema_of_a_tensor_it_does_not_hold_is_an_error():
    """ema(p) of a tensor that is no parameter of the optimizer (a copy of the model's, say)
    raised nothing and made it a state entry, after which state_dict() failed with a KeyError;
    an EMA asked before the first step is the parameter."""
    p = torch.nn.Parameter(torch.randn(3))
    opt = nt.FusedEmaAdam([p])
    with pytest.raises(ValueError, match=r"^FusedEmaAdam.ema: parameter 'p' .* is not one of this optimizer's"):
        opt.ema(torch.nn.Parameter(p.detach().clone()))
    assert torch.equal(opt.ema(p), p.detach())
    p.grad = torch.ones(3)
    opt.step()
    assert list(opt.state_dict()["state"]) == [0]


@pytest.mark.parametrize("kwargs, name", [
    ({"lr": -1e-3}, "lr"), ({"betas": (1.0, 0.999)}, "beta1"), ({"betas": (0.9, 1 - 2.0 ** -26)}, "beta2"),
    ({"eps": -1.0}, "eps"), ({"weight_decay": -0.1}, "weight_decay"), ({"ema_decay": 1.5}, "ema_decay"),
    ({"lr": float("nan")}, "lr"), ({"betas": (0.9,)}, "betas"), ({"mode": 2}, "mode"), ({"lr": "0.1"}, "lr"),
])
def test_fused_ema_adam_rejects_hyperparameters_when_made_as_torch_optim_does(kwargs, name):
    """torch.optim.AdamW raises ValueError in its constructor; so does FusedEmaAdam, in the
    kernel's ranges (a beta that rounds to 1 as a float32 included), naming the parameter."""
    with pytest.raises(ValueError, match=f"^FusedEmaAdam: parameter '{name}' must be"):
        nt.FusedEmaAdam([torch.nn.Parameter(torch.randn(3))], **kwargs)


def test_a_fused_ema_adam_step_the_kernel_rejects_leaves_the_state_as_it_was():
    """A float64 parameter: the kernel's dtype check raises, and the step count is not advanced
    (the next valid step's bias correction would otherwise be off by one)."""
    good = torch.nn.Parameter(torch.randn(4))
    bad = torch.nn.Parameter(torch.randn(4, dtype=torch.float64))
    opt = nt.FusedEmaAdam([good, bad])
    good.grad, bad.grad = torch.randn(4), torch.randn(4, dtype=torch.float64)
    before = bad.detach().clone()
    with pytest.raises(TypeError, match="apply_fused_ema_adam: parameter 'grad' must have dtype"):
        opt.step()
    assert opt.state[bad]["step"].item() == 0 and torch.equal(bad.detach(), before)
    assert opt.state[good]["step"].item() == 1


@pytest.mark.parametrize("reference", ["AdamW", "Adam"])
def test_fused_ema_adam_resumes_from_a_torch_optim_state_dict(reference):
    """load_state_dict of torch.optim.Adam(W)'s state: its float step becomes the kernel's int64
    one, the EMA starts at the parameter, `mode` follows decoupled_weight_decay, and the next
    steps are torch's to float32 rounding. A group with amsgrad is an error."""
    g = torch.Generator().manual_seed(9)
    theirs = torch.nn.Parameter(torch.randn(40, generator=g))
    ref = getattr(torch.optim, reference)([theirs], lr=0.02, weight_decay=0.1)
    for _ in range(3):
        theirs.grad = torch.sin(3 * theirs.detach())
        ref.step()
    ours = torch.nn.Parameter(theirs.detach().clone())
    opt = nt.FusedEmaAdam([ours], ema_decay=0.5)
    opt.load_state_dict(copy.deepcopy(ref.state_dict()))
    assert opt.param_groups[0]["mode"] == (reference == "AdamW") and opt.param_groups[0]["ema_decay"] == 0.5
    for _ in range(3):
        for p in (ours, theirs):
            p.grad = torch.sin(3 * p.detach())
        opt.step()
        ref.step()
    torch.testing.assert_close(ours.detach(), theirs.detach(), rtol=1e-5, atol=1e-6)
    assert opt.state[ours]["step"].tolist() == [6]
    amsgrad = torch.optim.Adam([torch.nn.Parameter(torch.randn(3))], amsgrad=True)
    with pytest.raises(ValueError, match="amsgrad"):
        nt.FusedEmaAdam([torch.nn.Parameter(torch.randn(3))]).load_state_dict(amsgrad.state_dict())


def test_fused_ema_adam_names_a_strided_parameter_of_more_dimensions_than_the_kernel_takes():
    p = torch.nn.Parameter(torch.randn((3,) + (2,) * 8).transpose(0, 8))
    assert p.dim() == 9 and not p.is_contiguous()
    p.grad = torch.ones_like(p)
    before = p.detach().clone()
    opt = nt.FusedEmaAdam([p])
    with pytest.raises(ValueError, match=r"^FusedEmaAdam: a parameter of rank 9 \(more than 8\) and its gradient "
                                         r"must be contiguous"):
        opt.step()
    assert torch.equal(p.detach(), before) and opt.state[p]["step"].item() == 0
