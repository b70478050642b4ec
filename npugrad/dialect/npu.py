"""The `npu` dialect: where tiles live and how they move on an NPU-like memory hierarchy.

    %bid = npu.block_idx                                  // this core's block
    %n = npu.block_dim                                    // how many blocks run
    %ub = npu.alloc_local {double_buffer} : memref<64x128xf32, #npu.mem<ub>>
    npu.copy %x_tile, %ub : memref<64x128xf32, strided<[?, 1], offset: ?>>, memref<64x128xf32, #npu.mem<ub>>
    npu.copy %acc, %y_tile : memref<64x128xf32, #npu.mem<l0c>>, memref<64x128xbf16, strided<[?, 1], offset: ?>>
                                                          // f32 rounded to bf16 on the way out
    npu.copy %acc, %part {accumulate} : memref<64x128xf32, #npu.mem<l0c>>, memref<64x128xf32>
                                                          // %part += %acc (an atomic add)
    %ws = npu.alloc_shared(%n) : memref<?x256x64xf32>     // one workspace for all blocks of a launch
    npu.barrier                                           // every block gets here, then all go on
    npu.set_flag %flags[%i], %step : memref<?xi64>        // this block is done up to %step ...
    npu.wait_flag %flags[%j], %step : memref<?xi64>       // ... another waits until it is

A memref in `#npu.mem<level>` lives in that level of the target (its capacity is checked by
`check-capacity`); a memref without a memory space is in global memory. `#npu.role<vector>` names
a kind of tile (see a target's [roles]); on a heap tile buffer (`npu.promote`) it lets the tiling
move the buffer into the level the target gives that kind of tile.
"""

from __future__ import annotations

from enum import auto

from xdsl.dialects import func, scf
from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    IndexType,
    MemRefType,
    NoneAttr,
    StringAttr,
    UnitAttr,
    bf16,
    f16,
    f32,
    i64,
)
from xdsl.dialects.utils import EnumAttribute
from xdsl.ir import Dialect, ParametrizedAttribute
from xdsl.irdl import (
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
    opt_prop_def,
    result_def,
    traits_def,
    var_operand_def,
)
from xdsl.parser import AttrParser
from xdsl.printer import Printer
from xdsl.traits import EffectInstance, MemoryAllocEffect, MemoryEffect, MemoryEffectKind, Pure
from xdsl.utils.exceptions import VerifyException
from xdsl.utils.str_enum import StrEnum

from npugrad.dialect.attributes import Discardable, InAngleBrackets


@irdl_attr_definition
class MemorySpaceAttr(ParametrizedAttribute):
    """`#npu.mem<ub>`: the memory level of the target a buffer lives in."""

    name = "npu.mem"
    level: StringAttr

    def print_parameters(self, printer: Printer) -> None:
        with printer.in_angle_brackets():
            printer.print_string(self.level.data)

    @classmethod
    def parse_parameters(cls, parser: AttrParser):
        with parser.in_angle_brackets():
            return [StringAttr(parser.parse_identifier(" (a memory level name)"))]


class TileRole(StrEnum):
    """The kinds of tile a target places in its levels (its [roles] table)."""

    VECTOR = auto()  # operands and results of elementwise work
    STAGE = auto()  # matrix tiles fetched from global memory
    MATRIX_A = auto()  # the left operand of a matrix-unit contraction
    MATRIX_B = auto()  # its right operand
    ACCUMULATOR = auto()  # its float32 result


@irdl_attr_definition
class TileRoleAttr(InAngleBrackets, EnumAttribute[TileRole]):
    """`#npu.role<vector>`."""

    name = "npu.role"


BLOCKS = Discardable("npu.blocks", UnitAttr,
                     "on a function: it runs once per block, block_idx and block_dim its last two arguments",
                     after_lowering=True)
PROMOTE = Discardable("npu.promote", TileRoleAttr,
                      "on a heap tile buffer: a tiling may move it to the level holding this kind of tile")
SYNCHRONIZED = Discardable("npu.synchronized", UnitAttr,
                           "on a function: its blocks meet at barriers, wait for each other's flags or share workspaces "
                           "(npu.barrier, npu.wait_flag, npu.alloc_shared): the runtime runs all its blocks at once, "
                           "one such launch at a time",
                           after_lowering=True)
NPU_DISCARDABLE: tuple[Discardable, ...] = (BLOCKS, PROMOTE, SYNCHRONIZED)


def level_of(t) -> str | None:
    """The level a memref lives in, or None for global memory."""
    space = t.memory_space if isinstance(t, MemRefType) else None
    return space.level.data if isinstance(space, MemorySpaceAttr) else None


