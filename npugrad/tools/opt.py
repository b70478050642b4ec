"""npugrad-opt: an xdsl-opt with npugrad's dialects and passes, and a stage ladder.

    npugrad-opt examples/bce_grad.mlir --stage loops      # print the IR at a stage
    npugrad-opt examples/bce_grad.mlir --stage run        # compile, run on random inputs, check
    npugrad-opt bad.mlir --verify-diagnostics --split-input-file   # expected-error annotations
    npugrad-opt examples/bce_grad.mlir --target npu-a2 --report   # tiled IR, then its numbers
    npugrad-opt examples/bce_grad.mlir --emit-harness out/   # kernel.ll + a main for lli/clang, inputs

Errors are reported as `file:line:col: error: message` with a non-zero exit, never a traceback
(set NPUGRAD_TRACEBACK=1 to see one for an internal error).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Sequence
from importlib.metadata import version as _version
from io import StringIO
from pathlib import Path
from typing import NoReturn

from xdsl.printer import Printer
from xdsl.utils.exceptions import ArgSpecParseError, ParseError, VerifyException
from xdsl.xdsl_opt_main import xDSLOptMain

from npugrad import progress
from npugrad.compiler import STAGES, XDSL_STAGES, CompileError, Diagnostic, Pipeline, make_context, parse, verify
from npugrad.compiler import _located as located
from npugrad.diagnostics import PassFailure
from npugrad.lowering.to_llvm import LoweringError
from npugrad.passes import ALL_PASSES, OPTION_HELP
from npugrad.targets import get as get_target

# What only some invocations need (running a module, the report, the harness: the runtime,
# llvmlite, the analyses) is imported where it is used: every lit RUN line is a fresh process.

# MLIR's forms (mlir/lib/IR/Diagnostics.cpp): `expected-error {{...}}` on its own line,
# `@+N` / `@-N` lines below or above, `@below` / `@above` the next or previous line that is no
# `expected-` directive; a space may come before the `@`.
EXPECTED = re.compile(r"//\s*expected-error\s*(?:@\s*([+-]\d+|above|below))?\s*\{\{(.*?)\}\}")
# Any `expected-` directive: one EXPECTED does not read is an error, never no expectation at all.
DIRECTIVE = re.compile(r"//\s*expected-[a-z-]*\s*(?:@|\{\{)")


class NpugradOptMain(xDSLOptMain):
    """xdsl-opt's options, passes and `-p` pipelines, except that `-t/--target` names the
    hardware target (host, npu-a2, or a target file) rather than an output format: npugrad-opt
    always prints MLIR up to `llvm-dialect`, then LLVM IR or assembly."""

    version_format = f"npugrad-opt (npugrad {_version('npugrad')}), built on xDSL {{xdsl_version}}"

    def __init__(self, args: Sequence[str] | None = None):
        self.available_frontends = {}
        self.available_passes = {}
        self.available_targets = {}
        self.ctx = make_context()
        self.register_all_frontends()
        self.register_all_passes()
        # "resolve": our -t/--target replaces xdsl-opt's output-format option.
        arg_parser = _ArgumentParser(
            prog="npugrad-opt", description=__doc__.split("\n\n")[0], conflict_handler="resolve",
            formatter_class=argparse.RawDescriptionHelpFormatter)
        self.register_all_arguments(arg_parser)
        self.args = arg_parser.parse_args(args=args)
        progress.set_quiet(self.args.quiet)
        self.ctx.allow_unregistered = self.args.allow_unregistered_dialect
        for target in (self.args.target, self.args.cpu):
            if target not in (None, "host"):  # the host's description is read when a pass needs it
                get_target(target)  # a malformed target file is a usage error, before any input
        if self.args.compare and not self.args.report:
            raise ValueError("--compare needs --report")
        if self.args.report and self.args.target is None:
            raise ValueError("--report needs --target (host, npu-a2 or a target file)")
        if self.args.report and self.args.stage not in (None, "tiled"):
            raise ValueError(f"--report reports the tiled stage, not --stage {self.args.stage}")
        self.setup_pipeline()

    def register_all_passes(self) -> None:
        super().register_all_passes()
        for name, factory in ALL_PASSES.items():
            self.register_pass(name, factory)

    def register_all_arguments(self, parser: argparse.ArgumentParser) -> None:
        # npugrad's options and passes first, then xdsl-opt's, each group apart.
        arg_parser = parser.add_argument_group("npugrad's options")
        passes = parser.add_argument_group("npugrad's passes (-p 'name{option=value ...}', in pipeline order)")
        if isinstance(parser, _ArgumentParser):
            parser.passes_group = passes
        xdsl = parser.add_argument_group(f"xdsl-opt's options (xDSL {_version('xdsl')})")
        super().register_all_arguments(xdsl)
        theirs = ",".join(n for n in self.available_passes if n not in ALL_PASSES)
        for action in xdsl._group_actions:
            if "--passes" in action.option_strings:
                action.help = (f"a pass pipeline, e.g. 'fuse-linear-cross-entropy-grad{{tile_bt=32}},convert-train-to-loops': "
                               f"npugrad's passes above, or xDSL's: {theirs}")
            elif "--time-passes" in action.option_strings:
                action.help = "print each pass's time, on stdout before the output (with -p or --stage)"
            elif "--print-between-passes" in action.option_strings:
                action.help = "print the IR after each pass but the last, on stdout before the output (with -p or --stage)"
        arg_parser.add_argument(
            "-t",
            "--target",
            default=None,
            help="hardware target to tile for: host, npu-a2, or a target .toml file (default: no tiling)",
        )
        arg_parser.add_argument(
            "--cpu",
            default="host",
            help="without --target: the CPU to shape kernels for (vector width, registers, caches) and, at "
            "--stage asm, to print assembly for: host (default) or a target .toml file",
        )
        arg_parser.add_argument(
            "--report",
            action="store_true",
            help="print the tiled IR (implies --stage tiled; needs --target and static shapes for the "
            "bytes) followed by its report as // comment lines, so the output still parses: per memory "
            "level the local buffers and their total against the capacity, and the bytes moved between "
            "levels by all blocks, the work of every unit, the modelled time and what bounds it",
        )
        arg_parser.add_argument(
            "--compare",
            default=None,
            metavar="FILE",
            help="with --report: a second input, tiled the same way; prints the two tilings' figures side by "
            "side (function by function) instead of the IR",
        )
        arg_parser.add_argument(
            "--stage",
            choices=(*STAGES, "run"),
            default=None,
            help="stop the pipeline at this stage and print its IR ('run' compiles and runs the module)",
        )
        arg_parser.add_argument(
            "--no-fuse",
            action="store_true",
            help="lower the linear cross-entropy gradient with its unfused reference lowering",
        )
        arg_parser.add_argument(
            "--no-distribute",
            action="store_true",
            help="without --target, keep each op on one core (no distribute-over-cores)",
        )
        arg_parser.add_argument(
            "--line-tables",
            action="store_true",
            help="at the llvm-dialect, llvm-ir and asm stages, keep the ops' locations as line tables: the loops the "
            "passes label (logits.k: the logits GEMM's reduction loop) name their code (!dbg, .loc)",
        )
        arg_parser.add_argument(
            "--entry", default=None,
            help="function to run (--stage run) or to write the harness for (--emit-harness): it and the functions it calls "
            "are compiled, not the rest of the module")
        arg_parser.add_argument("--inputs", default=None, help=".npz with one array per argument (--stage run)")
        arg_parser.add_argument("--outputs", default=None, help="save all arguments after the run to this .npz")
        arg_parser.add_argument("--seed", type=int, default=0, help="seed for random inputs (--stage run)")
        arg_parser.add_argument(
            "-q",
            "--quiet",
            action="store_true",
            help="no progress messages (otherwise printed on stderr, when it is a terminal, for work that "
            "takes more than two seconds, e.g. compiling the linear cross-entropy kernels)",
        )
        arg_parser.add_argument(
            "--print-pipeline",
            action="store_true",
            help="print, instead of the IR, the commands that produce --stage's IR from the input: the xDSL "
            "passes as an `npugrad-opt -p` (or `xdsl-opt -p`) pipeline, then the upstream tools "
            "(`mlir-opt --pass-pipeline=...`, mlir-translate, opt, llc) for the later stages",
        )
        arg_parser.add_argument(
            "--emit-harness",
            metavar="DIR",
            default=None,
            help="write DIR/kernel.ll (the llvm-ir stage), DIR/harness.ll (a main that reads DIR/<arg>.bin, "
            "runs the function and writes DIR/<arg>.out.bin) and the inputs (--inputs, or valid random ones), "
            "so that lli or clang runs the kernel outside Python; prints the commands",
        )

    def _pipeline(self, stage: str | None = None) -> Pipeline:
        """The stage pipeline; given the `stage` it runs to, with --time-passes and
        --print-between-passes as xdsl-opt's -p pipelines have them."""
        pipeline = Pipeline(fuse=not self.args.no_fuse, target=self.args.target, cpu=self.args.cpu,
                            distribute=not self.args.no_distribute, check_capacity=not self.args.report,
                            line_tables=self.args.line_tables, verify_each=True)  # mlir-opt's -verify-each
        if stage is not None and (self.args.time_passes or self.args.print_between_passes):
            # The IR after the last pass of an xDSL stage is the output: not printed twice.
            last = len(pipeline.passes_to(stage)) if stage in XDSL_STAGES else None
            count = 0

            def observe(step: str, module, seconds: float) -> None:
                nonlocal count
                count += module is not None
                if self.args.time_passes:
                    print(f"Pass {step} took {seconds} seconds")
                if self.args.print_between_passes and module is not None and count != last:
                    print(f"IR after {step}:")
                    print(self._print(module)[0] + "\n\n")

            pipeline.observer = observe
        return pipeline

    def _print(self, prog) -> tuple[str, Printer]:
        out = StringIO()
        printer = Printer(stream=out, print_generic_format=self.args.print_op_generic,
                          print_properties_as_attributes=self.args.print_no_properties,
                          print_debuginfo=self.args.print_debuginfo)
        printer.print_op(prog)
        return out.getvalue() + "\n", printer

    def output_resulting_program(self, prog) -> str:
        return self._print(prog)[0]

    # -- one chunk ------------------------------------------------------------------------------
    def _process(self, text: str, name: str) -> str:
        module = parse(text, name, self.ctx)
        if self.args.passes:
            try:
                self.pipeline.apply(self.ctx, module)
            except PassFailure as e:  # located at its op, as in the stage pipeline
                raise CompileError([located(e.op, e.message, text, name)]) from None
            verify(module, text, name)
        if self.args.report:
            return self._report(module)
        stage = self.args.stage
        if self.args.print_pipeline:
            return self._pipeline_commands(stage or "train")
        if stage == "run" or self.args.emit_harness:
            from npugrad.tools import run as runner

            try:
                return self._harness(module) if self.args.emit_harness else self._run(module)
            except runner.RunError as e:
                if e.op is None:
                    raise
                raise CompileError([located(e.op, str(e), text, name)]) from None
        if stage is None:
            return self.output_resulting_program(module)
        with progress.slow(f"npugrad-opt: compiling {name} to {stage}"):
            result = self._pipeline(stage).lower(module, stage, self.ctx)
        return str(result) + "\n" if isinstance(result, str) else self.output_resulting_program(result)

    def _report(self, module) -> str:
        from npugrad.analysis.report import compare
        from npugrad.analysis.report import report as report_of

        tiled = self._pipeline("tiled").lower(module, "tiled", self.ctx)
        if self.args.compare:
            path = Path(self.args.compare)
            try:
                text = path.read_text()
            except OSError as e:
                raise ValueError(f"--compare: cannot read {path}: {e.strerror}") from None
            other = parse(text, str(path), self.ctx)  # parse verifies it
            other = self._pipeline("tiled").lower(other, "tiled", self.ctx)
            return compare(tiled, other, get_target(self.args.target), (self.get_input_name(), str(path)))
        text, printer = self._print(tiled)
        # The report names buffers as the printed IR does, including the numbers of unnamed values.
        return text + report_of(tiled, get_target(self.args.target), printer._ssa_values)

    def _run(self, module) -> str:
        from npugrad.runtime.executable import Executable, block_kernels
        from npugrad.tools import run as runner

        entry, specs, arrays, found = runner.prepare_inputs(module, self.args.entry, self.args.inputs, self.args.seed)
        runner.keep_entry(module, entry)
        sigs = {entry: specs}  # the one function run: its callees need no kernel of their own
        start = time.perf_counter()
        pipeline = self._pipeline("llvm-ir")
        with progress.slow(f"npugrad-opt: compiling @{entry}"):
            llvm_ir = pipeline.lower(module, "llvm-ir", self.ctx)
            jit_start = time.perf_counter()
            executable = Executable(llvm_ir, sigs, block_kernels(module))  # `module` is at the vectorized stage now
            pipeline.report_step("LLVM O3 and JIT (llvmlite)", None, jit_start)
        report = runner.run(executable, entry, specs, arrays, found, time.perf_counter() - start)
        if self.args.outputs:
            runner.save_npz(self.args.outputs, report.outputs)
        if not report.ok:
            raise CompileError([Diagnostic(self.get_input_name(), 0, 0, "results do not match the reference:\n" + str(report))])
        return str(report) + "\n"

    def _pipeline_commands(self, stage: str) -> str:
        pipeline = self._pipeline()
        last = "asm" if stage == "run" else stage
        source = shlex.quote(self.args.input_file or "-")
        # The passes carry the target as their own option: no --target, which xdsl-opt reads as
        # its output format (the README's `xdsl-opt -p` replay of this line).
        commands = [f"npugrad-opt {source} -p {shlex.quote(pipeline.xdsl_pipeline(last))}",
                    *pipeline.upstream_commands(last)]
        return " \\\n  | ".join(commands) + "\n"

    def _harness(self, module) -> str:
        from npugrad.runtime.executable import block_kernels
        from npugrad.tools import harness
        from npugrad.tools import run as runner

        entry, specs, arrays, _ = runner.prepare_inputs(module, self.args.entry, self.args.inputs, self.args.seed)
        runner.keep_entry(module, entry)
        with progress.slow(f"npugrad-opt: compiling @{entry}"):
            llvm_ir = self._pipeline("llvm-ir").lower(module, "llvm-ir", self.ctx)
        blocks = entry in block_kernels(module)  # `module` is at the vectorized stage now
        d = Path(self.args.emit_harness)
        harness.write(d, entry, specs, arrays, llvm_ir, blocks)
        return (f"// @{entry}: {d / 'kernel.ll'}, {d / 'harness.ll'}, inputs {d}/<argument>.bin "
                f"({', '.join(s.name for s in specs)})\n"
                f"// llvm-link-22 {d / 'kernel.ll'} {d / 'harness.ll'} -o {d / 'prog.bc'} && lli-22 {d / 'prog.bc'} {d}\n"
                f"// clang-22 -O2 {d / 'kernel.ll'} {d / 'harness.ll'} -o {d / 'prog'} && {d / 'prog'} {d}\n"
                f"// outputs: {d}/<argument>.out.bin, raw little-endian, C order\n")

    def _diagnose(self, text: str, name: str) -> tuple[str, list[Diagnostic]]:
        try:
            return self._process(text, name), []
        except CompileError as e:
            return "", e.diagnostics
        except (ParseError, VerifyException, LoweringError, ValueError, TypeError, OSError) as e:
            # Raised by a user pass pipeline or a later stage: no location beyond the file.
            return "", [Diagnostic(name, 0, 0, str(e).strip())]
        except RuntimeError as e:  # llvmlite's JitError, when it was imported to compile
            from npugrad.lowering.machine_code import JitError

            if not isinstance(e, JitError):
                raise
            return "", [Diagnostic(name, 0, 0, str(e).strip())]

    def run(self) -> None:
        f, _ = self.get_input_stream()
        source = f.read().decode("utf-8", "replace")
        f.close()
        name = self.get_input_name()
        chunks = source.split("// -----") if self.args.split_input_file else [source]
        out = self.prepare_output()
        failed = False
        line_offset = 0
        for i, chunk in enumerate(chunks):
            text = "\n" * line_offset + chunk  # keeps line numbers those of the whole file
            line_offset += chunk.count("\n")
            output, diagnostics = self._diagnose(text, name)
            if i > 0:
                out.write("// -----\n")
            out.write(output)
            if self.args.verify_diagnostics:
                for d in diagnostics:
                    print(d, file=out)
                failed |= not _check_expected(text, diagnostics, name)
            elif diagnostics:
                for d in diagnostics:
                    print(d, file=sys.stderr)
                failed = True
        out.flush()
        if out is not sys.stdout:
            out.close()
        sys.exit(1 if failed else 0)


