"""The stage ladder: every stage of the pipeline can be reached, printed and fed back in.

    train ──fuse-linear-cross-entropy-grad──▶ fused ──tile-for-target / distribute-over-cores──▶ tiled
    ──convert-train-to-loops, lower-npu-to-cpu──▶ loops ──vectorize-contractions, vectorize-elementwise-loops──▶ vectorized
    ──upstream MLIR──▶ llvm-dialect ──translate──▶ llvm-ir ──llvmlite O3──▶ asm / JIT ──▶ run

`train` to `vectorized` are xDSL modules; from `llvm-dialect` on the IR is text produced by the
upstream MLIR bindings and llvmlite. From `loops` on, every stage is read by the upstream tool of
its level (mlir-opt up to `llvm-dialect`, opt/llc for `llvm-ir`): `npu` ops, which upstream does
not know, end at `tiled`. Errors carry source locations (`file:line:col: error: ...`).
"""

from __future__ import annotations

import importlib
import struct
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from xdsl.context import Context
from xdsl.dialects import get_all_dialects
from xdsl.dialects.builtin import AnyFloat, BFloat16Type, FileLineColLoc, IntAttr, ModuleOp, StringAttr, UnknownLoc
from xdsl.ir import Attribute, Dialect, Operation, SSAValue
from xdsl.parser import Parser, UnresolvedOperand
from xdsl.passes import ModulePass
from xdsl.traits import NoTerminator
from xdsl.utils.exceptions import ParseError, VerifyException
from xdsl.utils.lexer import Span

from npugrad.diagnostics import PassFailure, source_location
from npugrad.targets import get as get_target

# The passes, the dialects and the lowering are imported where they are first used, not here:
# every npugrad-opt (every lit RUN line) imports this module, and many only parse and print or
# run a few passes. Printing examples/flce_grad.mlir took 0.76-0.82 s with everything imported
# here, 0.35-0.44 s without (Zen 3, alternating runs).

STAGES = ("train", "fused", "tiled", "loops", "vectorized", "llvm-dialect", "llvm-ir", "asm")
XDSL_STAGES = ("train", "fused", "tiled", "loops", "vectorized")


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
    """xDSL's dialects and npugrad's, each loaded when the parser first meets one of its ops or
    attributes: train and npu as the xdsl.universe entry point loads them, memref and llvm
    with the upstream ops the pinned xDSL lacks (dialect/upstream.py)."""
    from npugrad.universe import NPUGRAD_UNIVERSE

    ctx = Context()
    ours = {**NPUGRAD_UNIVERSE.all_dialects, "memref": _upstream("memref_dialect"),
            "x86vector": _upstream("x86vector_dialect"), "amx": _upstream("amx_dialect"), "llvm": _upstream("llvm_dialect")}
    for name, factory in get_all_dialects().items():
        if name not in ours:
            ctx.register_dialect(name, factory)
    for name, factory in ours.items():
        ctx.register_dialect(name, factory)
    return ctx


def _upstream(function: str) -> Callable[[], Dialect]:
    """A dialect factory that imports dialect/upstream.py when called and calls `function` there."""
    return lambda: getattr(importlib.import_module("npugrad.dialect.upstream"), function)()


