# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch


def int8_gemm(
    a_q: torch.Tensor,
    b_q: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype = torch.float16,
    *,
    precise: bool = False,
) -> torch.Tensor:
    """c = (a_q @ b_q) * a_scale * b_scale: a_q [M, K] and b_q [K, N] int8, a_scale [M, 1]
    (or [M]) the per-row scale of a, b_scale [1, N] (or [N]) the per-column scale of b.
    The integer product is exact (float64 holds it for any K below 2^38); the default
    result applies the scales in float32 like the kernels do, precise=True in float64."""
    acc = a_q.to(torch.float64) @ b_q.to(torch.float64)
    m, n = acc.shape
    if precise:
        return acc * a_scale.to(torch.float64).reshape(m, 1) * b_scale.to(torch.float64).reshape(1, n)
    c = acc.to(torch.float32) * a_scale.to(torch.float32).reshape(m, 1) * b_scale.to(torch.float32).reshape(1, n)
    return c.to(out_dtype)
