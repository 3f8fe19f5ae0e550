# SPDX-License-Identifier: Apache-2.0
"""FlashAttention forward in Triton: one program per (query block, batch x head).

Each program keeps its BLOCK_M query rows in registers and walks the keys in BLOCK_N
tiles with the online softmax (base-2 exponentials on log2(e)-prescaled scores, fp32
accumulators). The walk is one loop. Key bounds are checked only when Sk is not a
multiple of BLOCK_N, and the causal mask is applied only to the tiles that cross the
block's diagonal (a scalar branch around the select). Splitting the walk into an unmasked
loop and a masked one, as the CUDA kernel does, makes Triton 3.6 spill registers at the
tiles that run fastest (docs/perf/attention.md). Causal programs skip the tiles above the
diagonal; with a sliding window a program walks only the tiles between its first row's left
bound and its last row's right bound, and masks the tiles that cross either bound.

q and k's head dim D and v's (and o's) Dv each pad to a power of two (BLOCK_D, BLOCK_DV:
D = 96 and 192 to 128 and 256) with masked loads and stores, so D = 192 with Dv = 128
(DeepSeek's MLA) runs [BLOCK_M, 128] accumulators.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.specs.attention import (
    DECODE_OP,
    check_attention_shapes,
    check_bwd_shapes,
    check_decode_inputs,
    checked_num_splits,
    checked_softcap,
    checked_softmax_scale,
    checked_window,
    check_varlen_bwd_inputs,
    check_varlen_inputs,
    decode_capacity,
    decode_num_splits,
    kernel_window,
)
from gks.triton._common import (
    check_device,
    check_float,
    check_same,
    check_same_device,
    interpreter_variant,
    next_pow2,
    on_tensor_device,
    row_layout,
    row_start,
)

__all__ = ["flash_attention", "flash_attention_bwd", "flash_attention_decode", "flash_attention_fwd",
           "flash_attention_fwd_config_names", "flash_attention_varlen_bwd", "flash_attention_varlen_fwd", "merge_state",
           "merge_states"]

LOG2E = 1.4426950408889634


@triton.jit
def _dot(a, b, UPCAST: tl.constexpr):
    # Triton's CPU interpreter multiplies bfloat16 as raw 16-bit integers; there (only) the
    # operands go up to fp32 first, which is exact, as the products on Tensor Cores are.
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32))
    return tl.dot(a, b)


@triton.jit
def _dot_acc(a, b, acc, UPCAST: tl.constexpr):
    if UPCAST:
        return tl.dot(a.to(tl.float32), b.to(tl.float32), acc)
    return tl.dot(a, b, acc)


@triton.jit
def _tanh(x):
    # tanh(x) = 1 - 2 / (e^(2x) + 1), whose overflow gives the limits +-1 and which keeps NaN,
    # loses x's digits where tanh(x) is near 0 (an absolute error of ~1e-7, which a cap of
    # 1e4 would scale to 1e-3): there the odd series to x^9 (error < 1e-8 relative below 1/4).
    # No libdevice call: the interpreter has none.
    x2 = x * x
    series = x + x * x2 * (-0.3333333333333333 + x2 * (0.13333333333333333 + x2 * (
        -0.05396825396825397 + x2 * 0.021869488536155203)))
    return tl.where(x2 < 0.0625, series, 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0))


@triton.jit
def _online_softmax_step(acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, d_mask,
                         dv_mask, seqlen_k, diag_offset, win_left, win_right, scale_log2, cap_in,
                         cap_out, m0, kv_ok,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BOUNDS: tl.constexpr,
                         LEFT: tl.constexpr, RIGHT: tl.constexpr, SOFTCAP: tl.constexpr,
                         EVEN_D: tl.constexpr, EVEN_DV: tl.constexpr, UPCAST: tl.constexpr,
                         PAGED: tl.constexpr):
    cols = start_n + offs_n
    k_mask = cols[:, None] < seqlen_k
    if PAGED:  # rows on a page outside the cache read as zeros (kv_ok false)
        k_mask = k_mask & kv_ok[:, None]
    v_mask = k_mask
    if not EVEN_D:
        k_mask = k_mask & d_mask[None, :]
    if not EVEN_DV:
        v_mask = v_mask & dv_mask[None, :]
    if BOUNDS:
        k = tl.load(k_ptrs, mask=k_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(k_ptrs)
    else:
        k = tl.load(k_ptrs, mask=d_mask[None, :], other=0.0)
    s = _dot(q, tl.trans(k), UPCAST)  # raw scores, fp32
    if SOFTCAP:
        # cap_in = scale / softcap, cap_out = softcap: the capped scaled score (scale_log2 is
        # then log2(e) alone).
        s = cap_out * _tanh(s * cap_in)
    if BOUNDS:
        s = tl.where(cols[None, :] < seqlen_k, s, float("-inf"))
    # Only the tiles that cross a bound of the block's rows pay for its mask (a scalar
    # branch; the loads stay outside it, so the loop is still pipelined). Row i sees keys
    # i + diag_offset - win_left ... i + diag_offset + win_right.
    if RIGHT:
        if start_n + BLOCK_N > m0 + diag_offset + win_right + 1:
            s = tl.where(cols[None, :] <= offs_m[:, None] + diag_offset + win_right, s, float("-inf"))
    if LEFT:
        if start_n < m0 + BLOCK_M - 1 + diag_offset - win_left:
            s = tl.where(cols[None, :] >= offs_m[:, None] + diag_offset - win_left, s, float("-inf"))
    if BOUNDS or RIGHT or LEFT:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        # A row that has seen only masked keys keeps max -inf: shift it by 0 instead, so
        # exp2(-inf - shift) is 0, not NaN.
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)
    else:
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        shift = m_new
    # Scores stay raw (scale > 0 commutes with max); the scale folds into one FMA here.
    p = tl.math.exp2(s * scale_log2 - shift[:, None])
    correction = tl.math.exp2(m_i - shift)
    l_i = l_i * correction + tl.sum(p, 1)
    acc = acc * correction[:, None]
    if BOUNDS:
        v = tl.load(v_ptrs, mask=v_mask, other=0.0)
    elif EVEN_DV:
        v = tl.load(v_ptrs)
    else:
        v = tl.load(v_ptrs, mask=dv_mask[None, :], other=0.0)
    acc = _dot_acc(p.to(v.dtype), v, acc, UPCAST)
    return acc, m_new, l_i


@triton.jit
def _key_walk(m0, seqlen_q, seqlen_k, win_left, win_right, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              LEFT: tl.constexpr, RIGHT: tl.constexpr):
    """(diag, lo, hi): row i sees key j when j < seqlen_k and i + diag - win_left <= j <= i +
    diag + win_right (each bound only where LEFT / RIGHT); the walk over the query block
    [m0, m0 + BLOCK_M) starts at the tile of the first key its first row sees (lo, a tile
    boundary) and stops after the last key its last row sees (hi)."""
    diag = seqlen_k - seqlen_q
    if RIGHT:
        hi = tl.minimum(tl.maximum(m0 + BLOCK_M + diag + win_right, 0), seqlen_k)
    else:
        hi = seqlen_k
    if LEFT:
        lo = tl.minimum(tl.maximum(m0 + diag - win_left, 0), seqlen_k) // BLOCK_N * BLOCK_N
    else:
        lo = 0
    return diag, lo, hi


@triton.jit
def _attend_block(
    q_base, k_base, v_base, o_base, lse_base, q_sm, k_sn, v_sn, o_sm, seqlen_q, seqlen_k, start_m,
    win_left, win_right, scale_log2, cap_in, cap_out, table_ptr, page_size, num_pages, k_page, v_page,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LEFT: tl.constexpr, RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr, BOUNDS: tl.constexpr, UPCAST: tl.constexpr, PAGED: tl.constexpr,
):
    """Query block start_m of one (sequence, head): its rows' o and lse (lse rows at stride 1).
    PAGED: key j is row j % page_size of page table_ptr[j // page_size] (k_page, v_page
    elements a page); else row j of k_base and v_base."""
    EVEN_D: tl.constexpr = HEAD_DIM == BLOCK_D
    EVEN_DV: tl.constexpr = HEAD_DIM_V == BLOCK_DV
    m0 = start_m * BLOCK_M
    offs_m = m0 + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < HEAD_DIM
    offs_dv = tl.arange(0, BLOCK_DV)
    dv_mask = offs_dv < HEAD_DIM_V

    q_mask = offs_m[:, None] < seqlen_q
    if not EVEN_D:
        q_mask = q_mask & d_mask[None, :]
    q = tl.load(q_base + offs_m[:, None].to(tl.int64) * q_sm + offs_d[None, :], mask=q_mask, other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_DV], dtype=tl.float32)

    diag_offset, lo, hi = _key_walk(m0, seqlen_q, seqlen_k, win_left, win_right, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                    LEFT=LEFT, RIGHT=RIGHT)
    # The pointers start at the walk's first tile and advance one tile per pass (64-bit
    # pointer arithmetic, no start * stride products in the loop); the step itself is 64-bit,
    # as BLOCK_N times a sequence stride of a KV-cache view passes 2^31 elements.
    k_ptrs = k_base + (lo + offs_n)[:, None].to(tl.int64) * k_sn + offs_d[None, :]
    v_ptrs = v_base + (lo + offs_n)[:, None].to(tl.int64) * v_sn + offs_dv[None, :]
    k_step = BLOCK_N * tl.cast(k_sn, tl.int64)  # a stride of 1 arrives as a plain int
    v_step = BLOCK_N * tl.cast(v_sn, tl.int64)
    for start_n in tl.range(lo, hi, BLOCK_N):
        if PAGED:  # each tile's rows through the page table
            cols = start_n + offs_n
            page = tl.load(table_ptr + cols // page_size, mask=cols < seqlen_k, other=0)
            kv_ok = (page >= 0) & (page < num_pages)
            within = (cols % page_size).to(tl.int64)
            page = tl.where(kv_ok, page, 0).to(tl.int64)
            k_ptrs = k_base + (page * k_page + within * k_sn)[:, None] + offs_d[None, :]
            v_ptrs = v_base + (page * v_page + within * v_sn)[:, None] + offs_dv[None, :]
        else:
            kv_ok = 0
        acc, m_i, l_i = _online_softmax_step(
            acc, m_i, l_i, q, k_ptrs, v_ptrs, start_n, offs_m, offs_n, d_mask, dv_mask,
            seqlen_k, diag_offset, win_left, win_right, scale_log2, cap_in, cap_out, m0, kv_ok,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BOUNDS=BOUNDS, LEFT=LEFT, RIGHT=RIGHT,
            SOFTCAP=SOFTCAP, EVEN_D=EVEN_D, EVEN_DV=EVEN_DV, UPCAST=UPCAST, PAGED=PAGED,
        )
        if not PAGED:
            k_ptrs += k_step
            v_ptrs += v_step

    # A row that saw no key has sum 0; a NaN score makes it NaN, which must stay NaN.
    seen = l_i != 0.0
    inv_l = tl.where(seen, 1.0 / tl.where(seen, l_i, 1.0), 0.0)
    o = acc * inv_l[:, None]
    # lse = ln(sum_j 2^(s_j)) with s in log2 units = ln2 * (max + log2(sum)).
    lse = tl.where(seen, (m_i + tl.math.log2(tl.where(seen, l_i, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    row_ok = offs_m < seqlen_q
    o_mask = row_ok[:, None]
    if not EVEN_DV:
        o_mask = o_mask & dv_mask[None, :]
    tl.store(o_base + offs_m[:, None].to(tl.int64) * o_sm + offs_dv[None, :], o.to(o_base.dtype.element_ty),
             mask=o_mask)
    tl.store(lse_base + offs_m, lse, mask=row_ok)


@triton.jit
def _first_block(LEFT: tl.constexpr, RIGHT: tl.constexpr):
    if RIGHT and not LEFT:  # causal-like: longest rows first, the last query blocks see the most keys
        return tl.num_programs(0) - 1 - tl.program_id(0)
    return tl.program_id(0)


# The window's bounds are plain arguments: a bound of 1 or a multiple of 16 would otherwise
# compile a variant of its own.
@triton.jit(do_not_specialize=["win_left", "win_right"])
def _flash_attention_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr,
    q_sb, q_sh, q_sm,
    k_sb, k_sh, k_sn,
    v_sb, v_sh, v_sn,
    o_sb, o_sh, o_sm,
    lse_sb, lse_sh,
    heads_q, group, seqlen_q, seqlen_k, win_left, win_right, scale_log2, cap_in, cap_out,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LEFT: tl.constexpr, RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr, BOUNDS: tl.constexpr, UPCAST: tl.constexpr,
):
    bh = tl.program_id(1)
    batch = (bh // heads_q).to(tl.int64)
    head = (bh % heads_q).to(tl.int64)
    kv_head = head // group
    _attend_block(
        q_ptr + batch * q_sb + head * q_sh, k_ptr + batch * k_sb + kv_head * k_sh,
        v_ptr + batch * v_sb + kv_head * v_sh, o_ptr + batch * o_sb + head * o_sh,
        lse_ptr + batch * lse_sb + head * lse_sh, q_sm, k_sn, v_sn, o_sm, seqlen_q, seqlen_k,
        _first_block(LEFT, RIGHT), win_left, win_right, scale_log2, cap_in, cap_out, 0, 1, 0, 0, 0,
        HEAD_DIM=HEAD_DIM, BLOCK_D=BLOCK_D, HEAD_DIM_V=HEAD_DIM_V, BLOCK_DV=BLOCK_DV, BLOCK_M=BLOCK_M,
        BLOCK_N=BLOCK_N, LEFT=LEFT, RIGHT=RIGHT, SOFTCAP=SOFTCAP, BOUNDS=BOUNDS, UPCAST=UPCAST, PAGED=False,
    )


@triton.jit
def _clamp(x, lo, hi):
    return tl.minimum(tl.maximum(x, lo), hi)


# Varlen: program (i, b * Hq + h) takes query blocks i, i + grid, ... of sequence b (so a
# sequence longer than max_seqlen_q is still computed whole), every bound read from
# cu_seqlens clamped into the packed tensors (as the CUDA kernel's sequence_params). PAGED:
# the keys through row b of the page table (table_sb apart), as many as seqused_k[b] or
# cu_seqlens_k's difference, clamped to the sequence's capacity.
@triton.jit(do_not_specialize=["win_left", "win_right"])
def _flash_attention_varlen_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr, lse_ptr, cu_q_ptr, cu_k_ptr, used_ptr, table_ptr,
    q_sh, q_sm, k_sh, k_sn, v_sh, v_sn, o_sh, o_sm, lse_sh, k_page, v_page, table_sb,
    total_q, total_k, page_size, num_pages, capacity, heads_q, group, win_left, win_right, scale_log2,
    cap_in, cap_out,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LEFT: tl.constexpr, RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr, USED: tl.constexpr, PAGED: tl.constexpr, UPCAST: tl.constexpr,
):
    bh = tl.program_id(1)
    batch = bh // heads_q
    head = (bh % heads_q).to(tl.int64)
    kv_head = head // group
    q0 = _clamp(tl.load(cu_q_ptr + batch).to(tl.int64), 0, total_q)
    q1 = _clamp(tl.load(cu_q_ptr + batch + 1).to(tl.int64), q0, total_q)
    if PAGED:
        k0 = 0
        keys = tl.load(cu_k_ptr + batch + 1).to(tl.int64) - tl.load(cu_k_ptr + batch).to(tl.int64)
        if USED:
            keys = tl.load(used_ptr + batch).to(tl.int64)
        keys = _clamp(keys, 0, capacity)
        table_row = table_ptr + batch.to(tl.int64) * table_sb
    else:
        k0 = _clamp(tl.load(cu_k_ptr + batch).to(tl.int64), 0, total_k)
        keys = _clamp(tl.load(cu_k_ptr + batch + 1).to(tl.int64), k0, total_k) - k0
        if USED:
            keys = _clamp(tl.load(used_ptr + batch).to(tl.int64), 0, keys)
        table_row = table_ptr
    seqlen_q = (q1 - q0).to(tl.int32)
    seqlen_k = keys.to(tl.int32)
    for start_m in range(_first_block(LEFT, RIGHT), tl.cdiv(seqlen_q, BLOCK_M), tl.num_programs(0)):
        _attend_block(
            q_ptr + q0 * q_sm + head * q_sh, k_ptr + k0 * k_sn + kv_head * k_sh,
            v_ptr + k0 * v_sn + kv_head * v_sh, o_ptr + q0 * o_sm + head * o_sh, lse_ptr + head * lse_sh + q0,
            q_sm, k_sn, v_sn, o_sm, seqlen_q, seqlen_k, start_m, win_left, win_right, scale_log2, cap_in,
            cap_out, table_row, page_size, num_pages, k_page, v_page,
            HEAD_DIM=HEAD_DIM, BLOCK_D=BLOCK_D, HEAD_DIM_V=HEAD_DIM_V, BLOCK_DV=BLOCK_DV,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, LEFT=LEFT, RIGHT=RIGHT, SOFTCAP=SOFTCAP, BOUNDS=True,
            UPCAST=UPCAST, PAGED=PAGED,
        )


# The tile and launch shapes gks autotune may choose among (the `config` argument's index;
# tuned entries: "triton.flash_attention_fwd"). The heuristic below picks from these same
# shapes per head dim.
CONFIGS = (
    dict(BLOCK_M=128, BLOCK_N=128, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=4, num_stages=3),
    dict(BLOCK_M=64, BLOCK_N=64, num_warps=4, num_stages=3),
    dict(BLOCK_M=128, BLOCK_N=64, num_warps=8, num_stages=2),
    dict(BLOCK_M=64, BLOCK_N=32, num_warps=4, num_stages=2),
)


def flash_attention_fwd_config_names() -> list[str]:
    """The names of CONFIGS, in index order: m<BLOCK_M>_n<BLOCK_N>_w<warps>_s<stages>."""
    return [f"m{c['BLOCK_M']}_n{c['BLOCK_N']}_w{c['num_warps']}_s{c['num_stages']}" for c in CONFIGS]


def _config(head_dim: int) -> dict:
    """Tile and launch shape per head dim: 64 x 64 at 4 warps, 3 stages up to D = 128, close
    to the fastest config at every shape `gks autotune --backend triton --kernel
    flash_attention_fwd` timed; 128 x 64 at 4 warps for D <= 32; 128 x 64 at 8 warps, 2
    stages for D = 256, where smaller tiles run slower (docs/perf/attention.md), and for
    D = 192 (q and k pad to 256 columns, so it holds what 256 holds, with Dv = 192 or 128;
    not yet timed). None of these spills more than a few bytes (`python
    tools/dump_triton_ir.py --kernel flash_attention_fwd --shape 1x2x2x256x256xDx0` and the
    SASS)."""
    if head_dim <= 32:
        return CONFIGS[2]
    if head_dim <= 128:
        return CONFIGS[3]
    return CONFIGS[4]


def _check_inputs(q, k, v, op):
    check_device(q, op, "q")
    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'q' must be float16 or bfloat16, got {q.dtype}")
    check_same(q, "q", k, "k", op)  # the device first: a host k is named as on another device
    check_same(q, "q", v, "v", op)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(
                f"{op}: argument '{name}' must have 4 dims [batch, heads, seq, head_dim], "
                f"got {t.dim()} dims {list(t.shape)}"
            )
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(
                f"{op}: argument '{name}' must be contiguous in its last dim (stride 1), "
                f"got stride {t.stride(-1)}"
            )
    check_attention_shapes(op, q.shape, k.shape, v.shape)


@on_tensor_device
def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    config: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward with lse; the meaning of gks.flash_attention_fwd.

    q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv] (fp16/bf16, last dim contiguous,
    other strides free; D in {32, 64, 96, 128, 192, 256}, Dv = D or, with D = 192, 128).
    window_size (left, right), -1 unbounded: query i sees keys i + Sk - Sq - left to
    i + Sk - Sq + right (causal: right 0). softcap > 0 caps the scaled scores to
    softcap * tanh(s / softcap). Returns o [B, Hq, Sq, Dv] (q's dtype) and lse [B, Hq, Sq]
    (float32). config: an index into flash_attention_fwd_config_names() (the tile and
    launch shape), or -1: the tuned entry for this GPU and shape if `gks autotune --backend
    triton` made one, else a shape per head dim.
    """
    op = "gks.triton.flash_attention_fwd"
    if not isinstance(config, int) or not -1 <= config < len(CONFIGS):
        raise ValueError(f"{op}: argument 'config' must be -1 or an index below {len(CONFIGS)} "
                         f"(see gks.triton.flash_attention_fwd_config_names()), got {config!r}")
    _check_inputs(q, k, v, op)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    head_dim_v = v.shape[3]
    o = torch.empty((batch, heads_q, seqlen_q, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    if seqlen_k == 0:  # no keys: every row sees none (and k, v may have no storage at all)
        return o.zero_(), lse.fill_(float("-inf"))
    if config == -1:
        from gks.runtime import tables
        from gks.runtime.dims import attention_dims

        dims = attention_dims(q, k, causal, v)
        config = tables.resolve_config("triton.flash_attention_fwd", q, dims, -1)
    cfg = CONFIGS[config] if config >= 0 else _config(head_dim)
    if batch * heads_q > 65535:
        raise ValueError(f"{op}: at most 65535 (batch x query heads) are supported, got {batch * heads_q}")
    left, right = kernel_window(left, right, seqlen_q, seqlen_k)
    grid = (triton.cdiv(seqlen_q, cfg["BLOCK_M"]), batch * heads_q)
    _flash_attention_fwd_kernel[grid](
        q, k, v, o, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        o.stride(0), o.stride(1), o.stride(2),
        lse.stride(0), lse.stride(1),
        heads_q, heads_q // heads_kv, seqlen_q, seqlen_k, max(left, 0), max(right, 0),
        # With a cap the scale goes into the tanh's argument.
        LOG2E if cap else scale * LOG2E, scale / cap if cap else 1.0, cap,
        HEAD_DIM=head_dim, BLOCK_D=next_pow2(head_dim), HEAD_DIM_V=head_dim_v,
        BLOCK_DV=next_pow2(head_dim_v), LEFT=left >= 0, RIGHT=right >= 0,
        SOFTCAP=cap > 0, BOUNDS=seqlen_k % cfg["BLOCK_N"] != 0,
        UPCAST=q.dtype == torch.bfloat16 and interpreter_variant(), **cfg,
    )
    return o, lse


@on_tensor_device
def flash_attention_varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_k: torch.Tensor | None = None,
    page_table: torch.Tensor | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over packed sequences; the meaning of gks.flash_attention_varlen_fwd.

    q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv] (fp16/bf16, last dim
    contiguous, other strides free); cu_seqlens_q, cu_seqlens_k [B + 1] int32 and seqused_k
    [B] int32 on their device; with page_table [B, max_pages] int32, k and v are a paged cache
    [num_pages, page_size, Hkv, D]. The lengths are read by the kernel (no host synchronization);
    max_seqlen_q sizes the grid. Returns o [total_q, Hq, Dv] (q's dtype; rows in no sequence
    unwritten) and lse [Hq, total_q] (float32). The tile shape is flash_attention_fwd's
    heuristic for the head dim.
    """
    op = "gks.triton.flash_attention_varlen_fwd"
    check_device(q, op, "q")
    for name, t in (("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k),
                    ("seqused_k", seqused_k), ("page_table", page_table)):
        if t is not None:
            check_same_device(q, "q", t, name, op)
    check_varlen_inputs(op, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k, page_table)
    paged = page_table is not None
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv, head_dim_v = k.shape[0], k.shape[-2], v.shape[-1]
    # Strides: packed k [total, H, D] or paged [pages, page_size, H, D].
    k_page, k_sn, k_sh = (k.stride(0), k.stride(1), k.stride(2)) if paged else (0, k.stride(0), k.stride(1))
    v_page, v_sn, v_sh = (v.stride(0), v.stride(1), v.stride(2)) if paged else (0, v.stride(0), v.stride(1))
    page_size = k.shape[1] if paged else 1
    capacity = page_table.shape[1] * page_size if paged else total_k
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    batch = cu_seqlens_q.shape[0] - 1
    o = torch.empty((total_q, heads_q, head_dim_v), dtype=q.dtype, device=q.device)
    lse = torch.empty((heads_q, total_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0 or batch == 0:
        return o, lse
    if batch * heads_q > 65535:
        raise ValueError(f"{op}: at most 65535 (sequences x query heads) are supported, got {batch * heads_q}")
    cfg = _config(head_dim)
    # No sequence is longer than the packed totals (a paged one than its pages): bounds past
    # them are dropped.
    left, right = kernel_window(left, right, total_q, capacity)
    rows = min(max(int(max_seqlen_q), 1), total_q)
    grid = (triton.cdiv(rows, cfg["BLOCK_M"]), batch * heads_q)
    _flash_attention_varlen_fwd_kernel[grid](
        q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, cu_seqlens_q if seqused_k is None else seqused_k,
        cu_seqlens_q if page_table is None else page_table,
        q.stride(1), q.stride(0), k_sh, k_sn, v_sh, v_sn, o.stride(1), o.stride(0), lse.stride(0), k_page, v_page,
        page_table.stride(0) if paged else 0,
        total_q, total_k, page_size, k.shape[0] if paged else 0, capacity, heads_q, heads_q // heads_kv,
        max(left, 0), max(right, 0), LOG2E if cap else scale * LOG2E, scale / cap if cap else 1.0, cap,
        HEAD_DIM=head_dim, BLOCK_D=next_pow2(head_dim), HEAD_DIM_V=head_dim_v, BLOCK_DV=next_pow2(head_dim_v),
        LEFT=left >= 0, RIGHT=right >= 0, SOFTCAP=cap > 0, USED=seqused_k is not None, PAGED=paged,
        UPCAST=q.dtype == torch.bfloat16 and interpreter_variant(), **cfg,
    )
    return o, lse


# ---- merge_state / merge_states (see gks.specs.attention): BLOCK_R rows a program, their
# states' scores read first (max, then the sum of weights), then v in BLOCK_D columns at a
# time; a state whose weight is 0 (it saw no key) is masked out of the loads, so its v is
# never read. Pairwise (STACKED false) the two states are two tensors; stacked, state k of
# a row is k strides further.

@triton.jit
def _state(k, row0, row1, k_stride, STACKED: tl.constexpr):
    if STACKED:
        return row0 + k * k_stride
    return tl.where(k == 0, row0, row1)


@triton.jit
def _merge_state_kernel(
    v0_ptr, v1_ptr, s0_ptr, s1_ptr, vo_ptr, so_ptr, ROWS, D, K, v_kstride, s_kstride,
    v0_inner, v0_outer, v0_in, v1_inner, v1_outer, v1_in,
    s0_inner, s0_outer, s0_in, s1_inner, s1_outer, s1_in,
    vo_inner, vo_outer, vo_in, so_inner, so_outer, so_in,
    BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr, STACKED: tl.constexpr,
):
    rows = tl.program_id(0).to(tl.int64) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = rows < ROWS
    rows = tl.where(live, rows, 0)
    s0 = row_start(s0_ptr, rows, s0_inner, s0_outer, s0_in)
    s1 = row_start(s1_ptr, rows, s1_inner, s1_outer, s1_in)
    v0 = row_start(v0_ptr, rows, v0_inner, v0_outer, v0_in)
    v1 = row_start(v1_ptr, rows, v1_inner, v1_outer, v1_in)
    m = tl.full([BLOCK_R], float("-inf"), tl.float32)
    invalid = tl.zeros([BLOCK_R], tl.int1)
    for k in range(0, K):
        s = tl.load(_state(k, s0, s1, s_kstride, STACKED), mask=live, other=float("-inf"))
        invalid = invalid | (s != s) | (s == float("inf"))
        m = tl.maximum(m, tl.where(s != s, float("-inf"), s))
    seen = (m != float("-inf")) & ~invalid
    m = tl.where(seen, m, 0.0)
    total = tl.zeros([BLOCK_R], tl.float32)
    for k in range(0, K):
        s = tl.load(_state(k, s0, s1, s_kstride, STACKED), mask=live, other=float("-inf"))
        total += tl.where(seen, tl.exp(s - m), 0.0)
    inv = tl.where(invalid, float("nan"), tl.where(seen, 1.0 / tl.where(seen, total, 1.0), 0.0))
    vo = row_start(vo_ptr, rows, vo_inner, vo_outer, vo_in)
    for d0 in range(0, D, BLOCK_D):
        cols = d0 + tl.arange(0, BLOCK_D)
        cmask = cols < D
        acc = tl.zeros([BLOCK_R, BLOCK_D], tl.float32)
        for k in range(0, K):
            s = tl.load(_state(k, s0, s1, s_kstride, STACKED), mask=live, other=float("-inf"))
            w = tl.where(seen, tl.exp(s - m), 0.0)
            v = _state(k, v0, v1, v_kstride, STACKED)
            x = tl.load(v[:, None] + cols[None, :], mask=(live & (w > 0))[:, None] & cmask[None, :], other=0.0)
            acc += w[:, None] * x.to(tl.float32)
        tl.store(vo[:, None] + cols[None, :], (acc * inv[:, None]).to(vo_ptr.dtype.element_ty),
                 mask=live[:, None] & cmask[None, :])
    lse = tl.where(invalid, float("nan"), tl.where(seen, m + tl.log(tl.where(seen, total, 1.0)), float("-inf")))
    tl.store(row_start(so_ptr, rows, so_inner, so_outer, so_in), lse, mask=live)


def _check_scores(s: torch.Tensor, v: torch.Tensor, v_name: str, op: str, name: str, want, what: str) -> None:
    check_same_device(v, v_name, s, name, op)
    if s.dtype != torch.float32:
        raise TypeError(f"{op}: argument '{name}' must be float32, got {s.dtype}")
    if tuple(s.shape) != tuple(want):
        raise ValueError(f"{op}: argument '{name}' must be {list(want)} ({what}), got {list(s.shape)}")


def _score_rows(s: torch.Tensor, op: str, name: str):
    return row_layout(s.unsqueeze(-1), op, name)


def _launch_merge(v0, v1, s0, s1, v_out, s_out, rows, d, k, v_kstride, s_kstride, layouts, stacked: bool):
    if rows == 0:
        return
    block_d = min(next_pow2(max(d, 1)), 128)
    block_r = max(1, min(64, 2048 // block_d))
    args = []
    for r in layouts:
        args += [r.inner, r.outer_stride, r.inner_stride]
    _merge_state_kernel[(triton.cdiv(rows, block_r),)](
        v0, v1, s0, s1, v_out, s_out, rows, d, k, v_kstride, s_kstride, *args,
        BLOCK_R=block_r, BLOCK_D=block_d, STACKED=stacked, num_warps=4,
    )


@on_tensor_device
def merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor,
                s_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gks.merge_state's meaning: (v_a, s_a) and (v_b, s_b) merged into (v, s)."""
    op = "gks.triton.merge_state"
    check_device(v_a, op, "v_a")
    check_float(v_a, op, "v_a")
    ar = row_layout(v_a, op, "v_a")
    check_same(v_a, "v_a", v_b, "v_b", op)
    if v_b.shape != v_a.shape:
        raise ValueError(f"{op}: argument 'v_b' must have the shape of 'v_a' {list(v_a.shape)}, got {list(v_b.shape)}")
    br = row_layout(v_b, op, "v_b")
    lead = tuple(v_a.shape[:-1])
    for s, name in ((s_a, "s_a"), (s_b, "s_b")):
        _check_scores(s, v_a, "v_a", op, name, lead, "v_a's shape without its last dim")
    v = torch.empty_like(v_a, memory_format=torch.contiguous_format)
    s = torch.empty(lead, dtype=torch.float32, device=v_a.device)
    layouts = (ar, br, _score_rows(s_a, op, "s_a"), _score_rows(s_b, op, "s_b"), row_layout(v, op, "v"),
               _score_rows(s, op, "s"))
    _launch_merge(v_a, v_b, s_a, s_b, v, s, ar.rows, ar.cols, 2, 0, 0, layouts, stacked=False)
    return v, s


@on_tensor_device
def merge_states(v: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """gks.merge_states's meaning: the K states of each row, v [..., K, D], s [..., K], merged."""
    op = "gks.triton.merge_states"
    check_device(v, op, "v")
    check_float(v, op, "v")
    if v.dim() < 2:
        raise ValueError(f"{op}: argument 'v' must be [..., K, D] (2 to 8 dims), got {list(v.shape)}")
    _check_scores(s, v, "v", op, "s", tuple(v.shape[:-1]), "v's shape without its last dim")
    lead, k = tuple(v.shape[:-2]), v.shape[-2]
    v_out = torch.empty((*lead, v.shape[-1]), dtype=v.dtype, device=v.device)
    s_out = torch.empty(lead, dtype=torch.float32, device=v.device)
    # The rows are state 0's: [..., D] at v's strides (with no states, the output's rows).
    vr = row_layout(v.select(-2, 0) if k else v_out, op, "v")
    s_rows = _score_rows(s.select(-1, 0) if k else s_out, op, "s")
    layouts = (vr, vr, s_rows, s_rows, row_layout(v_out, op, "v_out"), _score_rows(s_out, op, "s_out"))
    k = v.shape[-2]
    _launch_merge(v, v, s, s, v_out, s_out, vr.rows, vr.cols, k, v.stride(-2), s.stride(-1), layouts, stacked=True)
    return v_out, s_out


# ---- flash_attention_decode (see gks.specs.attention): the CUDA kernel's two phases. A
# program per (row block x split, KV head, batch) holds the G x Sq query rows of the G heads
# sharing the KV head (GQA packed, so K/V are read once for them), walks its split of the
# sequence's key tiles with the online softmax, and writes o and lse (one split) or fp32
# partials, which _merge_state_kernel then merges into o. The splits deal out the tiles of
# the span the sequence's queries see, from its length read on the device.

@triton.jit(do_not_specialize=["win_left", "win_right", "page_size", "num_pages", "capacity"])
def _decode_split_kernel(
    q_ptr, k_ptr, v_ptr, lens_ptr, pt_ptr, o_ptr, lse_ptr,
    q_sb, q_sh, q_sm,
    k_sb, k_sh, k_sn,
    v_sb, v_sh, v_sn,
    pt_sb, pt_sp,
    o_ss, o_sb, o_sh, o_sm,
    lse_ss, lse_sb, lse_sh, lse_sm,
    group, seqlen_q, capacity, num_pages, page_size, splits, m_blocks,
    win_left, win_right, scale_log2, cap_in, cap_out,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGED: tl.constexpr,
    LEFT: tl.constexpr, RIGHT: tl.constexpr, SOFTCAP: tl.constexpr, UPCAST: tl.constexpr,
):
    # Dense caches: k_sb, k_sh, k_sn are the (batch, head, row) strides; paged ones: (page,
    # head, row within the page).
    pid = tl.program_id(0)
    m_block = pid % m_blocks
    split = pid // m_blocks
    kv_head = tl.program_id(1).to(tl.int64)
    batch = tl.program_id(2).to(tl.int64)

    offs_r = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < group * seqlen_q
    head = kv_head * group + offs_r // seqlen_q  # rows: head-major, then query
    query = offs_r % seqlen_q
    offs_d = tl.arange(0, HEAD_DIM)
    offs_n = tl.arange(0, BLOCK_N)
    q = tl.load(q_ptr + batch * q_sb + head[:, None] * q_sh + query[:, None].to(tl.int64) * q_sm + offs_d[None, :],
                mask=row_ok[:, None], other=0.0)

    length = tl.minimum(tl.maximum(tl.load(lens_ptr + batch), 0), capacity)
    # Query i sits at length - Sq + i and sees keys [lo, hi).
    pos = length - seqlen_q + query
    hi = tl.zeros([BLOCK_M], tl.int32) + length
    lo = tl.zeros([BLOCK_M], tl.int32)
    span_lo = 0
    span_hi = length
    if RIGHT:
        hi = tl.maximum(tl.minimum(hi, pos + win_right + 1), 0)
        span_hi = tl.maximum(tl.minimum(length, length + win_right), 0)
    if LEFT:
        lo = tl.maximum(pos - win_left, 0)
        span_lo = tl.maximum(length - seqlen_q - win_left, 0)
    hi = tl.where(row_ok, hi, 0)
    tile_lo = span_lo // BLOCK_N
    tile_hi = tl.where(span_hi > span_lo, (span_hi + BLOCK_N - 1) // BLOCK_N, tile_lo)
    per = (tile_hi - tile_lo + splits - 1) // splits
    t_begin = tl.minimum(tile_lo + split * per, tile_hi)
    t_end = tl.minimum(t_begin + per, tile_hi)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    k_head = k_ptr + kv_head * k_sh
    v_head = v_ptr + kv_head * v_sh
    for start_n in tl.range(t_begin * BLOCK_N, t_end * BLOCK_N, BLOCK_N):
        cols = start_n + offs_n
        ok = cols < length
        if PAGED:
            page = tl.load(pt_ptr + batch * pt_sb + (cols // page_size).to(tl.int64) * pt_sp, mask=ok, other=0)
            ok = ok & (page >= 0) & (page < num_pages)  # another page index reads as zeros
            page = tl.where(ok, page, 0).to(tl.int64)
            in_page = (cols % page_size).to(tl.int64)
            k_rows = page * k_sb + in_page * k_sn
            v_rows = page * v_sb + in_page * v_sn
        else:
            k_rows = batch * k_sb + cols.to(tl.int64) * k_sn
            v_rows = batch * v_sb + cols.to(tl.int64) * v_sn
        k = tl.load(k_head + k_rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        s = _dot(q, tl.trans(k), UPCAST)
        if SOFTCAP:
            s = cap_out * _tanh(s * cap_in)
        seen = (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])
        s = tl.where(seen, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1) * scale_log2)
        shift = tl.where(m_new == float("-inf"), 0.0, m_new)  # a row that saw no key yet
        p = tl.math.exp2(s * scale_log2 - shift[:, None])
        correction = tl.math.exp2(m_i - shift)
        l_i = l_i * correction + tl.sum(p, 1)
        acc = acc * correction[:, None]
        v = tl.load(v_head + v_rows[:, None] + offs_d[None, :], mask=ok[:, None], other=0.0)
        acc = _dot_acc(p.to(v.dtype), v, acc, UPCAST)
        m_i = m_new

    seen_any = l_i != 0.0
    inv_l = tl.where(seen_any, 1.0 / tl.where(seen_any, l_i, 1.0), 0.0)
    lse = tl.where(seen_any, (m_i + tl.math.log2(tl.where(seen_any, l_i, 1.0))) * 0.6931471805599453,
                   float("-inf"))
    at = split.to(tl.int64) * o_ss + batch * o_sb + head * o_sh + query.to(tl.int64) * o_sm
    tl.store(o_ptr + at[:, None] + offs_d[None, :], (acc * inv_l[:, None]).to(o_ptr.dtype.element_ty),
             mask=row_ok[:, None])
    lse_at = split.to(tl.int64) * lse_ss + batch * lse_sb + head * lse_sh + query.to(tl.int64) * lse_sm
    tl.store(lse_ptr + lse_at, lse, mask=row_ok)


DECODE_BLOCK_N = 64


def _sm_count(device: torch.device) -> int:
    """The SMs the split count plans for (132, an H100/H200's, under the interpreter)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 132


@on_tensor_device
def flash_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    page_table: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    num_splits: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """gks.flash_attention_decode's meaning: split-KV attention of each sequence's Sq last
    positions over its dense ([B, Hkv, S_max, D]) or paged ([num_pages, page_size, Hkv, D]
    with page_table [B, max_pages] int32) cache of cache_seqlens[b] keys. Returns o
    [B, Hq, Sq, D] (q's dtype) and lse [B, Hq, Sq] (float32). num_splits 0 chooses from the
    shapes and the SM count alone (the same rule as the CUDA kernel's, for its 64-key tiles)."""
    op = DECODE_OP.replace("gks.", "gks.triton.")
    check_device(q, op, "q")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache), ("cache_seqlens", cache_seqlens),
                    ("page_table", page_table)):
        if t is not None:
            check_same_device(q, "q", t, name, op)
    check_decode_inputs(op, q, k_cache, v_cache, cache_seqlens, page_table)
    batch, heads_q, seqlen_q, head_dim = q.shape
    paged = page_table is not None
    heads_kv = k_cache.shape[2] if paged else k_cache.shape[1]
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    splits = checked_num_splits(op, num_splits)
    o = torch.empty((batch, heads_q, seqlen_q, head_dim), dtype=q.dtype, device=q.device)
    lse = torch.empty((batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    capacity = decode_capacity(k_cache.shape, None if page_table is None else page_table.shape)
    if batch > 65535 or heads_kv > 65535:
        raise ValueError(f"{op}: at most 65535 key/value heads and 65535 sequences are supported, got "
                         f"{heads_kv} and {batch}")
    # The bounds no row can reach are dropped (as the C++ API does): right >= Sq - 1, left >=
    # capacity - 1.
    right = right if 0 <= right < seqlen_q - 1 else -1
    left = left if 0 <= left < capacity - 1 else -1
    rows = heads_q // heads_kv * seqlen_q
    block_m = min(64, max(16, next_pow2(rows)))
    m_blocks = triton.cdiv(rows, block_m)
    if splits == 0:
        splits = decode_num_splits(batch, heads_kv, m_blocks, capacity, DECODE_BLOCK_N, _sm_count(q.device))
    if splits > 1:  # fp32 partials [splits, B, Hq, Sq, D] and their lse, merged below
        target = torch.empty((splits, batch, heads_q, seqlen_q, head_dim), dtype=torch.float32, device=q.device)
        target_lse = torch.empty((splits, batch, heads_q, seqlen_q), dtype=torch.float32, device=q.device)
        o_strides, lse_strides = target.stride()[:4], target_lse.stride()
    else:
        target, target_lse = o, lse
        o_strides, lse_strides = (0, *o.stride()[:3]), (0, *lse.stride())
    if paged:  # [pages, page_size, Hkv, D]: (page, head, row in page) strides
        k_strides = (k_cache.stride(0), k_cache.stride(2), k_cache.stride(1))
        v_strides = (v_cache.stride(0), v_cache.stride(2), v_cache.stride(1))
        table, table_strides, page_size, num_pages = page_table, page_table.stride(), k_cache.shape[1], k_cache.shape[0]
    else:
        k_strides, v_strides = k_cache.stride()[:3], v_cache.stride()[:3]
        table, table_strides, page_size, num_pages = cache_seqlens, (0, 0), 1, 0
    grid = (m_blocks * splits, heads_kv, batch)
    _decode_split_kernel[grid](
        q, k_cache, v_cache, cache_seqlens, table, target, target_lse,
        *q.stride()[:3], *k_strides, *v_strides, *table_strides, *o_strides, *lse_strides,
        heads_q // heads_kv, seqlen_q, capacity, num_pages, page_size, splits, m_blocks,
        max(left, 0), max(right, 0), LOG2E if cap else scale * LOG2E, scale / cap if cap else 1.0, cap,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=DECODE_BLOCK_N, PAGED=paged, LEFT=left >= 0,
        RIGHT=right >= 0, SOFTCAP=cap > 0, UPCAST=q.dtype == torch.bfloat16 and interpreter_variant(),
        num_warps=4, num_stages=3 if head_dim <= 128 else 2,
    )
    if splits > 1:
        rows_all = batch * heads_q * seqlen_q
        vr = row_layout(target[0], op, "o")
        sr = _score_rows(target_lse[0], op, "lse")
        layouts = (vr, vr, sr, sr, row_layout(o, op, "o"), _score_rows(lse, op, "lse"))
        _launch_merge(target, target, target_lse, target_lse, o, lse, rows_all, head_dim, splits,
                      target.stride(0), target_lse.stride(0), layouts, stacked=True)
    return o, lse


# ---- flash_attention_bwd (see gks.specs.attention), FlashAttention-2's split: a preprocess
# kernel per query block (delta = rowsum(dO * O) and lse in log2 units, fp32), then one
# program per (key block, batch x KV head) that recomputes P^T from k, q and lse for every
# query block of every query head of its group, accumulating dK and dV in registers, and one
# program per (query block, batch x query head) for dQ. Each gradient is summed in one
# program in a fixed order: deterministic, no atomics, and GQA's sum over the group happens
# in the dK/dV program. Masks, bounds and head-dim padding are the forward's.

@triton.jit
def _bwd_sequence(cu_q_ptr, cu_k_ptr, batch, seqlen_q, seqlen_k, total_q, total_k, VARLEN: tl.constexpr):
    """(q0, seqlen_q, k0, seqlen_k): where batch entry `batch` lies. Dense: rows from 0 (the
    batch strides place it); varlen: sequence `batch` of the packed tensors, its bounds read
    from cu_seqlens and clamped into them (as the CUDA kernels' sequence_rows)."""
    if VARLEN:
        q0 = _clamp(tl.load(cu_q_ptr + batch).to(tl.int64), 0, total_q)
        q1 = _clamp(tl.load(cu_q_ptr + batch + 1).to(tl.int64), q0, total_q)
        k0 = _clamp(tl.load(cu_k_ptr + batch).to(tl.int64), 0, total_k)
        k1 = _clamp(tl.load(cu_k_ptr + batch + 1).to(tl.int64), k0, total_k)
        return q0, (q1 - q0).to(tl.int32), k0, (k1 - k0).to(tl.int32)
    return tl.zeros((), tl.int64), seqlen_q, tl.zeros((), tl.int64), seqlen_k


# Every backward kernel: program (i, b * H + h) takes blocks i, i + grid, ... of batch entry
# b (dense: its one block; varlen: sequence b's, so one longer than max_seqlen is still
# computed whole). delta and lse2 are [B, Hq, Sq] contiguous, or varlen [Hq, total_q]
# (st_sb, st_sh: their batch and head strides, st_sb 0 for varlen).
@triton.jit
def _bwd_preprocess_kernel(
    o_ptr, do_ptr, lse_ptr, delta_ptr, lse2_ptr, cu_q_ptr,
    o_sb, o_sh, o_sm, do_sb, do_sh, do_sm, lse_sb, lse_sh, lse_sm, st_sb, st_sh,
    heads_q, seqlen_q, total_q,
    HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr, BLOCK_M: tl.constexpr, VARLEN: tl.constexpr,
):
    bh = tl.program_id(1)
    batch = (bh // heads_q).to(tl.int64)
    head = (bh % heads_q).to(tl.int64)
    q0, seqlen_q, _, _ = _bwd_sequence(cu_q_ptr, cu_q_ptr, batch, seqlen_q, 0, total_q, 0, VARLEN)
    offs_dv = tl.arange(0, BLOCK_DV)
    for block in range(tl.program_id(0), tl.cdiv(seqlen_q, BLOCK_M), tl.num_programs(0)):
        offs_m = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = offs_m < seqlen_q
        mask = row_ok[:, None] & (offs_dv[None, :] < HEAD_DIM_V)
        rows = q0 + offs_m[:, None].to(tl.int64)
        o = tl.load(o_ptr + batch * o_sb + head * o_sh + rows * o_sm + offs_dv[None, :], mask=mask, other=0.0)
        do = tl.load(do_ptr + batch * do_sb + head * do_sh + rows * do_sm + offs_dv[None, :], mask=mask, other=0.0)
        delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
        lse = tl.load(lse_ptr + batch * lse_sb + head * lse_sh + (q0 + offs_m.to(tl.int64)) * lse_sm, mask=row_ok,
                      other=0.0)
        # A row that saw no key (lse = -inf) has P = 0: +inf makes exp2(s - lse) 0 for it.
        lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
        at = batch * st_sb + head * st_sh + q0 + offs_m
        tl.store(delta_ptr + at, delta, mask=row_ok)
        tl.store(lse2_ptr + at, lse2, mask=row_ok)


@triton.jit
def _rounded(x, dtype: tl.constexpr, UPCAST: tl.constexpr):
    """x (fp32) rounded to dtype. Triton's interpreter truncates fp32 to bfloat16 where a GPU
    rounds to nearest even: its variant (UPCAST, whose bf16 dot operands go to fp32 anyway)
    rounds by hand and keeps fp32 (exact in bf16, so a later cast is exact too)."""
    if UPCAST:
        bits = x.to(tl.uint32, bitcast=True)
        bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
        return tl.where(x != x, x, bits.to(tl.float32, bitcast=True))  # a NaN's bits may wrap
    return x.to(dtype)


@triton.jit
def _bwd_scores(a, b, qk_log2, cap_in, cap_log2, SOFTCAP: tl.constexpr, UPCAST: tl.constexpr):
    """a b^T in log2 units (scaled, capped under a softcap), and tanh of the capped argument
    (for its derivative; the raw product when there is no cap)."""
    s = _dot(a, tl.trans(b), UPCAST)
    if SOFTCAP:
        t = _tanh(s * cap_in)
        return t * cap_log2, t
    return s * qk_log2, s


@triton.jit(do_not_specialize=["win_left", "win_right"])
def _bwd_dkdv_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dk_ptr, dv_ptr, cu_q_ptr, cu_k_ptr,
    q_sb, q_sh, q_sm, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, do_sb, do_sh, do_sm,
    dk_sb, dk_sh, dk_sn, dv_sb, dv_sh, dv_sn, st_sb, st_sh,
    heads_q, heads_kv, group, seqlen_q, seqlen_k, total_q, total_k, win_left, win_right, scale, qk_log2, cap_in,
    cap_log2,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LEFT: tl.constexpr, RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr, UPCAST: tl.constexpr, VARLEN: tl.constexpr,
):
    bh = tl.program_id(1)
    batch = (bh // heads_kv).to(tl.int64)
    kv_head = (bh % heads_kv).to(tl.int64)
    q0, seqlen_q, k0, seqlen_k = _bwd_sequence(cu_q_ptr, cu_k_ptr, batch, seqlen_q, seqlen_k, total_q, total_k,
                                               VARLEN)
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < HEAD_DIM_V
    # Row i sees key j when i + diag - left <= j <= i + diag + right.
    diag = seqlen_k - seqlen_q
    q_step = BLOCK_M * tl.cast(q_sm, tl.int64)
    do_step = BLOCK_M * tl.cast(do_sm, tl.int64)
    for n_block in range(tl.program_id(0), tl.cdiv(seqlen_k, BLOCK_N), tl.num_programs(0)):
        n0 = n_block * BLOCK_N
        offs_n = n0 + tl.arange(0, BLOCK_N)
        key_ok = offs_n < seqlen_k
        cols = k0 + offs_n[:, None].to(tl.int64)
        k = tl.load(k_ptr + batch * k_sb + kv_head * k_sh + cols * k_sn + offs_d[None, :],
                    mask=key_ok[:, None] & d_mask[None, :], other=0.0)
        v = tl.load(v_ptr + batch * v_sb + kv_head * v_sh + cols * v_sn + offs_dv[None, :],
                    mask=key_ok[:, None] & dv_mask[None, :], other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_DV], dtype=tl.float32)
        # The rows that see a key of this block: n0 - diag - right ... n0 + BLOCK_N - 1 - diag + left.
        if RIGHT:
            lo = tl.minimum(tl.maximum(n0 - diag - win_right, 0), seqlen_q) // BLOCK_M * BLOCK_M
        else:
            lo = 0
        if LEFT:
            hi = tl.minimum(tl.maximum(n0 + BLOCK_N - diag + win_left, 0), seqlen_q)
        else:
            hi = seqlen_q
        for g in range(0, group):
            head = kv_head * group + g
            q_rows = (q0 + lo + offs_m)[:, None].to(tl.int64)
            q_ptrs = q_ptr + batch * q_sb + head * q_sh + q_rows * q_sm + offs_d[None, :]
            do_ptrs = do_ptr + batch * do_sb + head * do_sh + q_rows * do_sm + offs_dv[None, :]
            row_base = batch * st_sb + head * st_sh + q0
            for start_m in tl.range(lo, hi, BLOCK_M):
                rows = start_m + offs_m
                row_ok = rows < seqlen_q
                q = tl.load(q_ptrs, mask=row_ok[:, None] & d_mask[None, :], other=0.0)
                do = tl.load(do_ptrs, mask=row_ok[:, None] & dv_mask[None, :], other=0.0)
                # Rows past Sq: lse2 = +inf, so P = 0 there.
                lse2 = tl.load(lse2_ptr + row_base + rows, mask=row_ok, other=float("inf"))
                delta = tl.load(delta_ptr + row_base + rows, mask=row_ok, other=0.0)
                s_t, t_t = _bwd_scores(k, q, qk_log2, cap_in, cap_log2, SOFTCAP=SOFTCAP, UPCAST=UPCAST)
                # Only the tiles that cross a bound of the window pay for its mask (keys past Sk
                # need none: their rows of dK, dV are never stored).
                if RIGHT:
                    if n0 + BLOCK_N > start_m + diag + win_right + 1:
                        s_t = tl.where(offs_n[:, None] <= rows[None, :] + diag + win_right, s_t, float("-inf"))
                if LEFT:
                    if n0 < start_m + BLOCK_M - 1 + diag - win_left:
                        s_t = tl.where(offs_n[:, None] >= rows[None, :] + diag - win_left, s_t, float("-inf"))
                p_t = tl.math.exp2(s_t - lse2[None, :])
                dv = _dot_acc(_rounded(p_t, do.dtype, UPCAST), do, dv, UPCAST)
                ds_t = p_t * (_dot(v, tl.trans(do), UPCAST) - delta[None, :])
                if SOFTCAP:
                    ds_t = ds_t * (1.0 - t_t * t_t)
                dk = _dot_acc(_rounded(ds_t, q.dtype, UPCAST), q, dk, UPCAST)
                q_ptrs += q_step
                do_ptrs += do_step
        dk_ty: tl.constexpr = dk_ptr.dtype.element_ty
        dv_ty: tl.constexpr = dv_ptr.dtype.element_ty
        tl.store(dk_ptr + batch * dk_sb + kv_head * dk_sh + cols * dk_sn + offs_d[None, :],
                 _rounded(dk * scale, dk_ty, UPCAST).to(dk_ty), mask=key_ok[:, None] & d_mask[None, :])
        tl.store(dv_ptr + batch * dv_sb + kv_head * dv_sh + cols * dv_sn + offs_dv[None, :],
                 _rounded(dv, dv_ty, UPCAST).to(dv_ty), mask=key_ok[:, None] & dv_mask[None, :])


@triton.jit(do_not_specialize=["win_left", "win_right"])
def _bwd_dq_kernel(
    q_ptr, k_ptr, v_ptr, do_ptr, lse2_ptr, delta_ptr, dq_ptr, cu_q_ptr, cu_k_ptr,
    q_sb, q_sh, q_sm, k_sb, k_sh, k_sn, v_sb, v_sh, v_sn, do_sb, do_sh, do_sm, dq_sb, dq_sh, dq_sm, st_sb, st_sh,
    heads_q, group, seqlen_q, seqlen_k, total_q, total_k, win_left, win_right, scale, qk_log2, cap_in, cap_log2,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, HEAD_DIM_V: tl.constexpr, BLOCK_DV: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, LEFT: tl.constexpr, RIGHT: tl.constexpr,
    SOFTCAP: tl.constexpr, BOUNDS: tl.constexpr, UPCAST: tl.constexpr, VARLEN: tl.constexpr,
):
    bh = tl.program_id(1)
    batch = (bh // heads_q).to(tl.int64)
    head = (bh % heads_q).to(tl.int64)
    kv_head = head // group
    q0, seqlen_q, k0, seqlen_k = _bwd_sequence(cu_q_ptr, cu_k_ptr, batch, seqlen_q, seqlen_k, total_q, total_k,
                                               VARLEN)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    offs_dv = tl.arange(0, BLOCK_DV)
    d_mask = offs_d < HEAD_DIM
    dv_mask = offs_dv < HEAD_DIM_V
    k_step = BLOCK_N * tl.cast(k_sn, tl.int64)
    v_step = BLOCK_N * tl.cast(v_sn, tl.int64)
    row_base = batch * st_sb + head * st_sh + q0
    if VARLEN:
        first = tl.program_id(0)
    else:
        first = _first_block(LEFT, RIGHT)
    for m_block in range(first, tl.cdiv(seqlen_q, BLOCK_M), tl.num_programs(0)):
        m0 = m_block * BLOCK_M
        offs_m = m0 + tl.arange(0, BLOCK_M)
        row_ok = offs_m < seqlen_q
        rows = q0 + offs_m[:, None].to(tl.int64)
        q = tl.load(q_ptr + batch * q_sb + head * q_sh + rows * q_sm + offs_d[None, :],
                    mask=row_ok[:, None] & d_mask[None, :], other=0.0)
        do = tl.load(do_ptr + batch * do_sb + head * do_sh + rows * do_sm + offs_dv[None, :],
                     mask=row_ok[:, None] & dv_mask[None, :], other=0.0)
        lse2 = tl.load(lse2_ptr + row_base + offs_m, mask=row_ok, other=float("inf"))
        delta = tl.load(delta_ptr + row_base + offs_m, mask=row_ok, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        # The forward's walk.
        diag, lo, hi = _key_walk(m0, seqlen_q, seqlen_k, win_left, win_right, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N,
                                 LEFT=LEFT, RIGHT=RIGHT)
        key_rows = (k0 + lo + offs_n)[:, None].to(tl.int64)
        k_ptrs = k_ptr + batch * k_sb + kv_head * k_sh + key_rows * k_sn + offs_d[None, :]
        v_ptrs = v_ptr + batch * v_sb + kv_head * v_sh + key_rows * v_sn + offs_dv[None, :]
        for start_n in tl.range(lo, hi, BLOCK_N):
            cols = start_n + offs_n
            key_ok = cols < seqlen_k
            k = tl.load(k_ptrs, mask=key_ok[:, None] & d_mask[None, :], other=0.0)
            v = tl.load(v_ptrs, mask=key_ok[:, None] & dv_mask[None, :], other=0.0)
            s, t = _bwd_scores(q, k, qk_log2, cap_in, cap_log2, SOFTCAP=SOFTCAP, UPCAST=UPCAST)
            if BOUNDS:  # keys past Sk: P = 0 (their zero rows of k would still give P > 0)
                s = tl.where(key_ok[None, :], s, float("-inf"))
            if RIGHT:
                if start_n + BLOCK_N > m0 + diag + win_right + 1:
                    s = tl.where(cols[None, :] <= offs_m[:, None] + diag + win_right, s, float("-inf"))
            if LEFT:
                if start_n < m0 + BLOCK_M - 1 + diag - win_left:
                    s = tl.where(cols[None, :] >= offs_m[:, None] + diag - win_left, s, float("-inf"))
            p = tl.math.exp2(s - lse2[:, None])
            ds = p * (_dot(do, tl.trans(v), UPCAST) - delta[:, None])
            if SOFTCAP:
                ds = ds * (1.0 - t * t)
            dq = _dot_acc(_rounded(ds, k.dtype, UPCAST), k, dq, UPCAST)
            k_ptrs += k_step
            v_ptrs += v_step
        dq_ty: tl.constexpr = dq_ptr.dtype.element_ty
        tl.store(dq_ptr + batch * dq_sb + head * dq_sh + rows * dq_sm + offs_d[None, :],
                 _rounded(dq * scale, dq_ty, UPCAST).to(dq_ty), mask=row_ok[:, None] & d_mask[None, :])


# Tiles per padded head dim (the larger of q/k's and v's): (BLOCK_M, BLOCK_N, warps, stages)
# of the dK/dV kernel (BLOCK_N keys held, BLOCK_M query rows a step) and of the dQ kernel
# (BLOCK_M rows held, BLOCK_N keys a step). FlashAttention-2's shapes, smaller as the head
# dim grows, with the warps that keep the fp32 accumulators in registers on sm_90 (no
# spills in the SASS of tools/dump_triton_ir.py; at 4 warps the D = 64 dK/dV tile spills).
# Not yet timed on a GPU.
BWD_CONFIGS = {
    64: ((32, 128, 8, 3), (128, 32, 4, 3)),
    128: ((32, 64, 8, 2), (64, 32, 8, 2)),
    256: ((16, 64, 8, 1), (64, 16, 8, 1)),
}
BWD_PRE_BLOCK_M = 64


def _bwd_config(head_dim: int, head_dim_v: int):
    width = max(next_pow2(head_dim), next_pow2(head_dim_v))
    return BWD_CONFIGS[64 if width <= 64 else 128 if width <= 128 else 256]


def _check_bwd_inputs(op, do, q, k, v, o, lse):
    """q, k, v as the forward checks them, then do, o (q's device and dtype, 4 dims, last dim
    contiguous, [B, Hq, Sq, Dv]) and lse (float32 [B, Hq, Sq], any strides)."""
    _check_inputs(q, k, v, op)
    check_same(q, "q", o, "o", op)
    check_same_device(q, "q", lse, "lse", op)
    check_same(q, "q", do, "do", op)
    if lse.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'lse' must be float32, got {lse.dtype}")
    check_bwd_shapes(op, q.shape, v.shape, do.shape, o.shape, lse.shape)
    for name, t in (("do", do), ("o", o)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{op}: argument '{name}' must be contiguous in its last dim (stride 1), got "
                             f"stride {t.stride(-1)}")


@on_tensor_device
def flash_attention_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The attention backward; the meaning of gks.reference.flash_attention_bwd.

    do, o [B, Hq, Sq, Dv] (the gradient of o and o, q's dtype, last dim contiguous), lse
    [B, Hq, Sq] (float32) from flash_attention_fwd, and q, k, v and the options as it takes
    them. Returns dq [B, Hq, Sq, D], dk [B, Hkv, Sk, D], dv [B, Hkv, Sk, Dv] (q's dtype,
    contiguous; dk, dv summed over each KV head's query heads). Deterministic whatever
    `deterministic` says (taken for the CUDA op's signature): the same inputs give the same
    bits.
    """
    op = "gks.triton.flash_attention_bwd"
    _check_bwd_inputs(op, do, q, k, v, o, lse)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    dq = torch.empty((batch, heads_q, seqlen_q, head_dim), dtype=q.dtype, device=q.device)
    dk = torch.empty((batch, heads_kv, seqlen_k, head_dim), dtype=q.dtype, device=q.device)
    dv = torch.empty((batch, heads_kv, seqlen_k, head_dim_v), dtype=q.dtype, device=q.device)
    if batch * heads_q == 0:
        return dq, dk, dv
    if seqlen_q == 0 or seqlen_k == 0:  # no pairs: every gradient is 0
        return dq.zero_(), dk.zero_(), dv.zero_()
    if batch * heads_q > 65535:
        raise ValueError(f"{op}: at most 65535 (batch x query heads) are supported, got {batch * heads_q}")
    left, right = kernel_window(left, right, seqlen_q, seqlen_k)
    st = (heads_q * seqlen_q, seqlen_q)  # delta, lse2 [B, Hq, Sq]
    _launch_bwd((do, q, k, v, o, lse, dq, dk, dv), tuple(t.stride()[:3] for t in (do, q, k, v, o, dq, dk, dv)),
                lse.stride(), st, (batch, heads_q, heads_kv, seqlen_q, seqlen_k), None, (left, right, scale, cap))
    return dq, dk, dv


def _launch_bwd(tensors, strides, lse_strides, st, dims, varlen, options) -> None:
    """The three kernels over tensors (do, q, k, v, o, lse, dq, dk, dv) with the (batch, head,
    row) strides of the others (varlen: batch 0), lse's and delta's (st: batch, head);
    dims (batch, Hq, Hkv, rows_q, rows_k): the grid (varlen: sequences, max_seqlen); varlen:
    None or (cu_seqlens_q, cu_seqlens_k, total_q, total_k)."""
    do, q, k, v, o, lse, dq, dk, dv = tensors
    s_do, s_q, s_k, s_v, s_o, s_dq, s_dk, s_dv = strides
    batch, heads_q, heads_kv, rows_q, rows_k = dims
    left, right, scale, cap = options
    head_dim, head_dim_v = q.shape[-1], v.shape[-1]
    cu_q, cu_k, total_q, total_k = varlen if varlen is not None else (q, q, 0, 0)  # q: an unread placeholder
    stats = batch * st[0] if varlen is None else heads_q * total_q
    delta = torch.empty(max(stats, 1), dtype=torch.float32, device=q.device)
    lse2 = torch.empty_like(delta)
    bd, bdv = next_pow2(head_dim), next_pow2(head_dim_v)
    upcast = q.dtype == torch.bfloat16 and interpreter_variant()
    is_varlen = varlen is not None
    _bwd_preprocess_kernel[(triton.cdiv(rows_q, BWD_PRE_BLOCK_M), batch * heads_q)](
        o, do, lse, delta, lse2, cu_q, *s_o, *s_do, *lse_strides, *st, heads_q, rows_q, total_q,
        HEAD_DIM_V=head_dim_v, BLOCK_DV=bdv, BLOCK_M=BWD_PRE_BLOCK_M, VARLEN=is_varlen, num_warps=4,
    )
    (m1, n1, w1, s1), (m2, n2, w2, s2) = _bwd_config(head_dim, head_dim_v)
    # With a cap the scale goes into the tanh's argument (cap_in), the cap out of it.
    scalars = (max(left, 0), max(right, 0), scale, scale * LOG2E, scale / cap if cap else 1.0, cap * LOG2E)
    flags = dict(HEAD_DIM=head_dim, BLOCK_D=bd, HEAD_DIM_V=head_dim_v, BLOCK_DV=bdv, LEFT=left >= 0,
                 RIGHT=right >= 0, SOFTCAP=cap > 0, UPCAST=upcast, VARLEN=is_varlen)
    _bwd_dkdv_kernel[(triton.cdiv(rows_k, n1), batch * heads_kv)](
        q, k, v, do, lse2, delta, dk, dv, cu_q, cu_k, *s_q, *s_k, *s_v, *s_do, *s_dk, *s_dv, *st,
        heads_q, heads_kv, heads_q // heads_kv, rows_q, rows_k, total_q, total_k, *scalars,
        BLOCK_M=m1, BLOCK_N=n1, num_warps=w1, num_stages=s1, **flags,
    )
    _bwd_dq_kernel[(triton.cdiv(rows_q, m2), batch * heads_q)](
        q, k, v, do, lse2, delta, dq, cu_q, cu_k, *s_q, *s_k, *s_v, *s_do, *s_dq, *st,
        heads_q, heads_q // heads_kv, rows_q, rows_k, total_q, total_k, *scalars,
        BLOCK_M=m2, BLOCK_N=n2, BOUNDS=is_varlen or rows_k % n2 != 0, num_warps=w2, num_stages=s2, **flags,
    )


def _packed_strides(t: torch.Tensor) -> tuple[int, int, int]:
    """A packed [total, H, D] tensor's (batch, head, row) strides: batch 0 (the kernels move
    to a sequence's rows themselves)."""
    return 0, t.stride(1), t.stride(0)


@on_tensor_device
def flash_attention_varlen_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    deterministic: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of flash_attention_varlen_fwd over packed keys; the meaning of
    gks.reference.flash_attention_varlen_bwd. do, o [total_q, Hq, Dv] (last dim contiguous),
    lse [Hq, total_q] float32, and q, k, v, the cu_seqlens and the options as the forward
    takes them (no seqused_k, no page table). Returns dq, dk, dv in q's, k's and v's packed
    shapes (q's dtype, contiguous; rows in no sequence 0). Deterministic whatever
    `deterministic` says. The lengths are read by the kernels; max_seqlen_q and max_seqlen_k
    size the grids (a longer sequence is still computed whole).
    """
    op = "gks.triton.flash_attention_varlen_bwd"
    check_device(q, op, "q")
    for name, t in (("k", k), ("v", v), ("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        check_same_device(q, "q", t, name, op)
    check_varlen_inputs(op, q, k, v, cu_seqlens_q, cu_seqlens_k, None, max_seqlen_q, max_seqlen_k)
    check_varlen_bwd_inputs(op, do, q, k, v, o, lse)
    total_q, heads_q, head_dim = q.shape
    total_k, heads_kv = k.shape[0], k.shape[1]
    scale = checked_softmax_scale(op, softmax_scale, head_dim)
    left, right = checked_window(op, window_size, causal)
    cap = checked_softcap(op, softcap, scale)
    batch = cu_seqlens_q.shape[0] - 1
    dq, dk, dv = (torch.zeros(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))
    if batch == 0 or heads_q == 0 or (total_q == 0 and total_k == 0):
        return dq, dk, dv
    if batch * heads_q > 65535:
        raise ValueError(f"{op}: at most 65535 (sequences x query heads) are supported, got {batch * heads_q}")
    left, right = kernel_window(left, right, total_q, total_k)
    rows_q = min(max(int(max_seqlen_q), 1), max(total_q, 1))
    rows_k = min(max(int(max_seqlen_k), 1), max(total_k, 1))
    _launch_bwd((do, q, k, v, o, lse, dq, dk, dv), tuple(_packed_strides(t) for t in (do, q, k, v, o, dq, dk, dv)),
                (0, lse.stride(0), lse.stride(1)), (0, total_q), (batch, heads_q, heads_kv, rows_q, rows_k),
                (cu_seqlens_q, cu_seqlens_k, total_q, total_k), (left, right, scale, cap))
    return dq, dk, dv


class _FlashAttention(torch.autograd.Function):
    """o = attention(q, k, v) with the Triton forward and backward; saves q, k, v, o, lse."""

    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, window_size, softcap):
        o, lse = flash_attention_fwd(q, k, v, causal, softmax_scale, window_size, softcap)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = (causal, softmax_scale, window_size, softcap)
        return o

    @staticmethod
    def backward(ctx, do):
        q, k, v, o, lse = ctx.saved_tensors
        if do.shape[-1] > 1 and do.stride(-1) != 1:  # e.g. the expanded gradient of a sum
            do = do.contiguous()
        dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, *ctx.options)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> torch.Tensor:
    """Differentiable attention: o of gks.triton.flash_attention_fwd (same arguments), whose
    backward is gks.triton.flash_attention_bwd (torch.autograd; q, k, v, o and lse saved)."""
    return _FlashAttention.apply(q, k, v, causal, softmax_scale, window_size, softcap)
