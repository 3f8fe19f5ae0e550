# SPDX-License-Identifier: Apache-2.0
"""The quantize family as XLA custom calls: int8 and fp8 quantize and dequantize. See gks.jax."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from gks.jax._ffi import call, dtype_of, like
from gks.specs.quantize import fp8_check_granularity, fp8_scale_shape

__all__ = ["quantize_int8", "dequantize_int8", "quantize_fp8", "dequantize_fp8"]

_FLOATS = tuple(np.dtype(d) for d in (jnp.float32, jnp.float16, jnp.bfloat16))


def _float_dtype(dtype, op: str):
    out = dtype_of(dtype, op, "dtype")
    if out not in _FLOATS:
        raise TypeError(f"gks.{op}: argument 'dtype' must be float32, float16 or bfloat16, got {out}")
    return out


def quantize_int8(x):
    """(q int8 [..., N], scale float32 [..., 1]): symmetric per-row int8 (see gks.quantize_int8)."""
    x = jnp.asarray(x)
    scale_shape = (*x.shape[:-1], 1) if x.ndim else (1,)
    return call("quantize_int8", {"x": x}, (like(x, jnp.int8), like(x, jnp.float32, scale_shape)))


def dequantize_int8(q, scale, dtype=jnp.float16):
    """q * scale in dtype (see gks.dequantize_int8)."""
    q, scale = jnp.asarray(q), jnp.asarray(scale)
    return call("dequantize_int8", {"q": q, "scale": scale},
                (like(q, _float_dtype(dtype, "dequantize_int8")),))[0]


def quantize_fp8(x, granularity: str = "token", group_size: int = 128, scale_ue8m0: bool = False):
    """(q float8_e4m3fn, scale float32 in the granularity's layout) (see gks.quantize_fp8)."""
    x = jnp.asarray(x)
    fp8_check_granularity(granularity, group_size, "gks.quantize_fp8")
    scale_shape = fp8_scale_shape(x.shape, granularity, "gks.quantize_fp8") if x.ndim else (1,)
    return call("quantize_fp8", {"x": x, "granularity": granularity, "scale_ue8m0": scale_ue8m0},
                (like(x, jnp.float8_e4m3fn), like(x, jnp.float32, scale_shape)))


def dequantize_fp8(q, scale, granularity: str = "token", group_size: int = 128, dtype=jnp.bfloat16):
    """q * scale in dtype, scale as quantize_fp8 lays it out (see gks.dequantize_fp8)."""
    q, scale = jnp.asarray(q), jnp.asarray(scale)
    out = _float_dtype(dtype, "dequantize_fp8")
    fp8_check_granularity(granularity, group_size, "gks.dequantize_fp8")
    return call("dequantize_fp8", {"q": q, "scale": scale, "granularity": granularity}, (like(q, out),))[0]
