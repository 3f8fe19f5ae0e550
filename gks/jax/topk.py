# SPDX-License-Identifier: Apache-2.0
"""The topk family as an XLA custom call: top_k. See gks.jax."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from gks.jax._ffi import call, like, row_dims, tuned

__all__ = ["top_k"]


def top_k(x, k: int, sorted: bool = True, config: int = -1):
    """(values [..., k] in x's dtype, indices [..., k] int64) (see gks.top_k). The kernel
    writes int64 indices, so JAX must have 64-bit types on (jax_enable_x64)."""
    if not jax.config.jax_enable_x64:
        raise TypeError("gks.top_k: the kernel writes int64 indices, which JAX holds only with "
                        "jax.config.update('jax_enable_x64', True)")
    x = jnp.asarray(x)
    n = x.shape[-1] if x.ndim else 1
    # A k the library refuses still gets outputs, so that it names k itself.
    shape = (*x.shape[:-1], min(max(int(k), 0), n))
    return call("top_k", {"x": x, "k": k, "sorted": sorted}, (like(x, shape=shape), like(x, jnp.int64, shape)),
                config=tuned("top_k", config, x.dtype, (*row_dims(x), int(k))))
