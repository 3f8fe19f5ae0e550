# SPDX-License-Identifier: Apache-2.0
"""The activation family in Triton: act_and_mul, y = act(gate) * up with x [..., 2d] =
[gate | up]. Elementwise: programs over (row, block of BLOCK outputs)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.runtime.args import activation_index
from gks.triton._common import (
    check_device,
    check_float,
    interpreter_variant,
    next_pow2,
    on_tensor_device,
    row_layout,
    row_start,
)
from gks.triton.quantize import _abs_bits, _e4m3_bits, _fp8_scale

__all__ = ["act_and_mul", "act_and_mul_quant"]

BLOCK_MAX = 4096


@triton.jit
def _activation(g, ACT: tl.constexpr):
    if ACT == 0:
        act = g / (1.0 + tl.exp(-g))
    elif ACT == 1:
        act = 0.5 * g * (1.0 + tl.erf(g * 0.70710678118654752))
    else:
        # tanh(z) = 1 - 2 / (exp(2z) + 1): exp's overflow gives the limits +-1.
        z = 0.79788456080286536 * (g + 0.044715 * g * g * g)
        act = 0.5 * g * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))
    return act


@triton.jit
def _act_and_mul_kernel(
    x_ptr, y_ptr, D,
    x_inner, x_outer_stride, x_inner_stride,
    y_inner, y_outer_stride, y_inner_stride,
    BLOCK: tl.constexpr, ACT: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < D
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    y_row = row_start(y_ptr, row, y_inner, y_outer_stride, y_inner_stride)
    g = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_row + D + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_row + cols, (_activation(g, ACT) * u).to(y_ptr.dtype.element_ty), mask=mask)


@on_tensor_device
def act_and_mul(x: torch.Tensor, activation: str = "silu") -> torch.Tensor:
    """y = act(x[..., :d]) * x[..., d:] for x [..., 2d]; fp32 math, y [..., d] in x's dtype."""
    op = "gks.triton.act_and_mul"
    check_device(x, op, "x")
    check_float(x, op, "x")
    xr = row_layout(x, op, "x")
    if xr.cols % 2:
        raise ValueError(f"{op}: argument 'x' must have an even last dim (gate, then up), got {list(x.shape)}")
    act = activation_index(activation, op)
    d = xr.cols // 2
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    if xr.rows == 0 or d == 0:
        return y
    yr = row_layout(y, op, "y")
    block = min(next_pow2(d), BLOCK_MAX)
    _act_and_mul_kernel[(xr.rows, triton.cdiv(d, block))](
        x, y, d,
        xr.inner, xr.outer_stride, xr.inner_stride,
        yr.inner, yr.outer_stride, yr.inner_stride,
        BLOCK=block, ACT=act, num_warps=max(1, min(8, block // 256)),
    )
    return y


@triton.jit
def _act_and_mul_quant_kernel(
    x_ptr, q_ptr, s_ptr, D,
    x_inner, x_outer_stride, x_inner_stride,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    GPP: tl.constexpr, ACT: tl.constexpr, UE8M0: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Program (row, j): groups j * GPP ... of 128 outputs of one row, e4m3 with a scale each."""
    row = tl.program_id(0).to(tl.int64)
    gi = tl.program_id(1).to(tl.int64) * GPP + tl.arange(0, GPP)
    cols = gi[:, None] * 128 + tl.arange(0, 128)[None, :]
    mask = cols < D
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    g = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(x_row + D + cols, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(mask, _activation(g, ACT) * u, 0.0)
    scale = _fp8_scale(tl.max(_abs_bits(y), axis=1).to(tl.float32, bitcast=True), UE8M0)
    s_row = row_start(s_ptr, row, s_inner, s_outer_stride, s_inner_stride)
    tl.store(s_row + gi, scale, mask=gi < D // 128)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    tl.store(q_row + cols, _e4m3_bits(y, scale[:, None], INTERPRETED), mask=mask)


@on_tensor_device
def act_and_mul_quant(x: torch.Tensor, activation: str = "silu",
                      scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): act_and_mul's y in fp32 quantized to e4m3 per 1 x 128 group (see
    gks.reference.act_and_mul_quant)."""
    from gks.specs.activation import act_quant_shapes

    op = "gks.triton.act_and_mul_quant"
    check_device(x, op, "x")
    check_float(x, op, "x")
    xr = row_layout(x, op, "x")
    q_shape, scale_shape = act_quant_shapes(x.shape, op)
    act = activation_index(activation, op)
    q = torch.empty(q_shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    d = xr.cols // 2
    if xr.rows == 0 or d == 0:
        return q, scale
    qb = q.view(torch.uint8)
    qr = row_layout(qb, op, "q")
    sr = row_layout(scale, op, "scale")
    groups = d // 128
    gpp = min(8, next_pow2(groups))
    _act_and_mul_quant_kernel[(xr.rows, triton.cdiv(groups, gpp))](
        x, qb, scale, d,
        xr.inner, xr.outer_stride, xr.inner_stride,
        qr.inner, qr.outer_stride, qr.inner_stride,
        sr.inner, sr.outer_stride, sr.inner_stride,
        GPP=gpp, ACT=act, UE8M0=bool(scale_ue8m0), INTERPRETED=interpreter_variant(), num_warps=4,
    )
    return q, scale
