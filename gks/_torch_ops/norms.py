# SPDX-License-Identifier: Apache-2.0
"""The norms family's torch ops: gks::rmsnorm and gks::softmax_rmsnorm (softmax's row kernel
with the norm folded in). See gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import row_dims
from gks.runtime.tables import resolve_config

__all__ = ["rmsnorm", "softmax_rmsnorm"]


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N]; fp32 math, output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides.
    weight: [N], x's dtype. Runs on the current CUDA stream.
    config: the kernel shape (-1: the tuned table's pick for this shape if any, else the
    heuristic; see gks.cuda.rmsnorm_out). The sum of squares is fp32, as in F.rms_norm: exact
    while sum(x^2) < 3.4e38; a row past that gives 0 (the fp32 formula's result), in every
    backend.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.rmsnorm_out(x, weight, y, eps, resolve_config("rmsnorm", x, row_dims(x), config))
    return y


rmsnorm = gks_op("rmsnorm", _rmsnorm)


@rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.rmsnorm_out, x, weight, y, eps, config)
    return y


def _softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], in one kernel.

    fp32 math throughout; the normalized row is never rounded to x's dtype, only the output
    is. weight: [N], x's dtype. Runs on the current CUDA stream. config: as for softmax.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    config = resolve_config("softmax_rmsnorm", x, row_dims(x), config)
    cuda.softmax_rmsnorm_out(x, weight, y, eps, config)
    return y


softmax_rmsnorm = gks_op("softmax_rmsnorm", _softmax_rmsnorm)


@softmax_rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.softmax_rmsnorm_out, x, weight, y, eps, config)
    return y
