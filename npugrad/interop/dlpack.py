"""Zero-copy arrays from other libraries: every API function takes PyTorch tensors (and anything
with `__dlpack__`) as well as NumPy arrays, and returns what it was given.

    dx = ops.binary_cross_entropy_grad(x, y, dloss)   # x, y, dloss torch tensors: dx is one too

An argument with `__dlpack__` is read as a NumPy view of the same memory (DLPack): nothing is
copied in, an `out=` tensor or an in-place state is written where it lies, and an array the
call allocates goes back as a tensor over the same memory (`torch.from_numpy`). What the call
returns is the caller's own object where it was passed in (an `out=`, EMA-Adam's states).
Other DLPack producers get NumPy arrays back, which any DLPack consumer reads without a copy.

bfloat16: NumPy's DLPack reader has no bfloat16, so a torch tensor is viewed as int16 first
(`Tensor.view(torch.int16)`, then `ndarray.view(ml_dtypes.bfloat16)`); any other producer's
bfloat16 capsule is read here (`_from_capsule`). Tensors that require grad are read through
`detach()` (the same memory); tensors off the CPU are rejected.
"""

from __future__ import annotations

import ctypes
import functools
import inspect
from collections.abc import Callable

import numpy as np

from npugrad.dialect.checks import SignatureTypeError
from npugrad.dtypes import BFLOAT16

# Arguments the API reads as they are: never foreign, whatever attributes they have.
_PLAIN = frozenset({np.ndarray, int, float, bool, str, type(None), list, tuple})
_CPU = 1  # DLPack's kDLCPU
_BFLOAT = 4  # DLPack's kDLBfloat


def is_foreign(value) -> bool:
    """An array of another library: not a NumPy array, but DLPack-exportable."""
    return type(value) not in _PLAIN and not isinstance(value, np.ndarray) and hasattr(value, "__dlpack__")


def _is_torch(value) -> bool:
    return type(value).__module__.partition(".")[0] == "torch"


def to_numpy(value, op: str = "", name: str = "") -> np.ndarray:
    """A NumPy view of a DLPack-exportable array's memory (no copy)."""
    where = f"{op}: parameter '{name}'" if op else "argument"
    if _is_torch(value) and getattr(getattr(value, "device", None), "type", "cpu") != "cpu":
        # Before __dlpack_device__: torch's raises a bare ValueError for a device DLPack has no
        # code for ("Unknown device type meta for Dlpack"), naming no parameter.
        raise SignatureTypeError(f"{where} must be on the CPU, got a tensor on device {value.device}")
    try:
        device = value.__dlpack_device__()
    except (AttributeError, TypeError):
        device = (_CPU, 0)
    except (ValueError, RuntimeError) as e:  # a producer that cannot name its device
        raise SignatureTypeError(f"{where} must be on the CPU; its DLPack device cannot be read: {e}") from None
    if device[0] != _CPU:
        raise SignatureTypeError(f"{where} must be on the CPU, got an array on DLPack device {tuple(device)}")
    if _is_torch(value):
        return _torch_to_numpy(value, where)
    try:
        return np.from_dlpack(value)
    except (RuntimeError, TypeError, BufferError) as e:
        if "dtype" not in str(e):
            raise SignatureTypeError(f"{where} cannot be read through DLPack: {e}") from None
    return _from_capsule(value.__dlpack__(), where)


def _torch_to_numpy(tensor, where: str) -> np.ndarray:
    import torch

    t = tensor.detach()
    if t.is_conj() or t.is_neg():
        raise SignatureTypeError(f"{where} has a lazy conjugate or negation bit: call resolve_conj()/resolve_neg() first")
    try:
        if t.dtype == torch.bfloat16:
            return np.from_dlpack(t.view(torch.int16)).view(BFLOAT16)
        return np.from_dlpack(t)
    except (RuntimeError, TypeError, BufferError) as e:
        raise SignatureTypeError(f"{where} cannot be read through DLPack ({t.dtype}): {e}") from None


