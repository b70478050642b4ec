"""LLVM IR → optimised code (llvmlite, O3): for this CPU (what the JIT runs, runtime/jit.py) or,
as assembly, for the CPU a target describes. Also the seam between the two LLVMs: the MLIR
bindings' newer LLVM prints float literals that llvmlite's LLVM 22 parser must be given in its
own syntax (to_llvmlite_syntax)."""

from __future__ import annotations

import math
import platform
import re
import struct
import threading
from fractions import Fraction
from functools import cache

import llvmlite.binding as llvm

from npugrad.runtime.address import HUGE_PAGE_BYTES
from npugrad.targets.target import x86_64

LOCK = threading.Lock()  # LLVM's global context is not thread-safe


class JitError(RuntimeError):
    """llvmlite rejected the LLVM IR (the message holds LLVM's diagnostic)."""


@cache
def init() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    _define_support_functions()


# Library functions LLVM's code generator calls where the CPU has no instruction for an
# operation, and which the process need not provide (libgcc has them only from GCC 12 or 13 on,
# and only where something loaded libgcc_s): an unresolved one becomes a call to address 0
# (JitModule refuses such a module: undefined_symbols). `__truncsfbf2` rounds float to bfloat16
# on CPUs without AVX512-BF16, where LLVM legalises a bfloat16 vector op (a masked load's lanes)
# through float. Round to nearest even, NaNs kept quiet, as compiler-rt does.
# `__extendhfsf2` and `__truncsfhf2` convert float16 to and from float on CPUs without F16C
# (vcvtph2ps, vcvtps2ph: x86-64-v2 machines, and virtual CPUs that hide it): without them every
# float16 kernel called address 0 there (a segmentation fault: tests/test_other_cpus.py, QEMU's
# SandyBridge). Bit for bit what those instructions compute: subnormals kept, round to nearest
# even, overflow to infinity, a NaN quieted with its payload's high bits kept.
#
# And the flags blocks of a launch wait for (npu.set_flag, npu.wait_flag; lower-npu-to-cpu
# passes the counter's address): a release store, and an acquire load repeated until the counter
# reaches the value (spinning, with the CPU's spin-wait hint where it has one, then giving the
# core away on every try: a launch may have more blocks than the machine has cores).
_SPIN_HINT = "  call void @llvm.x86.sse2.pause()\n" if x86_64() else ""
SUPPORT_IR = """
define bfloat @__truncsfbf2(float %x) {
  %bits = bitcast float %x to i32
  %magnitude = and i32 %bits, 2147483647
  %nan = icmp ugt i32 %magnitude, 2139095040
  %odd = lshr i32 %bits, 16
  %lsb = and i32 %odd, 1
  %bias = add i32 %lsb, 32767
  %rounded = add i32 %bits, %bias
  %quiet = or i32 %bits, 4194304
  %pick = select i1 %nan, i32 %quiet, i32 %rounded
  %high = lshr i32 %pick, 16
  %half = trunc i32 %high to i16
  %result = bitcast i16 %half to bfloat
  ret bfloat %result
}

define float @__extendhfsf2(half %h) {
  %bits = bitcast half %h to i16
  %x = zext i16 %bits to i32
  %sign = shl i32 %x, 16
  %sign_bit = and i32 %sign, -2147483648
  %abs = and i32 %x, 32767
  %exponent = and i32 %x, 31744
  %mantissa = and i32 %x, 1023
  %shifted = shl i32 %abs, 13
  %normal = add i32 %shifted, 939524096
  %high = shl i32 %mantissa, 13
  %nan = icmp ne i32 %mantissa, 0
  %quiet = select i1 %nan, i32 4194304, i32 0
  %infinite = or i32 %high, 2139095040
  %special = or i32 %infinite, %quiet
  %units = uitofp i32 %mantissa to float
  %tiny = fmul float %units, 0x3E70000000000000
  %tiny_bits = bitcast float %tiny to i32
  %is_special = icmp eq i32 %exponent, 31744
  %is_tiny = icmp eq i32 %exponent, 0
  %wide = select i1 %is_special, i32 %special, i32 %normal
  %magnitude = select i1 %is_tiny, i32 %tiny_bits, i32 %wide
  %result = or i32 %magnitude, %sign_bit
  %f = bitcast i32 %result to float
  ret float %f
}

define half @__truncsfhf2(float %f) {
  %x = bitcast float %f to i32
  %abs = and i32 %x, 2147483647
  %sign = lshr i32 %x, 16
  %sign_bit = and i32 %sign, 32768
  %high = lshr i32 %abs, 13
  %payload = and i32 %high, 1023
  %nan_bits = or i32 %payload, 32256
  %is_nan = icmp ugt i32 %abs, 2139095040
  %overflows = icmp uge i32 %abs, 1199570944
  %is_tiny = icmp ult i32 %abs, 947912704
  %magnitude = bitcast i32 %abs to float
  %aligned = fadd float %magnitude, 5.000000e-01
  %aligned_bits = bitcast float %aligned to i32
  %tiny = sub i32 %aligned_bits, 1056964608
  %odd = and i32 %high, 1
  %rebiased = add i32 %abs, -939520001
  %rounded = add i32 %rebiased, %odd
  %normal = lshr i32 %rounded, 13
  %finite = select i1 %is_tiny, i32 %tiny, i32 %normal
  %bounded = select i1 %overflows, i32 31744, i32 %finite
  %value = select i1 %is_nan, i32 %nan_bits, i32 %bounded
  %result = or i32 %value, %sign_bit
  %narrow = trunc i32 %result to i16
  %h = bitcast i16 %narrow to half
  ret half %h
}

define void @_mlir_ciface_npugrad_set_flag(i64 %address, i64 %value) {
  %p = inttoptr i64 %address to ptr
  store atomic i64 %value, ptr %p release, align 8
  ret void
}

define void @_mlir_ciface_npugrad_wait_flag(i64 %address, i64 %value) {
entry:
  %p = inttoptr i64 %address to ptr
  br label %check
check:
  %tries = phi i64 [ 0, %entry ], [ %next, %spin ], [ %next, %yield ]
  %now = load atomic i64, ptr %p acquire, align 8
  %reached = icmp sge i64 %now, %value
  br i1 %reached, label %done, label %again
again:
  %next = add i64 %tries, 1
  %long = icmp ugt i64 %next, 2000
  br i1 %long, label %yield, label %spin
spin:
""" + _SPIN_HINT + """  br label %check
yield:
  %ignored = call i32 @sched_yield()
  br label %check
done:
  ret void
}

declare i32 @sched_yield()
""" + ("declare void @llvm.x86.sse2.pause()\n" if _SPIN_HINT else "")

