# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch


def gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K] and b [K, N]: fp32 math, rounded once to
    out_dtype (a's dtype when None, or float32); precise=True computes and returns float64."""
    if precise:
        return a.to(torch.float64) @ b.to(torch.float64)
    return (a.to(torch.float32) @ b.to(torch.float32)).to(out_dtype or a.dtype)
