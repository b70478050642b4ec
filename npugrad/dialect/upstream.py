"""Upstream MLIR ops that the pinned xDSL lacks, in upstream's own syntax, so that the stages
that use them still print, parse back and reach upstream MLIR unchanged.

    memref.prefetch %c[%i, %j], write, locality<3>, data : memref<64x2048xf32>

`memref.prefetch` (upstream: MemRef/IR/MemRefOps.td) asks the cache for the line holding one
element; the upstream conversion makes it `llvm.intr.prefetch`. It reads and writes nothing, so
it may be hoisted, duplicated or dropped without changing a result.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import memref
from xdsl.dialects.builtin import BoolAttr, IndexType, IntegerAttr, MemRefType, i32
from xdsl.ir import Dialect, SSAValue
from xdsl.irdl import IRDLOperation, irdl_op_definition, operand_def, prop_def, var_operand_def
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    name = "memref.prefetch"

    memref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    isWrite = prop_def(BoolAttr)
    localityHint = prop_def(IntegerAttr)
    isDataCache = prop_def(BoolAttr)

    def __init__(self, ref: SSAValue, indices: Sequence[SSAValue], write: bool, locality: int = 3, data: bool = True):
        super().__init__(
            operands=[ref, list(indices)],
            properties={"isWrite": BoolAttr.from_bool(write), "localityHint": IntegerAttr(locality, i32),
                        "isDataCache": BoolAttr.from_bool(data)},
        )

    def verify_(self) -> None:
        t = self.memref.type
        assert isinstance(t, MemRefType)
        if len(self.indices) != t.get_num_dims():
            raise VerifyException(f"'memref.prefetch' op expects {t.get_num_dims()} indices into {t}, "
                                  f"got {len(self.indices)}")
        if not 0 <= self.localityHint.value.data <= 3:
            raise VerifyException(f"'memref.prefetch' op locality hint must be 0 to 3, got {self.localityHint.value.data}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.memref)
        printer.print_string("[")
        printer.print_list(self.indices, printer.print_operand)
        printer.print_string("], ")
        printer.print_string("write" if self.isWrite.value.data else "read")
        printer.print_string(f", locality<{self.localityHint.value.data}>, ")
        printer.print_string("data" if self.isDataCache.value.data else "instr")
        printer.print_string(" : ")
        printer.print_attribute(self.memref.type)

    @classmethod
    def parse(cls, parser: Parser) -> PrefetchOp:
        ref = parser.parse_unresolved_operand()
        indices = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_unresolved_operand)
        parser.parse_punctuation(",")
        kind = parser.parse_identifier()
        if kind not in ("read", "write"):
            parser.raise_error(f"'memref.prefetch' expects 'read' or 'write', got '{kind}'")
        parser.parse_punctuation(",")
        parser.parse_keyword("locality")
        parser.parse_punctuation("<")
        locality = parser.parse_integer()
        parser.parse_punctuation(">")
        parser.parse_punctuation(",")
        cache = parser.parse_identifier()
        if cache not in ("data", "instr"):
            parser.raise_error(f"'memref.prefetch' expects 'data' or 'instr', got '{cache}'")
        parser.parse_punctuation(":")
        t = parser.parse_type()
        ref = parser.resolve_operand(ref, t)
        indices = [parser.resolve_operand(i, IndexType()) for i in indices]
        return cls(ref, indices, kind == "write", locality, cache == "data")


def memref_dialect() -> Dialect:
    """xDSL's memref dialect with the ops above added."""
    base = memref.MemRef
    return Dialect(base.name, [*base.operations, PrefetchOp], list(base.attributes))
