"""Shared by the API functions: output allocation and argument conversion."""

from __future__ import annotations

import numpy as np

from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.runtime.launch import as_input

__all__ = ["REDUCTION_MEAN", "REDUCTION_NONE", "REDUCTION_SUM", "as_input", "output"]

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2


def output(op: str, name: str, given, shape, dtype) -> np.ndarray:
    """A fresh output array, or the caller's `given` one (which must be a writable ndarray)."""
    if given is None:
        return np.empty(shape, dtype)
    if not isinstance(given, np.ndarray):
        raise SignatureTypeError(f"{op}: parameter '{name}' must be a numpy array, got {type(given).__name__}")
    if not given.flags.writeable:
        raise SignatureError(f"{op}: parameter '{name}' is read-only")
    return given
