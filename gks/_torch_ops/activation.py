# SPDX-License-Identifier: Apache-2.0
"""The activation family's torch ops: gks::act_and_mul and gks::act_and_mul_quant. See gks._torch_ops for what every
custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate

__all__ = ["act_and_mul", "act_and_mul_quant"]


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


def _act_quant_outputs(x: torch.Tensor, op: str):
    from gks.specs.activation import act_quant_shapes

    q_shape, scale_shape = act_quant_shapes(x.shape, op)
    return (torch.empty(q_shape, dtype=torch.float8_e4m3fn, device=x.device),
            torch.empty(scale_shape, dtype=torch.float32, device=x.device))


def _act_and_mul_quant(x: torch.Tensor, activation: str = "silu",
                       scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): y = act(x[..., :d]) * x[..., d:] in fp32 (never rounded to x's dtype),
    quantized to float8_e4m3fn per 1 x 128 group (scale = absmax / 448, UE8M0 with
    scale_ue8m0): q [..., d], scale fp32 [..., d / 128]; d a multiple of 128. Runs on the
    current CUDA stream."""
    q, scale = _act_quant_outputs(x, "gks.act_and_mul_quant")
    cuda.act_and_mul_quant_out(x, q, scale, activation, scale_ue8m0)
    return q, scale


act_and_mul_quant = gks_op("act_and_mul_quant", _act_and_mul_quant)


@act_and_mul_quant.op.register_fake
def _(x: torch.Tensor, activation: str = "silu", scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = _act_quant_outputs(x, "gks.act_and_mul_quant")
    validate(cuda.act_and_mul_quant_out, x, q, scale, activation, scale_ue8m0)
    return q, scale
