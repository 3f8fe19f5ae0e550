# SPDX-License-Identifier: Apache-2.0
"""The gemm family's torch ops: gks::sgemm, gks::wmma_gemm, gks::int8_gemm, gks::gemm,
gks::gemm_fp8, gks::grouped_gemm and gks::grouped_gemm_fp8. See gks._torch_ops for what every
custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks._torch_ops._eager import native_allocates
from gks.runtime.dims import gemm_dims
from gks.runtime.tables import resolve_config
from gks.specs.gemm import (
    GEMM_FP8_SCALINGS,
    check_grouped_gemm,
    check_grouped_gemm_fp8,
    checked_fp8_out_dtype,
    epilogue_code,
    gemm_fp8_shape,
    grouped_gemm_shape,
)

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8"]


def _sgemm(a: torch.Tensor, b: torch.Tensor, config: int = -1) -> torch.Tensor:
    """c = a @ b in float32 with FP32 FMA arithmetic (never TF32).

    a [M, K], b [K, N]: float32 CUDA tensors, row-major with any leading dimension
    (stride(1) == 1). Transposed views are rejected (ValueError); pass .contiguous().
    config: -1 picks the autotuned config for this device and shape bucket if
    ``python -m gks autotune --kernel sgemm`` stored one, else the shape heuristic; an index
    into gks.cuda.gemm_config_names("sgemm") forces that tile config. Runs on the current
    CUDA stream.
    """
    m, n, k = gemm_dims("gks.sgemm", a, b)
    c = a.new_empty((m, n), dtype=torch.float32)
    cuda.sgemm_out(a, b, c, resolve_config("sgemm", a, (m, n, k), config))
    return c


sgemm = gks_op("sgemm", _sgemm)


@sgemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, config: int = -1) -> torch.Tensor:
    m, n, _k = gemm_dims("gks.sgemm", a, b)
    c = torch.empty((m, n), dtype=torch.float32, device=a.device)
    validate(cuda.sgemm_out, a, b, c, config)
    return c


def _wmma_out_dtype(a: torch.Tensor, out_dtype: torch.dtype) -> torch.dtype:
    if out_dtype not in (torch.float32, a.dtype):
        raise TypeError(
            f"gks.wmma_gemm: argument 'out_dtype' must be torch.float32 or the dtype of 'a' "
            f"({a.dtype}), got {out_dtype}"
        )
    return out_dtype


def _wmma_gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, config: int = -1
) -> torch.Tensor:
    """c = a @ b on Tensor Cores (nvcuda::wmma, mma.sync): float16 or bfloat16 a [M, K] and
    b [K, N], fp32 accumulation, c in out_dtype (float32, or a's dtype).

    Operands are row-major with any leading dimension (stride(1) == 1); transposed views
    are rejected (ValueError). config: -1 = autotuned entry if any, else the heuristic; an
    index into gks.cuda.gemm_config_names("wmma_gemm") forces that config.
    """
    m, n, k = gemm_dims("gks.wmma_gemm", a, b)
    c = a.new_empty((m, n), dtype=_wmma_out_dtype(a, out_dtype))
    cuda.wmma_gemm_out(a, b, c, resolve_config("wmma_gemm", a, (m, n, k), config))
    return c


wmma_gemm = gks_op("wmma_gemm", _wmma_gemm)


@wmma_gemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, config: int = -1):
    m, n, _k = gemm_dims("gks.wmma_gemm", a, b)
    c = torch.empty((m, n), dtype=_wmma_out_dtype(a, out_dtype), device=a.device)
    validate(cuda.wmma_gemm_out, a, b, c, config)
    return c


_INT8_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _int8_out_dtype(out_dtype: torch.dtype) -> torch.dtype:
    if out_dtype not in _INT8_OUT_DTYPES:
        raise TypeError(
            f"gks.int8_gemm: argument 'out_dtype' must be torch.float16, torch.bfloat16 or "
            f"torch.float32, got {out_dtype}"
        )
    return out_dtype


def _int8_gemm(
    a_q: torch.Tensor,
    b_q: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype = torch.float16,
    config: int = -1,
) -> torch.Tensor:
    """c = float(a_q @ b_q) * a_scale * b_scale on INT8 Tensor Cores (int32 accumulation).

    a_q [M, K] int8 and a_scale [M, 1] float32 are what ``gks.quantize_int8(a)`` returns;
    b_q [K, N] int8 with b_scale [1, N] float32 is b quantized per column::

        q, s = gks.quantize_int8(b.t().contiguous())   # per row of b.T = per column of b
        b_q, b_scale = q.t(), s.t()

    b_q may be row-major ([K, N], stride(1) == 1, any leading dimension) or K-major, a
    transposed view like q.t() above (stride(0) == 1, stride(1) >= K) — the layout of an
    nn.Linear weight's .t(). The scales may also be 1-D ([M], [N]) and have any stride.
    The int32 sum is exact while K * 128 * 128 < 2^31 (K < 131072); beyond that it wraps
    like torch._int_mm. out_dtype: float16 (default), bfloat16 or float32.

    On an sm_90 GPU (library built for sm_90a) with a_q 16-byte aligned (base pointer and
    leading dimension) this runs the Hopper kernel (TMA, int8 wgmma, warp-specialized and
    persistent), which reads b_q K-major: a K-major b_q is read in place; a row-major one is
    first transposed into a temporary (N x K bytes, stream-ordered) when M >= 512, and
    left to the mma.sync kernel below that. Elsewhere the mma.sync kernel runs, which reads
    b_q row-major (a K-major b_q is transposed into a temporary first).
    gks.cuda.int8_gemm_path tells which; every path gives identical results. config: -1 =
    tuned entry if any (for a K-major b_q), else the heuristic; an index into
    gks.cuda.gemm_config_names("int8_gemm") forces that config (a "hopper_" config gives
    way to the mma.sync heuristic where the Hopper kernel cannot run). Runs on the current
    CUDA stream.
    """
    m, n, k = gemm_dims("gks.int8_gemm", a_q, b_q, "a_q", "b_q")
    c_dtype = _int8_out_dtype(out_dtype)
    # The tuned table was measured on K-major b_q (the registry's inputs); a row-major b_q
    # is left to the heuristic, which weighs the transpose the Hopper kernel would need.
    k_major = b_q.stride(0) == 1 and b_q.stride(1) != 1 and min(k, n) > 1
    cfg = config
    if k_major:
        cfg = resolve_config("int8_gemm", a_q, (m, n, k), config, dtype=c_dtype)
    if native_allocates():  # one native call: c comes from PyTorch's allocator
        return cuda.int8_gemm_alloc(a_q, b_q, a_scale, b_scale, c_dtype, cfg)
    c = a_q.new_empty((m, n), dtype=c_dtype)
    cuda.int8_gemm_out(a_q, b_q, a_scale, b_scale, c, cfg)
    return c


int8_gemm = gks_op("int8_gemm", _int8_gemm)


@int8_gemm.op.register_fake
def _(a_q, b_q, a_scale, b_scale, out_dtype: torch.dtype = torch.float16, config: int = -1):
    m, n, _k = gemm_dims("gks.int8_gemm", a_q, b_q, "a_q", "b_q")
    c = torch.empty((m, n), dtype=_int8_out_dtype(out_dtype), device=a_q.device)
    validate(cuda.int8_gemm_out, a_q, b_q, a_scale, b_scale, c, config)
    return c


def _gemm_out_dtype(a: torch.Tensor, out_dtype: torch.dtype | None) -> torch.dtype:
    if out_dtype is None:
        return a.dtype
    if out_dtype not in (torch.float32, a.dtype):
        raise TypeError(
            f"gks.gemm: argument 'out_dtype' must be None, torch.float32 or the dtype of 'a' "
            f"({a.dtype}), got {out_dtype}"
        )
    return out_dtype


def _epilogue_cols(n: int, bias, row_scale, col_scale, gated, a, op: str) -> int:
    """c's columns (N, or N / 2 gated), after the epilogue's checks (every backend's)."""
    from gks.specs.gemm import check_epilogue

    return check_epilogue(a.shape[0], n, bias, row_scale, col_scale, gated, a.device, op)


def _gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    out_dtype: torch.dtype | None = None,
    config: int = -1,
    bias: torch.Tensor | None = None,  # (not keyword-only: custom ops take no keyword-only tensors)
    row_scale: torch.Tensor | None = None,
    col_scale: torch.Tensor | None = None,
    gated: str | None = None,
) -> torch.Tensor:
    """c = a @ b: float16 or bfloat16 a [M, K] and b [K, N], fp32 accumulation, c in
    out_dtype (None: a's dtype; or torch.float32), through the fused epilogue where given:

        y = (a @ b) * row_scale[m] * col_scale[n] + bias[n]     (fp32)
        c = y, or with gated, c[:, j] = act(y[:, 2j]) * y[:, 2j + 1]  (c [M, N / 2])

    bias [N] float32, float16 or bfloat16; row_scale [M] (or [M, 1]) and col_scale [N] (or
    [1, N]) float32; any strides. gated: None, 'silu' (SwiGLU), 'gelu' or 'gelu_tanh', with
    b's columns interleaving each gate and its up (N even; see gks.reference.gemm). The
    epilogue runs in the kernel's stores: c is written once, in its dtype.

    On an sm_90 GPU (with the library built for sm_90a) this runs the Hopper kernel (TMA,
    wgmma, warp-specialized and persistent); elsewhere, or when a or b is not 16-byte
    aligned (base pointer, or leading dimension in bytes), the WMMA kernel
    (gks.wmma_gemm's). gks.cuda.gemm_path tells which. Operands are row-major with any
    leading dimension (stride(1) == 1); transposed views are rejected (ValueError).
    config: -1 = tuned entry if any, else the heuristic; an index into
    gks.cuda.gemm_config_names() forces that Hopper config (ignored by the WMMA fallback).
    Outputs too small to fill the GPU split K over several CTAs (a temporary of at most
    8 x M x N fp32 partial sums, allocated in stream order); the stream-K config takes a
    temporary of one tile's fp32 sums per SM instead. Runs on the current CUDA stream.
    """
    m, n, k = gemm_dims("gks.gemm", a, b)
    c_dtype = _gemm_out_dtype(a, out_dtype)
    epilogue = {"bias": bias, "row_scale": row_scale, "col_scale": col_scale, "gated": gated}
    code = 0
    if any(v is not None for v in epilogue.values()):
        cols = _epilogue_cols(n, bias, row_scale, col_scale, gated, a, "gks.gemm")
        code = epilogue_code(bias is not None, row_scale is not None or col_scale is not None, gated)
    else:
        cols, epilogue = n, {}
    config = resolve_config("gemm", a, (m, n, k, code), config)
    if native_allocates():  # one native call: c comes from PyTorch's allocator
        return cuda.gemm_alloc(a, b, c_dtype, config, **epilogue)
    c = a.new_empty((m, cols), dtype=c_dtype)
    cuda.gemm_out(a, b, c, config, **epilogue)
    return c


gemm = gks_op("gemm", _gemm)


@gemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, config: int = -1,
      bias=None, row_scale=None, col_scale=None, gated=None):
    m, n, _k = gemm_dims("gks.gemm", a, b)
    cols = _epilogue_cols(n, bias, row_scale, col_scale, gated, a, "gks.gemm")
    c = torch.empty((m, cols), dtype=_gemm_out_dtype(a, out_dtype), device=a.device)
    validate(cuda.gemm_out, a, b, c, config, bias=bias, row_scale=row_scale, col_scale=col_scale, gated=gated)
    return c


