# SPDX-License-Identifier: Apache-2.0
"""The activation family's torch ops: gks::act_and_mul. See gks._torch_ops for what every
custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate

__all__ = ["act_and_mul"]


def _act_and_mul(x: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """y = act(gate) * up for x [..., 2d] = [gate | up] (a fused gate/up projection), y
    [..., d]: activation 'silu' (SwiGLU), 'gelu' (erf, GeGLU) or 'gelu_tanh'. fp32 math, y in
    x's dtype. x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides. Runs
    on the current CUDA stream."""
    y = torch.empty((*x.shape[:-1], x.shape[-1] // 2) if x.dim() else (), dtype=x.dtype, device=x.device)
    cuda.act_and_mul_out(x, y, activation)
    return y


act_and_mul = gks_op("act_and_mul", _act_and_mul)


@act_and_mul.op.register_fake
def _(x: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    y = torch.empty((*x.shape[:-1], x.shape[-1] // 2) if x.dim() else (), dtype=x.dtype, device=x.device)
    validate(cuda.act_and_mul_out, x, y, activation)
    return y
