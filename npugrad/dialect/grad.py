"""The `grad` dialect: five training-time operators on memrefs, in destination-passing style.

Inputs and outputs are both operands (as in the vendor API); `apply_fused_ema_adam` updates its
state operands in place. Every operand is printed with its name, so a 10-operand op stays readable:

    grad.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
        dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 2 : i64}

Properties take the spec's defaults and are elided from the output when they hold them.
Shapes may be dynamic (`?`): each op's `check` holds the spec's metadata rules once; the verifier
runs it on the static dimensions, the runtime on the concrete arrays before a launch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar

from xdsl.dialects.builtin import (
    DYNAMIC_INDEX,
    I64,
    BoolAttr,
    DictionaryAttr,
    Float64Type,
    FloatAttr,
    IntegerAttr,
    IntegerType,
    MemRefType,
    NoneAttr,
    StridedLayoutAttr,
)
from xdsl.ir import Dialect
from xdsl.irdl import (
    AttrSizedOperandSegments,
    IRDLOperation,
    ParsePropInAttrDict,
    irdl_op_definition,
    operand_def,
    opt_operand_def,
    opt_prop_def,
    prop_def,
)
from xdsl.utils.exceptions import VerifyException

from npugrad import dtypes
from npugrad.dialect.checks import FLOATS, Checker, Dim, static_product
from npugrad.dialect.npu import MemorySpaceAttr

MAX_RANK = 8
REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


def _f64(value: float) -> FloatAttr:
    return FloatAttr(value, Float64Type())


def _i64(value: int) -> IntegerAttr:
    return IntegerAttr(value, 64)


def _bool(value: bool) -> IntegerAttr:
    return IntegerAttr(-1 if value else 0, IntegerType(1))


def _format(inputs: Sequence[str], optional: set[str], outputs: Sequence[str]) -> str:
    def one(name: str) -> str:
        if name in optional:
            return f"(`{name}` `(` ${name}^ `:` type(${name}) `)`)?"
        return f"`{name}` `(` ${name} `:` type(${name}) `)`"

    return " ".join([*map(one, inputs), "`->`", *map(one, outputs), "attr-dict"])


class GradOp(IRDLOperation):
    """Common base: operand roles (what a kernel reads, what it writes) and the shared verifier."""

    INPUTS: ClassVar[tuple[str, ...]]
    OUTPUTS: ClassVar[tuple[str, ...]]
    # The dimensions `tile_sizes` may name (chosen by choose-tile-sizes or written by hand, read
    # by the passes that tile).
    TILE_DIMS: ClassVar[tuple[str, ...]]

    @classmethod
    def short_name(cls) -> str:
        return cls.name.removeprefix("grad.")

    @classmethod
    def operand_names(cls) -> tuple[str, ...]:
        return cls.INPUTS + tuple(n for n in cls.OUTPUTS if n not in cls.INPUTS)

    @classmethod
    def check(cls, c: Checker) -> None:
        """The spec's metadata rules for this op."""
        raise NotImplementedError

    def tiles(self) -> dict[str, int] | None:
        attr = getattr(self, "tile_sizes", None)
        if attr is None:
            return None
        return {k: v.value.data for k, v in attr.data.items()}

    def _verify_tile_sizes(self) -> None:
        attr = getattr(self, "tile_sizes", None)
        if attr is None:
            return
        for key, value in attr.data.items():
            if key not in self.TILE_DIMS:
                raise VerifyException(
                    f"'{self.name}' op property 'tile_sizes' has unknown dimension '{key}' (known: {', '.join(self.TILE_DIMS)})"
                )
            if not isinstance(value, IntegerAttr) or value.value.data < 1:
                raise VerifyException(f"'{self.name}' op property 'tile_sizes' needs a positive integer for '{key}', got {value}")

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
            types[name] = dtypes.name(t.element_type)
        try:
            self.check(Checker(f"'{self.name}' op", "operand", shapes, types, self.attribute_values()))
            self._verify_tile_sizes()
        except (ValueError, TypeError) as e:
            raise VerifyException(str(e)) from None


def _check_reduction(c: Checker) -> int:
    reduction = c.prop("reduction")
    c.prop_check("reduction", reduction in REDUCTIONS, "0 (none), 1 (mean) or 2 (sum)")
    return reduction


