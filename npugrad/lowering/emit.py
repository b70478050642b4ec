"""An IR builder for the loop-level lowerings: constants hoisted above the op, loop nests as
context managers, loads that widen to float32 and stores that round once to the stored type.

    e = Emitter.before(op)
    n = e.dim(x, 0)
    with e.loop(n) as i:
        v = e.load_f32(x, [i])
        e.store_f32(e.mul(v, v), y, [i])
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from math import prod

from xdsl.builder import Builder
from xdsl.dialects import arith, func, math, memref, scf, vector
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    AffineMapAttr,
    ArrayAttr,
    BoolAttr,
    DenseIntOrFPElementsAttr,
    FloatAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NoneAttr,
    Signedness,
    StridedLayoutAttr,
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

index = IndexType()
LOOP_DIMS_ATTR = "grad.loop_dims"  # on a contraction: the names of its three loop dimensions
LINE_BYTES = 64  # a cache line
STREAM_BYTES = 8 << 20  # zero fills at least this large bypass the caches (Emitter.zeros_flat)


def unit_innermost_stride(t: MemRefType) -> bool:
    """The innermost dimension is contiguous (identity layout, or a strided one whose last stride is 1)."""
    layout = t.layout
    return isinstance(layout, NoneAttr) or (isinstance(layout, StridedLayoutAttr) and layout.get_strides()[-1] == 1)


def defined_functions(module: ModuleOp) -> list[func.FuncOp]:
    """The functions of `module` that have a body."""
    return [op for op in module.walk() if isinstance(op, func.FuncOp) and not op.is_declaration]


class Emitter:
    def __init__(self, anchor: Operation):
        """Emit before `anchor`. Constants, and sizes of memrefs defined outside the emitted
        code, are hoisted above everything emitted, so loop bodies stay readable."""
        self.anchor = anchor
        self.b = Builder(InsertPoint.before(anchor))
        self._emitted: set[Operation] = set()
        self._first: Operation | None = None  # first op emitted at the anchor's level
        self._last_hoisted: Operation | None = None
        self._consts: dict[tuple[object, str], SSAValue] = {}
        self._static: dict[SSAValue, int] = {}  # index constants, folded into subview shapes
        self._dims: dict[tuple[SSAValue, int], SSAValue] = {}

    @classmethod
    def before(cls, op: Operation) -> Emitter:
        return cls(op)

    def _locate(self, op: Operation) -> None:
        # What a lowering emits stands for the op it lowers: errors found later point there.
        for inner in op.walk():
            if isinstance(inner.location, UnknownLoc):
                inner.location = self.anchor.location

    def add(self, op: Operation) -> SSAValue:
        self._locate(op)
        self.b.insert(op)
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
        Builder(point).insert(op)
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

    def dim(self, ref: SSAValue, axis: int) -> SSAValue:
        t = ref.type
        assert isinstance(t, MemRefType)
        size = t.get_shape()[axis]
        if size != DYNAMIC_INDEX:
            return self.idx(size)
        if not self._defined_outside(ref):
            return self.add(memref.DimOp(ref, self.idx(axis)))
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
            n = d if i == 0 else self.muli(n, d)
        return n

    def numel(self, ref: SSAValue) -> SSAValue:
        return self.product(self.dims(ref))

    # -- control flow -----------------------------------------------------------------------
    @contextmanager
    def loop(
        self, ub: SSAValue, lb: SSAValue | None = None, step: SSAValue | None = None
    ) -> Iterator[SSAValue]:
        """`scf.for %i = lb to ub step step`; the body is what is emitted inside the block."""
        body = Block(arg_types=[index])
        loop = scf.ForOp(lb or self.idx(0), ub, step or self.idx(1), [], body)
        self.add(loop)
        outer = self.b.insertion_point
        self.b.insertion_point = InsertPoint.at_end(body)
        try:
            yield body.args[0]
            self.add(scf.YieldOp())
        finally:
            self.b.insertion_point = outer

    @contextmanager
    def loop_nest(self, ubs: Sequence[SSAValue]) -> Iterator[list[SSAValue]]:
        """A perfect nest over [0, ub) for each bound; yields the induction variables."""
        if not ubs:
            yield []
            return
        with self.loop(ubs[0]) as i, self.loop_nest(ubs[1:]) as rest:
            yield [i, *rest]

    @contextmanager
    def if_(self, cond: SSAValue) -> Iterator[None]:
        then = Block()
        op = scf.IfOp(cond, [], [then])
        self.add(op)
        outer = self.b.insertion_point
        self.b.insertion_point = InsertPoint.at_end(then)
        try:
            yield
            self.add(scf.YieldOp())
        finally:
            self.b.insertion_point = outer

    def if_else(self, cond: SSAValue, then: Callable[[], object], otherwise: Callable[[], object]) -> None:
        """`scf.if cond { then() } else { otherwise() }`, each emitting its branch's code."""
        blocks = [Block(), Block()]
        self.add(scf.IfOp(cond, [], Region(blocks[0]), Region(blocks[1])))
        outer = self.b.insertion_point
        try:
            for emit, block in zip((then, otherwise), blocks):
                self.b.insertion_point = InsertPoint.at_end(block)
                emit()
                self.add(scf.YieldOp())
        finally:
            self.b.insertion_point = outer

    # -- memory -------------------------------------------------------------------------------
    def load(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        value = self.add(memref.LoadOp.get(ref, indices))
        t = value.type
        if isinstance(t, IntegerType) and t.signedness.data != Signedness.SIGNLESS:
            # arith works on signless integers; the bits are the same.
            value = self.add(UnrealizedConversionCastOp.get([value], [IntegerType(t.width.data)]))
        return value

    def load_f32(self, ref: SSAValue, indices: Sequence[SSAValue]) -> SSAValue:
        return self.to_f32(self.load(ref, indices))

    def store(self, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]) -> None:
        self.add(memref.StoreOp.get(value, ref, indices))

    def store_f32(self, value: SSAValue, ref: SSAValue, indices: Sequence[SSAValue]) -> None:
        """Store a float32 value, rounded once (to nearest even) to the element type of `ref`."""
        self.store(self.from_f32(value, ref.type.element_type), ref, indices)  # type: ignore[attr-defined]

    def subview(self, ref: SSAValue, offsets: Sequence[SSAValue | int], sizes: Sequence[SSAValue | int]) -> SSAValue:
        """A unit-stride window of `ref`."""
        strides = [1] * len(offsets)
        offsets = [self._static.get(o, o) if isinstance(o, SSAValue) else o for o in offsets]
        sizes = [self._static.get(d, d) if isinstance(d, SSAValue) else d for d in sizes]
        t = memref.SubviewOp.infer_result_type(ref.type, offsets, sizes, strides)  # type: ignore[arg-type]
        return self.add(memref.SubviewOp.get(ref, offsets, sizes, strides, t))

    def alloc(self, shape: Sequence[SSAValue | int], element: Attribute) -> SSAValue:
        """A heap buffer (freed with `dealloc`): tiles are too large for the stack."""
        shape = [self._static.get(d, d) if isinstance(d, SSAValue) else d for d in shape]
        static = [DYNAMIC_INDEX if isinstance(d, SSAValue) else d for d in shape]
        dynamic = [d for d in shape if isinstance(d, SSAValue)]
        return self.add(memref.AllocOp(dynamic, [], MemRefType(element, static), alignment=IntegerAttr(64, 64)))

    def dealloc(self, ref: SSAValue) -> None:
        self.add(memref.DeallocOp.get(ref))

    def fill(self, value: float, ref: SSAValue) -> Operation:
        op = FillOp([self.const(value, ref.type.element_type)], [ref], res=[])  # type: ignore[attr-defined]
        self.add(op)
        return op

    def contract(self, lhs: SSAValue, rhs: SSAValue, acc: SSAValue, maps, doc: str, reduction_dim: int = 2,
                 dims: Sequence[str] = ()) -> None:
        """acc[...] += lhs[...]·rhs[...] as a `linalg.generic` over three dims, `reduction_dim` the
        reduced one; `maps` gives the (d0, d1, d2) -> indices maps of lhs, rhs and acc. Inputs are
        widened to the accumulator's type, so bf16/f16 tiles accumulate in float32. `dims` names the
        three loop dimensions (`grad.loop_dims`) for passes that tile the contraction."""
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
            [
                IteratorTypeAttr.reduction() if d == reduction_dim else IteratorTypeAttr.parallel()
                for d in range(3)
            ],
            doc=StringAttr(doc),
        )
        if dims:
            generic.attributes[LOOP_DIMS_ATTR] = ArrayAttr([StringAttr(d) for d in dims])
        self.add(generic)

    def minsi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.MinSIOp(a, b))

    def subi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SubiOp(a, b))

    def zeros(self, ref: SSAValue) -> None:
        """ref = 0. Rows that follow each other in memory are zeroed as one flat range (see
        `zeros_flat`); a window whose rows do not (known only at run time for a strided memref)
        row by row."""
        t = ref.type
        assert isinstance(t, MemRefType)
        rank = t.get_num_dims()
        if rank == 1 and unit_innermost_stride(t):
            self.zeros_flat(ref, self.dim(ref, 0))
            return
        if rank >= 2 and isinstance(t.layout, NoneAttr):
            flat = self.collapse(ref)
            self.zeros_flat(flat, self.dim(flat, 0))
            return
        if rank < 2 or not unit_innermost_stride(t):
            self._zeros_nest(ref)
            return
        meta = memref.ExtractStridedMetaDataOp(ref)
        self.add(meta)
        sizes, strides = list(meta.sizes), list(meta.strides)
        dense = self.cmpi(strides[-2], sizes[-1], "eq")
        for a in range(rank - 3, -1, -1):
            dense = self.andi(dense, self.cmpi(strides[a], self.muli(strides[a + 1], sizes[a + 1]), "eq"))
        flat_t = MemRefType(t.element_type, [DYNAMIC_INDEX], StridedLayoutAttr([1], None), t.memory_space)

        def as_one_range() -> None:
            n = self.product(sizes)
            view = memref.ReinterpretCastOp.from_dynamic(meta.base_buffer, [meta.offset], [n], [1], flat_t)
            self.zeros_flat(self.add(view), n)

        self.if_else(dense, as_one_range, lambda: self._zeros_nest(ref))

    def _zeros_nest(self, ref: SSAValue) -> None:
        zero = self.const(0.0, ref.type.element_type)  # type: ignore[attr-defined]
        with self.loop_nest(self.dims(ref)) as ivs:
            self.store(zero, ref, ivs)

    def zeros_flat(self, ref: SSAValue, n: SSAValue) -> None:
        """The n elements of a unit-stride 1-D memref = 0. Up to STREAM_BYTES a plain loop (LLVM
        makes it a memset: the lines stay in cache for whoever reads them next); above, lines
        that no cache could keep anyway are written with non-temporal stores, which skip
        reading each line before overwriting it (half the memory traffic): scalar stores up to
        the first 64-byte boundary, aligned 64-byte non-temporal vector stores, scalar tail."""
        t = ref.type
        assert isinstance(t, MemRefType)
        zero = self.const(0.0, t.element_type)
        width = t.element_type.bitwidth // 8  # type: ignore[attr-defined]
        lanes = LINE_BYTES // width

        def plain() -> None:
            with self.loop(n) as i:
                self.store(zero, ref, [i])

        if LINE_BYTES % width:
            plain()
            return

        def stream() -> None:
            meta = memref.ExtractStridedMetaDataOp(ref)
            self.add(meta)
            base = self.add(memref.ExtractAlignedPointerAsIndexOp.build(operands=[ref], result_types=[index]))
            first_byte = self.addi(base, self.muli(meta.offset, self.idx(width)))
            misaligned = self.add(arith.RemUIOp(first_byte, self.idx(LINE_BYTES)))
            gap = self.add(arith.RemUIOp(self.subi(self.idx(LINE_BYTES), misaligned), self.idx(LINE_BYTES)))
            head = self.minsi(n, self.add(arith.DivUIOp(gap, self.idx(width))))
            lines = self.add(arith.DivUIOp(self.subi(n, head), self.idx(lanes)))
            body_end = self.addi(head, self.muli(lines, self.idx(lanes)))
            with self.loop(head) as i:
                self.store(zero, ref, [i])
            zeros = self.const(0.0, VectorType(t.element_type, [lanes]))
            with self.loop(body_end, lb=head, step=self.idx(lanes)) as i:
                store = vector.StoreOp(zeros, ref, [i], nontemporal=BoolAttr.from_bool(True))
                store.attributes["alignment"] = IntegerAttr(LINE_BYTES, 64)  # upstream's vector.store attribute
                self.add(store)
            with self.loop(n, lb=body_end) as i:
                self.store(zero, ref, [i])

        known = self._static.get(n)
        if known is None:
            self.if_else(self.cmpi(n, self.idx(STREAM_BYTES // width), "uge"), stream, plain)
        else:
            (stream if known * width >= STREAM_BYTES else plain)()

    def collapse(self, ref: SSAValue) -> SSAValue:
        """An identity-layout memref as one dimension."""
        t = ref.type
        assert isinstance(t, MemRefType)
        shape = t.get_shape()
        n = DYNAMIC_INDEX if DYNAMIC_INDEX in shape else prod(shape)
        return self.add(
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
            return self.add(arith.ExtFOp(value, f32))
        raise TypeError(f"not a float: {t}")

    def from_f32(self, value: SSAValue, type_: Attribute) -> SSAValue:
        return value if type_ == f32 else self.add(arith.TruncFOp(value, type_))

    def int_to_index(self, value: SSAValue, unsigned: bool = False) -> SSAValue:
        if unsigned:
            value = self.add(arith.ExtUIOp(value, IntegerType(64)))
        return self.add(arith.IndexCastOp(value, index))

    def index_to_f32(self, value: SSAValue) -> SSAValue:
        as_int = self.add(arith.IndexCastOp(value, IntegerType(64)))
        return self.add(arith.SIToFPOp(as_int, f32))

    # -- arithmetic ---------------------------------------------------------------------------
    def addf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.AddfOp(a, b))

    def subf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SubfOp(a, b))

    def mulf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.MulfOp(a, b))

    def divf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.DivfOp(a, b))

    def maxf(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.MaximumfOp(a, b))

    def exp(self, a: SSAValue) -> SSAValue:
        return self.add(math.ExpOp(a))

    def sqrt(self, a: SSAValue) -> SSAValue:
        return self.add(math.SqrtOp(a))

    def addi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.AddiOp(a, b))

    def muli(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.MuliOp(a, b))

    def cmpi(self, a: SSAValue, b: SSAValue, predicate: str) -> SSAValue:
        return self.add(arith.CmpiOp(a, b, predicate))

    def andi(self, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.AndIOp(a, b))

    def select(self, cond: SSAValue, a: SSAValue, b: SSAValue) -> SSAValue:
        return self.add(arith.SelectOp(cond, a, b))