def _gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    scaling: str = "tensor",
    out_dtype: torch.dtype = torch.bfloat16,
    config: int = -1,
    bias: torch.Tensor | None = None,
    gated: str | None = None,
) -> torch.Tensor:
    """c [M, N] = fp8 a [M, K] @ b [K, N] with fp32 accumulation and fp32 scales, c in
    out_dtype (bfloat16, float16 or float32); gks.reference.gemm_fp8 says it exactly.
    bias [N] and gated: gks.gemm's fused epilogue on the scaled product (gated: c [M, N / 2]).

    a and b both float8_e4m3fn or both float8_e5m2, K a multiple of 16; a row-major (any
    leading dimension), b row-major [K, N] or K-major (b = w.t() of a row-major [N, K]
    weight w). scaling: 'tensor' (a_scale, b_scale of one element), 'row' (a_scale [M] or
    [M, 1], b_scale [N] or [1, N]) or 'block' (DeepSeek-V3's: a_scale [M, ceil(K / 128)]
    as gks.quantize_fp8(x, "group") gives it, b_scale [ceil(K / 128), ceil(N / 128)], one
    per 128 x 128 block of b); scales fp32, any strides. config: -1 = tuned entry if any,
    else the heuristic; an index into gks.cuda.gemm_config_names("gemm_fp8") forces that
    config. Runs on the current CUDA stream.
    """
    m, n, _k = gemm_dims("gks.gemm_fp8", a, b)
    cols = _epilogue_cols(n, bias, None, None, gated, a, "gks.gemm_fp8")
    c = a.new_empty((m, cols), dtype=checked_fp8_out_dtype(out_dtype, "gks.gemm_fp8"))
    if scaling in GEMM_FP8_SCALINGS:  # else the library refuses it, naming it
        shape = gemm_fp8_shape(a, b, scaling) + (epilogue_code(bias is not None, False, gated),)
        config = resolve_config("gemm_fp8", a, shape, config, dtype=c.dtype)
    cuda.gemm_fp8_out(a, b, a_scale, b_scale, c, scaling, config, bias=bias, gated=gated)
    return c


