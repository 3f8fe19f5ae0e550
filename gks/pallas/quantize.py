# SPDX-License-Identifier: Apache-2.0
"""INT8 quantize / dequantize in Pallas, bit for bit the contract of gks.reference.quantize_int8.

Quantize: one program per block of rows. Rows up to MAX_ONE_PASS elements are loaded whole
(one read); longer rows are walked twice in chunks (absmax, then quantize). Block shapes
must be powers of two on the Triton lowering, so rows are padded with zeros (which leave
absmax unchanged) and the result sliced back.

Exactness takes care on both paths:
- absmax is the max of the sign-cleared fp32 bit patterns (integer order is float order
  for them and NaN patterns sort above inf, so a NaN wins; the Triton lowering's float max
  drops NaN);
- divisions must be IEEE: on the GPU they are ``div.rn.f32`` through inline PTX (the
  lowering's ``/`` is an approximate division); in interpret mode XLA would rewrite
  ``a / broadcast(b)`` and ``a / constant`` into multiplications by a reciprocal (an ulp
  off at times), which an optimization barrier on the operands prevents;
- rint is adding 1.5 * 2^23 (the add rounds half to even; the low byte of the sum's bits is
  the int8).
One exception: interpret mode runs on XLA:CPU, which flushes subnormal fp32 to zero, so
rows with subnormal entries or a subnormal scale (fp32/bf16 input with absmax below about
1.5e-36) can differ from the contract there; the GPU lowering keeps subnormals.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import check_float, check_int8_offsets, default_interpret, next_pow2, takes_arrays

__all__ = ["quantize_int8", "dequantize_int8", "quantize_fp8", "dequantize_fp8"]

MAX_ONE_PASS = 32768
CHUNK = 4096
MIN_BLOCK_N = 16
_MAGIC = 12582912.0  # 1.5 * 2^23
_MAGIC_BITS = 0x4B400000  # its fp32 bits


def _div_rn(a, b, interpret: bool):
    """a / b in IEEE fp32, rounded to nearest, for fp32 arrays of one shape."""
    if interpret:
        a, b = jax.lax.optimization_barrier((a, b))
        return a / b
    [out] = plgpu.elementwise_inline_asm(
        "div.rn.f32 $0, $1, $2;",
        args=[a, b],
        constraints="=f,f,f",
        pack=1,
        result_shape_dtypes=[jax.ShapeDtypeStruct(a.shape, jnp.float32)],
    )
    return out


def _abs_bits(x):
    return jax.lax.bitcast_convert_type(x, jnp.int32) & 0x7FFFFFFF


def _scale(abs_bits_max, interpret):
    absmax = jax.lax.bitcast_convert_type(abs_bits_max, jnp.float32)
    return _div_rn(absmax, jnp.full(absmax.shape, 127.0, jnp.float32), interpret)


def _quantize(x, scale, interpret):
    v = _div_rn(x, jnp.broadcast_to(scale, x.shape), interpret)
    v = jnp.where(v != v, 0.0, jnp.minimum(jnp.maximum(v, -127.0), 127.0))
    bits = jax.lax.bitcast_convert_type(v + jnp.float32(_MAGIC), jnp.int32)
    return (bits - _MAGIC_BITS).astype(jnp.int8)


def _quantize_one_pass_kernel(x_ref, q_ref, s_ref, *, interpret):
    x = x_ref[...].astype(jnp.float32)
    scale = _scale(jnp.max(_abs_bits(x), axis=-1, keepdims=True), interpret)
    s_ref[...] = scale
    q_ref[...] = _quantize(x, scale, interpret)


def _quantize_chunked_kernel(x_ref, q_ref, s_ref, *, chunk, interpret):
    rows = x_ref.shape[0]
    steps = x_ref.shape[-1] // chunk

    def absmax(i, acc):
        x = x_ref[:, pl.ds(i * chunk, chunk)].astype(jnp.float32)
        return jnp.maximum(acc, jnp.max(_abs_bits(x), axis=-1, keepdims=True))

    bits = jax.lax.fori_loop(0, steps, absmax, jnp.zeros((rows, 1), jnp.int32))
    scale = _scale(bits, interpret)
    s_ref[...] = scale

    def quantize(i, carry):
        x = x_ref[:, pl.ds(i * chunk, chunk)].astype(jnp.float32)
        q_ref[:, pl.ds(i * chunk, chunk)] = _quantize(x, scale, interpret)
        return carry

    jax.lax.fori_loop(0, steps, quantize, 0)


def _rows_per_program(m: int, n_pad: int) -> int:
    # Several rows per program for short rows, when they divide the row count.
    rows = 1
    while rows < 16 and (rows * 2) * n_pad <= 4096 and m % (rows * 2) == 0:
        rows *= 2
    return rows


def _num_warps(rows: int, n_block: int, elem_bytes: int) -> int:
    return max(1, min(16, rows * n_block * elem_bytes // (32 * 64)))


@functools.partial(jax.jit, static_argnames=("interpret",))
def _quantize_2d(x, *, interpret):
    m, n = x.shape
    # At least MIN_BLOCK_N columns: blocks a column or two wide of int8 are an odd case for
    # the Triton lowering, and the zero padding costs nothing here.
    n_pad = max(next_pow2(n), MIN_BLOCK_N) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK
    if n_pad != n:
        x = jnp.pad(x, ((0, 0), (0, n_pad - n)))
    rows = _rows_per_program(m, n_pad)
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_quantize_one_pass_kernel, interpret=interpret)
    else:
        kernel = functools.partial(_quantize_chunked_kernel, chunk=CHUNK, interpret=interpret)
    q, scale = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((m, n_pad), jnp.int8),
            jax.ShapeDtypeStruct((m, 1), jnp.float32),
        ),
        grid=(m // rows,),
        in_specs=[pl.BlockSpec((rows, n_pad), lambda i: (i, 0))],
        out_specs=(
            pl.BlockSpec((rows, n_pad), lambda i: (i, 0)),
            pl.BlockSpec((rows, 1), lambda i: (i, 0)),
        ),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(
            num_warps=_num_warps(rows, min(n_pad, MAX_ONE_PASS), x.dtype.itemsize)
        ),
    )(x)
    return (q[:, :n] if n_pad != n else q), scale


def _dequantize_kernel(q_ref, s_ref, o_ref):
    o_ref[...] = (q_ref[...].astype(jnp.float32) * s_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("dtype", "interpret"))
def _dequantize_2d(q, scale, *, dtype, interpret):
    m, n = q.shape
    block_n = min(max(next_pow2(n), MIN_BLOCK_N), CHUNK)
    n_pad = -(-n // block_n) * block_n
    if n_pad != n:
        q = jnp.pad(q, ((0, 0), (0, n_pad - n)))
    rows = _rows_per_program(m, block_n)
    out = pl.pallas_call(
        _dequantize_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n_pad), dtype),
        grid=(m // rows, n_pad // block_n),
        in_specs=[
            pl.BlockSpec((rows, block_n), lambda i, j: (i, j)),
            pl.BlockSpec((rows, 1), lambda i, j: (i, 0)),
        ],
        out_specs=pl.BlockSpec((rows, block_n), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=_num_warps(rows, block_n, jnp.dtype(dtype).itemsize)),
    )(q, scale)
    return out[:, :n] if n_pad != n else out


def _float_dtype(dtype, op: str):
    """A JAX float dtype from a JAX/NumPy dtype, its name, or a torch dtype (the harness's)."""
    for candidate in (dtype, str(dtype).removeprefix("torch.")):
        try:
            dt = jnp.dtype(candidate)
        except TypeError:
            continue
        if dt in (jnp.float32, jnp.float16, jnp.bfloat16):
            return dt
        break
    raise TypeError(f"{op}: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}")


@takes_arrays("x")
def quantize_int8(x: jax.Array, *, interpret: bool | None = None):
    """(q int8, scale fp32 [..., 1]) of x [..., N] (JAX arrays): scale = absmax(row) / 127,
    q = rint(x / scale); the exact contract is gks.reference.quantize_int8's."""
    op = "gks.pallas.quantize_int8"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    n = x.shape[-1]
    scale_shape = (*x.shape[:-1], 1)
    if x.size == 0:  # no rows, or rows of length 0 (whose absmax, hence scale, is 0)
        return jnp.zeros(x.shape, jnp.int8), jnp.zeros(scale_shape, jnp.float32)
    check_int8_offsets(x.size, op, "x")  # q, the int8 output, has x's size
    if interpret is None:
        interpret = default_interpret(x)
    q, scale = _quantize_2d(x.reshape(-1, n), interpret=interpret)
    return q.reshape(x.shape), scale.reshape(scale_shape)


@takes_arrays("q", "scale")
def dequantize_int8(q: jax.Array, scale: jax.Array, dtype=jnp.float16, *, interpret: bool | None = None):
    """q * scale (fp32 product) in ``dtype``, for q int8 [..., N] and scale fp32 [..., 1]."""
    op = "gks.pallas.dequantize_int8"
    if q.dtype != jnp.int8:
        raise TypeError(f"{op}: argument 'q' must be int8, got {q.dtype}")
    if scale.dtype != jnp.float32:
        raise TypeError(f"{op}: argument 'scale' must be float32, got {scale.dtype}")
    dt = _float_dtype(dtype, op)
    if q.ndim < 1:
        raise ValueError(f"{op}: argument 'q' must have at least 1 dim, got a scalar")
    scale_shape = (*q.shape[:-1], 1)
    if tuple(scale.shape) != scale_shape:
        raise ValueError(
            f"{op}: argument 'scale' must have shape {list(scale_shape)} ('q' with its last dim 1), "
            f"got {list(scale.shape)}"
        )
    if q.size == 0:
        return jnp.zeros(q.shape, dt)
    check_int8_offsets(q.size, op, "q")
    if interpret is None:
        interpret = default_interpret(q)
    n = q.shape[-1]
    out = _dequantize_2d(q.reshape(-1, n), scale.reshape(-1, 1), dtype=dt, interpret=interpret)
    return out.reshape(q.shape)


# ---- FP8 e4m3 quantization (gks.reference.quantize_fp8's contract, bit for bit) ----
#
# The kernels write e4m3 bits as uint8 (rounded to nearest even on the integer bits, as the
# Triton port does) and the result is bitcast to float8_e4m3fn outside them, so no kernel
# holds an fp8 type (the Triton lowering has none below sm_89). Divisions as above (IEEE).
# Per token and per tensor rows are held whole (padded to a power of two) or walked in
# chunks; groups are (1, 128) blocks and 128 x 128 blocks (128, 128) blocks of the padded x.


def _fp8_scale(abs_bits_max, ue8m0: bool, interpret: bool):
    absmax = jax.lax.bitcast_convert_type(abs_bits_max, jnp.float32)
    scale = _div_rn(absmax, jnp.full(absmax.shape, 448.0, jnp.float32), interpret)
    if ue8m0:
        bits = jax.lax.bitcast_convert_type(scale, jnp.int32)
        up = jax.lax.bitcast_convert_type((bits + 0x7FFFFF) & -8388608, jnp.float32)
        keep = (scale == 0) | ((bits & 0x7FFFFFFF) >= 0x7F800000)
        scale = jnp.where(keep, scale, up)
    return scale


def _e4m3_bits(x, scale, interpret: bool):
    """uint8 e4m3fn bits of clamp(x / scale, -448, 448), 0 where scale is 0 (scale broadcast
    to x)."""
    s = jnp.broadcast_to(scale, x.shape)
    v = _div_rn(x, s, interpret)
    v = jnp.where(s == 0, 0.0, v)
    v = jnp.where(v != v, v, jnp.minimum(jnp.maximum(v, -448.0), 448.0))
    a = jnp.abs(v)
    u = jax.lax.bitcast_convert_type(a, jnp.int32)
    normal = ((u + 0x7FFFF + ((u >> 20) & 1)) >> 20) - 960
    sub = jax.lax.bitcast_convert_type(a * 512.0 + jnp.float32(_MAGIC), jnp.int32) - _MAGIC_BITS
    mag = jnp.where(a >= 0.015625, normal, sub)
    mag = jnp.where(v != v, 0x7F, mag)
    sign = (jax.lax.bitcast_convert_type(v, jnp.int32) >> 24) & 0x80
    return (mag | sign).astype(jnp.uint8)


def _fp8_rows_kernel(x_ref, s_in_ref, q_ref, s_ref, *, ue8m0, tensor, interpret):
    """One row held whole: its own scale, or (tensor) the given one."""
    x = x_ref[...].astype(jnp.float32)
    if tensor:
        scale = s_in_ref[...]
    else:
        scale = _fp8_scale(jnp.max(_abs_bits(x), axis=-1, keepdims=True), ue8m0, interpret)
    s_ref[...] = scale
    q_ref[...] = _e4m3_bits(x, scale, interpret)


def _fp8_rows_chunked_kernel(x_ref, s_in_ref, q_ref, s_ref, *, chunk, ue8m0, tensor, interpret):
    rows = x_ref.shape[0]
    steps = x_ref.shape[-1] // chunk
    if tensor:
        scale = s_in_ref[...]
    else:
        def absmax(i, acc):
            x = x_ref[:, pl.ds(i * chunk, chunk)].astype(jnp.float32)
            return jnp.maximum(acc, jnp.max(_abs_bits(x), axis=-1, keepdims=True))

        scale = _fp8_scale(jax.lax.fori_loop(0, steps, absmax, jnp.zeros((rows, 1), jnp.int32)), ue8m0, interpret)
    s_ref[...] = scale

    def quantize(i, carry):
        x = x_ref[:, pl.ds(i * chunk, chunk)].astype(jnp.float32)
        q_ref[:, pl.ds(i * chunk, chunk)] = _e4m3_bits(x, scale, interpret)
        return carry

    jax.lax.fori_loop(0, steps, quantize, 0)


def _row_absmax_kernel(x_ref, a_ref):
    a_ref[...] = jnp.max(_abs_bits(x_ref[...].astype(jnp.float32)), axis=-1, keepdims=True)


def _fp8_tile_kernel(x_ref, q_ref, s_ref, *, ue8m0, interpret):
    """One group (1 x 128) or block (128 x 128): one scale."""
    x = x_ref[...].astype(jnp.float32)
    bits = jnp.max(jnp.max(_abs_bits(x), axis=-1, keepdims=True), axis=0, keepdims=True)
    scale = _fp8_scale(bits, ue8m0, interpret)
    s_ref[...] = scale
    q_ref[...] = _e4m3_bits(x, scale, interpret)


def _pad_cols(n: int) -> int:
    return max(next_pow2(n), MIN_BLOCK_N) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK


@functools.partial(jax.jit, static_argnames=("granularity", "ue8m0", "interpret"))
def _quantize_fp8_2d(x, *, granularity, ue8m0, interpret):
    m, n = x.shape
    params = plgpu.CompilerParams(num_warps=4)
    if granularity in ("group", "block"):
        rows = 128 if granularity == "block" else 1
        mp, kp = -(-m // rows) * rows, -(-n // 128) * 128
        xp = jnp.pad(x, ((0, mp - m), (0, kp - n))) if (mp, kp) != (m, n) else x
        q, scale = pl.pallas_call(
            functools.partial(_fp8_tile_kernel, ue8m0=ue8m0, interpret=interpret),
            out_shape=(jax.ShapeDtypeStruct((mp, kp), jnp.uint8),
                       jax.ShapeDtypeStruct((mp // rows, kp // 128), jnp.float32)),
            grid=(mp // rows, kp // 128),
            in_specs=[pl.BlockSpec((rows, 128), lambda i, j: (i, j))],
            out_specs=(pl.BlockSpec((rows, 128), lambda i, j: (i, j)), pl.BlockSpec((1, 1), lambda i, j: (i, j))),
            interpret=interpret,
            compiler_params=plgpu.CompilerParams(num_warps=8 if rows > 1 else 1),
        )(xp)
        return q[:m, :n], scale
    n_pad = _pad_cols(n)
    xp = jnp.pad(x, ((0, 0), (0, n_pad - n))) if n_pad != n else x
    tensor = granularity == "tensor"
    if tensor:
        # The first pass: each row's absmax bits; their max is the tensor's.
        row_bits = pl.pallas_call(
            _row_absmax_kernel,
            out_shape=jax.ShapeDtypeStruct((m, 1), jnp.int32),
            grid=(m,),
            in_specs=[pl.BlockSpec((1, n_pad), lambda i: (i, 0))],
            out_specs=pl.BlockSpec((1, 1), lambda i: (i, 0)),
            interpret=interpret,
            compiler_params=params,
        )(xp)
        given = _fp8_scale(jnp.max(row_bits, axis=0, keepdims=True), ue8m0, interpret)  # [1, 1]
        given = jnp.broadcast_to(given, (m, 1))
    else:
        given = jnp.zeros((m, 1), jnp.float32)
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_fp8_rows_kernel, ue8m0=ue8m0, tensor=tensor, interpret=interpret)
    else:
        kernel = functools.partial(_fp8_rows_chunked_kernel, chunk=CHUNK, ue8m0=ue8m0, tensor=tensor,
                                   interpret=interpret)
    q, scale = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((m, n_pad), jnp.uint8), jax.ShapeDtypeStruct((m, 1), jnp.float32)),
        grid=(m,),
        in_specs=[pl.BlockSpec((1, n_pad), lambda i: (i, 0)), pl.BlockSpec((1, 1), lambda i: (i, 0))],
        out_specs=(pl.BlockSpec((1, n_pad), lambda i: (i, 0)), pl.BlockSpec((1, 1), lambda i: (i, 0))),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=_num_warps(1, min(n_pad, MAX_ONE_PASS), x.dtype.itemsize)),
    )(xp, given)
    return (q[:, :n] if n_pad != n else q), (scale[:1] if tensor else scale)


@takes_arrays("x")
def quantize_fp8(x: jax.Array, granularity: str = "token", group_size: int = 128, scale_ue8m0: bool = False, *,
                 interpret: bool | None = None):
    """(q float8_e4m3fn, scale fp32) of x (JAX arrays); see gks.reference.quantize_fp8."""
    from gks.specs.quantize import fp8_check_granularity, fp8_scale_shape

    op = "gks.pallas.quantize_fp8"
    check_float(x, op, "x")
    fp8_check_granularity(granularity, group_size, op)
    scale_shape = fp8_scale_shape(x.shape, granularity, op)
    if x.size == 0:
        return jnp.zeros(x.shape, jnp.float8_e4m3fn), jnp.zeros(scale_shape, jnp.float32)
    check_int8_offsets(x.size, op, "x")  # q, a byte an element, has x's size
    if interpret is None:
        interpret = default_interpret(x)
    n = x.shape[-1]
    x2 = x if granularity == "block" else x.reshape(-1, n)
    q, scale = _quantize_fp8_2d(x2, granularity=granularity, ue8m0=bool(scale_ue8m0), interpret=interpret)
    q = jax.lax.bitcast_convert_type(q, jnp.float8_e4m3fn)
    return q.reshape(x.shape), scale.reshape(scale_shape)


def _e4m3_value(b):
    """fp32 of e4m3fn bits b (uint8), on the integer bits."""
    b = b.astype(jnp.int32) & 0xFF
    mag = b & 0x7F
    e, m = mag >> 3, mag & 7
    normal = jax.lax.bitcast_convert_type(((e + 120) << 23) | (m << 20), jnp.float32)
    v = jnp.where(e == 0, m.astype(jnp.float32) * 0.001953125, normal)  # subnormals: m * 2^-9
    v = jnp.where(mag == 0x7F, jnp.float32(jnp.nan), v)
    return jnp.where(b >= 0x80, -v, v)


def _fp8_dequantize_kernel(q_ref, s_ref, o_ref):
    o_ref[...] = (_e4m3_value(q_ref[...]) * s_ref[...]).astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("dtype", "interpret"))
def _dequantize_fp8_2d(q, scale, *, dtype, interpret):
    """q [m, n] (uint8 bits, n a multiple of 128) times scale [m, n / 128], one (1, 128)
    block a program."""
    m, n = q.shape
    return pl.pallas_call(
        _fp8_dequantize_kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), dtype),
        grid=(m, n // 128),
        in_specs=[pl.BlockSpec((1, 128), lambda i, j: (i, j)), pl.BlockSpec((1, 1), lambda i, j: (i, j))],
        out_specs=pl.BlockSpec((1, 128), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=1),
    )(q, scale)


