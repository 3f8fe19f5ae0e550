# SPDX-License-Identifier: Apache-2.0
"""The softmax family's torch op: gks::softmax (see gks._torch_ops for what every custom op
guarantees)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import row_dims
from gks.runtime.tables import resolve_config

__all__ = ["softmax"]


def _softmax(x: torch.Tensor, config: int = -1) -> torch.Tensor:
    """Softmax over the last dim of x [..., N]; fp32 math, output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides. Non-finite
    input gives torch.softmax's result (a row with NaN or +inf, or all -inf, is all NaN).
    Runs on the current CUDA stream. config: the kernel shape (-1: the tuned table's pick
    for this shape if any, else the heuristic; see gks.cuda.softmax_out).
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.softmax_out(x, y, resolve_config("softmax", x, row_dims(x), config))
    return y


softmax = gks_op("softmax", _softmax)


@softmax.op.register_fake
def _(x: torch.Tensor, config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.softmax_out, x, y, config)
    return y
