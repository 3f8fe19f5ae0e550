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
    check_bwd_shapes,
    checked_softcap,
    checked_softmax_scale,
    checked_window,
    kernel_window,
)

__all__ = ["flash_attention", "flash_attention_bwd", "flash_attention_fwd", "flash_attention_fwd_config_names"]

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
    _check_qkv(op, q, k, v)
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


# ---- flash_attention_bwd (see gks.specs.attention): FlashAttention-2's split, as the Triton
# port. delta = rowsum(dO * O) and lse in log2 units (+inf on rows that saw no key, so that
# P = 0 there) are one fused XLA reduction; then a program per (key block, batch, KV head)
# recomputes P^T for every query block of every query head of its group and accumulates dK
# and dV, and a program per (query block, batch, query head) accumulates dQ. Each gradient
# is summed in one program in a fixed order (deterministic, no atomics). Padding as the
# forward's: sequences to whole blocks, head dims to powers of two; padded query rows have
# lse +inf (P = 0), padded keys are masked in the dQ program (their dK, dV rows are dropped).

# (held, step, warps, stages) per padded head dim (the larger of q/k's and v's): the dQ
# program holds `held` query rows and steps over `step` keys, the dK/dV program holds `held`
# keys and steps over `step` query rows. Not yet timed on a GPU.
BWD_CONFIGS = {64: (64, 64, 4, 2), 128: (64, 32, 8, 2), 256: (32, 32, 8, 1)}


def _bwd_config(head_dim: int, head_dim_v: int):
    width = max(next_pow2(head_dim), next_pow2(head_dim_v))
    return BWD_CONFIGS[64 if width <= 64 else 128 if width <= 128 else 256]


def _bwd_scores(a, b, *, softcap, qk_log2, cap_in, cap_log2):
    """a b^T in log2 units (scaled; capped under a softcap) and the tanh of the capped
    argument (None without a cap), for its derivative."""
    s = plgpu.dot(a, b, trans_b=True)
    if softcap:
        t = jnp.tanh(s * cap_in)
        return t * cap_log2, t
    return s * qk_log2, None


def _bwd_dq_kernel(q_ref, k_ref, v_ref, do_ref, lse2_ref, delta_ref, dq_ref, *, scores, scale, window,
                   block_q, block_k, seqlen_q, seqlen_k):
    start_q = pl.program_id(0)
    q, do = q_ref[...], do_ref[...]
    lse2, delta = lse2_ref[...], delta_ref[...]
    rows = start_q * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
    diag_offset = seqlen_k - seqlen_q
    left, right = window

    def body(kb, dq):
        k = k_ref[pl.ds(kb * block_k, block_k), :]
        v = v_ref[pl.ds(kb * block_k, block_k), :]
        s, t = _bwd_scores(q, k, **scores)
        cols = kb * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
        visible = cols < seqlen_k  # padded keys: zero rows of k would still give P > 0
        if right >= 0:
            visible = visible & (cols <= rows + (diag_offset + right))
        if left >= 0:
            visible = visible & (cols >= rows + (diag_offset - left))
        p = jnp.exp2(jnp.where(visible, s, -jnp.inf) - lse2[:, None])
        ds = p * (plgpu.dot(do, v, trans_b=True) - delta[:, None])
        if t is not None:
            ds = ds * (1.0 - t * t)
        return dq + plgpu.dot(ds.astype(k.dtype), k)

    # The forward's walk: from the tile of the first key the block's first row sees to the
    # last its last row sees.
    num_kb = pl.cdiv(seqlen_k, block_k)
    if right >= 0:
        last_visible = (start_q + 1) * block_q + diag_offset + right
        upper = jnp.clip(jax.lax.div(jnp.maximum(last_visible + block_k - 1, 0), block_k), 0, num_kb)
    else:
        upper = num_kb
    if left >= 0:
        first_visible = start_q * block_q + diag_offset - left
        lower = jnp.clip(jax.lax.div(jnp.maximum(first_visible, 0), block_k), 0, num_kb)
    else:
        lower = 0
    dq = jax.lax.fori_loop(lower, upper, body, jnp.zeros((block_q, q_ref.shape[-1]), jnp.float32))
    dq_ref[...] = (dq * scale).astype(dq_ref.dtype)


