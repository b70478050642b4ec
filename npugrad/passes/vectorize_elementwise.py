"""vectorize-elementwise-loops{target=host}: every innermost elementwise `scf.for` (step 1, no
iter_args but f32 reductions, a body of scalar memref.load / memref.store / arith / math ops
whose memory accesses all have the induction variable as their last, unit-stride index) runs L
lanes per step in the
`vector` dialect (L = the target's vector bits / 32: 16 on AVX-512), then the original scalar
loop does the iterations left over.

    scf.for %i = %lb to %ub step %c1 {
      %x = memref.load %a[%r, %i] : memref<?x?xbf16>
      %s = memref.load %scale[%c0] : memref<1xf32>                 // uniform: no %i
      %y = arith.extf %x : bf16 to f32
      %z = arith.mulf %y, %s : f32
      memref.store %z, %b[%r, %i] : memref<?x?xf32> }
becomes
    %n = arith.maxsi (%ub - %lb), 0;  %main = %ub - %n mod 16
    scf.for %i = %lb to %main step %c16 {                          // {train.vectorized}
      %x = vector.load %a[%r, %i] : memref<?x?xbf16>, vector<16xbf16>
      %s = memref.load %scale[%c0] : memref<1xf32>
      %y = arith.extf %x : vector<16xbf16> to vector<16xf32>
      %sv = vector.broadcast %s : f32 to vector<16xf32>
      %z = arith.mulf %y, %sv : vector<16xf32>
      vector.store %z, %b[%r, %i] : memref<?x?xf32>, vector<16xf32> }
    scf.for %i = %main to %ub step %c1 { ...the scalar body... }

Values that do not depend on the induction variable (defined outside the loop, or computed in
it from such values and from loads without it) stay scalar and are broadcast where a vector op
uses them. Each lane computes what one scalar iteration did, with the same ops in the same
order, so results are bit-identical to the scalar loop.

A loop may carry f32 reductions (iter_args), each folding one value per iteration into the
carried one with arith.addf or arith.maximumf (the online softmax's row max and sums), the
partial result used by nothing but the yield: the vector loop carries L partial results from the
op's identity (-0.0, -inf), which are then folded into the loop's initial value lane 0 first,
and the scalar loop goes on from there. The order is fixed by L and the loop's bounds (not by the
thread count): a max is the scalar loop's to the bit; a sum is associated differently (lane l
sums the elements l, l + L, ... in order).

    %s = scf.for %i = %lb to %ub step %c1 iter_args(%a = %init) -> (f32) { ... %a1 = arith.addf %a, %e ... }
becomes
    %p = scf.for %i = %lb to %main step %c16 iter_args(%a = dense<-0.0>) -> (vector<16xf32>) { ... }
    %s0 = arith.addf %init, (vector.extract %p[0]) ... %s15 = arith.addf %s14, (vector.extract %p[15])
    %s = scf.for %i = %main to %ub step %c1 iter_args(%a = %s15) -> (f32) { ... }

On a target whose global memory gives a latency, each vector load from global memory (an
argument of the function, or a view of one; not a buffer the function allocates) is preceded by
a prefetch of the element Target.stream_prefetch_bytes ahead in its row, clamped to the loop's
last element (which the loop reads itself), so each stream is asked for what a core consumes
while a load is in flight:

      %a = arith.addi %i, %ahead : index                         // 272 float32 on this Zen 4 host
      %at = arith.minsi %a, %last : index                        // %last = %ub - 1, hoisted
      memref.prefetch %x[%r, %at], read, locality<3>, data : memref<?x?xf32>
      %x_v = vector.load %x[%r, %i] : ...

EMA-Adam's step on 16M float32 parameters (Zen 4, 2 threads, fresh processes taking turns, eight
each): 11.97 ms median against 12.80 without; BCE's gradient 7.6 against 8.0.

A loop that stores to global memory a memref the function only writes (an output: BCE's dx,
the embedding gradient's out, a row at a time) where its nest (the loop's trips times those of
the loops around it) stores at least Target.stream_store_bytes (one core's share of the largest
cache) writes it past the caches. Through them, every line written is first read from memory
(the write-allocate): BCE's gradient with a weight moves 5 bytes per 4 it needs. The loop is
emitted twice, chosen at run time (or at compile time, for constant bounds too short to stream):

    %streamed = (trips · 4 >= stream_store_bytes) and (y's first element is 4-byte aligned)
    scf.if %streamed {
      scf.for %i = %lb to %line_start step %c1 { ...the scalar body... }   // up to y's next line
      scf.for %i = %line_start to %main step %c16 {
        ... vector.store %z, %y[%i] {alignment = 64 : i64, nontemporal = true} ... } {train.vectorized}
      scf.for %i = %main to %ub step %c1 { ...the scalar body... }
      llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()             // lowering/fills.py
    } else { ...the vector loop and the scalar rest, as above... }

The non-temporal stores (vmovntps) write whole lines without reading them; the fence makes them
visible to every core before any later store (a flag another block waits on): once after the
outermost loop around that calls nothing (one per call, not one per row), else after the loop.
Results are the
same ops on the same elements either way: bit-identical. A loop carrying values (a reduction)
is not streamed. BCE's gradient with a weight, 16M float32 elements, 2 threads of a Zen 5
(fresh processes taking turns, medians of 20 calls): into a preallocated dx 5.00-5.07 ms
against 5.99-6.14; into a dx the call allocates 7.4-8.5 against 7.5-10.3, within the noise (a
fresh page's first touch, the kernel zeroing it, costs more than reading its lines did). The
embedding gradient, 16384 x 4096 float32 into 32000 rows (one block): 27.8-28.8 ms against
32.6-34.0.

A loop is left as it is when anything
else is in it: other ops or nested regions, the induction variable in arithmetic or in another
index position, a store not indexed by it, an index or i1 memref (i1 vectors are bit-packed in
memory, i1 memrefs are not), an op xDSL does not define on vectors (arith.cmpf/cmpi results and
the arith.select condition are scalar i1 only in xDSL 0.74), or a stored memref accessed with
two different index lists (a lane could then read what another lane writes). Distinct memref
operands are assumed not to overlap partially, as in the scalar loop's lowering to LLVM
(exactly the same buffer is fine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import arith, func, memref, scf, vector
from xdsl.dialects.builtin import (
    DenseIntOrFPElementsAttr,
    IndexType,
    IntegerAttr,
    IntegerType,
    MemRefType,
    ModuleOp,
    NameLoc,
    Signedness,
    VectorType,
    bf16,
    f16,
    f32,
    f64,
)
from xdsl.ir import Attribute, Block, BlockArgument, Operation, SSAValue
from xdsl.passes import ModulePass
from xdsl.pattern_rewriter import PatternRewriter, PatternRewriteWalker, RewritePattern, op_type_rewrite_pattern
from xdsl.rewriter import InsertPoint
from xdsl.utils.exceptions import VerifyException

from npugrad.dialect.attributes import VECTORIZED
from npugrad.dialect.upstream import LOOP_ANNOTATION, PrefetchOp
from npugrad.ir import IRBuilder, integer_constant, unit_innermost_stride
from npugrad.ir.builder import labelled_location
from npugrad.lowering.fills import store_fence, streaming_store
from npugrad.passes.vectorize_contractions import line_bytes
from npugrad.targets import get

_MEMORY_ELEMENTS = (f16, bf16, f32, f64) + tuple(IntegerType(w) for w in (8, 16, 32, 64))
_LANE_ELEMENTS = (*_MEMORY_ELEMENTS, IntegerType(1))
index = IndexType()


def _is_constant_one(value: SSAValue) -> bool:
    return integer_constant(value) == 1


def _contiguous(ref: SSAValue) -> bool:
    t = ref.type
    return (
        isinstance(t, MemRefType)
        and t.element_type in _MEMORY_ELEMENTS
        and (not isinstance(t.element_type, IntegerType) or t.element_type.signedness.data == Signedness.SIGNLESS)
        and unit_innermost_stride(t)
    )


def _vector_op(op: Operation, operands: list[SSAValue], lanes: int) -> Operation:
    """`op` on vectors of `lanes` elements."""
    return type(op).create(
        operands=operands,
        result_types=[VectorType(r.type, [lanes]) for r in op.results],
        properties=dict(op.properties),
        attributes=dict(op.attributes),
    )


def _has_vector_form(op: Operation, lanes: int) -> bool:
    """Whether the op is defined on vectors of its (scalar) types. xDSL 0.74 defines
    arith.cmpf/cmpi results and the arith.select condition as scalar i1 only: loops that compare
    lanes stay scalar."""
    types = [v.type for v in (*op.operands, *op.results)]
    if not all(t in _LANE_ELEMENTS for t in types):
        return False
    lanes_in = Block(arg_types=[VectorType(v.type, [lanes]) for v in op.operands])
    probe = _vector_op(op, list(lanes_in.args), lanes)
    try:
        probe.verify()
    except VerifyException:
        return False
    finally:
        probe.drop_all_references()
    return True


_REDUCTIONS = {arith.AddfOp: -0.0, arith.MaximumfOp: float("-inf")}  # op -> its identity


def _reductions(loop: scf.ForOp) -> list[Operation] | None:
    """For each value the loop carries, the op that folds one element into it: arith.addf or
    arith.maximumf of the carried f32 and another value, its result yielded and used nowhere
    else, the carried value used nowhere else. None if any carried value is anything else."""
    body = loop.body.block
    terminator = body.last_op
    assert terminator is not None
    found = []
    for n, carried in enumerate(body.args[1:]):
        uses = list(carried.uses)
        if carried.type != f32 or len(uses) != 1:
            return None
        op = uses[0].operation
        if type(op) not in _REDUCTIONS or op.parent_block() is not body or terminator.operands[n] is not op.results[0]:
            return None
        if len(list(op.results[0].uses)) != 1 or op.operands[0] is op.operands[1]:
            return None
        found.append(op)
    return found


def _varying_values(loop: scf.ForOp, lanes: int) -> set[SSAValue] | None:
    """The values of the loop body that differ from lane to lane, or None if the loop does not
    qualify."""
    if not _is_constant_one(loop.step):
        return None
    reductions = _reductions(loop)
    if reductions is None:
        return None
    body = loop.body.block
    iv = body.args[0]
    *ops, terminator = body.ops
    if len(terminator.operands) != len(reductions):
        return None
    varying: set[SSAValue] = set(body.args[1:])
    accesses: dict[SSAValue, set[tuple[SSAValue, ...]]] = {}
    stored: set[SSAValue] = set()
    for op in ops:
        if op.regions:
            return None
        if isinstance(op, memref.LoadOp | memref.StoreOp):
            *outer, last = op.indices or (None,)
            if any(i is iv or i in varying for i in outer):
                return None
            if last is iv:
                if not _contiguous(op.memref):
                    return None
                if isinstance(op, memref.LoadOp):
                    varying.add(op.res)
            elif isinstance(op, memref.StoreOp) or last in varying:
                return None
            accesses.setdefault(op.memref, set()).add(tuple(op.indices))
            if isinstance(op, memref.StoreOp):
                stored.add(op.memref)
        elif op.dialect_name() in ("arith", "math"):
            if iv in op.operands:
                return None
            if any(v in varying for v in op.operands):
                if not _has_vector_form(op, lanes):
                    return None
                varying.update(op.results)
        else:
            return None
    if not (stored or reductions) or any(len(accesses[ref]) > 1 for ref in stored):
        return None
    if not all(v in varying for op in reductions for v in op.operands):
        return None  # a carried value folding in the same value each iteration: leave it
    return varying


class _Inserter:
    """Inserts at one point, through the rewriter."""

    def __init__(self, rewriter: PatternRewriter, point: InsertPoint):
        self.rewriter = rewriter
        self.point = point

    def insert(self, op: Operation) -> Operation:
        return self.rewriter.insert(op, self.point)


# Views of a memref: a load through one reads the memory of its source.
_VIEWS = (memref.SubviewOp, memref.ReinterpretCastOp, memref.CastOp, memref.CollapseShapeOp, memref.ExpandShapeOp)


def _root(ref: SSAValue) -> SSAValue:
    """The memref `ref` is a view of (itself if none)."""
    while isinstance(ref.owner, _VIEWS):
        ref = ref.owner.operands[0]  # the source, whatever each view names it
    return ref


def _in_global_memory(ref: SSAValue) -> bool:
    """Whether `ref` is (a view of) an argument of the function: global memory, which a loop
    streams from, as opposed to a buffer the function allocates (a tile meant to stay in a cache
    level or in local memory, where a prefetch would only take a load slot)."""
    ref = _root(ref)
    if not isinstance(ref, BlockArgument):
        return False
    parent = ref.owner.parent_op()
    return isinstance(parent, func.FuncOp)


def _element_bytes(t: Attribute) -> int | None:
    width = getattr(t, "bitwidth", None)
    return width // 8 if isinstance(width, int) and width >= 8 else None


# What a function may do with a memref it only writes: store into it, view it, ask its shape
# and address, free it.
_WRITES_ONLY = (memref.StoreOp, vector.StoreOp, vector.MaskedStoreOp, memref.DimOp, memref.ExtractStridedMetaDataOp,
                memref.ExtractAlignedPointerAsIndexOp, memref.DeallocOp)


def _write_only(ref: SSAValue) -> bool:
    """Whether every use of `ref` and of its views stores into it (never reads it, never hands it
    to anything else): the caller then reads it only after the function returns."""
    for use in ref.uses:
        op = use.operation
        if isinstance(op, _VIEWS) and use.index == 0:
            if not all(_write_only(r) for r in op.results):
                return False
        elif isinstance(op, memref.StoreOp):
            if op.value is ref:  # the memref stored as a value, not into
                return False
        elif isinstance(op, vector.StoreOp | vector.MaskedStoreOp):
            continue  # their values are vectors
        elif not isinstance(op, _WRITES_ONLY):
            return False
    return True


def _streamed_store(loop: scf.ForOp, line: int) -> memref.StoreOp | None:
    """The store whose stream the loop may write past the caches: the first to a memref of
    global memory (an argument, or a view of one) that the function only writes (_write_only),
    its other indices defined before the loop, its element a whole fraction of a line. A memref
    the function also reads (in place, or again after this loop) stays in the caches. None in a
    loop carrying values (its vector loop's results would have to leave an scf.if)."""
    if loop.iter_args:
        return None
    body = loop.body.block
    for op in body.ops:
        if not isinstance(op, memref.StoreOp) or not _in_global_memory(op.memref) or not _write_only(_root(op.memref)):
            continue
        width = _element_bytes(op.value.type)
        outer = op.indices[:-1]
        if width is None or line % width or any(_in_body(i, body) for i in outer):
            continue
        return op
    return None


def _in_body(value: SSAValue, body: Block) -> bool:
    owner = value.owner
    return owner is body if isinstance(owner, Block) else owner.parent_block() is body


def vector_location(location: Attribute) -> Attribute:
    """Where an op of the vector main loop is: its scalar op's label with `.vector` (line tables
    then tell the main loop from the scalar one doing the rest, which keeps the label), or the
    scalar op's location where it has no label."""
    if isinstance(location, NameLoc):
        return labelled_location(location.desc.data + ".vector", location)
    return location


class _Vectorizer:
    def __init__(self, loop: scf.ForOp, varying: set[SSAValue], lanes: int, rewriter: PatternRewriter,
                 prefetch: int = 0, streamed: tuple[SSAValue, int] | None = None):
        self.loop = loop
        # (memref, alignment): its vector stores non-temporal, each at an address of that alignment
        self.streamed = streamed
        self.varying = varying
        self.lanes = lanes
        self.rewriter = rewriter
        self.prefetch = prefetch  # bytes ahead of each load from global memory (0: none)
        self.last: SSAValue | None = None  # the loop's last index, hoisted (the prefetches' bound)
        self.distance: dict[int, SSAValue] = {}  # elements ahead -> its constant, hoisted
        self.ahead: dict[tuple[SSAValue, int], SSAValue] = {}  # (index, elements ahead) -> the clamped index
        self.outside = _Inserter(rewriter, InsertPoint.before(loop))  # hoisted: bounds, broadcasts
        self.mapping: dict[SSAValue, SSAValue] = {}
        self.broadcasts: dict[SSAValue, SSAValue] = {}
        self.locations: dict[int, Attribute] = {}  # a scalar op's location (by id) -> its vector op's

    def _located(self, new: Operation, old: Attribute) -> None:
        """`new`, an op of the main loop, at the vector location of `old` (vector_location)."""
        if id(old) not in self.locations:
            self.locations[id(old)] = vector_location(old)
        new.location = self.locations[id(old)]

    def _hoist(self, op: Operation) -> SSAValue:
        op.location = self.loop.location
        return self.outside.insert(op).results[0]

    def _vector_type(self, element: Attribute) -> VectorType:
        return VectorType(element, [self.lanes])

    def _vector(self, value: SSAValue, inside: _Inserter) -> SSAValue:
        """The lanes of `value`: itself vectorised, or a uniform value broadcast once."""
        if value in self.varying:
            return self.mapping[value]
        if value not in self.broadcasts:
            op = vector.BroadcastOp(self.mapping.get(value, value), self._vector_type(value.type))
            if value in self.mapping:  # computed in the loop
                self._located(op, value.owner.location)  # type: ignore[union-attr]
                inside.insert(op)
            else:
                self._hoist(op)
            self.broadcasts[value] = op.results[0]
        return self.broadcasts[value]

    def _main_bound(self) -> SSAValue:
        """ub minus the iterations left over: the trip count (none if ub < lb) mod lanes."""
        lb, ub = self.loop.lb, self.loop.ub
        zero = self._hoist(arith.ConstantOp(IntegerAttr(0, index)))
        trips = self._hoist(arith.MaxSIOp(self._hoist(arith.SubiOp(ub, lb)), zero))
        return self._hoist(arith.SubiOp(ub, self._hoist(arith.RemUIOp(trips, self.step))))

    def _prefetch(self, op: memref.LoadOp, inside: _Inserter) -> None:
        """Ask for the line `prefetch` bytes ahead of what `op` reads, in the same row, no further
        than the loop's last element (what the loop itself reads: always in bounds)."""
        element = _element_bytes(op.res.type)
        if not self.prefetch or element is None:
            return
        if self.last is None:
            one = self._hoist(arith.ConstantOp(IntegerAttr(1, index)))
            self.last = self._hoist(arith.SubiOp(self.loop.ub, one))
        ahead = -(-self.prefetch // element)
        if ahead not in self.distance:
            self.distance[ahead] = self._hoist(arith.ConstantOp(IntegerAttr(ahead, index)))
        *outer, i = self._indices(op)
        if (i, ahead) not in self.ahead:  # one index per distance: loads of the same element size share it
            at = inside.insert(arith.AddiOp(i, self.distance[ahead])).results[0]
            self.ahead[i, ahead] = inside.insert(arith.MinSIOp(at, self.last)).results[0]
            self._located(at.owner, op.location)
            self._located(self.ahead[i, ahead].owner, op.location)
        fetch = inside.insert(PrefetchOp(op.memref, [*outer, self.ahead[i, ahead]], write=False, locality=3))
        self._located(fetch, op.location)

    def _emit_op(self, op: Operation, inside: _Inserter) -> None:
        if isinstance(op, memref.LoadOp) and op.res in self.varying:
            if _in_global_memory(op.memref):
                self._prefetch(op, inside)
            new = vector.LoadOp(op.memref, self._indices(op), self._vector_type(op.res.type))
        elif isinstance(op, memref.StoreOp):
            value = self._vector(op.value, inside)
            if self.streamed is not None and op.memref is self.streamed[0]:
                new = streaming_store(value, op.memref, self._indices(op), self.streamed[1])
            else:
                new = vector.StoreOp(value, op.memref, self._indices(op))
        elif any(r in self.varying for r in op.results):
            new = _vector_op(op, [self._vector(v, inside) for v in op.operands], self.lanes)
        else:  # uniform: the same scalar op
            uniform = op.clone(self.mapping)
            self._located(uniform, op.location)
            inside.insert(uniform)
            return
        self._located(new, op.location)
        inside.insert(new)
        for old, result in zip(op.results, new.results):
            result.name_hint = old.name_hint
            self.mapping[old] = result

    def _indices(self, op: memref.LoadOp | memref.StoreOp) -> list[SSAValue]:
        return [self.mapping.get(i, i) for i in op.indices]

    def emit(self) -> None:
        loop = self.loop
        self.step = self._hoist(arith.ConstantOp(IntegerAttr(self.lanes, index)))
        main_bound = self._main_bound()
        reductions = _reductions(loop) or []
        f32x = self._vector_type(f32)
        identities = [self._hoist(arith.ConstantOp(DenseIntOrFPElementsAttr.from_list(f32x, [_REDUCTIONS[type(op)]])))
                      for op in reductions]
        body = Block(arg_types=[index, *(f32x for _ in reductions)])
        for old, new in zip(loop.body.block.args, body.args):
            new.name_hint = old.name_hint
            self.mapping[old] = new
        main = scf.ForOp(loop.lb, main_bound, self.step, identities, body)
        self._located(main, loop.location)
        VECTORIZED.set(main)
        # What the loop says to LLVM's unrollers (#llvm.loop_annotation) holds for both loops it becomes.
        if (annotation := LOOP_ANNOTATION.get(loop)) is not None:
            LOOP_ANNOTATION.set(main, annotation)
        self.outside.insert(main)
        self.outside = _Inserter(self.rewriter, InsertPoint.before(main))  # broadcasts go before the main loop
        inside = _Inserter(self.rewriter, InsertPoint.at_end(body))
        *ops, terminator = loop.body.block.ops
        for op in ops:
            self._emit_op(op, inside)
        inside.insert(scf.YieldOp(*[self.mapping[v] for v in terminator.operands]))
        # Each carried value: the loop's initial value, then lane 0, 1, ... of the main loop's
        # partial results folded in, in that order; the scalar loop goes on from there.
        after = _Inserter(self.rewriter, InsertPoint.after(main))
        for n, op in enumerate(reductions):
            folded = loop.iter_args[n]
            for lane in range(self.lanes):
                part = after.insert(vector.ExtractOp(main.results[n], [lane], f32)).results[0]
                folded = after.insert(type(op)(folded, part)).results[0]
                folded.owner.location = op.location  # type: ignore[union-attr]
            loop.operands[3 + n] = folded
        loop.operands[0] = main_bound  # the scalar loop does the rest
        self.rewriter.notify_op_modified(loop)


def _nest(loop: scf.ForOp) -> list[scf.ForOp]:
    """The scf.for loops around `loop` in its function, innermost first."""
    around = []
    op = loop.parent_op()
    while op is not None and not isinstance(op, func.FuncOp):
        if isinstance(op, scf.ForOp):
            around.append(op)
        op = op.parent_op()
    return around


def _fenced_after(loop: scf.ForOp) -> Operation | None:
    """The outermost loop around `loop` after which one store fence serves all its iterations:
    none of the loops up to it calls a function (the runtime's flag and barrier services, which
    another block's reads of what was stored must follow). None where the innermost one calls."""
    found = None
    for around in _nest(loop):
        if any(isinstance(o, func.CallOp) for o in around.walk()):
            break
        found = around
    return found


def _trips(e: IRBuilder, loop: scf.ForOp) -> SSAValue:
    """max(ub − lb, 0) ceil-divided by the step: the loop's iterations."""
    span = e.emit(arith.MaxSIOp(e.emit(arith.SubiOp(loop.ub, loop.lb)), e.idx(0)))
    return span if _is_constant_one(loop.step) else e.emit(arith.CeilDivUIOp(span, loop.step))


@dataclass(frozen=True)
class VectorizeLoop(RewritePattern):
    lanes: int
    prefetch: int = 0
    stream_bytes: int = 0  # Target.stream_store_bytes (0: never past the caches)
    line: int = 64  # bytes of a cache line
    fenced: set = field(default_factory=set)  # loops a store fence follows already

    @op_type_rewrite_pattern
    def match_and_rewrite(self, loop: scf.ForOp, rewriter: PatternRewriter) -> None:
        if VECTORIZED.on(loop):
            return
        if (varying := _varying_values(loop, self.lanes)) is None:
            return
        store = _streamed_store(loop, self.line) if self.stream_bytes else None
        width = 0 if store is None else _element_bytes(store.value.type) or 0
        if store is not None:
            known = [(integer_constant(f.lb), integer_constant(f.ub), integer_constant(f.step)) for f in [loop, *_nest(loop)]]
            if all(None not in k for k in known):
                total = math.prod(-(-max(ub - lb, 0) // step) for lb, ub, step in known)  # type: ignore[operator]
                if total * width < self.stream_bytes:
                    store = None  # too few to stream, known here
        if store is None:
            _Vectorizer(loop, varying, self.lanes, rewriter, self.prefetch).emit()
            return
        self._streamed(loop, store, width, rewriter)

    def _streamed(self, loop: scf.ForOp, store: memref.StoreOp, width: int, rewriter: PatternRewriter) -> None:
        """The loop twice, chosen at run time: where it stores at least stream_bytes and the
        streamed memref's elements can fall on line boundaries, scalar iterations up to the first
        element that starts a line, the vector loop with that memref's stores non-temporal (each
        vector aligned), the scalar rest and a store fence (sfence: the non-temporal stores are
        seen by every core before any store after them, such as a flag another block waits on);
        otherwise the loop as without (emit)."""
        e = IRBuilder(rewriter, loop)
        ref = store.memref
        lb = loop.lb
        trips = _trips(e, loop)
        # What the nest stores through this store: the loop's trips times those of the loops
        # around it (a row at a time, as the embedding gradient writes `out`).
        stored = e.emit(arith.MuliOp(trips, e.idx(width)))
        for around in _nest(loop):
            stored = e.emit(arith.MuliOp(stored, _trips(e, around)))
        stored.name_hint = "stored_bytes"
        # From the element the first iteration stores to the next line.
        first, gap = e.bytes_to_line(ref, width, self.line, [*store.indices[:-1], lb])
        first.name_hint, gap.name_hint = "first_byte", "to_line"
        large = e.emit(arith.CmpiOp(stored, e.idx(self.stream_bytes), "uge"))
        whole = e.emit(arith.CmpiOp(e.emit(arith.RemUIOp(gap, e.idx(width))), e.idx(0), "eq"))
        streamed = e.emit(arith.AndIOp(large, whole))
        streamed.name_hint = "streamed"
        alignment = math.gcd(self.line, self.lanes * width)

        def past_the_caches() -> None:
            head = e.emit(arith.AddiOp(lb, e.emit(arith.MinSIOp(trips, e.emit(arith.DivUIOp(gap, e.idx(width)))))))
            head.name_hint = "line_start"
            peel, body = loop.clone(), loop.clone()
            peel.operands[1] = head
            body.operands[0] = head
            e.emit(peel)
            e.emit(body)
            varying = _varying_values(body, self.lanes)
            assert varying is not None  # the same loop
            _Vectorizer(body, varying, self.lanes, rewriter, self.prefetch, (ref, alignment)).emit()
            if outer is None:
                store_fence(e)

        def through_the_caches() -> None:
            plain = loop.clone()
            e.emit(plain)
            varying = _varying_values(plain, self.lanes)
            assert varying is not None
            _Vectorizer(plain, varying, self.lanes, rewriter, self.prefetch).emit()

        # One fence after the loops around this one, where none of them calls the runtime.
        outer = _fenced_after(loop)
        e.if_else(streamed, past_the_caches, through_the_caches)
        e.erase(loop)
        if outer is not None and outer not in self.fenced:
            self.fenced.add(outer)
            after = outer.next_op
            assert after is not None  # a loop is never its block's terminator
            store_fence(e.at(after))


@dataclass(frozen=True)
class VectorizeElementwiseLoopsPass(ModulePass):
    name = "vectorize-elementwise-loops"

    target: str = "host"
    streaming: bool = True  # false: no loop writes past the caches, however much it stores

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get(self.target)
        lanes = target.vector_bits // 32
        if lanes < 2:
            return
        stream_bytes = target.stream_store_bytes if self.streaming else 0
        pattern = VectorizeLoop(lanes, target.stream_prefetch_bytes, stream_bytes, line_bytes(target))
        PatternRewriteWalker(pattern, apply_recursively=False).rewrite_module(op)
