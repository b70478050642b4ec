"""The kernels' heap buffers (memref.alloc -> _mlir_memref_to_llvm_alloc / _free, machine_code's
support functions): malloc'd memory, and on Linux a buffer of two huge pages or more advised to
take transparent huge pages over its whole huge pages, before anything touches it. (Whether the
system then gives it huge pages is the system's: what is checked is the advice.)"""

from __future__ import annotations

import ctypes
import os
import platform

import numpy as np
import pytest

from npugrad.lowering import machine_code
from npugrad.runtime.address import HUGE_PAGE_BYTES


def _functions():
    import llvmlite.binding as llvm

    machine_code.init()
    alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(llvm.address_of_symbol("_mlir_memref_to_llvm_alloc"))
    free = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(llvm.address_of_symbol("_mlir_memref_to_llvm_free"))
    return alloc, free


def _vm_flags(address: int) -> list[str]:
    """The VmFlags of the mapping of this process that holds `address` (/proc/self/smaps)."""
    inside = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):
                lo, hi = (int(x, 16) for x in head.split("-"))
                inside = lo <= address < hi
            elif inside and line.startswith("VmFlags:"):
                return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_buffers_hold_what_is_written_and_are_freed():
    alloc, free = _functions()
    for size in (1, 4096 + 3, 2 * HUGE_PAGE_BYTES + 12345):
        p = alloc(size)
        assert p
        view = np.ctypeslib.as_array((ctypes.c_uint8 * size).from_address(p))
        view[:] = np.arange(size) % 251
        assert (view == np.arange(size) % 251).all()
        free(p)
    free(None)  # free(NULL), as C's


@pytest.mark.skipif(platform.system() != "Linux" or not os.path.exists("/proc/self/smaps")
                    or not os.path.exists("/sys/kernel/mm/transparent_hugepage"),
                    reason="transparent huge pages are Linux's, where its kernel has them (read back from /proc/self/smaps)")
def test_a_large_buffer_is_advised_to_take_huge_pages():
    alloc, free = _functions()
    size = 64 << 20  # over glibc's largest mmap threshold (32 MiB): a mapping of its own
    p = alloc(size)
    try:
        first = (p + HUGE_PAGE_BYTES - 1) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES  # its whole huge pages
        last = (p + size) // HUGE_PAGE_BYTES * HUGE_PAGE_BYTES - 1
        assert "hg" in _vm_flags(first) and "hg" in _vm_flags(last)  # VM_HUGEPAGE: madvise(MADV_HUGEPAGE) took
    finally:
        free(p)
