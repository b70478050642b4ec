"""What one pass hands the next, as attributes of the `train` dialect: typed, verified, printed and
parsed like any attribute, read and written through accessors.

    #train.tiles<bt = 64, v = 128, h = 32>          a tile decision (the op's `tile_sizes`), or the
                                                   tiles a loop over tiles was made with
    #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<...>>
                                                   the outer loop of a fused nest: the op it computes
    #train.role<token_loop>                         a part of a fused nest, for passes that restructure it
    #train.contraction<input_grad, dims = [bt, v, h]>   which contraction of a fused nest, its loop dims
    #train.source<"train.bce...", {reduction = 1 : i64}, {input_x = 0 : i64, ...}>
                                                   on a function: the op its body computes (its
                                                   properties, its operands' argument positions)

Attributes that ride on ops of other dialects (a loop, a function, an alloc) are *discardable*:
each one npugrad uses is declared once as a `Discardable` (name, attribute type, meaning), and
`verify_discardable` rejects an undeclared `train.*`/`npu.*` name or a value of the wrong type, so
no pass talks to another through a string nobody declared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import auto
from typing import Generic, TypeVar

from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, FloatAttr, IntegerAttr, StringAttr, UnitAttr, i64
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Attribute, Operation, ParametrizedAttribute
from xdsl.irdl import irdl_attr_definition
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum


@irdl_attr_definition
class TileSizesAttr(ParametrizedAttribute):
    """`#train.tiles<bt = 64, v = 128>`: named tile sizes, each a positive integer, in order."""

    name = "train.tiles"
    sizes: DictionaryAttr

    def __init__(self, sizes: Mapping[str, int]):
        super().__init__(DictionaryAttr({k: IntegerAttr(v, i64) for k, v in sizes.items()}))

    def as_dict(self) -> dict[str, int]:
        return {k: v.value.data for k, v in self.sizes.data.items()}  # type: ignore[attr-defined]

    def verify(self) -> None:
        for key, value in self.sizes.data.items():
            if not isinstance(value, IntegerAttr) or value.value.data < 1:
                raise VerifyException(f"#train.tiles needs a positive integer for '{key}', got {value}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(", ".join(f"{k} = {v}" for k, v in self.as_dict().items()))

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        seen: set[str] = set()

        def entry() -> tuple[str, int]:
            start = parser.pos
            key = parser.parse_identifier(" (a tile dimension name)")
            if key in seen:  # a dictionary would keep the last silently
                parser.raise_error(f"tile dimension '{key}' is given twice", start, parser.pos)
            seen.add(key)
            parser.parse_punctuation("=")
            return key, parser.parse_integer(allow_boolean=False, allow_negative=True)

        entries = parser.parse_comma_separated_list(parser.Delimiter.ANGLE, entry)
        return [DictionaryAttr({k: IntegerAttr(v, i64) for k, v in entries})]


@irdl_attr_definition
class FusedNestAttr(ParametrizedAttribute):
    """`#train.fused<"train.<op>", #train.tiles<...>>` on the outer loop of the loop nest a fusion pass
    made of an op: which op (its recipe tiles and distributes the nest) and the nest's tiles."""

    name = "train.fused"
    op: StringAttr
    tiles: TileSizesAttr

    def __init__(self, op: str, tiles: Mapping[str, int]):
        super().__init__(StringAttr(op), TileSizesAttr(tiles))