def _bwd_dkdv_kernel(q_ref, k_ref, v_ref, do_ref, lse2_ref, delta_ref, dk_ref, dv_ref, *, scores, scale,
                     window, group, block_q, block_k, seqlen_q, seqlen_k):
    start_k = pl.program_id(0)
    k, v = k_ref[...], v_ref[...]
    cols = start_k * block_k + jax.lax.broadcasted_iota(jnp.int32, (block_k, block_q), 0)
    diag_offset = seqlen_k - seqlen_q
    left, right = window

    def body(g, qb, carry):
        dk, dv = carry
        q = q_ref[g, pl.ds(qb * block_q, block_q), :]
        do = do_ref[g, pl.ds(qb * block_q, block_q), :]
        lse2 = lse2_ref[g, pl.ds(qb * block_q, block_q)]
        delta = delta_ref[g, pl.ds(qb * block_q, block_q)]
        s_t, t_t = _bwd_scores(k, q, **scores)
        if left >= 0 or right >= 0:
            rows = qb * block_q + jax.lax.broadcasted_iota(jnp.int32, (block_k, block_q), 1)
            visible = jnp.ones((block_k, block_q), jnp.bool_)
            if right >= 0:
                visible = visible & (cols <= rows + (diag_offset + right))
            if left >= 0:
                visible = visible & (cols >= rows + (diag_offset - left))
            s_t = jnp.where(visible, s_t, -jnp.inf)
        p_t = jnp.exp2(s_t - lse2[None, :])
        dv = dv + plgpu.dot(p_t.astype(do.dtype), do)
        ds_t = p_t * (plgpu.dot(v, do, trans_b=True) - delta[None, :])
        if t_t is not None:
            ds_t = ds_t * (1.0 - t_t * t_t)
        return dk + plgpu.dot(ds_t.astype(q.dtype), q), dv

    # The query blocks with a row that sees a key of this block: rows n0 - diag - right ...
    # n0 + block_k - 1 - diag + left.
    num_qb = pl.cdiv(seqlen_q, block_q)
    n0 = start_k * block_k
    if right >= 0:
        lower = jnp.clip(jax.lax.div(jnp.maximum(n0 - diag_offset - right, 0), block_q), 0, num_qb)
    else:
        lower = 0
    if left >= 0:
        end = n0 + block_k - diag_offset + left  # rows below this
        upper = jnp.clip(jax.lax.div(jnp.maximum(end + block_q - 1, 0), block_q), 0, num_qb)
    else:
        upper = num_qb

    def head(g, carry):
        return jax.lax.fori_loop(lower, upper, functools.partial(body, g), carry)

    init = (jnp.zeros((block_k, k_ref.shape[-1]), jnp.float32), jnp.zeros((block_k, v_ref.shape[-1]), jnp.float32))
    dk, dv = head(0, init) if group == 1 else jax.lax.fori_loop(0, group, head, init)
    dk_ref[...] = (dk * scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


@functools.partial(jax.jit, static_argnames=("window", "scale", "softcap", "interpret"))
def _flash_attention_bwd(do, q, k, v, o, lse, *, window, scale, softcap, interpret):
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads_q // heads_kv
    held, step, num_warps, num_stages = _bwd_config(head_dim, head_dim_v)
    # Short sequences: smaller blocks (16 is the least a dot takes) instead of padding.
    held_q, held_k = (min(held, max(16, next_pow2(n))) for n in (seqlen_q, seqlen_k))
    step_q, step_k = min(step, held_q), min(step, held_k)
    dim_p, dim_vp = next_pow2(head_dim), next_pow2(head_dim_v)
    sq_p = -(-seqlen_q // held_q) * held_q
    sk_p = -(-seqlen_k // held_k) * held_k
    delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1)
    lse2 = jnp.where(lse == -jnp.inf, jnp.inf, lse * LOG2E)
    rows, keys = (0, sq_p - seqlen_q), (0, sk_p - seqlen_k)
    q = jnp.pad(q, ((0, 0), (0, 0), rows, (0, dim_p - head_dim)))
    do = jnp.pad(do, ((0, 0), (0, 0), rows, (0, dim_vp - head_dim_v)))
    lse2 = jnp.pad(lse2, ((0, 0), (0, 0), rows), constant_values=jnp.inf)
    delta = jnp.pad(delta, ((0, 0), (0, 0), rows))
    k = jnp.pad(k, ((0, 0), (0, 0), keys, (0, dim_p - head_dim)))
    v = jnp.pad(v, ((0, 0), (0, 0), keys, (0, dim_vp - head_dim_v)))
    scores = dict(softcap=softcap, qk_log2=scale * LOG2E, cap_in=scale / softcap if softcap else 1.0,
                  cap_log2=softcap * LOG2E)
    common = dict(scores=scores, scale=scale, window=window, seqlen_q=seqlen_q, seqlen_k=seqlen_k)
    params = plgpu.CompilerParams(num_warps=num_warps, num_stages=num_stages)

    def rows_of(block, width):
        return pl.BlockSpec((None, None, block, width), lambda i, b, h: (b, h, i, 0))

    def head_of(length, width):  # a whole (padded) sequence of the query head's KV head
        return pl.BlockSpec((None, None, length, width), lambda i, b, h: (b, h // group, 0, 0))

    dq = pl.pallas_call(
        functools.partial(_bwd_dq_kernel, block_q=held_q, block_k=step_k, **common),
        grid=(sq_p // held_q, batch, heads_q),
        in_specs=[rows_of(held_q, dim_p), head_of(sk_p, dim_p), head_of(sk_p, dim_vp), rows_of(held_q, dim_vp),
                  pl.BlockSpec((None, None, held_q), lambda i, b, h: (b, h, i)),
                  pl.BlockSpec((None, None, held_q), lambda i, b, h: (b, h, i))],
        out_specs=rows_of(held_q, dim_p),
        out_shape=jax.ShapeDtypeStruct((batch, heads_q, sq_p, dim_p), q.dtype),
        interpret=interpret, compiler_params=params, name="gks_flash_attention_bwd_dq",
    )(q, k, v, do, lse2, delta)

    # The dK/dV program reads every query head of its group: [B, Hkv, group, Sq, ...] views.
    def group_of(*tail):
        return pl.BlockSpec((None, None, group, *tail), lambda j, b, h: (b, h, 0) + (0,) * len(tail))

    dk, dv = pl.pallas_call(
        functools.partial(_bwd_dkdv_kernel, group=group, block_q=step_q, block_k=held_k, **common),
        grid=(sk_p // held_k, batch, heads_kv),
        in_specs=[group_of(sq_p, dim_p), rows_of(held_k, dim_p), rows_of(held_k, dim_vp), group_of(sq_p, dim_vp),
                  group_of(sq_p), group_of(sq_p)],
        out_specs=[rows_of(held_k, dim_p), rows_of(held_k, dim_vp)],
        out_shape=[jax.ShapeDtypeStruct((batch, heads_kv, sk_p, dim_p), q.dtype),
                   jax.ShapeDtypeStruct((batch, heads_kv, sk_p, dim_vp), q.dtype)],
        interpret=interpret, compiler_params=params, name="gks_flash_attention_bwd_dkdv",
    )(q.reshape(batch, heads_kv, group, sq_p, dim_p), k, v, do.reshape(batch, heads_kv, group, sq_p, dim_vp),
      lse2.reshape(batch, heads_kv, group, sq_p), delta.reshape(batch, heads_kv, group, sq_p))
    return (dq[:, :, :seqlen_q, :head_dim], dk[:, :, :seqlen_k, :head_dim], dv[:, :, :seqlen_k, :head_dim_v])


def _check_qkv(op: str, q, k, v) -> None:
    """q, k, v as flash_attention_fwd checks them (dtypes, dims, shapes)."""
    if q.dtype not in (jnp.float16, jnp.bfloat16):
        raise TypeError(f"{op}: argument 'q' must be float16 or bfloat16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise ValueError(f"{op}: argument '{name}' must have 4 dims [batch, heads, seq, head_dim], "
                             f"got {t.ndim} dims {list(t.shape)}")
    check_attention_shapes(op, q.shape, k.shape, v.shape)


@takes_arrays("do", "q", "k", "v", "o", "lse")
def flash_attention_bwd(do: jax.Array, q: jax.Array, k: jax.Array, v: jax.Array, o: jax.Array, lse: jax.Array,
                        causal: bool = False, softmax_scale: float | None = None,
                        window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                        deterministic: bool = False, *, interpret: bool | None = None):
    """The attention backward on JAX arrays; the meaning of gks.reference.flash_attention_bwd.

    do, o [B, Hq, Sq, Dv] (the gradient of o and o, q's dtype), lse [B, Hq, Sq] (float32)
    from flash_attention_fwd; q, k, v and the options as it takes them. Returns (dq
    [B, Hq, Sq, D], dk [B, Hkv, Sk, D], dv [B, Hkv, Sk, Dv]) in q's dtype, dk and dv summed
    over each KV head's query heads. Deterministic whatever `deterministic` says (taken for
    the CUDA op's signature).
    """
    op = "gks.pallas.flash_attention_bwd"
    _check_qkv(op, q, k, v)
    for name, t in (("o", o), ("do", do)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    if lse.dtype != jnp.float32:
        raise TypeError(f"{op}: argument 'lse' must be float32, got {lse.dtype}")
    check_bwd_shapes(op, q.shape, v.shape, do.shape, o.shape, lse.shape)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    if batch * heads_q * seqlen_q * seqlen_k == 0:  # no pairs: every gradient is 0
        return jnp.zeros(q.shape, q.dtype), jnp.zeros(k.shape, q.dtype), jnp.zeros(v.shape, q.dtype)
    if interpret is None:
        interpret = default_interpret(q)
    return _flash_attention_bwd(do, q, k, v, o, lse, window=kernel_window(left, right, seqlen_q, seqlen_k),
                                scale=scale, softcap=cap, interpret=interpret)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _attention(q, k, v, options):
    causal, softmax_scale, window_size, softcap, interpret = options
    return flash_attention_fwd(q, k, v, causal, softmax_scale, window_size, softcap, interpret=interpret)[0]


def _attention_fwd(q, k, v, options):
    causal, softmax_scale, window_size, softcap, interpret = options
    o, lse = flash_attention_fwd(q, k, v, causal, softmax_scale, window_size, softcap, interpret=interpret)
    return o, (q, k, v, o, lse)


def _attention_bwd(options, saved, do):
    causal, softmax_scale, window_size, softcap, interpret = options
    return flash_attention_bwd(do, *saved, causal, softmax_scale, window_size, softcap, interpret=interpret)


_attention.defvjp(_attention_fwd, _attention_bwd)


@takes_arrays("q", "k", "v")
def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, causal: bool = False,
                    softmax_scale: float | None = None, window_size: tuple[int, int] = (-1, -1),
                    softcap: float = 0.0, *, interpret: bool | None = None) -> jax.Array:
    """Differentiable attention: o of gks.pallas.flash_attention_fwd (same arguments), whose
    gradient (jax.grad, under jax.jit too) is gks.pallas.flash_attention_bwd's (a custom_vjp
    saving q, k, v, o and lse)."""
    # The options travel as a static, hashable tuple (a list window is the same window).
    window = tuple(window_size) if isinstance(window_size, list) else window_size
    return _attention(q, k, v, (causal, softmax_scale, window, softcap, interpret))
