# SPDX-License-Identifier: Apache-2.0
"""The norms in Triton.

RMSNorm: one program per row; the row stays in registers when it fits (one read), else two
passes over it in chunks (the second mostly from L2). fused_add_rmsnorm is the same kernel
with the residual added first (ADD): the rounded sum is stored, and normalized from
registers, or in the second pass read back from where it was stored. LayerNorm: the same
programs, in the corrected two-pass form (a row held whole takes its sums from the held
values; a chunked one walks the row three times).

softmax_rmsnorm, softmax(rmsnorm(x) * weight) in one kernel: its public entry is here, and
it runs softmax's row kernels (gks.triton.softmax) with the norm folded in.

rmsnorm_bwd: persistent programs, program p taking rows p, p + P, ...: each row's two sums
(x^2 and dy * w * x), dx, and dy * xhat added to the program's column sums (in registers for
a row held whole, else in the program's row of the fp32 partials, read back and stored as it
walks the row), written as row p of partials [P, N]; a second kernel adds the partials up per
column in a fixed order (no atomics: the same inputs on the same GPU give the same bits).
gks.triton.rmsnorm is differentiable in x and weight through it (a torch.autograd.Function).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import (
    bf16_rounded,
    check_apart,
    check_device,
    check_eps,
    check_float,
    check_norm_weight,
    check_same,
    interpreter_variant,
    next_pow2,
    on_tensor_device,
    row_layout,
    row_num_warps,
    row_start,
)
from gks.triton.quantize import _abs_bits, _e4m3_bits, _fp8_scale, _quantize_values
from gks.triton.softmax import _launch as _softmax_launch, _sm_count

__all__ = ["rmsnorm", "rmsnorm_bwd", "rmsnorm_", "fused_add_rmsnorm", "fused_add_rmsnorm_", "layernorm",
           "softmax_rmsnorm", "rmsnorm_quant", "fused_add_rmsnorm_quant"]

# Rows up to this many elements are held whole in one program (one read of the row).
MAX_ONE_PASS = 32768
CHUNK = 4096


@triton.jit
def _load_row_part(x_row, r_row, ro_row, offs, mask, ADD: tl.constexpr, BF16_BY_HAND: tl.constexpr):
    """x at offs in fp32; with ADD, x + residual rounded to x's dtype, stored to residual_out."""
    x = tl.load(x_row + offs, mask=mask, other=0.0)
    if ADD:
        r = tl.load(r_row + offs, mask=mask, other=0.0)
        total = x.to(tl.float32) + r.to(tl.float32)
        if BF16_BY_HAND:
            x = bf16_rounded(total)
        else:
            x = total.to(ro_row.dtype.element_ty)
        tl.store(ro_row + offs, x, mask=mask)
    return x.to(tl.float32)