def to_torch(array: np.ndarray):
    """A torch tensor over the array's memory (bfloat16 included)."""
    import torch

    if array.dtype == BFLOAT16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)


# -- a DLPack capsule NumPy cannot read (bfloat16) ----------------------------------------------


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.restype = ctypes.c_int
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]


class _Owner:
    """Holds a consumed DLPack tensor while a NumPy view of it lives; releases it after."""

    def __init__(self, managed, interface: dict):
        self._managed = managed
        self.__array_interface__ = interface

    def __del__(self) -> None:
        if self._managed.contents.deleter:
            self._managed.contents.deleter(self._managed)


def _from_capsule(capsule, where: str) -> np.ndarray:
    """A bfloat16 (unversioned) DLPack capsule as a NumPy view; the producer's deleter runs when
    the view is gone, as the DLPack protocol asks of a consumer."""
    managed = ctypes.cast(_get_pointer(capsule, b"dltensor"), ctypes.POINTER(_DLManagedTensor))
    t = managed.contents.dl_tensor
    if (t.dtype.code, t.dtype.bits, t.dtype.lanes) != (_BFLOAT, 16, 1):
        raise SignatureTypeError(
            f"{where} has DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes), "
            "which npugrad has no kernel for"
        )
    _set_name(capsule, b"used_dltensor")  # consumed: the capsule must not release it again
    shape = tuple(t.shape[i] for i in range(t.ndim))
    itemsize = 2
    strides = tuple(t.strides[i] * itemsize for i in range(t.ndim)) if t.strides else None
    data = (t.data or 0) + t.byte_offset
    interface = {"data": (data, False), "shape": shape, "strides": strides, "typestr": "<u2", "version": 3}
    return np.asarray(_Owner(managed, interface)).view(BFLOAT16)


# -- API functions that accept foreign arrays ---------------------------------------------------


def accepting_foreign_arrays(plan: Callable) -> Callable:
    """`plan(...) -> Call` that also takes DLPack-exportable arrays: they are read as NumPy views,
    and the call's result goes back as the caller's objects (see the module's docstring). NumPy
    calls pay for one type test per argument."""

    @functools.wraps(plan)
    def plan_any(*args, **kwargs):
        for a in args:
            if type(a) not in _PLAIN and is_foreign(a):
                return _plan_foreign(plan, args, kwargs)
        for a in kwargs.values():
            if type(a) not in _PLAIN and is_foreign(a):
                return _plan_foreign(plan, args, kwargs)
        return plan(*args, **kwargs)

    return plan_any


def _plan_foreign(plan: Callable, args: tuple, kwargs: dict):
    given: dict[int, object] = {}  # id of the NumPy view -> the caller's object
    names = _parameter_names(plan)
    torch_in = False

    def convert(name: str, value):
        nonlocal torch_in
        if not is_foreign(value):
            return value
        torch_in |= _is_torch(value)
        array = to_numpy(value, getattr(plan, "__name__", ""), name)
        given[id(array)] = value
        return array

    args = tuple(convert(names[i] if i < len(names) else f"#{i}", a) for i, a in enumerate(args))
    kwargs = {k: convert(k, v) for k, v in kwargs.items()}
    call = plan(*args, **kwargs)

    written = []  # the caller's tensors the kernel writes (its outputs and updated states)

    def back(result):
        if isinstance(result, tuple):
            items = [back(r) for r in result]
            return type(result)(*items) if hasattr(result, "_fields") else tuple(items)  # a NamedTuple stays one
        if isinstance(result, np.ndarray):
            if id(result) in given:
                if _is_torch(given[id(result)]):
                    written.append(given[id(result)])
                return given[id(result)]
            return to_torch(result) if torch_in else result
        return result

    call.result = back(call.result)
    if written:  # autograd then knows they changed in place (a tensor it saved for a backward)
        run = call.run

        def run_and_mark_written():
            result = run()
            import torch

            torch.autograd.graph.increment_version(written)
            return result

        call.run = run_and_mark_written
    return call


@functools.cache
def _parameter_names(plan: Callable) -> tuple[str, ...]:
    return tuple(inspect.signature(plan).parameters)

