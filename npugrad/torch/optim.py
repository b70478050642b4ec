"""FusedEmaAdam: a torch.optim optimizer whose step is npugrad's apply_fused_ema_adam kernel, one
call per parameter: Adam (mode 0, L2 decay) or AdamW (mode 1, decoupled decay), plus an
exponential moving average of the parameters (`ema(p)`, the kernel's `s`), all in place.

    opt = FusedEmaAdam(model.parameters(), lr=1e-3, weight_decay=0.01)   # = torch.optim.AdamW + EMA
    loss.backward(); opt.step(); opt.zero_grad()

Defaults are the kernel's (aclnnApplyFusedEmaAdam). State per parameter: `exp_avg`, `exp_avg_sq`
(m, v, in the parameter's dtype), `ema` (starts as a copy of the parameter), `step` (int64 (1,),
incremented before each call, as MindSpeed's FusedEmaAdamW does).
"""

from __future__ import annotations

import numbers

import torch

from npugrad import ops
from npugrad.dialect.train import MAX_RANK, ApplyFusedEmaAdamOp
from npugrad.torch.kernels import KERNELS

assert "apply_fused_ema_adam" in KERNELS


@torch.library.custom_op("npugrad::apply_fused_ema_adam_hyperparameters", mutates_args=("var", "m", "v", "s"))
def _with_hyperparameter_tensor(grad: torch.Tensor, var: torch.Tensor, m: torch.Tensor, v: torch.Tensor,
                                s: torch.Tensor, step: torch.Tensor, hyperparameters: torch.Tensor, mode_: int,
                                bias_correction: bool) -> None:
    """torch.ops.npugrad.apply_fused_ema_adam with its float hyper-parameters as one tensor (in
    ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER): for a learning rate that is a tensor, as
    torch.optim takes one so that a compiled step follows a scheduler without recompiling (the
    kernel reads them at run time; a float in the schema would be a constant of the graph)."""
    hyper = dict(zip(ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER, hyperparameters.tolist(), strict=True))
    ops.apply_fused_ema_adam(grad, var, m, v, s, step, mode=mode_, bias_correction=bias_correction, **hyper)


def _kernel_view(t: torch.Tensor) -> torch.Tensor:
    """`t` as the kernel takes it (rank 1 to MAX_RANK), sharing its memory: a 0-d parameter (a
    learnable temperature, a scale) as shape (1,), as torch.optim.AdamW steps it; a contiguous
    one of higher rank flattened. The update is elementwise, so the shape changes nothing else."""
    if t.dim() == 0:
        return t.view(1)
    if t.dim() > MAX_RANK and t.is_contiguous():
        return t.view(-1)
    return t


def _check_hyperparameters(**values) -> None:
    """The hyper-parameters in the kernel's ranges (ApplyFusedEmaAdamOp.HYPERPARAMETERS), or
    ValueError naming the first that is not: when the optimizer is made, as torch.optim.AdamW
    checks them, not at its first step."""
    for name, value in values.items():
        meaning, ok = ApplyFusedEmaAdamOp.HYPERPARAMETERS[name]
        if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_complex():
            number = float(value)  # a tensor learning rate, as torch.optim takes
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            number = float(value)
        else:
            raise ValueError(f"FusedEmaAdam: parameter '{name}' must be a real number, got {value!r}")
        if not ok(number):  # type: ignore[operator]
            raise ValueError(f"FusedEmaAdam: parameter '{name}' must be {meaning}, got {value!r}")


