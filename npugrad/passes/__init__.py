"""Every pass npugrad registers with its drivers (`npugrad-opt`, and `xdsl-opt` via the universe).
Passes are imported only when used, so listing them stays cheap."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from xdsl.passes import ModulePass

# pass name -> "module:class", in pipeline order
_PASSES = {
    "choose-tile-sizes": "npugrad.passes.choose_tile_sizes:ChooseTileSizesPass",
    "fuse-linear-online-max-sum": "npugrad.passes.fuse_linear_online_max_sum:FuseLinearOnlineMaxSumPass",
    "fuse-linear-cross-entropy-grad": "npugrad.passes.fuse_linear_cross_entropy_grad:FuseLinearCrossEntropyGradPass",
    "read-weight-in-place": "npugrad.passes.read_weight_in_place:ReadWeightInPlacePass",
    "tile-for-target": "npugrad.passes.tile_for_target:TileForTargetPass",
    "distribute-over-cores": "npugrad.passes.distribute_over_cores:DistributeOverCoresPass",
    "check-capacity": "npugrad.passes.check_capacity:CheckCapacityPass",
    "vectorize-contractions": "npugrad.passes.vectorize_contractions:VectorizeContractionsPass",
    "vectorize-elementwise-loops": "npugrad.passes.vectorize_elementwise:VectorizeElementwiseLoopsPass",
    "convert-train-to-loops": "npugrad.lowering.train_to_loops:ConvertTrainToLoopsPass",
    "lower-npu-to-cpu": "npugrad.lowering.npu_to_cpu:LowerNpuToCpuPass",
}

# What each pass option means (npugrad-opt --help); every option of a pass above has an entry.
OPTION_HELP = {
    "target": "the hardware: host, npu-a2, or a target .toml file",
    "tile_bt": "tokens per tile, for ops without a tile_sizes attribute (an op's own sizes win; 0: from the cpu's caches)",
    "tile_v": "vocabulary rows per tile, for ops without a tile_sizes attribute (an op's own sizes win; 0: from the cpu's caches)",
    "cpu": "the CPU whose caches size the tiles left at 0: host or a target .toml file",
    "wide_grad": "keep G (rounded to the input type) in a float32 tile for a CPU's GEMMs 2 and 3, but a bfloat16 G where the cpu multiplies bfloat16 pairs (the untiled pipeline sets it)",
    "streaming": "write an output a loop stores at least the target's stream_store_bytes of, and does not read, past the caches (non-temporal stores, chosen at run time; false: always through them)",
    "balance_blocks": "spread BT evenly over token tiles whose count is a multiple of this many blocks, each starting at a multiple of the cpu's micro-kernel rows (the gradient's loop then runs over tile indices; 0: steps of tile_bt; the untiled pipeline sets the cpu's cores)",
}


def _loader(path: str) -> Callable[[], type[ModulePass]]:
    module, name = path.split(":")
    return lambda: getattr(importlib.import_module(module), name)


ALL_PASSES: dict[str, Callable[[], type[ModulePass]]] = {name: _loader(path) for name, path in _PASSES.items()}
