"""The launch services (npu.barrier, npu.alloc_shared; runtime/sync.py): every block of a launch
sees what the others wrote before a barrier, in one workspace all of them share, for any number
of threads; launches from several Python threads at once neither deadlock nor share workspaces."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from npugrad.compiler import Pipeline, make_context, parse
from npugrad.runtime import sync
from npugrad.runtime.executable import Executable, block_kernels, signatures

# Round r: every block writes bid + r·100 into slot bid of the shared workspace, waits, then reads
# the slot of the next block (bid + 1 mod nblk) into out[r, bid], and waits again before the next
# round overwrites the workspace. A missing barrier, or a workspace per block, reads stale values.
ROTATE = """
func.func @rotate(%out: memref<?x?xi64>) {
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %ws = npu.alloc_shared(%nblk) : memref<?xi64>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c100 = arith.constant 100 : index
  %rounds = memref.dim %out, %c0 : memref<?x?xi64>
  scf.for %r = %c0 to %rounds step %c1 {
    %shift = arith.muli %r, %c100 : index
    %mine = arith.addi %bid, %shift : index
    %v = arith.index_cast %mine : index to i64
    memref.store %v, %ws[%bid] : memref<?xi64>
    npu.barrier
    %next = arith.addi %bid, %c1 : index
    %n = arith.remui %next, %nblk : index
    %got = memref.load %ws[%n] : memref<?xi64>
    memref.store %got, %out[%r, %bid] : memref<?x?xi64>
    npu.barrier
  }
  func.return
}
"""


def in_threads(fn, args, timeout: float = 60) -> tuple[list[threading.Thread], list[BaseException]]:
    """fn(a) for each of `args`, each on its own thread, all at once; joined (up to `timeout`
    seconds each): the threads and the exceptions they raised."""
    errors: list[BaseException] = []

    def run(a) -> None:
        try:
            fn(a)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            errors.append(e)

    workers = [threading.Thread(target=run, args=(a,)) for a in args]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=timeout)
    return workers, errors


def rotate_kernel():
    """The kernel of ROTATE: blocks that meet at barriers and share a workspace."""
    ctx = make_context()
    module = parse(ROTATE, "rotate.mlir", ctx)
    sigs = signatures(module)
    llvm_ir = Pipeline(fuse=False, distribute=False).lower(module, "llvm-ir", ctx)
    assert sync.services(llvm_ir) == {"_mlir_ciface_npugrad_barrier": None, "_mlir_ciface_npugrad_shared_r1_i64": 1}
    kernel = Executable(llvm_ir, sigs, block_kernels(module))["rotate"]
    assert kernel.synchronized
    return kernel


@pytest.fixture(scope="module")
def rotate():
    return rotate_kernel()


def _expected(rounds: int, blocks: int) -> np.ndarray:
    return np.array([[(b + 1) % blocks + 100 * r for b in range(blocks)] for r in range(rounds)], np.int64)


@pytest.mark.parametrize("blocks", [1, 2, 3, 5])
def test_blocks_see_each_others_writes_after_a_barrier(rotate, blocks):
    out = np.full((50, blocks), -1, np.int64)
    rotate(out, threads=blocks)
    np.testing.assert_array_equal(out, _expected(50, blocks))


def test_launches_from_several_python_threads_take_turns(rotate):
    """Two synchronized launches at once would each hold threads the other's barrier waits for;
    they take turns, and each gets its own workspace."""
    outs = [np.full((30, 3), -1, np.int64) for _ in range(4)]
    workers, errors = in_threads(lambda out: rotate(out, threads=3), outs)
    assert not any(w.is_alive() for w in workers), "a launch did not finish"
    assert not errors
    for out in outs:
        np.testing.assert_array_equal(out, _expected(30, 3))


def test_a_workspace_outside_a_launch_is_a_runtime_error_not_a_crash():
    fill = sync._shared(1)
    with pytest.raises(RuntimeError, match="outside a launch"):
        fill(0, 0, 8, 4)


# Flags (npu.set_flag, npu.wait_flag): in round r, block b waits for block b - 1 to be done with
# round r, reads the value it left in the workspace (block 0: 100·r), adds 1, leaves that for
# block b + 1, and sets its own flag to r + 1. A wait that let a block through too early (flags
# not zeroed, a load that is not an acquire, the wrong counter) reads the workspace's 0 instead.
CHAIN = """
func.func @chain(%out: memref<?x?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c100 = arith.constant 100 : i64
  %one = arith.constant 1 : i64
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %rounds = memref.dim %out, %c0 : memref<?x?xi64>
  %lines = arith.muli %nblk, %c8 : index
  %flags = npu.alloc_shared(%lines) : memref<?xi64>
  %cells = arith.muli %rounds, %nblk : index
  %ws = npu.alloc_shared(%cells) : memref<?xi64>
  %first = arith.cmpi eq, %bid, %c0 : index
  %at_least_1 = arith.maxui %bid, %c1 : index
  %prev = arith.subi %at_least_1, %c1 : index
  %prev_flag = arith.muli %prev, %c8 : index
  %my_flag = arith.muli %bid, %c8 : index
  scf.for %r = %c0 to %rounds step %c1 {
    %r1 = arith.addi %r, %c1 : index
    %need = arith.select %first, %c0, %r1 : index
    npu.wait_flag %flags[%prev_flag], %need : memref<?xi64>
    %row = arith.muli %r, %nblk : index
    %from = arith.addi %row, %prev : index
    %left = memref.load %ws[%from] : memref<?xi64>
    %ri = arith.index_cast %r : index to i64
    %start = arith.muli %ri, %c100 : i64
    %got = arith.select %first, %start, %left : i64
    %mine = arith.addi %got, %one : i64
    %to = arith.addi %row, %bid : index
    memref.store %mine, %ws[%to] : memref<?xi64>
    memref.store %mine, %out[%r, %bid] : memref<?x?xi64>
    npu.set_flag %flags[%my_flag], %r1 : memref<?xi64>
  }
  func.return
}
"""


@pytest.fixture(scope="module")
def chain():
    ctx = make_context()
    module = parse(CHAIN, "chain.mlir", ctx)
    sigs = signatures(module)
    llvm_ir = Pipeline(fuse=False, distribute=False).lower(module, "llvm-ir", ctx)
    assert sync.services(llvm_ir) == {"_mlir_ciface_npugrad_set_flag": sync.FLAG, "_mlir_ciface_npugrad_wait_flag": sync.FLAG,
                                      "_mlir_ciface_npugrad_shared_r1_i64": 1}
    kernel = Executable(llvm_ir, sigs, block_kernels(module))["chain"]
    assert kernel.synchronized  # its blocks wait for each other: they must run at once
    return kernel


@pytest.mark.parametrize("blocks", [1, 2, 3, 8])
def test_a_block_sees_what_the_block_it_waited_for_wrote(chain, blocks):
    """8 blocks on this machine's cores: the waits give their cores away, so it still ends."""
    out = np.full((2000, blocks), -1, np.int64)
    workers, errors = in_threads(lambda o: chain(o, threads=blocks), [out], timeout=120)
    assert not any(w.is_alive() for w in workers), "a block never saw the flag it waited for"
    assert not errors
    np.testing.assert_array_equal(out, 100 * np.arange(2000)[:, None] + np.arange(1, blocks + 1)[None, :])


