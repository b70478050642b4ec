"""Train a small language model twice, with npugrad's kernels and with PyTorch's, and compare
the loss curves.

    .venv/bin/python examples/train_lm_head.py                      # 300 steps, a table (~30 s)
    .venv/bin/python examples/train_lm_head.py --csv curves.csv --plot curves.png   # the curves (plot: matplotlib)

The model predicts the next byte of this repository's documentation from the two before it:
two embeddings (float32), their sum through tanh, and an LM head in bfloat16 (mixed precision:
float32 master weights, cast for the head, as LM training does) with a cross-entropy loss.

    npugrad: npugrad.torch.embedding (backward: embedding_dense_backward), linear_cross_entropy
             (forward: fused_linear_online_max_sum, fused_cross_entropy_loss_with_max_sum; backward:
             fused_linear_cross_entropy_loss_grad; no BT×V buffer), FusedEmaAdam
             (apply_fused_ema_adam, mode 1: AdamW, plus a parameter EMA)
    PyTorch: F.embedding, F.linear + F.cross_entropy, torch.optim.AdamW

Both start from the same weights and see the same batches. They differ only in rounding: the
kernels recompute the logits in float32 and round the logits' gradient to bfloat16 before the
two GEMMs (OPS.md §1.6); PyTorch rounds the logits to bfloat16.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import npugrad.torch as nt

ROOT = Path(__file__).resolve().parent.parent
VOCAB = 256  # bytes


def corpus() -> torch.Tensor:
    text = b"".join(p.read_bytes() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long()


def initial_weights(dim: int, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"emb_cur": torch.randn(VOCAB, dim, generator=g) * 0.5,
            "emb_prev": torch.randn(VOCAB, dim, generator=g) * 0.5,
            "head": torch.randn(VOCAB, dim, generator=g) / math.sqrt(dim)}


def batches(data: torch.Tensor, steps: int, tokens: int, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed + 1)
    return [torch.randint(1, len(data) - 1, (tokens,), generator=g) for _ in range(steps)]


def train(kernels: str, data: torch.Tensor, weights: dict, positions: list, lr: float) -> list[float]:
    """Loss per step; `kernels` is "npugrad" or "torch"."""
    params = {k: torch.nn.Parameter(v.clone()) for k, v in weights.items()}
    ours = kernels == "npugrad"
    embedding = nt.embedding if ours else F.embedding
    if ours:
        opt = nt.FusedEmaAdam(params.values(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, ema_decay=0.99)
    else:
        opt = torch.optim.AdamW(params.values(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    losses = []
    for i in positions:
        prev, cur, target = data[i - 1], data[i], data[i + 1]
        hidden = torch.tanh(embedding(cur, params["emb_cur"]) + embedding(prev, params["emb_prev"]))
        head = params["head"].bfloat16()
        if ours:
            loss = nt.linear_cross_entropy(hidden.bfloat16(), head, target)
        else:
            loss = F.cross_entropy(F.linear(hidden.bfloat16(), head).float(), target)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compare(steps: int = 300, tokens: int = 512, dim: int = 64, lr: float = 3e-3, seed: int = 0) -> dict[str, list[float]]:
    data = corpus()
    weights = initial_weights(dim, seed)
    positions = batches(data, steps, tokens, seed)
    return {k: train(k, data, weights, positions, lr) for k in ("npugrad", "torch")}


def table(curves: dict[str, list[float]], every: int) -> str:
    a, b = curves["npugrad"], curves["torch"]
    lines = [f"{'step':>6} {'npugrad':>9} {'PyTorch':>9} {'diff':>9}"]
    for i in [*range(0, len(a), every), len(a) - 1]:
        lines.append(f"{i + 1:>6} {a[i]:>9.4f} {b[i]:>9.4f} {a[i] - b[i]:>+9.4f}")
    return "\n".join(dict.fromkeys(lines))


def plot(curves: dict[str, list[float]], path: str) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7, 6), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    steps = range(1, len(curves["npugrad"]) + 1)
    top.plot(steps, curves["torch"], label="PyTorch (F.embedding, F.linear + F.cross_entropy, AdamW)", lw=2.5, alpha=0.6)
    top.plot(steps, curves["npugrad"], label="npugrad kernels (embedding, FLCE forward and grad, EMA-Adam)", lw=1)
    top.set_ylabel("cross-entropy loss (nats)")
    top.legend()
    top.set_title("Next-byte LM: embeddings + bf16 LM head")
    bottom.plot(steps, [a - b for a, b in zip(curves["npugrad"], curves["torch"])], lw=1, color="k")
    bottom.set_ylabel("npugrad − PyTorch")
    bottom.set_xlabel("step")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def _check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What can be told before the training: counts of at least one, a finite learning rate and
    tolerance, and files that can be written (the run is not lost to a typo in a path)."""
    for name in ("steps", "tokens", "dim"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name}: must be at least 1, got {getattr(args, name)}")
    for name in ("lr", "tolerance"):
        if not 0 <= getattr(args, name) < math.inf:
            parser.error(f"argument --{name}: must be a finite number >= 0, got {getattr(args, name)}")
    for name in ("csv", "plot"):
        path = getattr(args, name)
        if path is None:
            continue
        folder = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path) or not os.path.isdir(folder) or not os.access(folder, os.W_OK):
            parser.error(f"argument --{name}: {path} cannot be written")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tokens", type=int, default=512, help="tokens per batch")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", default=None, help="write the two curves to this PNG (needs matplotlib)")
    parser.add_argument("--csv", default=None, help="write step,npugrad,torch to this file")
    parser.add_argument("--tolerance", type=float, default=0.02, help="largest |difference| of the losses that passes")
    args = parser.parse_args(argv)
    _check(parser, args)
    curves = compare(args.steps, args.tokens, args.dim, args.lr, args.seed)
    print(table(curves, max(1, args.steps // 12)))
    worst = max(abs(a - b) for a, b in zip(curves["npugrad"], curves["torch"]))
    print(f"max |npugrad - PyTorch| over {args.steps} steps: {worst:.4f} (tolerance {args.tolerance})")
    if args.csv:
        rows = [f"{i + 1},{a!r},{b!r}" for i, (a, b) in enumerate(zip(curves["npugrad"], curves["torch"]))]
        Path(args.csv).write_text("step,npugrad,torch\n" + "\n".join(rows) + "\n")
    if args.plot:
        print(f"plot: {args.plot}" if plot(curves, args.plot) else "plot: matplotlib is not installed")
    return 0 if worst <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
