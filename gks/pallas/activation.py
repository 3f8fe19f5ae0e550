# SPDX-License-Identifier: Apache-2.0
"""The activation family in Pallas: act_and_mul, y = act(gate) * up with x [..., 2d] =
[gate | up]. When a power-of-two block of at least MIN_BLOCK columns divides d, gate and up
are two block views of x itself (no copy) and a program takes several rows; otherwise they
are copied out, padded with zeros to a power of two (the Triton lowering's block shapes),
and the result sliced back."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import check_float, default_interpret, next_pow2, takes_arrays
from gks.runtime.args import activation_index

__all__ = ["act_and_mul"]

BLOCK_MAX = 4096
MIN_BLOCK = 128  # below this a block of x's own columns is too short to stream well
ROW_BLOCK_ELEMS = 8192  # elements of gate (and of up, and of y) a program holds

# The rational approximation of erf on [-4, 4] that XLA and Eigen use for float32 (|error|
# < 5e-7; erf is +-1 to float32 beyond): the Pallas Triton lowering has no erf or erfc.
_ERF_P = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
          -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_Q = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
          -1.42647390514189e-02)


def _erf(x):
    x = jnp.clip(x, -4.0, 4.0)
    x2 = x * x
    p = jnp.full_like(x, _ERF_P[0])
    for c in _ERF_P[1:]:
        p = p * x2 + c
    q = jnp.full_like(x, _ERF_Q[0])
    for c in _ERF_Q[1:]:
        q = q * x2 + c
    return x * p / q


def _kernel(g_ref, u_ref, y_ref, *, act):
    g = g_ref[...].astype(jnp.float32)
    if act == "silu":
        a = g * jax.nn.sigmoid(g)
    elif act == "gelu":
        a = 0.5 * g * (1.0 + _erf(g * 0.70710678118654752))
    else:
        a = jax.nn.gelu(g, approximate=True)
    y_ref[...] = (a * u_ref[...].astype(jnp.float32)).astype(y_ref.dtype)


def _pow2_divisor(d: int) -> int:
    """The largest power of two that divides d, at most BLOCK_MAX."""
    return min(d & -d, BLOCK_MAX)


@functools.partial(jax.jit, static_argnames=("act", "interpret"))
def _act_and_mul_2d(x, *, act, interpret):
    m, n = x.shape
    d = n // 2
    block = _pow2_divisor(d)
    if block >= MIN_BLOCK or block == d:
        # gate and up as block views of x: column block j of gate is block j of x, of up
        # block j + d / block. Rows per program: a power of two that divides m.
        rows = 1
        while rows * 2 * block <= ROW_BLOCK_ELEMS and m % (rows * 2) == 0:
            rows *= 2
        up_off = d // block
        operands = (x, x)
        in_specs = [pl.BlockSpec((rows, block), lambda i, j: (i, j)),
                    pl.BlockSpec((rows, block), lambda i, j: (i, j + up_off))]
        d_pad = d
    else:
        rows = 1
        block = min(next_pow2(d), BLOCK_MAX)
        d_pad = -(-d // block) * block
        operands = (jnp.pad(x[:, :d], ((0, 0), (0, d_pad - d))), jnp.pad(x[:, d:], ((0, 0), (0, d_pad - d))))
        in_specs = [pl.BlockSpec((1, block), lambda i, j: (i, j))] * 2
    y = pl.pallas_call(
        functools.partial(_kernel, act=act),
        out_shape=jax.ShapeDtypeStruct((m, d_pad), x.dtype),
        grid=(m // rows, d_pad // block),
        in_specs=in_specs,
        out_specs=pl.BlockSpec((rows, block), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=max(1, min(8, rows * block // 256))),
    )(*operands)
    return y[:, :d] if d_pad != d else y


@takes_arrays("x")
def act_and_mul(x: jax.Array, activation: str = "silu", *, interpret: bool | None = None):
    """y = act(x[..., :d]) * x[..., d:] for x [..., 2d] (JAX arrays); fp32 math, y [..., d]
    in x's dtype."""
    op = "gks.pallas.act_and_mul"
    check_float(x, op, "x")
    if x.ndim < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    if x.shape[-1] % 2:
        raise ValueError(f"{op}: argument 'x' must have an even last dim (gate, then up), got {list(x.shape)}")
    activation_index(activation, op)
    d = x.shape[-1] // 2
    if x.size == 0:
        return jnp.zeros((*x.shape[:-1], d), x.dtype)
    if interpret is None:
        interpret = default_interpret(x)
    y = _act_and_mul_2d(x.reshape(-1, x.shape[-1]), act=activation, interpret=interpret)
    return y.reshape(*x.shape[:-1], d)