def barriers_built(monkeypatch) -> list[int]:
    """The block count of every threading.Barrier the launch services build from now on."""
    built: list[int] = []
    barrier = threading.Barrier

    def counting(n):
        built.append(n)
        return barrier(n)

    monkeypatch.setattr(sync.threading, "Barrier", counting)
    return built


def test_a_launch_whose_blocks_only_wait_for_flags_builds_no_barrier(chain, monkeypatch):
    built = barriers_built(monkeypatch)
    out = np.full((10, 2), -1, np.int64)
    chain(out, threads=2)
    np.testing.assert_array_equal(out, 100 * np.arange(10)[:, None] + np.arange(1, 3)[None, :])
    assert built == []


def test_the_flags_are_machine_code_not_a_callback():
    from npugrad.lowering import machine_code

    machine_code.init()
    import llvmlite.binding as llvm

    for name in ("_mlir_ciface_npugrad_set_flag", "_mlir_ciface_npugrad_wait_flag"):
        assert llvm.address_of_symbol(name)
        assert name not in sync._KEEP


# Each launch copies its input through the shared workspace, 20 times: launches that shared
# a workspace would read each other's values.
ECHO = """
func.func @echo(%in: memref<?xi64>, %out: memref<?xi64>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %n = memref.dim %in, %c0 : memref<?xi64>
  %size = arith.muli %n, %nblk : index
  %ws = npu.alloc_shared(%size) : memref<?xi64>
  %base = arith.muli %bid, %n : index
  %k = arith.constant 20 : index
  scf.for %r = %c0 to %k step %c1 {
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %in[%i] : memref<?xi64>
      %j = arith.addi %base, %i : index
      memref.store %v, %ws[%j] : memref<?xi64>
    }
    npu.barrier
    scf.for %i = %c0 to %n step %c1 {
      %j = arith.addi %base, %i : index
      %v = memref.load %ws[%j] : memref<?xi64>
      memref.store %v, %out[%i] : memref<?xi64>
    }
  }
  func.return
}
"""


