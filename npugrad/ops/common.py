"""Shared by the API functions: the checks of scalar arguments, outputs and their memory, and
output allocation.

A call checks, in this order and before it writes or allocates anything: its scalar arguments
(by Python type: `integer`, `real`, `flag`), the spec's metadata rules (`launch.check`, with the
outputs to allocate standing in as `Planned` shapes), that no output shares memory with another
array argument (`reject_overlap`), and that the outputs to allocate fit in this machine's
memory (`allocate`). Value checks that read the data (index ranges) run just before the kernel.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import numbers
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence

import numpy as np

from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.runtime import memory
from npugrad.runtime.address import HUGE_PAGE_BYTES
from npugrad.runtime.address import aligned as aligned_empty  # uninitialised, 64-byte aligned
from npugrad.runtime.launch import Call, as_input, owned_and_distinct

__all__ = [
    "REDUCTION",
    "REDUCTION_MEAN",
    "REDUCTION_NONE",
    "REDUCTION_SUM",
    "Planned",
    "all_in_range",
    "allocate",
    "as_input",
    "first_bad_id",
    "flag",
    "integer",
    "output",
    "real",
    "reject_overlap",
    "reserve_scratch",
]

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2
REDUCTION = "0 (none), 1 (mean) or 2 (sum)"

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _shown(value) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return text if type(value) in (int, float, bool) or value is None else f"{text} ({type(value).__name__})"


# -- scalars -----------------------------------------------------------------------------------------


def integer(op: str, name: str, value, meaning: str = "an integer", lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    """An integer argument (enum or index) as a Python int: Python and NumPy integers (anything
    with __index__), not bool and not floats, within [lo, hi] (int64 unless said otherwise). The
    op's rules check the value's meaning (e.g. reduction in {0, 1, 2})."""
    if type(value) is int:  # the common case, without the checks below
        v = value
    elif isinstance(value, bool | np.bool_):
        raise SignatureTypeError(f"{op}: parameter '{name}' must be {meaning}, got {_shown(value)}, a bool")
    else:
        try:
            v = operator.index(value)
        except TypeError:
            raise SignatureTypeError(f"{op}: parameter '{name}' must be {meaning}, got {_shown(value)}") from None
    if not lo <= v <= hi:
        span = "an int64" if (lo, hi) == (_INT64_MIN, _INT64_MAX) else f"in [{lo}, {hi}]"
        raise SignatureError(f"{op}: parameter '{name}' must be {meaning}, {span}, got {v}")
    return v


def real(op: str, name: str, value, float32: bool = False) -> float:
    """A real argument as a finite Python float: Python and NumPy reals (ints too), and a NumPy
    0-d array of an integer or float dtype (as an integer argument takes a 0-d integer array);
    not bool. With float32, also finite once rounded to the float32 the kernel computes with."""
    if type(value) is float:  # the common case, without the ABC check
        v = value
    elif isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iuf":
        v = float(value)
    elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        try:
            v = float(value)
        except OverflowError:  # an int beyond the float range
            v = math.inf
    else:
        raise SignatureTypeError(f"{op}: parameter '{name}' must be a real number, got {_shown(value)}")
    if not -math.inf < v < math.inf:  # not math.isfinite: torch.compile(dynamic=True) cannot trace it
        raise SignatureError(f"{op}: parameter '{name}' must be a finite real number, got {v}")
    if float32 and abs(v) > _FLOAT32_MAX:
        raise SignatureError(
            f"{op}: parameter '{name}' must be finite as a float32 (|x| <= {_FLOAT32_MAX:.7g}), got {v}"
        )
    return v


def flag(op: str, name: str, value) -> bool:
    """A flag argument: bool or numpy.bool_, or the integers 0 and 1 (the vendor API's C bool);
    nothing else is read as a truth value."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        if value in (0, 1):
            return bool(value)
        raise SignatureError(f"{op}: parameter '{name}' must be True or False (or 0 or 1), got {value}")
    raise SignatureTypeError(f"{op}: parameter '{name}' must be True or False (or 0 or 1), got {_shown(value)}")


# -- values ------------------------------------------------------------------------------------------


def _distinct(values: np.ndarray) -> np.ndarray:
    """`values` without its broadcast axes (stride 0: one element repeated), as a view: what a
    check of the values reads, where NumPy's reductions would copy the broadcast array whole
    (np.broadcast_to(t, (2**27,)): a 1 GiB copy and 2.5 s before)."""
    if values.size > 1 and 0 in values.strides:
        return values[tuple(slice(0, 1) if stride == 0 else slice(None) for stride in values.strides)]
    return values


def all_in_range(values: np.ndarray, n: int) -> bool:
    """Whether every element of an integer array lies in [0, n), in one pass: read as unsigned,
    a negative value is at least 2**(bits - 1), more than any value it stands for."""
    if not values.size:
        return True
    values = _distinct(values)
    found = _UNSIGNED.get(values.dtype)
    if found is None:
        signed = values.dtype.kind == "i"
        found = _UNSIGNED[values.dtype] = (np.dtype(values.dtype.str.replace("i", "u")),
                                           1 << (8 * values.itemsize - 1) if signed else None)
    unsigned, negative = found
    u = values.view(unsigned)
    # argmax is a plain loop over the data; max() a ufunc reduction, microseconds more to set up.
    return u.item(u.argmax()) < (n if negative is None else min(n, negative))


def first_bad_id(values: np.ndarray, ignore: int, n: int | None) -> int | None:
    """The flat position of the first id in `values` that is not `ignore` and lies outside
    [0, n) (n None: that is negative), or None: the check of class and vocabulary ids that no
    metadata check can see. All in range (all_in_range) costs one pass."""
    if n is not None and all_in_range(values, n):
        return None
    distinct = _distinct(values)
    flat = distinct.reshape(-1).astype(np.int64, copy=False)
    outside = flat < 0 if n is None else (flat < 0) | (flat >= n)
    bad = np.flatnonzero(outside & (flat != ignore))
    if not bad.size:
        return None
    # The first in C order of `values` too: a broadcast axis at 0 keeps the order of the others.
    return int(np.ravel_multi_index(np.unravel_index(int(bad[0]), distinct.shape), values.shape))


# dtype -> (the unsigned dtype to view it as, for a signed one 2**(bits - 1): what its negative values read as at least)
_UNSIGNED: dict[np.dtype, tuple[np.dtype, int | None]] = {}


# -- outputs -----------------------------------------------------------------------------------------


class Planned:
    """An output the call allocates once every check has passed: its shape and dtype (all the
    metadata rules read), what to fill it with, and what sized it (for the size error)."""

    __slots__ = ("dtype", "fill", "mapped", "nbytes", "shape", "sized_by")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, sized_by: str, fill=None):
        self.shape = shape
        self.dtype = dtype
        self.nbytes = math.prod(shape) * dtype.itemsize
        self.sized_by = sized_by  # e.g. "parameter 'num_weights' = 5", "parameter 'input_x'"
        self.fill = fill
        self.mapped = False  # its pages mapped before the kernel writes it (allocate)

    def new(self) -> np.ndarray:
        """A fresh array of this plan. Filled with 0, it is np.zeros: calloc, whose large blocks
        are fresh mappings of pages the system zeroes as they are first touched, so the zeros
        cost no pass over memory of their own (what a kernel told `out_zeroed` relies on).
        Otherwise a large one is made over memory an earlier output left (runtime/memory.py),
        its pages mapped already."""
        if self.fill == 0:
            return np.zeros(self.shape, self.dtype)
        if self.fill is not None:
            return np.full(self.shape, self.fill, self.dtype)
        a = memory.empty(self.shape, self.dtype)
        return prefault(a) if self.mapped else a


