# SPDX-License-Identifier: Apache-2.0
"""The rope family's DLPack entry points: apply_rope. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["apply_rope_out"]


def apply_rope_out(q, k, cos_sin_cache, positions, q_out, k_out, is_neox: bool = True) -> None:
    """q_out, k_out = q, k rotated by the angles of each token's position: positions (q's
    token dims, int32/int64) index cos_sin_cache [max_pos, rotary_dim] (fp32: cos, then sin,
    a row); NeoX (half-split) or, with is_neox=False, GPT-J (interleaved) pairs; the values
    past rotary_dim pass through. In place: q_out is q and k_out is k."""
    _native.module().apply_rope(q, k, cos_sin_cache, positions, q_out, k_out, bool(is_neox))
