"""Upstream MLIR ops that the pinned xDSL lacks, in upstream's own syntax, so that the stages
that use them still print, parse back and reach upstream MLIR unchanged.

    memref.prefetch %c[%i, %j], write, locality<3>, data : memref<64x2048xf32>

`memref.prefetch` (upstream: MemRef/IR/MemRefOps.td) asks the cache for the line holding one
element; the upstream conversion makes it `llvm.intr.prefetch`. It reads and writes nothing, so
it may be hoisted, duplicated or dropped without changing a result.

    %acc1 = x86vector.avx512.dot %acc, %a, %b : vector<32xbf16> -> vector<16xf32>

`x86vector.avx512.dot` (upstream: Dialect/X86Vector, as LLVM 22 names it; later MLIR renamed the
dialect `x86`, Dialect/X86/X86.td, with the same op) is
AVX512-BF16's `vdpbf16ps`: lane i of the float32 accumulator adds a[2i+1]·b[2i+1], then
a[2i]·b[2i] (each product exact, each sum rounded to nearest even; bfloat16 subnormals read as
zero and subnormal sums flushed to zero, whatever MXCSR says). `convert-vector-to-llvm{enable-x86vector}`
(`{enable-x86}` later) makes it `llvm.x86.avx512bf16.dpbf16ps.{128,256,512}`. The printed stages
use LLVM 22's names, which Debian's mlir-opt-22 reads (scripts/test-upstream); the MLIR bindings
of the pinned torch-mlir wheel are newer, and lowering/to_llvm.py renames the op for them, as
machine_code.to_llvmlite_syntax bridges the two LLVMs' float syntax.

    %t = "amx.tile_load"(%m, %i, %j) <{operandSegmentSizes = array<i32: 1, 2, 0>}>
        : (memref<?x?xbf16, strided<[?, 1], offset: ?>>, index, index) -> !amx.tile<16x32xbf16>

The AMX dialect (upstream: Dialect/AMX/AMX.td, as LLVM 22 names it; later MLIR moved it into the
`x86` dialect as `x86.amx.*`, which lowering/to_llvm.py renames to for the bindings):
`!amx.tile<RxCxT>`, one of the eight tile registers, and `amx.tile_zero`, `amx.tile_load`
(tileloadd: R rows from a 2-D memref contiguous along its rows, its row stride apart),
`amx.tile_mulf` (tdpbf16ps) and `amx.tile_store`, printed in the generic form with upstream's
operand segments (the optional stride npugrad leaves out). vectorize-contractions' amx_block
emits them; `convert-vector-to-llvm{enable-x86}` makes them `llvm.x86.tileloadd64.internal`,
`llvm.x86.tdpbf16ps.internal` and `llvm.x86.tilestored64.internal`, and LLVM configures the
tiles (ldtilecfg) where a function starts.

    scf.for %k = %lo to %hi step %c1 iter_args(...) { ... }
        {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}

`#llvm.loop_annotation` (upstream: Dialect/LLVMIR/LLVMAttrDefs.td), here its `unroll` part only:
`disable` (LLVM's unrollers leave the loop alone) and `count` (unroll it that many times). On an
`scf.for`, upstream's convert-scf-to-cf moves it to the loop's back edge and convert-cf-to-llvm
to the `llvm.br`'s own `loop_annotation`, which mlir-translate emits as `!llvm.loop` metadata
(`llvm.loop.unroll.disable`, `llvm.loop.unroll.count`). The name must be `loop_annotation`, not
`llvm.loop_annotation`: only the former becomes the branch's own attribute, and mlir-translate
drops the latter. vectorize-contractions marks its whole blocks' float32 reduction loops
`count = 2` and its tail blocks' `disable`; LLVM unrolls no loop npugrad does not annotate
(lowering/machine_code.py). `_unrolled` in vectorize-contractions says what each choice
measured.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects import memref
from xdsl.dialects.builtin import (
    ArrayAttr,
    BoolAttr,
    IndexType,
    IntAttr,
    IntegerAttr,
    MemRefType,
    NoneAttr,
    VectorType,
    bf16,
    f32,
    i32,
)
from xdsl.ir import Attribute, Dialect, ParametrizedAttribute, SSAValue, TypeAttribute
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from npugrad.dialect.attributes import Discardable

_BOOL = {False: BoolAttr.from_bool(False), True: BoolAttr.from_bool(True)}
_LOCALITY = {n: IntegerAttr(n, i32) for n in range(4)}


@irdl_op_definition
class PrefetchOp(IRDLOperation):
    name = "memref.prefetch"

    memref = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    isWrite = prop_def(BoolAttr)
    localityHint = prop_def(IntegerAttr)
    isDataCache = prop_def(BoolAttr)

    def __init__(self, ref: SSAValue, indices: Sequence[SSAValue], write: bool, locality: int = 3, data: bool = True):
        # The attributes are immutable, so every prefetch shares them: the micro-kernels emit
        # hundreds of prefetches, and building an xDSL attribute costs tens of microseconds.
        hint = _LOCALITY[locality] if locality in _LOCALITY else IntegerAttr(locality, i32)
        super().__init__(
            operands=[ref, list(indices)],
            properties={"isWrite": _BOOL[bool(write)], "localityHint": hint, "isDataCache": _BOOL[bool(data)]},
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


@irdl_op_definition
class DotBF16Op(IRDLOperation):
    name = "x86vector.avx512.dot"

    src = operand_def(VectorType)
    a = operand_def(VectorType)
    b = operand_def(VectorType)
    dst = result_def(VectorType)
    traits = traits_def(Pure())

    def __init__(self, src: SSAValue, a: SSAValue, b: SSAValue):
        super().__init__(operands=[src, a, b], result_types=[src.type])

    def verify_(self) -> None:
        src, a, b, dst = (v.type for v in (self.src, self.a, self.b, self.dst))
        lanes = src.get_shape()[0] if isinstance(src, VectorType) and src.get_num_dims() == 1 else 0  # type: ignore[attr-defined]
        if not (src == dst and src.element_type == f32 and lanes in (4, 8, 16)):  # type: ignore[attr-defined]
            raise VerifyException(f"'x86vector.avx512.dot' op expects an accumulator and result of 4, 8 or 16 f32, got {src} -> {dst}")
        if not (a == b == VectorType(bf16, [2 * lanes])):
            raise VerifyException(f"'x86vector.avx512.dot' op expects both factors of type vector<{2 * lanes}xbf16> "
                                  f"for {src}, got {a} and {b}")

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_list([self.src, self.a, self.b], printer.print_operand)
        printer.print_string(" : ")
        printer.print_attribute(self.a.type)
        printer.print_string(" -> ")
        printer.print_attribute(self.src.type)

    @classmethod
    def parse(cls, parser: Parser) -> DotBF16Op:
        operands = parser.parse_comma_separated_list(parser.Delimiter.NONE, parser.parse_unresolved_operand)
        if len(operands) != 3:
            parser.raise_error(f"'x86vector.avx512.dot' expects 3 operands, got {len(operands)}")
        parser.parse_punctuation(":")
        factors = parser.parse_type()
        parser.parse_punctuation("->")
        acc = parser.parse_type()
        src, a, b = (parser.resolve_operand(o, t) for o, t in zip(operands, (acc, factors, factors)))
        return cls(src, a, b)


def x86vector_dialect() -> Dialect:
    """Upstream's x86vector dialect, the op above (xDSL has none)."""
    return Dialect("x86vector", [DotBF16Op], [])


