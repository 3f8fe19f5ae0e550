# SPDX-License-Identifier: Apache-2.0
"""The softmax family's reference: softmax over the last dim."""

from __future__ import annotations

import torch

__all__ = ["softmax"]


def softmax(x: torch.Tensor, *, precise: bool = False) -> torch.Tensor:
    """y = exp(x - max(x)) / sum(exp(x - max(x))) over the last dim.

    Non-finite input follows torch.softmax: a row holding a NaN or a +inf, or a row that is
    all -inf, comes out all NaN; a -inf entry of any other row comes out 0.
    """
    compute = torch.float64 if precise else torch.float32
    y = torch.softmax(x.to(compute), dim=-1)
    return y if precise else y.to(x.dtype)