def local_type(element, shape, level: str) -> MemRefType:
    return MemRefType(element, shape, memory_space=MemorySpaceAttr(StringAttr(level)))


@irdl_op_definition
class AllocLocalOp(IRDLOperation):
    """A buffer in a core's local memory; `double_buffer`: two copies, so that the transfer of
    the next tile overlaps work on this one (and the buffer costs twice its size)."""

    name = "npu.alloc_local"
    result = result_def(MemRefType)
    double_buffer = opt_prop_def(UnitAttr)
    traits = traits_def(MemoryAllocEffect())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "attr-dict `:` type($result)"

    def __init__(self, type_: MemRefType, double_buffer: bool = False):
        super().__init__(result_types=[type_], properties={"double_buffer": UnitAttr() if double_buffer else None})

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, MemRefType)
        if not isinstance(t.memory_space, MemorySpaceAttr):
            raise VerifyException(f"'{self.name}' op result must be in a local memory level (#npu.mem<level>), got {t}")
        if any(d == DYNAMIC_INDEX for d in t.get_shape()):
            raise VerifyException(f"'{self.name}' op result must have a static shape (a local buffer has a fixed size), got {t}")
        if not isinstance(t.layout, NoneAttr):
            raise VerifyException(f"'{self.name}' op result must have the identity layout (a local buffer is contiguous), got {t}")

    def size_bytes(self) -> int:
        t = self.result.type
        assert isinstance(t, MemRefType)
        return static_bytes(t)