_TILE_ELEMENTS = (bf16, f32)


@irdl_attr_definition
class TileType(ParametrizedAttribute, TypeAttribute):
    """`!amx.tile<16x32xbf16>`: one of AMX's eight tile registers, rows x columns of an element
    type (at most 16 rows of 64 bytes). The bfloat16 tiles are a product's operands: the left
    one rows of 32 reduction steps, the right one 16 rows of pairs of steps for 16 columns
    (row q holds (B[2q, j], B[2q + 1, j]) for each j: AMX's "VNNI" layout); float32 tiles its
    16 x 16 accumulators."""

    name = "amx.tile"
    shape: ArrayAttr[IntAttr]
    element_type: Attribute

    def __init__(self, rows: int, columns: int, element_type: Attribute):
        super().__init__(ArrayAttr([IntAttr(rows), IntAttr(columns)]), element_type)

    @property
    def rows(self) -> int:
        return self.shape.data[0].data

    @property
    def columns(self) -> int:
        return self.shape.data[1].data

    def verify(self) -> None:
        if len(self.shape.data) != 2 or self.element_type not in _TILE_ELEMENTS:
            raise VerifyException(f"!amx.tile must be 2-D of bf16 or f32, got {self.shape.data} of {self.element_type}")
        width = 2 if self.element_type == bf16 else 4
        if not (1 <= self.rows <= 16 and 1 <= self.columns * width <= 64):
            raise VerifyException(f"!amx.tile<{self.rows}x{self.columns}x{self.element_type}> is larger than a tile "
                                  "register (16 rows of 64 bytes)")

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.rows}x{self.columns}x")
        printer.print_attribute(self.element_type)
        printer.print_string(">")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        parser.parse_punctuation("<")
        shape, element = parser.parse_ranked_shape()
        if element is None:
            element = parser.parse_type()
        parser.parse_punctuation(">")
        return [ArrayAttr([IntAttr(n) for n in shape]), element]


