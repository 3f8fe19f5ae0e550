# SPDX-License-Identifier: Apache-2.0
"""The gemm family's references: c = a @ b as each GEMM defines it (sgemm, wmma_gemm,
int8_gemm, gemm)."""

from __future__ import annotations

import torch

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "gemm"]


def sgemm(a: torch.Tensor, b: torch.Tensor, *, precise: bool = False) -> torch.Tensor:
    """c = a @ b for float32 a [M, K], b [K, N]. Computed in float64 (never TF32): the
    float32 result is the correctly rounded product; precise=True returns float64."""
    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(torch.float32)


def wmma_gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K], b [K, N], accumulated exactly (float64) and
    rounded once to out_dtype (float32 or a's dtype); precise=True returns float64."""
    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(out_dtype)


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


def gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K] and b [K, N]: fp32 math, rounded once to
    out_dtype (a's dtype when None, or float32); precise=True computes and returns float64."""
    if precise:
        return a.to(torch.float64) @ b.to(torch.float64)
    return (a.to(torch.float32) @ b.to(torch.float32)).to(out_dtype or a.dtype)
