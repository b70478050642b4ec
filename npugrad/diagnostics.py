"""An error a pass raises about one op; the compiler reports it at that op's source location."""

from __future__ import annotations

from xdsl.dialects.builtin import NameLoc
from xdsl.ir import Attribute, Operation


def source_location(location: Attribute) -> Attribute:
    """The source position in a location: a label's (IRBuilder.labelled: a NameLoc) seen through."""
    while isinstance(location, NameLoc):
        location = location.location
    return location


class PassFailure(Exception):
    def __init__(self, op: Operation, message: str):
        super().__init__(message)
        self.op = op
        self.message = message
