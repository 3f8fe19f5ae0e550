# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch


def wmma_gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K], b [K, N], accumulated exactly (float64) and
    rounded once to out_dtype (float32 or a's dtype); precise=True returns float64."""
    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(out_dtype)