# The heap buffers of a kernel (memref.alloc, lowered with finalize-memref-to-llvm's generic
# allocation functions: lowering/to_llvm.py): malloc and free, and on Linux a buffer of at least
# two transparent huge pages advised to take them (madvise(MADV_HUGEPAGE) on its whole huge pages,
# before anything touches them), as NumPy advises its own large arrays. A large malloc is a fresh
# mapping each call (glibc maps anything over 32 MiB on its own), and the kernel then faulted it in
# 4 KiB at a time: the FLCE bfloat16 gradient's float32 accumulator of dX (BT x H x 4 bytes, 64 MiB
# at 4096 x 4096) took 16385 page faults and 25-26 ms of system time a call on one thread of a
# Zen 5 (1.4 % of the call); advised, 544 faults and 2-4 ms. Nothing else changes: the same
# bytes, freed when the kernel frees them.
_HUGE_PAGES = platform.system() == "Linux"
_MADV_HUGEPAGE = 14
_ADVISE = f"""  %large = icmp uge i64 %size, {2 * HUGE_PAGE_BYTES}
  %mapped = icmp ne ptr %p, null
  %advise = and i1 %large, %mapped
  br i1 %advise, label %whole_pages, label %done
whole_pages:
  %start = ptrtoint ptr %p to i64
  %up = add i64 %start, {HUGE_PAGE_BYTES - 1}
  %first = and i64 %up, {-HUGE_PAGE_BYTES}
  %end = add i64 %start, %size
  %last = and i64 %end, {-HUGE_PAGE_BYTES}
  %length = sub i64 %last, %first
  %at = inttoptr i64 %first to ptr
  %ignored = call i32 @madvise(ptr %at, i64 %length, i32 {_MADV_HUGEPAGE})
  br label %done
""" if _HUGE_PAGES else "  br label %done\n"
# A kernel has no way to return an error, and every buffer it allocates is used at once: a
# malloc that fails (an address-space limit, a scratch sized by zero-stride inputs) must not
# hand the kernel NULL to store through. It stops the process with a message on stderr
# instead of a SIGSEGV at some offset from address 0; the API reserves the large scratch of
# the kernels that have one before the launch (ops/common.reserve_scratch), so that the common
# case is a MemoryError.
_OOM_MESSAGE = b"npugrad: a kernel could not allocate its scratch memory (malloc returned NULL)\n"
_OOM_BYTES = "".join(f"\\{b:02X}" for b in _OOM_MESSAGE)
ALLOC_IR = f"""
@npugrad.oom = private constant [{len(_OOM_MESSAGE)} x i8] c"{_OOM_BYTES}"

define ptr @_mlir_memref_to_llvm_alloc(i64 %size) {{
entry:
  %p = call ptr @malloc(i64 %size)
  %failed = icmp eq ptr %p, null
  %asked = icmp ne i64 %size, 0
  %oom = and i1 %failed, %asked
  br i1 %oom, label %out_of_memory, label %allocated
out_of_memory:
  %ignored_write = call i64 @write(i32 2, ptr @npugrad.oom, i64 {len(_OOM_MESSAGE)})
  call void @abort()
  unreachable
allocated:
{_ADVISE}done:
  ret ptr %p
}}

define void @_mlir_memref_to_llvm_free(ptr %p) {{
  call void @free(ptr %p)
  ret void
}}

declare ptr @malloc(i64)
declare void @free(ptr)
declare i64 @write(i32, ptr, i64)
declare void @abort()
""" + ("declare i32 @madvise(ptr, i64, i32)\n" if _HUGE_PAGES else "")
SUPPORT_IR += ALLOC_IR
# Every function SUPPORT_IR defines, each bound by name for the kernels to call.
SUPPORT_FUNCTIONS = tuple(re.findall(r"^define [^@\n]*@([\w.]+)\(", SUPPORT_IR, re.MULTILINE))
_SUPPORT: list = []  # the engine holding the support functions, alive as long as the process


