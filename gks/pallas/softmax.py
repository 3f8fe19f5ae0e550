# SPDX-License-Identifier: Apache-2.0
"""Softmax, and softmax(rmsnorm(x) * weight) fused, in Pallas: one program per block of
rows. Rows up to MAX_ONE_PASS elements are loaded whole (one read); longer rows are walked
in chunks: an online max and rescaled sum, then normalize and write (the fused op walks the
row once more first, for the sum of squares).

Block shapes must be powers of two on the Triton lowering, so a row whose length is not one
is padded and the result sliced back. Softmax pads x with -inf: exp(-inf - max) = 0 leaves a
row with a finite max unchanged, and a row whose max is not finite comes out all NaN with or
without the padding. The fused op pads x and weight with 0 (neutral for the sum of squares)
and masks the padded columns to -inf after normalizing.

Non-finite input gives torch.softmax's result, as in the CUDA kernels: a NaN makes the sum
NaN; a row max of +inf or -inf makes the reciprocal of the sum NaN; either way the row is NaN.

The fused op's public entry, softmax_rmsnorm, is in gks.pallas.norms; its kernels are these.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import check_float, default_interpret, next_pow2, takes_arrays

__all__ = ["softmax"]

MAX_ONE_PASS = 32768
CHUNK = 4096
LOG2E = 1.4426950408889634


def _offset(m):
    # The max a sum of exponentials is kept relative to: 0 for an all -inf set, so that
    # -inf - -inf never turns -inf entries into NaN.
    return jnp.where(m == -jnp.inf, 0.0, m)


def _inv_sum(m, s):
    return jnp.where(jnp.abs(m) < jnp.inf, 1.0 / s, jnp.nan)


def _values(x_ref, w_ref, start, size, *, n, inv_rms, fused):
    """Columns [start, start + size) of the block's rows in fp32; -inf past the row's end."""
    x = x_ref[:, pl.ds(start, size)].astype(jnp.float32)
    if not fused:
        return x  # padded with -inf already
    w = w_ref[:, pl.ds(start, size)].astype(jnp.float32)
    col = start + jax.lax.broadcasted_iota(jnp.int32, x.shape, 1)
    return jnp.where(col < n, x * inv_rms * w, -jnp.inf)


def _sumsq(x_ref, start, size):
    x = x_ref[:, pl.ds(start, size)].astype(jnp.float32)
    return jnp.sum(x * x, axis=-1, keepdims=True)


def _one_pass_kernel(*refs, n, eps, fused):
    x_ref, w_ref, y_ref = refs if fused else (refs[0], None, refs[1])
    size = x_ref.shape[-1]
    inv_rms = jax.lax.rsqrt(_sumsq(x_ref, 0, size) / n + eps) if fused else None
    v = _values(x_ref, w_ref, 0, size, n=n, inv_rms=inv_rms, fused=fused)
    m = jnp.max(v, axis=-1, keepdims=True)
    e = jnp.exp2((v - _offset(m)) * LOG2E)
    y_ref[...] = (e * _inv_sum(m, jnp.sum(e, axis=-1, keepdims=True))).astype(y_ref.dtype)


def _chunked_kernel(*refs, n, eps, fused, chunk):
    x_ref, w_ref, y_ref = refs if fused else (refs[0], None, refs[1])
    rows = x_ref.shape[0]
    steps = x_ref.shape[-1] // chunk
    inv_rms = None
    if fused:
        total = jax.lax.fori_loop(
            0, steps, lambda i, acc: acc + _sumsq(x_ref, i * chunk, chunk),
            jnp.zeros((rows, 1), jnp.float32),
        )
        inv_rms = jax.lax.rsqrt(total / n + eps)

    def online(i, carry):
        m, s = carry
        v = _values(x_ref, w_ref, i * chunk, chunk, n=n, inv_rms=inv_rms, fused=fused)
        m_new = jnp.maximum(m, jnp.max(v, axis=-1, keepdims=True))
        offset = _offset(m_new)
        s = s * jnp.exp2((m - offset) * LOG2E) + jnp.sum(
            jnp.exp2((v - offset) * LOG2E), axis=-1, keepdims=True
        )
        return m_new, s

    init = (jnp.full((rows, 1), -jnp.inf, jnp.float32), jnp.zeros((rows, 1), jnp.float32))
    m, s = jax.lax.fori_loop(0, steps, online, init)
    inv_sum = _inv_sum(m, s)

    def write(i, carry):
        v = _values(x_ref, w_ref, i * chunk, chunk, n=n, inv_rms=inv_rms, fused=fused)
        y_ref[:, pl.ds(i * chunk, chunk)] = (jnp.exp2((v - m) * LOG2E) * inv_sum).astype(y_ref.dtype)
        return carry

    jax.lax.fori_loop(0, steps, write, 0)


@functools.partial(jax.jit, static_argnames=("eps", "interpret"))
def _softmax_2d(x, w, *, eps, interpret):
    """w is None for softmax, the weight for the fused op."""
    fused = w is not None
    m, n = x.shape
    n_pad = next_pow2(n) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK
    if n_pad != n:
        x = jnp.pad(x, ((0, 0), (0, n_pad - n)), constant_values=0 if fused else -jnp.inf)
        if fused:
            w = jnp.pad(w, (0, n_pad - n))
    # Several rows per program for short rows, when they divide the row count.
    rows = 1
    while rows < 16 and (rows * 2) * n_pad <= 4096 and m % (rows * 2) == 0:
        rows *= 2
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_one_pass_kernel, n=n, eps=eps, fused=fused)
    else:
        kernel = functools.partial(_chunked_kernel, n=n, eps=eps, fused=fused, chunk=CHUNK)
    elem = x.dtype.itemsize
    num_warps = max(1, min(16, rows * min(n_pad, MAX_ONE_PASS) * elem // (32 * 64)))
    row_block = pl.BlockSpec((rows, n_pad), lambda i: (i, 0))
    in_specs, operands = [row_block], [x]
    if fused:
        in_specs.append(pl.BlockSpec((1, n_pad), lambda i: (0, 0)))
        operands.append(w.reshape(1, n_pad))
    y = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n_pad), x.dtype),
        grid=(m // rows,),
        in_specs=in_specs,
        out_specs=row_block,
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
    )(*operands)
    return y[:, :n] if n_pad != n else y


def _check_x(x, op: str) -> None:
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")


def _run(x, w, eps: float, interpret):
    n = x.shape[-1]
    if x.size == 0:
        return jnp.zeros(x.shape, x.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    y = _softmax_2d(x.reshape(-1, n), w, eps=float(eps), interpret=interpret)
    return y.reshape(x.shape)


@takes_arrays("x")
def softmax(x: jax.Array, *, interpret: bool | None = None):
    """Softmax over the last dim of x [..., N] (JAX arrays); fp32 math, output in x's dtype."""
    _check_x(x, "gks.pallas.softmax")
    return _run(x, None, 0.0, interpret)