gemm_fp8 = gks_op("gemm_fp8", _gemm_fp8)


@gemm_fp8.op.register_fake
def _(a, b, a_scale, b_scale, scaling: str = "tensor", out_dtype: torch.dtype = torch.bfloat16, config: int = -1,
      bias=None, gated=None):
    m, n, _k = gemm_dims("gks.gemm_fp8", a, b)
    cols = _epilogue_cols(n, bias, None, None, gated, a, "gks.gemm_fp8")
    c = torch.empty((m, cols), dtype=checked_fp8_out_dtype(out_dtype, "gks.gemm_fp8"), device=a.device)
    validate(cuda.gemm_fp8_out, a, b, a_scale, b_scale, c, scaling, config, bias=bias, gated=gated)
    return c


def _grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    group_offsets: torch.Tensor | None = None,
    group_counts: torch.Tensor | None = None,
    config: int = -1,
) -> torch.Tensor:
    """The MoE expert GEMMs in one launch, c = a @ b[g] for each group g of a's rows;
    gks.reference.grouped_gemm says it exactly. Exactly one of group_offsets and
    group_counts is given.

    Contiguous (group_offsets [G + 1] int32): a [T, K] (tokens sorted by expert), c [T, N];
    group g is rows [group_offsets[g], group_offsets[g + 1]), bounds clamped into [0, T].
    Masked (group_counts [G] int32): a [G, M_max, K], c [G, M_max, N]; group g is the first
    group_counts[g] rows of its slab (decode under CUDA graphs). b [G, K, N]; fp16 or bf16,
    fp32 accumulation, c in a's dtype; every row of c outside the groups is 0. The offsets
    and counts are read on the device only (no host synchronization). The Hopper kernel
    (sm_90 only; gks.triton.grouped_gemm runs elsewhere). config: -1 = tuned entry if any,
    else the heuristic; an index into gks.cuda.gemm_config_names("grouped_gemm") forces it.
    Runs on the current CUDA stream.
    """
    masked = check_grouped_gemm(a, b, group_offsets, group_counts, "gks.grouped_gemm")
    c = a.new_empty((*a.shape[:-1], b.shape[2]))
    config = resolve_config("grouped_gemm", a, grouped_gemm_shape(a, b, masked), config)
    cuda.grouped_gemm_out(a, b, group_offsets, group_counts, c, config)
    return c