def _define_support_functions() -> None:
    module = llvm.parse_assembly(SUPPORT_IR)
    engine = llvm.create_mcjit_compiler(module, _host_machine())
    engine.finalize_object()
    for name in SUPPORT_FUNCTIONS:
        if not llvm.address_of_symbol(name):
            llvm.add_symbol(name, engine.get_function_address(name))
    _SUPPORT.append(engine)


def new_target_machine() -> llvm.TargetMachine:
    """A target machine for this CPU (an engine takes ownership of the one it is given)."""
    init()
    return _host_machine()


def _host_machine() -> llvm.TargetMachine:
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        codemodel="jitdefault",
    )


@cache
def host_target_machine() -> llvm.TargetMachine:
    """The target machine for optimising and printing assembly (never given to an engine)."""
    return new_target_machine()


def llvm_version() -> str:
    return ".".join(map(str, llvm.llvm_version_info))


# The newer LLVM prints a float constant as a decimal when that reads back exactly, as
# `+inf`/`-inf`, `+qnan`/`-qnan`, `+nan(0x<payload>)`/`+snan(0x<payload>)` for the special values,
# and as `f0x<bits>` otherwise. LLVM 22 reads decimals (exactly representable ones, for types
# narrower than double) and the hex forms `0x<double bits>` (double and float), `0xH` (half) and
# `0xR` (bfloat). A literal's type is the last type keyword before it on its line.
_TOKEN = re.compile(
    r"(?<![\w.$%@#\"-])(?:"
    r"(?P<type>half|bfloat|float|double|x86_fp80|fp128|ppc_fp128)"
    r"|f0x(?P<bits>[0-9A-Fa-f]+)"
    r"|(?P<sign>[-+])(?:(?P<inf>inf)|(?P<nan>qnan|nan|snan)(?:\(0x(?P<payload>[0-9A-Fa-f]+)\))?)"
    r"|(?P<dec>[-+]?\d+\.\d*(?:[eE][-+]?\d+)?)"
    r")(?![\w.$-])"
)
_FORMATS = {"half": (5, 10), "bfloat": (8, 7), "float": (8, 23), "double": (11, 52)}  # exponent, fraction bits


