# SPDX-License-Identifier: Apache-2.0
"""The CUDA backend's raw entry points, for any framework that speaks DLPack.

These take the output as an argument and return nothing, so they work on PyTorch, CuPy
and (through jax.dlpack) JAX buffers alike without gks allocating memory. (The two
``*_alloc`` GEMM entry points, which the torch ops use, allocate the output through the
caller's framework instead; PyTorch lends them its allocator.) The kernel runs
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

    config: -1 picks the kernel by heuristic, else an index into the spec's configs
    (gks.registry.get("rmsnorm").configs: registers-8x16B, looped, registers-4x16B,
    cluster-256t, registers-2x16B, looped-512t; csrc/include/gks/rmsnorm.h says what each is)."""
    _native.module().rmsnorm(x, weight, y, float(eps), int(config))


def version() -> str:
    """The version string the native library was built with."""
    return str(_native.module().version())


def softmax_out(x, y, config: int = -1) -> None:
    """y = softmax(x) over the last dim, written into y (same shape and dtype as x).

    config: -1 picks the kernel by heuristic; 0 holds rows in registers where they fit;
    1 walks rows in a loop (online max/sum, then normalize); 2 is 0 with twice the values a
    thread where that fits (csrc/include/gks/softmax.h says more)."""
    _native.module().softmax(x, y, int(config))