def plan_zeroed(out: np.ndarray | Planned) -> bool:
    """Plan `out` (output's result) as zeros where the call allocates it (np.zeros), and say
    whether it will hold zeros when the kernel runs: then the kernel writes only what is not
    zero (the ops' `out_zeroed` property). A caller's array holds whatever it holds: False. So
    does an output large enough for the output pool (runtime/memory.py, where it is on): it is
    made over memory an earlier output left, its pages mapped, and the kernel writes its zeros
    with the streaming stores it gives a caller's array. Fresh zeroed pages cost a page fault
    each on the kernel's first touch: NLL's backward into a fresh 250 MiB (65536 x 1000 float32)
    took 10-13 ms a call where its zero fill into mapped memory takes 3 (Zen 5, 2 threads)."""
    if type(out) is not Planned:
        return False
    if out.nbytes >= memory.MIN_BYTES and memory.limit() > 0:
        return False
    out.fill = 0
    return True


def output(op: str, name: str, given, shape, dtype, sized_by: str = "") -> np.ndarray | Planned:
    """The caller's `given` output (a writable, aligned ndarray), or the plan of a fresh one."""
    if given is None:
        return Planned(shape, dtype, sized_by)
    if not isinstance(given, np.ndarray):
        raise SignatureTypeError(f"{op}: parameter '{name}' must be a numpy array, got {type(given).__name__}")
    if not given.flags.writeable:
        raise SignatureError(f"{op}: parameter '{name}' is read-only")
    return as_input(op, name, given)  # the alignment check