def _tile_access(op: IRDLOperation, what: str, tile: TileType) -> None:
    """A tile load's or store's memref: 2-D, the tile's element type, contiguous along its rows
    (tileloadd reads each of the tile's rows as one run of bytes, rows a stride apart)."""
    t = op.base.type  # type: ignore[attr-defined]
    assert isinstance(t, MemRefType)
    if t.get_num_dims() != 2 or t.element_type != tile.element_type:
        raise VerifyException(f"'{op.name}' op {what} a 2-D memref of {tile.element_type}, got {t}")
    if len(op.indices) != 2:  # type: ignore[attr-defined]
        raise VerifyException(f"'{op.name}' op expects 2 indices into {t}, got {len(op.indices)}")  # type: ignore[attr-defined]
    strides = t.get_strides() if hasattr(t, "get_strides") else None
    if strides is not None and strides[-1] not in (None, 1):
        raise VerifyException(f"'{op.name}' op needs {t} contiguous along its rows (a unit innermost stride)")


@irdl_op_definition
class TileZeroOp(IRDLOperation):
    """`%t = amx.tile_zero : !amx.tile<16x16xf32>` (tilezero)."""

    name = "amx.tile_zero"
    res = result_def(TileType)

    def __init__(self, tile: TileType):
        super().__init__(result_types=[tile])


@irdl_op_definition
class TileLoadOp(IRDLOperation):
    """`%t = amx.tile_load %m[%i, %j] : memref<?x?xbf16> into !amx.tile<16x32xbf16>`
    (tileloadd): the tile's rows from rows i.. of the memref, from column j, its rows' stride
    apart."""

    name = "amx.tile_load"
    base = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    stride = opt_operand_def(IndexType)
    res = result_def(TileType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, base: SSAValue, indices: Sequence[SSAValue], tile: TileType):
        super().__init__(operands=[base, list(indices), []], result_types=[tile])

    def verify_(self) -> None:
        assert isinstance(self.res.type, TileType)
        _tile_access(self, "reads", self.res.type)


@irdl_op_definition
class TileMulFOp(IRDLOperation):
    """`%c1 = amx.tile_mulf %a, %b, %c : !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>,
    !amx.tile<16x16xf32>` (tdpbf16ps): c[i, j] += a[i, 2q]·b[q, 2j] + a[i, 2q+1]·b[q, 2j+1] over
    the pairs q, float32 accumulation (bfloat16 subnormals read as zero, results flushed)."""

    name = "amx.tile_mulf"
    lhs = operand_def(TileType)
    rhs = operand_def(TileType)
    acc = operand_def(TileType)
    res = result_def(TileType)
    traits = traits_def(Pure())

    def __init__(self, lhs: SSAValue, rhs: SSAValue, acc: SSAValue):
        super().__init__(operands=[lhs, rhs, acc], result_types=[acc.type])

    def verify_(self) -> None:
        a, b, c, r = (v.type for v in (self.lhs, self.rhs, self.acc, self.res))
        assert isinstance(a, TileType) and isinstance(b, TileType) and isinstance(c, TileType)
        if not (c == r and c.element_type == f32 and a.element_type == bf16 == b.element_type):
            raise VerifyException(f"'amx.tile_mulf' op expects bf16 factors and an f32 accumulator, got {a}, {b}, {c} -> {r}")
        if a.rows != c.rows or b.columns != 2 * c.columns or a.columns != 2 * b.rows:
            raise VerifyException(f"'amx.tile_mulf' op shapes do not chain: {a} x {b} into {c}")