def test_one_block_launches_run_side_by_side_with_workspaces_of_their_own():
    """pool.run_tasks: each task's kernels run as one block (threads() is 1 on its thread), the
    tasks at once (two of them meet at a threading.Barrier), and the one-block launches of a
    synchronized kernel neither take turns nor share a workspace."""
    import threading as th

    from npugrad.runtime import pool

    ctx = make_context()
    module = parse(ECHO, "echo.mlir", ctx)
    sigs = signatures(module)
    kernel = Executable(Pipeline(fuse=False, distribute=False).lower(module, "llvm-ir", ctx), sigs,
                        block_kernels(module))["echo"]
    assert kernel.synchronized
    before = pool.threads()
    pool.set_threads(2)
    try:
        met = th.Barrier(2, timeout=30)
        seen = []

        def task(i: int):
            seen.append(pool.threads())
            met.wait()  # both tasks are running now
            src = np.arange(1 << 16, dtype=np.int64) * (i + 1)
            out = np.full_like(src, -1)
            kernel(src, out)
            return out

        # A launch of several blocks holds the turn meanwhile: one-block launches do not wait for it.
        with sync._turn:
            workers, errors = in_threads(lambda box: box.append(pool.run_tasks([lambda i=i: task(i) for i in range(2)])),
                                         [box := []], timeout=60)
        assert not any(w.is_alive() for w in workers), "a one-block launch waited for the turn"
        assert not errors
        outs = box[0]
    finally:
        pool.set_threads(before)
    assert seen == [1, 1]
    for i, out in enumerate(outs):
        np.testing.assert_array_equal(out, np.arange(1 << 16, dtype=np.int64) * (i + 1))


def test_run_tasks_keeps_order_balances_and_raises_after_all_end():
    from npugrad.runtime import pool

    before = pool.threads()
    pool.set_threads(3)
    try:
        assert pool.run_tasks([lambda i=i: i * i for i in range(7)]) == [i * i for i in range(7)]
        ran = []

        def boom():
            raise ValueError("task failed")

        with pytest.raises(ValueError, match="task failed"):
            pool.run_tasks([boom, *[lambda i=i: ran.append(i) for i in range(5)]])
        assert sorted(ran) == list(range(5))  # the others still ran
    finally:
        pool.set_threads(before)
    assert pool.threads() == before


def test_run_tasks_compile_with_the_callers_pipeline():
    """A task runs in a copy of the caller's context: the pipeline of a `launch.using` block
    around run_tasks is the one its kernels compile with, on the pool's threads too (it was the
    default there: the chunked loss schedule's part kernels ignored a pipeline's `cpu`)."""
    import threading as th

    from npugrad.runtime import pool
    from npugrad.runtime.launch import current_pipeline, using

    before = pool.threads()
    pool.set_threads(2)
    met = th.Barrier(2, timeout=30)

    def task():
        met.wait()  # two threads: one of the tasks runs on the pool's
        return current_pipeline(), th.current_thread()

    try:
        chosen = Pipeline(vectorize=False, distribute=False)
        with using(chosen):
            seen = pool.run_tasks([task, task])
    finally:
        pool.set_threads(before)
    assert [p for p, _ in seen] == [chosen, chosen]
    assert seen[0][1] is not seen[1][1]
    assert current_pipeline() is None
