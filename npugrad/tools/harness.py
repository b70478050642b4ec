"""A `main` in LLVM IR that runs one kernel on files, so that the `llvm-ir` stage runs outside
Python (`npugrad-opt --emit-harness DIR`):

    llvm-link-22 DIR/kernel.ll DIR/harness.ll -o DIR/prog.bc && lli-22 DIR/prog.bc DIR
    clang-22 -O2 DIR/kernel.ll DIR/harness.ll -o DIR/prog && DIR/prog DIR

For every argument `x` of the function, main reads `DIR/x.bin` (raw little-endian, C order, the
shape the harness was written for), builds its memref descriptor (MLIR's C interface:
allocated and aligned pointers, offset, sizes, strides) and calls `_mlir_ciface_<function>`;
a block kernel (lower-npu-to-cpu) is called once per block, in turn; one whose blocks meet at
barriers (npu.synchronized) is called as one block, with the launch services (runtime/sync.py)
defined here for one block: a barrier that returns at once, zero-filled workspaces from
aligned_alloc (up to 64 per function), SUPPORT_IR's flags. Then it writes every argument to
`DIR/x.out.bin`. A missing or short file is an error message and exit status 1.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from npugrad.lowering.machine_code import AMX_PERMISSION_SYSCALL, SUPPORT_IR, uses_amx
from npugrad.runtime import sync
from npugrad.runtime.kernel import MemRefSpec

BLOCKS = 4  # blocks a block kernel is called with (in turn: they never wait for each other)
ALIGNMENT = 64


def _string(name: str, text: str) -> str:
    data = text.encode() + b"\0"
    escaped = "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in data)
    return f'@{name} = private unnamed_addr constant [{len(data)} x i8] c"{escaped}"'


_PRELUDE = """
declare ptr @fopen(ptr, ptr)
declare i64 @fread(ptr, i64, i64, ptr)
declare i64 @fwrite(ptr, i64, i64, ptr)
declare i32 @fclose(ptr)
declare ptr @aligned_alloc(i64, i64)
declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)
declare i32 @snprintf(ptr, i64, ptr, ...)
declare i32 @puts(ptr)
declare void @exit(i32)
declare i64 @syscall(i64, ...)

; Opens DIR/NAME SUFFIX in MODE, or says which file it could not and exits with status 1.
define internal ptr @open_file(ptr %dir, ptr %name, ptr %suffix, ptr %mode) {
  %path = alloca [4096 x i8]
  %n = call i32 (ptr, i64, ptr, ...) @snprintf(ptr %path, i64 4096, ptr @.path, ptr %dir, ptr %name, ptr %suffix)
  %f = call ptr @fopen(ptr %path, ptr %mode)
  %bad = icmp eq ptr %f, null
  br i1 %bad, label %fail, label %ok
fail:
  %m = alloca [4200 x i8]
  %k = call i32 (ptr, i64, ptr, ...) @snprintf(ptr %m, i64 4200, ptr @.cannot, ptr %path)
  %p = call i32 @puts(ptr %m)
  call void @exit(i32 1)
  unreachable
ok:
  ret ptr %f
}

; Reads exactly BYTES bytes of DIR/NAME.bin into BUF.
define internal void @read_input(ptr %dir, ptr %name, ptr %buf, i64 %bytes) {
  %f = call ptr @open_file(ptr %dir, ptr %name, ptr @.in, ptr @.rb)
  %got = call i64 @fread(ptr %buf, i64 1, i64 %bytes, ptr %f)
  %c = call i32 @fclose(ptr %f)
  %short = icmp ne i64 %got, %bytes
  br i1 %short, label %fail, label %ok
fail:
  %m = alloca [4200 x i8]
  %k = call i32 (ptr, i64, ptr, ...) @snprintf(ptr %m, i64 4200, ptr @.short, ptr %dir, ptr %name, i64 %bytes, i64 %got)
  %p = call i32 @puts(ptr %m)
  call void @exit(i32 1)
  unreachable
ok:
  ret void
}

