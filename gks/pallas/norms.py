# SPDX-License-Identifier: Apache-2.0
"""The norms in Pallas.

RMSNorm: one program per block of rows. Rows up to MAX_ONE_PASS elements are loaded whole
(one read); longer rows are walked twice in chunks. Block shapes must be powers of two on
the Triton lowering, so a row whose length is not one is padded with zeros (which leave
the sum of squares unchanged) and the result sliced back. fused_add_rmsnorm is the same
kernels with the residual added first (the rounded sum is a second output; the chunked
kernel adds it again in its second pass, from inputs that JAX never overwrites). LayerNorm:
the corrected two-pass form (see the CUDA kernel's LayerNormRow); a chunked row is walked
three times.

softmax_rmsnorm, softmax(rmsnorm(x) * weight) in one kernel: its public entry is here, and
it runs softmax's row kernels (gks.pallas.softmax) with the norm folded in.

rmsnorm_bwd: programs over blocks of rows (padded to a whole number of blocks, the padding
rows left out of the sums), each walking its rows one at a time: the row's two sums (x^2 and
dy * w * x), dx, and dy * xhat added to the program's column sums, carried through the row
loop for a row held whole, else kept in the program's row of the fp32 partials output
[programs, N]; dweight is their sum over the programs (jnp.sum, deterministic).
gks.pallas.rmsnorm is differentiable in x and weight through it (jax.custom_vjp).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import check_float, default_interpret, next_pow2, takes_arrays
from gks.pallas.softmax import _check_x, _run
from gks.runtime.args import float32_scalar

__all__ = ["rmsnorm", "rmsnorm_bwd", "fused_add_rmsnorm", "layernorm", "softmax_rmsnorm"]

MAX_ONE_PASS = 32768
CHUNK = 4096


def _refs(refs, add):
    """(x, residual, weight, y, residual_out) refs; residual's are None without the add."""
    if add:
        return refs
    x_ref, w_ref, y_ref = refs
    return x_ref, None, w_ref, y_ref, None


def _part(x_ref, r_ref, cols, dtype):
    """x's columns `cols` in fp32 and, with a residual, as the sum rounded to x's dtype."""
    x = x_ref[:, cols]
    if r_ref is not None:
        x = (x.astype(jnp.float32) + r_ref[:, cols].astype(jnp.float32)).astype(dtype)
    return x


def _one_pass_kernel(*refs, n, eps, add):
    x_ref, r_ref, w_ref, y_ref, ro_ref = _refs(refs, add)
    x = _part(x_ref, r_ref, slice(None), x_ref.dtype)
    if add:
        ro_ref[...] = x
    x = x.astype(jnp.float32)
    inv_rms = jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) / n + eps)
    y_ref[...] = (x * inv_rms * w_ref[...].astype(jnp.float32)).astype(y_ref.dtype)


def _chunked_kernel(*refs, n, eps, chunk, add):
    x_ref, r_ref, w_ref, y_ref, ro_ref = _refs(refs, add)
    steps = x_ref.shape[-1] // chunk

    def sumsq(i, acc):
        cols = pl.ds(i * chunk, chunk)
        x = _part(x_ref, r_ref, cols, x_ref.dtype)
        if add:
            ro_ref[:, cols] = x
        x = x.astype(jnp.float32)
        return acc + jnp.sum(x * x, axis=-1, keepdims=True)

    total = jax.lax.fori_loop(0, steps, sumsq, jnp.zeros((x_ref.shape[0], 1), jnp.float32))
    inv_rms = jax.lax.rsqrt(total / n + eps)

    def scale(i, carry):
        cols = pl.ds(i * chunk, chunk)
        x = _part(x_ref, r_ref, cols, x_ref.dtype).astype(jnp.float32)
        w = w_ref[:, cols].astype(jnp.float32)
        y_ref[:, cols] = (x * inv_rms * w).astype(y_ref.dtype)
        return carry

    jax.lax.fori_loop(0, steps, scale, 0)


