"""Arrays placed against an inaccessible page, so that a kernel reading or writing one element
past either end of an array faults at once (the test process dies with SIGSEGV) instead of
silently touching a neighbour's memory.

    x = against_guard(np.arange(7, dtype=np.float32))            # ends where a PROT_NONE page begins
    y = against_guard(a[::-1], at="start")                       # begins right after one (any strides)

Each array gets its own anonymous mapping: the data pages plus one guard page (mprotect
PROT_NONE). The mapping lives as long as the array (NumPy holds the mmap's buffer); unmapping
it releases the guard page too.
"""

from __future__ import annotations

import ctypes
import mmap

import numpy as np

PAGE = mmap.PAGESIZE
_PROT_NONE = 0

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.mprotect.restype = ctypes.c_int


def _extent(shape, strides, itemsize) -> tuple[int, int]:
    """Byte offsets of the lowest element and one past the highest, from the first element."""
    if any(n == 0 for n in shape):
        return 0, 0
    lo = sum(min(0, (n - 1) * s) for n, s in zip(shape, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(shape, strides))
    return lo, hi + itemsize


def against_guard(template: np.ndarray, at: str = "end") -> np.ndarray:
    """A writable copy of `template` (values, shape, dtype and byte strides kept) whose memory ends
    exactly where an inaccessible page begins (`at="end"`) or begins right after one (`"start"`).
    Strides that are not a multiple of the element size are kept too; negative strides place
    the first element at the high end."""
    template = np.asarray(template)
    lo, hi = _extent(template.shape, template.strides, template.itemsize)
    span = hi - lo
    pages = max(1, -(-span // PAGE))
    region = mmap.mmap(-1, (pages + 1) * PAGE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    window = (ctypes.c_char * len(region)).from_buffer(region)
    base = ctypes.addressof(window)
    del window  # a live export would keep the mapping from ever being closed
    if at == "end":
        guard, start = pages * PAGE, pages * PAGE - span
    elif at == "start":
        guard, start = 0, PAGE
    else:
        raise ValueError(f"at must be 'end' or 'start', got {at!r}")
    if _libc.mprotect(ctypes.c_void_p(base + guard), PAGE, _PROT_NONE) != 0:
        raise OSError(ctypes.get_errno(), "mprotect failed")
    array = np.ndarray(template.shape, template.dtype, buffer=region, offset=start - lo, strides=template.strides)
    array[...] = template
    return array


def touches_guard(array: np.ndarray, at: str = "end") -> bool:
    """Whether `array`'s memory ends (or begins) at a page boundary: what against_guard promises."""
    lo, hi = _extent(array.shape, array.strides, array.itemsize)
    address = array.__array_interface__["data"][0]
    return (address + hi) % PAGE == 0 if at == "end" else (address + lo) % PAGE == 0
