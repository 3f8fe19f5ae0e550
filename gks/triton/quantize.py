# SPDX-License-Identifier: Apache-2.0
"""INT8 quantize / dequantize in Triton, bit for bit the contract of gks.reference.quantize_int8.

Quantize: one program per row; the row stays in registers when it fits (one read), else it
is walked twice in chunks (absmax, then quantize; the second read mostly from L2). The
same arithmetic as the CUDA kernel:
- absmax as the max of the sign-cleared fp32 bit patterns (integer order is float order for
  them and NaN patterns sort above inf, so a NaN wins; tl.max on floats may drop NaN);
- scale = absmax / 127 and the reciprocal 1 / scale with tl.math.div_rn (IEEE; Triton's
  ``/`` on fp32 is an approximate division);
- v = x / scale: on the GPU, Markstein's correction from the reciprocal (two fmas), which
  is the correctly rounded quotient for rows with 2^-64 <= scale <= 2^126; other rows,
  and every row under the interpreter (which emulates tl.fma with two roundings), use
  div_rn per element (under the interpreter, bf16 is also widened and narrowed on the bits:
  its casts truncate and lose subnormals);
- rint by adding 1.5 * 2^23 (the add rounds half to even; the low byte of the sum's bits is
  the int8), no libdevice call (Triton links libdevice with flush-to-zero on).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import (
    bf16_rounded,
    can_hold_pairs,
    check_device,
    check_float,
    interpreter_variant,
    long_row_max_warps,
    next_pow2,
    on_tensor_device,
    pairs_launch,
    pairs_pay_off,
    row_layout,
    row_num_warps,
    row_start,
    unpack_pairs,
)

__all__ = ["quantize_int8", "dequantize_int8"]

# Rows up to this many elements are held whole in one program (one read of the row).
MAX_ONE_PASS = 32768
CHUNK = 4096

@triton.jit
def _abs_bits(x):
    return x.to(tl.int32, bitcast=True) & 0x7FFFFFFF


@triton.jit
def _load_f32(ptrs, mask, INTERPRETED: tl.constexpr):
    raw = tl.load(ptrs, mask=mask, other=0.0)
    if INTERPRETED and raw.dtype == tl.bfloat16:
        # bf16 is the top half of an fp32 (the interpreter's cast loses bf16 subnormals).
        return (raw.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)
    return raw.to(tl.float32)


@triton.jit
def _markstein_ok(scale):
    """Whether x * (1 / scale) corrected by Markstein's step is the exact quotient (on the
    GPU): for 2^-64 <= scale <= 2^126."""
    return (scale >= 5.421010862427522e-20) & (scale <= 8.507059173023462e37)


@triton.jit
def _divide_markstein(x, scale, inv):
    q0 = x * inv
    rem = tl.fma(-q0, scale, x)
    return tl.fma(rem, inv, q0)


@triton.jit
def _divide_exact(x, scale):
    """x / scale correctly rounded, clamped to [-127, 127], NaN as 0."""
    v = tl.math.div_rn(x, scale)
    return tl.where(v != v, 0.0, tl.minimum(tl.maximum(v, -127.0), 127.0))


@triton.jit
def _rint_int8(v):
    bits = (v + 12582912.0).to(tl.int32, bitcast=True)  # + 1.5 * 2^23
    return (bits - 0x4B400000).to(tl.int8)  # the bits of 1.5 * 2^23


@triton.jit
def _quantize_values(x, scale, inv, INTERPRETED: tl.constexpr):
    """int8 q for fp32 x of one row, given its scale and 1 / scale."""
    if INTERPRETED:
        v = _divide_exact(x, scale)
    else:
        if _markstein_ok(scale):
            v = _divide_markstein(x, scale, inv)
        else:
            v = _divide_exact(x, scale)
    return _rint_int8(v)


@triton.jit
def _quantize_kernel(
    x_ptr, q_ptr, s_ptr, N, zero,
    x_inner, x_outer_stride, x_inner_stride,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr, INTERPRETED: tl.constexpr,
    PAIRS: tl.constexpr, IS_BF16: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    # The scale's place as an offset (row_start's pointer moved ptxas's register allocation).
    s_off = (row // s_inner) * s_outer_stride + (row % s_inner) * s_inner_stride
    cols = tl.arange(0, BLOCK_N)
    if PAIRS:
        # A one-pass row of 16-bit values held as int32 pairs (gks.triton._common). Rows
        # whose scale needs the exact division per element read x again (from L2) in a
        # branch of their own, so that its calls leave the common path's registers alone.
        pcols = tl.arange(0, BLOCK_N // 2)
        u = tl.load(x_row.to(tl.pointer_type(tl.int32)) + pcols, mask=pcols < N // 2, other=0)
        xl, xh = unpack_pairs(u, zero, 1, IS_BF16)
        absmax = tl.max(tl.maximum(_abs_bits(xl), _abs_bits(xh)), axis=0).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(absmax, 127.0)
        inv = tl.math.div_rn(1.0, scale)
        tl.store(s_ptr + s_off, scale)
        mask = cols < N
        if (not INTERPRETED) and _markstein_ok(scale):
            xl, xh = unpack_pairs(u, zero, 2, IS_BF16)
            # (low, high) of each pair, interleaved back into row order.
            q = tl.join(_rint_int8(_divide_markstein(xl, scale, inv)), _rint_int8(_divide_markstein(xh, scale, inv)))
            tl.store(q_row + cols, tl.reshape(q, [BLOCK_N]), mask=mask)
        else:
            x = _load_f32(x_row + cols, mask, INTERPRETED)
            tl.store(q_row + cols, _rint_int8(_divide_exact(x, scale)), mask=mask)
    elif ONE_PASS:
        mask = cols < N
        x = _load_f32(x_row + cols, mask, INTERPRETED)
        absmax = tl.max(_abs_bits(x), axis=0).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(absmax, 127.0)
        inv = tl.math.div_rn(1.0, scale)
        tl.store(s_ptr + s_off, scale)
        tl.store(q_row + cols, _quantize_values(x, scale, inv, INTERPRETED), mask=mask)
    else:
        acc = tl.zeros([BLOCK_N], dtype=tl.int32)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = _load_f32(x_row + start + cols, mask, INTERPRETED)
            acc = tl.maximum(acc, _abs_bits(x))
        absmax = tl.max(acc, axis=0).to(tl.float32, bitcast=True)
        scale = tl.math.div_rn(absmax, 127.0)
        inv = tl.math.div_rn(1.0, scale)
        tl.store(s_ptr + s_off, scale)
        for start in range(0, N, BLOCK_N):
            mask = start + cols < N
            x = _load_f32(x_row + start + cols, mask, INTERPRETED)
            tl.store(q_row + start + cols, _quantize_values(x, scale, inv, INTERPRETED), mask=mask)


@triton.jit
def _dequantize_kernel(
    q_ptr, s_ptr, o_ptr, N,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    o_inner, o_outer_stride, o_inner_stride,
    BLOCK_N: tl.constexpr, BF16_BY_HAND: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    o_row = row_start(o_ptr, row, o_inner, o_outer_stride, o_inner_stride)
    scale = tl.load(row_start(s_ptr, row, s_inner, s_outer_stride, s_inner_stride))
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    y = tl.load(q_row + cols, mask=mask, other=0).to(tl.float32) * scale
    if BF16_BY_HAND:
        tl.store(o_row + cols, bf16_rounded(y), mask=mask)
    else:
        tl.store(o_row + cols, y.to(o_ptr.dtype.element_ty), mask=mask)


def _scale_shape(shape) -> tuple[int, ...]:
    return (*shape[:-1], 1)


@on_tensor_device
def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8, scale fp32 [..., 1]): scale = absmax(row) / 127, q = rint(x / scale)."""
    op = "gks.triton.quantize_int8"
    check_device(x, op, "x")
    check_float(x, op, "x")
    xr = row_layout(x, op, "x")
    q = torch.empty(x.shape, dtype=torch.int8, device=x.device)
    scale = torch.empty(_scale_shape(x.shape), dtype=torch.float32, device=x.device)
    if xr.rows == 0:
        return q, scale
    qr = row_layout(q, op, "q")
    sr = row_layout(scale, op, "scale")
    one_pass = xr.cols <= MAX_ONE_PASS
    block_n = next_pow2(max(xr.cols, 1)) if one_pass else CHUNK
    pairs = one_pass and pairs_pay_off(block_n) and can_hold_pairs(x, xr, xr.cols)
    if pairs:
        launch = pairs_launch(block_n)
    else:
        launch = {"num_warps": row_num_warps(block_n, x.element_size(), long_row_max_warps(x.element_size()))}
    _quantize_kernel[(xr.rows,)](
        x, q, scale, xr.cols, 0,
        xr.inner, xr.outer_stride, xr.inner_stride,
        qr.inner, qr.outer_stride, qr.inner_stride,
        sr.inner, sr.outer_stride, sr.inner_stride,
        BLOCK_N=block_n, ONE_PASS=one_pass, INTERPRETED=interpreter_variant(),
        PAIRS=pairs, IS_BF16=x.dtype == torch.bfloat16, **launch,
    )
    return q, scale


