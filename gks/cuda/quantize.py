# SPDX-License-Identifier: Apache-2.0
"""The quantize family's DLPack entry points: int8 and fp8 quantize and dequantize. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["quantize_int8_out", "dequantize_int8_out", "quantize_fp8_out", "dequantize_fp8_out"]


def quantize_int8_out(x, q, scale) -> None:
    """Symmetric per-row INT8 quantization of x [..., N] (fp32/fp16/bf16) into q (int8, x's
    shape) and scale (fp32, x's shape with its last dim 1): scale = absmax(row) / 127,
    q = rint(x / scale) clamped to [-127, 127] (see gks.reference.quantize_int8)."""
    _native.module().quantize_int8(x, q, scale)


def dequantize_int8_out(q, scale, out) -> None:
    """out = q * scale (an fp32 product, then out's dtype: fp32/fp16/bf16), for q int8
    [..., N] and scale fp32 [..., 1]."""
    _native.module().dequantize_int8(q, scale, out)


def quantize_fp8_out(x, q, scale, granularity: str = "token", group_size: int = 128,
                     scale_ue8m0: bool = False) -> None:
    """FP8 e4m3 quantization of x (fp32/fp16/bf16) into q (float8_e4m3fn, x's shape) and
    scale (fp32, the granularity's shape: 'tensor' [1], 'token' [..., 1], 'group'
    [..., ceil(K / 128)], 'block' [ceil(M / 128), ceil(K / 128)]); see
    gks.reference.quantize_fp8 for the contract."""
    _native.module().quantize_fp8(x, q, scale, granularity, group_size, bool(scale_ue8m0))


def dequantize_fp8_out(q, scale, out, granularity: str = "token", group_size: int = 128) -> None:
    """out = q * scale (an fp32 product, then out's dtype), scale laid out as quantize_fp8
    gives it for the granularity."""
    _native.module().dequantize_fp8(q, scale, out, granularity, group_size)
