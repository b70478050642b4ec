"""Calling a JIT-compiled function with NumPy arrays.

Each argument is checked against the memref type it binds to (dtype, rank, static sizes, and
layout: an identity-layout memref needs a C-contiguous array, a strided one any strides that
agree with its static ones, e.g. a last stride of one element for strided<[?, 1]>).
Each memref is passed as its descriptor (MLIR's C interface: allocated and aligned pointers,
offset, sizes, strides in elements), packed as 64-bit words into a bytes object per argument
that ctypes passes as a pointer: the bindings' `runtime.get_ranked_memref_descriptor` builds a
Structure class per call, and even a ctypes array costs about 100 ns per word; `struct.pack`
costs a tenth of that. The kernel only reads its descriptors. The call goes through ctypes,
which releases the GIL while the kernel runs.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from npugrad.runtime import pool, sync
from npugrad.runtime.address import data_addresses

# Pointers, offsets, sizes and strides are all 64-bit on the hosts the JIT targets.
assert ctypes.sizeof(ctypes.c_void_p) == 8


SMALL = 1 << 17  # elements of the largest array below which a block kernel runs as one block


_HEAD = struct.Struct("=2q").pack  # a descriptor's allocated and aligned pointers


@dataclass(frozen=True)
class Layout:
    """A call's arrays as a kernel sees them apart from their addresses: each descriptor's
    offset, sizes and strides (packed), and the block count (0: not a block kernel). All follow
    from the arrays' dtypes, shapes and strides (and the thread count), so a caller that keys
    a Layout by those may bind other arrays of the same key to it."""

    tails: tuple[bytes, ...]
    blocks: int


class ArgumentError(ValueError):
    """An array that does not fit the kernel's signature."""


@dataclass(frozen=True)
class MemRefSpec:
    """What a kernel argument accepts: dtype, sizes and strides in elements (None = dynamic)."""

    name: str
    dtype: np.dtype
    shape: tuple[int | None, ...]
    strides: tuple[int | None, ...] | None  # None: identity layout (C-contiguous)

    def __post_init__(self) -> None:
        # The static sizes and strides by axis, so that a call compares only those.
        object.__setattr__(self, "_static_shape", tuple((i, s) for i, s in enumerate(self.shape) if s is not None))
        strides = self.strides or ()
        object.__setattr__(self, "_static_strides", tuple((i, s) for i, s in enumerate(strides) if s is not None))

    def check(self, kernel: str, array: np.ndarray) -> None:
        if not isinstance(array, np.ndarray):
            raise ArgumentError(f"{kernel}: argument '{self.name}' must be a numpy array, got {type(array).__name__}")
        if array.dtype != self.dtype:
            raise ArgumentError(f"{kernel}: argument '{self.name}' must have dtype {self.dtype}, got {array.dtype}")
        shape = array.shape
        if len(shape) != len(self.shape) or (self._static_shape and any(shape[i] != s for i, s in self._static_shape)):
            want = tuple("?" if s is None else s for s in self.shape)
            raise ArgumentError(f"{kernel}: argument '{self.name}' must have shape {want}, got {shape}")
        if self.strides is None:
            # C-contiguous: the kernel derives the strides from the sizes, so the array's own
            # (arbitrary on axes of size 1) are not looked at.
            if not array.flags.c_contiguous:
                raise ArgumentError(
                    f"{kernel}: argument '{self.name}' is not C-contiguous, and the kernel was compiled for "
                    "contiguous memory"
                )
            return
        itemsize = array.itemsize
        strides = array.strides
        for stride in strides:
            if stride % itemsize:
                raise ArgumentError(
                    f"{kernel}: argument '{self.name}' has strides that are not a multiple of its element size"
                )
        if self._static_strides and array.size > 1 and any(
            s != strides[i] // itemsize and shape[i] > 1 for i, s in self._static_strides
        ):
            raise ArgumentError(
                f"{kernel}: argument '{self.name}' has strides {strides} (bytes); the kernel expects "
                f"{self.strides} (elements)"
            )


