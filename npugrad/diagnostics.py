"""An error a pass raises about one op; the compiler reports it at that op's source location."""

from __future__ import annotations

from xdsl.ir import Operation


class PassFailure(Exception):
    def __init__(self, op: Operation, message: str):
        super().__init__(message)
        self.op = op
        self.message = message
