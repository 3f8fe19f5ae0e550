# SPDX-License-Identifier: Apache-2.0
"""gks::rmsnorm — see gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks.profile import autotune


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N]; fp32 math, output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides.
    weight: [N], x's dtype. Runs on the current CUDA stream.
    config: the kernel shape (-1: the tuned table's pick for this shape if any, else the
    heuristic; see gks.cuda.rmsnorm_out).
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.rmsnorm_out(x, weight, y, eps, autotune.resolve_config("rmsnorm", x, autotune.row_dims(x), config))
    return y


rmsnorm = gks_op("rmsnorm", _rmsnorm)


@rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
