# SPDX-License-Identifier: Apache-2.0
"""The CUDA backend's raw entry points, for any framework that speaks DLPack.

These take the output as an argument and return nothing, so they work on PyTorch, CuPy
and (through jax.dlpack) JAX buffers alike without gks allocating memory. (The two
``*_alloc`` GEMM entry points, which the torch ops use, allocate the output through the
caller's framework instead; PyTorch lends them its allocator.) The kernel runs
on the caller's current stream: PyTorch's current stream for torch tensors; for other
frameworks, the stream set with ``tvm_ffi.use_raw_stream(device, stream_handle)``, else
the default stream. PyTorch users want :func:`gks.rmsnorm` instead.

An output must hold each of its elements once (no stride-0, expanded view) and share no
memory with another argument; the row ops (softmax, rmsnorm, softmax_rmsnorm) take y that is
exactly x, and run in place. Anything else that overlaps is refused, naming both arguments.

Example (CuPy)::

    import cupy, tvm_ffi, gks.cuda
    x = cupy.random.randn(8, 4096, dtype=cupy.float32); w = cupy.ones(4096, cupy.float32)
    y = cupy.empty_like(x)
    s = cupy.cuda.get_current_stream()
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), s.ptr):
        gks.cuda.rmsnorm_out(x, w, y, 1e-6)
"""

from __future__ import annotations

from gks import _native, registry


def version() -> str:
    """The version string the native library was built with."""
    return str(_native.module().version())


# The entry points live in the family modules (gks/cuda/<family>.py, each module's __all__).
__all__ = ["version", *registry.export_families(__name__, globals())]