@irdl_attr_definition
class SourceOpAttr(ParametrizedAttribute):
    """`#train.source<"train.<op>", {properties}, {operand = argument position}>` on a function
    whose one train op a pass replaced (fused, tiled, spread over cores): which op, with which
    properties, on which arguments. A stage resumed from a file is then still checked against
    the op's reference, on inputs valid for it (npugrad-opt --stage run)."""

    name = "train.source"
    op: StringAttr
    properties: DictionaryAttr
    operands: DictionaryAttr

    def __init__(self, op: str, properties: Mapping[str, Attribute], operands: Mapping[str, int]):
        super().__init__(StringAttr(op), DictionaryAttr(dict(properties)),
                         DictionaryAttr({k: IntegerAttr(v, i64) for k, v in operands.items()}))

    def arguments(self) -> dict[str, int]:
        """Operand name -> the position of the function argument it is."""
        return {k: v.value.data for k, v in self.operands.data.items()}  # type: ignore[attr-defined]

    def as_builtin(self) -> DictionaryAttr:
        """The same in builtin attributes, which upstream MLIR reads (SOURCE_OP, after lowering):
        `{op = "train.<op>", properties = {...}, operands = {name = position}}`."""
        return DictionaryAttr({"op": self.op, "properties": self.properties, "operands": self.operands})

    @classmethod
    def from_builtin(cls, value: DictionaryAttr) -> SourceOpAttr:
        """as_builtin's inverse; VerifyException (naming what is wrong) for a dictionary it did not make."""
        fields = value.data
        op, props, operands = fields.get("op"), fields.get("properties"), fields.get("operands")
        if set(fields) != {"op", "properties", "operands"} or not isinstance(op, StringAttr) \
                or not isinstance(props, DictionaryAttr) or not isinstance(operands, DictionaryAttr):
            raise VerifyException(f"{SOURCE_OP.name} must be {{op = \"train.<op>\", properties = {{...}}, "
                                  f"operands = {{name = position}}}}, got {value}")
        source = cls.new((op, props, operands))
        source.verify()
        return source

    def verify(self) -> None:
        if not self.op.data.startswith("train."):
            raise VerifyException(f"#train.source names a train op, got '{self.op.data}'")
        for key, value in self.operands.data.items():
            if not isinstance(value, IntegerAttr) or value.value.data < 0:
                raise VerifyException(f"#train.source needs an argument position for operand '{key}', got {value}")


class NestRole(StrEnum):
    """The parts of a fused nest that passes restructuring it must find."""

    INPUT_GRAD_INIT = auto()  # zeroes the input-gradient accumulator
    INPUT_GRAD_FINAL = auto()  # rounds it into the output
    WEIGHT_GRAD_INIT = auto()  # zeroes a vocabulary tile's weight-gradient accumulator
    WEIGHT_GRAD_FINAL = auto()  # rounds it into the output
    TOKEN_LOOP = auto()  # the loop over token tiles inside a vocabulary tile
    TOKEN_START = auto()  # a token loop over tile indices: the first row of its tile (linear_nests.TokenTiles)
    TARGET_MASKS = auto()  # writes the bit-packed target mask and masked targets, by mask byte
    STATISTICS_INIT = auto()  # starts the running row statistics (forward)
    STATISTICS_FINAL = auto()  # finishes them (forward)
    WEIGHT_PACK = auto()  # packs a vocabulary tile of W transposed (a tiling may transpose by copies instead)


class InAngleBrackets:
    """For an EnumAttribute: `#dialect.name<value>` rather than `#dialect<name value>`."""

    @classmethod
    def parse_parameter(cls, parser: AttrParser):
        with parser.in_angle_brackets():
            return super().parse_parameter(parser)  # type: ignore[misc]

    def print_parameter(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            super().print_parameter(printer)  # type: ignore[misc]


@irdl_attr_definition
class NestRoleAttr(InAngleBrackets, EnumAttribute[NestRole]):
    """`#train.role<token_loop>`."""

    name = "train.role"


class Contraction(StrEnum):
    """The contractions of the linear cross-entropy nests."""

    LOGITS = auto()  # Z = X·Wᵀ
    INPUT_GRAD = auto()  # dX += G·W
    WEIGHT_GRAD = auto()  # dW += Gᵀ·X


@irdl_attr_definition
class ContractionAttr(ParametrizedAttribute):
    """`#train.contraction<input_grad, dims = [bt, v, h]>`: which contraction a `linalg.generic` is,
    and the tile dimensions its three loops run over (the tiling reads their tile sizes)."""

    name = "train.contraction"
    kind: StringAttr
    dims: ArrayAttr[StringAttr]

    def __init__(self, kind: Contraction, dims: Sequence[str]):
        super().__init__(StringAttr(kind.value), ArrayAttr([StringAttr(d) for d in dims]))

    @property
    def contraction(self) -> Contraction:
        return Contraction(self.kind.data)

    @property
    def loop_dims(self) -> list[str]:
        return [d.data for d in self.dims.data]

    def verify(self) -> None:
        if self.kind.data not in {c.value for c in Contraction}:
            raise VerifyException(f"#train.contraction: unknown contraction '{self.kind.data}' "
                                  f"(known: {', '.join(c.value for c in Contraction)})")
        if len(self.dims.data) != 3:
            raise VerifyException(f"#train.contraction needs 3 loop dims, got {len(self.dims.data)}")

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(f"{self.kind.data}, dims = [{', '.join(self.loop_dims)}]")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        with parser.in_angle_brackets():
            kind = parser.parse_identifier(" (a contraction: logits, input_grad or weight_grad)")
            parser.parse_punctuation(",")
            parser.parse_keyword("dims")
            parser.parse_punctuation("=")
            dims = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, parser.parse_identifier)
        return [StringAttr(kind), ArrayAttr([StringAttr(d) for d in dims])]