def _round_decimal(text: str, exponent_bits: int, fraction_bits: int) -> int:
    """The bits of the decimal `text` rounded to nearest, ties to even, in a binary format: once,
    as the newer LLVM reads it (going through a double first could round twice)."""
    sign = int(text.startswith("-")) << (exponent_bits + fraction_bits)  # -0.0 too
    value = abs(Fraction(text))
    if value == 0:
        return sign
    bias = (1 << (exponent_bits - 1)) - 1
    e = value.numerator.bit_length() - value.denominator.bit_length()  # 2**(e - 1) < value < 2**(e + 1)
    if value < Fraction(2) ** e:
        e -= 1
    e = max(e, 1 - bias)  # below the normal range the last place stays that of the subnormals
    ulps = value / Fraction(2) ** (e - fraction_bits)
    q, r = divmod(ulps.numerator, ulps.denominator)
    q += 2 * r > ulps.denominator or (2 * r == ulps.denominator and q & 1)
    if q >> (fraction_bits + 1):  # rounded up into the next binade
        q, e = q >> 1, e + 1
    if e + bias >= (1 << exponent_bits) - 1:
        return sign | ((1 << exponent_bits) - 1) << fraction_bits  # overflow: infinity
    biased = e + bias if q >> fraction_bits else 0
    return sign | biased << fraction_bits | (q & ((1 << fraction_bits) - 1))


def _float_as_double(bits: int) -> int:
    """The double LLVM 22 reads a float constant from: the same value, computed bit by bit (no
    hardware conversion, which would quieten a signalling NaN); a NaN's payload moves up."""
    sign, exponent, fraction = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exponent == 0xFF:
        return sign << 63 | 0x7FF << 52 | fraction << 29
    value = math.ldexp(fraction | int(exponent != 0) << 23, max(exponent, 1) - 150)
    return struct.unpack("<Q", struct.pack("<d", -value if sign else value))[0]


def _literal(m: re.Match, kind: str | None) -> str:
    """One literal of type `kind` in LLVM 22's syntax (unchanged if LLVM 22 reads it as it is)."""
    if kind not in _FORMATS or (kind == "double" and m["dec"] is not None):
        return m[0]
    exponent_bits, fraction_bits = _FORMATS[kind]
    if m["bits"] is not None:
        bits = int(m["bits"], 16)
    elif m["dec"] is not None:
        bits = _round_decimal(m["dec"], exponent_bits, fraction_bits)
    else:
        sign = int(m["sign"] == "-") << (exponent_bits + fraction_bits)
        special = sign | ((1 << exponent_bits) - 1) << fraction_bits
        payload = int(m["payload"] or "0", 16)
        bits = special if m["inf"] else special | payload | (0 if m["nan"] == "snan" else 1 << (fraction_bits - 1))
    if kind == "half":
        return f"0xH{bits:04X}"
    if kind == "bfloat":
        return f"0xR{bits:04X}"
    return f"0x{_float_as_double(bits) if kind == 'float' else bits:016X}"


def _rewrite_line(line: str) -> str:
    kind = None

    def token(m: re.Match) -> str:
        nonlocal kind
        if m["type"] is not None:
            kind = m["type"]
            return m[0]
        return _literal(m, kind)

    return _TOKEN.sub(token, line)


# A line with none of these holds no float literal (its type keywords alone need no rewriting).
_LITERAL = re.compile(r"\d\.|f0x|inf|nan")


def to_llvmlite_syntax(llvm_ir: str) -> str:
    """Rewrite the float literals printed by the MLIR bindings' newer LLVM into what llvmlite's
    LLVM 22 parser reads, bit for bit the constants the newer LLVM meant."""
    return "\n".join(
        _rewrite_line(line) if _LITERAL.search(line) and not line.lstrip().startswith((";", "source_filename", "target"))
        else line
        for line in llvm_ir.split("\n")
    )