class Kernel:
    """A compiled function `name` of a JitModule, called with one array per memref argument.

    A block kernel (`blocks=True`) takes two more arguments, its block index and the block
    count; calling it runs every block, on `threads` threads (default: the pool's size; one block
    for a `distributed` kernel whose arrays all have fewer than SMALL elements). A `synchronized`
    one (its blocks meet at barriers, wait for each other's flags, share workspaces:
    runtime/sync.py) runs each launch inside sync.launch, which gives the launch its barrier
    (where the kernel calls it) and workspaces."""

    def __init__(self, jit, name: str, args: Sequence[MemRefSpec], blocks: bool = False, distributed: bool = False,
                 synchronized: bool = False, barrier: bool = True):
        self._jit = jit  # keeps the machine code alive
        self.name = name
        self.args = tuple(args)
        self.blocks = blocks
        self.distributed = distributed
        self.synchronized = synchronized
        self.barrier = barrier  # a synchronized kernel's launches need a barrier (else flags, workspaces)
        self.ir_from_cache = False  # its LLVM IR came from the disk (runtime/ir_cache.py): no pass ran
        address = jit.address(f"_mlir_ciface_{name}")
        extra = [ctypes.c_int64, ctypes.c_int64] if blocks else []
        # c_char_p: a bytes argument is passed as a pointer to its contents, without a copy.
        self._fn = ctypes.CFUNCTYPE(None, *[ctypes.c_char_p] * len(self.args), *extra)(address)

    def __call__(self, *arrays: np.ndarray, threads: int | None = None) -> None:
        self.bind(*arrays, threads=threads)()

    def bind(self, *arrays: np.ndarray, threads: int | None = None) -> Callable[[], None]:
        """Check the arrays and build their descriptors once; the result runs the machine code
        alone (what benchmarks time as "the kernel itself")."""
        return self.bind_layout(self.layout(arrays, threads), arrays)

    def layout(self, arrays: Sequence[np.ndarray], threads: int | None = None) -> Layout:
        """Check the arrays against the kernel's signature; what their descriptors hold besides
        the addresses, and the block count."""
        if len(arrays) != len(self.args):
            raise ArgumentError(f"{self.name}: expected {len(self.args)} arrays, got {len(arrays)}")
        tails = []
        for spec, array in zip(self.args, arrays):
            spec.check(self.name, array)
            itemsize = array.itemsize
            tails.append(struct.pack(f"={1 + 2 * array.ndim}q", 0, *array.shape, *[s // itemsize for s in array.strides]))
        n = threads or pool.threads()
        # Waking a second thread costs tens of microseconds: unless `threads` says otherwise,
        # work that distribute-over-cores split runs as one block on small arrays.
        if self.distributed and threads is None and n > 1 and max([a.size for a in arrays], default=0) < SMALL:
            n = 1
        return Layout(tuple(tails), n if self.blocks else 0)

    def bind_layout(self, layout: Layout, arrays: Sequence[np.ndarray]) -> Callable[[], None]:
        """The kernel bound to arrays of the dtypes, shapes and strides `layout` was made for
        (not checked again: only their addresses are read). The result holds the arrays, so
        that they live as long as it runs on their memory."""
        bound = functools.partial(self.launch, self.descriptors(layout, arrays), layout.blocks)
        bound.arrays = tuple(arrays)  # type: ignore[attr-defined]
        return bound

    def run(self, layout: Layout, arrays: Sequence[np.ndarray]) -> None:
        """descriptors, then launch: what a cached call does, in one step."""
        self.launch([_HEAD(data, data) + tail for data, tail in zip(data_addresses(arrays), layout.tails)],
                    layout.blocks)

    def descriptors(self, layout: Layout, arrays: Sequence[np.ndarray]) -> list[bytes]:
        """The packed descriptors of arrays of the dtypes, shapes and strides `layout` was made for."""
        return [_HEAD(data, data) + tail for data, tail in zip(data_addresses(arrays), layout.tails)]

    def launch(self, descriptors: Sequence[bytes], blocks: int) -> None:
        """Run the machine code on packed descriptors, as `blocks` blocks (0: not a block kernel)."""
        fn = self._fn
        if not self.blocks:
            fn(*descriptors)
        elif blocks == 1 and not self.synchronized:
            fn(*descriptors, 0, 1)
        elif blocks == 1:
            with sync.launch(1):
                fn(*descriptors, 0, 1)
        elif not self.synchronized:
            pool.run_blocks(lambda block: fn(*descriptors, block, blocks), blocks)
        else:
            with sync.launch(blocks, self.barrier):
                pool.run_blocks(lambda block: fn(*descriptors, block, blocks), blocks)
