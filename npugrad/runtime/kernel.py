"""Calling a JIT-compiled function with NumPy arrays.

Each argument is checked against the memref type it binds to (dtype, rank, static sizes, and
layout: an identity-layout memref needs a C-contiguous array, a strided one takes any strides).
The descriptors are built by the MLIR bindings' own `runtime` module; the call goes through
ctypes, which releases the GIL while the kernel runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npugrad.lowering.mlir_bindings import runtime
from npugrad.runtime import pool


class ArgumentError(ValueError):
    """An array that does not fit the kernel's signature."""


@dataclass(frozen=True)
class MemRefSpec:
    """What a kernel argument accepts: dtype, sizes and strides in elements (None = dynamic)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...] | None  # None: identity layout (C-contiguous)

    def check(self, kernel: str, array: np.ndarray) -> None:
        where = f"{kernel}: argument '{self.name}'"
        if not isinstance(array, np.ndarray):
            raise ArgumentError(f"{where} must be a numpy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            raise ArgumentError(f"{where} must have dtype {self.dtype}, got {array.dtype}")
        if array.ndim != len(self.shape) or any(
            s is not None and s != a for s, a in zip(self.shape, array.shape)
        ):
            want = tuple("?" if s is None else s for s in self.shape)
            raise ArgumentError(f"{where} must have shape {want}, got {array.shape}")
        if any(s % array.itemsize for s in array.strides):
            raise ArgumentError(f"{where} has strides that are not a multiple of its element size")
        if self.strides is None:
            if not array.flags.c_contiguous:
                raise ArgumentError(
                    f"{where} is not C-contiguous, and the kernel was compiled for contiguous memory"
                )
        elif array.size > 1 and any(
            s is not None and s != a // array.itemsize and n > 1
            for s, a, n in zip(self.strides, array.strides, array.shape)
        ):
            raise ArgumentError(f"{where} has strides {array.strides} (bytes); the kernel expects {self.strides} (elements)")


class Kernel:
    """A compiled function `name` of a JitModule, called with one array per memref argument.

    A block kernel (`blocks=True`) takes two more arguments, its block index and the block
    count; calling it runs every block, on `threads` threads (default: the pool's size)."""

    def __init__(self, jit, name: str, args: Sequence[MemRefSpec], blocks: bool = False):
        self._jit = jit  # keeps the machine code alive
        self.name = name
        self.args = tuple(args)
        self.blocks = blocks
        address = jit.address(f"_mlir_ciface_{name}")
        extra = [ctypes.c_int64, ctypes.c_int64] if blocks else []
        self._fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(self.args), *extra)(address)

    def __call__(self, *arrays: np.ndarray, threads: int | None = None) -> None:
        if len(arrays) != len(self.args):
            raise ArgumentError(f"{self.name}: expected {len(self.args)} arrays, got {len(arrays)}")
        for spec, array in zip(self.args, arrays):
            spec.check(self.name, array)
        descriptors = [runtime.get_ranked_memref_descriptor(a) for a in arrays]
        pointers = [ctypes.addressof(d) for d in descriptors]
        if not self.blocks:
            self._fn(*pointers)
            return
        n = threads or pool.threads()
        pool.run_blocks(lambda block: self._fn(*pointers, block, n), n)
