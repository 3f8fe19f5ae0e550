# SPDX-License-Identifier: Apache-2.0
"""The rope family in Triton: apply_rope, rotary embeddings on q and k heads. One program a
token (q and k in two launches), its heads x rotation pairs one 2-D block (a block of heads
when there are more than 4096 pairs), the angles read once from the cos/sin cache at the
token's position."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import (
    check_apart,
    check_device,
    check_float,
    check_same,
    check_same_device,
    next_pow2,
    on_tensor_device,
    row_layout,
    row_start,
)

__all__ = ["apply_rope", "apply_rope_"]


@triton.jit
def _rope_kernel(
    x_ptr, y_ptr, cs_ptr, pos_ptr, heads, max_pos, half, rotary_dim, head_dim,
    x_inner, x_outer_stride, x_inner_stride, x_head_stride,
    y_inner, y_outer_stride, y_inner_stride, y_head_stride,
    BLOCK_H: tl.constexpr, BLOCK: tl.constexpr, NEOX: tl.constexpr, COPY_REST: tl.constexpr,
    REST_BLOCK: tl.constexpr,
):
    token = tl.program_id(0).to(tl.int64)
    pos = tl.load(pos_ptr + token).to(tl.int64)
    valid = (pos >= 0) & (pos < max_pos)  # else NaN angles: the token comes out NaN
    angles = cs_ptr + tl.where(valid, pos, 0) * rotary_dim
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK)[None, :]
    x_head = row_start(x_ptr, token, x_inner, x_outer_stride, x_inner_stride) + h.to(tl.int64) * x_head_stride
    y_head = row_start(y_ptr, token, y_inner, y_outer_stride, y_inner_stride) + h.to(tl.int64) * y_head_stride
    mi = i < half
    m = (h < heads) & mi
    # No read of the cache for a token without angles (an empty cache has no memory).
    c = tl.where(valid, tl.load(angles + i, mask=mi & valid, other=0.0), float("nan"))
    s = tl.where(valid, tl.load(angles + half + i, mask=mi & valid, other=0.0), 0.0)
    if NEOX:
        ia = i
        ib = i + half
    else:
        ia = 2 * i
        ib = 2 * i + 1
    a = tl.load(x_head + ia, mask=m, other=0.0).to(tl.float32)
    b = tl.load(x_head + ib, mask=m, other=0.0).to(tl.float32)
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_head + ia, (a * c - b * s).to(out_ty), mask=m)
    tl.store(y_head + ib, (b * c + a * s).to(out_ty), mask=m)
    if COPY_REST:
        j = rotary_dim + tl.arange(0, REST_BLOCK)[None, :]
        mj = (h < heads) & (j < head_dim)
        tl.store(y_head + j, tl.load(x_head + j, mask=mj), mask=mj)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check(q, k, cos_sin_cache, positions, op):
    """The C++ API's checks, with its messages; returns rotary_dim."""
    check_device(q, op, "q")
    check_float(q, op, "q")
    # k's device is checked against q's first, so a k elsewhere is named as on another device,
    # as in every backend, not as a CPU tensor.
    check_same_device(q, "q", k, "k", op)
    check_float(k, op, "k")
    if q.dim() < 3:
        raise ValueError(f"{op}: argument 'q' must be [..., heads, head_dim] with at least one token dim, "
                         f"got {list(q.shape)}")
    check_same(q, "q", k, "k", op)
    if k.dim() != q.dim() or k.shape[:-2] != q.shape[:-2] or k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{op}: argument 'k' must have q's token dims and head_dim (any number of heads), "
                         f"got {list(k.shape)} for q {list(q.shape)}")
    if cos_sin_cache.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'cos_sin_cache' must be float32, got {_name(cos_sin_cache.dtype)}")
    if cos_sin_cache.dim() != 2:
        raise ValueError(f"{op}: argument 'cos_sin_cache' must be [max_pos, rotary_dim], "
                         f"got {list(cos_sin_cache.shape)}")
    rotary_dim, head_dim = cos_sin_cache.shape[1], q.shape[-1]
    if rotary_dim % 2 or not 2 <= rotary_dim <= head_dim:
        raise ValueError(f"{op}: argument 'cos_sin_cache' must have an even rotary_dim (its last dim) from 2 "
                         f"to head_dim ({head_dim}), got {rotary_dim}")
    if not cos_sin_cache.is_contiguous():
        raise ValueError(f"{op}: argument 'cos_sin_cache' must be contiguous")
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{op}: argument 'positions' must be int32 or int64, got {_name(positions.dtype)}")
    if positions.shape != q.shape[:-2]:
        raise ValueError(f"{op}: argument 'positions' must have q's token dims (q's shape but its last two), "
                         f"got {list(positions.shape)} for q {list(q.shape)}")
    if not positions.is_contiguous():
        raise ValueError(f"{op}: argument 'positions' must be contiguous")
    for t, name in ((cos_sin_cache, "cos_sin_cache"), (positions, "positions")):
        check_same_device(q, "q", t, name, op)
    return rotary_dim


