# SPDX-License-Identifier: Apache-2.0
"""The rope family as an XLA custom call: apply_rope. See gks.jax."""

from __future__ import annotations

import jax.numpy as jnp

from gks.jax._ffi import call, like

__all__ = ["apply_rope"]


def apply_rope(q, k, cos_sin_cache, positions, is_neox: bool = True):
    """(q_out, k_out): q and k rotated by their tokens' positions (see gks.apply_rope)."""
    q, k, cos_sin_cache, positions = (jnp.asarray(a) for a in (q, k, cos_sin_cache, positions))
    return call("apply_rope", {"q": q, "k": k, "cos_sin_cache": cos_sin_cache, "positions": positions,
                               "is_neox": is_neox}, (like(q), like(k)))
