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

__all__ = ["quantize_int8", "dequantize_int8"]

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