@irdl_op_definition
class FusedLinearCrossEntropyLossGradOp(GradOp):
    """Backward of a vocabulary-parallel LM head + cross entropy on one tensor-parallel rank.

    G = grad·(P − onehot(masked_target) on unmasked rows); input_grad_out = G·W,
    weight_grad_out = Gᵀ·X. P is `softmax` when given (high-performance mode), else it is
    recomputed as exp(X·Wᵀ − logits_max)/sum_exp_logits (memory-saving mode).
    """

    name = "grad.fused_linear_cross_entropy_loss_grad"
    grad = operand_def()
    input = operand_def()
    weight = operand_def()
    target_mask = operand_def()
    masked_target = operand_def()
    logits_max = opt_operand_def()
    sum_exp_logits = opt_operand_def()
    softmax = opt_operand_def()
    input_grad_out = operand_def()
    weight_grad_out = operand_def()
    label_smoothing = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    # {bt = .., v = ..}: the token and vocabulary tile sizes of the fused loop nest. Chosen by
    # a pass (or written by hand); the fusion pass reads only this.
    tile_sizes = opt_prop_def(DictionaryAttr)

    INPUTS: ClassVar[tuple[str, ...]] = (
        "grad", "input", "weight", "target_mask", "masked_target", "logits_max", "sum_exp_logits", "softmax",
    )
    OUTPUTS: ClassVar[tuple[str, ...]] = ("input_grad_out", "weight_grad_out")
    MIN_V_HIGH_PERFORMANCE: ClassVar[int] = 128
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("bt", "v", "h")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = _format(INPUTS, {"logits_max", "sum_exp_logits", "softmax"}, OUTPUTS)

    @property
    def high_performance(self) -> bool:
        return self.softmax is not None

    @classmethod
    def check(cls, c: Checker) -> None:
        c.prop_check("label_smoothing", c.prop("label_smoothing") == 0.0, "0 (the only supported value)")
        hp = c.present("softmax")
        given = [n for n in ("logits_max", "sum_exp_logits") if c.present(n)]
        if not hp and len(given) < 2:
            c.fail(
                f"needs {c.word} 'softmax' (high-performance mode) or both 'logits_max' and "
                f"'sum_exp_logits' (memory-saving mode), got {f'only {given[0]!r}' if given else 'none of them'}"
            )
        stats = ("logits_max", "sum_exp_logits") if not hp else ()
        for name in ("grad", "target_mask", "masked_target", *stats):
            c.rank(name, [1])
        for name in ("input", "weight", "input_grad_out", "weight_grad_out", *(("softmax",) if hp else ())):
            c.rank(name, [2])
        c.element("grad", ["float32"])
        c.element("input", FLOATS)
        for name in ("weight", "input_grad_out", "weight_grad_out"):
            c.same_element(name, "input")
        mask_t = c.element("target_mask", ["bool", "uint8"])
        c.element("masked_target", ["int32", "int64"])
        for name in (*stats, *(("softmax",) if hp else ())):
            c.element(name, ["float32"])

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
        if hp:
            c.shape_is("softmax", [bt, v], "(BT, V)")
            if v is not None and v < cls.MIN_V_HIGH_PERFORMANCE:
                c.operand_fail("weight", f"must have at least {cls.MIN_V_HIGH_PERFORMANCE} rows (V) in high-performance mode, got {v}")
        c.shape_is("input_grad_out", [bt, h], "(BT, H)")
        c.shape_is("weight_grad_out", [v, h], "(V, H)")


