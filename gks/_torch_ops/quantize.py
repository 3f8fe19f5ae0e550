# SPDX-License-Identifier: Apache-2.0
"""The quantize family's torch ops: gks::quantize_int8 and gks::dequantize_int8 (see
gks._torch_ops for what every custom op guarantees, and gks.reference.quantize_int8 for the
exact contract)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate

__all__ = ["quantize_int8", "dequantize_int8"]

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
