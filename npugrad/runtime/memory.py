"""The memory of the large outputs the API allocates: kept when their arrays die, for the next.

A large array np.empty makes is a fresh mapping (glibc maps a block over 32 MiB on its own, and
NumPy advises huge pages on it), which the system fills a page at a time as the kernel first
writes it, and unmaps when the array dies: every call that allocates its outputs pays the page
faults again, and, where free huge pages are short, the compaction that makes them. Measured on a
Zen 5 (2 threads, FLCE float32 4096 x 4096 x 8192 allocating its 192 MiB of dX and dW, calls
0.2 s apart in one process): 1.98-2.04 s a call, and 2.34-2.45 s, 0.37-0.51 s of it system time,
for the first call after another allocation pattern; into preallocated outputs 1.9 s; with the
other contenders of `npugrad bench` in the same process, the allocating call ran 0.93x XLA's
(whose allocator keeps its buffers) where it ran 1.26x in a process of its own.

So, as XLA's and PyTorch's caching allocators do, an output of at least MIN_BYTES is made over a
block of this pool (`empty`): an anonymous mapping, huge pages advised as NumPy advises them,
whose owner (`_Block`) is the base of every array over it. When the last of those dies, the
block goes back to the pool, and the next output of a size it fits reuses it, its pages mapped
already. Nothing is shared while in use: a block is in the pool only when no array refers to it.

The pool keeps at most `limit()` bytes (NPUGRAD_OUTPUT_POOL: a size such as "512MiB", or 0 to
keep none and map every output afresh; default the smaller of 1 GiB and 1/8 of this machine's
memory), the oldest blocks unmapped first; `release()` unmaps them all (as
torch.cuda.empty_cache does). Outputs to be filled with zeros are made here too where they are
this large: their kernels are then not told `out_zeroed` and write the zeros themselves, with the
streaming stores a caller's array gets (ops/common.plan_zeroed: NLL's backward into a fresh
250 MiB, 9.7 ms a call over np.zeros' pages, each faulted in on the kernel's first touch, 3.3 ms
over kept memory; the embedding gradient's 500 MiB 28 ms and 16; Zen 5, 2 threads). Below
MIN_BYTES, or with the pool off, they are np.zeros (Planned.new).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import mmap
import os
import threading

import numpy as np

from npugrad.runtime.address import HUGE_PAGE_BYTES
from npugrad.targets.target import size_bytes

MIN_BYTES = 4 << 20  # below this, malloc's free lists reuse memory already (NumPy's huge-page threshold too)


def machine_bytes() -> int | None:
    """This machine's physical memory, or None where the system does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


@functools.cache
def _default_limit() -> int:
    return min(1 << 30, (machine_bytes() or 8 << 30) // 8)


def limit() -> int:
    """The most bytes the pool keeps (NPUGRAD_OUTPUT_POOL, read on each use: tests change it)."""
    text = os.environ.get("NPUGRAD_OUTPUT_POOL")
    if text is None or text == "":
        return _default_limit()
    size = size_bytes(text)
    if size is None:
        raise ValueError(f"NPUGRAD_OUTPUT_POOL must be a size in bytes (e.g. 0, 536870912 or \"512MiB\"), "
                         f"got {text!r}")
    return size


_LOCK = threading.RLock()  # RLock: a block may come back (its owner's __del__) while this thread holds it
_free: list[mmap.mmap] = []  # the kept blocks, oldest first
_kept = 0  # their bytes


def _rounded(nbytes: int) -> int:
    return -(-nbytes // HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES


class _Block:
    """The owner of an array's memory from the pool: every array over the block (views, and the
    tensors made of them, included) holds it as its base; when none is left, the block goes back."""

    __slots__ = ("__array_interface__", "mm")

    def __init__(self, mm: mmap.mmap, nbytes: int):
        self.mm = mm
        view = ctypes.c_char.from_buffer(mm)
        address = ctypes.addressof(view)
        del view  # (the buffer export it held would keep the mapping from being closed)
        self.__array_interface__ = {"data": (address, False), "shape": (nbytes,), "typestr": "|u1", "version": 3}

    def __del__(self) -> None:
        try:
            _give_back(self.mm)
        except Exception:  # at interpreter exit the module may be gone: the system unmaps it
            pass


def _take(size: int) -> mmap.mmap | None:
    """A kept block of `size` bytes or a little more (at most a quarter more), the smallest; None."""
    global _kept
    with _LOCK:
        fits = [b for b in _free if size <= len(b) <= size + size // 4]
        if not fits:
            return None
        block = min(fits, key=len)
        _free.remove(block)
        _kept -= len(block)
        return block


def _give_back(block: mmap.mmap) -> None:
    global _kept
    most = limit()
    closing = []
    with _LOCK:
        if len(block) > most:
            closing.append(block)
        else:
            _free.append(block)
            _kept += len(block)
            while _kept > most:
                old = _free.pop(0)
                _kept -= len(old)
                closing.append(old)
    for old in closing:
        old.close()


def _new_block(size: int) -> mmap.mmap:
    block = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if hasattr(block, "madvise") and hasattr(mmap, "MADV_HUGEPAGE") and size >= 2 * HUGE_PAGE_BYTES:
        try:
            block.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass
    return block


def empty(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """An uninitialised C-contiguous array, as np.empty, over a block of the pool where it is at
    least MIN_BYTES and the pool is on."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    pool = limit()  # read first: a malformed NPUGRAD_OUTPUT_POOL is named whatever the output's size
    if nbytes < MIN_BYTES or pool == 0:
        return np.empty(shape, dtype)
    size = _rounded(nbytes)
    try:
        block = _take(size) or _new_block(size)
    except OSError as e:  # mmap's ENOMEM (an address-space limit, overcommit refused): np.empty's error
        if e.errno != errno.ENOMEM:
            raise
        raise MemoryError(f"Unable to allocate {nbytes} bytes for an array with shape {shape} and data type "
                          f"{dtype}") from None
    return np.asarray(_Block(block, nbytes)).view(dtype).reshape(shape)


def kept_bytes() -> int:
    """The bytes the pool holds for the next outputs."""
    return _kept


def release() -> int:
    """Unmap every kept block (as torch.cuda.empty_cache does); the bytes released."""
    global _kept
    with _LOCK:
        blocks = list(_free)
        _free.clear()
        released, _kept = _kept, 0
    for block in blocks:
        block.close()
    return released
