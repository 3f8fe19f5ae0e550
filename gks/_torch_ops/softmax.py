# SPDX-License-Identifier: Apache-2.0
"""gks::softmax and gks::softmax_rmsnorm — see gks._torch_ops for what every custom op
guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks.profile import autotune


def _softmax(x: torch.Tensor, config: int = -1) -> torch.Tensor:
    """Softmax over the last dim of x [..., N]; fp32 math, output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides. Non-finite
    input gives torch.softmax's result (a row with NaN or +inf, or all -inf, is all NaN).
    Runs on the current CUDA stream. config: the kernel shape (-1: the tuned table's pick
    for this shape if any, else the heuristic; see gks.cuda.softmax_out).
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.softmax_out(x, y, autotune.resolve_config("softmax", x, autotune.row_dims(x), config))
    return y


softmax = gks_op("softmax", _softmax)


@softmax.op.register_fake
def _(x: torch.Tensor, config: int = -1) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


def _softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], in one kernel.

    fp32 math throughout; the normalized row is never rounded to x's dtype, only the output
    is. weight: [N], x's dtype. Runs on the current CUDA stream. config: as for softmax.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    config = autotune.resolve_config("softmax_rmsnorm", x, autotune.row_dims(x), config)
    cuda.softmax_rmsnorm_out(x, weight, y, eps, config)
    return y


softmax_rmsnorm = gks_op("softmax_rmsnorm", _softmax_rmsnorm)


@softmax_rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