@takes_arrays("q", "scale")
def dequantize_fp8(q: jax.Array, scale: jax.Array, granularity: str = "token", group_size: int = 128,
                   dtype=jnp.bfloat16, *, interpret: bool | None = None):
    """q * scale (fp32 product) in ``dtype``, scale laid out as quantize_fp8 gives it. Each
    scale is first spread to one a 128 columns of the rows (an XLA broadcast), then one
    kernel multiplies."""
    from gks.specs.quantize import fp8_check_granularity, fp8_scale_shape

    op = "gks.pallas.dequantize_fp8"
    if q.dtype != jnp.float8_e4m3fn:
        raise TypeError(f"{op}: argument 'q' must be float8_e4m3fn, got {q.dtype}")
    if scale.dtype != jnp.float32:
        raise TypeError(f"{op}: argument 'scale' must be float32, got {scale.dtype}")
    dt = _float_dtype(dtype, op)
    fp8_check_granularity(granularity, group_size, op)
    want = fp8_scale_shape(q.shape, granularity, op)
    if tuple(scale.shape) != want:
        raise ValueError(f"{op}: argument 'scale' must have shape {list(want)} for granularity "
                         f"'{granularity}', got {list(scale.shape)}")
    if q.size == 0:
        return jnp.zeros(q.shape, dt)
    if interpret is None:
        interpret = default_interpret(q)
    n = q.shape[-1]
    groups = -(-n // 128)
    q2 = jax.lax.bitcast_convert_type(q, jnp.uint8).reshape(-1, n)
    m = q2.shape[0]
    if granularity == "tensor":
        s2 = jnp.broadcast_to(scale.reshape(1, 1), (m, groups))
    elif granularity == "token":
        s2 = jnp.broadcast_to(scale.reshape(m, 1), (m, groups))
    elif granularity == "group":
        s2 = scale.reshape(m, groups)
    else:
        s2 = jnp.repeat(scale, 128, axis=0)[:m]
    if groups * 128 != n:
        q2 = jnp.pad(q2, ((0, 0), (0, groups * 128 - n)))
    out = _dequantize_fp8_2d(q2, s2, dtype=dt, interpret=interpret)
    return out[:, :n].reshape(q.shape)
