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
    e4m3_value,
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

__all__ = ["quantize_int8", "dequantize_int8", "quantize_fp8", "dequantize_fp8"]

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


# ---- FP8 e4m3 (gks.reference.quantize_fp8's contract, bit for bit) ----
#
# q travels as its bits (a uint8 view of the float8_e4m3fn tensor): fp32 -> e4m3 is done on
# the bits, round to nearest even, so the port needs no fp8 type (Triton has none below
# sm_89, and its interpreter none at all) and gives the same bits everywhere.
FP8_ONE_PASS = 32768  # token rows up to this many elements are held whole
FP8_TILE = 1024  # the columns a program of the per-tensor kernels takes


@triton.jit
def _fp8_scale(absmax, UE8M0: tl.constexpr):
    """absmax / 448 (IEEE); with UE8M0 rounded up to a power of two >= 2^-126 (0, inf and
    NaN kept)."""
    scale = tl.math.div_rn(absmax, 448.0)
    if UE8M0:
        bits = scale.to(tl.int32, bitcast=True)
        up = ((bits + 0x7FFFFF) & -8388608).to(tl.float32, bitcast=True)
        keep = (scale == 0.0) | ((bits & 0x7FFFFFFF) >= 0x7F800000)
        scale = tl.where(keep, scale, up)
    return scale