# This machine's physical memory: an output larger than that can never be written.
MEMORY_BYTES = memory.machine_bytes() or 1 << 48


def human_bytes(n: int) -> str:
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} bytes"


_MADV_POPULATE_WRITE = 23  # Linux 5.14
_madvise = None


def prefault(a: np.ndarray) -> np.ndarray:
    """`a`'s pages mapped, writable, before a kernel touches them; `a` returned, its values
    unchanged. A fresh large array (np.empty, np.zeros: an anonymous mapping) is otherwise
    mapped a page at a time as the kernel's blocks first write it, or first read it (the zero
    page, then a copy on the write). Measured (Zen 4, 2 threads, FLCE float32 2048 x 2048 x 32000
    into a fresh 250 MiB dW): 4.22-4.39 s with the faults in the kernel, 3.96-4.23 s with the
    pages populated first, which took 23-26 ms. madvise(MADV_POPULATE_WRITE) where the system has
    it (Linux 5.14), else a write of each page's first byte, or-ed with 0 (values unchanged).
    Arrays under a huge page are left as they are, and without the advice strided ones."""
    global _madvise
    if a.nbytes < HUGE_PAGE_BYTES or not a.flags.writeable:
        return a
    base = a.ctypes.data & ~4095
    end = a.ctypes.data + a.nbytes
    if _madvise is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            _madvise = libc.madvise
        except (OSError, AttributeError):
            _madvise = False
    if _madvise and _madvise(base, end - base, _MADV_POPULATE_WRITE) == 0:
        return a
    if a.flags.c_contiguous:  # a byte per page, written with its own value (x | 0)
        first = a.reshape(-1).view(np.uint8)[::4096]
        np.bitwise_or(first, 0, out=first)
    return a


def allocate(op: str, arrays: dict, outputs: Iterable[str], display: Mapping[str, str] | None = None,
             mapped: bool = False) -> dict[str, Planned]:
    """Replace each Planned output in `arrays` by a fresh array, after checking that together
    they fit in this machine's memory (else a ValueError naming what sized the largest), and
    return what was planned of each (Call's `fresh`: a replayed call makes them again). `mapped`:
    a large one's pages mapped before the kernel writes it (prefault), for kernels whose blocks
    first touch it out of order and wait for each other (the FLCE wavefront). A kernel that
    streams through its output maps it faster itself: NLL's backward into a fresh 250 MiB took
    27.7-29.0 ms prefaulted, 17.6-21.5 not (Zen 4, 2 threads)."""
    total = 0
    for name in outputs:
        p = arrays[name]
        if type(p) is Planned:
            total += p.nbytes
    if total > MEMORY_BYTES:
        _too_large(op, arrays, outputs, total, display or {})
    fresh = {}
    for name in outputs:
        p = arrays[name]
        if type(p) is Planned:
            p.mapped = mapped
            try:
                arrays[name] = p.new()
            except MemoryError:
                raise MemoryError(f"{op}: output '{(display or {}).get(name, name)}' of shape {p.shape} "
                                  f"({p.dtype}) needs {human_bytes(p.nbytes)}, which this process cannot allocate") from None
            fresh[name] = p
    return fresh


def reserve_scratch(op: str, nbytes: int, what: str) -> None:
    """A MemoryError (or the size error) now, where the kernel would allocate `nbytes` of scratch
    that this process cannot have: the kernel cannot report a failed malloc (it stops the
    process, lowering/machine_code.py). Over a huge page, the bytes are mapped and unmapped
    again untouched (np.empty: an mmap and a munmap, no page faulted in)."""
    if nbytes > MEMORY_BYTES:
        raise SignatureError(f"{op}: {what} needs {human_bytes(nbytes)} of scratch memory, more than this "
                             f"machine's memory ({human_bytes(MEMORY_BYTES)})")
    if nbytes >= HUGE_PAGE_BYTES:
        try:
            np.empty(nbytes, np.uint8)
        except MemoryError:
            raise MemoryError(f"{op}: {what} needs {human_bytes(nbytes)} of scratch memory, which this "
                              f"process cannot allocate") from None


