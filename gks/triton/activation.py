# SPDX-License-Identifier: Apache-2.0
"""The activation family in Triton: act_and_mul, y = act(gate) * up with x [..., 2d] =
[gate | up]. Elementwise: programs over (row, block of BLOCK outputs)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.runtime.args import activation_index
from gks.triton._common import check_device, check_float, next_pow2, on_tensor_device, row_layout, row_start

__all__ = ["act_and_mul"]

BLOCK_MAX = 4096


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
    if ACT == 0:
        act = g / (1.0 + tl.exp(-g))
    elif ACT == 1:
        act = 0.5 * g * (1.0 + tl.erf(g * 0.70710678118654752))
    else:
        # tanh(z) = 1 - 2 / (exp(2z) + 1): exp's overflow gives the limits +-1.
        z = 0.79788456080286536 * (g + 0.044715 * g * g * g)
        act = 0.5 * g * (2.0 - 2.0 / (tl.exp(2.0 * z) + 1.0))
    tl.store(y_row + cols, (act * u).to(y_ptr.dtype.element_ty), mask=mask)


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
