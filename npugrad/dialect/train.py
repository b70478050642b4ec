"""The `train` dialect: five training-time operators on memrefs, in destination-passing style.

Inputs and outputs are both operands (as in the vendor API); `apply_fused_ema_adam` updates its
state operands in place. Every operand is printed with its name, so a 10-operand op stays readable:

    train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
        dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 2 : i64}

Properties take the spec's defaults and are elided from the output when they hold them.
Shapes may be dynamic (`?`): each op's `check` holds the spec's metadata rules once; the verifier
runs it on the static dimensions, the runtime on the concrete arrays before a launch.

Each operand is declared with what the op does to it: `input_def` (read), `output_def`
(written), `updated_def` (read, then written in place). The printed form, the op's memory
effects and every list of inputs or outputs the pipeline uses come from those declarations.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    BoolAttr,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    StridedLayoutAttr,
)
from xdsl.ir import Attribute, Dialect
from xdsl.irdl import (
    AttrSizedOperandSegments,
    BaseAttr,
    IRDLOperation,
    OperandDef,
    OptOperandDef,
    ParsePropInAttrDict,
    VerificationContext,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
)
from xdsl.irdl.operations import _OperandFieldDef  # the field type operand_def returns (xDSL 0.74)
from xdsl.traits import EffectInstance, MemoryEffect, MemoryEffectKind
from xdsl.utils.exceptions import VerifyException

from npugrad.dialect.attributes import TRAIN_ATTRIBUTES, TileSizesAttr
from npugrad.dialect.checks import FLOATS, Checker, Dim, element_name, static_product
from npugrad.dialect.npu import MemorySpaceAttr

MAX_RANK = 8
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _float32(x: float) -> float:
    """`x` rounded to float32, the kernels' precision for hyper-parameters (without NumPy: the
    dialects import none, tests/test_architecture.py)."""
    return struct.unpack("f", struct.pack("f", x))[0]


def _f64(value: float) -> FloatAttr:
    return FloatAttr(value, Float64Type())


def _i64(value: int) -> IntegerAttr:
    return IntegerAttr(value, 64)


def _bool(value: bool) -> IntegerAttr:
    return IntegerAttr(-1 if value else 0, IntegerType(1))


@dataclass(init=False)
class _WrittenDef(OperandDef):
    """An operand the op writes and does not read (an output)."""


@dataclass(init=False)
class _OptWrittenDef(OptOperandDef):
    """An output the op writes when it is given."""


@dataclass(init=False)
class _UpdatedDef(OperandDef):
    """An operand the op reads, then writes in place."""


_OUTPUT_KINDS = {_WrittenDef: "out", _OptWrittenDef: "out", _UpdatedDef: "inout"}


@dataclass(frozen=True)
class _MemRefOperand(BaseAttr):
    """A memref type, with an error that names the operand (train_op gives each its name)."""

    operand: str = ""

    def verify(self, attr: Attribute, constraint_context: VerificationContext) -> None:
        if not isinstance(attr, MemRefType):
            raise VerifyException(f"operand '{self.operand}' must be a memref, got {attr}")


def input_def():
    """A memref the op reads."""
    return _OperandFieldDef(OperandDef, _MemRefOperand(MemRefType))


def opt_input_def():
    """A memref the op reads, when it is given."""
    return _OperandFieldDef(OptOperandDef, _MemRefOperand(MemRefType))


def output_def():
    """A memref the op writes (every element, without reading it first)."""
    return _OperandFieldDef(_WrittenDef, _MemRefOperand(MemRefType))


def opt_output_def():
    """A memref the op writes when it is given (an optional output)."""
    return _OperandFieldDef(_OptWrittenDef, _MemRefOperand(MemRefType))


def updated_def():
    """A memref the op reads and then writes in place."""
    return _OperandFieldDef(_UpdatedDef, _MemRefOperand(MemRefType))


def _roles(cls: type[IRDLOperation]) -> list[tuple[str, str, bool]]:
    """(name, "in" | "out" | "inout", optional) of each operand, in definition order, read off
    the class body (the IRDL definition does not exist yet when the format is built)."""
    roles = []
    for name, field in vars(cls).items():
        if isinstance(field, _OperandFieldDef):
            kind = _OUTPUT_KINDS.get(field.cls, "in")
            roles.append((name, kind, issubclass(field.cls, OptOperandDef)))
    return roles


def train_op(cls: type[TrainOp]) -> type[TrainOp]:
    """`irdl_op_definition` for a train op, with its printed form derived from its operands:
    each operand with its name, what the op writes after `->`.

        train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) ... -> dx(%dx : memref<16xf32>)
    """
    roles = _roles(cls)
    kinds = [kind for _, kind, _ in roles]
    first_written = next((i for i, k in enumerate(kinds) if k != "in"), len(kinds))
    if "in" in kinds[first_written:]:
        raise TypeError(f"{cls.__name__}: operands it only reads must come before those it writes")

    def one(name: str, optional: bool) -> str:
        if optional:
            return f"(`{name}` `(` ${name}^ `:` type(${name}) `)`)?"
        return f"`{name}` `(` ${name} `:` type(${name}) `)`"

    parts = [one(n, opt) for n, _, opt in roles]
    cls.assembly_format = " ".join([*parts[:first_written], "`->`", *parts[first_written:], "attr-dict"])
    for name, _, _ in roles:
        field = vars(cls)[name]
        setattr(cls, name, _OperandFieldDef(field.cls, _MemRefOperand(MemRefType, name)))
    return irdl_op_definition(cls)


class TrainEffects(MemoryEffect):
    """Reads of the operands declared read, writes of those declared written."""

    @classmethod
    def get_effects(cls, op: IRDLOperation) -> set[EffectInstance]:
        effects = set()
        for name, kind in type(op).operand_roles().items():
            value = getattr(op, name)
            if value is None:
                continue
            if kind != "out":
                effects.add(EffectInstance(MemoryEffectKind.READ, value))
            if kind != "in":
                effects.add(EffectInstance(MemoryEffectKind.WRITE, value))
        return effects


class TrainOp(IRDLOperation):
    """Common base: operand roles (what a kernel reads, what it writes, read off the operand
    definitions), the tile decision and the shared verifier."""

    # The dimensions `tile_sizes` may name (chosen by choose-tile-sizes or written by hand, read
    # by the passes that tile).
    TILE_DIMS: ClassVar[tuple[str, ...]]
    traits = traits_def(TrainEffects())

    @classmethod
    def short_name(cls) -> str:
        return cls.name.removeprefix("train.")

    @classmethod
    def operand_roles(cls) -> dict[str, str]:
        """Operand name -> "in" (read), "out" (written) or "inout" (read, then written), in order."""
        return _operand_roles(cls)

    @classmethod
    def operand_names(cls) -> tuple[str, ...]:
        """Every operand, in the op's order (the order of a kernel's arguments)."""
        return tuple(cls.operand_roles())

    @classmethod
    def inputs(cls) -> tuple[str, ...]:
        """The operands the op reads (in place ones included)."""
        return tuple(n for n, k in cls.operand_roles().items() if k != "out")

    @classmethod
    def outputs(cls) -> tuple[str, ...]:
        """The operands the op writes (in place ones included)."""
        return tuple(n for n, k in cls.operand_roles().items() if k != "in")

    @classmethod
    def check(cls, c: Checker) -> None:
        """The spec's metadata rules for this op."""
        raise NotImplementedError

    def tiles(self) -> dict[str, int] | None:
        attr = getattr(self, "tile_sizes", None)
        return attr.as_dict() if attr is not None else None

    def _verify_tile_sizes(self) -> None:
        attr = getattr(self, "tile_sizes", None)
        if attr is None:
            return
        for key in attr.as_dict():
            if key not in self.TILE_DIMS:
                raise VerifyException(
                    f"'{self.name}' op property 'tile_sizes' has unknown dimension '{key}' (known: {', '.join(self.TILE_DIMS)})"
                )

    def prop_int(self, name: str) -> int:
        return getattr(self, name).value.data

    def prop_float(self, name: str) -> float:
        return getattr(self, name).value.data

    def prop_bool(self, name: str) -> bool:
        return getattr(self, name).value.data != 0

    def attribute_values(self) -> dict[str, int | float | bool]:
        """The op's properties as Python values, keyed by the spec's parameter names."""
        values: dict[str, int | float | bool] = {}
        for name, prop in self.properties.items():
            if not isinstance(prop, IntegerAttr | FloatAttr):
                continue
            if isinstance(prop.type, IntegerType) and prop.type.width.data == 1:
                values[name] = prop.value.data != 0
            else:
                values[name] = prop.value.data
        return values

    def verify_(self) -> None:
        shapes: dict[str, Sequence[Dim]] = {}
        types: dict[str, str] = {}
        for name in self.operand_names():
            value = getattr(self, name)
            if value is None:
                continue
            t = value.type
            if not isinstance(t, MemRefType):
                raise VerifyException(f"'{self.name}' op operand '{name}' must be a memref, got {t}")
            if not isinstance(t.memory_space, NoneAttr | MemorySpaceAttr):
                raise VerifyException(f"'{self.name}' op operand '{name}' must be in global (default) memory or a local level (#npu.mem<level>), got {t}")
            # The spec's "ND format": plain (possibly strided) arrays, no tiled or blocked layouts.
            if not isinstance(t.layout, NoneAttr | StridedLayoutAttr):
                raise VerifyException(f"'{self.name}' op operand '{name}' must have an identity or strided layout, got {t}")
            shapes[name] = [None if d == DYNAMIC_INDEX else d for d in t.get_shape()]
            types[name] = element_name(t.element_type)
        try:
            self.check(Checker(f"'{self.name}' op", "operand", shapes, types, self.attribute_values()))
            self._verify_tile_sizes()
        except (ValueError, TypeError) as e:
            raise VerifyException(str(e)) from None


