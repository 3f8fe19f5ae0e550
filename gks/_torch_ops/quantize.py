# SPDX-License-Identifier: Apache-2.0
"""The quantize family's torch ops: gks::quantize_int8, gks::dequantize_int8,
gks::quantize_fp8 and gks::dequantize_fp8 (see gks._torch_ops for what every custom op
guarantees, and gks.reference.quantize_int8 / quantize_fp8 for the exact contracts)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate

__all__ = ["quantize_int8", "dequantize_int8", "quantize_fp8", "dequantize_fp8"]

_FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _scale_shape(t: torch.Tensor) -> tuple[int, ...]:
    # For a 0-dim input the C++ API rejects the input itself, naming it.
    return (*t.shape[:-1], 1) if t.dim() >= 1 else (1,)


def _quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric per-row INT8 quantization over the last dim of x [..., N].

    Returns (q, scale): scale = absmax(row) / 127, fp32 [..., 1]; q = rint(x / scale) clamped
    to [-127, 127], int8 [..., N]. An all-zero row gives scale 0 and q 0. x: fp32/fp16/bf16
    CUDA tensor, last dim contiguous, any leading strides. Runs on the current CUDA stream.
    """
    q = torch.empty_like(x, dtype=torch.int8, memory_format=torch.contiguous_format)
    scale = x.new_empty(_scale_shape(x), dtype=torch.float32)
    cuda.quantize_int8_out(x, q, scale)
    return q, scale


quantize_int8 = gks_op("quantize_int8", _quantize_int8)


@quantize_int8.op.register_fake
def _(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(_scale_shape(x), dtype=torch.float32, device=x.device)
    validate(cuda.quantize_int8_out, x, q, scale)
    return q, scale


def _check_dtype(dtype: torch.dtype) -> None:
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(
            f"gks.dequantize_int8: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}"
        )


def _dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float16
) -> torch.Tensor:
    """q * scale (an fp32 product) in ``dtype`` (float32, float16 or bfloat16).

    q: int8 CUDA tensor [..., N], last dim contiguous, any leading strides; scale: fp32
    [..., 1] (q's shape with its last dim 1), any strides. Runs on the current CUDA stream.
    """
    _check_dtype(dtype)
    out = torch.empty_like(q, dtype=dtype, memory_format=torch.contiguous_format)
    cuda.dequantize_int8_out(q, scale, out)
    return out


dequantize_int8 = gks_op("dequantize_int8", _dequantize_int8)


@dequantize_int8.op.register_fake
def _(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    _check_dtype(dtype)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    validate(cuda.dequantize_int8_out, q, scale, out)
    return out


def _fp8_scale_shape(x: torch.Tensor, granularity: str, group_size: int) -> tuple[int, ...]:
    """The scale's shape; the checks of granularity, group_size and x's dims every backend
    makes (gks.specs.quantize), so that a bad one is refused before any allocation."""
    from gks.specs.quantize import fp8_check_granularity, fp8_scale_shape

    op = "gks.quantize_fp8"
    fp8_check_granularity(granularity, group_size, op)
    if x.dim() < 1:  # the C++ API names the input itself
        return (1,)
    return fp8_scale_shape(x.shape, granularity, op)


def _quantize_fp8(x: torch.Tensor, granularity: str = "token", group_size: int = 128,
                  scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """FP8 e4m3 quantization of x [..., K] with fp32 scales: scale = absmax / 448 per group
    (granularity 'tensor' [1], 'token' [..., 1], 'group' of 1 x 128 [..., ceil(K / 128)],
    'block' of 128 x 128 for a 2-D x [ceil(M / 128), ceil(K / 128)]), q = e4m3(x / scale)
    (float8_e4m3fn, x's shape). scale_ue8m0 rounds scales up to powers of two. An all-zero
    group gives scale 0 and q 0. x: fp32/fp16/bf16 CUDA tensor, last dim contiguous.
    Runs on the current CUDA stream."""
    scale_shape = _fp8_scale_shape(x, granularity, group_size)
    q = torch.empty_like(x, dtype=torch.float8_e4m3fn, memory_format=torch.contiguous_format)
    scale = x.new_empty(scale_shape, dtype=torch.float32)
    cuda.quantize_fp8_out(x, q, scale, granularity, group_size, scale_ue8m0)
    return q, scale


quantize_fp8 = gks_op("quantize_fp8", _quantize_fp8)


@quantize_fp8.op.register_fake
def _(x: torch.Tensor, granularity: str = "token", group_size: int = 128,
      scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    scale_shape = _fp8_scale_shape(x, granularity, group_size)
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    validate(cuda.quantize_fp8_out, x, q, scale, granularity, group_size, scale_ue8m0)
    return q, scale


def _check_fp8_dtype(dtype: torch.dtype) -> None:
    if dtype not in _FLOAT_DTYPES:
        raise TypeError(f"gks.dequantize_fp8: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}")


def _dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, granularity: str = "token", group_size: int = 128,
                    dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """q * scale (an fp32 product) in ``dtype``; q float8_e4m3fn CUDA tensor [..., K], scale
    fp32 laid out as quantize_fp8 gives it for `granularity`. Runs on the current CUDA
    stream."""
    _check_fp8_dtype(dtype)
    out = torch.empty_like(q, dtype=dtype, memory_format=torch.contiguous_format)
    cuda.dequantize_fp8_out(q, scale, out, granularity, group_size)
    return out


dequantize_fp8 = gks_op("dequantize_fp8", _dequantize_fp8)


@dequantize_fp8.op.register_fake
def _(q: torch.Tensor, scale: torch.Tensor, granularity: str = "token", group_size: int = 128,
      dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    _check_fp8_dtype(dtype)
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    validate(cuda.dequantize_fp8_out, q, scale, out, granularity, group_size)
    return out
