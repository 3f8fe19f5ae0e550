# SPDX-License-Identifier: Apache-2.0
"""The CUDA backend's raw entry points, for any framework that speaks DLPack.

These take the output as an argument and return nothing, so they work on PyTorch, CuPy
and (through jax.dlpack) JAX buffers alike without gks allocating memory. The kernel runs
on the caller's current stream: PyTorch's current stream for torch tensors; for other
frameworks, the stream set with ``tvm_ffi.use_raw_stream(device, stream_handle)``, else
the default stream. PyTorch users want :func:`gks.rmsnorm` instead.

Example (CuPy)::

    import cupy, tvm_ffi, gks.cuda
    x = cupy.random.randn(8, 4096, dtype=cupy.float32); w = cupy.ones(4096, cupy.float32)
    y = cupy.empty_like(x)
    s = cupy.cuda.get_current_stream()
    with tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), s.ptr):
        gks.cuda.rmsnorm_out(x, w, y, 1e-6)
"""

from __future__ import annotations

from gks import _native


def rmsnorm_out(x, weight, y, eps: float = 1e-6, config: int = -1) -> None:
    """y = rmsnorm(x, weight, eps), written into y (same shape and dtype as x).

    config: -1 picks the kernel by heuristic; 0 holds rows in registers; 1 loops over
    rows twice (second pass from L2). See gks/specs/rmsnorm.py."""
    _native.module().rmsnorm(x, weight, y, float(eps), int(config))


def version() -> str:
    """The version string the native library was built with."""
    return str(_native.module().version())


def softmax_out(x, y, config: int = -1) -> None:
    """y = softmax(x) over the last dim, written into y (same shape and dtype as x).

    config: -1 picks the kernel by heuristic; 0 holds rows in registers where they fit;
    1 walks rows in a loop (online max/sum, then normalize). See gks/specs/softmax.py."""
    _native.module().softmax(x, y, int(config))


def softmax_rmsnorm_out(x, weight, y, eps: float = 1e-6, config: int = -1) -> None:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim, in one kernel, written into y
    (same shape and dtype as x). config: as for softmax_out."""
    _native.module().softmax_rmsnorm(x, weight, y, float(eps), int(config))


def flash_attention_fwd_out(q, k, v, o, lse, causal: bool = False, softmax_scale=None) -> None:
    """(o, lse) = flash_attention_fwd(q, k, v, causal, softmax_scale), written into o
    ([B, Hq, Sq, D], q's dtype, last dim contiguous) and lse ([B, Hq, Sq], float32).
    q, k, v and o must be 16-byte aligned (base and batch/head/sequence strides); see
    gks.flash_attention_fwd for the meaning."""
    scale = None if softmax_scale is None else float(softmax_scale)
    _native.module().flash_attention_fwd(q, k, v, o, lse, bool(causal), scale)
