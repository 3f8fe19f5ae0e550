# SPDX-License-Identifier: Apache-2.0
"""The quantize family's DLPack entry points: int8 quantize and dequantize. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["quantize_int8_out", "dequantize_int8_out"]


def quantize_int8_out(x, q, scale) -> None:
    """Symmetric per-row INT8 quantization of x [..., N] (fp32/fp16/bf16) into q (int8, x's
    shape) and scale (fp32, x's shape with its last dim 1): scale = absmax(row) / 127,
    q = rint(x / scale) clamped to [-127, 127] (see gks.reference.quantize_int8)."""
    _native.module().quantize_int8(x, q, scale)


def dequantize_int8_out(q, scale, out) -> None:
    """out = q * scale (an fp32 product, then out's dtype: fp32/fp16/bf16), for q int8
    [..., N] and scale fp32 [..., 1]."""
    _native.module().dequantize_int8(q, scale, out)