A = TypeVar("A", bound=Attribute)


@dataclass(frozen=True)
class Discardable(Generic[A]):
    """A discardable attribute npugrad's passes hand each other: its name, the type of its value
    (UnitAttr for a marker) and what it means. The only way passes read or write one.
    `after_lowering`: it outlives the train level (convert-train-to-loops drops the others: they
    describe train ops and fused nests, and upstream MLIR could not parse their values)."""

    name: str
    type: type[A]
    meaning: str
    after_lowering: bool = False

    def get(self, op: Operation) -> A | None:
        value = op.attributes.get(self.name)
        return value if isinstance(value, self.type) else None

    def on(self, op: Operation) -> bool:
        return self.name in op.attributes

    def set(self, op: Operation, value: A | None = None) -> None:
        """Put the attribute on `op` (a marker needs no value)."""
        op.attributes[self.name] = value if value is not None else self.type()  # type: ignore[call-arg]

    def remove(self, op: Operation) -> None:
        op.attributes.pop(self.name, None)


TILES = Discardable("train.tiles", TileSizesAttr, "on a loop over tiles: the tile sizes it was made with")
FUSED = Discardable("train.fused", FusedNestAttr, "on the outer loop of a fused nest: the op it computes, its tiles")
ROLE = Discardable("train.role", NestRoleAttr, "on a part of a fused nest: what the part does")
CONTRACTION = Discardable("train.contraction", ContractionAttr,
                          "on a contraction of a fused nest: which one, and its loop dimensions")
DISTRIBUTED = Discardable("train.distributed", UnitAttr,
                          "on a function: distribute-over-cores split work one block could do alone", after_lowering=True)
VECTORIZED = Discardable("train.vectorized", UnitAttr, "on a loop: the vector main loop of an elementwise loop",
                         after_lowering=True)
SOURCE = Discardable("train.source", SourceOpAttr,
                     "on a function: the one train op its body computed before a pass replaced it")
SOURCE_OP = Discardable("train.source_op", DictionaryAttr,
                        "on a lowered function: train.source's op, properties and operands as builtin attributes "
                        "(SourceOpAttr.as_builtin), which upstream MLIR reads", after_lowering=True)
PREDICTED = Discardable("train.predicted_cycles", FloatAttr,
                        "on a train op: the cycles the cost model predicts for its tile sizes on the target "
                        "(choose-tile-sizes)")

TRAIN_DISCARDABLE: tuple[Discardable, ...] = (TILES, FUSED, ROLE, CONTRACTION, DISTRIBUTED, VECTORIZED, SOURCE,
                                              SOURCE_OP, PREDICTED)
TRAIN_ATTRIBUTES: tuple[type[Attribute], ...] = (TileSizesAttr, FusedNestAttr, NestRoleAttr, ContractionAttr,
                                                 SourceOpAttr)


def verify_discardable(op: Operation, declared: Mapping[str, Discardable], prefixes: tuple[str, ...]) -> None:
    """Every attribute of `op` named with one of our dialects' prefixes is declared and well typed."""
    for name, value in op.attributes.items():
        if not name.startswith(prefixes):
            continue
        decl = declared.get(name)
        if decl is None:
            known = ", ".join(sorted(n for n in declared if n.startswith(name.split(".")[0] + ".")))
            raise VerifyException(f"unknown attribute '{name}' (the dialect declares: {known})")
        if not isinstance(value, decl.type):
            raise VerifyException(f"attribute '{name}' must be {decl.type.name}, got {value}")  # type: ignore[attr-defined]