@functools.partial(jax.jit, static_argnames=("eps", "interpret"))
def _rmsnorm_2d(x, w, r=None, *, eps, interpret):
    """rmsnorm of x [M, N]'s rows, or with r (x's shape) (rmsnorm(x + r), x + r)."""
    add = r is not None
    m, n = x.shape
    n_pad = next_pow2(n) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK
    if n_pad != n:
        x = jnp.pad(x, ((0, 0), (0, n_pad - n)))
        w = jnp.pad(w, (0, n_pad - n))
        if add:
            r = jnp.pad(r, ((0, 0), (0, n_pad - n)))
    # Several rows per program for short rows, when they divide the row count.
    rows = 1
    while rows < 16 and (rows * 2) * n_pad <= 4096 and m % (rows * 2) == 0:
        rows *= 2
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_one_pass_kernel, n=n, eps=eps, add=add)
    else:
        kernel = functools.partial(_chunked_kernel, n=n, eps=eps, chunk=CHUNK, add=add)
    elem = x.dtype.itemsize
    num_warps = max(1, min(16, rows * min(n_pad, MAX_ONE_PASS) * elem // (32 * 64)))
    row_block = pl.BlockSpec((rows, n_pad), lambda i: (i, 0))
    w_block = pl.BlockSpec((1, n_pad), lambda i: (0, 0))
    row_shape = jax.ShapeDtypeStruct((m, n_pad), x.dtype)
    outs = pl.pallas_call(
        kernel,
        out_shape=(row_shape, row_shape) if add else row_shape,
        grid=(m // rows,),
        in_specs=[row_block, row_block, w_block] if add else [row_block, w_block],
        out_specs=(row_block, row_block) if add else row_block,
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
    )(*((x, r) if add else (x,)), w.reshape(1, n_pad))
    if n_pad != n:
        outs = tuple(o[:, :n] for o in outs) if add else outs[:, :n]
    return outs


# rmsnorm_bwd's programs: at most this many, each over a power-of-two block of rows (a few
# in interpret mode, where several rows a program still run the row loop).
BWD_MAX_PROGRAMS = 512
BWD_INTERPRET_PROGRAMS = 4


def _bwd_one_pass(dy_ref, x_ref, w_ref, dx_ref, part_ref, *, n, m, rows, eps):
    first = pl.program_id(0) * rows
    w = w_ref[...].astype(jnp.float32)

    def row(r, acc):
        at = pl.ds(r, 1)
        x = x_ref[at, :].astype(jnp.float32)
        dy = dy_ref[at, :].astype(jnp.float32)
        g = dy * w
        rstd = jax.lax.rsqrt(jnp.sum(x * x, axis=-1, keepdims=True) / n + eps)
        c = jnp.sum(g * x, axis=-1, keepdims=True) * rstd / n
        xhat = x * rstd
        dx_ref[at, :] = ((g - xhat * c) * rstd).astype(dx_ref.dtype)
        return acc + jnp.where(first + r < m, dy * xhat, 0.0)  # padding rows add nothing

    part_ref[...] = jax.lax.fori_loop(0, rows, row, jnp.zeros(part_ref.shape, jnp.float32))


def _bwd_chunked(dy_ref, x_ref, w_ref, dx_ref, part_ref, *, n, m, rows, eps, chunk):
    first = pl.program_id(0) * rows
    steps = x_ref.shape[-1] // chunk

    def zero(k, carry):
        part_ref[:, pl.ds(k * chunk, chunk)] = jnp.zeros((1, chunk), jnp.float32)
        return carry

    jax.lax.fori_loop(0, steps, zero, 0)

    def row(r, carry):
        at = pl.ds(r, 1)

        def load(k):
            cols = pl.ds(k * chunk, chunk)
            return (cols, x_ref[at, cols].astype(jnp.float32), dy_ref[at, cols].astype(jnp.float32),
                    w_ref[:, cols].astype(jnp.float32))

        def sums(k, acc):
            _, x, dy, w = load(k)
            return (acc[0] + jnp.sum(x * x, axis=-1, keepdims=True),
                    acc[1] + jnp.sum(dy * w * x, axis=-1, keepdims=True))

        zeros = jnp.zeros((1, 1), jnp.float32)
        sumsq, dot = jax.lax.fori_loop(0, steps, sums, (zeros, zeros))
        rstd = jax.lax.rsqrt(sumsq / n + eps)
        c = dot * rstd / n
        valid = first + r < m

        def write(k, carry):
            cols, x, dy, w = load(k)
            xhat = x * rstd
            dx_ref[at, cols] = ((dy * w - xhat * c) * rstd).astype(dx_ref.dtype)
            part_ref[:, cols] = part_ref[:, cols] + jnp.where(valid, dy * xhat, 0.0)
            return carry

        jax.lax.fori_loop(0, steps, write, 0)
        return carry

    jax.lax.fori_loop(0, rows, row, 0)


@functools.partial(jax.jit, static_argnames=("eps", "interpret"))
def _rmsnorm_bwd_2d(dy, x, w, *, eps, interpret):
    """(dx, dweight) of x, dy [M, N] (M, N > 0) and w [N]."""
    m, n = x.shape
    n_pad = next_pow2(n) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK
    rows = next_pow2(-(-m // (BWD_INTERPRET_PROGRAMS if interpret else BWD_MAX_PROGRAMS)))
    programs = -(-m // rows)
    m_pad = programs * rows
    if (m_pad, n_pad) != (m, n):
        x = jnp.pad(x, ((0, m_pad - m), (0, n_pad - n)))
        dy = jnp.pad(dy, ((0, m_pad - m), (0, n_pad - n)))
    wp = jnp.pad(w, (0, n_pad - n)) if n_pad != n else w
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_bwd_one_pass, n=n, m=m, rows=rows, eps=eps)
    else:
        kernel = functools.partial(_bwd_chunked, n=n, m=m, rows=rows, eps=eps, chunk=CHUNK)
    num_warps = max(1, min(16, min(n_pad, MAX_ONE_PASS) * x.dtype.itemsize // (32 * 64)))
    row_block = pl.BlockSpec((rows, n_pad), lambda i: (i, 0))
    vec_block = pl.BlockSpec((1, n_pad), lambda i: (0, 0))
    part_block = pl.BlockSpec((1, n_pad), lambda i: (i, 0))
    dx, parts = pl.pallas_call(
        kernel,
        out_shape=(jax.ShapeDtypeStruct((m_pad, n_pad), x.dtype), jax.ShapeDtypeStruct((programs, n_pad), jnp.float32)),
        grid=(programs,),
        in_specs=[row_block, row_block, vec_block],
        out_specs=(row_block, part_block),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
    )(dy, x, wp.reshape(1, n_pad))
    dweight = jnp.sum(parts, axis=0)[:n].astype(w.dtype)
    return dx[:m, :n], dweight


def _rstd(s1, s2, n, eps):
    """rstd from the sums of d = x - m0 (NaN kept)."""
    c = s1 / n
    var = s2 / n - c * c
    return jax.lax.rsqrt(jnp.where(var < 0, 0.0, var) + eps), c


def _layernorm_one_pass(x_ref, w_ref, b_ref, y_ref, *, n, eps):
    # The corrected two-pass form of the CUDA kernel's LayerNormRow; padded columns (zeros)
    # are masked out of the deviations.
    x = x_ref[...].astype(jnp.float32)
    mask = jax.lax.broadcasted_iota(jnp.int32, x.shape, 1) < n
    m0 = jnp.sum(x, axis=-1, keepdims=True) / n
    d = jnp.where(mask, x - m0, 0.0)
    rstd, c = _rstd(jnp.sum(d, axis=-1, keepdims=True), jnp.sum(d * d, axis=-1, keepdims=True), n, eps)
    y = (d - c) * rstd * w_ref[...].astype(jnp.float32) + b_ref[...].astype(jnp.float32)
    y_ref[...] = y.astype(y_ref.dtype)


def _layernorm_chunked(x_ref, w_ref, b_ref, y_ref, *, n, eps, chunk):
    steps = x_ref.shape[-1] // chunk
    zeros = jnp.zeros((x_ref.shape[0], 1), jnp.float32)

    def chunk_of(i):
        cols = pl.ds(i * chunk, chunk)
        mask = i * chunk + jax.lax.broadcasted_iota(jnp.int32, (x_ref.shape[0], chunk), 1) < n
        return cols, mask, x_ref[:, cols].astype(jnp.float32)

    m0 = jax.lax.fori_loop(0, steps, lambda i, acc: acc + jnp.sum(chunk_of(i)[2], axis=-1, keepdims=True), zeros) / n

    def add(i, acc):
        _, mask, x = chunk_of(i)
        d = jnp.where(mask, x - m0, 0.0)
        return acc[0] + jnp.sum(d, axis=-1, keepdims=True), acc[1] + jnp.sum(d * d, axis=-1, keepdims=True)

    rstd, c = _rstd(*jax.lax.fori_loop(0, steps, add, (zeros, zeros)), n, eps)

    def write(i, carry):
        cols, _, x = chunk_of(i)
        y = ((x - m0) - c) * rstd * w_ref[:, cols].astype(jnp.float32) + b_ref[:, cols].astype(jnp.float32)
        y_ref[:, cols] = y.astype(y_ref.dtype)
        return carry

    jax.lax.fori_loop(0, steps, write, 0)


@functools.partial(jax.jit, static_argnames=("eps", "interpret"))
def _layernorm_2d(x, w, b, *, eps, interpret):
    m, n = x.shape
    n_pad = next_pow2(n) if n <= MAX_ONE_PASS else -(-n // CHUNK) * CHUNK
    if n_pad != n:
        x = jnp.pad(x, ((0, 0), (0, n_pad - n)))
        w = jnp.pad(w, (0, n_pad - n))
        b = jnp.pad(b, (0, n_pad - n))
    rows = 1
    while rows < 16 and (rows * 2) * n_pad <= 4096 and m % (rows * 2) == 0:
        rows *= 2
    if n_pad <= MAX_ONE_PASS:
        kernel = functools.partial(_layernorm_one_pass, n=n, eps=eps)
    else:
        kernel = functools.partial(_layernorm_chunked, n=n, eps=eps, chunk=CHUNK)
    num_warps = max(1, min(16, rows * min(n_pad, MAX_ONE_PASS) * x.dtype.itemsize // (32 * 64)))
    row_block = pl.BlockSpec((rows, n_pad), lambda i: (i, 0))
    vec_block = pl.BlockSpec((1, n_pad), lambda i: (0, 0))
    y = pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((m, n_pad), x.dtype),
        grid=(m // rows,),
        in_specs=[row_block, vec_block, vec_block],
        out_specs=row_block,
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=num_warps),
    )(x, w.reshape(1, n_pad), b.reshape(1, n_pad))
    return y[:, :n] if n_pad != n else y


def _check_norm_args(x: jax.Array, weight: jax.Array, eps: float, op: str) -> int:
    """What both norms refuse beyond x itself: the weight's dtype and shape [N] (x's last
    dim, which it returns) and eps < 0 or NaN (`not >=`, as the C++ API checks it)."""
    if weight.dtype != x.dtype:
        raise TypeError(f"{op}: argument 'weight' must have the dtype of 'x' ({x.dtype}), got {weight.dtype}")
    n = x.shape[-1]
    if weight.shape != (n,):
        raise ValueError(f"{op}: argument 'weight' must have shape [{n}] (the last dim of x), got {list(weight.shape)}")
    if not float32_scalar(eps, "eps", op) >= 0:
        raise ValueError(f"{op}: argument 'eps' must be >= 0, got {eps}")
    return n


# Differentiable in x and weight: the backward is rmsnorm_bwd's kernels on the saved x and
# weight (rstd recomputed).
@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _rmsnorm_rows(x, w, eps, interpret):
    return _rmsnorm_2d(x, w, eps=eps, interpret=interpret)


def _rmsnorm_rows_fwd(x, w, eps, interpret):
    return _rmsnorm_2d(x, w, eps=eps, interpret=interpret), (x, w)


def _rmsnorm_rows_bwd(eps, interpret, residuals, dy):
    x, w = residuals
    return _rmsnorm_bwd_2d(dy, x, w, eps=eps, interpret=interpret)


_rmsnorm_rows.defvjp(_rmsnorm_rows_fwd, _rmsnorm_rows_bwd)


@takes_arrays("x", "weight")
def rmsnorm(x: jax.Array, weight: jax.Array, eps: float = 1e-6, *, interpret: bool | None = None):
    """RMSNorm over the last dim of x [..., N] (JAX arrays); fp32 math, output in x's dtype.
    Differentiable in x and weight (jax.grad runs gks.pallas.rmsnorm_bwd's kernels)."""
    op = "gks.pallas.rmsnorm"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    n = _check_norm_args(x, weight, eps, op)
    if x.size == 0:
        return jnp.zeros(x.shape, x.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    y = _rmsnorm_rows(x.reshape(-1, n), weight, float(eps), interpret)
    return y.reshape(x.shape)


@takes_arrays("dy", "x", "weight")
def rmsnorm_bwd(dy: jax.Array, x: jax.Array, weight: jax.Array, eps: float = 1e-6, *,
                interpret: bool | None = None):
    """(dx, dweight): rmsnorm's gradients given dy (x's shape and dtype; JAX arrays), rstd
    recomputed from x; fp32 sums, dx in x's dtype, dweight in weight's; deterministic."""
    op = "gks.pallas.rmsnorm_bwd"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    if dy.dtype != x.dtype:
        raise TypeError(f"{op}: argument 'dy' must have the dtype of 'x' ({x.dtype}), got {dy.dtype}")
    if dy.shape != x.shape:
        raise ValueError(f"{op}: argument 'dy' must have the shape of 'x' {list(x.shape)}, got {list(dy.shape)}")
    n = _check_norm_args(x, weight, eps, op)
    if x.size == 0:
        return jnp.zeros(x.shape, x.dtype), jnp.zeros((n,), weight.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    dx, dweight = _rmsnorm_bwd_2d(dy.reshape(-1, n), x.reshape(-1, n), weight, eps=float(eps), interpret=interpret)
    return dx.reshape(x.shape), dweight


@takes_arrays("x", "residual", "weight")
def fused_add_rmsnorm(x: jax.Array, residual: jax.Array, weight: jax.Array, eps: float = 1e-6, *,
                      interpret: bool | None = None):
    """(y, residual_out) of x, residual [..., N] (JAX arrays): residual_out = x + residual
    (fp32 add, rounded to x's dtype) and y = rmsnorm(residual_out, weight, eps), one kernel.
    (JAX has no in-place form: donate x and residual to jax.jit to reuse their buffers.)"""
    op = "gks.pallas.fused_add_rmsnorm"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    if residual.dtype != x.dtype:
        raise TypeError(f"{op}: argument 'residual' must have the dtype of 'x' ({x.dtype}), got {residual.dtype}")
    if residual.shape != x.shape:
        raise ValueError(f"{op}: argument 'residual' must have the shape of 'x' {list(x.shape)}, "
                         f"got {list(residual.shape)}")
    n = _check_norm_args(x, weight, eps, op)
    if x.size == 0:
        return jnp.zeros(x.shape, x.dtype), jnp.zeros(x.shape, x.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    y, residual_out = _rmsnorm_2d(x.reshape(-1, n), weight, residual.reshape(-1, n), eps=float(eps),
                                  interpret=interpret)
    return y.reshape(x.shape), residual_out.reshape(x.shape)


@takes_arrays("x", "weight")
def layernorm(x: jax.Array, weight: jax.Array, bias: jax.Array | None = None, eps: float = 1e-5, *,
              interpret: bool | None = None):
    """LayerNorm over the last dim of x [..., N] (JAX arrays): (x - mean) / sqrt(var + eps) *
    weight (+ bias), fp32 mean and biased variance, output in x's dtype."""
    op = "gks.pallas.layernorm"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    n = _check_norm_args(x, weight, eps, op)
    if bias is not None:
        if not isinstance(bias, (jax.Array, np.ndarray)):
            raise TypeError(f"{op}: argument 'bias' must be a JAX array or None, got {type(bias).__qualname__}")
        if bias.dtype != x.dtype:
            raise TypeError(f"{op}: argument 'bias' must have the dtype of 'x' ({x.dtype}), got {bias.dtype}")
        if bias.shape != (n,):
            raise ValueError(f"{op}: argument 'bias' must have shape [{n}] (the last dim of x), got {list(bias.shape)}")
    if x.size == 0:
        return jnp.zeros(x.shape, x.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    b = jnp.zeros((n,), x.dtype) if bias is None else bias
    y = _layernorm_2d(x.reshape(-1, n), weight, b, eps=float(eps), interpret=interpret)
    return y.reshape(x.shape)


@takes_arrays("x", "weight")
def softmax_rmsnorm(x: jax.Array, weight: jax.Array, eps: float = 1e-6, *, interpret: bool | None = None):
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N] (JAX arrays), one
    kernel; the normalized row stays fp32 (never rounded to x's dtype)."""
    op = "gks.pallas.softmax_rmsnorm"
    _check_x(x, op)
    _check_norm_args(x, weight, eps, op)
    return _run(x, weight, eps, interpret)
