"""Every pass npugrad registers with its drivers (`npugrad-opt`, and `xdsl-opt` via the universe)."""

from __future__ import annotations

from collections.abc import Callable

from xdsl.passes import ModulePass


def _convert_grad_to_loops() -> type[ModulePass]:
    from npugrad.lowering.grad_to_loops import ConvertGradToLoopsPass

    return ConvertGradToLoopsPass


def _fuse_linear_cross_entropy_grad() -> type[ModulePass]:
    from npugrad.passes.fuse_linear_cross_entropy_grad import FuseLinearCrossEntropyGradPass

    return FuseLinearCrossEntropyGradPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "fuse-linear-cross-entropy-grad": _fuse_linear_cross_entropy_grad,
    "convert-grad-to-loops": _convert_grad_to_loops,
}
