# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""
    compute = torch.float64 if precise else torch.float32
    xc = x.to(compute)
    inv_rms = torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps)
    y = xc * inv_rms * weight.to(compute)
    return y if precise else y.to(x.dtype)