class _LocatingParser(Parser):
    """A parser that gives every op without a `loc(...)` the file:line:col it was parsed at, and
    reports errors about an op as a whole (unknown name, ill-typed property) at that place too."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._ops: list[list] = []  # [first token, op name] of the ops being parsed, outermost first
        self._first_use: dict[str, Span] = {}  # SSA name -> where it was used before a definition

    def parse_module(self, *args, **kwargs) -> ModuleOp:
        try:
            return super().parse_module(*args, **kwargs)
        except ParseError as e:
            # xDSL reports values that are never defined at the end of the input.
            if not (self.forward_ssa_references and e.msg.startswith("values used but not defined")):
                raise
            name = next(iter(self.forward_ssa_references))
            raise ParseError(self._first_use[name], f"use of undefined value '%{name}'") from None

    def resolve_operand(self, operand: UnresolvedOperand, type: Attribute) -> SSAValue:
        if operand.operand_name not in self.ssa_values:
            self._first_use.setdefault(operand.operand_name, operand.span)
        return super().resolve_operand(operand, type)

    def _get_op_by_name(self, name: str) -> type[Operation]:
        self._ops[-1][1] = name
        if self.ctx.get_optional_op(name, dialect_stack=self._parser_state.dialect_stack) is None:
            # xDSL points at the token after the name, which may be on the next line.
            self.raise_error(f"Operation {name} is not registered", self._ops[-1][0])
        return super()._get_op_by_name(name)

    def _parse_tensor_literal_element(self):
        element = super()._parse_tensor_literal_element()
        if isinstance(element.value, int) and not isinstance(element.value, bool) \
                and element.span.text.lstrip("-").startswith(("0x", "0X")):
            return _HexFloatElement(element.is_negative, element.value, element.span)
        return element

    def parse_operation(self) -> Operation:
        span = self._current_token.span
        self._ops.append([span, None])
        try:
            op = super().parse_operation()
        except VerifyException as e:
            # A property of the wrong type is rejected while the op is built, before it exists.
            raise ParseError(span, _about_op(self._ops[-1][1], str(e))) from None
        finally:
            self._ops.pop()
        if isinstance(op.location, UnknownLoc):
            where = span.get_location()
            op.location = FileLineColLoc(StringAttr(where.file), IntAttr(where.line), IntAttr(where.col))
        return op


# The struct format of the float types whose bits a hexadecimal dense element can give (bfloat16:
# a float32's upper half).
_HEX_FLOATS = {16: "e", 32: "f", 64: "d"}


@dataclass
class _HexFloatElement(Parser._TensorLiteralElement):
    """An element of a dense literal written in hexadecimal (`dense<0xFF800000> : vector<16xf32>`,
    how xDSL's printer writes -inf, NaN and other values without a short decimal form): for a
    float element type, MLIR reads it as the value's bits. xDSL 0.74's parser read it as an
    integer value (4.29e9 for -inf), so printed IR with such a constant ran differently once
    read back."""

    def to_type(self, parser, type):
        if not isinstance(type, AnyFloat):
            return super().to_type(parser, type)
        if self.is_negative:
            parser.raise_error("hexadecimal float literal should not have a leading minus sign", at_position=self.span)
        width = type.bitwidth
        bits = int(self.value)
        if width == 16 and isinstance(type, BFloat16Type):
            fmt, bits, width = "f", bits << 16, 32
        elif width in _HEX_FLOATS:
            fmt = _HEX_FLOATS[width]
        else:
            parser.raise_error(f"hexadecimal float literal for {type} is not supported", at_position=self.span)
        if bits >> width:
            parser.raise_error(f"hexadecimal float literal does not fit in {type}", at_position=self.span)
        return struct.unpack(f"<{fmt}", bits.to_bytes(width // 8, "little"))[0]


def _about_op(name: str, message: str) -> str:
    """MLIR's form of an error about an op, `'name' op ...`, which xDSL's generic checks omit."""
    return message if message.startswith(f"'{name}' op ") else f"'{name}' op {message}"


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
        message = e.msg.strip()
        if e.span.start >= len(text):
            message = f"unexpected end of input ({message})"
        raise CompileError([Diagnostic(name, where.line, where.col, message, _source_line(text, where.line))]) from None
    verify(module, text, name)
    return module


def _located(op: Operation, message: str, text: str, name: str) -> Diagnostic:
    loc = source_location(op.location)
    if isinstance(loc, FileLineColLoc):
        line, col = loc.line.data, loc.column.data
        # An explicit loc(...) may point into another file: then `text` does not hold the line.
        source = _source_line(text, line) if loc.filename.data == name else ""
        return Diagnostic(loc.filename.data, line, col, message, source)
    return Diagnostic("<unknown>", 0, 0, f"{message}\n  in: {op}")


def verify(module: ModuleOp, text: str = "", name: str = "<stdin>") -> None:
    """Verify op by op, innermost first, so the diagnostic points at the op that is wrong; the
    train.* and npu.* attributes an op carries must be declared by the dialects and well typed.
    `text` and `name` are the source the module was parsed from, to quote the offending line."""
    from npugrad.dialect import verify_attributes

    for op in module.walk(reverse=True):
        try:
            op.verify(verify_nested_ops=False)
            verify_attributes(op)
            _verify_structure(op)
        except VerifyException as e:
            raise CompileError([_located(op, _about_op(op.name, str(e)), text, name)]) from None


def _verify_structure(op: Operation) -> None:
    """What xDSL's Region.verify and Block.verify check of the op's regions besides verifying
    the ops in them (which the walk above does, each once): parent links, and that a block of
    a single-block region that needs a terminator is not empty."""
    for region in op.regions:
        for block in region.blocks:
            if block.parent is not region:
                raise VerifyException("Parent pointer of block does not refer to containing region")
            if block.first_op is None and len(region.blocks) == 1 and not op.has_trait(NoTerminator):
                raise VerifyException(f"Operation {op.name} contains empty block in single-block region "
                                      "that expects at least a terminator")
            for inner in block.ops:
                if inner.parent is not block:
                    raise VerifyException("Parent pointer of operation does not refer to containing region")


def _pass(name: str, *args: object) -> ModulePass:
    """npugrad's pass of this name (npugrad.passes.ALL_PASSES, imported now) made with `args`."""
    from npugrad.passes import ALL_PASSES

    return ALL_PASSES[name]()(*args)


def _passes(*names: str) -> list[ModulePass]:
    """npugrad's passes of these names with their default options."""
    return [_pass(name) for name in names]


def _final_passes() -> list[ModulePass]:
    from xdsl.transforms.convert_linalg_to_loops import ConvertLinalgToLoopsPass

    return [ConvertLinalgToLoopsPass()]


@dataclass
class Pipeline:
    """The passes between stages:

        train ─(choose-tile-sizes)─ fuse-linear-cross-entropy-grad ─▶ fused
             ─ tile-for-target, check-capacity ─▶ tiled       (with a target)
             ─ distribute-over-cores ─▶ tiled                 (without: nothing tiled, work spread;
                                                  one core: read-weight-in-place alone)
             ─ convert-train-to-loops, lower-npu-to-cpu ─▶ loops   (contractions stay linalg.generic;
                                                     upstream dialects only, mlir-opt reads it)
             ─ vectorize-contractions, vectorize-elementwise-loops,
               convert-linalg-to-loops ─▶ vectorized   (what goes upstream)

    Without a `target` code is vectorised for `cpu` (the host, or a target file describing
    another CPU, whose instruction set the `asm` stage then prints); `vectorize=False` leaves it scalar,
    `distribute=False` keeps each op on one core. `fuse=False` keeps the linear cross-entropy
    gradient unfused: it then reaches `loops` through its reference lowering.

    `verify_each` (MLIR's -verify-each) verifies the module after every pass, so that a pass
    that breaks the IR is named; without it the module is verified once, after the last pass,
    by xDSL for the xDSL stages, by the upstream parser for the later ones. It does not change
    the code, only the time to compile: xDSL's verifier after every pass was a fifth of the
    compile time of the API's kernels (the samples of test_flce, test_tiled_flce and
    test_vectorized under py-spy, Emerald Rapids). `npugrad-opt` turns it on, as mlir-opt has
    it; a pipeline made in Python, like the runtime's default, verifies once unless given
    `verify_each=True` or run with NPUGRAD_VERIFY_EACH=1 (runtime/specialize.py).

    `observer`, if given, is called after every step with its name, the module (None after the
    upstream steps, whose IR is text) and its seconds: npugrad-opt's --time-passes and
    --print-between-passes.

    `line_tables` (npugrad-opt --line-tables; NPUGRAD_LINE_TABLES=1 for the API's kernels) keeps
    the ops' locations down to the machine code as line tables: the loops the passes label
    (IRBuilder.labelled: `logits.k`, the reduction loop of the logits GEMM's micro-kernel) name
    the instructions they became, and the others their source line. `!dbg` in the LLVM IR,
    `.loc` in the assembly, and bench/loop_profile.py names each hot loop by them. The code is
    the same instructions; only the object gains its .debug_line."""

    fuse: bool = True
    target: str | None = None  # "host", a shipped target's name, or a target file
    cpu: str = "host"  # what the untiled pipeline shapes its kernels for
    vectorize: bool = True
    distribute: bool = True
    fused_passes: list[ModulePass] = field(
        default_factory=lambda: _passes("fuse-linear-online-max-sum", "fuse-linear-cross-entropy-grad"))
    loops_passes: list[ModulePass] = field(default_factory=lambda: _passes("convert-train-to-loops", "lower-npu-to-cpu"))
    final_passes: list[ModulePass] = field(default_factory=_final_passes)
    verify_each: bool = field(default=False, compare=False)
    observer: Callable[[str, ModuleOp | None, float], None] | None = field(default=None, compare=False, repr=False)
    # False: tiles that do not fit are left for the report to say by how much (npugrad-opt --report).
    check_capacity: bool = field(default=True, compare=False)
    line_tables: bool = False

    def key(self) -> tuple:
        """Identifies the pipeline in compile caches."""
        target = get_target(self.target).key() if self.target is not None else None
        passes = (*self.fused_passes, *self.loops_passes, *self.final_passes)
        cpu = get_target(self.cpu).key()
        key = (self.fuse, target, cpu, self.vectorize, self.distribute, *(repr(p) for p in passes))
        return (*key, "line_tables") if self.line_tables else key

    def passes_to(self, stage: str) -> list[ModulePass]:
        order = XDSL_STAGES.index(stage)
        passes: list[ModulePass] = []
        if order >= XDSL_STAGES.index("fused"):
            if self.target is not None:
                passes.append(_pass("choose-tile-sizes", self.target))
            if self.fuse:
                passes += [self._fuse_options(p) for p in self.fused_passes]
        if order >= XDSL_STAGES.index("tiled"):
            if self.target is not None:
                passes.append(_pass("tile-for-target", self.target))
                if self.check_capacity:
                    passes.append(_pass("check-capacity", self.target))
            elif self.distribute:
                passes.append(_pass("distribute-over-cores", self.cpu))
            elif self.fuse:
                passes.append(_pass("read-weight-in-place"))
        if order >= XDSL_STAGES.index("loops"):
            passes += self.loops_passes
        if order >= XDSL_STAGES.index("vectorized"):
            if self.vectorize:
                target = self.target or self.cpu
                passes += [_pass("vectorize-contractions", target), _pass("vectorize-elementwise-loops", target)]
            passes += self.final_passes
        return passes

    def _fuse_options(self, p: ModulePass) -> ModulePass:
        """The fuse passes' options the pipeline decides, where left at their defaults: `cpu`
        (the tiles a pass sizes itself fit that CPU's caches) and, with no target to tile for,
        `wide_grad` (G in float32 for the CPU's micro-kernels; a target's units read it in the
        input type) and `balance_blocks` (token tiles even over the CPU's cores, whether or not
        the pipeline spreads the nest over them: the tiles, hence the sums, are the same)."""
        changes: dict[str, object] = {}
        if getattr(p, "cpu", None) == "host" and self.cpu != "host":
            changes["cpu"] = self.cpu
        if getattr(p, "wide_grad", None) is False and self.target is None:
            changes["wide_grad"] = True
        if getattr(p, "balance_blocks", None) == 0 and self.target is None:
            changes["balance_blocks"] = get_target(self.cpu).cores
        return replace(p, **changes) if changes else p

    def xdsl_pipeline(self, stage: str) -> str:
        """The xDSL passes up to `stage` as an `xdsl-opt -p` (or `npugrad-opt -p`) pipeline."""
        last = stage if stage in XDSL_STAGES else XDSL_STAGES[-1]
        return ",".join(str(p.pipeline_pass_spec()) for p in self.passes_to(last))

    def upstream_commands(self, stage: str) -> list[str]:
        """The upstream tools that take the `vectorized` stage to `stage`, one command each (a
        shell pipeline): what the bindings and llvmlite do in-process, but for npugrad's own exp
        (lowering/vector_math.py), which no upstream tool does: their `llvm.exp` calls libm."""
        from npugrad.lowering.to_llvm import TO_LLVM_PIPELINE_22

        commands = []
        if STAGES.index(stage) >= STAGES.index("llvm-dialect"):
            commands.append(f"mlir-opt --pass-pipeline='{TO_LLVM_PIPELINE_22}'")
        if STAGES.index(stage) >= STAGES.index("llvm-ir"):
            commands.append("mlir-translate --mlir-to-llvmir")
        if stage == "asm":
            cpu = get_target(self.cpu)
            flags = "-mcpu=native" if self.cpu == "host" or not cpu.llvm_cpu else f"-mcpu={cpu.llvm_cpu}"
            flags += f" -mattr={cpu.llvm_features}" if self.cpu != "host" and cpu.llvm_features else ""
            # LLVM unrolls only the loops the IR annotates (lowering/machine_code.py: its O3 runs
            # with the pipeline's loop_unrolling off, which is opt's -disable-loop-unrolling).
            commands += [f"opt -O3 -disable-loop-unrolling {flags}", f"llc -O3 {flags}"]
        return commands

    def to_xdsl_stage(self, module: ModuleOp, stage: str, ctx: Context | None = None, verify_last: bool = True) -> ModuleOp:
        """Run the xDSL passes in place up to `stage` (one of XDSL_STAGES). `verify_last=False`:
        whoever reads the result verifies it (the upstream parser does)."""
        ctx = ctx or make_context()
        passes = self.passes_to(stage)
        for p in passes:
            start = time.perf_counter()
            try:
                p.apply(ctx, module)
            except PassFailure as e:
                raise CompileError([_located(e.op, f"{p.name}: {e.message}", "", "")]) from None
            self.report_step(p.name, module, start)
            if self.verify_each:
                verify(module)
        if passes and verify_last and not self.verify_each:
            verify(module)
        return module

    def lower(self, module: ModuleOp, stage: str, ctx: Context | None = None) -> ModuleOp | str:
        """The IR at `stage`: an xDSL module up to `vectorized`, text for the later stages."""
        if stage not in STAGES:
            raise ValueError(f"unknown stage '{stage}'; stages are {', '.join(STAGES)}")
        if stage in XDSL_STAGES:
            return self.to_xdsl_stage(module, stage, ctx)
        from npugrad.lowering import machine_code  # llvmlite: only for what goes past the xDSL stages
        from npugrad.lowering.mlir_text import generic_text
        from npugrad.lowering.to_llvm import loops_to_llvm_ir, to_llvm_dialect
        from npugrad.lowering.vector_math import replace_exp

        # For the parser, not for reading: MLIR's generic form, printed in a fifth of xDSL's time.
        vectorized = generic_text(self.to_xdsl_stage(module, "vectorized", ctx, verify_last=False), self.line_tables)
        start = time.perf_counter()
        upstream = "upstream MLIR passes (mlir-opt --pass-pipeline)"
        if stage == "llvm-dialect":
            llvm_dialect = to_llvm_dialect(vectorized, self.line_tables)
            self.report_step(upstream, None, start)
            return llvm_dialect

        def lowered() -> None:  # the translation's time is from here
            nonlocal start
            self.report_step(upstream, None, start)
            start = time.perf_counter()

        # In the syntax of LLVM 22 (llvmlite's, and Debian's opt-22/llc-22/lli-22), not the bindings' newer one.
        llvm_ir = machine_code.to_llvmlite_syntax(loops_to_llvm_ir(vectorized, lowered, self.line_tables))
        # exp as straight-line vector code, not a libm call per lane (lowering/vector_math.py).
        cpu = get_target(self.cpu)
        llvm_ir = replace_exp(llvm_ir, fused=not cpu.lacks_feature("fma"))
        self.report_step("translation to LLVM IR (mlir-translate)", None, start)
        if stage == "llvm-ir":
            return llvm_ir
        start = time.perf_counter()
        try:
            asm = machine_code.assembly(llvm_ir, cpu.llvm_cpu, cpu.llvm_features)
        except machine_code.UnknownCpu as e:
            raise machine_code.UnknownCpu(f"{cpu.source}: {e}") from None
        self.report_step("LLVM O3 and code generation (llvmlite)", None, start)
        return asm

    def report_step(self, step: str, module: ModuleOp | None, start: float) -> None:
        """Tell the observer, if any, that `step` (begun at perf_counter() `start`) is done."""
        if self.observer is not None:
            self.observer(step, module, time.perf_counter() - start)
