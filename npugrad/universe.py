"""The `xdsl.universe` entry point: plain `xdsl-opt` sees the `grad` dialect and npugrad's passes."""

from xdsl.ir import Dialect
from xdsl.universe import Universe

from npugrad.passes import ALL_PASSES


def _grad() -> Dialect:
    from npugrad.dialect import Grad

    return Grad


NPUGRAD_UNIVERSE = Universe(all_dialects={"grad": _grad}, all_passes=dict(ALL_PASSES))
