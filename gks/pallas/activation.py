# SPDX-License-Identifier: Apache-2.0
"""The activation family in Pallas: act_and_mul, y = act(gate) * up with x [..., 2d] =
[gate | up]. gate and up go in as separate blocks, padded with zeros to a power of two (the
Triton lowering's block shapes), the result sliced back."""

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


def _kernel(g_ref, u_ref, y_ref, *, act):
    g = g_ref[...].astype(jnp.float32)
    if act == "silu":
        a = g * jax.nn.sigmoid(g)
    else:
        a = jax.nn.gelu(g, approximate=act == "gelu_tanh")
    y_ref[...] = (a * u_ref[...].astype(jnp.float32)).astype(y_ref.dtype)


@functools.partial(jax.jit, static_argnames=("act", "interpret"))
def _act_and_mul_2d(x, *, act, interpret):
    m, n = x.shape
    d = n // 2
    block = min(next_pow2(d), BLOCK_MAX)
    d_pad = -(-d // block) * block
    gate, up = x[:, :d], x[:, d:]
    if d_pad != d:
        gate = jnp.pad(gate, ((0, 0), (0, d_pad - d)))
        up = jnp.pad(up, ((0, 0), (0, d_pad - d)))
    spec = pl.BlockSpec((1, block), lambda i, j: (i, j))
    y = pl.pallas_call(
        functools.partial(_kernel, act=act),
        out_shape=jax.ShapeDtypeStruct((m, d_pad), x.dtype),
        grid=(m, d_pad // block),
        in_specs=[spec, spec],
        out_specs=spec,
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=max(1, min(8, block // 256))),
    )(gate, up)
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