def _too_large(op: str, arrays: dict, outputs: Iterable[str], total: int, display: Mapping[str, str]) -> None:
    name = max((k for k in outputs if type(arrays[k]) is Planned), key=lambda k: arrays[k].nbytes)
    p = arrays[name]
    others = f" ({human_bytes(total)} with the other arrays it allocates)" if total != p.nbytes else ""
    raise SignatureError(
        f"{op}: {p.sized_by} is too large: output '{display.get(name, name)}' of shape {p.shape} ({p.dtype}) would "
        f"need {human_bytes(p.nbytes)}{others}, more than this machine's memory ({human_bytes(MEMORY_BYTES)})"
    )


# -- overlap -----------------------------------------------------------------------------------------

# Effort np.shares_memory may spend on an exact answer (candidate solutions) once the memory
# bounds of two arrays meet; past it, they are taken to overlap.
_EXACT_WORK = 1 << 16
_ENUMERATE_MAX = 1 << 20  # elements: an output's own overlap is then settled by listing its offsets
# The C function under NumPy's __array_function__ dispatch: half the cost of a call, paid for
# every pair of arrays on every call.
_shares_memory = getattr(np.shares_memory, "_implementation", np.shares_memory)


def _overlaps_itself(a: np.ndarray) -> bool:
    """Whether two elements of `a` (more than one, not C-contiguous) may share memory: a zero
    stride, or strides that interleave (then settled by listing the offsets, if not too many)."""
    if a.flags.f_contiguous:
        return False
    axes = sorted((abs(s), n) for s, n in zip(a.strides, a.shape) if n > 1)
    span = a.itemsize  # bytes covered by the axes taken so far
    for stride, n in axes:
        if stride < span:
            break  # the copies along this axis may meet the ones before: look closer
        span = stride * (n - 1) + span
    else:
        return False
    if axes[0][0] == 0 or a.size > _ENUMERATE_MAX:
        return True
    offsets = np.zeros((), np.int64)
    for stride, n in axes:
        offsets = np.add.outer(offsets, np.arange(n, dtype=np.int64) * stride)
    flat = np.sort(offsets, axis=None)
    return bool(np.any(flat[1:] - flat[:-1] < a.itemsize))


def reject_overlap(op: str, arrays: Mapping[str, object], outputs: Sequence[str],
                   display: Mapping[str, str] | None = None, skip: Iterable[str] = ()) -> None:
    """ValueError if a caller-given output shares memory with itself or with any other array
    argument: the kernels write outputs while they still read their inputs (and other outputs).
    Fresh outputs (still Planned) and the arrays named in `skip` (made by the call itself)
    cannot overlap anything; nor can two distinct arrays that each own their memory (what
    NumPy allocated for them alone: the common case, settled without looking at addresses).
    Otherwise NumPy's test compares memory bounds and, where they meet, solves for a shared
    element: interleaved arrays that share none pass."""
    given = [k for k in outputs if type(arrays[k]) is not Planned]
    if not given or owned_and_distinct(arrays, given, skip):
        return
    others = []
    for k, a in arrays.items():
        if isinstance(a, np.ndarray) and k not in skip:
            others.append((k, a, a.base is None and a.flags.owndata))
    for out in given:
        a = arrays[out]
        if not a.flags.c_contiguous and a.size > 1 and _overlaps_itself(a):
            raise SignatureError(
                f"{op}: parameter '{(display or {}).get(out, out)}' has elements that share memory (strides "
                f"{a.strides} for shape {a.shape}); an output needs its own memory for every element"
            )
        owns = a.base is None and a.flags.owndata
        others = [other for other in others if other[0] != out]  # each pair once
        for other, b, b_owns in others:
            if owns and b_owns:
                shared = a is b
            else:
                try:
                    shared = _shares_memory(a, b, _EXACT_WORK)
                except np.exceptions.TooHardError:
                    shared = True
            if shared:
                _overlapping(op, list(arrays), out, other, display or {})