def softmax_rmsnorm_out(x, weight, y, eps: float = 1e-6, config: int = -1) -> None:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim, in one kernel, written into y
    (same shape and dtype as x). config: as for softmax_out; 3 splits long 16-byte aligned
    rows over a thread block cluster (sm_90; otherwise as 0); 4 (staged) runs 16-byte aligned
    rows of up to 32768 elements in persistent blocks that fetch their next row into shared
    memory while they work on the current one (the heuristic's pick for rows of 16385-32768;
    otherwise the heuristic's plan)."""
    _native.module().softmax_rmsnorm(x, weight, y, float(eps), int(config))


def flash_attention_fwd_out(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                            config: int = -1) -> None:
    """(o, lse) = flash_attention_fwd(q, k, v, causal, softmax_scale), written into o
    ([B, Hq, Sq, D], q's dtype, last dim contiguous) and lse ([B, Hq, Sq], float32).
    q, k, v and o must be 16-byte aligned (base and batch/head/sequence strides); see
    gks.flash_attention_fwd for the meaning. config: -1 runs the best kernel here, 0 the
    mma.sync kernel, 1 the wgmma kernel (head dims 64 and 128 on an sm_90 GPU with the
    library built for sm_90a; elsewhere 1 gives way to mma.sync). flash_attention_fwd_path
    tells which runs."""
    scale = None if softmax_scale is None else float(softmax_scale)
    _native.module().flash_attention_fwd(q, k, v, o, lse, bool(causal), scale, int(config))


def flash_attention_fwd_path(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                             config: int = -1) -> str:
    """'wgmma' or 'mma.sync': the kernel flash_attention_fwd_out(...) with these arguments
    runs on this GPU (after the same argument checks)."""
    scale = None if softmax_scale is None else float(softmax_scale)
    return str(_native.module().flash_attention_fwd_path(q, k, v, o, lse, bool(causal), scale,
                                                          int(config)))


def sgemm_out(a, b, c, config: int = -1) -> None:
    """c = a @ b in fp32 (FFMA, no TF32), written into c [M, N] float32. a [M, K] and
    b [K, N] are float32, row-major with any leading dimension (transposed views are
    rejected). config: an index into sgemm_configs(), or -1 for the heuristic."""
    _native.module().sgemm(a, b, c, int(config))


def wmma_gemm_out(a, b, c, config: int = -1) -> None:
    """c = a @ b on Tensor Cores: a [M, K], b [K, N] float16 or bfloat16 (row-major, any
    leading dimension), fp32 accumulation, c [M, N] float32 or a's dtype."""
    _native.module().wmma_gemm(a, b, c, int(config))


def int8_gemm_out(a_q, b_q, a_scale, b_scale, c, config: int = -1) -> None:
    """c = float(a_q @ b_q) * a_scale * b_scale: a_q [M, K] int8 (row-major, any leading
    dimension), b_q [K, N] int8, row-major or K-major (a transposed view of [N, K]: stride(0)
    == 1, stride(1) >= K), int32 accumulation; a_scale [M, 1] (or [M]), b_scale [1, N] (or
    [N]) float32; c [M, N] float16, bfloat16 or float32. On sm_90 the Hopper kernel (TMA +
    int8 wgmma, reading b_q K-major), else the mma.sync kernel (reading b_q row-major); a
    b_q in the other layout is transposed into a stream-ordered temporary first. See
    int8_gemm_path and gks.int8_gemm. config: an index into
    gemm_config_names("int8_gemm") (mma.sync configs first, then the "hopper_" ones), or -1
    for the heuristic."""
    _native.module().int8_gemm(a_q, b_q, a_scale, b_scale, c, int(config))


def int8_gemm_alloc(a_q, b_q, a_scale, b_scale, out_dtype, config: int = -1):
    """int8_gemm_out into a new [M, N] tensor of out_dtype allocated through the caller's
    framework, as gemm_alloc does."""
    return _native.module().int8_gemm_alloc(a_q, b_q, a_scale, b_scale, out_dtype, int(config))


def int8_gemm_path(a_q, b_q, a_scale, b_scale, c, config: int = -1) -> str:
    """The path int8_gemm_out(..., config) takes on this GPU (after the same argument
    checks): 'hopper' (b_q K-major, read in place), 'hopper+transpose' (row-major b_q
    transposed first; M >= 512 or a forced "hopper_" config), 'mma' (b_q row-major) or
    'mma+transpose' (K-major b_q transposed first). The Hopper kernel needs an sm_90 GPU
    and a_q (and an in-place b_q) 16-byte aligned: base pointer and leading dimension."""
    return str(_native.module().int8_gemm_path(a_q, b_q, a_scale, b_scale, c, int(config)))


GEMM_KERNELS = ("sgemm", "wmma_gemm", "int8_gemm", "gemm")


def gemm_config_names(kernel: str) -> list[str]:
    """The names of the tile configs compiled for 'sgemm', 'wmma_gemm', 'int8_gemm' or 'gemm'
    (the Hopper kernel), in index order (the `config` argument indexes this list)."""
    if kernel not in GEMM_KERNELS:
        raise ValueError(f"gemm_config_names: unknown GEMM '{kernel}'")
    return [c["name"] for c in _native.config_table(kernel)]


def gemm_heuristic(kernel: str, m: int, n: int, k: int, num_sms: int) -> int:
    """The config index the C++ heuristic picks for an M x N x K problem on num_sms SMs."""
    if kernel not in GEMM_KERNELS:
        raise ValueError(f"gemm_heuristic: unknown GEMM '{kernel}'")
    return int(getattr(_native.module(), f"{kernel}_heuristic")(m, n, k, num_sms))


def gemm_out(a, b, c, config: int = -1) -> None:
    """c = a @ b: a [M, K], b [K, N] float16 or bfloat16 (row-major, any leading dimension),
    fp32 accumulation, c [M, N] float32 or a's dtype. The Hopper kernel on sm_90 (config:
    an index into gemm_config_names(), or -1 for the heuristic), else the WMMA fallback;
    see gemm_path."""
    _native.module().gemm(a, b, c, int(config))


def gemm_alloc(a, b, out_dtype, config: int = -1):
    """gemm_out into a new [M, N] tensor of out_dtype (a's dtype or float32) that the
    library allocates through the caller's framework: tvm-ffi's environment allocator, which
    PyTorch lends (its caching allocator, current stream). One native call instead of a
    Python-level allocation plus gemm_out: less host time a call, which is what bounds
    small GEMMs on a slow host (docs/PERF_NOTES.md, eighteenth check). Other frameworks get
    a ValueError saying so; they use gemm_out."""
    return _native.module().gemm_alloc(a, b, out_dtype, int(config))


def gemm_path(a, b, c) -> str:
    """'hopper' or 'wmma': the kernel gemm_out(a, b, c) runs on this GPU (after the same
    argument checks). WMMA is the fallback off sm_90, or when a or b is not 16-byte aligned
    (base pointer, or leading dimension in bytes) so TMA cannot load it."""
    return str(_native.module().gemm_path(a, b, c))


def quantize_int8_out(x, q, scale) -> None:
    """Symmetric per-row INT8 quantization of x [..., N] (fp32/fp16/bf16) into q (int8, x's
    shape) and scale (fp32, x's shape with its last dim 1): scale = absmax(row) / 127,
    q = rint(x / scale) clamped to [-127, 127] (see gks.reference.quantize_int8)."""
    _native.module().quantize_int8(x, q, scale)


def dequantize_int8_out(q, scale, out) -> None:
    """out = q * scale (an fp32 product, then out's dtype: fp32/fp16/bf16), for q int8
    [..., N] and scale fp32 [..., 1]."""
    _native.module().dequantize_int8(q, scale, out)
