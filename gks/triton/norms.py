# SPDX-License-Identifier: Apache-2.0
"""The norms in Triton.

RMSNorm: one program per row; the row stays in registers when it fits (one read), else two
passes over it in chunks (the second mostly from L2).

softmax_rmsnorm, softmax(rmsnorm(x) * weight) in one kernel: its public entry is here, and
it runs softmax's row kernels (gks.triton.softmax) with the norm folded in.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import (
    check_device,
    check_eps,
    check_float,
    check_norm_weight,
    check_same,
    next_pow2,
    on_tensor_device,
    row_layout,
    row_num_warps,
    row_start,
)
from gks.triton.softmax import _launch as _softmax_launch

__all__ = ["rmsnorm", "softmax_rmsnorm"]

# Rows up to this many elements are held whole in one program (one read of the row).
MAX_ONE_PASS = 32768
CHUNK = 4096


@triton.jit
def _rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr, N, eps,
    x_inner, x_outer_stride, x_inner_stride,
    y_inner, y_outer_stride, y_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    y_row = row_start(y_ptr, row, y_inner, y_outer_stride, y_inner_stride)
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        num_chunks = tl.cdiv(N, BLOCK_N)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            acc += x * x
        inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)


def _check_norm_args(x: torch.Tensor, weight: torch.Tensor, eps: float, op: str):
    """What both norms refuse, in the C++ API's order; returns x's row view and eps as the
    kernel takes it (float32)."""
    check_device(x, op, "x")
    check_float(x, op, "x")
    check_same(x, "x", weight, "weight", op)
    xr = row_layout(x, op, "x")
    check_norm_weight(weight, xr.cols, op)
    return xr, check_eps(eps, op)


@on_tensor_device
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N]; fp32 math, output in x's dtype."""
    op = "gks.triton.rmsnorm"
    xr, eps = _check_norm_args(x, weight, eps, op)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if xr.rows == 0 or xr.cols == 0:
        return y
    yr = row_layout(y, op, "y")
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(xr.cols) if one_pass else CHUNK
    _rmsnorm_kernel[(xr.rows,)](
        x, weight, y, xr.cols, eps,
        xr.inner, xr.outer_stride, xr.inner_stride,
        yr.inner, yr.outer_stride, yr.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass,
        num_warps=row_num_warps(block_n, x.element_size()),
    )
    return y


@on_tensor_device
def softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], one kernel; the
    normalized row stays fp32 (never rounded to x's dtype)."""
    op = "gks.triton.softmax_rmsnorm"
    xr, eps = _check_norm_args(x, weight, eps, op)
    return _softmax_launch(op, x, xr, weight, eps)
