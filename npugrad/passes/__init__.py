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


def _choose_tile_sizes() -> type[ModulePass]:
    from npugrad.passes.choose_tile_sizes import ChooseTileSizesPass

    return ChooseTileSizesPass


def _tile_for_target() -> type[ModulePass]:
    from npugrad.passes.tile_for_target import TileForTargetPass

    return TileForTargetPass


def _check_capacity() -> type[ModulePass]:
    from npugrad.passes.check_capacity import CheckCapacityPass

    return CheckCapacityPass


def _vectorize_contractions() -> type[ModulePass]:
    from npugrad.passes.vectorize_contractions import VectorizeContractionsPass

    return VectorizeContractionsPass


def _lower_npu_to_cpu() -> type[ModulePass]:
    from npugrad.lowering.npu_to_cpu import LowerNpuToCpuPass

    return LowerNpuToCpuPass


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {
    "choose-tile-sizes": _choose_tile_sizes,
    "fuse-linear-cross-entropy-grad": _fuse_linear_cross_entropy_grad,
    "tile-for-target": _tile_for_target,
    "check-capacity": _check_capacity,
    "vectorize-contractions": _vectorize_contractions,
    "convert-grad-to-loops": _convert_grad_to_loops,
    "lower-npu-to-cpu": _lower_npu_to_cpu,
}
