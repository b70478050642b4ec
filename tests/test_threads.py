"""All five ops from several threads at once, each result checked; and the GIL is released
while a kernel runs."""

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from api_cases import flce
from conftest import assert_close

from npugrad.tools.demo import all_cases


def test_all_ops_from_several_threads():
    """Every op in every dtype (the linear cross-entropy gradient in both modes: two nests), each
    case run twice, from six threads at once, so that two threads ask for the same kernel while it
    compiles. Compiling concurrently (cold cache) is part of what is tested. One example per op,
    dtype and mode: the demo's others differ in attributes (covered by each op's own tests), not
    in how kernels are compiled, cached and launched."""
    cases, seen = [], set()
    for c in all_cases():
        kind = (c.op, c.dtype, c.label.split(",")[0] if c.op == "fused_linear_cross_entropy_loss_grad" else "")
        if kind not in seen:
            seen.add(kind)
            cases.append(c)

    def work(i: int):
        case = cases[i % len(cases)]
        for got, want, magnitude in case.run(np.random.default_rng(i)).values():
            assert_close(got, want, magnitude=magnitude)
        return case.op

    with ThreadPoolExecutor(max_workers=6) as pool:
        done = list(pool.map(work, range(2 * len(cases))))
    assert {*done} == {c.op for c in cases}


def test_gil_is_released_during_a_kernel():
    """Another Python thread runs bytecode in the middle of a kernel's run. Were the GIL held
    for the whole call, no bytecode of another thread could run between its start and end.
    The kernel: the linear cross-entropy gradient, 6 x 1024 x 512 x 8192 FLOP (tens of ms on
    any machine of this kind, with 20 MiB of arrays; a memory-bound op long enough to tell
    needs hundreds of MiB, and gets shorter as its stores get cheaper)."""
    rng = np.random.default_rng(0)
    flce(rng, 3, 4, 5).call()  # compile outside the timing (the kernel takes any shape)
    case = flce(rng, 1024, 512, 8192)
    stamps: list[float] = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            stamps.append(time.perf_counter())
            time.sleep(0)

    t = threading.Thread(target=spin)
    t.start()
    try:
        time.sleep(0.01)
        start = time.perf_counter()
        case.call()
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    margin = 0.1 * (end - start)
    inside = [s for s in stamps if start + margin < s < end - margin]
    assert end - start > 0.01, "kernel too short to tell"
    assert len(inside) > 10, (len(inside), end - start)


def test_the_thread_count_changed_while_blocks_launch():
    """set_threads on one thread while others launch blocks that wait for each other (as a
    kernel's barrier and flags do). It shut the pool down between a launch finding it and
    submitting to it: RuntimeError ('cannot schedule new futures after shutdown'), the blocks
    already submitted left waiting for the others (in a kernel: spinning on a flag for ever)."""
    from npugrad.runtime import pool

    before = pool.threads()
    errors: list[BaseException] = []
    stop = time.monotonic() + 2

    def launch():
        while time.monotonic() < stop and not errors:
            barrier = threading.Barrier(4)
            try:
                pool.run_blocks(lambda _block, b=barrier: b.wait(timeout=10), 4)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

    def switch():
        for n in itertools.cycle([1, 2, 3, 5]):
            if time.monotonic() >= stop or errors:
                return
            pool.set_threads(n)
            time.sleep(0.0005)

    workers = [threading.Thread(target=launch) for _ in range(4)] + [threading.Thread(target=switch)]
    try:
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    finally:
        pool.set_threads(before)
    assert errors == []


def test_a_forked_child_launches_blocks():
    """fork() after the pool's threads started (multiprocessing's fork start method): the child's
    copy of the pool queued the blocks for threads the child does not have, and hung."""
    import os
    import signal

    from npugrad import ops
    from npugrad.runtime import pool

    rng = np.random.default_rng(0)
    x = rng.uniform(0.1, 0.9, 1 << 20).astype(np.float32)  # past kernel.SMALL: a launch of 3 blocks
    y = rng.uniform(0, 1, x.size).astype(np.float32)
    d = np.ones(x.size, np.float32)
    before = pool.threads()
    pool.set_threads(3)
    try:
        ops.binary_cross_entropy_grad(x, y, d, reduction=0)  # the pool's threads started
        pid = os.fork()
        if pid == 0:
            dx = ops.binary_cross_entropy_grad(x, y, d, reduction=0)
            os._exit(0 if np.allclose(dx, (x - y) / (x * (1 - x)), rtol=1e-4) else 1)
        deadline = time.monotonic() + 20
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        assert done[0] == pid and os.waitstatus_to_exitcode(done[1]) == 0, "the child hung or failed"
    finally:
        pool.set_threads(before)