@cache
def _operand_roles(cls: type[TrainOp]) -> dict[str, str]:
    return {name: _OUTPUT_KINDS.get(type(d), "in") for name, d in cls.get_irdl_definition().operands}


def _finite(x: float) -> bool:
    return math.isfinite(x)


def check_extensions(c: Checker, v: Dim, logits: bool, mode: str) -> None:
    """FORWARD.md §4's options on an op of the linear cross-entropy: label smoothing in [0, 1]
    with the global vocabulary `vocab_size` (at least this shard's V), z-loss and softcap >= 0;
    z-loss and softcap need the logits (`logits` False: they are not available in `mode`)."""
    alpha, k = c.prop("label_smoothing"), c.prop("vocab_size")
    c.prop_check("label_smoothing", _finite(alpha) and 0 <= alpha <= 1, "in [0, 1]")
    if alpha and k < max(1, v or 0):
        c.fail(f"property 'label_smoothing' = {alpha} needs 'vocab_size', the global vocabulary K "
               f"(>= V = {v}), got {k}" if v is not None else
               f"property 'label_smoothing' = {alpha} needs 'vocab_size', the global vocabulary K (>= 1), got {k}")
    c.prop_check("vocab_size", k >= 0, ">= 0")
    for name in ("z_loss", "softcap"):
        if name not in c.props:  # an op without the option
            continue
        c.prop_check(name, _finite(c.prop(name)) and c.prop(name) >= 0, "finite and >= 0 (0: off)")
        if c.prop(name) and not logits:
            c.fail(f"property '{name}' needs the logits: it is not available in {mode}")


