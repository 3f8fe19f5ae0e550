# SPDX-License-Identifier: Apache-2.0
"""The attention family as XLA custom calls: flash_attention_fwd, flash_attention_bwd,
flash_attention_varlen_fwd, flash_attention_varlen_bwd, flash_attention_decode, merge_state,
merge_states. See gks.jax.
flash_attention_bwd is the backward as an op of its own; jax.grad of flash_attention_fwd is
not wired to it yet."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from gks.jax._ffi import call, like, tuned
from gks.runtime.dims import attention_dims, varlen_attention_dims

__all__ = ["flash_attention_bwd", "flash_attention_decode", "flash_attention_fwd", "flash_attention_varlen_bwd",
           "flash_attention_varlen_fwd", "merge_state", "merge_states"]


def _default_scale(q) -> float:
    """The library's default softmax scale, 1.f / std::sqrt(float(D)) in fp32 (an XLA
    attribute cannot be None, so it is computed here, bit for bit as the C++ API does)."""
    d = q.shape[-1] if q.ndim else 1
    return float(np.float32(1.0) / np.sqrt(np.float32(d)))


def flash_attention_fwd(q, k, v, causal: bool = False, softmax_scale=None, window_size=(-1, -1),
                        softcap: float = 0.0, config: int = -1):
    """(o [B, Hq, Sq, Dv] in q's dtype, lse [B, Hq, Sq] float32) (see gks.flash_attention_fwd)."""
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    o_shape = (*q.shape[:-1], v.shape[-1]) if q.ndim == 4 and v.ndim == 4 else q.shape
    lse_shape = q.shape[:-1] if q.ndim else ()
    scale = _default_scale(q) if softmax_scale is None else softmax_scale
    return call("flash_attention_fwd", {"q": q, "k": k, "v": v, "causal": causal, "softmax_scale": scale,
                                        "window_size": window_size, "softcap": softcap},
                (like(q, shape=o_shape), like(q, jnp.float32, lse_shape)),
                config=tuned("flash_attention_fwd", config, q.dtype, attention_dims(q, k, causal, v)))


def flash_attention_bwd(do, q, k, v, o, lse, causal: bool = False, softmax_scale=None, window_size=(-1, -1),
                        softcap: float = 0.0, deterministic: bool = False, config: int = -1):
    """(dq, dk, dv) in q's dtype, the shapes of q, k and v (see gks.flash_attention_bwd)."""
    do, q, k, v, o, lse = (jnp.asarray(a) for a in (do, q, k, v, o, lse))
    scale = _default_scale(q) if softmax_scale is None else softmax_scale
    return call("flash_attention_bwd", {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "causal": causal,
                                        "softmax_scale": scale, "window_size": window_size, "softcap": softcap,
                                        "deterministic": bool(deterministic)},
                (like(q), like(k, q.dtype), like(v, q.dtype)),
                config=tuned("flash_attention_bwd", config, q.dtype, attention_dims(q, k, causal, v)))


def flash_attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                               seqused_k=None, page_table=None, causal: bool = False, softmax_scale=None,
                               window_size=(-1, -1), softcap: float = 0.0, config: int = -1):
    """(o [total_q, Hq, Dv] in q's dtype, lse [Hq, total_q] float32): attention over packed
    sequences (see gks.flash_attention_varlen_fwd). max_seqlen_q / max_seqlen_k are static
    ints; the lengths stay arrays."""
    q, k, v, cu_seqlens_q, cu_seqlens_k = (jnp.asarray(a) for a in (q, k, v, cu_seqlens_q, cu_seqlens_k))
    seqused_k = None if seqused_k is None else jnp.asarray(seqused_k)
    page_table = None if page_table is None else jnp.asarray(page_table)
    varlen = q.ndim == 3 and v.ndim == (3 if page_table is None else 4)
    o_shape = (*q.shape[:2], v.shape[-1]) if varlen else q.shape
    lse_shape = (q.shape[1], q.shape[0]) if varlen else q.shape
    return call("flash_attention_varlen_fwd",
                {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                 "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k, "seqused_k": seqused_k,
                 "page_table": page_table, "causal": causal, "softmax_scale": softmax_scale,
                 "window_size": window_size, "softcap": softcap},
                (like(q, shape=o_shape), like(q, jnp.float32, lse_shape)),
                config=tuned("flash_attention_varlen_fwd", config, q.dtype,
                             varlen_attention_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal,
                                                   page_table)))


def flash_attention_varlen_bwd(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int,
                               max_seqlen_k: int, causal: bool = False, softmax_scale=None, window_size=(-1, -1),
                               softcap: float = 0.0, deterministic: bool = False):
    """(dq, dk, dv) in q's dtype, the packed shapes of q, k and v (see
    gks.flash_attention_varlen_bwd); rows in no sequence are left unwritten (XLA's fresh
    buffers: cu_seqlens covering every row, from 0 to the totals, leave none)."""
    do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = (
        jnp.asarray(a) for a in (do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k))
    scale = _default_scale(q) if softmax_scale is None else softmax_scale
    return call("flash_attention_varlen_bwd",
                {"do": do, "q": q, "k": k, "v": v, "o": o, "lse": lse, "cu_seqlens_q": cu_seqlens_q,
                 "cu_seqlens_k": cu_seqlens_k, "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k,
                 "causal": causal, "softmax_scale": scale, "window_size": window_size, "softcap": softcap,
                 "deterministic": bool(deterministic)},
                (like(q), like(k, q.dtype), like(v, q.dtype)))


def merge_state(v_a, s_a, v_b, s_b):
    """(v in v_a's dtype, s float32): two partial attention states merged (see gks.merge_state)."""
    v_a, s_a, v_b, s_b = (jnp.asarray(a) for a in (v_a, s_a, v_b, s_b))
    return call("merge_state", {"v_a": v_a, "s_a": s_a, "v_b": v_b, "s_b": s_b},
                (like(v_a), like(s_a, jnp.float32)))


def merge_states(v, s):
    """(v [..., D], s [...] float32): K stacked partial states merged (see gks.merge_states)."""
    v, s = jnp.asarray(v), jnp.asarray(s)
    lead = v.shape[:-2] if v.ndim >= 2 else v.shape
    d = v.shape[-1:] if v.ndim >= 2 else ()
    return call("merge_states", {"v": v, "s": s}, (like(v, shape=(*lead, *d)), like(v, jnp.float32, lead)))


def flash_attention_decode(q, k_cache, v_cache, cache_seqlens, page_table=None, causal: bool = True,
                           softmax_scale=None, window_size=(-1, -1), softcap: float = 0.0, num_splits: int = 0):
    """(o [B, Hq, Sq, D] in q's dtype, lse [B, Hq, Sq] float32): split-KV decode attention
    over a dense or paged KV cache (see gks.flash_attention_decode). Its binding takes
    page_table after the outputs, so the call goes through a small adapter (gks.jax._ffi)."""
    q, k_cache, v_cache, cache_seqlens = (jnp.asarray(a) for a in (q, k_cache, v_cache, cache_seqlens))
    page_table = None if page_table is None else jnp.asarray(page_table)
    lse_shape = q.shape[:-1] if q.ndim == 4 else q.shape
    return call("flash_attention_decode",
                {"q": q, "k_cache": k_cache, "v_cache": v_cache, "cache_seqlens": cache_seqlens,
                 "page_table": page_table, "causal": causal, "softmax_scale": softmax_scale,
                 "window_size": window_size, "softcap": softcap, "num_splits": num_splits},
                (like(q), like(q, jnp.float32, lse_shape)))