def _launch(x, y, cos_sin_cache, positions, is_neox, op, names):
    # Rows of heads: a token's place from its dims' layout (at most two strided levels), a
    # head's from the head stride.
    if x.numel() == 0:
        return
    xr, yr = row_layout(x.select(-2, 0), op, names[0]), row_layout(y.select(-2, 0), op, names[1])
    rotary_dim, head_dim = cos_sin_cache.shape[1], x.shape[-1]
    half = rotary_dim // 2
    rest = head_dim - rotary_dim
    heads = x.shape[-2]
    block = next_pow2(half)
    block_h = min(next_pow2(heads), max(1, 4096 // block))  # at most 4096 pairs a program
    _rope_kernel[(xr.rows, triton.cdiv(heads, block_h))](
        x, y, cos_sin_cache, positions, heads, cos_sin_cache.shape[0], half, rotary_dim, head_dim,
        xr.inner, xr.outer_stride, xr.inner_stride, x.stride(-2),
        yr.inner, yr.outer_stride, yr.inner_stride, y.stride(-2),
        BLOCK_H=block_h, BLOCK=block, NEOX=bool(is_neox), COPY_REST=rest > 0 and y.data_ptr() != x.data_ptr(),
        REST_BLOCK=next_pow2(max(rest, 1)), num_warps=max(1, min(8, block_h * block // 256)),
    )


@on_tensor_device
def apply_rope(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
               is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_out, k_out): q [..., Hq, D] and k [..., Hk, D] rotated by the angles of each token's
    position (positions: q's token dims, int32/int64) from cos_sin_cache [max_pos,
    rotary_dim] fp32 (cos, then sin, a row); NeoX (half-split) or GPT-J (interleaved) pairs."""
    op = "gks.triton.apply_rope"
    _check(q, k, cos_sin_cache, positions, op)
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    _launch(q, q_out, cos_sin_cache, positions, is_neox, op, ("q", "q_out"))
    _launch(k, k_out, cos_sin_cache, positions, is_neox, op, ("k", "k_out"))
    return q_out, k_out


@on_tensor_device
def apply_rope_(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
                is_neox: bool = True) -> None:
    """apply_rope in place: q and k (e.g. views of a fused qkv tensor) overwritten."""
    op = "gks.triton.apply_rope_"
    _check(q, k, cos_sin_cache, positions, op)
    for t, name in ((q, "q"), (k, "k")):
        check_apart(t, name, cos_sin_cache, "cos_sin_cache", op)
        check_apart(t, name, positions, "positions", op)
    check_apart(q, "q", k, "k", op, inner=2)  # q and k of a fused qkv: side by side a token
    _launch(q, q, cos_sin_cache, positions, is_neox, op, ("q", "q"))
    _launch(k, k, cos_sin_cache, positions, is_neox, op, ("k", "k"))
