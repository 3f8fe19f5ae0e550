# SPDX-License-Identifier: Apache-2.0
"""The eager fast path the gks ops share.

Each op is a ``torch.library.custom_op`` (``torch.ops.gks.<name>``), which is what
torch.compile traces, opcheck checks and autograd sees. Going through the dispatcher costs
as much host time a call as a small kernel takes (docs/perf/gemm.md); so ``gks.<name>``
calls the op's Python body directly when nothing needs the dispatcher: plain eager mode
(not compiling), plain torch.Tensor arguments on a CUDA device (no subclass such as a
FakeTensor, no meta tensor), and no argument that autograd would have to track. Anything
else goes through the custom op, unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch


# Bound once: every op call asks (module attribute lookups add to every call's host time).
_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor


def _plain_eager(args: tuple, kwargs: dict) -> bool:
    if _is_compiling():
        return False
    grad = _is_grad_enabled()
    for value in (*args, *kwargs.values()) if kwargs else args:
        if isinstance(value, _Tensor) and (
            type(value) is not _Tensor or not value.is_cuda or (grad and value.requires_grad)
        ):
            return False
    return True


def gks_op(name: str, body: Callable, mutates_args: tuple[str, ...] = (),
           schema: str | None = None) -> Callable:
    """gks.<name>: the custom op ``gks::<name>`` made from `body` (reachable as the result's
    ``.op``, where its fake kernel is registered), called through `body` itself in plain
    eager use. mutates_args: the arguments an in-place op writes. schema: the op's schema,
    where torch cannot infer it from `body`'s annotations (a tuple default such as
    ``window_size=(-1, -1)``)."""
    op = torch.library.custom_op(f"gks::{name}", body, mutates_args=mutates_args, schema=schema)

    @functools.wraps(body)
    def call(*args, **kwargs):
        if _plain_eager(args, kwargs):
            return body(*args, **kwargs)
        return op(*args, **kwargs)

    call.op = op
    return call


@functools.cache
def native_allocates() -> bool:
    """True when the native library can allocate an op's output through PyTorch: tvm-ffi's
    environment allocator, which it takes from ``torch.Tensor.__dlpack_c_exchange_api__``
    (PyTorch 2.10+, or tvm-ffi's optional extension on older ones). Otherwise the ops
    allocate in Python and call the ``_out`` entry point."""
    from gks import _native

    _native.module()  # loading tvm-ffi may add the attribute
    return hasattr(torch.Tensor, "__dlpack_c_exchange_api__")
