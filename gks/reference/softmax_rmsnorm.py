# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch

from gks.reference.rmsnorm import rmsnorm
from gks.reference.softmax import softmax


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
