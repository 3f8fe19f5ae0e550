# SPDX-License-Identifier: Apache-2.0
"""Fake (meta) kernels that check what the real ones check.

torch.compile traces an op with FakeTensors, which carry a shape, strides, a dtype and a
device but no memory. A fake kernel that only computed the output's shape would let a
compiled model take arguments the kernel refuses, and fail late, far from the cause. So each
fake kernel hands its arguments to the same C++ entry point the op calls, described by
their metadata alone (a DLPack view at a made-up address: each tensor its own 2^40-aligned
range plus its storage offset, so alignment reads as for a real allocation, and a tensor
passed twice the same range, so an in-place call reads as one), with the
library in validate-only mode (gks::ValidateOnly): the C++ API runs every check and returns
before it touches the device. The errors are the real ones, word for word.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

# DLPack's dtype codes (dlpack.h): kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4, kDLBool 6,
# kDLFloat8_e4m3fn 10, kDLFloat8_e5m2 12. A dtype outside this table is described as an
# opaque handle, which the library names "an unsupported dtype", as it would the real one.
_DL_DTYPES = {
    torch.float32: (2, 32), torch.float16: (2, 16), torch.bfloat16: (4, 16), torch.float64: (2, 64),
    torch.int8: (0, 8), torch.int16: (0, 16), torch.int32: (0, 32), torch.int64: (0, 64),
    torch.uint8: (1, 8), torch.bool: (6, 8),
    torch.float8_e4m3fn: (10, 8), torch.float8_e5m2: (12, 8),
}
_DL_OPAQUE = 3
_DL_CPU, _DL_CUDA = 1, 2


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

# The views tvm-ffi has not released yet, by address (the deleter drops them).
_LIVE: dict[int, tuple] = {}


@_DELETER
def _release(managed):
    _LIVE.pop(ctypes.addressof(managed.contents), None)


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


def _concrete(values) -> list[int] | None:
    """Plain ints for sizes or strides; a symbolic one (dynamic shapes) reads as its hint,
    the value it has in the example the tracer holds, without adding a guard. None when
    there is no hint."""
    out = []
    for v in values:
        if not isinstance(v, int):
            v = getattr(getattr(v, "node", None), "hint", None)
            if v is None:
                return None
        out.append(int(v))
    return out


class _MetaView:
    """A DLPack producer describing t at a made-up address (slot << 40, plus its storage
    offset in bytes)."""

    def __init__(self, t: torch.Tensor, slot: int, shape: list[int], strides: list[int], offset: int):
        self.t, self.slot, self.shape, self.strides, self.offset = t, slot, shape, strides, offset

    def __dlpack_device__(self):
        kind = self.t.device.type
        return (_DL_CPU, 0) if kind == "cpu" else (_DL_CUDA, self.t.device.index or 0)

    def __dlpack__(self, **_):
        t, ndim = self.t, len(self.shape)
        code, bits = _DL_DTYPES.get(t.dtype, (_DL_OPAQUE, 8 * t.element_size()))
        shape = (ctypes.c_int64 * max(ndim, 1))(*self.shape)
        strides = (ctypes.c_int64 * max(ndim, 1))(*self.strides)
        managed = _DLManagedTensor()
        dl = managed.dl_tensor
        dl.data = (self.slot << 40) + self.offset * t.element_size()
        dl.device = _DLDevice(*self.__dlpack_device__())
        dl.ndim = ndim
        dl.dtype = _DLDataType(code, bits, 1)
        dl.shape, dl.strides, dl.byte_offset = shape, strides, 0
        managed.deleter = _release
        _LIVE[ctypes.addressof(managed)] = (managed, shape, strides)
        return _capsule_new(ctypes.addressof(managed), b"dltensor", None)


def validate(entry: Callable, *args) -> None:
    """Runs gks.cuda's `entry` (an `_out` entry point) on `args` in validate-only mode, each
    tensor described by its metadata: raises what the real call would raise, or returns.
    Skipped when a size has no concrete value (a dynamic dim without a hint)."""
    import tvm_ffi

    from gks import _native

    described = []
    slots: dict[int, int] = {}  # one tensor passed twice (an in-place form) is one range
    for slot, a in enumerate(args, start=1):
        if isinstance(a, torch.Tensor):
            slot = slots.setdefault(id(a), slot)
            shape, strides, offset = _concrete(a.shape), _concrete(a.stride()), _concrete([a.storage_offset()])
            if shape is None or strides is None or offset is None:
                return
            a = tvm_ffi.from_dlpack(_MetaView(a, slot, shape, strides, offset[0]))
        described.append(a)
    module = _native.module()
    module.validate_only(True)
    try:
        entry(*described)
    finally:
        module.validate_only(False)