# Intrinsics of instructions a CPU may lack, by the LLVM feature they need: code generation for
# a CPU without it aborts the process, so such a module is refused first.
_FEATURE_INTRINSICS = {"@llvm.x86.avx512bf16.": "avx512bf16", "@llvm.x86.tdpbf16ps": "amx-bf16",
                       "@llvm.x86.tileloadd64": "amx-tile", "@llvm.x86.tilezero": "amx-tile"}
# arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): Linux gives a process AMX's tile data (8 KiB
# of register state) only when asked; the first tile instruction of one that did not ask faults.
# The syscall's arguments: SYS_arch_prctl (x86-64), ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA (also
# what tools/harness.py's main calls for lli and clang).
AMX_PERMISSION_SYSCALL = (158, 0x1023, 18)
_AMX_GRANTED: list[bool] = []


def uses_amx(llvm_ir: str) -> bool:
    """Whether the module has AMX tile instructions (vectorize-contractions' tile micro-kernels)."""
    return "x86_amx" in llvm_ir


def request_amx() -> None:
    """Ask Linux for this process's AMX tile state (once; the permission is the process's, its
    threads' and its forked children's). JitError where the kernel refuses it (a Linux before
    5.16, or a hypervisor that hides the state): a tile instruction would then kill the process."""
    if _AMX_GRANTED:
        return
    import ctypes
    import errno
    import os

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(*AMX_PERMISSION_SYSCALL) != 0:
        code = ctypes.get_errno()
        raise JitError(f"the module uses AMX tile instructions, and Linux refused this process their state "
                       f"(arch_prctl(ARCH_REQ_XCOMP_PERM): {errno.errorcode.get(code, code)}, {os.strerror(code)}): "
                       "compile it for a target whose llvm_features leave out +amx-tile to run it here")
    _AMX_GRANTED.append(True)


def _missing_feature(llvm_ir: str, tm: llvm.TargetMachine | None) -> str | None:
    if tm is not None:
        return None
    features = llvm.get_host_cpu_features()
    return next((f for prefix, f in _FEATURE_INTRINSICS.items() if prefix in llvm_ir and not features.get(f)), None)


def optimised(llvm_ir: str, tm: llvm.TargetMachine | None = None) -> llvm.ModuleRef:
    """The module parsed (in llvmlite's syntax), verified and optimised at O3 for `tm` (the host).

    LLVM's unrollers unroll only the loops the IR asks them to (`!llvm.loop` metadata:
    npugrad's passes annotate loops with #llvm.loop_annotation, e.g. the micro-kernels'
    reduction loops by two, vectorize-contractions' _unrolled); their own heuristics are off
    (the pipeline's loop_unrolling option; opt's -disable-loop-unrolling). The loops npugrad
    emits are already vectorised and blocked for the target; unrolling the rest at run time
    (packs, softmax, elementwise loops, each with a remainder copy) was about a quarter of
    LLVM's time. On a Zen 3: O3 and code generation of 60 kernels of the test suite took 22 s
    instead of 29 (their cached IR, every loop rolled), and LLVM's part of the FLCE gradient's
    cold compile 1.6-1.8 s instead of 2.0-2.1 (three pairs of fresh processes). The
    memory-bound ops ran as fast either way (npugrad bench: embedding, NLL, BCE and EMA-Adam
    within 5 %); the FLCE kernels' reduction loops for Zen 3 (zen3.toml) are the same
    instructions as with LLVM's heuristics (vectorize-contractions' _unrolled says what changed
    for 512-bit vectors)."""
    module, tm = parsed(llvm_ir, tm)
    tuning = llvm.create_pipeline_tuning_options(speed_level=3)
    tuning.loop_unrolling = False  # only where the IR asks (llvm.loop.unroll.count/enable)
    builder = llvm.create_pass_builder(tm, tuning)
    builder.getModulePassManager().run(module, builder)
    return module


