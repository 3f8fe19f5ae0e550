# SPDX-License-Identifier: Apache-2.0
"""The norms family as XLA custom calls: rmsnorm (differentiable in x and weight through
rmsnorm_bwd, jax.custom_vjp), rmsnorm_bwd, fused_add_rmsnorm, layernorm, softmax_rmsnorm,
rmsnorm_quant, fused_add_rmsnorm_quant. See gks.jax; the meaning is gks.<op>'s. The in-place
torch forms (rmsnorm_, fused_add_rmsnorm_) have no JAX twin: JAX arrays are immutable, and
XLA reuses a donated buffer by itself."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from gks.jax._ffi import call, dtype_of, like, row_dims, tuned

__all__ = ["rmsnorm", "rmsnorm_bwd", "fused_add_rmsnorm", "layernorm", "softmax_rmsnorm", "rmsnorm_quant",
           "fused_add_rmsnorm_quant"]


def _rmsnorm_call(x, weight, eps, config):
    return call("rmsnorm", {"x": x, "weight": weight, "eps": eps}, (like(x),),
                config=tuned("rmsnorm", config, x.dtype, row_dims(x)))[0]


# Differentiable in x and weight: the backward is rmsnorm_bwd on the saved x and weight
# (rstd recomputed), as gks.rmsnorm's autograd. The forward's config picks its kernel only.
@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3))
def _rmsnorm(x, weight, eps, config):
    return _rmsnorm_call(x, weight, eps, config)


def _rmsnorm_fwd(x, weight, eps, config):
    return _rmsnorm_call(x, weight, eps, config), (x, weight)


def _rmsnorm_bwd_rule(eps, config, residuals, dy):
    x, weight = residuals
    return rmsnorm_bwd(dy, x, weight, eps)


_rmsnorm.defvjp(_rmsnorm_fwd, _rmsnorm_bwd_rule)


def rmsnorm(x, weight, eps: float = 1e-6, config: int = -1):
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight, in x's dtype (see gks.rmsnorm);
    differentiable in x and weight (jax.grad runs gks.jax.rmsnorm_bwd)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    return _rmsnorm(x, weight, float(eps), int(config))


def rmsnorm_bwd(dy, x, weight, eps: float = 1e-6, config: int = -1):
    """(dx, dweight): rmsnorm's gradients given dy, rstd recomputed from x; dx in x's dtype,
    dweight in weight's (see gks.rmsnorm_bwd)."""
    dy, x, weight = jnp.asarray(dy), jnp.asarray(x), jnp.asarray(weight)
    return call("rmsnorm_bwd", {"dy": dy, "x": x, "weight": weight, "eps": eps}, (like(x), like(weight)),
                config=tuned("rmsnorm_bwd", config, x.dtype, row_dims(x)))


def fused_add_rmsnorm(x, residual, weight, eps: float = 1e-6, config: int = -1):
    """(y, residual_out): residual_out = x + residual (rounded to x's dtype), y =
    rmsnorm(residual_out, weight, eps) (see gks.fused_add_rmsnorm)."""
    x, residual, weight = jnp.asarray(x), jnp.asarray(residual), jnp.asarray(weight)
    return call("fused_add_rmsnorm", {"x": x, "residual": residual, "weight": weight, "eps": eps},
                (like(x), like(x)), config=tuned("fused_add_rmsnorm", config, x.dtype, row_dims(x)))


def layernorm(x, weight, bias=None, eps: float = 1e-5, config: int = -1):
    """(x - mean) / sqrt(var + eps) * weight (+ bias) over the last dim (see gks.layernorm)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    bias = None if bias is None else jnp.asarray(bias)
    return call("layernorm", {"x": x, "weight": weight, "bias": bias, "eps": eps}, (like(x),),
                config=tuned("layernorm", config, x.dtype, row_dims(x)))[0]


def softmax_rmsnorm(x, weight, eps: float = 1e-6, config: int = -1):
    """softmax(rmsnorm(x, weight, eps)) over the last dim, fused (see gks.softmax_rmsnorm)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    return call("softmax_rmsnorm", {"x": x, "weight": weight, "eps": eps}, (like(x),),
                config=tuned("softmax_rmsnorm", config, x.dtype, row_dims(x)))[0]


def _quant_outputs(x, quant_dtype, granularity, op: str):
    """q and scale for a quantized-output norm, after the option checks every backend makes
    (gks.specs.norms.norm_quant_check_args's, in NumPy dtypes)."""
    qd = dtype_of(quant_dtype, op, "quant_dtype")
    if qd not in (np.dtype(jnp.int8), np.dtype(jnp.float8_e4m3fn)):
        raise TypeError(f"gks.{op}: argument 'quant_dtype' must be torch.int8 or torch.float8_e4m3fn "
                        f"(in JAX: int8 or float8_e4m3fn), got {qd}")
    if granularity not in ("token", "group"):
        raise ValueError(f"gks.{op}: argument 'granularity' must be 'token' or 'group', got '{granularity}'")
    if granularity == "group" and qd == np.dtype(jnp.int8):
        raise ValueError(f"gks.{op}: argument 'granularity' must be 'token' for int8 output, got 'group'")
    if x.ndim < 1:
        raise ValueError(f"gks.{op}: argument 'x' must have 1 to 8 dims, got 0")
    n = x.shape[-1]
    if granularity == "group" and n % 128:
        raise ValueError(f"gks.{op}: argument 'x' must have a last dim that is a multiple of 128 for "
                         f"granularity 'group', got {list(x.shape)}")
    scale_shape = (*x.shape[:-1], 1 if granularity == "token" else n // 128)
    return like(x, qd), like(x, jnp.float32, scale_shape)


def rmsnorm_quant(x, weight, eps: float = 1e-6, quant_dtype=jnp.float8_e4m3fn, granularity: str = "token",
                  scale_ue8m0: bool = False):
    """(q, scale): rmsnorm in fp32, quantized per token (int8 or e4m3) or per 1 x 128 group
    (e4m3) (see gks.rmsnorm_quant)."""
    x, weight = jnp.asarray(x), jnp.asarray(weight)
    q, scale = _quant_outputs(x, quant_dtype, granularity, "rmsnorm_quant")
    return call("rmsnorm_quant", {"x": x, "weight": weight, "eps": eps, "granularity": granularity,
                                  "scale_ue8m0": scale_ue8m0}, (q, scale))


def fused_add_rmsnorm_quant(x, residual, weight, eps: float = 1e-6, quant_dtype=jnp.float8_e4m3fn,
                            granularity: str = "token", scale_ue8m0: bool = False):
    """(q, scale, residual_out): fused_add_rmsnorm's sum, then rmsnorm_quant of it (see
    gks.fused_add_rmsnorm_quant)."""
    x, residual, weight = jnp.asarray(x), jnp.asarray(residual), jnp.asarray(weight)
    q, scale = _quant_outputs(x, quant_dtype, granularity, "fused_add_rmsnorm_quant")
    return call("fused_add_rmsnorm_quant", {"x": x, "residual": residual, "weight": weight, "eps": eps,
                                            "granularity": granularity, "scale_ue8m0": scale_ue8m0},
                (q, scale, like(x)))