define internal void @write_output(ptr %dir, ptr %name, ptr %buf, i64 %bytes) {
  %f = call ptr @open_file(ptr %dir, ptr %name, ptr @.out, ptr @.wb)
  %put = call i64 @fwrite(ptr %buf, i64 1, i64 %bytes, ptr %f)
  %c = call i32 @fclose(ptr %f)
  ret void
}
"""


SLOTS = 64  # workspaces (npu.alloc_shared) a harnessed function may have


def _services(called: dict[str, int | str | None]) -> list[str]:
    """The launch services `called` (sync.services) for a one-block run."""
    if not called:
        return []
    out = [f"@npugrad.slots = internal global [{SLOTS} x ptr] zeroinitializer"]
    for symbol, rank in called.items():
        if rank == sync.FLAG:  # machine code of SUPPORT_IR's, which the harness links too
            continue
        if rank is None:
            out.append(f"define void @{symbol}() {{\n  ret void\n}}")
            continue
        sizes = [f"%d{k}" for k in range(rank)]
        body = [
            f"define void @{symbol}(ptr %desc, i64 %slot, i64 %bytes, {', '.join(f'i64 {d}' for d in sizes)}) {{",
            "entry:",
            f"  %p = getelementptr [{SLOTS} x ptr], ptr @npugrad.slots, i64 0, i64 %slot",
            "  %old = load ptr, ptr %p",
            "  %none = icmp eq ptr %old, null",
            "  br i1 %none, label %alloc, label %fill",
            "alloc:",
        ]
        n = "%bytes"
        for k, d in enumerate(sizes):
            body.append(f"  %n{k} = mul i64 {n}, {d}")
            n = f"%n{k}"
        body += [
            f"  %up = add i64 {n}, {ALIGNMENT + ALIGNMENT - 1}",  # at least one line; a multiple of the alignment
            f"  %rounded = and i64 %up, {-ALIGNMENT}",
            f"  %new = call ptr @aligned_alloc(i64 {ALIGNMENT}, i64 %rounded)",
            "  call void @llvm.memset.p0.i64(ptr %new, i8 0, i64 %rounded, i1 false)",  # zero-filled
            "  store ptr %new, ptr %p",
            "  br label %fill",
            "fill:",
            "  %buf = phi ptr [ %old, %entry ], [ %new, %alloc ]",
            "  store ptr %buf, ptr %desc",
            "  %w1 = getelementptr i64, ptr %desc, i64 1",
            "  store ptr %buf, ptr %w1",
            "  %w2 = getelementptr i64, ptr %desc, i64 2",
            "  store i64 0, ptr %w2",
        ]
        stride = "1"
        strides = []
        for k in reversed(range(rank)):
            strides.append(stride)
            if k:
                body.append(f"  %s{k} = mul i64 {stride}, {sizes[k]}")
                stride = f"%s{k}"
        strides.reverse()
        for k, word in enumerate([*sizes, *strides]):
            body += [f"  %x{k} = getelementptr i64, ptr %desc, i64 {3 + k}", f"  store i64 {word}, ptr %x{k}"]
        body += ["  ret void", "}"]
        out.append("\n".join(body))
    return out


def harness(function: str, specs: Sequence[MemRefSpec], shapes: Sequence[tuple[int, ...]], blocks: bool,
            services: dict[str, int | str | None] | None = None, amx: bool = False) -> str:
    """LLVM IR of `main` for `function` with arguments `specs` of the given (static) shapes;
    `services`: the launch services the kernel calls (sync.services of its LLVM IR); `amx`: the
    kernel uses AMX tiles, whose state Linux gives a process that asks (the JIT's
    machine_code.request_amx): main asks first, and says so and exits 1 if refused."""
    services = services or {}
    globals_ = [
        _string(".path", "%s/%s%s"), _string(".in", ".bin"), _string(".out", ".out.bin"),
        _string(".rb", "rb"), _string(".wb", "wb"), _string(".here", "."),
        _string(".cannot", "harness: cannot open %s"),
        _string(".short", "harness: %s/%s.bin: expected %lld bytes, read %lld"),
    ]
    body = [
        "define i32 @main(i32 %argc, ptr %argv) {",
        "entry:",
        "  %has_dir = icmp sgt i32 %argc, 1",
        "  %arg1 = getelementptr ptr, ptr %argv, i64 1",
        "  %given = load ptr, ptr %arg1",
        "  %dir = select i1 %has_dir, ptr %given, ptr @.here",
    ]
    if amx:
        globals_.append(_string(".amx", "harness: Linux refused this process AMX's tile state (arch_prctl)"))
        body += [
            f"  %amx = call i64 (i64, ...) @syscall({', '.join(f'i64 {a}' for a in AMX_PERMISSION_SYSCALL)})",
            "  %amx_refused = icmp ne i64 %amx, 0",
            "  br i1 %amx_refused, label %no_amx, label %amx_granted",
            "no_amx:",
            "  call i32 @puts(ptr @.amx)",
            "  call void @exit(i32 1)",
            "  unreachable",
            "amx_granted:",
        ]
    descriptors = []
    sizes = [math.prod(shape) * spec.dtype.itemsize for spec, shape in zip(specs, shapes)]
    for i, (spec, shape, nbytes) in enumerate(zip(specs, shapes, sizes)):
        globals_.append(_string(f".name{i}", spec.name))
        strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
        words = 3 + 2 * len(shape)
        body += [
            f"  %buf{i} = call ptr @aligned_alloc(i64 {ALIGNMENT}, i64 {-(-max(nbytes, 1) // ALIGNMENT) * ALIGNMENT})",
            f"  call void @read_input(ptr %dir, ptr @.name{i}, ptr %buf{i}, i64 {nbytes})",
            f"  %d{i} = alloca [{words} x i64], align 8",
            f"  store ptr %buf{i}, ptr %d{i}",
            f"  %d{i}.1 = getelementptr i64, ptr %d{i}, i64 1",
            f"  store ptr %buf{i}, ptr %d{i}.1",
        ]
        for k, word in enumerate([0, *shape, *strides], start=2):
            body += [f"  %d{i}.{k} = getelementptr i64, ptr %d{i}, i64 {k}", f"  store i64 {word}, ptr %d{i}.{k}"]
        descriptors.append(f"ptr %d{i}")
    extra = ["i64", "i64"] if blocks else []
    declare = f"declare void @_mlir_ciface_{function}({', '.join(['ptr'] * len(specs) + extra)})"
    if blocks and services:  # its blocks meet at barriers: one block does all the work
        body.append(f"  call void @_mlir_ciface_{function}({', '.join(descriptors)}, i64 0, i64 1)")
    elif blocks:
        body += [
            "  br label %block",
            "block:",
            f"  %b = phi i64 [ 0, %{'amx_granted' if amx else 'entry'} ], [ %next, %block ]",
            f"  call void @_mlir_ciface_{function}({', '.join(descriptors)}, i64 %b, i64 {BLOCKS})",
            "  %next = add i64 %b, 1",
            f"  %more = icmp slt i64 %next, {BLOCKS}",
            "  br i1 %more, label %block, label %done",
            "done:",
        ]
    else:
        body.append(f"  call void @_mlir_ciface_{function}({', '.join(descriptors)})")
    for i, nbytes in enumerate(sizes):
        body.append(f"  call void @write_output(ptr %dir, ptr @.name{i}, ptr %buf{i}, i64 {nbytes})")
    body += ["  ret i32 0", "}"]
    # The library routines weak: a C library or compiler runtime linked in may define them too.
    support = re.sub(r"^define (\w+) @__", r"define weak \1 @__", SUPPORT_IR, flags=re.MULTILINE)
    return "\n".join([f"; npugrad harness for @{function}", *globals_, _PRELUDE, declare, support,
                      *_services(services), *body]) + "\n"


def write(directory: Path, function: str, specs: Sequence[MemRefSpec], arrays: Sequence[np.ndarray],
          llvm_ir: str, blocks: bool) -> list[Path]:
    """DIR/kernel.ll, DIR/harness.ll and one DIR/<argument>.bin per argument; the files written."""
    directory.mkdir(parents=True, exist_ok=True)
    written = [directory / "kernel.ll", directory / "harness.ll"]
    written[0].write_text(llvm_ir)
    written[1].write_text(harness(function, specs, [a.shape for a in arrays], blocks, sync.services(llvm_ir),
                                  uses_amx(llvm_ir)))
    for spec, array in zip(specs, arrays):
        path = directory / f"{spec.name}.bin"
        path.write_bytes(np.ascontiguousarray(array).tobytes())
        written.append(path)
    return written


def read_outputs(directory: Path, specs: Sequence[MemRefSpec], shapes: Sequence[tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The arrays a harness run wrote, by argument name."""
    return {s.name: np.fromfile(directory / f"{s.name}.out.bin", dtype=s.dtype).reshape(shape)
            for s, shape in zip(specs, shapes)}