@on_tensor_device
def dequantize_int8(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype = torch.float16) -> torch.Tensor:
    """q * scale (fp32 product) in ``dtype``; scale fp32 [..., 1] (q's shape, last dim 1)."""
    op = "gks.triton.dequantize_int8"
    check_device(q, op, "q")
    if q.dtype != torch.int8:
        raise TypeError(f"{op}: argument 'q' must be int8, got {q.dtype}")
    if scale.device != q.device:
        raise ValueError(f"{op}: argument 'scale' must be on the device of 'q' ({q.device}), got {scale.device}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'scale' must be float32, got {scale.dtype}")
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}")
    qr = row_layout(q, op, "q")
    if tuple(scale.shape) != _scale_shape(q.shape):
        raise ValueError(
            f"{op}: argument 'scale' must have shape {list(_scale_shape(q.shape))} ('q' with its "
            f"last dim 1), got {list(scale.shape)}"
        )
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    if qr.rows == 0 or qr.cols == 0:
        return out
    sr = row_layout(scale, op, "scale")
    orr = row_layout(out, op, "out")
    block_n = min(next_pow2(qr.cols), 4096)
    while triton.cdiv(qr.cols, block_n) > 65535:
        block_n *= 2
    _dequantize_kernel[(qr.rows, triton.cdiv(qr.cols, block_n))](
        q, scale, out, qr.cols,
        qr.inner, qr.outer_stride, qr.inner_stride,
        sr.inner, sr.outer_stride, sr.inner_stride,
        orr.inner, orr.outer_stride, orr.inner_stride,
        BLOCK_N=block_n, BF16_BY_HAND=interpreter_variant() and dtype == torch.bfloat16,
        num_warps=row_num_warps(block_n, out.element_size()),
    )
    return out