@triton.jit
def _rmsnorm_kernel(
    x_ptr, r_ptr, w_ptr, y_ptr, ro_ptr, N, eps,
    x_inner, x_outer_stride, x_inner_stride,
    r_inner, r_outer_stride, r_inner_stride,
    y_inner, y_outer_stride, y_inner_stride,
    ro_inner, ro_outer_stride, ro_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr, ADD: tl.constexpr, BF16_BY_HAND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    y_row = row_start(y_ptr, row, y_inner, y_outer_stride, y_inner_stride)
    r_row = x_row
    ro_row = y_row
    if ADD:
        r_row = row_start(r_ptr, row, r_inner, r_outer_stride, r_inner_stride)
        ro_row = row_start(ro_ptr, row, ro_inner, ro_outer_stride, ro_inner_stride)
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        mask = cols < N
        x = _load_row_part(x_row, r_row, ro_row, cols, mask, ADD, BF16_BY_HAND)
        inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        num_chunks = tl.cdiv(N, BLOCK_N)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            x = _load_row_part(x_row, r_row, ro_row, start + cols, mask, ADD, BF16_BY_HAND)
            acc += x * x
        inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        # With ADD the second pass reads the stored sum (residual_out may be residual, so it
        # may be all that is left): the program's stores must land before its loads.
        src = x_row
        if ADD:
            tl.debug_barrier()
            src = ro_row
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            x = tl.load(src + start + cols, mask=mask, other=0.0).to(tl.float32)
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


@triton.jit
def _layernorm_kernel(
    x_ptr, w_ptr, b_ptr, y_ptr, N, eps,
    x_inner, x_outer_stride, x_inner_stride,
    y_inner, y_outer_stride, y_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr, HAS_BIAS: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    y_row = row_start(y_ptr, row, y_inner, y_outer_stride, y_inner_stride)
    cols = tl.arange(0, BLOCK_N)
    # The corrected two-pass form of the CUDA kernel's LayerNormRow: m0 = sum(x) / N, then
    # the sums s1, s2 of d = x - m0; var = s2/N - (s1/N)^2, the output (d - s1/N) * rstd.
    if ONE_PASS:
        mask = cols < N
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        m0 = tl.sum(x, axis=0) / N
        d = tl.where(mask, x - m0, 0.0)
        c = tl.sum(d, axis=0) / N
        var = tl.sum(d * d, axis=0) / N - c * c
        rstd = tl.rsqrt(tl.where(var < 0.0, 0.0, var) + eps)  # NaN stays NaN
        y = (d - c) * rstd * tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        num_chunks = tl.cdiv(N, BLOCK_N)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            acc += tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
        m0 = tl.sum(acc, axis=0) / N
        s1 = tl.zeros([BLOCK_N], dtype=tl.float32)
        s2 = tl.zeros([BLOCK_N], dtype=tl.float32)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            d = tl.where(mask, tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32) - m0, 0.0)
            s1 += d
            s2 += d * d
        c = tl.sum(s1, axis=0) / N
        var = tl.sum(s2, axis=0) / N - c * c
        rstd = tl.rsqrt(tl.where(var < 0.0, 0.0, var) + eps)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            mask = start + cols < N
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            y = ((x - m0) - c) * rstd * tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            if HAS_BIAS:
                y += tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def _launch_rmsnorm(x, xr, weight, y, eps, op, residual=None, rr=None, residual_out=None) -> None:
    """The kernel over x's rows into y (with the residual: its sum stored to residual_out)."""
    if xr.rows == 0 or xr.cols == 0:
        return
    yr = row_layout(y, op, "y")
    add = residual is not None
    ror = row_layout(residual_out, op, "residual_out") if add else yr
    rr = rr if add else xr
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(xr.cols) if one_pass else CHUNK
    _rmsnorm_kernel[(xr.rows,)](
        x, residual if add else x, weight, y, residual_out if add else y, xr.cols, eps,
        xr.inner, xr.outer_stride, xr.inner_stride,
        rr.inner, rr.outer_stride, rr.inner_stride,
        yr.inner, yr.outer_stride, yr.inner_stride,
        ror.inner, ror.outer_stride, ror.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass, ADD=add,
        BF16_BY_HAND=add and interpreter_variant() and x.dtype == torch.bfloat16,
        num_warps=row_num_warps(block_n, x.element_size()),
    )


def _rmsnorm_forward(x, xr, weight, eps: float, op: str) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch_rmsnorm(x, xr, weight, y, eps, op)
    return y


class _RmsNorm(torch.autograd.Function):
    """rmsnorm with rmsnorm_bwd as its backward, saving x and weight alone."""

    @staticmethod
    def forward(ctx, x, weight, eps, xr, eps32):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return _rmsnorm_forward(x, xr, weight, eps32, "gks.triton.rmsnorm")

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        dx = dweight = None
        if ctx.needs_input_grad[0] or ctx.needs_input_grad[1]:
            dx, dweight = rmsnorm_bwd(dy.contiguous(), x, weight, ctx.eps)  # e.g. y.sum()'s expanded dy
        return (dx if ctx.needs_input_grad[0] else None, dweight if ctx.needs_input_grad[1] else None,
                None, None, None)


@on_tensor_device
def rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N]; fp32 math, output in x's dtype.
    Differentiable in x and weight (the backward is gks.triton.rmsnorm_bwd)."""
    op = "gks.triton.rmsnorm"
    xr, eps32 = _check_norm_args(x, weight, eps, op)
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RmsNorm.apply(x, weight, eps, xr, eps32)
    return _rmsnorm_forward(x, xr, weight, eps32, op)


@triton.jit
def _rmsnorm_bwd_kernel(
    dy_ptr, x_ptr, w_ptr, dx_ptr, part_ptr, M, N, eps,
    dy_inner, dy_outer_stride, dy_inner_stride,
    x_inner, x_outer_stride, x_inner_stride,
    dx_inner, dx_outer_stride, dx_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    part_row = part_ptr + pid.to(tl.int64) * N
    if ONE_PASS:
        mask = cols < N
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for row in range(pid, M, programs):
            x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
            dy_row = row_start(dy_ptr, row, dy_inner, dy_outer_stride, dy_inner_stride)
            dx_row = row_start(dx_ptr, row, dx_inner, dx_outer_stride, dx_inner_stride)
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(dy_row + cols, mask=mask, other=0.0).to(tl.float32)
            g = dy * w
            rstd = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
            c = tl.sum(g * x, axis=0) * rstd / N
            xhat = x * rstd
            tl.store(dx_row + cols, ((g - xhat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
            acc += dy * xhat
        tl.store(part_row + cols, acc, mask=mask)
    else:
        num_chunks = tl.cdiv(N, BLOCK_N)
        for row in range(pid, M, programs):
            x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
            dy_row = row_start(dy_ptr, row, dy_inner, dy_outer_stride, dy_inner_stride)
            dx_row = row_start(dx_ptr, row, dx_inner, dx_outer_stride, dx_inner_stride)
            sumsq = tl.zeros([BLOCK_N], dtype=tl.float32)
            dot = tl.zeros([BLOCK_N], dtype=tl.float32)
            for chunk in range(0, num_chunks):
                offs = chunk * BLOCK_N + cols
                mask = offs < N
                x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_row + offs, mask=mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                sumsq += x * x
                dot += dy * w * x
            rstd = tl.rsqrt(tl.sum(sumsq, axis=0) / N + eps)
            c = tl.sum(dot, axis=0) * rstd / N
            # The partials the previous row stored are read back: its stores land first.
            tl.debug_barrier()
            for chunk in range(0, num_chunks):
                offs = chunk * BLOCK_N + cols
                mask = offs < N
                x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
                dy = tl.load(dy_row + offs, mask=mask, other=0.0).to(tl.float32)
                w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
                xhat = x * rstd
                tl.store(dx_row + offs, ((dy * w - xhat * c) * rstd).to(dx_ptr.dtype.element_ty), mask=mask)
                before = tl.load(part_row + offs, mask=mask & (row != pid), other=0.0)  # 0 for the first row
                tl.store(part_row + offs, before + dy * xhat, mask=mask)


@triton.jit
def _sum_parts_kernel(part_ptr, out_ptr, P, N, BLOCK_P: tl.constexpr, BLOCK_N: tl.constexpr):
    """out[j] = the sum over p of part[p, j], rounded once to out's dtype; a fixed order."""
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_mask = cols < N
    acc = tl.zeros([BLOCK_P, BLOCK_N], dtype=tl.float32)
    for start in range(0, P, BLOCK_P):
        parts = start + tl.arange(0, BLOCK_P)
        offs = parts[:, None].to(tl.int64) * N + cols[None, :]
        acc += tl.load(part_ptr + offs, mask=(parts[:, None] < P) & col_mask[None, :], other=0.0)
    tl.store(out_ptr + cols, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty), mask=col_mask)


