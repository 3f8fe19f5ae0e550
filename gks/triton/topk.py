# SPDX-License-Identifier: Apache-2.0
"""The topk family in Triton: top_k, the k largest values of each row and their indices.

One program a row, in two kernels:
- select: a radix select on the order-preserving integer key of each value (gks.specs.topk
  says the order), 8-bit digits from the top (4 sweeps of the row for fp32, 2 for 16-bit
  values), each a tl.histogram of the digit among the elements on the prefix chosen so far;
  then one more sweep gathers, in index order, the elements above the threshold and those
  on it (while slots remain), so the lowest indices win ties: the unsorted order, the same
  as the CUDA kernel's;
- sort (sorted=True): the k picks packed as (key, ~index) in an int64 and sorted
  descending with tl.sort.
The row is swept in blocks of up to 4096, so any N works (rows of 262144 take 64 blocks a
sweep)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import FLOAT_DTYPES, check_device, check_float, next_pow2, on_tensor_device, row_layout, row_start

__all__ = ["top_k"]

MAX_K = 2048


@triton.jit
def _key(v, BITS: tl.constexpr):
    """The order-preserving unsigned key (held in an int64) of values v (their bits): every
    NaN the largest key, -0.0 the key of 0.0."""
    if BITS == 32:
        u = v.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF
        sign = 0x80000000
        inf = 0x7F800000
        top = 0xFFFFFFFF
    else:
        u = v.to(tl.int16, bitcast=True).to(tl.int64) & 0xFFFF
        sign = 0x8000
        top = 0xFFFF
        if BITS == 15:  # 15 stands for fp16's layout, 16 for bf16's
            inf = 0x7C00
        else:
            inf = 0x7F80
    u = tl.where(u == sign, 0, u)
    key = tl.where((u & sign) != 0, top - u, u | sign)
    return tl.where((u & (sign - 1)) > inf, top, key)


@triton.jit
def _select_kernel(
    x_ptr, v_ptr, i_ptr, cols, k,
    x_inner, x_outer_stride, x_inner_stride,
    v_inner, v_outer_stride, v_inner_stride,
    i_inner, i_outer_stride, i_inner_stride,
    BLOCK: tl.constexpr, BITS: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    v_row = row_start(v_ptr, row, v_inner, v_outer_stride, v_inner_stride)
    i_row = row_start(i_ptr, row, i_inner, i_outer_stride, i_inner_stride)
    KEY_BITS: tl.constexpr = 32 if BITS == 32 else 16
    bins = tl.arange(0, 256)
    prefix = tl.zeros((), dtype=tl.int64)
    mask = tl.zeros((), dtype=tl.int64)
    need = tl.zeros((), dtype=tl.int64) + k
    for p in tl.static_range(KEY_BITS // 8):
        shift = KEY_BITS - 8 * (p + 1)
        hist = tl.zeros((256,), dtype=tl.int32)
        for start in range(0, cols, BLOCK):
            offs = start + tl.arange(0, BLOCK)
            m = offs < cols
            key = _key(tl.load(x_row + offs, mask=m, other=0.0), BITS)
            on = m & ((key & mask) == prefix)
            hist += tl.histogram(((key >> shift) & 0xFF).to(tl.int32), 256, mask=on)
        hist = hist.to(tl.int64)
        suffix = tl.sum(hist, 0) - tl.cumsum(hist, 0) + hist  # count in this bin and above
        before = suffix - hist
        chosen = (before < need) & (suffix >= need)
        digit = tl.max(tl.where(chosen, bins, -1), 0).to(tl.int64)
        need = need - tl.sum(tl.where(chosen, before, 0), 0)
        prefix = prefix | (digit << shift)
        mask = mask | (0xFF << shift)
    all_above = k - need
    above_run = tl.zeros((), dtype=tl.int64)
    on_run = tl.zeros((), dtype=tl.int64)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        m = offs < cols
        vals = tl.load(x_row + offs, mask=m, other=0.0)
        key = _key(vals, BITS)
        above = m & ((key & mask) > prefix)
        on = m & ((key & mask) == prefix)
        a = above.to(tl.int64)
        o = on.to(tl.int64)
        a_slot = above_run + tl.cumsum(a, 0) - a
        o_rank = on_run + tl.cumsum(o, 0) - o
        take = above | (on & (o_rank < need))
        slot = tl.where(above, a_slot, all_above + o_rank)
        tl.store(v_row + slot, vals, mask=take)
        tl.store(i_row + slot, offs.to(tl.int64), mask=take)
        above_run += tl.sum(a, 0)
        on_run += tl.sum(o, 0)


@triton.jit
def _sort_kernel(
    x_ptr, v_ptr, i_ptr, k,
    x_inner, x_outer_stride, x_inner_stride,
    v_inner, v_outer_stride, v_inner_stride,
    i_inner, i_outer_stride, i_inner_stride,
    KB: tl.constexpr, BITS: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = row_start(x_ptr, row, x_inner, x_outer_stride, x_inner_stride)
    v_row = row_start(v_ptr, row, v_inner, v_outer_stride, v_inner_stride)
    i_row = row_start(i_ptr, row, i_inner, i_outer_stride, i_inner_stride)
    j = tl.arange(0, KB)
    m = j < k
    index = tl.load(i_row + j, mask=m, other=0)
    key = _key(tl.load(x_row + index, mask=m, other=0.0), BITS)
    # (key - 2^31) * 2^32 + (2^32 - 1 - index): the int64 order is (key, -index); the
    # lanes past k the smallest int64, last in a descending sort.
    packed = (key - 2147483648) * 4294967296 + (4294967295 - index)
    packed = tl.where(m, packed, -9223372036854775807 - 1)
    packed = tl.sort(packed, descending=True)
    index = 4294967295 - (packed & 4294967295)
    tl.store(i_row + j, index, mask=m)
    tl.store(v_row + j, tl.load(x_row + index, mask=m, other=0.0), mask=m)


def _check(x, k, op):
    check_device(x, op, "x")
    check_float(x, op, "x")
    if not 1 <= x.dim() <= 8:
        raise ValueError(f"{op}: argument 'x' must have 1 to 8 dims, got {x.dim()}")
    n = x.shape[-1]
    most = min(n, MAX_K)
    if not 0 <= k <= most:
        raise ValueError(f"{op}: argument 'k' must be from 0 to min(N, {MAX_K}) = {most} "
                         f"(N = {n}, x's last dim), got {k}")


@on_tensor_device
def top_k(x: torch.Tensor, k: int, sorted: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [..., k] in x's dtype, indices [..., k] int64): the k largest values of each
    row of x [..., N] in gks.reference.top_k's order (NaN above +inf, -0.0 equal to 0.0,
    ties by lower index); sorted descending, or unsorted: those above the k-th value in
    index order, then those equal to it."""
    op = "gks.triton.top_k"
    _check(x, k, op)
    k = int(k)
    xr = row_layout(x, op, "x")
    values = torch.empty((*x.shape[:-1], k), dtype=x.dtype, device=x.device)
    indices = torch.empty((*x.shape[:-1], k), dtype=torch.int64, device=x.device)
    if k == 0 or xr.rows == 0:
        return values, indices
    assert x.dtype in FLOAT_DTYPES
    bits = 32 if x.dtype == torch.float32 else 15 if x.dtype == torch.float16 else 16
    vr, ir = row_layout(values, op, "values"), row_layout(indices, op, "indices")
    layout = (xr.inner, xr.outer_stride, xr.inner_stride, vr.inner, vr.outer_stride, vr.inner_stride,
              ir.inner, ir.outer_stride, ir.inner_stride)
    block = min(next_pow2(xr.cols), 4096)
    _select_kernel[(xr.rows,)](x, values, indices, xr.cols, k, *layout, BLOCK=block, BITS=bits,
                               num_warps=max(1, min(8, block // 256)))
    if sorted and k > 1:
        kb = next_pow2(k)
        _sort_kernel[(xr.rows,)](x, values, indices, k, *layout, KB=kb, BITS=bits,
                                 num_warps=max(1, min(8, kb // 128)))
    return values, indices