@triton.jit
def _e4m3_bits(x, scale, INTERPRETED: tl.constexpr):
    """The e4m3fn bits (uint8) of clamp(x / scale, -448, 448), 0 where scale is 0."""
    if INTERPRETED:
        v = tl.math.div_rn(x, scale)
    else:
        v = tl.where(_markstein_ok(scale), _divide_markstein(x, scale, tl.math.div_rn(1.0, scale)),
                     tl.math.div_rn(x, scale))
    v = tl.where(scale == 0.0, 0.0, v)
    v = tl.where(v != v, v, tl.minimum(tl.maximum(v, -448.0), 448.0))
    a = tl.abs(v)
    u = a.to(tl.int32, bitcast=True)
    # |v| >= 2^-6: keep 3 mantissa bits, rounding half to even (a carry moves the exponent
    # up), then rebias the exponent from 127 to 7 (120 << 3).
    normal = ((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) - 960
    # below 2^-6: multiples of 2^-9, rint(|v| * 2^9) by the 1.5 * 2^23 addition.
    sub = (a * 512.0 + 12582912.0).to(tl.int32, bitcast=True) - 0x4B400000
    mag = tl.where(a >= 0.015625, normal, sub)
    mag = tl.where(v != v, 0x7F, mag)
    sign = (v.to(tl.int32, bitcast=True) >> 24) & 0x80
    return (mag | sign).to(tl.uint8)


@triton.jit
def _fp8_groups_kernel(
    x_ptr, q_ptr, s_ptr, amax_ptr, N, G,
    x_inner, x_outer_stride, x_inner_stride,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    GROUP: tl.constexpr, GPP: tl.constexpr, TENSOR: tl.constexpr, UE8M0: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """Program (row, j): groups j * GPP ... of GROUP columns of one row, each its own scale
    (TENSOR: the scale of the whole tensor, from the absmax bits at amax_ptr)."""
    row = tl.program_id(0).to(tl.int64)
    gi = tl.program_id(1).to(tl.int64) * GPP + tl.arange(0, GPP)
    cols = gi[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    mask = (gi[:, None] < G) & (cols < N)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    x = _load_f32(x_row + cols, mask, INTERPRETED)
    if TENSOR:
        scale = _fp8_scale(tl.load(amax_ptr).to(tl.float32, bitcast=True), UE8M0)
        if (tl.program_id(0) == 0) & (tl.program_id(1) == 0):
            tl.store(s_ptr, scale)
        q = _e4m3_bits(x, scale, INTERPRETED)
    else:
        absmax = tl.max(_abs_bits(x), axis=1).to(tl.float32, bitcast=True)
        scale = _fp8_scale(absmax, UE8M0)
        s_row = row_start(s_ptr, row, s_inner, s_outer_stride, s_inner_stride)
        tl.store(s_row + gi, scale, mask=gi < G)
        q = _e4m3_bits(x, scale[:, None], INTERPRETED)
    tl.store(q_row + cols, q, mask=mask)


@triton.jit
def _fp8_row_looped_kernel(
    x_ptr, q_ptr, s_ptr, N,
    x_inner, x_outer_stride, x_inner_stride,
    q_inner, q_outer_stride, q_inner_stride,
    s_inner, s_outer_stride, s_inner_stride,
    BLOCK_N: tl.constexpr, UE8M0: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Per-token scales of rows too long to hold: absmax pass, then quantize pass."""
    row = tl.program_id(0).to(tl.int64)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    q_row = row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], dtype=tl.int32)
    for start in range(0, N, BLOCK_N):
        x = _load_f32(x_row + start + cols, start + cols < N, INTERPRETED)
        acc = tl.maximum(acc, _abs_bits(x))
    scale = _fp8_scale(tl.max(acc, axis=0).to(tl.float32, bitcast=True), UE8M0)
    tl.store(row_start(s_ptr, row, s_inner, s_outer_stride, s_inner_stride), scale)
    for start in range(0, N, BLOCK_N):
        mask = start + cols < N
        x = _load_f32(x_row + start + cols, mask, INTERPRETED)
        tl.store(q_row + start + cols, _e4m3_bits(x, scale, INTERPRETED), mask=mask)


@triton.jit
def _fp8_block_kernel(
    x_ptr, q_ptr, s_ptr, M, N, x_stride, q_stride, s_stride,
    BLOCK: tl.constexpr, UE8M0: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """Program (i, j): the BLOCK x BLOCK block (i, j) of a 2-D x, one scale."""
    i = tl.program_id(0).to(tl.int64)
    j = tl.program_id(1).to(tl.int64)
    rows = i * BLOCK + tl.arange(0, BLOCK)
    cols = j * BLOCK + tl.arange(0, BLOCK)
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    x = _load_f32(x_ptr + rows[:, None] * x_stride + cols[None, :], mask, INTERPRETED)
    absmax = tl.max(tl.max(_abs_bits(x), axis=1), axis=0).to(tl.float32, bitcast=True)
    scale = _fp8_scale(absmax, UE8M0)
    tl.store(s_ptr + i * s_stride + j, scale)
    tl.store(q_ptr + rows[:, None] * q_stride + cols[None, :], _e4m3_bits(x, scale, INTERPRETED), mask=mask)


@triton.jit
def _fp8_absmax_kernel(
    x_ptr, amax_ptr, N, x_inner, x_outer_stride, x_inner_stride, BLOCK_N: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """The tensor's absmax, as the bits of a non-negative fp32, by atomic max (int32 order is
    float order for such bits, and a NaN's sort above inf)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    x = _load_f32(row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride) + cols, cols < N, INTERPRETED)
    tl.atomic_max(amax_ptr, tl.max(_abs_bits(x), axis=0))


@triton.jit
def _fp8_dequantize_kernel(
    q_ptr, s_ptr, o_ptr, N,
    q_inner, q_outer_stride, q_inner_stride,
    o_inner, o_outer_stride, o_inner_stride,
    s_row_stride, MODE: tl.constexpr, GROUP: tl.constexpr, BLOCK_N: tl.constexpr,
    BF16_BY_HAND: tl.constexpr,
):
    """out = q * scale; MODE 0 tensor, 1 token, 2 group, 3 block (scale [.., G] rows of
    s_row_stride; block: scale row row // GROUP). Rows of token/group scales are contiguous
    row-major [rows, G] (the wrapper makes them so)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1).to(tl.int64) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = cols < N
    q = tl.load(row_start(q_ptr, row, q_inner, q_outer_stride, q_inner_stride) + cols, mask=mask, other=0)
    if MODE == 0:
        s = tl.load(s_ptr)
    elif MODE == 1:
        s = tl.load(s_ptr + row * s_row_stride)
    elif MODE == 2:
        s = tl.load(s_ptr + row * s_row_stride + cols // GROUP, mask=mask, other=0.0)
    else:
        s = tl.load(s_ptr + (row // GROUP) * s_row_stride + cols // GROUP, mask=mask, other=0.0)
    y = e4m3_value(q) * s
    o_row = row_start(o_ptr, row, o_inner, o_outer_stride, o_inner_stride)
    if BF16_BY_HAND:
        tl.store(o_row + cols, bf16_rounded(y), mask=mask)
    else:
        tl.store(o_row + cols, y.to(o_ptr.dtype.element_ty), mask=mask)


def _fp8_args(op, granularity, group_size):
    from gks.specs.quantize import fp8_check_granularity

    return fp8_check_granularity(granularity, group_size, op)


@on_tensor_device
def quantize_fp8(x: torch.Tensor, granularity: str = "token", group_size: int = 128,
                 scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q float8_e4m3fn, scale fp32): see gks.reference.quantize_fp8."""
    from gks.specs.quantize import fp8_scale_shape

    op = "gks.triton.quantize_fp8"
    check_device(x, op, "x")
    check_float(x, op, "x")
    _fp8_args(op, granularity, group_size)
    scale_shape = fp8_scale_shape(x.shape, granularity, op)
    xr = row_layout(x, op, "x")
    q = torch.empty(x.shape, dtype=torch.float8_e4m3fn, device=x.device)
    scale = torch.zeros(scale_shape, dtype=torch.float32, device=x.device)
    if xr.rows == 0 or xr.cols == 0:
        return q, scale  # empty groups: absmax 0, scale 0
    qb = q.view(torch.uint8)
    qr = row_layout(qb, op, "q")
    interpreted = interpreter_variant()
    ue8m0 = bool(scale_ue8m0)
    n = xr.cols
    if granularity == "block":
        m = x.shape[0]
        grid = (triton.cdiv(m, 128), triton.cdiv(n, 128))
        _fp8_block_kernel[grid](x, qb, scale, m, n, x.stride(0), qb.stride(0), scale.stride(0),
                                BLOCK=128, UE8M0=ue8m0, INTERPRETED=interpreted, num_warps=8)
        return q, scale
    if granularity == "token" and n > FP8_ONE_PASS:
        sr = row_layout(scale, op, "scale")
        _fp8_row_looped_kernel[(xr.rows,)](
            x, qb, scale, n,
            xr.inner, xr.outer_stride, xr.inner_stride,
            qr.inner, qr.outer_stride, qr.inner_stride,
            sr.inner, sr.outer_stride, sr.inner_stride,
            BLOCK_N=4096, UE8M0=ue8m0, INTERPRETED=interpreted, num_warps=8,
        )
        return q, scale
    amax = scale  # unused unless per tensor
    if granularity == "tensor":
        amax = torch.zeros(1, dtype=torch.int32, device=x.device)
        _fp8_absmax_kernel[(xr.rows, triton.cdiv(n, FP8_TILE))](
            x, amax, n, xr.inner, xr.outer_stride, xr.inner_stride,
            BLOCK_N=FP8_TILE, INTERPRETED=interpreted, num_warps=4,
        )
        group, groups, gpp, sr = FP8_TILE, triton.cdiv(n, FP8_TILE), 1, row_layout(scale, op, "scale")
    elif granularity == "token":
        group, groups, gpp, sr = max(next_pow2(n), 16), 1, 1, row_layout(scale, op, "scale")
    else:
        group, groups = 128, triton.cdiv(n, 128)
        gpp = min(8, next_pow2(groups))
        sr = row_layout(scale, op, "scale")
    _fp8_groups_kernel[(xr.rows, triton.cdiv(groups, gpp))](
        x, qb, scale, amax, n, groups,
        xr.inner, xr.outer_stride, xr.inner_stride,
        qr.inner, qr.outer_stride, qr.inner_stride,
        sr.inner, sr.outer_stride, sr.inner_stride,
        GROUP=group, GPP=gpp, TENSOR=granularity == "tensor", UE8M0=ue8m0, INTERPRETED=interpreted,
        num_warps=row_num_warps(group * gpp, x.element_size(), long_row_max_warps(x.element_size())),
    )
    return q, scale


@on_tensor_device
def dequantize_fp8(q: torch.Tensor, scale: torch.Tensor, granularity: str = "token", group_size: int = 128,
                   dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """q * scale (fp32 product) in ``dtype``, scale laid out as quantize_fp8 gives it."""
    from gks.specs.quantize import fp8_scale_shape

    op = "gks.triton.dequantize_fp8"
    check_device(q, op, "q")
    if q.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{op}: argument 'q' must be float8_e4m3fn, got {q.dtype}")
    if scale.device != q.device:
        raise ValueError(f"{op}: argument 'scale' must be on the device of 'q' ({q.device}), got {scale.device}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'scale' must be float32, got {scale.dtype}")
    if not isinstance(dtype, torch.dtype) or dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}")
    _fp8_args(op, granularity, group_size)
    want = fp8_scale_shape(q.shape, granularity, op)
    if tuple(scale.shape) != want:
        raise ValueError(f"{op}: argument 'scale' must have shape {list(want)} for granularity "
                         f"'{granularity}', got {list(scale.shape)}")
    qb = q.view(torch.uint8) if q.dim() > 0 else q
    qr = row_layout(qb, op, "q")
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    if qr.rows == 0 or qr.cols == 0:
        return out
    orr = row_layout(out, op, "out")
    s = scale.reshape(-1, scale.shape[-1]).contiguous()
    mode = FP8_GRANULARITIES_INDEX[granularity]
    block_n = min(max(next_pow2(qr.cols), 128), 4096)
    _fp8_dequantize_kernel[(qr.rows, triton.cdiv(qr.cols, block_n))](
        qb, s, out, qr.cols,
        qr.inner, qr.outer_stride, qr.inner_stride,
        orr.inner, orr.outer_stride, orr.inner_stride,
        s.stride(0), MODE=mode, GROUP=128, BLOCK_N=block_n,
        BF16_BY_HAND=interpreter_variant() and dtype == torch.bfloat16,
        num_warps=row_num_warps(block_n, out.element_size()),
    )
    return out


FP8_GRANULARITIES_INDEX = {"tensor": 0, "token": 1, "group": 2, "block": 3}