grouped_gemm = gks_op("grouped_gemm", _grouped_gemm)


@grouped_gemm.op.register_fake
def _(a, b, group_offsets=None, group_counts=None, config: int = -1):
    check_grouped_gemm(a, b, group_offsets, group_counts, "gks.grouped_gemm")
    c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=a.dtype, device=a.device)
    validate(cuda.grouped_gemm_out, a, b, group_offsets, group_counts, c, config)
    return c


def _grouped_gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    group_offsets: torch.Tensor | None = None,
    group_counts: torch.Tensor | None = None,
    out_dtype: torch.dtype = torch.bfloat16,
    config: int = -1,
) -> torch.Tensor:
    """grouped_gemm's grouped product (either layout, the same group semantics) of
    float8_e4m3fn a and b with DeepSeek-V3's block scales, c in out_dtype (bfloat16,
    float16 or float32); gks.reference.grouped_gemm_fp8 says it exactly.

    a_scale [T, ceil(K / 128)] (contiguous) or [G, M_max, ceil(K / 128)] (masked): one fp32
    scale per row and 128 of K, as gks.quantize_fp8(x, "group") gives it; b_scale [G,
    ceil(K / 128), ceil(N / 128)], one per 128 x 128 block of each b[g]. b [G, K, N]
    row-major or K-major (w.transpose(1, 2) of [G, N, K] expert weights, read in place); K
    a multiple of 16. The Hopper kernel (sm_90 only; gks.triton.grouped_gemm_fp8 runs
    elsewhere). config: -1 = tuned entry if any, else the heuristic; an index into
    gks.cuda.gemm_config_names("grouped_gemm_fp8") forces it. Runs on the current CUDA
    stream.
    """
    masked = check_grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, out_dtype,
                                    "gks.grouped_gemm_fp8")
    c = a.new_empty((*a.shape[:-1], b.shape[2]), dtype=out_dtype)
    config = resolve_config("grouped_gemm_fp8", a, grouped_gemm_shape(a, b, masked), config, dtype=c.dtype)
    cuda.grouped_gemm_fp8_out(a, b, a_scale, b_scale, group_offsets, group_counts, c, config)
    return c


grouped_gemm_fp8 = gks_op("grouped_gemm_fp8", _grouped_gemm_fp8)


@grouped_gemm_fp8.op.register_fake
def _(a, b, a_scale, b_scale, group_offsets=None, group_counts=None, out_dtype: torch.dtype = torch.bfloat16,
      config: int = -1):
    check_grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, out_dtype, "gks.grouped_gemm_fp8")
    c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=out_dtype, device=a.device)
    validate(cuda.grouped_gemm_fp8_out, a, b, a_scale, b_scale, group_offsets, group_counts, c, config)
    return c
