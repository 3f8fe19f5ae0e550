# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch


def sgemm(a: torch.Tensor, b: torch.Tensor, *, precise: bool = False) -> torch.Tensor:
    """c = a @ b for float32 a [M, K], b [K, N]. Computed in float64 (never TF32): the
    float32 result is the correctly rounded product; precise=True returns float64."""
    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(torch.float32)
