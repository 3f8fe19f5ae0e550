# SPDX-License-Identifier: Apache-2.0
"""Tensors described by metadata alone, as DLPack capsules: what the library's
validate-only mode (gks::ValidateOnly) reads when a torch fake kernel
(gks._torch_ops._fake) or a gks.jax op at trace time (gks.jax._ffi) runs the C++ checks
on values that hold no memory.

Each description sits at a made-up address the caller picks (a slot << 40, plus a byte
offset), so that alignment reads as for a real allocation, two slots never overlap and one
slot passed twice (an in-place form) reads as one buffer. Needs ctypes only: no torch, no
jax.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

__all__ = ["DL_CPU", "DL_CUDA", "Described", "dl_dtype"]

# DLPack's dtype codes (dlpack.h), by dtype name as torch (less its "torch.") and NumPy /
# ml_dtypes spell it: kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12. Anything else is an opaque handle of its width,
# which the library names "an unsupported dtype" as it would the real tensor.
_DL_DTYPES = {
    "float32": (2, 32), "float16": (2, 16), "bfloat16": (4, 16), "float64": (2, 64),
    "int8": (0, 8), "int16": (0, 16), "int32": (0, 32), "int64": (0, 64),
    "uint8": (1, 8), "uint16": (1, 16), "uint32": (1, 32), "uint64": (1, 64), "bool": (6, 8),
    "float8_e4m3fn": (10, 8), "float8_e5m2": (12, 8),
}
_DL_OPAQUE = 3
DL_CPU, DL_CUDA = 1, 2


def dl_dtype(name: str, itemsize: int) -> tuple[int, int]:
    """(DLPack type code, bits) of the dtype called `name` (torch's or NumPy's spelling)."""
    return _DL_DTYPES.get(name.removeprefix("torch."), (_DL_OPAQUE, 8 * itemsize))


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                             ("deleter", _DELETER)]
_LIVE: dict[int, tuple] = {}  # descriptions not yet released by their consumer, by address


@_DELETER
def _release(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


# A prototype of our own: ctypes.pythonapi.PyCapsule_New is one object shared by every
# module in the process, and others set its argtypes to theirs (a destructor type that
# refuses None).
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)(
    ("PyCapsule_New", ctypes.pythonapi))


class Described:
    """A DLPack producer for a tensor of `shape` and `strides` (in elements; None: dense
    row-major) of dtype (code, bits) = `dtype`, on `device` (type, id), whose data sits at
    `address` (bytes; the caller's made-up slot << 40 plus any offset)."""

    def __init__(self, shape: Sequence[int], strides: Sequence[int] | None, dtype: tuple[int, int],
                 device: tuple[int, int], address: int):
        self.shape = tuple(int(d) for d in shape)
        if strides is None:
            dense, step = [], 1
            for d in reversed(self.shape):
                dense.append(step)
                step *= max(d, 1)
            strides = dense[::-1]
        self.strides = tuple(int(s) for s in strides)
        self.dtype, self.device, self.address = dtype, device, address

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **_):
        ndim = len(self.shape)
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        managed = _DLManagedTensor()
        dl = managed.dl_tensor
        dl.data = self.address
        dl.device = _DLDevice(*self.device)
        dl.ndim = ndim
        dl.dtype = _DLDataType(*self.dtype, 1)
        dl.shape, dl.strides, dl.byte_offset = shape, strides, 0
        managed.deleter = _release
        _LIVE[ctypes.addressof(managed)] = (managed, shape, strides)
        return _capsule_new(ctypes.addressof(managed), b"dltensor", None)
