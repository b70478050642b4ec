"""All five ops from several threads at once, each result checked; and the GIL is released
while a kernel runs."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from conftest import assert_close

from npugrad import ops
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
        pairs = case.run(np.random.default_rng(i))
        for got, want in pairs.values():
            assert_close(got, want)
        return case.op

    with ThreadPoolExecutor(max_workers=6) as pool:
        done = list(pool.map(work, range(2 * len(cases))))
    assert {*done} == {c.op for c in cases}


def test_gil_is_released_during_a_kernel():
    """Another Python thread runs bytecode in the middle of a kernel's run. Were the GIL held
    for the whole call, no bytecode of another thread could run between its start and end."""
    n = 1 << 25
    x = np.random.default_rng(0).uniform(0.01, 0.99, n).astype(np.float32)
    out = np.empty_like(x)
    ops.binary_cross_entropy_grad(x[:10], x[:10], np.float32(1.0))  # compile outside the timing
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
        ops.binary_cross_entropy_grad(x, x, np.float32(1.0), out=out)
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    margin = 0.1 * (end - start)
    inside = [s for s in stamps if start + margin < s < end - margin]
    assert end - start > 0.01, "kernel too short to tell"
    assert len(inside) > 10, (len(inside), end - start)