@irdl_op_definition
class EmbeddingDenseBackwardOp(GradOp):
    """out[r] = Σ_{i: indices[i] = r ≠ padding_idx} s_i·grad[i], s_i = 1/count(r) with scale_grad_by_freq."""

    name = "grad.embedding_dense_backward"
    grad = operand_def()
    indices = operand_def()
    out = operand_def()
    num_weights = prop_def(IntegerAttr[I64])
    padding_idx = prop_def(IntegerAttr[I64], default_value=_i64(-1))
    scale_grad_by_freq = prop_def(BoolAttr, default_value=_bool(False))
    tile_sizes = opt_prop_def(DictionaryAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("rows", "d")

    INPUTS: ClassVar[tuple[str, ...]] = ("grad", "indices")
    OUTPUTS: ClassVar[tuple[str, ...]] = ("out",)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _format(INPUTS, set(), OUTPUTS)

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


@irdl_op_definition
class NLLLossBackwardOp(GradOp):
    """Gradient of NLL loss w.r.t. its log-probabilities: −w[y]·scale at (t, y_t), zero elsewhere."""

    name = "grad.nll_loss_backward"
    grad_output = operand_def()
    self = operand_def()
    target = operand_def()
    weight = operand_def()
    total_weight = operand_def()
    out = operand_def()
    reduction = prop_def(IntegerAttr[I64], default_value=_i64(1))
    ignore_index = prop_def(IntegerAttr[I64], default_value=_i64(-100))
    tile_sizes = opt_prop_def(DictionaryAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("rows", "c")

    INPUTS: ClassVar[tuple[str, ...]] = ("grad_output", "self", "target", "weight", "total_weight")
    OUTPUTS: ClassVar[tuple[str, ...]] = ("out",)
    irdl_options = (ParsePropInAttrDict(),)
    assembly_format = _format(INPUTS, set(), OUTPUTS)

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


@irdl_op_definition
class ApplyFusedEmaAdamOp(GradOp):
    """One Adam (mode 0, L2) or AdamW (mode 1) step on var, m, v, then s ← d·s + (1 − d)·var'; in place.

    The float hyper-parameters are properties, or, when the optional `hyperparameters` operand
    (float32 [lr, ema_decay, beta1, beta2, eps, weight_decay]) is given, run-time values: one
    kernel then serves a learning-rate schedule or an EMA warm-up without recompiling.
    """

    name = "grad.apply_fused_ema_adam"
    grad = operand_def()
    step = operand_def()
    hyperparameters = opt_operand_def()
    var = operand_def()
    m = operand_def()
    v = operand_def()
    s = operand_def()
    lr = prop_def(FloatAttr[Float64Type], default_value=_f64(1e-3))
    ema_decay = prop_def(FloatAttr[Float64Type], default_value=_f64(0.9999))
    beta1 = prop_def(FloatAttr[Float64Type], default_value=_f64(0.9))
    beta2 = prop_def(FloatAttr[Float64Type], default_value=_f64(0.999))
    eps = prop_def(FloatAttr[Float64Type], default_value=_f64(1e-8))
    mode = prop_def(IntegerAttr[I64], default_value=_i64(1))
    bias_correction = prop_def(BoolAttr, default_value=_bool(True))
    weight_decay = prop_def(FloatAttr[Float64Type], default_value=_f64(0.0))
    tile_sizes = opt_prop_def(DictionaryAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)

    INPUTS: ClassVar[tuple[str, ...]] = ("grad", "step", "hyperparameters")
    OUTPUTS: ClassVar[tuple[str, ...]] = ("var", "m", "v", "s")
    # The order of the values in the `hyperparameters` operand.
    HYPERPARAMETER_ORDER: ClassVar[tuple[str, ...]] = ("lr", "ema_decay", "beta1", "beta2", "eps", "weight_decay")
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = _format(INPUTS, {"hyperparameters"}, OUTPUTS)

    HYPERPARAMETERS: ClassVar[Mapping[str, tuple[str, object]]] = {
        "lr": (">= 0", lambda x: x >= 0),
        "eps": (">= 0", lambda x: x >= 0),
        "beta1": ("in [0, 1)", lambda x: 0 <= x < 1),
        "beta2": ("in [0, 1)", lambda x: 0 <= x < 1),
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


@irdl_op_definition
class BinaryCrossEntropyGradOp(GradOp):
    """dx = u·w·(x − y)/max(x(1 − x), 1e-12), u = dloss (none), dloss/N (mean) or dloss (sum)."""

    name = "grad.binary_cross_entropy_grad"
    input_x = operand_def()
    input_y = operand_def()
    dloss = operand_def()
    weight = opt_operand_def()
    dx = operand_def()
    reduction = prop_def(IntegerAttr[I64], default_value=_i64(1))
    tile_sizes = opt_prop_def(DictionaryAttr)
    TILE_DIMS: ClassVar[tuple[str, ...]] = ("n",)

    INPUTS: ClassVar[tuple[str, ...]] = ("input_x", "input_y", "dloss", "weight")
    OUTPUTS: ClassVar[tuple[str, ...]] = ("dx",)
    EPSILON: ClassVar[float] = 1e-12
    irdl_options = (AttrSizedOperandSegments(as_property=True), ParsePropInAttrDict())
    assembly_format = _format(INPUTS, {"weight"}, OUTPUTS)

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


OPS: tuple[type[GradOp], ...] = (
    FusedLinearCrossEntropyLossGradOp,
    EmbeddingDenseBackwardOp,
    NLLLossBackwardOp,
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
)

Grad = Dialect("grad", list(OPS))
