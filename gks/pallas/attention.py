# SPDX-License-Identifier: Apache-2.0
"""FlashAttention forward in Pallas (Triton lowering): one program per (query block, batch,
query head), walking its head's keys in BLOCK_K tiles with the online softmax in fp32.

Block shapes must be powers of two on the Triton lowering, and a slice past the end of a
ref is not masked in interpret mode, so the sequences are zero-padded to whole blocks (and
the head dims to powers of two: q and k's D = 96 and 192 to 128 and 256, v's Dv likewise,
each on its own, so DeepSeek's D = 192 with Dv = 128 keeps [block_q, 128] accumulators) and
the padding is masked (keys) or sliced off (queries, head dims).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import default_interpret, next_pow2, takes_arrays, tuned_config
from gks.runtime.dims import attention_dims
from gks.specs.attention import (
    check_attention_shapes,
    checked_softcap,
    checked_softmax_scale,
    checked_window,
    kernel_window,
)

__all__ = ["flash_attention_fwd", "flash_attention_fwd_config_names"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453


def _fwd_kernel(q_ref, k_ref, v_ref, o_ref, lse_ref, *, scale_log2, softcap, cap_in, window,
                block_q, block_k, seqlen_q, seqlen_k):
    start_q = pl.program_id(0)
    q = q_ref[...]  # [block_q, D]
    rows = start_q * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
    diag_offset = seqlen_k - seqlen_q
    # Row i sees key j when i + diag_offset - left <= j <= i + diag_offset + right; a bound of
    # -1 is none (static: kernel_window has dropped the bounds no row reaches).
    left, right = window

    def body(kb, carry):
        acc, m_prev, l_prev = carry
        k = k_ref[pl.ds(kb * block_k, block_k), :]
        v = v_ref[pl.ds(kb * block_k, block_k), :]
        s = plgpu.dot(q, k, trans_b=True)  # fp32
        if softcap:
            # The cap of the scaled score, in log2 units (scale_log2 is log2(e) * softcap).
            s = jnp.tanh(s * cap_in) * scale_log2
        else:
            s = s * scale_log2  # log2 units
        cols = kb * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
        visible = cols < seqlen_k
        if right >= 0:
            visible = visible & (cols <= rows + (diag_offset + right))
        if left >= 0:
            visible = visible & (cols >= rows + (diag_offset - left))
        s = jnp.where(visible, s, -jnp.inf)
        m_new = jnp.maximum(m_prev, jnp.max(s, axis=1))
        # A row that has seen only masked keys keeps max -inf: shift it by 0, so that
        # exp2(-inf - shift) is 0 rather than NaN.
        shift = jnp.where(m_new == -jnp.inf, 0.0, m_new)
        p = jnp.exp2(s - shift[:, None])
        correction = jnp.exp2(m_prev - shift)
        l_new = l_prev * correction + jnp.sum(p, axis=1)
        acc = acc * correction[:, None] + plgpu.dot(p.astype(v.dtype), v)
        return acc, m_new, l_new

    num_kb = pl.cdiv(seqlen_k, block_k)
    # Tiles wholly right of the block's last row's right bound, or left of its first row's
    # left bound, are skipped.
    if right >= 0:
        last_visible = (start_q + 1) * block_q + diag_offset + right  # keys < this may be seen
        upper = jnp.clip(jax.lax.div(jnp.maximum(last_visible + block_k - 1, 0), block_k), 0, num_kb)
    else:
        upper = num_kb
    if left >= 0:
        first_visible = start_q * block_q + diag_offset - left  # keys < this are not seen
        lower = jnp.clip(jax.lax.div(jnp.maximum(first_visible, 0), block_k), 0, num_kb)
    else:
        lower = 0
    head_dim_v = v_ref.shape[-1]  # o's (padded) head dim
    init = (
        jnp.zeros((block_q, head_dim_v), jnp.float32),
        jnp.full((block_q,), -jnp.inf, jnp.float32),
        jnp.zeros((block_q,), jnp.float32),
    )
    acc, m_i, l_i = jax.lax.fori_loop(lower, upper, body, init)
    # A row that saw no key has sum 0; a NaN score makes it NaN, which must stay NaN.
    seen = l_i != 0.0
    safe_l = jnp.where(seen, l_i, 1.0)
    o_ref[...] = jnp.where(seen[:, None], acc / safe_l[:, None], 0.0).astype(o_ref.dtype)
    lse_ref[...] = jnp.where(seen, (m_i + jnp.log2(safe_l)) * LN2, -jnp.inf)


# The block shapes and launch gks autotune may choose among (`config`'s index; tuned entries:
# "pallas.flash_attention_fwd"): (block_q, block_k, num_warps, num_stages). The first three
# are what a head dim gets without a tuned entry (see _default_config).
CONFIGS = (
    (128, 64, 4, 2),
    (128, 64, 8, 2),
    (64, 32, 8, 2),
    (64, 64, 4, 2),
    (128, 128, 8, 2),
    (64, 64, 4, 3),
)


def flash_attention_fwd_config_names() -> list[str]:
    """Names of CONFIGS, in the order `config` indexes: q<block_q>_k<block_k>_w<warps>_s<stages>."""
    return [f"q{bq}_k{bk}_w{w}_s{st}" for bq, bk, w, st in CONFIGS]


def _default_config(head_dim: int) -> int:
    """The config a head dim runs without a tuned entry."""
    return 0 if head_dim <= 64 else 1 if head_dim <= 128 else 2


def _block_sizes(config: int, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    block_q, block_k = CONFIGS[config][:2]
    # Short sequences: smaller blocks (16 is the least a dot takes) instead of padding.
    return min(block_q, max(16, next_pow2(seqlen_q))), min(block_k, max(16, next_pow2(seqlen_k)))


@functools.partial(jax.jit, static_argnames=("window", "scale", "softcap", "interpret", "config"))
def _flash_attention_fwd(q, k, v, *, window, scale, softcap, interpret, config):
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads_q // heads_kv
    block_q, block_k = _block_sizes(config, seqlen_q, seqlen_k)
    dim_p, dim_vp = next_pow2(head_dim), next_pow2(head_dim_v)
    sq_p = -(-seqlen_q // block_q) * block_q
    sk_p = -(-seqlen_k // block_k) * block_k
    # Zero padding: padded q rows and head-dim columns add 0 to every score; padded keys
    # are masked; padded rows and columns of o are sliced off.
    if (sq_p, dim_p) != (seqlen_q, head_dim):
        q = jnp.pad(q, ((0, 0), (0, 0), (0, sq_p - seqlen_q), (0, dim_p - head_dim)))
    if (sk_p, dim_p) != (seqlen_k, head_dim):
        k = jnp.pad(k, ((0, 0), (0, 0), (0, sk_p - seqlen_k), (0, dim_p - head_dim)))
    if (sk_p, dim_vp) != (seqlen_k, head_dim_v):
        v = jnp.pad(v, ((0, 0), (0, 0), (0, sk_p - seqlen_k), (0, dim_vp - head_dim_v)))
    kernel = functools.partial(
        _fwd_kernel, scale_log2=softcap * LOG2E if softcap else scale * LOG2E, softcap=softcap,
        cap_in=scale / softcap if softcap else 1.0, window=window, block_q=block_q,
        block_k=block_k, seqlen_q=seqlen_q, seqlen_k=seqlen_k,
    )
    grid = (sq_p // block_q, batch, heads_q)
    o, lse = pl.pallas_call(
        kernel,
        grid=grid,
        in_specs=[
            pl.BlockSpec((None, None, block_q, dim_p), lambda i, b, h: (b, h, i, 0)),
            pl.BlockSpec((None, None, sk_p, dim_p), lambda i, b, h: (b, h // group, 0, 0)),
            pl.BlockSpec((None, None, sk_p, dim_vp), lambda i, b, h: (b, h // group, 0, 0)),
        ],
        out_specs=[
            pl.BlockSpec((None, None, block_q, dim_vp), lambda i, b, h: (b, h, i, 0)),
            pl.BlockSpec((None, None, block_q), lambda i, b, h: (b, h, i)),
        ],
        out_shape=[
            jax.ShapeDtypeStruct((batch, heads_q, sq_p, dim_vp), q.dtype),
            jax.ShapeDtypeStruct((batch, heads_q, sq_p), jnp.float32),
        ],
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=CONFIGS[config][2],
                                             num_stages=CONFIGS[config][3]),
        name="gks_flash_attention_fwd",
    )(q, k, v)
    return o[:, :, :seqlen_q, :head_dim_v], lse[:, :, :seqlen_q]


@takes_arrays("q", "k", "v")
def flash_attention_fwd(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False,
                        softmax_scale: float | None = None, window_size: tuple[int, int] = (-1, -1),
                        softcap: float = 0.0, *, interpret: bool | None = None, config: int = -1):
    """Attention forward with lse on JAX arrays; the meaning of gks.flash_attention_fwd.

    q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] (fp16/bf16, Hq % Hkv == 0, D in
    {32, 64, 96, 128, 192, 256}, Dv = D or, with D = 192, 128). window_size (left, right), -1
    unbounded: query i sees keys i + Sk - Sq - left to i + Sk - Sq + right (causal: right 0).
    softcap > 0 caps the scaled scores to softcap * tanh(s / softcap). Returns o
    [B, Hq, Sq, Dv] (q's dtype) and lse [B, Hq, Sq] (float32, natural log; -inf for a row
    that sees no key, whose o is 0). config: an index
    into gks.pallas.flash_attention_fwd_config_names() (block shapes and launch), or -1: the
    tuned entry for this GPU and shape if `gks autotune --backend pallas` made one, else a
    shape per head dim.
    """
    op = "gks.pallas.flash_attention_fwd"
    if not isinstance(config, int) or not -1 <= config < len(CONFIGS):
        raise ValueError(f"{op}: argument 'config' must be -1 or an index below {len(CONFIGS)} "
                         f"(see gks.pallas.flash_attention_fwd_config_names()), got {config!r}")
    if q.dtype not in (jnp.float16, jnp.bfloat16):
        raise TypeError(f"{op}: argument 'q' must be float16 or bfloat16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(
                f"{op}: argument '{name}' must have 4 dims [batch, heads, seq, head_dim], "
                f"got {t.ndim} dims {list(t.shape)}"
            )
    check_attention_shapes(op, q.shape, k.shape, v.shape)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    o_shape = (batch, heads_q, seqlen_q, v.shape[3])
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    if q.size == 0:
        return jnp.zeros(o_shape, q.dtype), jnp.zeros(q.shape[:3], jnp.float32)
    if seqlen_k == 0:  # no keys at all: every row sees none
        return jnp.zeros(o_shape, q.dtype), jnp.full(q.shape[:3], -jnp.inf, jnp.float32)
    if interpret is None:
        interpret = default_interpret(q)
    if config == -1:
        dims = attention_dims(q, k, causal, v)
        tuned = None if interpret else tuned_config(q, "pallas.flash_attention_fwd", str(q.dtype),
                                                    dims)
        config = _default_config(head_dim) if tuned is None else tuned
    return _flash_attention_fwd(q, k, v, window=kernel_window(left, right, seqlen_q, seqlen_k),
                                scale=scale, softcap=cap, interpret=interpret, config=config)
