"""Arrays whose address or strides are not a multiple of their element size (a packed record
field, a buffer at an odd offset) are rejected, naming the op and the parameter: the kernels
address whole elements, and zero fills of 8 MiB and more use aligned 64-byte streaming stores,
which fault on such an address (a misaligned 16 MB `out` killed the process with SIGSEGV)."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from api_cases import OPS, default_case

from npugrad import ops


def _misaligned(a: np.ndarray) -> np.ndarray:
    raw = np.zeros(a.nbytes + 1, np.uint8)
    moved = raw[1:].view(a.dtype).reshape(a.shape)
    moved[...] = a
    return moved


def _params():
    for op in OPS:
        case = default_case(op, np.random.default_rng(0))
        for name, a in case.arrays.items():
            if isinstance(a, np.ndarray) and a.itemsize > 1:
                yield op, name


@pytest.mark.parametrize("op, name", list(_params()), ids=str)
def test_a_misaligned_array_is_rejected(rng, op, name):
    case = default_case(op, rng)
    case.arrays[name] = _misaligned(case.arrays[name])
    assert not case.arrays[name].flags.aligned
    written = {k: a.tobytes() for k, a in case.written().items()}
    with pytest.raises(ValueError, match=f"^{op}: parameter '{name}' is not aligned"):
        case.call()
    assert {k: a.tobytes() for k, a in case.written().items()} == written


def test_a_packed_record_field_is_rejected():
    records = np.zeros(8, dtype=[("flag", np.uint8), ("x", np.float32)])  # packed: x at odd offsets
    with pytest.raises(ValueError, match="binary_cross_entropy_grad: parameter 'input_x' is not aligned"):
        ops.binary_cross_entropy_grad(records["x"], np.zeros(8, np.float32), np.float32(1))


STREAMING_OUT = """
import numpy as np
from npugrad import ops
n, c = 2063, 4099  # out: 34 MB, zero-filled with streaming stores
raw = np.zeros(n * c * 4 + 1, np.uint8)
out = raw[1:].view(np.float32).reshape(n, c)
try:
    ops.nll_loss_backward(np.float32(1), np.zeros((n, c), np.float32), np.zeros(n, np.int64), None, 1, -100,
                          np.float32(n), out=out)
except ValueError as e:
    print(e)
"""


def test_a_misaligned_streamed_output_is_rejected_not_a_crash():
    result = subprocess.run([sys.executable, "-c", STREAMING_OUT], capture_output=True, text=True, timeout=300,
                            check=False, cwd=Path(__file__).parent)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
    assert result.stdout.startswith("nll_loss_backward: parameter 'out' is not aligned"), result.stdout
