"""Every op of the `train` dialect as a PyTorch operator, `torch.ops.npugrad.<op>`, made from its
recipe: the schema from the op's operands and properties in the order of its API function
(`recipe.api()`), the implementation the API function itself (zero-copy, see interop/dlpack.py).

    torch.ops.npugrad.binary_cross_entropy_grad(x, y, dloss, None, 1)
    # schema: (Tensor input_x, Tensor input_y, Tensor dloss, Tensor? weight=None, int reduction=1) -> Tensor

Operands the op reads are `Tensor` (`Tensor?` if the op declares them optional), operands it
updates in place are mutated arguments (`Tensor(a!)`, nothing returned), operands it writes are
returned (the API's `out=` parameters are not part of the schema). Properties are `int`, `bool`
or `float` with the API's defaults (a name in RESERVED takes a trailing underscore). A new op gets its operator with no code here; for
`torch.compile` it also needs its outputs' shapes in FAKE (else it runs eagerly only).
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
from npugrad.recipes import OpRecipe, recipes

NAMESPACE = "npugrad"

# The outputs of an op for torch's fake tensors (torch.compile, meta): (shape, dtype) by output,
# from the arguments by name.
FAKE: dict[str, Callable[[Mapping[str, object]], list[tuple[tuple[int, ...], torch.dtype]]]] = {
    "binary_cross_entropy_grad": lambda a: [(a["input_x"].shape, a["input_x"].dtype)],
    "fused_linear_cross_entropy_loss_grad": lambda a: [(a["input"].shape, a["input"].dtype),
                                                       (a["weight"].shape, a["input"].dtype)],
    "embedding_dense_backward": lambda a: [((a["num_weights"], a["grad"].shape[-1]), a["grad"].dtype)],
    "nll_loss_backward": lambda a: [(a["self"].shape, a["self"].dtype)],
    "apply_fused_ema_adam": lambda a: [],
}


# Parameter names torch's functionalization (torch.compile) passes arguments of its own by: an
# operator's parameter of that name takes a trailing underscore in the schema.
RESERVED = frozenset({"mode"})


class BindingError(TypeError):
    """An API parameter the schema cannot express (neither an operand nor a property)."""


@dataclass(frozen=True)
class Parameter:
    name: str  # the API's
    kind: str  # "Tensor", "Tensor?", "Tensor(a!)", "int", "bool", "float"
    default: object = inspect.Parameter.empty

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
        if p.kind is inspect.Parameter.KEYWORD_ONLY:  # outputs given by the caller (out=...)
            continue
        if p.name in roles:
            role = roles[p.name]
            kind = "Tensor(a!)" if role == "inout" else "Tensor?" if p.name in optional or p.default is None else "Tensor"
            if role == "out":
                continue
            result.append(Parameter(p.name, kind, None if kind == "Tensor?" else inspect.Parameter.empty))
        elif p.name in props:
            result.append(Parameter(p.name, _property_type(op_cls, p.name), p.default))
        else:
            raise BindingError(f"{recipe.api().__name__}: parameter '{p.name}' is neither an operand nor a property "
                               f"of '{op_cls.name}'")
    # Aliasing annotations need distinct names per mutated argument.
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    return [Parameter(p.name, f"Tensor({next(letters)}!)", p.default) if p.kind == "Tensor(a!)" else p for p in result]


def schema(recipe: OpRecipe) -> str:
    outputs = [n for n, r in recipe.op.operand_roles().items() if r == "out"]
    returns = "()" if not outputs else "Tensor" if len(outputs) == 1 else f"({', '.join(['Tensor'] * len(outputs))})"
    return f"({', '.join(p.schema() for p in parameters(recipe))}) -> {returns}"


def _bind(params: list[Parameter], args: tuple, kwargs: dict) -> dict[str, object]:
    """The API's arguments by name, from the operator's."""
    values = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    values.update(zip((p.name for p in params), args))
    names = {p.schema_name: p.name for p in params}
    values.update({names[k]: v for k, v in kwargs.items()})
    return values


def register(recipe: OpRecipe) -> torch.library.CustomOpDef:
    """`torch.ops.npugrad.<op>`, running the op's API function."""
    name = recipe.op.short_name()
    params = parameters(recipe)
    api = recipe.api()
    mutated = tuple(p.name for p in params if p.kind.endswith("!)"))

    def run(*args, **kwargs):
        values = _bind(params, args, kwargs)
        result = api(**values)
        return None if mutated else result

    op = torch.library.custom_op(f"{NAMESPACE}::{name}", run, mutates_args=mutated, schema=schema(recipe))
    if name in FAKE:
        shapes = FAKE[name]

        def fake(*args, **kwargs):
            values = _bind(params, args, kwargs)
            outs = [torch.empty(s, dtype=d) for s, d in shapes(values)]
            return None if mutated else outs[0] if len(outs) == 1 else tuple(outs)

        op.register_fake(fake)
    return op


KERNELS: dict[str, torch.library.CustomOpDef] = {r.op.short_name(): register(r) for r in recipes().values()}
