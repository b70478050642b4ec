"""The stage ladder: every stage of the pipeline can be reached, printed and fed back in.

    grad ──convert-grad-to-loops──▶ loops ──upstream MLIR──▶ llvm-dialect ──translate──▶ llvm-ir
         ──llvmlite O3──▶ asm / JIT ──▶ run

`grad` and `loops` are xDSL modules; from `llvm-dialect` on the IR is text produced by the
upstream MLIR bindings and llvmlite. Errors carry source locations (`file:line:col: error: ...`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.context import Context
from xdsl.dialects import get_all_dialects
from xdsl.dialects.builtin import FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Operation
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import ParseError, VerifyException

from npugrad.dialect import Grad
from npugrad.lowering.grad_to_loops import ConvertGradToLoopsPass
from npugrad.lowering.to_llvm import to_llvm_dialect, to_llvm_ir
from npugrad.runtime import jit

STAGES = ("grad", "loops", "llvm-dialect", "llvm-ir", "asm")
XDSL_STAGES = ("grad", "loops")


@dataclass(frozen=True)
class Diagnostic:
    file: str
    line: int
    column: int
    message: str
    source_line: str = ""

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        text = f"{where}: error: {self.message}"
        if self.source_line:
            text += f"\n{self.source_line}\n{' ' * (self.column - 1)}^"
        return text


class CompileError(Exception):
    """Input the compiler rejects; `diagnostics` say where and why."""

    def __init__(self, diagnostics: Sequence[Diagnostic]):
        self.diagnostics = list(diagnostics)
        super().__init__("\n".join(map(str, self.diagnostics)))


def make_context() -> Context:
    ctx = Context()
    for name, factory in get_all_dialects().items():
        if name != Grad.name:
            ctx.register_dialect(name, factory)
    ctx.register_dialect(Grad.name, lambda: Grad)
    return ctx


class _LocatingParser(Parser):
    """A parser that gives every op without a `loc(...)` the file:line:col it was parsed at."""

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        op = super().parse_operation()
        if isinstance(op.location, UnknownLoc):
            where = span.get_location()
            op.location = FileLineColLoc(StringAttr(where.file), IntAttr(where.line), IntAttr(where.col))
        return op


def _source_line(text: str, line: int) -> str:
    lines = text.splitlines()
    return lines[line - 1] if 0 < line <= len(lines) else ""


def parse(text: str, name: str = "<stdin>", ctx: Context | None = None) -> ModuleOp:
    """Parse and verify a module; CompileError with a located diagnostic if either fails."""
    ctx = ctx or make_context()
    try:
        module = _LocatingParser(ctx, text, name).parse_module()
    except ParseError as e:
        where = e.span.get_location()
        raise CompileError(
            [Diagnostic(name, where.line, where.col, e.msg, _source_line(text, where.line))]
        ) from None
    verify(module, text)
    return module


def _located(op: Operation, message: str, text: str) -> Diagnostic:
    loc = op.location
    if isinstance(loc, FileLineColLoc):
        line, col = loc.line.data, loc.column.data
        return Diagnostic(loc.filename.data, line, col, message, _source_line(text, line))
    return Diagnostic("<unknown>", 0, 0, f"{message}\n  in: {op}")


def verify(module: ModuleOp, text: str = "") -> None:
    """Verify op by op, innermost first, so the diagnostic points at the op that is wrong."""
    for op in module.walk(reverse=True):
        try:
            op.verify(verify_nested_ops=False)
        except VerifyException as e:
            raise CompileError([_located(op, str(e), text)]) from None
    try:
        module.verify()
    except VerifyException as e:
        raise CompileError([_located(module, str(e), text)]) from None


@dataclass
class Pipeline:
    """The passes between stages. `grad_passes` run on the grad stage before lowering to loops."""

    grad_passes: list[ModulePass] = field(default_factory=list)
    loops_passes: list[ModulePass] = field(default_factory=lambda: [ConvertGradToLoopsPass()])

    def key(self) -> tuple:
        """Identifies the pipeline in compile caches."""
        return tuple(repr(p) for p in (*self.grad_passes, *self.loops_passes))

    def to_xdsl_stage(self, module: ModuleOp, stage: str, ctx: Context | None = None) -> ModuleOp:
        """Run the xDSL passes in place up to `stage` (`grad` or `loops`)."""
        ctx = ctx or make_context()
        passes = list(self.grad_passes)
        if stage == "loops":
            passes += self.loops_passes
        for p in passes:
            p.apply(ctx, module)
            verify(module)
        return module

    def lower(self, module: ModuleOp, stage: str, ctx: Context | None = None) -> ModuleOp | str:
        """The IR at `stage`: an xDSL module for grad/loops, text for the later stages."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage '{stage}'; stages are {', '.join(STAGES)}")
        if stage in XDSL_STAGES:
            return self.to_xdsl_stage(module, stage, ctx)
        llvm_dialect = to_llvm_dialect(str(self.to_xdsl_stage(module, "loops", ctx)))
        if stage == "llvm-dialect":
            return llvm_dialect
        llvm_ir = to_llvm_ir(llvm_dialect)
        if stage == "llvm-ir":
            return llvm_ir
        return jit.assembly(llvm_ir)