@irdl_op_definition
class TileStoreOp(IRDLOperation):
    """`amx.tile_store %m[%i, %j], %t : memref<?x?xf32>, !amx.tile<16x16xf32>` (tilestored)."""

    name = "amx.tile_store"
    base = operand_def(MemRefType)
    indices = var_operand_def(IndexType)
    val = operand_def(TileType)
    stride = opt_operand_def(IndexType)
    irdl_options = (AttrSizedOperandSegments(as_property=True),)

    def __init__(self, base: SSAValue, indices: Sequence[SSAValue], tile: SSAValue):
        super().__init__(operands=[base, list(indices), tile, []])

    def verify_(self) -> None:
        assert isinstance(self.val.type, TileType)
        _tile_access(self, "writes", self.val.type)


def amx_dialect() -> Dialect:
    """Upstream's AMX dialect (LLVM 22's `amx`; the x86 dialect's `x86.amx` in later MLIR), the
    tile type and ops above (xDSL has none)."""
    return Dialect("amx", [TileZeroOp, TileLoadOp, TileMulFOp, TileStoreOp], [TileType])


@irdl_attr_definition
class LoopAnnotationAttr(ParametrizedAttribute):
    """`#llvm.loop_annotation<unroll = <disable = true>>` or `<unroll = <count = 4>>`: what LLVM's
    unrollers may do with the loop it annotates (the `unroll` part of upstream's attribute)."""

    name = "llvm.loop_annotation"
    disable: BoolAttr | NoneAttr
    count: IntegerAttr | NoneAttr

    def __init__(self, disable: bool | None = None, count: int | None = None):
        super().__init__(NoneAttr() if disable is None else BoolAttr.from_bool(disable),
                         NoneAttr() if count is None else IntegerAttr(count, i32))

    def _fields(self) -> list[str]:
        fields = [] if isinstance(self.disable, NoneAttr) else [f"disable = {str(bool(self.disable.value.data)).lower()}"]
        return fields + ([] if isinstance(self.count, NoneAttr) else [f"count = {self.count.value.data} : i32"])

    def verify(self) -> None:
        if isinstance(self.disable, NoneAttr) and isinstance(self.count, NoneAttr):
            raise VerifyException("#llvm.loop_annotation's unroll needs 'disable' or 'count'")
        if not isinstance(self.count, NoneAttr) and self.count.value.data < 1:
            raise VerifyException(f"#llvm.loop_annotation's unroll count must be positive, got {self.count.value.data}")

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<unroll = <{', '.join(self._fields())}>>")

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> list[Attribute]:
        fields: dict[str, Attribute] = {}

        def field() -> None:
            key = parser.parse_identifier(" ('disable' or 'count')")
            if key not in ("disable", "count") or key in fields:
                parser.raise_error(f"#llvm.loop_annotation's unroll takes 'disable' and 'count' once each, got '{key}'")
            parser.parse_punctuation("=")
            if key == "disable":
                fields[key] = BoolAttr.from_bool(parser.parse_boolean())
            else:
                fields[key] = IntegerAttr(parser.parse_integer(allow_boolean=False), i32)
                if parser.parse_optional_punctuation(":") is not None and (t := parser.parse_type()) != i32:
                    parser.raise_error(f"#llvm.loop_annotation's unroll count is an i32, got {t}")

        parser.parse_punctuation("<")
        parser.parse_keyword("unroll", " (the only part of #llvm.loop_annotation npugrad supports)")
        parser.parse_punctuation("=")
        parser.parse_comma_separated_list(parser.Delimiter.ANGLE, field)
        parser.parse_punctuation(">")
        return [fields.get("disable", NoneAttr()), fields.get("count", NoneAttr())]


LOOP_ANNOTATION = Discardable("loop_annotation", LoopAnnotationAttr,
                              "on an scf.for: what LLVM's unrollers may do with it", after_lowering=True)


def llvm_dialect() -> Dialect:
    """xDSL's llvm dialect with the attribute above added (imported here: a fraction of a second
    that only IR with llvm attributes needs)."""
    from xdsl.dialects import llvm

    base = llvm.LLVM
    return Dialect(base.name, list(base.operations), [*base.attributes, LoopAnnotationAttr])
