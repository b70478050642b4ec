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

import torch

from npugrad.dialect.train import MAX_RANK
from npugrad.torch.kernels import KERNELS

assert "apply_fused_ema_adam" in KERNELS


def _kernel_view(t: torch.Tensor) -> torch.Tensor:
    """`t` as the kernel takes it (rank 1 to MAX_RANK), sharing its memory: a 0-d parameter (a
    learnable temperature, a scale) as shape (1,), as torch.optim.AdamW steps it; a contiguous
    one of higher rank flattened. The update is elementwise, so the shape changes nothing else."""
    if t.dim() == 0:
        return t.view(1)
    if t.dim() > MAX_RANK and t.is_contiguous():
        return t.view(-1)
    return t


class FusedEmaAdam(torch.optim.Optimizer):
    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, ema_decay: float = 0.9999, mode: int = 1, bias_correction: bool = True):
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay, "ema_decay": ema_decay,
                    "mode": mode, "bias_correction": bias_correction}
        super().__init__(params, defaults)

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
                torch.ops.npugrad.apply_fused_ema_adam(*(_kernel_view(t) for t in tensors), state["step"],
                    group["lr"], group["ema_decay"], beta1, beta2, group["eps"], group["mode"],
                    group["bias_correction"], group["weight_decay"])
        return loss

    def ema(self, p: torch.Tensor) -> torch.Tensor:
        """The moving average of parameter `p` (its state `ema`)."""
        return self._state(p)["ema"]