# Programs of rmsnorm_bwd: about BWD_WARPS_PER_SM warps' worth an SM (each program its own
# row of partials, so no more than that), or a few at all in the interpreter (where several
# rows a program still run the row loop).
BWD_WARPS_PER_SM = 32
BWD_INTERPRETER_PROGRAMS = 4


@on_tensor_device
def rmsnorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight): rmsnorm's gradients given dy (x's shape and dtype), rstd recomputed
    from x; fp32 sums, dx in x's dtype, dweight in weight's; dweight deterministic."""
    op = "gks.triton.rmsnorm_bwd"
    check_device(x, op, "x")
    check_float(x, op, "x")
    check_same(x, "x", dy, "dy", op)
    if dy.shape != x.shape:
        raise ValueError(f"{op}: argument 'dy' must have the shape of 'x' {list(x.shape)}, got {list(dy.shape)}")
    dyr = row_layout(dy, op, "dy")
    xr, eps = _check_norm_args(x, weight, eps, op)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if xr.rows == 0 or xr.cols == 0:
        return dx, torch.zeros((xr.cols,), dtype=weight.dtype, device=x.device)
    dxr = row_layout(dx, op, "dx")
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(xr.cols) if one_pass else CHUNK
    num_warps = row_num_warps(block_n, x.element_size())
    if x.device.type == "cuda":
        programs = _sm_count(x.get_device()) * max(1, BWD_WARPS_PER_SM // num_warps)
    else:
        programs = BWD_INTERPRETER_PROGRAMS
    programs = min(programs, xr.rows)
    parts = torch.empty((programs, xr.cols), dtype=torch.float32, device=x.device)
    _rmsnorm_bwd_kernel[(programs,)](
        dy, x, weight, dx, parts, xr.rows, xr.cols, eps,
        dyr.inner, dyr.outer_stride, dyr.inner_stride,
        xr.inner, xr.outer_stride, xr.inner_stride,
        dxr.inner, dxr.outer_stride, dxr.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass, num_warps=num_warps,
    )
    dweight = torch.empty((xr.cols,), dtype=weight.dtype, device=x.device)
    _sum_parts_kernel[(triton.cdiv(xr.cols, 64),)](parts, dweight, programs, xr.cols, BLOCK_P=32, BLOCK_N=64,
                                                    num_warps=4)
    return dx, dweight


@on_tensor_device
def rmsnorm_(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> None:
    """In place: x <- rmsnorm(x, weight, eps); x any view with a contiguous last dim (the q
    or k heads of a fused qkv tensor, normalized per head with weight [D])."""
    op = "gks.triton.rmsnorm_"
    xr, eps = _check_norm_args(x, weight, eps, op)
    check_apart(x, "x", weight, "weight", op)
    _launch_rmsnorm(x, xr, weight, x, eps, op)


@on_tensor_device
def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
              eps: float = 1e-5) -> torch.Tensor:
    """LayerNorm over the last dim of x [..., N]: (x - mean) / sqrt(var + eps) * weight
    (+ bias), fp32 mean and biased variance, output in x's dtype."""
    op = "gks.triton.layernorm"
    xr, eps = _check_norm_args(x, weight, eps, op)
    if bias is not None:
        check_same(x, "x", bias, "bias", op)
        check_norm_weight(bias, xr.cols, op, "bias")
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if xr.rows == 0 or xr.cols == 0:
        return y
    yr = row_layout(y, op, "y")
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(xr.cols) if one_pass else CHUNK
    _layernorm_kernel[(xr.rows,)](
        x, weight, weight if bias is None else bias, y, xr.cols, eps,
        xr.inner, xr.outer_stride, xr.inner_stride,
        yr.inner, yr.outer_stride, yr.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass, HAS_BIAS=bias is not None,
        num_warps=row_num_warps(block_n, x.element_size()),
    )
    return y


