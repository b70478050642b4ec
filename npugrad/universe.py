"""The `xdsl.universe` entry point: plain `xdsl-opt` sees the `grad` and `npu` dialects and
npugrad's passes."""

from xdsl.ir import Dialect
from xdsl.universe import Universe

from npugrad.passes import ALL_PASSES


def _grad() -> Dialect:
    from npugrad.dialect import Grad

    return Grad


def _npu() -> Dialect:
    from npugrad.dialect.npu import Npu

    return Npu


NPUGRAD_UNIVERSE = Universe(all_dialects={"grad": _grad, "npu": _npu}, all_passes=dict(ALL_PASSES))
