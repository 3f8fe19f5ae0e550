# SPDX-License-Identifier: Apache-2.0
"""The norms family's references: rmsnorm, and softmax(rmsnorm) fused."""

from __future__ import annotations

import torch

from gks.reference.softmax import softmax

__all__ = ["rmsnorm", "softmax_rmsnorm"]


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""
    compute = torch.float64 if precise else torch.float32
    xc = x.to(compute)
    inv_rms = torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps)
    y = xc * inv_rms * weight.to(compute)
    return y if precise else y.to(x.dtype)


def softmax_rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim.

    The normalized row is kept in the compute precision (fp32, or fp64 when precise): it is
    NOT rounded to x's dtype between the two steps, and only y is. That is what the fused
    kernels compute, and it differs (slightly, for fp16/bf16) from running the two ops one
    after the other, which rounds the intermediate.
    """
    if precise:
        z = rmsnorm(x, weight, eps, precise=True)
    else:
        z = rmsnorm(x.to(torch.float32), weight.to(torch.float32), eps)
    y = softmax(z, precise=precise)
    return y if precise else y.to(x.dtype)
