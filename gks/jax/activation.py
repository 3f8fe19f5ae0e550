# SPDX-License-Identifier: Apache-2.0
"""The activation family as XLA custom calls: act_and_mul, act_and_mul_quant. See gks.jax."""

from __future__ import annotations

import jax.numpy as jnp

from gks.jax._ffi import call, like
from gks.specs.activation import act_quant_shapes

__all__ = ["act_and_mul", "act_and_mul_quant"]


def act_and_mul(x, activation: str = "silu"):
    """act(x[..., :d]) * x[..., d:] -> [..., d] in x's dtype (see gks.act_and_mul)."""
    x = jnp.asarray(x)
    shape = (*x.shape[:-1], x.shape[-1] // 2) if x.ndim else ()
    return call("act_and_mul", {"x": x, "activation": activation}, (like(x, shape=shape),))[0]


def act_and_mul_quant(x, activation: str = "silu", scale_ue8m0: bool = False):
    """(q float8_e4m3fn [..., d], scale float32 [..., d / 128]) (see gks.act_and_mul_quant)."""
    x = jnp.asarray(x)
    q_shape, scale_shape = act_quant_shapes(x.shape, "gks.act_and_mul_quant")
    return call("act_and_mul_quant", {"x": x, "activation": activation, "scale_ue8m0": scale_ue8m0},
                (like(x, jnp.float8_e4m3fn, q_shape), like(x, jnp.float32, scale_shape)))
