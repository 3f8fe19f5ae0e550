# SPDX-License-Identifier: Apache-2.0
"""Symmetric per-row INT8 quantization and its inverse, in plain PyTorch.

quantize_int8(x) -> (q, scale), over the last dim of x [..., N]:

1. absmax = max |x| over the row, NaN-propagating; 0 for an empty row;
2. scale = absmax / 127, one IEEE fp32 division (rounded to nearest);
3. v = x / scale, one IEEE fp32 division (x converted to fp32 first, exact for fp16/bf16);
4. q = 0 where v is NaN, else rint(clamp(v, -127, 127)) (round half to even), as int8.

So an all-zero row gives scale 0 and q 0; a row with a NaN gives scale NaN and q 0; a row
with +-inf (and no NaN) gives scale inf and q 0; a row whose absmax / 127 underflows to 0
gives scale 0 and q = +-127 for its non-zero entries. Every backend matches this bit for
bit (see csrc/include/gks/quantize_int8.h).

``precise``: the op *is* the fp32 formula above, so there is nothing more precise to
compute: both settings return the same int8 q and fp32 scale. They differ only in how the
two divisions are evaluated: ``precise=False`` divides in fp32 (by a tensor, since PyTorch's
CUDA division by a Python scalar multiplies by its reciprocal and can be an ulp off);
``precise=True`` divides in float64 and rounds to fp32, which is the correctly rounded fp32
quotient on any device (53 >= 2 * 24 + 2 bits), so it is the yardstick the tests use.

dequantize_int8(q, scale, dtype) = q * scale: an fp32 product rounded to ``dtype``;
``precise=True`` returns the exact product in float64.
"""

from __future__ import annotations

import torch

__all__ = ["quantize_int8", "dequantize_int8"]

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _absmax(xf: torch.Tensor) -> torch.Tensor:
    if xf.shape[-1] == 0:  # the max over nothing of |x| >= 0
        return torch.zeros((*xf.shape[:-1], 1), dtype=xf.dtype, device=xf.device)
    return xf.abs().amax(dim=-1, keepdim=True)  # amax propagates NaN


def quantize_int8(x: torch.Tensor, *, precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [..., N], scale fp32 [..., 1]) with scale = absmax / 127, q = rint(x / scale)."""
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"gks.reference.quantize_int8: argument 'x' must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("gks.reference.quantize_int8: argument 'x' must have at least 1 dim, got a scalar")
    xf = x.to(torch.float32)
    absmax = _absmax(xf)
    if precise:
        scale = (absmax.double() / 127.0).float()
        v = (xf.double() / scale.double()).float()
    else:
        scale = absmax / torch.full_like(absmax, 127.0)
        v = xf / scale
    q = torch.where(torch.isnan(v), torch.zeros_like(v), v.clamp(-127.0, 127.0).round())
    return q.to(torch.int8), scale


def dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float16, *, precise: bool = False
) -> torch.Tensor:
    """q * scale (fp32 product) in ``dtype``; scale is fp32 [..., 1] (q's shape, last dim 1)."""
    if q.dtype != torch.int8:
        raise TypeError(f"gks.reference.dequantize_int8: argument 'q' must be int8, got {q.dtype}")
    if scale.dtype != torch.float32:
        raise TypeError(f"gks.reference.dequantize_int8: argument 'scale' must be float32, got {scale.dtype}")
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"gks.reference.dequantize_int8: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}"
        )
    if q.dim() < 1 or tuple(scale.shape) != (*q.shape[:-1], 1):
        raise ValueError(
            f"gks.reference.dequantize_int8: argument 'scale' must have shape {[*q.shape[:-1], 1]} "
            f"('q' with its last dim 1), got {list(scale.shape)}"
        )
    if precise:
        return q.double() * scale.double()  # exact: 8 x 24 significant bits fit in 53
    return (q.float() * scale).to(dtype)
