"""The vectorized module as text for upstream MLIR to parse, printed fast.

Upstream MLIR reads the xDSL module from text (lowering/to_llvm.py). xDSL's printer spends
most of its time per character and per attribute (a FLCE gradient's 2,000 ops took 130 ms,
a tenth of its compile); this printer writes MLIR's generic op form, the form every op parses
from, in whole strings, and prints each distinct attribute or type once (xDSL's printer, then
remembered): about a fifth of that time. The result is for the parser, not for reading:

- values are numbered `%0, %1, ...` and blocks `^bb0, ^bb1, ...` through the whole module (MLIR
  scopes names per region isolated from above, so unique names are valid everywhere);
- no locations (the xDSL printer gives none either), unless `line_tables`: then every op an
  IRBuilder labelled (a NameLoc, `loc("logits.k"("flce.mlir":5:3))`) is at the label as its file,
  `loc("logits.k":5:3)`, and an op at a source position is there. MLIR's line tables keep a
  location's file, line and column and drop a NameLoc's name: so the machine code's line tables
  name each instruction's loop (bench/loop_profile.py), and the others the source line.

What users read at the `vectorized` stage is still xDSL's printer's custom form.
tests/test_mlir_text.py checks that upstream MLIR reads both forms as the same module.
"""

from __future__ import annotations

from io import StringIO

from xdsl.dialects.builtin import FileLineColLoc, FunctionType, NameLoc, UnitAttr, UnregisteredOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.printer import Printer
from xdsl.utils.mlir_lexer import MLIRLexer

from npugrad.diagnostics import source_location

_IDENTIFIER = MLIRLexer.bare_identifier_regex


def generic_text(op: Operation, line_tables: bool = False) -> str:
    """`op` (a builtin.module, or any op) in MLIR's generic form; with `line_tables`, located."""
    return _GenericPrinter(line_tables).text(op)


def _line_table_location(loc: Attribute) -> str | None:
    """`loc(...)` for an op at `loc` in the line tables: a label as the file (see above)."""
    label = loc.desc.data if isinstance(loc, NameLoc) else None
    loc = source_location(loc)
    line, column = (loc.line.data, loc.column.data) if isinstance(loc, FileLineColLoc) else (1, 1)
    file = label if label is not None else loc.filename.data if isinstance(loc, FileLineColLoc) else None
    if file is None:
        return None
    stream = StringIO()
    Printer(stream=stream).print_string_literal(file)
    return f" loc({stream.getvalue()}:{line}:{column})"


class _GenericPrinter:
    def __init__(self, line_tables: bool = False) -> None:
        self._line_tables = line_tables
        self._locations: dict[int, str | None] = {}  # by the location's id: few, held by the module
        self._out: list[str] = []
        self._values: dict[SSAValue, str] = {}
        self._blocks: dict[Block, str] = {}
        self._attributes: dict[Attribute, str] = {}
        self._by_id: dict[int, str] = {}
        self._names: dict[str, str] = {}

    def text(self, op: Operation) -> str:
        self._op(op, "")
        self._out.append("\n")
        return "".join(self._out)

    # -- names ----------------------------------------------------------------------------------
    def _value(self, value: SSAValue) -> str:
        name = self._values.get(value)
        if name is None:
            name = self._values[value] = f"%{len(self._values)}"
        return name

    def _block(self, block: Block) -> str:
        name = self._blocks.get(block)
        if name is None:
            name = self._blocks[block] = f"^bb{len(self._blocks)}"
        return name

    def _attribute(self, attr: Attribute) -> str:
        # By identity first (the module holds its attributes while it prints; an attribute's
        # hash walks its parameters), then by value.
        text = self._by_id.get(id(attr))
        if text is not None:
            return text
        try:
            text = self._attributes.get(attr)
        except TypeError:  # an attribute whose parameters do not hash: printed each time
            return _xdsl_attribute(attr)
        if text is None:
            text = self._attributes[attr] = _xdsl_attribute(attr)
        self._by_id[id(attr)] = text
        return text

    def _name(self, name: str) -> str:
        text = self._names.get(name)
        if text is None:
            if _IDENTIFIER.fullmatch(name) is not None:
                text = name
            else:
                stream = StringIO()
                Printer(stream=stream).print_string_literal(name)
                text = stream.getvalue()
            self._names[name] = text
        return text

    def _dictionary(self, attrs) -> str:
        return ", ".join(self._name(k) if isinstance(v, UnitAttr) else f"{self._name(k)} = {self._attribute(v)}"
                         for k, v in attrs.items())

    # -- ops, regions, blocks -------------------------------------------------------------------
    def _op(self, op: Operation, indent: str) -> None:
        out = self._out
        out.append(indent)
        if op.results:
            out.append(", ".join(map(self._value, op.results)))
            out.append(" = ")
        attributes = op.attributes
        if isinstance(op, UnregisteredOp):  # xDSL keeps its name among its attributes
            attributes = {k: v for k, v in attributes.items() if k != "op_name__"}
            out.append(f'"{op.op_name.data}"(')
        else:
            out.append(f'"{op.name}"(')
        out.append(", ".join(map(self._value, op.operands)))
        out.append(")")
        if op.successors:
            out.append(" [" + ", ".join(map(self._block, op.successors)) + "]")
        if op.properties:
            out.append(" <{" + self._dictionary(op.properties) + "}>")
        if op.regions:
            out.append(" (")
            for i, region in enumerate(op.regions):
                if i:
                    out.append(", ")
                self._region(region, indent)
            out.append(")")
        if attributes:
            out.append(" {" + self._dictionary(attributes) + "}")
        out.append(" : (" + ", ".join(self._attribute(o.type) for o in op.operands) + ") -> ")
        results = [r.type for r in op.results]
        if len(results) == 1 and not isinstance(results[0], FunctionType):
            out.append(self._attribute(results[0]))
        else:
            out.append("(" + ", ".join(map(self._attribute, results)) + ")")
        if self._line_tables:
            key = id(op.location)
            if key not in self._locations:
                self._locations[key] = _line_table_location(op.location)
            if (located := self._locations[key]) is not None:
                out.append(located)

    def _region(self, region: Region, indent: str) -> None:
        out = self._out
        blocks = list(region.blocks)
        for block in blocks:  # successors may name a block printed after them
            self._block(block)
        out.append("{\n")
        inner = indent + "  "
        for i, block in enumerate(blocks):
            # The entry block's label only where it has arguments, or where it is empty.
            if i or block.args or block.first_op is None:
                args = ", ".join(f"{self._value(a)}: {self._attribute(a.type)}" for a in block.args)
                out.append(f"{indent}{self._block(block)}({args}):\n" if args else f"{indent}{self._block(block)}:\n")
            for op in block.ops:
                self._op(op, inner)
                out.append("\n")
        out.append(indent + "}")


def _xdsl_attribute(attr: Attribute) -> str:
    stream = StringIO()
    Printer(stream=stream).print_attribute(attr)
    return stream.getvalue()