def parsed(llvm_ir: str, tm: llvm.TargetMachine | None = None) -> tuple[llvm.ModuleRef, llvm.TargetMachine]:
    """The module parsed (in llvmlite's syntax) and verified, set for `tm` (the host), not yet
    optimised; and that target machine."""
    init()
    if (feature := _missing_feature(llvm_ir, tm)) is not None:
        from npugrad.lowering.emulation import EMULATED_FEATURES

        emulate = (f", and NPUGRAD_EMULATE={feature} runs it here in generic code, slowly (lowering/emulation.py)"
                   if feature in EMULATED_FEATURES else "")
        raise JitError(f"the module uses {feature} instructions, which this CPU ({llvm.get_host_cpu_name()}) lacks: "
                       f"compile it for `host` (or a target whose llvm_features leave out +{feature}) to run it here; "
                       f"the asm stage prints code for any target{emulate}")
    try:
        module = llvm.parse_assembly(to_llvmlite_syntax(llvm_ir))
        module.verify()
    except RuntimeError as e:
        raise JitError(f"llvmlite (LLVM {llvm_version()}) rejected the LLVM IR: {e}") from None
    tm = tm or host_target_machine()
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    return module, tm



_SHT_SYMTAB = 2
_STB_WEAK = 2


def undefined_symbols(code: bytes) -> list[str]:
    """The symbols an object file (ELF, 64-bit, little-endian: what the JIT makes on x86-64
    Linux) calls or reads without defining them, weak ones aside: what the JIT links from the
    process. [] for another format."""
    if code[:6] != b"\x7fELF\x02\x01":
        return []
    shoff, = struct.unpack_from("<Q", code, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", code, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", code, shoff + i * shentsize) for i in range(shnum)]
    names = []
    for _name, kind, _flags, _addr, offset, size, link, _info, _align, entsize in sections:
        if kind != _SHT_SYMTAB or not entsize:
            continue
        strings = sections[link][4]
        for at in range(offset, offset + size, entsize):
            name, info, _other, index = struct.unpack_from("<IBBH", code, at)
            if index == 0 and name and info >> 4 != _STB_WEAK:
                names.append(code[strings + name:code.index(b"\0", strings + name)].decode())
    return names


def unresolved(code: bytes) -> list[str]:
    """The symbols `code` leaves undefined that neither the process nor the support functions
    define: the JIT would link each to address 0, and the first call to it would crash."""
    init()
    return [name for name in undefined_symbols(code) if not llvm.address_of_symbol(name)]


def assembly(llvm_ir: str, cpu: str = "", features: str = "") -> str:
    """Assembly of the O3-optimised module, for the host or for the CPU LLVM calls `cpu` with
    `features` (e.g. "x86-64-v3" and "": no need to run on it to see its code; features alone:
    this CPU with them)."""
    with LOCK:
        if not cpu and not features:
            return host_target_machine().emit_assembly(optimised(llvm_ir))
        machine = cpu_target_machine(cpu or llvm.get_host_cpu_name(), features)
        return machine.emit_assembly(optimised(llvm_ir, machine))


class UnknownCpu(ValueError):
    """A CPU or feature name LLVM does not know (a target file's llvm_cpu / llvm_features)."""


_NOT_RECOGNIZED = re.compile(r"^'([^']*)' is not a recognized (processor|feature) for this target.*$", re.MULTILINE)


@cache
def cpu_target_machine(cpu: str, features: str) -> llvm.TargetMachine:
    """The target machine for the CPU LLVM calls `cpu`, with `features` (never given to an engine).
    LLVM takes a name it does not know with a warning on stderr ('... is not a recognized
    processor for this target (ignoring processor)') and goes on to a fatal error in code
    generation ('64-bit code requested on a subtarget that doesn't support it'), which ends the
    process: its stderr is read while the machine is made, and an unknown name is an UnknownCpu
    naming the target file's field. (A feature without its + or - fails an assertion inside
    LLVM: the target loader rejects it first.)"""
    import os
    import sys
    import tempfile

    init()
    with tempfile.TemporaryFile() as said:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(said.fileno(), 2)
            machine = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=features, opt=3)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        said.seek(0)
        text = said.read().decode(errors="replace")
    unknown = dict.fromkeys((kind, name) for name, kind in _NOT_RECOGNIZED.findall(text))
    if unknown:
        fields = {"processor": "llvm_cpu", "feature": "llvm_features"}
        raise UnknownCpu("; ".join(f"field '{fields[kind]}': LLVM {llvm_version()} knows no {kind} '{name}'"
                                   for kind, name in unknown))
    if rest := _NOT_RECOGNIZED.sub("", text).strip():
        print(rest, file=sys.stderr)  # anything else said meanwhile, as it was said
    return machine
