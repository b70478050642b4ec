"""What a kernel calls back into the runtime for when its blocks must work together: a barrier
across the blocks of one launch (npu.barrier), flags one block waits for another to set
(npu.set_flag, npu.wait_flag) and global-memory workspaces they share (npu.alloc_shared).
lower-npu-to-cpu turns those ops into calls of these symbols; the JIT binds them to the functions
below (the flags: to machine code); Kernel runs a launch of a kernel that uses them
(npu.synchronized) inside `launch`, which gives the launch its barrier and its workspaces and
frees them after.

All blocks of a launch must run at once for a barrier (or a flag) to be passed: run_blocks gives each block a
thread, and synchronized launches of several blocks take turns (one lock), so no launch waits for
threads another launch holds at its own barrier. A one-block launch waits for nobody: it runs on
its caller's thread with services of its own, side by side with any other (pool.run_tasks).

    _mlir_ciface_npugrad_barrier()                             wait for every block of the launch
    _mlir_ciface_npugrad_set_flag(address, value)              *address = value (release)
    _mlir_ciface_npugrad_wait_flag(address, value)             until *address >= value (acquire)
    _mlir_ciface_npugrad_shared_r2_bf16(desc*, slot, bytes, d0, d1)
                                                               fill desc with the launch's buffer
                                                               `slot` (d0 x d1 elements of `bytes`,
                                                               zero-filled when first asked for)

The flags are machine code (lowering/machine_code.py's SUPPORT_IR: a spin on an atomic load, no
Python, no lock), the counters in a workspace; the barrier and the workspaces call back into
Python.
"""

from __future__ import annotations

import ctypes
import re
import threading
from collections.abc import Callable

import numpy as np

from npugrad.runtime.address import aligned

BARRIER = "npugrad_barrier"
SET_FLAG = "npugrad_set_flag"
WAIT_FLAG = "npugrad_wait_flag"
FLAG = "flag"  # what `services` says of the flag functions (machine code, not a Python callback)
_SHARED = re.compile(r"_mlir_ciface_(npugrad_shared_r(\d+)_\w+)\b")


def shared_symbol(rank: int, element: str) -> str:
    """The function an npu.alloc_shared of this rank and element type becomes."""
    return f"npugrad_shared_r{rank}_{element}"


class _Launch:
    """One launch's services, made current while the launch runs (`with`): its barrier and its
    workspaces, freed when it ends; current for every thread (the blocks run on the pool's), so
    such launches take turns."""

    __slots__ = ("barrier", "buffers", "lock")

    def __init__(self, blocks: int, barrier: bool = True):
        # threading.Barrier costs ~10 µs to build: only for kernels that call it.
        self.barrier = threading.Barrier(blocks) if barrier else None
        self.buffers: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        global _current
        _turn.acquire()
        _current = self

    def __exit__(self, *exc_info) -> None:
        global _current
        _current = None
        self.buffers.clear()
        _turn.release()


class _OneBlock:
    """A one-block launch's services: no barrier (its npu.barrier calls return at once; a
    threading.Barrier costs ~10 µs to build, more than a tiny kernel) and workspaces of its own,
    current on its thread only, so one-block launches on several threads run at once."""

    __slots__ = ("buffers", "lock")
    barrier = None

    def __init__(self):
        self.buffers: dict[int, np.ndarray] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> None:
        _local.launch = self

    def __exit__(self, *exc_info) -> None:
        _local.launch = None
        self.buffers.clear()


_turn = threading.Lock()  # one synchronized launch of several blocks at a time
_current: _Launch | None = None
_local = threading.local()  # .launch: the one-block launch running on this thread; .one: its services, reused


def launch(blocks: int, barrier: bool = True) -> _Launch | _OneBlock:
    """The launch services for `blocks` blocks, while the kernel runs: `with launch(n): ...`
    (`barrier`: the kernel calls npu.barrier's service). A thread's one-block launches reuse
    one set of services (building it, a dict and a lock, was ~1 µs of a cached call), unless
    one of them is still running on it."""
    if blocks != 1:
        return _Launch(blocks, barrier)
    one = getattr(_local, "one", None)
    if one is None or getattr(_local, "launch", None) is one:
        one = _local.one = _OneBlock()
    return one


def _state() -> _Launch | _OneBlock | None:
    """The services of the launch this thread runs a block of."""
    return getattr(_local, "launch", None) or _current


def _barrier() -> None:
    state = _state()
    if state is not None and state.barrier is not None:
        state.barrier.wait()


def _shared(rank: int) -> Callable:
    def fill(desc: int, slot: int, element_bytes: int, *sizes: int) -> None:
        state = _state()
        if state is None:  # called outside `launch`: a bug in the runtime, not in the kernel
            raise RuntimeError("npugrad: a kernel asked for a shared workspace outside a launch")
        with state.lock:
            buf = state.buffers.get(slot)
            if buf is None:
                n = int(np.prod(sizes, dtype=np.int64)) * element_bytes
                buf = state.buffers[slot] = aligned((n,), np.uint8, zeroed=True)
        strides = [1] * rank
        for i in range(rank - 2, -1, -1):
            strides[i] = strides[i + 1] * sizes[i + 1]
        words = (ctypes.c_int64 * (3 + 2 * rank)).from_address(desc)
        words[0] = words[1] = buf.ctypes.data
        words[2] = 0
        words[3:3 + rank] = list(sizes)
        words[3 + rank:] = strides

    return fill


_KEEP: dict[str, object] = {}  # the ctypes callbacks, alive as long as the process


def _callback(name: str, rank: int | None):
    if name not in _KEEP:
        if rank is None:
            _KEEP[name] = ctypes.CFUNCTYPE(None)(_barrier)
        else:
            args = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64] + [ctypes.c_int64] * rank
            _KEEP[name] = ctypes.CFUNCTYPE(None, *args)(_shared(rank))
    return _KEEP[name]


def services(llvm_ir: str) -> dict[str, int | str | None]:
    """The launch services an LLVM module calls: C-interface symbol -> the rank of the workspace
    it returns (None: the barrier; FLAG: a flag function)."""
    wanted: dict[str, int | str | None] = {}
    if f"_mlir_ciface_{BARRIER}" in llvm_ir:
        wanted[f"_mlir_ciface_{BARRIER}"] = None
    for name in (SET_FLAG, WAIT_FLAG):
        if f"_mlir_ciface_{name}" in llvm_ir:
            wanted[f"_mlir_ciface_{name}"] = FLAG
    for m in _SHARED.finditer(llvm_ir):
        wanted[m.group(0)] = int(m.group(2))
    return wanted


def bind_symbols(called: dict[str, int | str | None]) -> None:
    """Make the launch services a module calls (`services` of its LLVM IR) resolvable by the JIT
    (the flag functions are machine code the JIT defines itself: machine_code.init)."""
    import llvmlite.binding as llvm

    for symbol, rank in called.items():
        if rank != FLAG and not llvm.address_of_symbol(symbol):
            llvm.add_symbol(symbol, ctypes.cast(_callback(symbol, rank), ctypes.c_void_p).value)
