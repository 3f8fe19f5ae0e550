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

from collections.abc import Callable

import torch

from gks.runtime.dlpack import DL_CPU, DL_CUDA, Described, dl_dtype


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


def validate(entry: Callable, *args, **kwargs) -> None:
    """Runs gks.cuda's `entry` (an `_out` entry point) on `args` and `kwargs` in validate-only
    mode, each tensor described by its metadata: raises what the real call would raise, or
    returns. Skipped when a size has no concrete value (a dynamic dim without a hint)."""
    import tvm_ffi

    from gks import _native

    slots: dict[int, int] = {}  # one tensor passed twice (an in-place form) is one range
    missing = object()

    def describe(a, slot):
        if not isinstance(a, torch.Tensor):
            return a
        slot = slots.setdefault(id(a), slot)
        shape, strides, offset = _concrete(a.shape), _concrete(a.stride()), _concrete([a.storage_offset()])
        if shape is None or strides is None or offset is None:
            return missing
        device = (DL_CPU, 0) if a.device.type == "cpu" else (DL_CUDA, a.device.index or 0)
        return tvm_ffi.from_dlpack(Described(shape, strides, dl_dtype(str(a.dtype), a.element_size()), device,
                                             (slot << 40) + offset[0] * a.element_size()))

    described = [describe(a, slot) for slot, a in enumerate(args, start=1)]
    described_kw = {k: describe(a, slot) for slot, (k, a) in enumerate(kwargs.items(), start=len(args) + 1)}
    if any(a is missing for a in (*described, *described_kw.values())):
        return
    module = _native.module()
    module.validate_only(True)
    try:
        entry(*described, **described_kw)
    finally:
        module.validate_only(False)
