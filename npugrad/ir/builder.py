"""An IR builder for loop-level code: ops inserted through a rewriter before an anchor op,
constants and sizes of outside memrefs hoisted above what it emits, loop nests and branches as
context managers, loads that widen to float32 and stores that round once to the stored type.

    b = IRBuilder(rewriter, op)                # in a RewritePattern: the pattern's rewriter
    n = b.dim(x, 0)
    with b.loop(n) as i:
        v = b.load_f32(x, [i])
        b.store_f32(b.emit(arith.MulfOp(v, v)), y, [i])

Everything the builder emits is located at the anchor (errors found later point at the source
op); inside `b.labelled("logits.k")` at a named location around it, which line tables carry to
the machine code (Pipeline.line_tables). Arithmetic is written with the dialects' own ops
(`b.emit(arith.AddfOp(a, c))`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from math import prod

from xdsl.builder import Builder
from xdsl.dialects import arith, memref, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AffineMapAttr,
    ArrayAttr,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    LocationAttr,
    MemRefType,
    NameLoc,
    NoneAttr,
    Signedness,
    StringAttr,
    UnknownLoc,
    UnrealizedConversionCastOp,
    VectorType,
    f32,
)
from xdsl.dialects.linalg.attrs import IteratorTypeAttr
from xdsl.dialects.linalg.ops import FillOp, GenericOp, YieldOp
from xdsl.ir import Attribute, Block, Operation, Region, SSAValue
from xdsl.ir.affine import AffineMap
from xdsl.rewriter import InsertPoint

from npugrad import dtypes
from npugrad.diagnostics import source_location

index = IndexType()


def labelled_location(label: str, location: LocationAttr) -> NameLoc:
    """`location` labelled `label` (IRBuilder.labelled), in place of any label it had."""
    return NameLoc(StringAttr(label), source_location(location))


class IRBuilder:
    def __init__(self, rewriter: Builder, anchor: Operation, label: str | None = None):
        """Emit before `anchor`, inserting through `rewriter` (a PatternRewriter inside a pattern,
        so the walker sees every new op; any xDSL Builder elsewhere); with `label`, everything
        labelled so (as inside `labelled(label)`: a pass emitting an op's code names it after the op)."""
        self.rewriter = rewriter
        self.anchor = anchor
        self.point = InsertPoint.before(anchor)
        self._emitted: set[Operation] = set()
        self._first: Operation | None = None  # first op emitted at the anchor's level
        self._last_hoisted: Operation | None = None
        self._consts: dict[tuple[object, str], SSAValue] = {}
        self._static: dict[SSAValue, int] = {}  # index constants, folded into subview shapes
        self._dims: dict[tuple[SSAValue, int], SSAValue] = {}
        # Where emitted ops are (labelled); None: the anchor's.
        self._location: LocationAttr | None = None if label is None else labelled_location(label, anchor.location)

    @classmethod
    def before(cls, op: Operation) -> IRBuilder:
        """A builder outside any pattern (tests, analyses): a plain Builder inserts."""
        return cls(Builder(InsertPoint.before(op)), op)

    def at(self, op: Operation) -> IRBuilder:
        """A builder emitting before `op`, through the same rewriter."""
        return IRBuilder(self.rewriter, op)

    def erase(self, op: Operation) -> None:
        erase = getattr(self.rewriter, "erase", None)
        if erase is not None:
            erase(op)
        else:
            from xdsl.rewriter import Rewriter

            Rewriter.erase_op(op)

    def modified(self, op: Operation) -> None:
        """Tell the rewriter that `op` was changed in place (operands, attributes)."""
        notify = getattr(self.rewriter, "notify_op_modified", None)
        if notify is not None:
            notify(op)

    def _locate(self, op: Operation) -> None:
        location = self.anchor.location if self._location is None else self._location
        for inner in op.walk():
            if isinstance(inner.location, UnknownLoc):
                inner.location = location

    @contextmanager
    def labelled(self, label: str) -> Iterator[None]:
        """Ops emitted inside are located at `label` around the anchor's location (a NameLoc,
        `loc("logits.k"("flce.mlir":5:3))`): what a loop is for, which diagnostics see through
        (source_location) and line tables name the machine code by (a profile's loops:
        bench/loop_profile.py). Labels nest: the innermost names what is emitted."""
        outer = self._location
        self._location = labelled_location(label, self.anchor.location)
        try:
            yield
        finally:
            self._location = outer

    def emit(self, op: Operation) -> SSAValue:
        """Insert `op` at the current point; its (first) result, if it has one."""
        self._locate(op)
        self.rewriter.insert(op, self.point)
        self._emitted.add(op)
        if self._first is None and op.parent is self.anchor.parent:
            self._first = op
        return op.results[0] if op.results else None  # type: ignore[return-value]

    def _hoist(self, op: Operation) -> None:
        self._locate(op)
        if self._last_hoisted is not None:
            point = InsertPoint.after(self._last_hoisted)
        else:
            point = InsertPoint.before(self._first or self.anchor)
        self.rewriter.insert(op, point)
        self._emitted.add(op)
        self._last_hoisted = op

    def _defined_outside(self, value: SSAValue) -> bool:
        owner = value.owner
        if isinstance(owner, Block):
            return owner is self.anchor.parent
        return owner not in self._emitted and owner.parent is self.anchor.parent

    # -- constants and shapes ----------------------------------------------------------------
    def const(self, value: float | bool, type_: Attribute) -> SSAValue:
        key = (value, str(type_))
        if key not in self._consts:
            if isinstance(type_, VectorType):
                attr = DenseIntOrFPElementsAttr.from_list(type_, [value])  # a splat
            elif isinstance(type_, IntegerType | IndexType):
                attr = IntegerAttr(int(value), type_)
            else:
                attr = FloatAttr(float(value), type_)
            op = arith.ConstantOp(attr, type_)
            self._hoist(op)
            self._consts[key] = op.result
            if isinstance(type_, IndexType):
                self._static[op.result] = int(value)
        return self._consts[key]

    def idx(self, value: int) -> SSAValue:
        return self.const(value, index)

    def f32(self, value: float) -> SSAValue:
        return self.const(value, f32)

    def static_value(self, value: SSAValue) -> int | None:
        """The value of an index constant this builder made, else None."""
        return self._static.get(value)

    def dim(self, ref: SSAValue, axis: int) -> SSAValue:
        t = ref.type
        assert isinstance(t, MemRefType)
        size = t.get_shape()[axis]
        if size != DYNAMIC_INDEX:
            return self.idx(size)
        if not self._defined_outside(ref):
            return self.emit(memref.DimOp(ref, self.idx(axis)))
        if (ref, axis) not in self._dims:
            op = memref.DimOp(ref, self.idx(axis))
            self._hoist(op)
            self._dims[(ref, axis)] = op.result
        return self._dims[(ref, axis)]

    def dims(self, ref: SSAValue) -> list[SSAValue]:
        assert isinstance(ref.type, MemRefType)
        return [self.dim(ref, a) for a in range(ref.type.get_num_dims())]

    def product(self, sizes: Sequence[SSAValue]) -> SSAValue:
        n = self.idx(1)
        for i, d in enumerate(sizes):
            n = d if i == 0 else self.emit(arith.MuliOp(n, d))
        return n

    def numel(self, ref: SSAValue) -> SSAValue:
        return self.product(self.dims(ref))

    def line_head(self, ref: SSAValue, n: SSAValue, element_bytes: int, line_bytes: int) -> SSAValue:
        """How many elements of `ref`'s innermost dimension (of n) come before the first that
        starts a cache line: min(n, ((line − first_byte % line) % line) / element_bytes), from
        the address of ref's first element at run time. A hint for laying vectors on lines,
        never needed for correctness (an element that straddles lines counts as before)."""
        _, gap = self.bytes_to_line(ref, element_bytes, line_bytes)
        return self.emit(arith.MinSIOp(n, self.emit(arith.DivUIOp(gap, self.idx(element_bytes)))))

    def bytes_to_line(self, ref: SSAValue, element_bytes: int, line_bytes: int,
                      at: Sequence[SSAValue] | None = None) -> tuple[SSAValue, SSAValue]:
        """(first_byte, (line − first_byte % line) % line): the address of the element of `ref`
        at indices `at` (None: its first) at run time, and the bytes from it to the next line."""
        meta = memref.ExtractStridedMetaDataOp(ref)
        self.emit(meta)
        element = meta.offset
        for i, stride in zip(at or (), meta.strides):
            element = self.emit(arith.AddiOp(element, self.emit(arith.MuliOp(i, stride))))
        base = self.emit(memref.ExtractAlignedPointerAsIndexOp.build(operands=[ref], result_types=[index]))
        first_byte = self.emit(arith.AddiOp(base, self.emit(arith.MuliOp(element, self.idx(element_bytes)))))
        misaligned = self.emit(arith.RemUIOp(first_byte, self.idx(line_bytes)))
        gap = self.emit(arith.RemUIOp(self.emit(arith.SubiOp(self.idx(line_bytes), misaligned)), self.idx(line_bytes)))
        return first_byte, gap

    # -- control flow -----------------------------------------------------------------------
    @contextmanager
    def _inside(self, block: Block) -> Iterator[None]:
        outer = self.point
        self.point = InsertPoint.at_end(block)
        try:
            yield
        finally:
            self.point = outer

    @contextmanager
    def loop(self, ub: SSAValue, lb: SSAValue | None = None, step: SSAValue | None = None) -> Iterator[SSAValue]:
        """`scf.for %i = lb to ub step step`; the body is what is emitted inside the block."""
        body = Block(arg_types=[index])
        self.emit(scf.ForOp(lb or self.idx(0), ub, step or self.idx(1), [], body))
        with self._inside(body):
            yield body.args[0]
            self.emit(scf.YieldOp())

    @contextmanager
    def loop_nest(self, ubs: Sequence[SSAValue]) -> Iterator[list[SSAValue]]:
        """A perfect nest over [0, ub) for each bound; yields the induction variables."""
        if not ubs:
            yield []
            return
        with self.loop(ubs[0]) as i, self.loop_nest(ubs[1:]) as rest:
            yield [i, *rest]

    @contextmanager
    def carried_loop(self, ub: SSAValue, inits: Sequence[SSAValue], lb: SSAValue | None = None,
                     step: SSAValue | None = None) -> Iterator[tuple[SSAValue, list[SSAValue], list[SSAValue]]]:
        """`scf.for` carrying values: yields (iv, the carried values, a list the body appends the
        next values to); afterwards `inits` is replaced by the loop's results."""
        body = Block(arg_types=[index, *(v.type for v in inits)])
        loop = scf.ForOp(lb or self.idx(0), ub, step or self.idx(1), list(inits), body)
        self.emit(loop)
        updated: list[SSAValue] = []
        with self._inside(body):
            yield body.args[0], list(body.args[1:]), updated
            self.emit(scf.YieldOp(*updated))
        if isinstance(inits, list):
            inits[:] = loop.results

    @contextmanager
    def if_(self, cond: SSAValue) -> Iterator[None]:
        then = Block()
        self.emit(scf.IfOp(cond, [], [then]))
        with self._inside(then):
            yield
            self.emit(scf.YieldOp())

    def if_else(self, cond: SSAValue, then: Callable[[], object], otherwise: Callable[[], object],
                types: Sequence[Attribute] = ()) -> list[SSAValue]:
        """`scf.if cond { then() } else { otherwise() }`, each emitting its branch's code; with
        result `types`, each branch returns the values it yields, and the results are returned."""
        blocks = [Block(), Block()]
        op = scf.IfOp(cond, list(types), Region(blocks[0]), Region(blocks[1]))
        self.emit(op)
        for emit, block in zip((then, otherwise), blocks):
            with self._inside(block):
                values = emit()
                self.emit(scf.YieldOp(*(values if types else [])))
        return list(op.results)

    # -- memory -------------------------------------------------------------------------------
    def load(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        value = self.emit(memref.LoadOp.get(ref, indices))
        t = value.type
        if isinstance(t, IntegerType) and t.signedness.data != Signedness.SIGNLESS:
            # arith works on signless integers; the bits are the same.
            value = self.emit(UnrealizedConversionCastOp.get([value], [IntegerType(t.width.data)]))
        return value

    def load_f32(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        return self.to_f32(self.load(ref, indices))

    def store(self, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]) -> None:
        self.emit(memref.StoreOp.get(value, ref, indices))

    def store_f32(self, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]) -> None:
        """Store a float32 value, rounded once (to nearest even) to the element type of `ref`."""
        self.store(self.from_f32(value, ref.type.element_type), ref, indices)  # type: ignore[attr-defined]

    def subview(self, ref: SSAValue, offsets: Sequence[SSAValue | int], sizes: Sequence[SSAValue | int]) -> SSAValue:
        """A unit-stride window of `ref`."""
        strides = [1] * len(offsets)
        offsets = [self._static.get(o, o) if isinstance(o, SSAValue) else o for o in offsets]
        sizes = [self._static.get(d, d) if isinstance(d, SSAValue) else d for d in sizes]
        t = memref.SubviewOp.infer_result_type(ref.type, offsets, sizes, strides)  # type: ignore[arg-type]
        return self.emit(memref.SubviewOp.get(ref, offsets, sizes, strides, t))

    def alloc(self, shape: Sequence[SSAValue | int], element: Attribute) -> SSAValue:
        """A heap buffer (freed with `dealloc`): tiles are too large for the stack."""
        shape = [self._static.get(d, d) if isinstance(d, SSAValue) else d for d in shape]
        static = [DYNAMIC_INDEX if isinstance(d, SSAValue) else d for d in shape]
        dynamic = [d for d in shape if isinstance(d, SSAValue)]
        return self.emit(memref.AllocOp(dynamic, [], MemRefType(element, static), alignment=IntegerAttr(64, 64)))

    def dealloc(self, ref: SSAValue) -> None:
        self.emit(memref.DeallocOp.get(ref))

    def drop_deallocs(self, ref: SSAValue) -> None:
        """Erase the deallocs of a heap buffer that is being replaced."""
        for use in list(ref.uses):
            if isinstance(use.operation, memref.DeallocOp):
                self.erase(use.operation)

    def erase_if_dead(self, ref: SSAValue) -> None:
        """Erase a heap buffer (and its deallocs) that nothing else uses any more."""
        if all(isinstance(u.operation, memref.DeallocOp) for u in ref.uses):
            self.drop_deallocs(ref)
            self.erase(ref.owner)  # type: ignore[arg-type]

    def fill(self, value: float, ref: SSAValue) -> Operation:
        op = FillOp([self.const(value, ref.type.element_type)], [ref], res=[])  # type: ignore[attr-defined]
        self.emit(op)
        return op

    def contract(self, lhs: SSAValue, rhs: SSAValue, acc: SSAValue, maps, doc: str, reduction_dim: int = 2) -> GenericOp:
        """acc[...] += lhs[...]·rhs[...] as a `linalg.generic` over three dims, `reduction_dim` the
        reduced one; `maps` gives the (d0, d1, d2) -> indices maps of lhs, rhs and acc. Inputs are
        widened to the accumulator's type, so bf16/f16 tiles accumulate in float32. `doc` is for
        the reader of the IR only."""
        from xdsl.dialects.builtin import StringAttr

        acc_t = acc.type.element_type  # type: ignore[attr-defined]
        body = Block(arg_types=[lhs.type.element_type, rhs.type.element_type, acc_t])  # type: ignore[attr-defined]
        inner = Builder(InsertPoint.at_end(body))
        a, b, c = body.args
        if a.type != acc_t:
            a = inner.insert(arith.ExtFOp(a, acc_t)).result
        if b.type != acc_t:
            b = inner.insert(arith.ExtFOp(b, acc_t)).result
        product = inner.insert(arith.MulfOp(a, b)).result
        total = inner.insert(arith.AddfOp(c, product)).result
        inner.insert(YieldOp(total))
        generic = GenericOp(
            [lhs, rhs],
            [acc],
            Region(body),
            [AffineMapAttr(AffineMap.from_callable(m)) for m in maps],
            [IteratorTypeAttr.reduction() if d == reduction_dim else IteratorTypeAttr.parallel() for d in range(3)],
            doc=StringAttr(doc),
        )
        self.emit(generic)
        return generic

    def collapse(self, ref: SSAValue) -> SSAValue:
        """An identity-layout memref as one dimension."""
        t = ref.type
        assert isinstance(t, MemRefType)
        shape = t.get_shape()
        n = DYNAMIC_INDEX if DYNAMIC_INDEX in shape else prod(shape)
        return self.emit(
            memref.CollapseShapeOp.build(
                operands=[ref],
                result_types=[MemRefType(t.element_type, [n], NoneAttr(), t.memory_space)],
                properties={"reassociation": ArrayAttr([ArrayAttr([IntegerAttr(d, 64) for d in range(len(shape))])])},
            )
        )

    # -- conversions --------------------------------------------------------------------------
    def to_f32(self, value: SSAValue) -> SSAValue:
        t = value.type
        if t == f32:
            return value
        if dtypes.is_float(t):
            return self.emit(arith.ExtFOp(value, f32))
        raise TypeError(f"not a float: {t}")

    def from_f32(self, value: SSAValue, type_: Attribute) -> SSAValue:
        return value if type_ == f32 else self.emit(arith.TruncFOp(value, type_))

    def int_to_index(self, value: SSAValue, unsigned: bool = False) -> SSAValue:
        if unsigned:
            value = self.emit(arith.ExtUIOp(value, IntegerType(64)))
        return self.emit(arith.IndexCastOp(value, index))

    def index_to_f32(self, value: SSAValue) -> SSAValue:
        as_int = self.emit(arith.IndexCastOp(value, IntegerType(64)))
        return self.emit(arith.SIToFPOp(as_int, f32))