# A block of compact logits is whole in one vocabulary tile of the forward's nest: bounded, so
# that the tile (token rows x B float32) is.
MAX_LOGITS_BLOCK = 1 << 16


def logits_block(c: Checker) -> int:
    """Property 'logits_block' (0 where absent), checked to be in range."""
    block = c.prop_or("logits_block", 0)
    c.prop_check("logits_block", 0 <= block <= MAX_LOGITS_BLOCK, f"in [0, {MAX_LOGITS_BLOCK}] (0: off)")
    return block


def check_logits_block(c: Checker, name: str, block: int, bt, v) -> None:
    """The compact logits' block maxima `name` for block B (logits_block(c)): present exactly
    where B > 0, float32 (BT, ceil(V/B))."""
    if not block:
        if c.present(name):
            c.operand_fail(name, "holds the compact logits' block maxima: needs property 'logits_block' > 0")
        return
    if not c.present(name):
        c.fail(f"property 'logits_block' = {block} keeps the logits compact: needs {c.word} {c.display.get(name, name)!r} "
               "(each block's row maximum)")
    c.rank(name, [2])
    c.element(name, ["float32"])
    c.shape_is(name, [bt, None if v is None else -(-v // block)], f"(BT, ceil(V/{block}))")


def _check_reduction(c: Checker) -> int:
    reduction = c.prop("reduction")
    c.prop_check("reduction", reduction in REDUCTIONS, "0 (none), 1 (mean) or 2 (sum)")
    return reduction


@train_op
class FusedLinearCrossEntropyLossGradOp(TrainOp):
    """Backward of a vocabulary-parallel LM head + cross entropy on one tensor-parallel rank.

    G = grad·(P − onehot(masked_target) on unmasked rows); input_grad_out = G·W,
    weight_grad_out = Gᵀ·X (with `accumulate`: input_grad_out += G·W, weight_grad_out += Gᵀ·X).
    P is `softmax` when given (high-performance mode), else it is recomputed as
    exp(X·Wᵀ − logits_max)/sum_exp_logits (memory-saving mode). With `softmax_is_logits`
    (beyond the vendor) `softmax` holds the logits Z the forward kept (float32, or rounded to
    the input's dtype) and P = exp(Z − logits_max)/sum_exp_logits is made in the nest, as
    memory-saving mode makes it from the logits it recomputes: no softmax pass over a kept BT×V
    buffer, and, narrow, half its bytes. With `logits_block` B > 0 too, `softmax` holds the
    compact logits the forward kept in float16, E = exp(Z − C) with C = `softmax_block_max`
    (BT, ceil(V/B)) each block of B columns' row maximum (FusedLinearOnlineMaxSumOp), and
    P = (E·exp(C[t, v // B] − logits_max))/sum_exp_logits.
    """

    name = "train.fused_linear_cross_entropy_loss_grad"
    grad = input_def()
    input = input_def()
    weight = input_def()
    target_mask = input_def()
    masked_target = input_def()
    logits_max = opt_input_def()
    sum_exp_logits = opt_input_def()
    softmax = opt_input_def()
    softmax_block_max = opt_input_def()
    input_grad_out = output_def()
    weight_grad_out = output_def()
    # FORWARD.md §4's extensions, off by default (the vendor's semantics): label smoothing over
    # the global vocabulary of `vocab_size` rows, the z-loss, the logit softcap.
    label_smoothing = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    vocab_size = prop_def(IntegerAttr[I64], default_value=_i64(0))
    z_loss = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    softcap = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    # Beyond the vendor too: the gradients are added to what the outputs hold (out += grad, as
    # PyTorch accumulates .grad), for a caller that sums them over micro-batches or token chunks.
    accumulate = prop_def(BoolAttr, default_value=_bool(False))
    # Beyond the vendor: `softmax` holds the kept logits, made into P in the nest (the docstring).
    softmax_is_logits = prop_def(BoolAttr, default_value=_bool(False))
    # Beyond the vendor: with it, the kept logits are compact (E and C; the docstring).
    logits_block = prop_def(IntegerAttr[I64], default_value=_i64(0))
    # Beyond the vendor: input_grad_out is float32 whatever the input's dtype, unrounded (the
    # float32 accumulator itself): for a caller that sums several shards' or parts' dX and
    # rounds once, with no second, rounded copy of each.
    float32_input_grad = prop_def(BoolAttr, default_value=_bool(False))
    # {bt = .., v = ..}: the token and vocabulary tile sizes of the fused loop nest. Chosen by
    # a pass (or written by hand); the fusion pass reads only this.
    tile_sizes = opt_prop_def(TileSizesAttr)

    MIN_V_HIGH_PERFORMANCE: ClassVar[int] = 128
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("bt", "v", "h")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    @property
    def high_performance(self) -> bool:
        return self.softmax is not None

    @property
    def logits_kept(self) -> bool:
        """Whether `softmax` holds the logits (softmax_is_logits): P is made from them."""
        return self.high_performance and self.prop_bool("softmax_is_logits")

    @property
    def compact_block(self) -> int:
        """B > 0 where `softmax` holds compact logits exp(Z − C), C per block of B columns; else 0."""
        return self.prop_int("logits_block") if self.logits_kept else 0

    @classmethod
    def check(cls, c: Checker) -> None:
        hp = c.present("softmax")
        kept = bool(c.prop_or("softmax_is_logits", False))
        given = [n for n in ("logits_max", "sum_exp_logits") if c.present(n)]
        if not hp and len(given) < 2:
            c.fail(
                f"needs {c.word} 'softmax' (high-performance mode) or both 'logits_max' and "
                f"'sum_exp_logits' (memory-saving mode), got {f'only {given[0]!r}' if given else 'none of them'}"
            )
        if kept and not (hp and len(given) == 2):
            missing = [n for n in ("softmax", "logits_max", "sum_exp_logits") if not c.present(n)]
            c.fail(f"property 'softmax_is_logits' makes P from the logits in 'softmax' and the statistics: "
                   f"needs {c.word}s 'softmax', 'logits_max' and 'sum_exp_logits', missing {', '.join(map(repr, missing))}")
        stats = ("logits_max", "sum_exp_logits") if not hp or kept else ()
        for name in ("grad", "target_mask", "masked_target", *stats):
            c.rank(name, [1])
        for name in ("input", "weight", "input_grad_out", "weight_grad_out", *(("softmax",) if hp else ())):
            c.rank(name, [2])
        c.element("grad", ["float32"])
        c.element("input", FLOATS)
        c.same_element("weight", "input")
        if c.prop_or("float32_input_grad", False):  # the extension: a float32 dX, whatever the input's
            c.element("input_grad_out", ["float32"])
        else:  # the vendor's
            c.same_element("input_grad_out", "input")
        c.same_element("weight_grad_out", "input")
        mask_t = c.element("target_mask", ["bool", "uint8"])
        c.element("masked_target", ["int32", "int64"])
        for name in stats:
            c.element(name, ["float32"])
        block = logits_block(c)
        if block and not kept:
            c.fail(f"property 'logits_block' = {block} reads compact kept logits: needs property 'softmax_is_logits'")
        if block:  # compact: exp(Z − C) in float16
            c.element("softmax", ["float16"])
        elif hp:  # kept logits may be rounded to the input's dtype; a softmax is float32
            c.element("softmax", list(dict.fromkeys(["float32", c.dtype("input")])) if kept else ["float32"])

        bt, h, v = c.dims("grad")[0], c.dims("input")[1], c.dims("weight")[0]
        c.dim_is("input", 0, bt, "BT (grad.shape[0])")
        c.dim_is("weight", 1, h, "H (input.shape[1])")
        bt = bt if bt is not None else c.dims("input")[0]
        h = h if h is not None else c.dims("weight")[1]
        c.shape_is("masked_target", [bt], "(BT,)")
        mask_len = c.dims("target_mask")[0]
        if mask_t == "bool":
            c.shape_is("target_mask", [bt], "(BT,) for a bool mask")
        elif mask_len is not None and bt is not None and mask_len * 8 < bt:
            c.operand_fail("target_mask", f"(bit-packed uint8) needs at least ceil(BT/8) = {-(-bt // 8)} bytes, got {mask_len}")
        for name in stats:
            c.shape_is(name, [bt], "(BT,)")
        check_logits_block(c, "softmax_block_max", block, bt, v)
        if hp:
            c.shape_is("softmax", [bt, v], "(BT, V)")
            if v is not None and v < cls.MIN_V_HIGH_PERFORMANCE:
                c.operand_fail("weight", f"must have at least {cls.MIN_V_HIGH_PERFORMANCE} rows (V) in high-performance mode, got {v}")
        c.shape_is("input_grad_out", [bt, h], "(BT, H)")
        c.shape_is("weight_grad_out", [v, h], "(V, H)")
        check_extensions(c, v, logits=not hp, mode="high-performance mode (softmax given)")


@train_op
class FusedLinearOnlineMaxSumOp(TrainOp):
    """One vocabulary shard's statistics of the logits Z' = softcap(X·Wᵀ), computed with an online
    row maximum (FORWARD.md §1): m_t = max_v Z'_tv, s_t = Σ_v exp(Z'_tv − m_t), the target's logit
    minus m_t where the target is in [vocab_start_index, vocab_end_index), the bit-packed mask
    (1 = not in the shard) and the local target column. Optional: the logits themselves (what
    high-performance mode needs) and Σ_v Z'_tv (what label smoothing needs). With `ignore_index`,
    rows whose target equals it are skipped: their statistics and logits are 0. With
    `float32_logits` (an extension, default off: the vendor's logits are in the input's dtype)
    the logits output is float32 whatever the input's dtype, the logits unrounded.

    The shard is the properties `vocab_start_index` and `vocab_end_index` (FORWARD.md §1), or,
    when the optional `vocab_range` operand (int64 [start, end], an extension) is given instead,
    run-time values: shards and parts of a shard of any start and size then share one kernel
    (the API passes them so, ops/forward.py). The API checks the values (start >= 0, end − start
    = V) as it checks the properties; the kernel reads the target's column at most V − 1
    whatever the operand holds.

    With `logits_block` B > 0 (an extension, default 0: off) the logits are kept compact, in
    exponential form: `logits_block_max_out` (BT, ceil(V/B)) float32 holds each row's maximum
    over each block of B columns, C[t, b] = max Z'[t, bB : (b+1)B], and the logits output, in
    float16, E[t, v] = exp(Z'[t, v] − C[t, v // B]), in (0, 1]: half the bytes of float32
    logits, and a relative error of 2⁻¹¹ in each, whatever the logits' magnitude (logits
    rounded to float16 or bfloat16 lose their absolute precision as they grow). The backward
    makes P = E·exp(C − M)/S from them (FusedLinearCrossEntropyLossGradOp). Skipped rows: E and
    C are 0."""

    name = "train.fused_linear_online_max_sum"
    input = input_def()
    weight = input_def()
    target = input_def()
    vocab_range = opt_input_def()
    logits_max_local_out = output_def()
    sum_exp_logits_local_out = output_def()
    predicted_logits_local_out = output_def()
    target_mask_out = output_def()
    masked_target_out = output_def()
    vocab_parallel_logits_out = opt_output_def()
    sum_logits_local_out = opt_output_def()
    logits_block_max_out = opt_output_def()
    vocab_start_index = opt_prop_def(IntegerAttr[I64])  # both, or the vocab_range operand
    vocab_end_index = opt_prop_def(IntegerAttr[I64])
    softcap = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    ignore_index = opt_prop_def(IntegerAttr[I64])
    float32_logits = prop_def(BoolAttr, default_value=_bool(False))
    logits_block = prop_def(IntegerAttr[I64], default_value=_i64(0))
    tile_sizes = opt_prop_def(TileSizesAttr)

    STATISTICS: ClassVar[tuple[str, ...]] = ("logits_max_local_out", "sum_exp_logits_local_out",
                                             "predicted_logits_local_out")
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("bt", "v", "h")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    @classmethod
    def check(cls, c: Checker) -> None:
        c.rank("input", [2])
        c.rank("weight", [2])
        c.rank("target", [1])
        c.element("input", FLOATS)
        c.same_element("weight", "input")
        c.element("target", ["int32", "int64"])
        bt, h = c.dims("input")
        v = c.dims("weight")[0]
        c.dim_is("weight", 1, h, "H (input.shape[1])")
        c.shape_is("target", [bt], "(BT,)")
        start, end = c.prop_or("vocab_start_index"), c.prop_or("vocab_end_index")
        if c.present("vocab_range"):
            if start is not None or end is not None:
                c.fail(f"takes the shard from the properties 'vocab_start_index' and 'vocab_end_index' or from "
                       f"{c.word} 'vocab_range', not both")
            c.element("vocab_range", ["int64"])
            c.shape_is("vocab_range", [2], "start, end")
        else:
            for name, value in (("vocab_start_index", start), ("vocab_end_index", end)):
                if value is None:
                    c.fail(f"needs the property '{name}' (or {c.word} 'vocab_range' instead of both)")
            c.prop_check("vocab_start_index", start >= 0, ">= 0")
            if v is not None and end - start != v:
                c.fail(f"property 'vocab_end_index' - 'vocab_start_index' must be V = weight.shape[0] = {v}, "
                       f"got {end} - {start} = {end - start}")
        if v == 0:
            c.operand_fail("weight", "must have at least one row (V > 0)")
        for name in (*cls.STATISTICS, *(("sum_logits_local_out",) if c.present("sum_logits_local_out") else ())):
            c.element(name, ["float32"])
            c.shape_is(name, [bt], "(BT,)")
        c.element("target_mask_out", ["uint8"])
        c.shape_is("target_mask_out", [None if bt is None else -(-bt // 8)], "(ceil(BT/8),)")
        c.same_element("masked_target_out", "target")
        c.shape_is("masked_target_out", [bt], "(BT,)")
        block = logits_block(c)
        check_logits_block(c, "logits_block_max_out", block, bt, v)
        if block and not c.present("vocab_parallel_logits_out"):
            c.fail(f"property 'logits_block' = {block} keeps the logits compact: needs {c.word} 'vocab_parallel_logits_out'")
        if block and c.prop_or("float32_logits", False):
            c.fail("properties 'logits_block' and 'float32_logits' exclude each other (compact or float32 logits)")
        if c.present("vocab_parallel_logits_out"):
            if block:  # exp(Z' − C), in (0, 1]
                c.element("vocab_parallel_logits_out", ["float16"])
            elif c.prop_or("float32_logits", False):  # unrounded: what a softmax made from them needs
                c.element("vocab_parallel_logits_out", ["float32"])
            else:  # the vendor's
                c.same_element("vocab_parallel_logits_out", "input")
            c.shape_is("vocab_parallel_logits_out", [bt, v], "(BT, V)")
        softcap = c.prop("softcap")
        c.prop_check("softcap", _finite(softcap) and softcap >= 0, "finite and >= 0 (0: off)")


@train_op
class FusedCrossEntropyLossWithMaxSumOp(TrainOp):
    """The loss per token from the global statistics (FORWARD.md §2, §4):
    loss_t = log S_t − P_t, + α·(P_t + M_t − ΣZ'_t/K) with label smoothing, + λ·(M_t + log S_t)²
    with the z-loss, 0 on rows whose target equals `ignore_index`; and, given a shard's logits,
    that shard's columns of the global softmax exp(Z − M)/S (the backward's high-performance input)."""

    name = "train.fused_cross_entropy_loss_with_max_sum"
    logits_max = input_def()
    sum_exp_logits = input_def()
    predicted_logits = input_def()
    vocab_parallel_logits = opt_input_def()
    sum_logits = opt_input_def()
    target = opt_input_def()
    loss_out = output_def()
    softmax_out = opt_output_def()
    label_smoothing = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    vocab_size = prop_def(IntegerAttr[I64], default_value=_i64(0))
    z_loss = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    ignore_index = opt_prop_def(IntegerAttr[I64])
    tile_sizes = opt_prop_def(TileSizesAttr)

    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    @classmethod
    def check(cls, c: Checker) -> None:
        for name in ("logits_max", "sum_exp_logits", "predicted_logits", "loss_out"):
            c.rank(name, [1])
            c.element(name, ["float32"])
        bt = c.dims("logits_max")[0]
        for name in ("sum_exp_logits", "predicted_logits", "loss_out"):
            c.shape_is(name, [bt], "(BT,)")
        logits, softmax = c.present("vocab_parallel_logits"), c.present("softmax_out")
        if logits != softmax:
            c.fail(f"needs both {c.word}s 'vocab_parallel_logits' and 'softmax_out', or neither")
        v = None
        if logits:
            c.rank("vocab_parallel_logits", [2])
            c.element("vocab_parallel_logits", FLOATS)
            v = c.dims("vocab_parallel_logits")[1]
            c.dim_is("vocab_parallel_logits", 0, bt, "BT (logits_max.shape[0])")
            c.element("softmax_out", ["float32"])
            c.shape_is("softmax_out", [bt, v], "(BT, V)")
        check_extensions(c, v, logits=True, mode="")
        if c.prop("label_smoothing") and not c.present("sum_logits"):
            c.fail(f"property 'label_smoothing' needs {c.word} 'sum_logits' (the global Σ of the logits)")
        if c.present("sum_logits"):
            c.element("sum_logits", ["float32"])
            c.shape_is("sum_logits", [bt], "(BT,)")
        ignoring = c.prop_or("ignore_index") is not None
        if ignoring != c.present("target"):
            c.fail(f"property 'ignore_index' and {c.word} 'target' go together (the rows to ignore), got "
                   f"{'only the property' if ignoring else f'only the {c.word}'}")
        if ignoring:
            c.element("target", ["int32", "int64"])
            c.shape_is("target", [bt], "(BT,)")


@train_op
class EmbeddingDenseBackwardOp(TrainOp):
    """out[r] = Σ_{i: indices[i] = r ≠ padding_idx} s_i·grad[i], s_i = 1/count(r) with scale_grad_by_freq.

    `out_zeroed`: `out` holds zeros when the op runs (a fresh mapping the API allocated: the
    system hands out zeroed pages), so a row no index names is not written at all. The lowering
    through local memory (tile-for-target) writes whole tiles all the same."""

    name = "train.embedding_dense_backward"
    grad = input_def()
    indices = input_def()
    out = output_def()
    num_weights = prop_def(IntegerAttr[I64])
    padding_idx = prop_def(IntegerAttr[I64], default_value=_i64(-1))
    scale_grad_by_freq = prop_def(BoolAttr, default_value=_bool(False))
    out_zeroed = prop_def(BoolAttr, default_value=_bool(False))
    tile_sizes = opt_prop_def(TileSizesAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("rows", "d")

    irdl_options = (ParsePropInAttrDict(),)

    @classmethod
    def check(cls, c: Checker) -> None:
        c.rank("grad", range(1, MAX_RANK + 1))
        c.rank("indices", range(MAX_RANK + 1))
        c.rank("out", [2])
        c.element("grad", FLOATS)
        c.element("indices", ["int32", "int64"])
        c.element("out", FLOATS)
        num_weights = c.prop("num_weights")
        c.prop_check("num_weights", num_weights >= 0, ">= 0")
        g = c.dims("grad")
        d, n, n_idx = g[-1], static_product(g[:-1]), static_product(c.dims("indices"))
        # Skipped when D = 0 (spec §2.3), so also while D is unknown: the launch checks it.
        if d is not None and d != 0 and n is not None and n_idx is not None and n != n_idx:
            c.operand_fail("indices", f"must have prod(grad.shape[:-1]) = {n} elements, got {n_idx}")
        c.shape_is("out", [num_weights, d], "(num_weights, D)")


@train_op
class NLLLossBackwardOp(TrainOp):
    """Gradient of NLL loss w.r.t. its log-probabilities: −w[y]·scale at (t, y_t), zero elsewhere.

    `out_zeroed`: `out` holds zeros when the op runs (a fresh mapping the API allocated), so only
    the samples' elements are written, not the zeros around them. The lowering through local
    memory (tile-for-target) writes whole tiles all the same."""

    name = "train.nll_loss_backward"
    grad_output = input_def()
    self = input_def()
    target = input_def()
    weight = input_def()
    total_weight = input_def()
    out = output_def()
    reduction = prop_def(IntegerAttr[I64], default_value=_i64(1))
    ignore_index = prop_def(IntegerAttr[I64], default_value=_i64(-100))
    out_zeroed = prop_def(BoolAttr, default_value=_bool(False))
    tile_sizes = opt_prop_def(TileSizesAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("rows", "c")

    irdl_options = (ParsePropInAttrDict(),)

    @classmethod
    def check(cls, c: Checker) -> None:
        reduction = _check_reduction(c)
        self_rank = c.rank("self", [1, 2])
        target_rank = c.rank("target", [0, 1])
        c.element("self", FLOATS)
        for name in ("grad_output", "weight", "total_weight", "out"):
            c.same_element(name, "self")
        c.element("target", ["int64", "int32", "uint8"])
        s = c.dims("self")
        if self_rank == 1 and target_rank == 1:
            c.operand_fail("target", "must be 0-D when 'self' is 1-D, got rank 1")
        if self_rank == 2:
            if target_rank != 1:
                c.operand_fail("target", f"must be 1-D (N,) when 'self' is 2-D, got rank {target_rank}")
            c.shape_is("target", [s[0]], "(N,)")
        c.shape_is("weight", [s[-1]], "(C,)")
        c.one_element("total_weight")
        if reduction == 0 and self_rank == 2:
            c.shape_is("grad_output", [s[0]], "(N,) for reduction none")
        else:
            c.rank("grad_output", [0, 1])
            c.one_element("grad_output", "exactly one element (reduction mean/sum, or 1-D self)")
        c.shape_is("out", s, "the shape of 'self'")


@train_op
class ApplyFusedEmaAdamOp(TrainOp):
    """One Adam (mode 0, L2) or AdamW (mode 1) step on var, m, v, then s ← d·s + (1 − d)·var'; in place.

    The float hyper-parameters are properties, or, when the optional `hyperparameters` operand
    (float32 [lr, ema_decay, beta1, beta2, eps, weight_decay]) is given, run-time values: one
    kernel then serves a learning-rate schedule or an EMA warm-up without recompiling.
    """

    name = "train.apply_fused_ema_adam"
    grad = input_def()
    step = input_def()
    hyperparameters = opt_input_def()
    var = updated_def()
    m = updated_def()
    v = updated_def()
    s = updated_def()
    lr = prop_def(FloatAttr[Float64Type], default_value=_f64(1e-3))
    ema_decay = prop_def(FloatAttr[Float64Type], default_value=_f64(0.9999))
    beta1 = prop_def(FloatAttr[Float64Type], default_value=_f64(0.9))
    beta2 = prop_def(FloatAttr[Float64Type], default_value=_f64(0.999))
    eps = prop_def(FloatAttr[Float64Type], default_value=_f64(1e-8))
    mode = prop_def(IntegerAttr[I64], default_value=_i64(1))
    bias_correction = prop_def(BoolAttr, default_value=_bool(True))
    weight_decay = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    tile_sizes = opt_prop_def(TileSizesAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)

    # The order of the values in the `hyperparameters` operand.
    HYPERPARAMETER_ORDER: ClassVar[tuple[str, ...]] = ("lr", "ema_decay", "beta1", "beta2", "eps", "weight_decay")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    HYPERPARAMETERS: ClassVar[Mapping[str, tuple[str, object]]] = {
        "lr": (">= 0", lambda x: x >= 0),
        "eps": (">= 0", lambda x: x >= 0),
        # Checked as the float32 the kernel computes with (OPS.md 4.2): a beta within 2^-25 of 1 is
        # 1.0 there, and bias correction then divides by 1 - 1^k = 0 (a NaN parameter).
        "beta1": ("in [0, 1) as a float32", lambda x: 0 <= x < 1 and _float32(x) < 1),
        "beta2": ("in [0, 1) as a float32", lambda x: 0 <= x < 1 and _float32(x) < 1),
        "weight_decay": (">= 0", lambda x: x >= 0),
        "ema_decay": ("in [0, 1]", lambda x: 0 <= x <= 1),
    }

    @classmethod
    def check(cls, c: Checker) -> None:
        c.rank("grad", range(1, MAX_RANK + 1))
        c.element("grad", FLOATS)
        for name in ("var", "m", "v", "s"):
            c.same_element(name, "grad")
            c.shape_is(name, c.dims("grad"), "the shape of 'grad'")
        c.element("step", ["int64"])
        c.one_element("step")
        if c.present("hyperparameters"):
            c.element("hyperparameters", ["float32"])
            c.shape_is("hyperparameters", [len(cls.HYPERPARAMETER_ORDER)], ", ".join(cls.HYPERPARAMETER_ORDER))
        c.prop_check("mode", c.prop("mode") in (0, 1), "0 (L2, Adam) or 1 (decoupled decay, AdamW)")
        for name, (meaning, ok) in cls.HYPERPARAMETERS.items():
            c.prop_check(name, ok(c.prop(name)), meaning)  # type: ignore[operator]


@train_op
class BinaryCrossEntropyGradOp(TrainOp):
    """dx = u·w·(x − y)/max(x(1 − x), 1e-12), u = dloss (none), dloss/N (mean) or dloss (sum)."""

    name = "train.binary_cross_entropy_grad"
    input_x = input_def()
    input_y = input_def()
    dloss = input_def()
    weight = opt_input_def()
    dx = output_def()
    reduction = prop_def(IntegerAttr[I64], default_value=_i64(1))
    tile_sizes = opt_prop_def(TileSizesAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)

    EPSILON: ClassVar[float] = 1e-12
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())

    @classmethod
    def check(cls, c: Checker) -> None:
        reduction = _check_reduction(c)
        c.rank("input_x", range(MAX_RANK + 1))
        c.element("input_x", FLOATS)
        shape = c.dims("input_x")
        same_shape = ["input_y", "dx"] + (["weight"] if c.present("weight") else [])
        for name in [*same_shape, "dloss"]:
            c.same_element(name, "input_x")
        for name in same_shape:
            c.shape_is(name, shape, "the shape of 'input_x'")
        if reduction == 0:
            c.shape_is("dloss", shape, "the shape of 'input_x' for reduction none")
        else:
            c.rank("dloss", [0, 1])
            c.one_element("dloss", "exactly one element for reduction mean/sum")


OPS: tuple[type[TrainOp], ...] = (
    FusedLinearOnlineMaxSumOp,
    FusedCrossEntropyLossWithMaxSumOp,
    FusedLinearCrossEntropyLossGradOp,
    EmbeddingDenseBackwardOp,
    NLLLossBackwardOp,
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
)

Train = Dialect("train", list(OPS), list(TRAIN_ATTRIBUTES))
