# SPDX-License-Identifier: Apache-2.0
"""Softmax, and softmax(rmsnorm(x) * weight) fused, in Triton: one program per row.

A row that fits (up to MAX_ONE_PASS elements) is loaded whole: one read, max, exponentials,
sum, one write (softmax's 16-bit rows held as loaded, two values an int32: see "packed
pairs" in gks.triton._common). A longer row is walked in CHUNK-sized pieces: an online max and rescaled sum
kept per lane, then a second pass that normalizes and writes (mostly from L2). The fused op
computes x * inv_rms * weight in fp32 and never stores it; its long-row path walks the row
once more first, for the sum of squares.

Non-finite input gives torch.softmax's result, as in the CUDA kernels (see
csrc/include/gks/kernels/softmax.cuh): a NaN anywhere makes the sum NaN; a row max of +inf
or -inf makes the reciprocal of the sum NaN. Either way the row comes out all NaN, whether
the max reduction ignores NaN (GPU) or propagates it (the interpreter).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks._rows import row_layout
from gks.triton._common import (
    can_hold_pairs,
    check_device,
    check_float,
    check_norm_weight,
    check_same,
    long_row_max_warps,
    neg_inf_pair,
    next_pow2,
    pack_pairs,
    pairs_launch,
    pairs_pay_off,
    row_num_warps,
    unpack_pairs,
)

# Rows up to this many elements are held whole in one program (one read of the row).
MAX_ONE_PASS = 32768
CHUNK = 4096
# The fused op's one-pass rows from this long reduce the sum of squares and the max in one
# sweep (three block reductions become two). On an H200 (8192x32768, µs): fp32 746 -> 716,
# fp16 374 -> 338, bf16 368 -> 340; at 32768x4096 fp32 lost (262 -> 279), 16-bit tied.
FUSED_ONE_REDUCTION_MIN = 16384
LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _offset(m):
    # The max a sum of exponentials is kept relative to: 0 for an all -inf set, so that
    # -inf - -inf never turns a row's -inf entries into NaN.
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def _sum_and_max(sum_a, max_a, sum_b, max_b):
    return sum_a + sum_b, tl.maximum(max_a, max_b)


@triton.jit
def _values(x_row, w_ptr, cols, N, inv_rms, FUSED: tl.constexpr):
    """The row's values at `cols` in fp32, -inf past its end."""
    mask = cols < N
    if FUSED:
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
        return tl.where(mask, x * inv_rms * w, float("-inf"))
    else:
        return tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)


# Softmax's one-pass 16-bit rows are held as packed pairs (see gks.triton._common): at
# 8192x32768 on an H200 that took them from 1.23x the CUDA kernel's time to level.