class _ArgumentParser(argparse.ArgumentParser):
    """Lists npugrad's passes in --help, importing them only then (every RUN line's start-up
    would pay for importing all of them)."""

    passes_group: argparse._ArgumentGroup | None = None

    def format_help(self) -> str:
        if self.passes_group is not None and self.passes_group.description is None:
            self.passes_group.description = _passes_help()
        return super().format_help()


def _passes_help() -> str:
    """Each of npugrad's passes: what it does (its module's first sentence) and its options."""
    lines = []
    for name, factory in ALL_PASSES.items():
        cls = factory()
        doc = " ".join((sys.modules[cls.__module__].__doc__ or "").split("\n\n")[0].split())
        summary = doc.split(": ", 1)[1] if doc.startswith(name) and ": " in doc else doc
        summary = summary.split(". ")[0].rstrip(".") + "."
        lines.append(f"  {name}")
        lines += textwrap.wrap(summary, 96, initial_indent="      ", subsequent_indent="      ")
        for f in dataclasses.fields(cls):
            meaning = OPTION_HELP.get(f.name, "(no entry in npugrad/passes/__init__.py: OPTION_HELP)")
            lines.append(f"      {f.name}={f.default}: {meaning}")
    return "\n".join(lines)


def _check_expected(text: str, diagnostics: list[Diagnostic], name: str) -> bool:
    """MLIR's -verify-diagnostics: every `expected-error` is produced on its line, and no other."""
    expected = []
    lines = text.splitlines()
    plain = [n for n, line in enumerate(lines, start=1) if not DIRECTIVE.search(line)]  # lines @above/@below name
    for number, line in enumerate(lines, start=1):
        found = list(EXPECTED.finditer(line))
        if len(found) != len(DIRECTIVE.findall(line)):
            print(f"{name}:{number}: error: npugrad-opt checks only `// expected-error[@+N|@-N|@above|@below] "
                  "{{message}}`: this directive would check nothing", file=sys.stderr)
            return False
        for m in found:
            at = m.group(1) or "+0"
            if at == "below":
                target = next((n for n in plain if n > number), None)
            elif at == "above":
                target = next((n for n in reversed(plain) if n < number), None)
            else:
                target = number + int(at)
            expected.append([target, m.group(2), False])
    ok = True
    for d in diagnostics:
        match = next((e for e in expected if not e[2] and e[0] == d.line and e[1] in d.message), None)
        if match is None:
            print(f"{name}:{d.line}:{d.column}: error: unexpected error: {d.message}", file=sys.stderr)
            ok = False
        else:
            match[2] = True
    for line, message, seen in expected:
        if not seen:
            print(f"{name}:{line}: error: expected error \"{message}\" was not produced", file=sys.stderr)
            ok = False
    return ok


def _usage_error(e: Exception) -> NoReturn:
    print(f"npugrad-opt: error: {e}", file=sys.stderr)
    sys.exit(1)


def _driver(argv: Sequence[str] | None) -> NpugradOptMain:
    try:
        return NpugradOptMain(argv)
    except ValueError as e:  # an unknown pass or a malformed -p pipeline
        _usage_error(e)
    except ArgSpecParseError as e:  # xDSL's pipeline parser (a BaseException: `except Exception` misses it)
        message = str(e)
        if "Unknown token" in message:  # e.g. target=a/b.toml: a value with '/' or '.' must be quoted
            message += '\n(an option value other than a word or a number is quoted: target="path/to/cpu.toml")'
        _usage_error(message)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        _driver(argv).run()
    except OSError as e:  # an input or output file that cannot be opened
        _usage_error(e)
    except KeyboardInterrupt:
        sys.exit(130)
    except SystemExit:
        raise
    except Exception as e:  # a bug in npugrad: say so in one line, not a traceback
        if os.environ.get("NPUGRAD_TRACEBACK"):
            raise
        print(f"npugrad-opt: internal error: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