def _check_residual(x: torch.Tensor, residual: torch.Tensor, op: str):
    """residual: x's device, dtype and shape, contiguous in its last dim; its row view."""
    check_same(x, "x", residual, "residual", op)
    if residual.shape != x.shape:
        raise ValueError(f"{op}: argument 'residual' must have the shape of 'x' {list(x.shape)}, "
                         f"got {list(residual.shape)}")
    return row_layout(residual, op, "residual")


@on_tensor_device
def fused_add_rmsnorm(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): residual_out = x + residual (fp32 add, rounded to x's dtype) and
    y = rmsnorm(residual_out, weight, eps), in one kernel."""
    op = "gks.triton.fused_add_rmsnorm"
    check_device(x, op, "x")
    check_float(x, op, "x")
    rr = _check_residual(x, residual, op)
    xr, eps = _check_norm_args(x, weight, eps, op)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    _launch_rmsnorm(x, xr, weight, y, eps, op, residual, rr, residual_out)
    return y, residual_out


@on_tensor_device
def fused_add_rmsnorm_(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> None:
    """In place (FlashInfer's form): residual <- x + residual, then x <- rmsnorm(residual).
    x and residual must not share memory."""
    op = "gks.triton.fused_add_rmsnorm_"
    check_device(x, op, "x")
    check_float(x, op, "x")
    rr = _check_residual(x, residual, op)
    xr, eps = _check_norm_args(x, weight, eps, op)
    check_apart(residual, "residual", x, "x", op)
    check_apart(x, "x", weight, "weight", op)
    check_apart(residual, "residual", weight, "weight", op)
    _launch_rmsnorm(x, xr, weight, x, eps, op, residual, rr, residual)


@on_tensor_device
def softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], one kernel; the
    normalized row stays fp32 (never rounded to x's dtype)."""
    op = "gks.triton.softmax_rmsnorm"
    xr, eps = _check_norm_args(x, weight, eps, op)
    return _softmax_launch(op, x, xr, weight, eps)


# ---- rmsnorm / fused_add_rmsnorm with a quantized output (gks.reference.rmsnorm_quant) ----
# One program a row, held whole: y = x * inv_rms * w stays fp32 and is quantized by
# quantize_int8's or quantize_fp8's arithmetic (gks.triton.quantize), per token or per
# 1 x 128 group (the row viewed as [N / 128, 128]).

NORM_QUANT_MAX = 65536  # rows held in one program


@triton.jit
def _norm_quant_kernel(
    x_ptr, r_ptr, ro_ptr, w_ptr, q_ptr, s_ptr, N, eps,
    x_inner, x_outer_stride, x_inner_stride,
    r_inner, r_outer_stride, r_inner_stride,
    ro_inner, ro_outer_stride, ro_inner_stride,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    BLOCK_N: tl.constexpr, ADD: tl.constexpr, INT8: tl.constexpr, GROUP: tl.constexpr,
    UE8M0: tl.constexpr, INTERPRETED: tl.constexpr, BF16_BY_HAND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK_N)
    mask = offs < N
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    r_row = row_start(r_ptr, row, r_inner, r_outer_stride, r_inner_stride)
    ro_row = row_start(ro_ptr, row, ro_inner, ro_outer_stride, ro_inner_stride)
    x = _load_row_part(x_row, r_row, ro_row, offs, mask, ADD, BF16_BY_HAND)
    inv_rms = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.where(mask, x * inv_rms * w, 0.0)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    s_row = row_start(s_ptr, row, s_inner, s_outer_stride, s_inner_stride)
    if INT8:
        absmax = tl.max(_abs_bits(y), axis=0).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(absmax, 127.0)
        tl.store(s_row, scale)
        tl.store(q_row + offs, _quantize_values(y, scale, tl.math.div_rn(1.0, scale), INTERPRETED), mask=mask)
    elif GROUP:
        g = tl.reshape(y, [BLOCK_N // 128, 128])
        scale = _fp8_scale(tl.max(_abs_bits(g), axis=1).to(tl.float32, bitcast=True), UE8M0)
        gi = tl.arange(0, BLOCK_N // 128)
        tl.store(s_row + gi, scale, mask=gi < N // 128)
        q = tl.reshape(_e4m3_bits(g, scale[:, None], INTERPRETED), [BLOCK_N])
        tl.store(q_row + offs, q, mask=mask)
    else:
        scale = _fp8_scale(tl.max(_abs_bits(y), axis=0).to(tl.float32, bitcast=True), UE8M0)
        tl.store(s_row, scale)
        tl.store(q_row + offs, _e4m3_bits(y, scale, INTERPRETED), mask=mask)


def _norm_quant(x, weight, eps, quant_dtype, granularity, scale_ue8m0, op, residual=None):
    from gks.specs.norms import norm_quant_check_args

    check_device(x, op, "x")
    check_float(x, op, "x")
    scale_shape = norm_quant_check_args(x.shape, quant_dtype, granularity, op)
    rr = _check_residual(x, residual, op) if residual is not None else None
    xr, eps = _check_norm_args(x, weight, eps, op)
    if xr.cols > NORM_QUANT_MAX:
        raise ValueError(f"{op}: argument 'x' has rows of {xr.cols} elements; this backend holds a row in one "
                         f"program, at most {NORM_QUANT_MAX}")
    q = torch.empty(x.shape, dtype=quant_dtype, device=x.device)
    scale = torch.empty(scale_shape, dtype=torch.float32, device=x.device)
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device) if residual is not None else None
    if xr.rows == 0:
        return q, scale, residual_out
    if xr.cols == 0:  # rows of nothing: absmax 0, scale 0
        scale.zero_()
        return q, scale, residual_out
    qv = q if quant_dtype == torch.int8 else q.view(torch.uint8)
    qr = row_layout(qv, op, "q")
    sr = row_layout(scale, op, "scale")
    add = residual is not None
    ror = row_layout(residual_out, op, "residual_out") if add else xr
    rr = rr if add else xr
    block_n = max(next_pow2(xr.cols), 128 if granularity == "group" else 16)
    _norm_quant_kernel[(xr.rows,)](
        x, residual if add else x, residual_out if add else x, weight, qv, scale, xr.cols, eps,
        xr.inner, xr.outer_stride, xr.inner_stride,
        rr.inner, rr.outer_stride, rr.inner_stride,
        ror.inner, ror.outer_stride, ror.inner_stride,
        qr.inner, qr.outer_stride, qr.inner_stride,
        sr.inner, sr.outer_stride, sr.inner_stride,
        BLOCK_N=block_n, ADD=add, INT8=quant_dtype == torch.int8, GROUP=granularity == "group",
        UE8M0=bool(scale_ue8m0), INTERPRETED=interpreter_variant(),
        BF16_BY_HAND=interpreter_variant() and x.dtype == torch.bfloat16,
        num_warps=row_num_warps(block_n, 4, 16),
    )
    return q, scale, residual_out


@on_tensor_device
def rmsnorm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                  quant_dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "token",
                  scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): rmsnorm(x) in fp32 quantized (see gks.reference.rmsnorm_quant)."""
    q, scale, _ = _norm_quant(x, weight, eps, quant_dtype, granularity, scale_ue8m0, "gks.triton.rmsnorm_quant")
    return q, scale


@on_tensor_device
def fused_add_rmsnorm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                            quant_dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "token",
                            scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, residual_out): residual_out = x + residual, then rmsnorm_quant of it."""
    return _norm_quant(x, weight, eps, quant_dtype, granularity, scale_ue8m0, "gks.triton.fused_add_rmsnorm_quant",
                       residual=residual)
