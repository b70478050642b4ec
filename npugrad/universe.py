"""The `xdsl.universe` entry point: plain `xdsl-opt` sees the `train` and `npu` dialects and
npugrad's passes."""

from xdsl.ir import Dialect
from xdsl.universe import Universe

from npugrad.passes import ALL_PASSES


def _train() -> Dialect:
    from npugrad.dialect import Train

    return Train


def _npu() -> Dialect:
    from npugrad.dialect.npu import Npu

    return Npu


NPUGRAD_UNIVERSE = Universe(all_dialects={"train": _train, "npu": _npu}, all_passes=dict(ALL_PASSES))
