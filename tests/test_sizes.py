"""Every check runs before any allocation, and an output larger than this machine's memory is a
ValueError naming the parameter that sized it and the size, in the API and, located at the
function, in `npugrad-opt --stage run`."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from npugrad import ops

BIN = Path(sys.executable).parent
HUGE = 1 << 40


def test_a_bool_grad_is_rejected_before_the_output_is_allocated():
    """Was MemoryError: Unable to allocate 1.00 TiB (the output came before the dtype check)."""
    with pytest.raises(TypeError, match="embedding_dense_backward: parameter 'grad' must have dtype"):
        ops.embedding_dense_backward(np.ones((2, 1), bool), np.array([0, 1]), HUGE)


def test_an_absurd_num_weights_names_it_and_the_size():
    with pytest.raises(ValueError, match=r"embedding_dense_backward: parameter 'num_weights' = 1099511627776 .*"
                                         r"4\.00 TiB.*memory"):
        ops.embedding_dense_backward(np.ones((2, 1), np.float32), np.array([0, 1]), HUGE)


def test_a_given_out_is_never_allocated():
    """With out= given nothing is allocated: a wrong shape is the shape error, not a size error."""
    with pytest.raises(ValueError, match="embedding_dense_backward: parameter 'out' must have shape"):
        ops.embedding_dense_backward(np.ones((2, 1), np.float32), np.array([0, 1]), HUGE,
                                     out=np.zeros((2, 1), np.float32))


@pytest.mark.parametrize("op", ["bce", "nll", "flce"])
def test_an_output_sized_by_a_huge_broadcast_input_names_the_input(op):
    """A zero-stride input can describe terabytes in a few bytes; its output cannot be."""
    big = np.broadcast_to(np.float32(0.5), (HUGE, 4))
    if op == "bce":
        call = lambda: ops.binary_cross_entropy_grad(big, big, np.float32(1))
        words = ["binary_cross_entropy_grad: parameter 'input_x'", "'out'", "16.00 TiB"]
    elif op == "nll":
        self = np.broadcast_to(np.float32(0.5), (4, HUGE))
        target = np.broadcast_to(np.int64(0), (4,))
        call = lambda: ops.nll_loss_backward(np.float32(1), self, target, None, 1, -100, np.float32(1))
        words = ["nll_loss_backward: parameter 'self'", "'out'", "16.00 TiB"]
    else:
        x = np.broadcast_to(np.float16(0.5), (HUGE, 4))
        stat = np.broadcast_to(np.float32(1), (HUGE,))
        mask = np.broadcast_to(np.True_, (HUGE,))
        target = np.broadcast_to(np.int64(0), (HUGE,))
        w = np.ones((3, 4), np.float16)
        call = lambda: ops.fused_linear_cross_entropy_loss_grad(stat, x, w, mask, target,
                                                               logits_max=stat, sum_exp_logits=stat)
        words = ["fused_linear_cross_entropy_loss_grad: parameter 'input'", "'input_grad_out'", "8.00 TiB"]
    with pytest.raises(ValueError) as info:
        call()
    for word in words:
        assert word in str(info.value), f"{word!r} not in {info.value}"


HUGE_MODULE = """// A function whose arrays could never be allocated.
func.func @huge(%x: memref<1099511627776xf32>, %y: memref<1099511627776xf32>, %d: memref<f32>,
                %dx: memref<1099511627776xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<1099511627776xf32>) input_y(%y : memref<1099511627776xf32>)
      dloss(%d : memref<f32>) -> dx(%dx : memref<1099511627776xf32>) {reduction = 2 : i64}
  func.return
}
"""


def test_npugrad_opt_run_reports_an_unallocatable_argument_at_its_function(tmp_path):
    """Was `npugrad-opt: internal error: MemoryError: ...`."""
    path = tmp_path / "huge.mlir"
    path.write_text(HUGE_MODULE)
    result = subprocess.run([str(BIN / "npugrad-opt"), str(path), "--stage", "run"], capture_output=True, text=True,
                            timeout=300, check=False)
    assert result.returncode == 1, result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    m = re.match(rf"^{re.escape(str(path))}:2:1: error: (.*)$", first)
    assert m, result.stderr
    for word in ("argument 0", "%x", "memref<1099511627776xf32>", "4.00 TiB", "memory"):
        assert word in m.group(1), f"{word!r} not in {first!r}"


def _in_3_gib(child: str) -> subprocess.CompletedProcess:
    """`python -c child` in a process limited to 3 GiB of address space (as containers and batch
    systems limit them)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))

    return subprocess.run([sys.executable, "-c", child], preexec_fn=limit, capture_output=True, text=True, timeout=600)


def test_a_kernel_scratch_the_process_cannot_have_is_an_error_before_the_launch():
    """The embedding gradient's counting sort holds 8 bytes per index entry in the kernel: 2^29
    zero-stride entries (inputs of a few bytes, an output of 4) need 4 GiB a thread. In a process
    limited to 3 GiB of address space the kernel's malloc returned NULL and the kernel stored
    through it (SIGSEGV); now the call reserves it first and raises (found by a probe)."""
    child = (
        "import numpy as np\n"
        "from npugrad import ops\n"
        "n = 1 << 29\n"
        "g = np.broadcast_to(np.float32(1.0), (n, 1))\n"
        "k = np.broadcast_to(np.int32(0), (n,))\n"
        "try:\n"
        "    ops.embedding_dense_backward(g, k, 1)\n"
        "    print('returned')\n"
        "except (MemoryError, ValueError) as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    r = _in_3_gib(child)
    assert r.returncode == 0, r.stderr[-2000:]
    assert re.match(r"(MemoryError|SignatureError) embedding_dense_backward: parameter 'indices' \(536870912 entries\) "
                    r"needs \d+\.\d\d GiB of scratch memory", r.stdout), r.stdout


def test_a_failed_kernel_malloc_stops_with_a_message_not_a_segfault():
    """A kernel cannot return an error: a malloc that fails inside it (no reservation before the
    launch covers it) now prints what happened and aborts, where it used to store through NULL.
    The runtime's allocator, called directly with more than the address space allows."""
    child = (
        "import ctypes\n"
        "import llvmlite.binding as llvm\n"
        "from npugrad.lowering import machine_code\n"
        "machine_code.init()\n"
        "address = llvm.address_of_symbol('_mlir_memref_to_llvm_alloc')\n"
        "alloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_int64)(address)\n"
        "print(alloc(1 << 20) is not None, flush=True)\n"
        "alloc(1 << 40)\n"
    )
    r = _in_3_gib(child)
    assert r.stdout.strip() == "True", (r.stdout, r.stderr[-2000:])
    assert r.returncode == -6 and "could not allocate its scratch memory" in r.stderr, (r.returncode, r.stderr[-2000:])