class FusedEmaAdam(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, ema_decay: float = 0.9999, mode: int = 1, bias_correction: bool = True):
        if not (isinstance(betas, tuple | list) and len(betas) == 2):
            raise ValueError(f"FusedEmaAdam: parameter 'betas' must be a pair (beta1, beta2), got {betas!r}")
        _check_hyperparameters(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, weight_decay=weight_decay,
                               ema_decay=ema_decay)
        if mode not in (0, 1) or isinstance(mode, bool):
            raise ValueError(f"FusedEmaAdam: parameter 'mode' must be 0 (L2, Adam) or 1 (decoupled decay, AdamW), "
                             f"got {mode!r}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "ema_decay": ema_decay,
                    "mode": mode, "bias_correction": bias_correction}
        super().__init__(params, defaults)

    def __setstate__(self, state: dict) -> None:
        """After load_state_dict: groups saved by torch.optim.Adam(W) get this optimizer's
        defaults for what they lack (`ema_decay`, `bias_correction`; `mode` from their
        `decoupled_weight_decay`); ones asking for what the kernel does not do are an error; their
        parameters' states become the kernel's."""
        super().__setstate__(state)
        for group in self.param_groups:
            for name in ("amsgrad", "maximize"):
                if group.get(name):
                    raise ValueError(f"FusedEmaAdam: a parameter group with {name}=True (the kernel has no {name})")
            if "mode" not in group and "decoupled_weight_decay" in group:
                group["mode"] = int(bool(group["decoupled_weight_decay"]))
            for name, value in self.defaults.items():
                group.setdefault(name, value)
        # A torch.optim.Adam(W) state has no `ema` (started at the parameter) and its `step` is a
        # float 0-d tensor: made the kernel's int64 (1,) here, once, not on every step.
        for p, kept in self.state.items():
            if not kept:
                continue
            step = kept["step"]
            if not (isinstance(step, torch.Tensor) and step.dtype == torch.int64 and step.shape == (1,)):
                kept["step"] = torch.tensor([int(step)], dtype=torch.int64)
            if "ema" not in kept:
                kept["ema"] = p.detach().clone(memory_format=torch.contiguous_format)

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros(1, dtype=torch.int64)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.contiguous_format)
            state["ema"] = p.detach().clone(memory_format=torch.contiguous_format)
        return state

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            named = {**group, "beta1": beta1, "beta2": beta2}
            hyper = [named[name] for name in ApplyFusedEmaAdamOp.HYPERPARAMETER_ORDER]
            # A tensor among them (a scheduled lr): all of them as one tensor, made once for the group.
            values = (torch.stack([torch.as_tensor(x, dtype=torch.float32).reshape(()) for x in hyper])
                      if any(isinstance(x, torch.Tensor) for x in hyper) else None)
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("FusedEmaAdam does not support sparse gradients")
                state = self._state(p)
                tensors = (p.grad, p, state["exp_avg"], state["exp_avg_sq"], state["ema"])
                if p.dim() > MAX_RANK and not all(t.is_contiguous() for t in tensors):
                    raise ValueError(f"FusedEmaAdam: a parameter of rank {p.dim()} (more than {MAX_RANK}) and its "
                                     "gradient must be contiguous")
                state["step"] += 1
                try:
                    if values is not None:
                        _with_hyperparameter_tensor(*(_kernel_view(t) for t in tensors), state["step"], values,
                                                    group["mode"], group["bias_correction"])
                    else:
                        torch.ops.npugrad.apply_fused_ema_adam(*(_kernel_view(t) for t in tensors), state["step"],
                            group["lr"], group["ema_decay"], beta1, beta2, group["eps"], group["mode"],
                            group["bias_correction"], group["weight_decay"])
                except BaseException:  # the kernel's checks rejected the call: it wrote nothing, nor do we
                    state["step"] -= 1
                    raise
        return loss

    def ema(self, p: torch.Tensor) -> torch.Tensor:
        """The moving average of parameter `p` (its state `ema`). A tensor that is none of this
        optimizer's parameters is an error: its state would be a stray entry, on which
        state_dict() fails."""
        if p not in self.state and not any(p is q for group in self.param_groups for q in group["params"]):
            raise ValueError(f"FusedEmaAdam.ema: parameter 'p' (a tensor of shape {tuple(p.shape)}) is not one of "
                             "this optimizer's parameters")
        return self._state(p)["ema"]