@triton.jit
def _softmax_pairs(x_row, y_row, N, zero, BLOCK_N: tl.constexpr, IS_BF16: tl.constexpr,
                   NEG_INF_PAIR: tl.constexpr):
    """A one-pass row of 16-bit values held as int32 pairs."""
    pcols = tl.arange(0, BLOCK_N // 2)
    pmask = pcols < N // 2
    u = tl.load(x_row.to(tl.pointer_type(tl.int32)) + pcols, mask=pmask, other=NEG_INF_PAIR)
    xl, xh = unpack_pairs(u, zero, 1, IS_BF16)
    m = tl.max(tl.maximum(xl, xh), axis=0)
    off = _offset(m)
    xl, xh = unpack_pairs(u, zero, 2, IS_BF16)
    s = tl.sum(tl.exp2((xl - off) * LOG2E) + tl.exp2((xh - off) * LOG2E), axis=0)
    inv_sum = tl.where(tl.abs(m) < float("inf"), 1.0 / s, float("nan"))
    xl, xh = unpack_pairs(u, zero, 3, IS_BF16)
    y = pack_pairs(tl.exp2((xl - off) * LOG2E) * inv_sum, tl.exp2((xh - off) * LOG2E) * inv_sum,
                   y_row.dtype.element_ty)
    tl.store(y_row.to(tl.pointer_type(tl.int32)) + pcols, y, mask=pmask)


@triton.jit
def _softmax_kernel(
    x_ptr, w_ptr, y_ptr, N, eps, zero,
    x_inner, x_outer_stride, x_inner_stride,
    y_inner, y_outer_stride, y_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr, FUSED: tl.constexpr, PAIRS: tl.constexpr,
    IS_BF16: tl.constexpr, NEG_INF_PAIR: tl.constexpr, ONE_REDUCTION: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + (row // x_inner) * x_outer_stride + (row % x_inner) * x_inner_stride
    y_row = y_ptr + (row // y_inner) * y_outer_stride + (row % y_inner) * y_inner_stride
    cols = tl.arange(0, BLOCK_N)
    nan = float("nan")
    if PAIRS:
        _softmax_pairs(x_row, y_row, N, zero, BLOCK_N, IS_BF16, NEG_INF_PAIR)
    elif ONE_PASS:
        mask = cols < N
        if FUSED:
            # w is loaded with x, before the sum of squares: loaded after it, its loads wait
            # for the reduction's barriers and their latency adds to every row's.
            x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
            xw = x * w
            if ONE_REDUCTION:
                # The sum of squares and the max of x * w in one reduction: inv_rms > 0
                # scales every value alike and rounding is monotone, so the row's max of v
                # is max(x * w) * inv_rms. Then exp2 in log2 units, one multiply-add a value.
                sumsq, max_xw = tl.reduce((x * x, tl.where(mask, xw, float("-inf"))), 0, _sum_and_max)
                inv_rms = tl.rsqrt(sumsq / N + eps)
                m = tl.where(max_xw == float("-inf"), float("-inf"), max_xw * inv_rms)
                e = tl.where(mask, tl.exp2(xw * (inv_rms * LOG2E) - _offset(m) * LOG2E), 0.0)
            else:
                # v in log2 units (inv_rms * log2(e) folded into one scale): exp2(v - max)
                # then needs no multiply a value.
                scale = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps) * LOG2E
                v = tl.where(mask, xw * scale, float("-inf"))
                m = tl.max(v, axis=0)
                e = tl.exp2(v - _offset(m))
        else:
            v = tl.load(x_row + cols, mask=mask, other=float("-inf")).to(tl.float32)
            m = tl.max(v, axis=0)
            e = tl.exp2((v - _offset(m)) * LOG2E)
        inv_sum = tl.where(tl.abs(m) < float("inf"), 1.0 / tl.sum(e, axis=0), nan)
        tl.store(y_row + cols, (e * inv_sum).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        num_chunks = tl.cdiv(N, BLOCK_N)
        inv_rms = 1.0
        if FUSED:
            acc = tl.zeros([BLOCK_N], dtype=tl.float32)
            for chunk in range(0, num_chunks):
                start = chunk * BLOCK_N
                x = tl.load(x_row + start + cols, mask=start + cols < N, other=0.0).to(tl.float32)
                acc += x * x
            inv_rms = tl.rsqrt(tl.sum(acc, axis=0) / N + eps)
        # Pass 1: per lane, the running max and the sum of exponentials relative to it.
        m_lane = tl.full([BLOCK_N], float("-inf"), tl.float32)
        s_lane = tl.zeros([BLOCK_N], dtype=tl.float32)
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            v = _values(x_row + start, w_ptr + start, cols, N - start, inv_rms, FUSED)
            m_new = tl.maximum(m_lane, v)
            offset = _offset(m_new)
            s_lane = s_lane * tl.exp2((m_lane - offset) * LOG2E) + tl.exp2((v - offset) * LOG2E)
            m_lane = m_new
        m = tl.max(m_lane, axis=0)
        s = tl.sum(s_lane * tl.exp2((m_lane - _offset(m)) * LOG2E), axis=0)
        inv_sum = tl.where(tl.abs(m) < float("inf"), 1.0 / s, nan)
        # Pass 2: exp(v - max) / sum (NaN everywhere when the max is not finite).
        for chunk in range(0, num_chunks):
            start = chunk * BLOCK_N
            v = _values(x_row + start, w_ptr + start, cols, N - start, inv_rms, FUSED)
            y = tl.exp2((v - m) * LOG2E) * inv_sum
            tl.store(y_row + start + cols, y.to(y_ptr.dtype.element_ty), mask=start + cols < N)


def _launch(op: str, x: torch.Tensor, xr, weight, eps: float) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if xr.rows == 0 or xr.cols == 0:
        return y
    yr = row_layout(y, op, "y")
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(xr.cols) if one_pass else CHUNK
    # Softmax's one-pass 16-bit rows are held as pairs. (The fused op's are not: it needs
    # the weight beside x at three uses, and held or re-read at each, it spilled registers
    # and ran 1.5-2x slower on an H200.)
    pairs = (weight is None and one_pass and pairs_pay_off(block_n) and can_hold_pairs(x, xr, xr.cols)
             and can_hold_pairs(y, yr, xr.cols))
    if pairs:
        launch = pairs_launch(block_n)
    else:
        launch = {"num_warps": row_num_warps(block_n, x.element_size(),
                                             long_row_max_warps(x.element_size(), fused=weight is not None))}
    _softmax_kernel[(xr.rows,)](
        x, weight if weight is not None else x, y, xr.cols, eps, 0,
        xr.inner, xr.outer_stride, xr.inner_stride,
        yr.inner, yr.outer_stride, yr.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass, FUSED=weight is not None, PAIRS=pairs,
        IS_BF16=x.dtype == torch.bfloat16,
        NEG_INF_PAIR=neg_inf_pair(x.dtype) if pairs else 0,
        ONE_REDUCTION=block_n >= FUSED_ONE_REDUCTION_MIN,
        **launch,
    )
    return y


def softmax(x: torch.Tensor) -> torch.Tensor:
    """Softmax over the last dim of x [..., N]; fp32 math, output in x's dtype."""
    op = "gks.triton.softmax"
    check_device(x, op, "x")
    check_float(x, op, "x")
    return _launch(op, x, row_layout(x, op, "x"), None, 0.0)


def softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], one kernel; the
    normalized row stays fp32 (never rounded to x's dtype)."""
    op = "gks.triton.softmax_rmsnorm"
    check_device(x, op, "x")
    check_float(x, op, "x")
    check_same(x, "x", weight, "weight", op)
    xr = row_layout(x, op, "x")
    check_norm_weight(weight, xr.cols, op)
    if not eps >= 0:
        raise ValueError(f"{op}: argument 'eps' must be >= 0, got {eps}")
    return _launch(op, x, xr, weight, float(eps))