def _overlapping(op: str, order: list[str], out: str, other: str, display: Mapping[str, str]) -> None:
    first, second = sorted((out, other), key=order.index)
    raise SignatureError(
        f"{op}: parameters '{display.get(first, first)}' and '{display.get(second, second)}' overlap in memory; "
        f"an output must not share memory with any other argument (pass a separate array)"
    )


# Rows this many bytes apart share the L1's cache sets on x86 (its way: a page, the L1 being
# indexed by the page offset) and, in fewer sets than their number, the L2's (spread_rows).
WAY_BYTES = 4096


_SPREAD: contextvars.ContextVar[bool] = contextvars.ContextVar("npugrad_spread_rows", default=True)


@contextlib.contextmanager
def rows_in_place() -> Iterator[None]:
    """Within the block (and the pool's tasks it starts), spread_rows copies nothing: for a
    caller whose memory budget holds no copy of X (ops/loss.py's schedules)."""
    token = _SPREAD.set(False)
    try:
        yield
    finally:
        _SPREAD.reset(token)


def kernel_cpu():
    """The target the kernels run on (the current pipeline's cpu)."""
    from npugrad.compiler import Pipeline
    from npugrad.runtime.launch import current_pipeline
    from npugrad.targets import get

    return get((current_pipeline() or Pipeline()).cpu)


def spread_rows(x: np.ndarray) -> np.ndarray | None:
    """A copy of the 2-byte input X whose rows are a cache line more than a multiple of WAY_BYTES
    apart, made where X's own rows are such a multiple apart and X outgrows the L2 (None
    otherwise: the kernel reads X in place). The linear cross-entropy kernels read X again for
    every vocabulary tile (the gradient: GEMM 1's rows and GEMM 3's pack of the token tile's
    column panels; the forward statistics: the logits GEMM's rows); rows 8 KiB apart (H = 4096)
    fall into one set of the L1 and a sixteenth of the L2's, and a panel's lines evict each other
    before they are read again. The copy comes from the output pool (runtime/memory.py) and costs
    one pass over X (4.7 ms for the bfloat16 4096 x 4096 input, 1.5 ms at 2048 x 2048) and X's
    size in memory while the call runs. Measured on an Intel Xeon with AMX (family 6, 2 vCPUs,
    48 KiB L1d, 2 MiB L2; FLCE bfloat16 gradient, 2 threads, calls taking turns, 6 rounds): the
    copy and the call 1.084x as fast as the call on X in place at 4096 x 4096 x 8192 and 1.083x at
    2048 x 2048 x 32000 (peak extra memory 135 -> 170 MiB at 4096 x 4096 x 8192); the forward
    statistics (fused_linear_online_max_sum) 1.26x at 4096 x 4096 x 32000 and 1.28x at 2048 x
    2048 x 32000, the same bits. Not inside rows_in_place (ops/loss.py). Not for float32: the
    gradient 1.025x with X padded by hand (2048 x 2048 x 32000), against 16 MiB more memory for a
    call that takes 3 MiB. Not for W,
    whose rows the kernels read once a vocabulary tile, into packed panels: the bfloat16
    gradient with W padded by hand ran 1.022x at 4096 x 4096 x 8192 before the cost of a copy of
    W (64 MiB there), and float32 1.000x at 2048 x 2048 x 32000 (6 rounds each)."""
    if x.ndim != 2 or x.itemsize != 2 or not x.flags.c_contiguous or x.strides[0] % WAY_BYTES or not _SPREAD.get():
        return None
    from npugrad.passes.vectorize_contractions import line_bytes

    cpu = kernel_cpu()
    l2 = cpu.role("vector").capacity
    if l2 is None or x.nbytes <= l2:
        return None
    line = line_bytes(cpu) // x.itemsize
    rows, h = x.shape
    spread = memory.empty((rows, h + line), x.dtype)[:, :h]
    np.copyto(spread, x)
    return spread


class SpreadInput(Call):
    """A call of an op with an `input` X, run on spread_rows' copy of X where it makes one."""

    def run(self):
        spread = spread_rows(self.arrays["input"])
        if spread is None:
            return super().run()
        if self.value_check is not None:
            self.value_check(self.arrays)
        Call(self.op_cls, {**self.arrays, "input": spread}, self.props, None, static_shapes=self.static_shapes).run()
        return self.result
