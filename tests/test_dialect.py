"""The grad dialect from Python: random valid instances of every op print, parse and print again
to the same text (custom and generic form), and the ops' `check` rules give the API's messages."""

from __future__ import annotations

import io
import random
import re
from collections.abc import Callable

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.irdl import OptOperandDef
from xdsl.printer import Printer

from npugrad.compiler import parse
from npugrad.dialect import (
    OPS,
    ApplyFusedEmaAdamOp,
    BinaryCrossEntropyGradOp,
    EmbeddingDenseBackwardOp,
    FusedCrossEntropyLossWithMaxSumOp,
    FusedLinearOnlineMaxSumOp,
    FusedLinearCrossEntropyLossGradOp,
    NLLLossBackwardOp,
    TrainOp,
)
from npugrad.dialect.checks import Checker, SignatureError, SignatureTypeError
from npugrad.runtime.launch import defaults

FLOATS = ["f32", "f16", "bf16"]
Operands = dict[str, tuple[tuple[int, ...], str]]  # operand name -> (shape, element type)


def _f64(x: float) -> str:
    return f"{x!r} : f64"


def flce(r: random.Random) -> tuple[Operands, dict[str, str]]:
    bt, h = r.randint(0, 40), r.randint(1, 64)
    mode = r.choice(["high-performance", "memory-saving", "high-performance with statistics"])
    v = r.randint(128, 300) if mode.startswith("high") else r.randint(0, 300)
    dt, target = r.choice(FLOATS), r.choice(["i32", "i64"])
    mask = ((bt,), "i1") if r.random() < 0.5 else ((-(-bt // 8) + r.randint(0, 2),), "ui8")
    ops = {
        "grad": ((bt,), "f32"),
        "input": ((bt, h), dt),
        "weight": ((v, h), dt),
        "target_mask": mask,
        "masked_target": ((bt,), target),
        "input_grad_out": ((bt, h), dt),
        "weight_grad_out": ((v, h), dt),
    }
    if mode != "high-performance":
        ops |= {"logits_max": ((bt,), "f32"), "sum_exp_logits": ((bt,), "f32")}
    props = {}
    if mode.startswith("high"):
        ops["softmax"] = ((bt, v), "f32")
    if mode == "high-performance with statistics" and r.random() < 0.5:  # kept logits, perhaps compact
        props["softmax_is_logits"] = "true"
        block = r.choice([0, r.randint(1, 320)])
        if block:
            ops["softmax"] = ((bt, v), "f16")
            ops["softmax_block_max"] = ((bt, -(-v // block)), "f32")
            props["logits_block"] = f"{block} : i64"
    if r.random() < 0.3:
        props["tile_sizes"] = f"#train.tiles<bt = {r.randint(1, 64)}, v = {r.randint(1, 512)}>"
    if r.random() < 0.3:  # label smoothing over a global vocabulary of at least V
        props |= {"label_smoothing": _f64(r.uniform(0, 0.9)), "vocab_size": f"{v + r.randint(0, 1000)} : i64"}
    if mode == "memory-saving":
        for name in ("z_loss", "softcap"):
            if r.random() < 0.3:
                props[name] = _f64(r.uniform(0, 50))
    return ops, props


def online_max_sum(r: random.Random) -> tuple[Operands, dict[str, str]]:
    bt, h, v = r.randint(0, 40), r.randint(1, 64), r.randint(1, 300)
    dt, target = r.choice(FLOATS), r.choice(["i32", "i64"])
    start = r.randint(0, 5000)
    ops = {"input": ((bt, h), dt), "weight": ((v, h), dt), "target": ((bt,), target),
           "logits_max_local_out": ((bt,), "f32"), "sum_exp_logits_local_out": ((bt,), "f32"),
           "predicted_logits_local_out": ((bt,), "f32"), "target_mask_out": ((-(-bt // 8),), "ui8"),
           "masked_target_out": ((bt,), target)}
    props = {"vocab_start_index": f"{start} : i64", "vocab_end_index": f"{start + v} : i64"}
    block = r.choice([0, r.randint(1, 320)])  # compact logits (extension): E in float16, C per block
    if block or r.random() < 0.5:
        ops["vocab_parallel_logits_out"] = ((bt, v), "f16" if block else dt)
    if r.random() < 0.5:
        ops["sum_logits_local_out"] = ((bt,), "f32")
    if block:
        ops["logits_block_max_out"] = ((bt, -(-v // block)), "f32")
        props["logits_block"] = f"{block} : i64"
    if r.random() < 0.4:
        props["softcap"] = _f64(r.uniform(0, 50))
    if r.random() < 0.4:
        props["ignore_index"] = f"{r.randint(-200, 20)} : i64"
    if r.random() < 0.3:
        props["tile_sizes"] = f"#train.tiles<bt = {r.randint(1, 64)}, v = {r.randint(1, 512)}>"
    if r.random() < 0.4:  # the shard at run time (extension): the operand instead of the properties
        del props["vocab_start_index"], props["vocab_end_index"]
        ops = {**{k: ops[k] for k in ("input", "weight", "target")}, "vocab_range": ((2,), "i64"),
               **{k: t for k, t in ops.items() if k not in ("input", "weight", "target")}}
    return ops, props


def loss_with_max_sum(r: random.Random) -> tuple[Operands, dict[str, str]]:
    bt = r.randint(0, 40)
    ops = {name: ((bt,), "f32") for name in ("logits_max", "sum_exp_logits", "predicted_logits")}
    logits = r.random() < 0.5
    v = r.randint(1, 300)
    if logits:
        ops["vocab_parallel_logits"] = ((bt, v), r.choice(FLOATS))
    props = {}
    if r.random() < 0.4:
        ops["sum_logits"] = ((bt,), "f32")
        props |= {"label_smoothing": _f64(r.uniform(0, 0.9)), "vocab_size": f"{v + r.randint(0, 1000)} : i64"}
    if r.random() < 0.4:
        ops["target"] = ((bt,), r.choice(["i32", "i64"]))
        props["ignore_index"] = f"{r.randint(-200, 20)} : i64"
    ops["loss_out"] = ((bt,), "f32")
    if logits:
        ops["softmax_out"] = ((bt, v), "f32")
    if r.random() < 0.4:
        props["z_loss"] = _f64(r.uniform(0, 1e-2))
    return ops, props


def embedding(r: random.Random) -> tuple[Operands, dict[str, str]]:
    lead = tuple(r.randint(0, 4) for _ in range(r.randint(0, 3)))
    d = r.choice([0, r.randint(1, 32)])
    n = 1
    for x in lead:
        n *= x
    # Any shape with the same element count (any count at all when D = 0).
    indices = (n,) if r.random() < 0.5 else lead
    if d == 0 and r.random() < 0.5:
        indices = (r.randint(0, 9), r.randint(0, 3))
    num_weights = r.randint(0, 50)
    ops = {
        "grad": ((*lead, d), r.choice(FLOATS)),
        "indices": (indices, r.choice(["i32", "i64"])),
        "out": ((num_weights, d), r.choice(FLOATS)),
    }
    props = {"num_weights": f"{num_weights} : i64"}
    if r.random() < 0.5:
        props["padding_idx"] = f"{r.randint(-3, num_weights + 3)} : i64"
    if r.random() < 0.5:
        props["scale_grad_by_freq"] = r.choice(["true", "false"])
    return ops, props


def nll(r: random.Random) -> tuple[Operands, dict[str, str]]:
    n, c, dt = r.randint(0, 9), r.randint(0, 12), r.choice(FLOATS)
    reduction = r.randint(0, 2)
    two_d = r.random() < 0.6
    self_shape, target = ((n, c), (n,)) if two_d else ((c,), ())
    grad_output = (n,) if reduction == 0 and two_d else r.choice([(), (1,)])
    ops = {
        "grad_output": (grad_output, dt),
        "self": (self_shape, dt),
        "target": (target, r.choice(["i64", "i32", "ui8"])),
        "weight": ((c,), dt),
        "total_weight": (r.choice([(), (1,)]), dt),
        "out": (self_shape, dt),
    }
    props = {"reduction": f"{reduction} : i64"}
    if r.random() < 0.5:
        props["ignore_index"] = f"{r.randint(-200, 20)} : i64"
    return ops, props


def ema_adam(r: random.Random) -> tuple[Operands, dict[str, str]]:
    shape, dt = tuple(r.randint(0, 6) for _ in range(r.randint(1, 4))), r.choice(FLOATS)
    ops = {"grad": (shape, dt), "step": (r.choice([(1,), ()]), "i64")}
    if r.random() < 0.4:
        ops["hyperparameters"] = ((6,), "f32")
    ops |= {name: (shape, dt) for name in ("var", "m", "v", "s")}
    props = {}
    for name, value in [
        ("lr", r.uniform(0, 0.1)),
        ("ema_decay", r.uniform(0.9, 1.0)),
        ("beta1", r.uniform(0, 0.99)),
        ("beta2", r.uniform(0, 0.9999)),
        ("eps", r.uniform(0, 1e-6)),
        ("weight_decay", r.uniform(0, 0.2)),
    ]:
        if r.random() < 0.5:
            props[name] = _f64(value)
    if r.random() < 0.5:
        props["mode"] = f"{r.randint(0, 1)} : i64"
    if r.random() < 0.5:
        props["bias_correction"] = r.choice(["true", "false"])
    return ops, props


def bce(r: random.Random) -> tuple[Operands, dict[str, str]]:
    shape, dt = tuple(r.randint(0, 5) for _ in range(r.randint(0, 3))), r.choice(FLOATS)
    reduction = r.randint(0, 2)
    ops = {
        "input_x": (shape, dt),
        "input_y": (shape, dt),
        "dloss": (shape if reduction == 0 else r.choice([(), (1,)]), dt),
    }
    if r.random() < 0.5:
        ops["weight"] = (shape, dt)
    ops["dx"] = (shape, dt)
    # The property may be left out only where it holds the default (mean): dloss depends on it.
    return ops, {"reduction": f"{reduction} : i64"} if reduction != 1 or r.random() < 0.8 else {}


GENERATORS: dict[type[TrainOp], Callable[[random.Random], tuple[Operands, dict[str, str]]]] = {
    FusedLinearCrossEntropyLossGradOp: flce,
    FusedLinearOnlineMaxSumOp: online_max_sum,
    FusedCrossEntropyLossWithMaxSumOp: loss_with_max_sum,
    EmbeddingDenseBackwardOp: embedding,
    NLLLossBackwardOp: nll,
    ApplyFusedEmaAdamOp: ema_adam,
    BinaryCrossEntropyGradOp: bce,
}


def memref(shape: tuple, element: str) -> str:
    return f"memref<{''.join(f'{d}x' for d in shape)}{element}>"


def instance(op: type[TrainOp], r: random.Random) -> tuple[str, dict[str, str]]:
    """A function holding one valid `op`, some dimensions made dynamic (the verifier then
    cannot check them), in the custom form; and its non-default properties."""
    ops, props = GENERATORS[op](r)
    types = {
        name: memref(tuple("?" if r.random() < 0.25 else d for d in shape), element)
        for name, (shape, element) in ops.items()
    }
    args = ", ".join(f"%{name}: {t}" for name, t in types.items())
    roles = op.operand_roles()
    operands = [f"{name}(%{name} : {types[name]})" for name, role in roles.items() if role == "in" and name in types]
    operands += ["->", *(f"{name}(%{name} : {types[name]})" for name, role in roles.items()
                        if role != "in" and name in types)]
    attrs = f" {{{', '.join(f'{k} = {v}' for k, v in props.items())}}}" if props else ""
    return f"func.func @f({args}) {{\n  {op.name} {' '.join(operands)}{attrs}\n  func.return\n}}\n", props


def generic(module: ModuleOp) -> str:
    out = io.StringIO()
    Printer(stream=out, print_generic_format=True).print_op(module)
    return out.getvalue()


def the_op(module: ModuleOp, op: type[TrainOp]) -> TrainOp:
    [found] = [o for o in module.walk() if isinstance(o, op)]
    return found


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name())
@pytest.mark.parametrize("seed", range(25))
def test_round_trip(op, seed):
    text, props = instance(op, random.Random(f"{op.name}/{seed}"))
    first = str(parse(text))
    second = str(parse(first))
    assert first == second
    assert str(parse(generic(parse(first)))) == first
    # Non-default properties survive, exactly (floats included); defaults are elided.
    parsed = the_op(parse(first), op)
    for name, written in props.items():
        if written.endswith(": f64"):
            assert parsed.prop_float(name) == float(written.split(" : ")[0])
    for name, value in defaults(op).items():
        if name not in props:
            assert re.search(rf"\b{name} =", first) is None, f"default {name} = {value} printed"


@pytest.mark.parametrize("op", OPS, ids=lambda op: op.short_name())
def test_optional_operands_present_and_absent(op):
    """Across the random instances, every optional operand occurs both present and absent."""
    optional = {name for name, d in op.get_irdl_definition().operands if isinstance(d, OptOperandDef)}
    seen: dict[str, set[bool]] = {name: set() for name in optional}
    for seed in range(25):
        ops, _ = GENERATORS[op](random.Random(f"{op.name}/{seed}"))
        for name in optional:
            seen[name].add(name in ops)
    assert all(v == {True, False} for v in seen.values()), seen


# -- the rules themselves, on concrete shapes as the Python API sees them -------------------------


def check(op: type[TrainOp], operands: Operands, props: dict | None = None, display: dict | None = None) -> None:
    """Run `op`'s rules the way the API does: concrete shapes, NumPy dtype names, 'parameter'."""
    shapes = {name: shape for name, (shape, _) in operands.items()}
    dtypes = {name: dtype for name, (_, dtype) in operands.items()}
    op.check(Checker(f"{op.short_name()}:", "parameter", shapes, dtypes, {**defaults(op), **(props or {})}, display))


def flce_operands(bt=8, h=4, v=128, mask=None, mode="memory-saving") -> Operands:
    ops = {
        "grad": ((bt,), "float32"),
        "input": ((bt, h), "bfloat16"),
        "weight": ((v, h), "bfloat16"),
        "target_mask": mask or ((bt,), "bool"),
        "masked_target": ((bt,), "int64"),
        "input_grad_out": ((bt, h), "bfloat16"),
        "weight_grad_out": ((v, h), "bfloat16"),
    }
    if mode == "memory-saving":
        return ops | {"logits_max": ((bt,), "float32"), "sum_exp_logits": ((bt,), "float32")}
    return ops | {"softmax": ((bt, v), "float32")}


def test_flce_packed_mask_length():
    check(FusedLinearCrossEntropyLossGradOp, flce_operands(bt=17, mask=((3,), "uint8")))
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "fused_linear_cross_entropy_loss_grad: parameter 'target_mask' (bit-packed uint8) needs at least ceil(BT/8) = 3 bytes, got 2"
        ),
    ):
        check(FusedLinearCrossEntropyLossGradOp, flce_operands(bt=17, mask=((2,), "uint8")))


def test_flce_small_vocabulary_only_in_high_performance_mode():
    check(FusedLinearCrossEntropyLossGradOp, flce_operands(v=1))
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "fused_linear_cross_entropy_loss_grad: parameter 'weight' must have at least 128 rows (V) in high-performance mode, got 127"
        ),
    ):
        check(FusedLinearCrossEntropyLossGradOp, flce_operands(v=127, mode="high-performance"))


def test_flce_messages_use_the_callers_names():
    operands = flce_operands()
    operands["input_grad_out"] = ((8, 5), "bfloat16")
    with pytest.raises(
        SignatureError, match=re.escape("parameter 'grad_input' must have shape (BT, H) = (8, 4), got (8, 5)")
    ):
        check(FusedLinearCrossEntropyLossGradOp, operands, display={"input_grad_out": "grad_input"})


def test_embedding_count_check_is_skipped_for_d_zero():
    grad_shape = ((4, 5, 0), "float32")
    check(
        EmbeddingDenseBackwardOp,
        {"grad": grad_shape, "indices": ((7,), "int64"), "out": ((3, 0), "float32")},
        {"num_weights": 3},
    )
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "embedding_dense_backward: parameter 'indices' must have prod(grad.shape[:-1]) = 20 elements, got 7"
        ),
    ):
        check(
            EmbeddingDenseBackwardOp,
            {"grad": ((4, 5, 2), "float32"), "indices": ((7,), "int64"), "out": ((3, 2), "float32")},
            {"num_weights": 3},
        )


def test_embedding_index_dtype_is_a_type_error():
    with pytest.raises(
        SignatureTypeError,
        match=re.escape("embedding_dense_backward: parameter 'indices' must have dtype int32 or int64, got float32"),
    ):
        check(
            EmbeddingDenseBackwardOp,
            {"grad": ((2, 3), "float32"), "indices": ((2,), "float32"), "out": ((4, 3), "float32")},
            {"num_weights": 4},
        )


def nll_operands(self_shape=(6, 10), target=(6,), grad_output=()) -> Operands:
    c = self_shape[-1]
    return {
        "grad_output": (grad_output, "float16"),
        "self": (self_shape, "float16"),
        "target": (target, "int64"),
        "weight": ((c,), "float16"),
        "total_weight": ((), "float16"),
        "out": (self_shape, "float16"),
    }


def test_nll_one_dimensional_self_needs_a_scalar_target():
    check(NLLLossBackwardOp, nll_operands(self_shape=(10,), target=()))
    with pytest.raises(
        SignatureError,
        match=re.escape("nll_loss_backward: parameter 'target' must be 0-D when 'self' is 1-D, got rank 1"),
    ):
        check(NLLLossBackwardOp, nll_operands(self_shape=(10,), target=(10,)))


def test_nll_grad_output_follows_the_reduction():
    check(NLLLossBackwardOp, nll_operands(grad_output=(6,)), {"reduction": 0})
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "nll_loss_backward: parameter 'grad_output' must have shape (N,) = (6,) for reduction none, got ()"
        ),
    ):
        check(NLLLossBackwardOp, nll_operands(), {"reduction": 0})
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "nll_loss_backward: parameter 'grad_output' must have exactly one element (reduction mean/sum, or 1-D self), got shape (6,)"
        ),
    ):
        check(NLLLossBackwardOp, nll_operands(grad_output=(6,)), {"reduction": 2})


def ema_operands(step=(1,), step_dtype="int64") -> Operands:
    state = ((3, 4), "float32")
    return {"grad": state, "step": (step, step_dtype), "var": state, "m": state, "v": state, "s": state}


def test_ema_adam_step():
    check(ApplyFusedEmaAdamOp, ema_operands(step=()))
    with pytest.raises(
        SignatureError,
        match=re.escape("apply_fused_ema_adam: parameter 'step' must have exactly one element, got shape (2, 2)"),
    ):
        check(ApplyFusedEmaAdamOp, ema_operands(step=(2, 2)))
    with pytest.raises(
        SignatureTypeError, match=re.escape("apply_fused_ema_adam: parameter 'step' must have dtype int64, got float32")
    ):
        check(ApplyFusedEmaAdamOp, ema_operands(step_dtype="float32"))


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"mode": 2}, "property 'mode' must be 0 (L2, Adam) or 1 (decoupled decay, AdamW), got 2"),
        ({"beta1": 1.0}, "property 'beta1' must be in [0, 1) as a float32, got 1.0"),
        ({"beta2": 0.99999999}, "property 'beta2' must be in [0, 1) as a float32, got 0.99999999"),
        ({"lr": float("nan")}, "property 'lr' must be >= 0, got nan"),
        ({"weight_decay": -1e-3}, "property 'weight_decay' must be >= 0, got -0.001"),
    ],
)
def test_ema_adam_hyperparameters(props, message):
    with pytest.raises(SignatureError, match=re.escape(f"apply_fused_ema_adam: {message}")):
        check(ApplyFusedEmaAdamOp, ema_operands(), props)


