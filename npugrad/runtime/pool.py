"""The threads that run the blocks of a kernel: one per core by default (NPUGRAD_THREADS or
`set_threads` to change it). Kernels release the GIL, so Python threads run them in parallel.

`run_tasks` runs independent pieces of work side by side instead, one per thread, each launching
its kernels as one block (`threads()` is 1 on the thread running a task): the schedule that
splits a problem itself (ops/loss.py's lanes) rather than letting each kernel split it."""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_threads: int | None = None


def _after_fork() -> None:
    """A child of fork() has none of the pool's threads: its copy of the pool would queue the
    blocks for them and the launch wait for ever (multiprocessing's fork start method)."""
    global _lock, _pool
    _lock = threading.Lock()
    _pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


class _Local(threading.local):
    """`alone`: this thread runs a task (threads() is 1 on it). A class default, read on every
    call: getattr(local, name, default) on a thread that never set it raises and catches
    AttributeError inside."""

    alone = False


_local = _Local()


# A thread and its stack for each (10^6 took 15.7 s and 1.8 GB a call, 10^9 never returned).
MAX_THREADS = 4096


def _default() -> int:
    if env := os.environ.get("NPUGRAD_THREADS"):
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"NPUGRAD_THREADS must be a positive integer, got {env!r}") from None
        if 1 <= n <= MAX_THREADS:
            return n
        raise ValueError(f"NPUGRAD_THREADS must be a positive integer, at most {MAX_THREADS}, got {env!r}")
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def threads() -> int:
    """How many blocks a kernel is launched with (1 on a thread running one of run_tasks' tasks)."""
    global _threads
    if _local.alone:
        return 1
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


def _workers(n: int) -> ThreadPoolExecutor:
    """The pool, with at least n workers (with _lock held)."""
    global _pool
    if _pool is None or _pool._max_workers < n:
        _pool = ThreadPoolExecutor(max_workers=max(n, threads() - 1), thread_name_prefix="npugrad")
    return _pool


def run_blocks(fn, n: int) -> None:
    """fn(block) for block in range(n): block 0 on the calling thread, the others on the pool."""
    if n == 1:
        fn(0)
        return
    _join(fn, range(1, n))


def run_tasks(tasks) -> list:
    """[task() for task in tasks], on up to threads() threads at once (the calling thread and the
    pool's), each task's kernels launched as one block; the results in order. A task's exception
    is raised once every task has ended. Tasks run by a task run on its thread, one by one. A
    task must not launch a kernel with an explicit `threads` > 1: its blocks would wait for pool
    threads the lanes hold."""
    # Each task runs in a copy of the caller's context: the pipeline a `launch.using` block set
    # (a context variable) compiles the tasks' kernels too, on whichever thread runs them.
    tasks = [functools.partial(contextvars.copy_context().run, task) for task in tasks]
    lanes = min(len(tasks), threads())
    results: list = [None] * len(tasks)
    order = iter(range(len(tasks)))
    taking = threading.Lock()

    def lane(_: int) -> None:
        """Take the next task until none is left (the lanes balance uneven tasks)."""
        was = _local.alone
        _local.alone = True
        try:
            while True:
                with taking:
                    j = next(order, None)
                if j is None:
                    return
                results[j] = tasks[j]()
        finally:
            _local.alone = was

    if lanes <= 1:
        lane(0)
    else:
        _join(lane, range(1, lanes))
    return results


def _join(fn, others: range) -> None:
    """fn(i) for i in `others` on the pool and fn(0) here; every exception waits for all to end.
    Submitted under the lock set_threads shuts the pool down with (what is queued still runs):
    a pool shut down between finding it and submitting raised RuntimeError, after some blocks
    were submitted that then waited at the kernel's barrier for the others forever."""
    with _lock:
        pool = _workers(len(others))
        futures = [pool.submit(fn, b) for b in others]
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
