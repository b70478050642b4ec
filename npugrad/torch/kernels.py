"""Every op of the `train` dialect as a PyTorch operator, `torch.ops.npugrad.<op>`, made from its
recipe: the schema from the op's operands and properties in the order of its API function
(`recipe.api()`), the implementation the API function itself (zero-copy, see interop/dlpack.py).

    torch.ops.npugrad.binary_cross_entropy_grad(x, y, dloss, None, 1)
    # schema: (Tensor input_x, Tensor input_y, Tensor dloss, Tensor? weight=None, int reduction=1) -> Tensor

Operands the op reads are `Tensor` (`Tensor?` if the op declares them optional), operands it
updates in place are mutated arguments (`Tensor(a!)`, nothing returned), operands it writes are
returned (`Tensor?` if optional: None when not asked for; the API's `*_out=` buffers are not
part of the schema). Properties are `int`, `bool` or `float` with the API's defaults (`int?` when
the default is None; a name in RESERVED takes a trailing underscore); an API switch that is
neither (`return_logits=False`) is a `bool`. A new op gets its operator with no code here; for
`torch.compile` it also needs its outputs' shapes in FAKE (else it runs eagerly only).

    torch.ops.npugrad.fused_linear_online_max_sum(x, w, t, 0, 300, return_logits=True)
    # (…, int vocab_end_index, *, float softcap=0.0, int? ignore_index=None, bool return_logits=False,
    #  bool return_sum_logits=False) -> (Tensor, Tensor, Tensor, Tensor, Tensor, Tensor?, Tensor?)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from xdsl.dialects.builtin import BoolAttr, FloatAttr, IntegerAttr, f64, i64
from xdsl.context import Context
from xdsl.irdl import IRDLOperation, OptOperandDef

from npugrad.dialect import TrainOp
from npugrad.recipes import OpRecipe, public_recipes

NAMESPACE = "npugrad"

# The outputs of an op for torch's fake tensors (torch.compile, meta): (shape, dtype) by output,
# from the arguments by name.
FAKE: dict[str, Callable[[Mapping[str, object]], list[tuple[tuple[int, ...], torch.dtype]]]] = {
    "binary_cross_entropy_grad": lambda a: [(a["input_x"].shape, a["input_x"].dtype)],
    "fused_linear_cross_entropy_loss_grad": lambda a: [
        (a["input"].shape, torch.float32 if a["float32_input_grad"] else a["input"].dtype),
        (a["weight"].shape, a["input"].dtype)],
    "embedding_dense_backward": lambda a: [((a["num_weights"], a["grad"].shape[-1]), a["grad"].dtype)],
    "nll_loss_backward": lambda a: [(a["self"].shape, a["self"].dtype)],
    "apply_fused_ema_adam": lambda a: [],
    "fused_linear_online_max_sum": lambda a: [
        *[((a["input"].shape[0],), torch.float32)] * 3,
        ((-(-a["input"].shape[0] // 8),), torch.uint8),
        (a["target"].shape, a["target"].dtype),
        ((a["input"].shape[0], a["weight"].shape[0]),
         torch.float16 if a["logits_block"] else torch.float32 if a["float32_logits"] else a["input"].dtype)
        if a["return_logits"] or a["logits_block"] else None,
        ((a["input"].shape[0],), torch.float32) if a["return_sum_logits"] else None,
        ((a["input"].shape[0], -(-a["weight"].shape[0] // a["logits_block"])), torch.float32)
        if a["logits_block"] else None],
    "fused_cross_entropy_loss_with_max_sum": lambda a: [
        (a["logits_max"].shape, torch.float32),
        None if a["vocab_parallel_logits"] is None else (a["vocab_parallel_logits"].shape, torch.float32)],
}


# Parameter names torch's functionalization (torch.compile) passes arguments of its own by: an
# operator's parameter of that name takes a trailing underscore in the schema.
RESERVED = frozenset({"mode"})


class BindingError(TypeError):
    """An API parameter the schema cannot express (neither an operand nor a property)."""


@dataclass(frozen=True)
class Parameter:
    name: str  # the API's
    kind: str  # "Tensor", "Tensor?", "Tensor(a!)", "int", "int?", "bool", "float"
    default: object = inspect.Parameter.empty
    keyword_only: bool = False

    @property
    def schema_name(self) -> str:
        return f"{self.name}_" if self.name in RESERVED else self.name

    def schema(self) -> str:
        if self.default is inspect.Parameter.empty:
            return f"{self.kind} {self.schema_name}"
        return f"{self.kind} {self.schema_name}={_literal(self.default)}"


def _literal(value) -> str:
    if value is None:
        return "None"
    if isinstance(value, bool):
        return str(value)
    return repr(value)


def _property_type(op_cls: type[IRDLOperation], name: str) -> str:
    constr = op_cls.get_irdl_definition().properties[name].constr
    for kind, sample in (("bool", BoolAttr.from_bool(True)), ("int", IntegerAttr(0, i64)), ("float", FloatAttr(0.0, f64))):
        try:
            constr.verify(sample, _CONTEXT)
        except Exception:  # noqa: BLE001 (xDSL raises VerifyException, or a subclass)
            continue
        return kind
    raise BindingError(f"'{op_cls.name}': property '{name}' has a type torch.library cannot take ({constr})")


_CONTEXT = Context()


def parameters(recipe: OpRecipe) -> list[Parameter]:
    """The operator's parameters, in the order of the op's API function."""
    op_cls: type[TrainOp] = recipe.op
    roles = op_cls.operand_roles()
    optional = {name for name, d in op_cls.get_irdl_definition().operands if isinstance(d, OptOperandDef)}
    props = op_cls.get_irdl_definition().properties
    result = []
    for p in inspect.signature(recipe.api()).parameters.values():
        keyword = p.kind is inspect.Parameter.KEYWORD_ONLY
        if p.name in roles:
            role = roles[p.name]
            kind = "Tensor(a!)" if role == "inout" else "Tensor?" if p.name in optional or p.default is None else "Tensor"
            if role == "out":
                continue
            # torch.library takes no keyword-only tensor: the API's come last of the positional ones.
            result.append(Parameter(p.name, kind, None if kind == "Tensor?" else inspect.Parameter.empty))
        elif p.name in props:
            kind = _property_type(op_cls, p.name) + ("?" if p.default is None else "")
            result.append(Parameter(p.name, kind, p.default, keyword))
        elif keyword and (p.name == "out" or p.name.endswith("_out")) and p.default is None:  # a buffer for an output
            continue
        elif isinstance(p.default, bool):  # a switch of the API (return_logits=False)
            result.append(Parameter(p.name, "bool", p.default, keyword))
        else:
            raise BindingError(f"{recipe.api().__name__}: parameter '{p.name}' is neither an operand nor a property "
                               f"of '{op_cls.name}'")
    result.sort(key=lambda p: p.keyword_only)
    # Aliasing annotations need distinct names per mutated argument.
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    return [Parameter(p.name, f"Tensor({next(letters)}!)", p.default, p.keyword_only) if p.kind == "Tensor(a!)"
            else p for p in result]


def schema(recipe: OpRecipe) -> str:
    optional = {name for name, d in recipe.op.get_irdl_definition().operands if isinstance(d, OptOperandDef)}
    outputs = ["Tensor?" if n in optional else "Tensor" for n, r in recipe.op.operand_roles().items() if r == "out"]
    returns = "()" if not outputs else outputs[0] if len(outputs) == 1 else f"({', '.join(outputs)})"
    params = parameters(recipe)
    listed = [p.schema() for p in params if not p.keyword_only]
    if any(p.keyword_only for p in params):
        listed += ["*", *(p.schema() for p in params if p.keyword_only)]
    return f"({', '.join(listed)}) -> {returns}"


def _binder(params: list[Parameter]):
    """bind(args, kwargs) -> the API's arguments by name, from the operator's; the tables it
    reads are built once per operator, not on every call."""
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    order = tuple(p.name for p in params)
    names = {p.schema_name: p.name for p in params}

    def bind(args: tuple, kwargs: dict) -> dict[str, object]:
        values = dict(defaults)
        values.update(zip(order, args))
        values.update({names[k]: v for k, v in kwargs.items()})
        return values

    return bind


def register(recipe: OpRecipe) -> torch.library.CustomOpDef:
    """`torch.ops.npugrad.<op>`, running the op's API function."""
    name = recipe.op.short_name()
    params = parameters(recipe)
    api = recipe.api()
    mutated = tuple(p.name for p in params if p.kind.endswith("!)"))
    bind = _binder(params)

    def run(*args, **kwargs):
        values = bind(args, kwargs)
        result = api(**values)
        return None if mutated else result

    op = torch.library.custom_op(f"{NAMESPACE}::{name}", run, mutates_args=mutated, schema=schema(recipe))
    if name in FAKE:
        shapes = FAKE[name]

        def fake(*args, **kwargs):
            values = bind(args, kwargs)
            outs = [None if o is None else torch.empty(o[0], dtype=o[1]) for o in shapes(values)]
            return None if mutated else outs[0] if len(outs) == 1 else tuple(outs)

        op.register_fake(fake)
    return op


KERNELS: dict[str, torch.library.CustomOpDef] = {r.op.short_name(): register(r) for r in public_recipes().values()}
