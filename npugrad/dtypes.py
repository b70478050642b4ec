"""Element types: NumPy dtypes, their MLIR spelling, and the classes the ops accept."""

from __future__ import annotations

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import (
    BFloat16Type,
    Float16Type,
    Float32Type,
    IntegerType,
    Signedness,
    bf16,
    f16,
    f32,
    i1,
    i32,
    i64,
)
from xdsl.ir import Attribute

ui8 = IntegerType(8, Signedness.UNSIGNED)

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)

_TO_MLIR: dict[np.dtype, Attribute] = {
    np.dtype(np.float32): f32,
    np.dtype(np.float16): f16,
    BFLOAT16: bf16,
    np.dtype(np.bool_): i1,
    np.dtype(np.uint8): ui8,
    np.dtype(np.int32): i32,
    np.dtype(np.int64): i64,
}
_TO_NUMPY = {str(v): k for k, v in _TO_MLIR.items()}

FLOATS = (Float32Type, Float16Type, BFloat16Type)


def to_mlir(dtype) -> Attribute:
    """The MLIR element type of a NumPy dtype; TypeError for one npugrad has no kernel for."""
    dt = np.dtype(dtype)
    if dt not in _TO_MLIR:
        raise TypeError(f"unsupported dtype {dt}")
    return _TO_MLIR[dt]


def to_numpy(element_type: Attribute) -> np.dtype:
    return _TO_NUMPY[str(element_type)]


def is_float(t: Attribute) -> bool:
    return isinstance(t, FLOATS)



def is_uint8(t: Attribute) -> bool:
    return isinstance(t, IntegerType) and t.width.data == 8 and t.signedness.data == Signedness.UNSIGNED