def test_bce_dloss_follows_the_reduction():
    x = ((2, 3), "float32")
    check(
        BinaryCrossEntropyGradOp, {"input_x": x, "input_y": x, "dloss": ((2, 3), "float32"), "dx": x}, {"reduction": 0}
    )
    with pytest.raises(
        SignatureError,
        match=re.escape(
            "binary_cross_entropy_grad: parameter 'dloss' must have exactly one element for reduction mean/sum, got shape (6,)"
        ),
    ):
        check(
            BinaryCrossEntropyGradOp,
            {"input_x": x, "input_y": x, "dloss": ((6,), "float32"), "dx": x},
            {"reduction": 1},
        )


def test_bce_reduction():
    x = ((4,), "float16")
    with pytest.raises(
        SignatureError,
        match=re.escape("binary_cross_entropy_grad: property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got 3"),
    ):
        check(
            BinaryCrossEntropyGradOp, {"input_x": x, "input_y": x, "dloss": ((), "float16"), "dx": x}, {"reduction": 3}
        )


def test_dynamic_dimensions_are_left_to_the_launch():
    """None (a dynamic dimension) matches anything: the verifier leaves it to the run-time check."""
    x = ((None,), "float32")
    check(
        BinaryCrossEntropyGradOp, {"input_x": ((5,), "float32"), "input_y": x, "dloss": ((None,), "float32"), "dx": x}
    )
