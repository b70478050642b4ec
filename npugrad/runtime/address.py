"""The address of an array's data, cheaply: what every kernel call needs once per argument.

`array.ctypes.data` builds a helper object on each access (about a microsecond, several per
call). NumPy's C struct for an array (`PyArrayObject_fields`, public in `ndarraytypes.h`) starts
with the object header and then the data pointer, so on a CPython whose header is two words the
pointer sits at `id(array) + 16`. That layout is checked once, at import, against
`array.ctypes.data` on arrays of several kinds; on any other interpreter or NumPy (a
free-threaded build, a debug build) the slow, documented path is used.
"""

from __future__ import annotations

import ctypes
import math
from collections.abc import Sequence

import numpy as np

_HEADER = 2 * ctypes.sizeof(ctypes.c_void_p)
_read_pointer = ctypes.c_void_p.from_address


def _from_struct(array: np.ndarray) -> int:
    return _read_pointer(id(array) + _HEADER).value or 0


def _layout_holds() -> bool:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    readonly = np.arange(5.0)
    readonly.flags.writeable = False
    samples = [base, base[1:, 2:], base.T, base[::2, ::3], readonly, np.zeros((0, 3)), np.array(1.0)]
    samples += [np.empty(1 << 20, np.int8), base.view(np.recarray)]  # a subclass too
    return all(_from_struct(a) == a.ctypes.data for a in samples)


def _documented(array: np.ndarray) -> int:
    return array.ctypes.data


def _all_from_struct(arrays) -> list[int]:
    return [_read_pointer(id(a) + _HEADER).value or 0 for a in arrays]


def _all_documented(arrays) -> list[int]:
    return [a.ctypes.data for a in arrays]


_FAST = _layout_holds()
# The address of an array's first element (what `array.ctypes.data` says), and of each of several.
data_address = _from_struct if _FAST else _documented
data_addresses = _all_from_struct if _FAST else _all_documented


def _huge_page_bytes() -> int:
    """The transparent huge page's size (2 MiB on x86-64), where the system says."""
    try:
        with open("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 2 << 20


HUGE_PAGE_BYTES = _huge_page_bytes()


def aligned(shape: Sequence[int], dtype, alignment: int = 64, *, zeroed: bool = False) -> np.ndarray:
    """A C-contiguous array whose first element is on an `alignment`-byte boundary,
    uninitialised (or `zeroed`: calloc's fresh zero pages where it is large). NumPy's large
    arrays start 16 bytes into a page (malloc's header): a kernel's 32-byte vectors then cross
    a cache line on every other access of each row."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = (np.zeros if zeroed else np.empty)(nbytes + alignment, np.uint8)
    skip = -raw.ctypes.data % alignment
    return raw[skip:skip + nbytes].view(dtype).reshape(shape)
