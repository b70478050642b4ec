"""Pipeline.verify_each: after every pass (MLIR's -verify-each, the driver's way) or once at the
end (the runtime's default, and a Pipeline's): the same code either way, and broken IR is caught
either way."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from xdsl.dialects import func
from xdsl.passes import ModulePass

from npugrad import dialect
from npugrad.compiler import CompileError, Pipeline
from npugrad.lowering.to_llvm import LoweringError
from npugrad.runtime import specialize
from npugrad.runtime.specialize import OperandClass, build_module

F32 = "float32"


def flce_module():
    classes = {name: OperandClass(F32, shape, False) for name, shape in {
        "grad": (24,), "input": (24, 16), "weight": (40, 16), "target_mask": (24,), "masked_target": (24,),
        "logits_max": (24,), "sum_exp_logits": (24,), "input_grad_out": (24, 16), "weight_grad_out": (40, 16)}.items()}
    classes["target_mask"] = OperandClass("bool", (24,), False)
    classes["masked_target"] = OperandClass("int64", (24,), False)
    return build_module(dialect.FusedLinearCrossEntropyLossGradOp, classes, {})


def bce_module():
    classes = {name: OperandClass(F32, (None,), False) for name in ("input_x", "input_y", "dx")}
    classes["dloss"] = OperandClass(F32, (), False)
    return build_module(dialect.BinaryCrossEntropyGradOp, classes, {"reduction": 1})


@pytest.mark.parametrize("make", [flce_module, bce_module], ids=["flce", "bce"])
def test_the_code_does_not_depend_on_when_the_module_is_verified(make):
    each = Pipeline(verify_each=True).lower(make(), "llvm-ir")
    once = Pipeline(verify_each=False).lower(make(), "llvm-ir")
    assert each == once and "define" in once
    assert Pipeline(verify_each=True).key() == Pipeline(verify_each=False).key()


@dataclass(frozen=True)
class DropReturns(ModulePass):
    """A broken pass: leaves every function's block without its terminator."""

    name = "drop-returns"

    def apply(self, ctx, op) -> None:
        for ret in [o for o in op.walk() if isinstance(o, func.ReturnOp)]:
            ret.detach()
            ret.erase()


def broken(verify_each: bool) -> Pipeline:
    return Pipeline(verify_each=verify_each, loops_passes=[DropReturns(), *Pipeline().loops_passes])


def test_verify_each_stops_at_the_pass_that_broke_the_module():
    with pytest.raises(CompileError, match="terminator"):
        broken(True).lower(bce_module(), "loops")


def test_verifying_once_still_rejects_a_broken_module():
    with pytest.raises(CompileError, match="terminator"):
        broken(False).lower(bce_module(), "vectorized")  # xDSL verifies the last stage it prints
    with pytest.raises(LoweringError, match="could not parse"):
        broken(False).lower(bce_module(), "llvm-ir")  # the upstream parser verifies what it reads


def test_the_runtime_verifies_each_pass_on_request(monkeypatch):
    monkeypatch.setattr(specialize, "_DEFAULT_PIPELINES", {})
    assert specialize._pipeline_and_key(None)[0].verify_each is False
    given = Pipeline(target="npu-a2")  # a pipeline made in Python verifies once, as the default does
    assert given.verify_each is False and specialize._pipeline_and_key(given)[0].verify_each is False
    monkeypatch.setattr(specialize, "_DEFAULT_PIPELINES", {})
    monkeypatch.setenv("NPUGRAD_VERIFY_EACH", "1")
    assert specialize._pipeline_and_key(None)[0].verify_each is True
    on_request, key = specialize._pipeline_and_key(given)  # the given one too, with the same key
    assert on_request.verify_each is True and on_request.target == "npu-a2" and key == given.key()


@pytest.mark.parametrize("stage", [None, "llvm-ir"])
def test_the_driver_verifies_each_pass_as_mlir_opt_does(stage):
    from npugrad.tools.opt import NpugradOptMain

    assert NpugradOptMain(args=["-"])._pipeline(stage).verify_each is True


def test_each_op_is_verified_once_and_the_regions_structure_still_is():
    """compiler.verify checks each op once (not again inside its parent's nested verification);
    what xDSL's region and block verifiers add besides is still checked, at the op that owns
    the region: an empty block where a terminator is needed, and parent links."""
    from xdsl.dialects.builtin import ModuleOp
    from xdsl.ir import Block, Region

    from npugrad.compiler import verify

    empty = func.FuncOp("empty", ((), ()), Region(Block()))
    with pytest.raises(CompileError, match="func.func.*empty block.*terminator"):
        verify(ModuleOp([empty]))
    ok = func.FuncOp("ok", ((), ()), Region(Block([func.ReturnOp()])))
    module = ModuleOp([ok])
    verify(module)
    ok.body.block.first_op.parent = Block()  # a stale parent link, as a buggy rewrite would leave
    with pytest.raises(CompileError, match="Parent pointer"):
        verify(module)
