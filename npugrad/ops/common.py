"""Shared by the API functions: the checks of scalar arguments (by Python type and range; the
op's rules check their meaning), output allocation and argument conversion."""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from npugrad.dialect.checks import SignatureError, SignatureTypeError
from npugrad.runtime.launch import as_input

__all__ = ["REDUCTION", "REDUCTION_MEAN", "REDUCTION_NONE", "REDUCTION_SUM", "as_input", "flag", "integer", "output",
           "real"]

REDUCTION_NONE, REDUCTION_MEAN, REDUCTION_SUM = 0, 1, 2
REDUCTION = "0 (none), 1 (mean) or 2 (sum)"

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _shown(value) -> str:
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return text if type(value) in (int, float, bool) or value is None else f"{text} ({type(value).__name__})"


# -- scalars -----------------------------------------------------------------------------------------


def integer(op: str, name: str, value, meaning: str = "an integer", lo: int = _INT64_MIN, hi: int = _INT64_MAX) -> int:
    """An integer argument (enum or index) as a Python int: Python and NumPy integers (anything
    with __index__), not bool and not floats, within [lo, hi] (int64 unless said otherwise). The
    op's rules check the value's meaning (e.g. reduction in {0, 1, 2})."""
    if type(value) is int:  # the common case, without the checks below
        v = value
    elif isinstance(value, bool | np.bool_):
        raise SignatureTypeError(f"{op}: parameter '{name}' must be {meaning}, got {_shown(value)}, a bool")
    else:
        try:
            v = operator.index(value)
        except TypeError:
            raise SignatureTypeError(f"{op}: parameter '{name}' must be {meaning}, got {_shown(value)}") from None
    if not lo <= v <= hi:
        span = "an int64" if (lo, hi) == (_INT64_MIN, _INT64_MAX) else f"in [{lo}, {hi}]"
        raise SignatureError(f"{op}: parameter '{name}' must be {meaning}, {span}, got {v}")
    return v


def real(op: str, name: str, value, float32: bool = False) -> float:
    """A real argument as a finite Python float: Python and NumPy reals (ints too), not bool.
    With float32, also finite once rounded to the float32 the kernel computes with."""
    if type(value) is float:  # the common case, without the ABC check
        v = value
    elif isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_):
        try:
            v = float(value)
        except OverflowError:  # an int beyond the float range
            v = math.inf
    else:
        raise SignatureTypeError(f"{op}: parameter '{name}' must be a real number, got {_shown(value)}")
    if not math.isfinite(v):
        raise SignatureError(f"{op}: parameter '{name}' must be a finite real number, got {v}")
    if float32 and abs(v) > _FLOAT32_MAX:
        raise SignatureError(
            f"{op}: parameter '{name}' must be finite as a float32 (|x| <= {_FLOAT32_MAX:.7g}), got {v}"
        )
    return v


def flag(op: str, name: str, value) -> bool:
    """A flag argument: bool or numpy.bool_, or the integers 0 and 1 (the vendor API's C bool);
    nothing else is read as a truth value."""
    if value is True or value is False:
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        if value in (0, 1):
            return bool(value)
        raise SignatureError(f"{op}: parameter '{name}' must be True or False (or 0 or 1), got {value}")
    raise SignatureTypeError(f"{op}: parameter '{name}' must be True or False (or 0 or 1), got {_shown(value)}")


# -- outputs -----------------------------------------------------------------------------------------


def output(op: str, name: str, given, shape, dtype) -> np.ndarray:
    """A fresh output array, or the caller's `given` one (which must be a writable ndarray)."""
    if given is None:
        return np.empty(shape, dtype)
    if not isinstance(given, np.ndarray):
        raise SignatureTypeError(f"{op}: parameter '{name}' must be a numpy array, got {type(given).__name__}")
    if not given.flags.writeable:
        raise SignatureError(f"{op}: parameter '{name}' is read-only")
    return given
