"""The threads that run the blocks of a kernel: one per core by default (NPUGRAD_THREADS or
`set_threads` to change it). Kernels release the GIL, so Python threads run them in parallel."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads: int | None = None


def _default() -> int:
    if env := os.environ.get("NPUGRAD_THREADS"):
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"NPUGRAD_THREADS must be a positive integer, got {env!r}") from None
        if n >= 1:
            return n
        raise ValueError(f"NPUGRAD_THREADS must be a positive integer, got {env!r}")
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads() -> int:
    """How many blocks a kernel is launched with."""
    global _threads
    if _threads is None:
        _threads = _default()
    return _threads


def set_threads(n: int) -> None:
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"set_threads: the thread count must be a positive integer, got {n!r}")
    global _threads, _pool
    with _lock:
        _threads = n
        if _pool is not None:
            _pool.shutdown(wait=False)
            _pool = None


def run_blocks(fn, n: int) -> None:
    """fn(block) for block in range(n): block 0 on the calling thread, the others on the pool."""
    global _pool
    if n == 1:
        fn(0)
        return
    with _lock:
        if _pool is None or _pool._max_workers < n - 1:
            _pool = ThreadPoolExecutor(max_workers=max(n - 1, threads() - 1), thread_name_prefix="npugrad")
        pool = _pool
    futures = [pool.submit(fn, b) for b in range(1, n)]
    error = None
    try:
        fn(0)
    except BaseException as e:  # noqa: BLE001 - re-raised after the other blocks finish
        error = e
    for f in futures:
        try:
            f.result()
        except BaseException as e:  # noqa: BLE001
            error = error or e
    if error is not None:
        raise error
