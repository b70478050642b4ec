"""npugrad's passes and dialects are known to both drivers: `npugrad-opt -p` and plain `xdsl-opt`
(through the xdsl.universe entry point)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from npugrad.passes import ALL_PASSES
from npugrad.universe import NPUGRAD_UNIVERSE

BIN = Path(sys.executable).parent
PASSES = [
    "choose-tile-sizes",
    "fuse-linear-online-max-sum",
    "fuse-linear-cross-entropy-grad",
    "read-weight-in-place",
    "tile-for-target",
    "distribute-over-cores",
    "check-capacity",
    "vectorize-contractions",
    "vectorize-elementwise-loops",
    "convert-train-to-loops",
    "lower-npu-to-cpu",
]
KERNEL = """func.func @f(%x: memref<8xf32>) {
  %b = npu.alloc_local : memref<8xf32, #npu.mem<ub>>
  npu.copy %x, %b : memref<8xf32>, memref<8xf32, #npu.mem<ub>>
  func.return
}
"""


def test_every_pass_is_registered_under_its_name():
    assert sorted(ALL_PASSES) == sorted(PASSES)
    for name, factory in ALL_PASSES.items():
        assert factory().name == name
    assert NPUGRAD_UNIVERSE.all_passes.keys() == ALL_PASSES.keys()


def test_universe_has_both_dialects():
    assert {name: factory().name for name, factory in NPUGRAD_UNIVERSE.all_dialects.items()} == {
        "train": "train",
        "npu": "npu",
    }


@pytest.mark.parametrize("tool", ["xdsl-opt", "npugrad-opt"])
def test_drivers_parse_npu_and_run_the_passes(tool, tmp_path):
    path = tmp_path / "k.mlir"
    path.write_text(KERNEL)
    pipeline = (
        "choose-tile-sizes{target=npu-a2},tile-for-target{target=npu-a2},check-capacity{target=npu-a2},lower-npu-to-cpu"
    )
    result = subprocess.run(
        [BIN / tool, path, "-p", pipeline], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "memref.alloc() {alignment = 64 : i64} : memref<8xf32>" in result.stdout
    assert "npu." not in result.stdout