def element_bytes(t) -> int:
    width = getattr(t, "bitwidth", None) or getattr(getattr(t, "width", None), "data", None)
    if width is None:
        width = 64  # index
    return max(1, width // 8)


def static_bytes(t: MemRefType) -> int:
    """The bytes of a memref of static shape."""
    n = element_bytes(t.element_type)
    for d in t.get_shape():
        n *= d
    return n


class _CopyEffects(MemoryEffect):
    """A copy reads its source and writes its target; an accumulating copy reads its target too."""

    @classmethod
    def get_effects(cls, op: IRDLOperation) -> set[EffectInstance]:
        effects = {EffectInstance(MemoryEffectKind.READ, op.operands[0]), EffectInstance(MemoryEffectKind.WRITE, op.operands[1])}
        if isinstance(op, CopyOp) and op.accumulate is not None:
            effects.add(EffectInstance(MemoryEffectKind.READ, op.operands[1]))
        return effects


# The conversions a copy may make on the way (an Ascend A2's FixPipe, out of the cube unit's
# accumulator): float32 rounded to nearest even into a 16-bit float, as arith.truncf does.
COPY_CONVERSIONS = ((f32, bf16), (f32, f16))


@irdl_op_definition
class CopyOp(IRDLOperation):
    """A DMA transfer between memory levels, of equal shapes.

    The element types are equal, or the copy converts: float32 to bf16 or f16, each element
    rounded to nearest even (arith.truncf), as an Ascend A2's FixPipe does on the way out of
    the cube unit's accumulator (L0C).

    `transpose`: a 2-D copy whose target is the source transposed (the layout a matrix unit's
    operand needs, made by the transfer, as Ascend's loads into L0A/L0B do), so
    target[j, i] = source[i, j].

    `accumulate`: the copy adds into its target, target[i] += source[i] (in float32 only, without
    a conversion): A2's atomic-add copy out, summing the partial results of a split reduction in
    global memory. With `transpose`, target[j, i] += source[i, j]."""

    name = "npu.copy"
    source = operand_def(MemRefType)
    target = operand_def(MemRefType)
    transpose = opt_prop_def(UnitAttr)
    accumulate = opt_prop_def(UnitAttr)
    traits = traits_def(_CopyEffects())
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = "$source `,` $target attr-dict `:` type($source) `,` type($target)"

    def __init__(self, source, target, transpose: bool = False, *, accumulate: bool = False):
        super().__init__(
            operands=[source, target],
            properties={"transpose": UnitAttr() if transpose else None, "accumulate": UnitAttr() if accumulate else None},
        )

    def converts(self) -> bool:
        """Whether the copy rounds its elements into a narrower type (its types differ)."""
        return self.source.type.element_type != self.target.type.element_type  # type: ignore[attr-defined]

    def verify_(self) -> None:
        s, t = self.source.type, self.target.type
        assert isinstance(s, MemRefType) and isinstance(t, MemRefType)
        if s.element_type != t.element_type and (s.element_type, t.element_type) not in COPY_CONVERSIONS:
            raise VerifyException(
                f"'{self.name}' op source and target must have the same element type, or convert f32 into bf16 or f16 "
                f"(rounding), got {s.element_type} and {t.element_type}"
            )
        if self.accumulate is not None:
            if s.element_type != t.element_type:
                raise VerifyException(
                    f"'{self.name}' op with accumulate cannot convert: source and target must both be f32, "
                    f"got {s.element_type} and {t.element_type}"
                )
            if s.element_type != f32:
                raise VerifyException(
                    f"'{self.name}' op with accumulate needs f32 elements (an atomic add in float32), "
                    f"got {s.element_type} and {t.element_type}"
                )
        target_shape = t.get_shape()
        if self.transpose is not None:
            if s.get_num_dims() != 2 or t.get_num_dims() != 2:
                raise VerifyException(f"'{self.name}' op with transpose needs a source and a target of rank 2, got {s} and {t}")
            target_shape = target_shape[::-1]
        if s.get_num_dims() != t.get_num_dims() or any(
            a != b and DYNAMIC_INDEX not in (a, b) for a, b in zip(s.get_shape(), target_shape)
        ):
            what = "the target's shape must be the source's transposed" if self.transpose is not None else (
                "source and target must have the same shape")
            raise VerifyException(f"'{self.name}' op {what}, got {s} and {t}")

    def target_shape_as_source(self) -> tuple[int, ...]:
        """The target's sizes in the source's order of dimensions."""
        shape = tuple(self.target.type.get_shape())  # type: ignore[attr-defined]
        return shape[::-1] if self.transpose is not None else shape

    def bytes(self) -> int | None:
        """Bytes moved, when the shape is static: the elements times the *target's* element size,
        what the transfer writes (a converting copy reads 4 bytes and writes 2 per element; for
        any other copy both sizes are equal). An accumulating copy counts the same: A2 makes the
        add where the target is (an atomic add), the target does not travel to the core and back."""
        t = self.target.type
        assert isinstance(t, MemRefType)
        n = 1
        for a, b in zip(self.source.type.get_shape(), self.target_shape_as_source()):  # type: ignore[attr-defined]
            d = a if a != DYNAMIC_INDEX else b
            if d == DYNAMIC_INDEX:
                return None
            n *= d
        return n * element_bytes(t.element_type)


@irdl_op_definition
class BlockIdxOp(IRDLOperation):
    """The index of the block (core) running this code, in [0, npu.block_dim)."""

    name = "npu.block_idx"
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__(result_types=[IndexType()])


@irdl_op_definition
class BlockDimOp(IRDLOperation):
    """The number of blocks the kernel is launched with."""

    name = "npu.block_dim"
    result = result_def(IndexType)
    traits = traits_def(Pure())
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__(result_types=[IndexType()])


def spread_over_blocks(op: func.FuncOp) -> bool:
    """Whether `op` (a function) holds npu.block_idx: its work is already split between the blocks
    (tile-for-target's tiles, distribute-over-cores' wavefront), so no other pass splits it again."""
    return any(isinstance(o, BlockIdxOp) for o in op.walk())


def _depends_on_block(value, seen: set | None = None) -> bool:
    """Whether `value` is computed from npu.block_idx (a use-def walk within the function)."""
    seen = set() if seen is None else seen
    owner = value.owner
    if not hasattr(owner, "operands") or id(owner) in seen:
        return False
    seen.add(id(owner))
    if isinstance(owner, BlockIdxOp):
        return True
    return any(_depends_on_block(v, seen) for v in owner.operands)


@irdl_op_definition
class BarrierOp(IRDLOperation):
    """Every block of the launch reaches this point before any goes on (Ascend C's SyncAll): what
    the blocks wrote before it, all of them can read after it. Every block must pass it equally
    often, so it may be nested in loops only (no scf.if), whose bounds do not depend on
    npu.block_idx."""

    name = "npu.barrier"
    assembly_format = "attr-dict"

    def __init__(self):
        super().__init__()

    def verify_(self) -> None:
        parent = self.parent_op()
        while parent is not None and not isinstance(parent, func.FuncOp):
            if not isinstance(parent, scf.ForOp):
                raise VerifyException(
                    f"'{self.name}' op must be reached by every block equally often: it may be nested in "
                    f"scf.for loops only, not in '{parent.name}'"
                )
            if any(_depends_on_block(v) for v in (parent.lb, parent.ub, parent.step)):
                raise VerifyException(
                    f"'{self.name}' op is in a loop whose bounds depend on npu.block_idx: blocks would pass it "
                    "a different number of times"
                )
            parent = parent.parent_op()


@irdl_op_definition
class AllocSharedOp(IRDLOperation):
    """A buffer in global memory that every block of one launch shares (a workspace: what one
    block writes, another reads after an npu.barrier or an npu.wait_flag). Zero-filled when the
    launch first asks for it (npu.set_flag's counters start at 0); it lives until the launch ends.
    At a function's top level, or under scf.if whose condition is the same in every block (e.g.
    only launches of several blocks ask for one: one block alone keeps its flags on its stack). One index operand per dynamic dimension."""

    name = "npu.alloc_shared"
    sizes = var_operand_def(IndexType)
    result = result_def(MemRefType)
    traits = traits_def(MemoryAllocEffect())
    assembly_format = "`(` $sizes `)` attr-dict `:` type($result)"

    def __init__(self, type_: MemRefType, sizes=()):
        super().__init__(operands=[list(sizes)], result_types=[type_])

    def verify_(self) -> None:
        t = self.result.type
        assert isinstance(t, MemRefType)
        parent = self.parent_op()
        while isinstance(parent, scf.IfOp):  # every block takes the same branch, or none asks
            if _depends_on_block(parent.cond):
                raise VerifyException(
                    f"'{self.name}' op is under an scf.if whose condition depends on npu.block_idx: blocks that "
                    "skip it would not get the launch's buffer"
                )
            parent = parent.parent_op()
        if not isinstance(parent, func.FuncOp):
            raise VerifyException(
                f"'{self.name}' op must be at the top level of a function, or under scf.if only (one buffer per launch)"
            )
        if not isinstance(t.memory_space, NoneAttr):
            raise VerifyException(f"'{self.name}' op result must be in global memory (no memory space), got {t}")
        if not isinstance(t.layout, NoneAttr):
            raise VerifyException(f"'{self.name}' op result must have the identity layout, got {t}")
        dynamic = sum(d == DYNAMIC_INDEX for d in t.get_shape())
        if dynamic != len(self.sizes):
            raise VerifyException(
                f"'{self.name}' op needs one size per dynamic dimension of {t} ({dynamic}), got {len(self.sizes)}"
            )
        if any(_depends_on_block(v) for v in self.sizes):
            raise VerifyException(f"'{self.name}' op sizes must be the same in every block (not computed from npu.block_idx)")



class _FlagOp(IRDLOperation):
    """A flag op: a rank-1 i64 memref of counters in global memory, a counter's index, a value."""

    flags = operand_def(MemRefType)
    index = operand_def(IndexType)
    value = operand_def(IndexType)
    assembly_format = "$flags `[` $index `]` `,` $value attr-dict `:` type($flags)"

    def __init__(self, flags, index, value):
        super().__init__(operands=[flags, index, value])

    def verify_(self) -> None:
        t = self.flags.type
        if not (isinstance(t, MemRefType) and t.get_num_dims() == 1 and t.element_type == i64):
            raise VerifyException(f"'{self.name}' op flags must be a rank-1 memref of i64 counters, got {t}")
        if not isinstance(t.memory_space, NoneAttr):
            raise VerifyException(f"'{self.name}' op flags must be in global memory (no memory space), got {t}")
        if not isinstance(t.layout, NoneAttr):
            raise VerifyException(f"'{self.name}' op flags must have the identity layout, got {t}")


@irdl_op_definition
class SetFlagOp(_FlagOp):
    """Publish this block's progress (Ascend C's CrossCoreSetFlag, as a counter): flags[index] =
    value, after everything this block wrote before it. A block that waits for the counter to
    reach `value` (npu.wait_flag) then reads what it wrote. The counters are monotonic: each
    is set by one block only, to values that never decrease. Unlike npu.barrier it waits for
    nobody, so it may be anywhere (in scf.if too)."""

    name = "npu.set_flag"


@irdl_op_definition
class WaitFlagOp(_FlagOp):
    """Wait until flags[index] >= value (Ascend C's CrossCoreWaitFlag, as a counter), then see
    everything the block that set it wrote before setting it. Only the blocks it names are
    waited for: a block that runs ahead of the others goes on, which a barrier would stop. The
    blocks of a launch run at once (npu.synchronized), so a counter that will reach `value`
    does; one that never will waits forever, as a barrier some block skips would."""

    name = "npu.wait_flag"


Npu = Dialect("npu", [AllocLocalOp, CopyOp, BlockIdxOp, BlockDimOp, BarrierOp, AllocSharedOp, SetFlagOp, WaitFlagOp], [MemorySpaceAttr, TileRoleAttr])
