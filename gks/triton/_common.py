# SPDX-License-Identifier: Apache-2.0
"""What the Triton family modules share: argument checks, row views (row_layout), the row
kernels' launch sizes, the packed 16-bit pairs and fp8 decoded from its bits."""

from __future__ import annotations

import functools
from typing import NamedTuple

import torch
import triton
import triton.language as tl

from gks.runtime.args import float32_scalar

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_float(t: torch.Tensor, op: str, arg: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: argument '{arg}' must be float32, float16 or bfloat16, got {t.dtype}")


def check_same_device(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str, op: str) -> None:
    if b.device != a.device:
        raise ValueError(
            f"{op}: argument '{b_name}' must be on the device of '{a_name}' ({a.device}), got {b.device}"
        )


def check_same(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str, op: str) -> None:
    check_same_device(a, a_name, b, b_name, op)
    if b.dtype != a.dtype:
        raise TypeError(
            f"{op}: argument '{b_name}' must have the dtype of '{a_name}' ({a.dtype}), got {b.dtype}"
        )


def interpreter_variant() -> bool:
    """Whether a wrapper passes its kernel the variant made for Triton's interpreter (exact
    divisions, bf16 widened by hand): under TRITON_INTERPRET=1, unless GKS_DUMP_GPU_PATH is
    set, as tools/dump_triton_ir.py does (it records launches there without running them,
    and dumps the variant a GPU runs)."""
    import os

    return os.environ.get("TRITON_INTERPRET") == "1" and not os.environ.get("GKS_DUMP_GPU_PATH")


# Bound once (and replaceable by the tests, which simulate a second device on one GPU).
_current_device = torch.cuda.current_device
_use_device = torch.cuda.device


def on_tensor_device(op):
    """Runs a Triton op on the device of its first argument, and so on that device's current
    stream: Triton launches on the current device, which need not be the tensors' (cuda:1
    tensors with cuda:0 current would fail or run unordered with the caller's work). The
    switch is made only when the two differ, so the common call pays one device query."""

    @functools.wraps(op)
    def call(*args, **kwargs):
        first = args[0] if args else next(iter(kwargs.values()), None)
        if isinstance(first, torch.Tensor) and first.is_cuda:
            index = first.get_device()
            if index != _current_device():
                with _use_device(index):
                    return op(*args, **kwargs)
        return op(*args, **kwargs)

    return call


def check_device(t: torch.Tensor, op: str, arg: str) -> None:
    """CUDA tensors, or CPU tensors under Triton's interpreter."""
    import os

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if t.device.type != "cuda" and not (interpreted and t.device.type == "cpu"):
        raise ValueError(
            f"{op}: argument '{arg}' must be a CUDA tensor (or a CPU tensor with "
            f"TRITON_INTERPRET=1), got a tensor on {t.device}"
        )


def check_eps(eps: float, op: str) -> float:
    """eps as the kernel takes it (float32), checked as the C++ API checks it: it must
    survive the narrowing (runtime.args), then be >= 0 (`not >=`, so NaN is refused too)."""
    narrowed = float32_scalar(eps, "eps", op)
    if not narrowed >= 0:
        raise ValueError(f"{op}: argument 'eps' must be >= 0, got {eps}")
    return narrowed


def check_norm_weight(weight: torch.Tensor, cols: int, op: str, name: str = "weight") -> None:
    """A norm's weight (or bias, as `name` says): [cols] (x's last dim), contiguous."""
    if weight.dim() != 1 or weight.shape[0] != cols:
        raise ValueError(
            f"{op}: argument '{name}' must have shape [{cols}] (the last dim of x), "
            f"got {list(weight.shape)}"
        )
    if weight.numel() > 1 and weight.stride(0) != 1:
        raise ValueError(f"{op}: argument '{name}' must be contiguous, got stride {weight.stride(0)}")


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


# ---------------------------------------------------------------------------------------
# Row views for the Triton backend: a tensor [..., N] as rows of a contiguous last dim.
#
# Mirrors the C++ RowLayout: leading dims that are contiguous with each other merge, and up
# to two strided levels remain (row -> (row // inner) * outer_stride + (row % inner) *
# inner_stride), which covers a strided row view and a [B, S, H, N] tensor sliced in S.
# ---------------------------------------------------------------------------------------


class Rows(NamedTuple):
    rows: int
    cols: int
    inner: int  # size of the inner leading level (1 when there is one level)
    outer_stride: int
    inner_stride: int


def _merged_levels(shape, strides) -> list[list[int]]:
    """The dims as [size, stride] levels, outermost first: dims of size 1 dropped, a dim
    merged into the one outside it where the two are contiguous with each other."""
    levels: list[list[int]] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if levels and levels[-1][1] == stride * size:
            levels[-1] = [levels[-1][0] * size, stride]
        else:
            levels.append([size, stride])
    return levels


def row_layout(x, op: str, arg: str) -> Rows:
    if x.dim() < 1:
        raise ValueError(f"{op}: argument '{arg}' must have at least 1 dim, got a scalar")
    cols = x.shape[-1]
    if cols > 1 and x.stride(-1) != 1:
        raise ValueError(
            f"{op}: argument '{arg}' must be contiguous in its last dim (stride 1), "
            f"got stride {x.stride(-1)}"
        )
    levels = _merged_levels(x.shape[:-1], x.stride()[:-1])
    rows = 1
    for size in x.shape[:-1]:
        rows *= size
    if len(levels) > 2:
        raise ValueError(
            f"{op}: argument '{arg}' has {len(levels)} non-mergeable strided leading dims; "
            "this backend takes at most 2 (the CUDA backend takes any)"
        )
    if not levels:
        return Rows(rows, cols, 1, 0, 0)
    if len(levels) == 1:
        return Rows(rows, cols, 1, levels[0][1], 0)
    return Rows(rows, cols, levels[1][0], levels[0][1], levels[1][1])


@triton.jit
def row_start(ptr, row, inner, outer_stride, inner_stride):
    """Where row `row` of a row view starts (row_layout: row -> (row // inner) *
    outer_stride + (row % inner) * inner_stride), the offsets in int64 whatever row's type."""
    return ptr + tl.cast(row // inner, tl.int64) * outer_stride + tl.cast(row % inner, tl.int64) * inner_stride


def row_num_warps(block_n: int, elem_bytes: int, max_warps: int = 16) -> int:
    """Warps for a program that holds a block of block_n elements: about 64 bytes of it a
    thread (16 bytes x 4 accesses), between 1 and max_warps."""
    return max(1, min(max_warps, block_n * elem_bytes // (32 * 64)))


def long_row_max_warps(elem_bytes: int) -> int:
    """The warp cap for the one-pass row kernels (softmax, quantize). 16-bit rows of 32768
    take 32 warps (32 values a thread), fp32 rows at most 16: the faster cap for each
    (docs/perf/softmax.md, quantize.md, norms.md). (The fused op's fp32 rows of 16384+ run
    a kernel of their own: gks.triton.softmax._fused_rows_plan.)"""
    return 32 if elem_bytes < 4 else 16


# ---------------------------------------------------------------------------------------
# One-pass 16-bit rows held as packed pairs (softmax and quantize_int8).
#
# Held as fp32, a row of 32768 values takes 4 bytes a value of registers: about 50 registers
# a thread at 32 warps, so one program fits an SM and nothing overlaps a row's reductions.
# Held as loaded instead, two values an int32, and converted anew at each use, the program
# fits in 32 registers and two share an SM. The row is read as int32 pairs (even N, 4-byte
# aligned rows); each pass unpacks it with an opaque `zero` (0 at run time) mixed in, so
# that the compiler cannot keep one pass's fp32 values alive for the next. Nothing in such a
# kernel may call a function per element (quantize's exact division): a call makes ptxas
# spill what is live around it.
# ---------------------------------------------------------------------------------------


@triton.jit
def unpack_pairs(u, zero, k: tl.constexpr, IS_BF16: tl.constexpr):
    """fp32 (low, high) of the two 16-bit floats in each int32 of u; `k` numbers the pass."""
    if IS_BF16:
        # bf16 is the top half of an fp32. (The opaque term goes into the shift and the
        # mask: ORed into u, it would be distributed over the shift and the shifted u shared.)
        lo = u << (16 + zero * k)
        hi = u & (-65536 | (zero * k))
        return lo.to(tl.float32, bitcast=True), hi.to(tl.float32, bitcast=True)
    else:
        u = u | (zero * k)
        lo = u.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        hi = (u >> 16).to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
        return lo, hi


@triton.jit
def pack_pairs(lo, hi, dtype: tl.constexpr):
    """int32 of two 16-bit floats: lo and hi rounded to dtype, lo in the low half."""
    lo16 = lo.to(dtype).to(tl.int16, bitcast=True).to(tl.int32) & 0xFFFF
    hi16 = hi.to(dtype).to(tl.int16, bitcast=True).to(tl.int32)
    return (hi16 << 16) | lo16


def can_hold_pairs(t: torch.Tensor, layout, cols: int) -> bool:
    """t's rows (16-bit, this row layout) read as int32 pairs: an even count, 4-byte aligned."""
    return (t.element_size() == 2 and cols % 2 == 0 and t.data_ptr() % 4 == 0
            and layout.outer_stride % 2 == 0 and layout.inner_stride % 2 == 0)


@functools.cache
def neg_inf_pair(dtype: torch.dtype) -> int:
    """The int32 whose two 16-bit halves are -inf in dtype (the masked load's fill)."""
    half = torch.tensor([float("-inf")], dtype=dtype).view(torch.int16).item() & 0xFFFF
    word = (half << 16) | half
    return word - (1 << 32)


def pairs_pay_off(block_n: int) -> bool:
    """Whether a one-pass row of block_n 16-bit values is worth holding as pairs: rows that
    take 16 warps or more (block_n >= 16384). Shorter rows fit several programs an SM as
    fp32 already, and unpacking pairs only slows them (docs/perf/softmax.md)."""
    return row_num_warps(block_n, 2, 32) >= 16


def pairs_launch(block_n: int) -> dict:
    """Warps as for any row (64 bytes a thread, up to 32), and the register cap that lets
    two programs share an SM's 65536 registers."""
    warps = row_num_warps(block_n, 2, 32)
    return {"num_warps": warps, "maxnreg": 65536 // (2 * 32 * warps)}



def _byte_extent(t: torch.Tensor) -> tuple[int, int]:
    span = sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) + 1
    return t.data_ptr(), t.data_ptr() + span * t.element_size()


def _one_token_stride(t: torch.Tensor, inner: int) -> int | None:
    """The stride of t's leading dims (all but the last `inner`) when they merge into one
    level, else None."""
    levels = _merged_levels(t.shape[:-inner], t.stride()[:-inner])
    if len(levels) > 1:
        return None
    return levels[0][1] if levels else 0


def _interleaved_apart(a: torch.Tensor, b: torch.Tensor, inner: int) -> bool:
    """True when a and b are side by side in the same rows: one merged leading stride S
    shared by both, each row's span (the last `inner` dims) shorter than S, and b's row
    start, modulo S, past a's row span and ending within S (e.g. the q, k and v column
    blocks of a fused qkv tensor)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr() or a.element_size() != b.element_size():
        return False
    sa, sb = _one_token_stride(a, inner), _one_token_stride(b, inner)
    if sa is None or sa != sb or sa <= 0:
        return False
    span = [sum((n - 1) * abs(st) for n, st in zip(t.shape[-inner:], t.stride()[-inner:])) + 1 for t in (a, b)]
    lead = [sum((n - 1) * st for n, st in zip(t.shape[:-inner], t.stride()[:-inner])) for t in (a, b)]
    if max(span) > sa or min(lead) < 0:
        return False
    d = (b.storage_offset() - a.storage_offset()) % sa
    return d >= span[0] and d + span[1] <= sa


def check_apart(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str, op: str, *, inner: int = 1) -> None:
    """Refuses a and b (an output written in place and another argument) when their byte
    extents meet, unless they sit side by side in the same rows (their last `inner` dims a
    row: _interleaved_apart). Coarser than the C++ API's exact test, which also tells other
    interleaved views apart; enough for the in-place forms."""
    if a.numel() == 0 or b.numel() == 0:
        return
    (a_lo, a_hi), (b_lo, b_hi) = _byte_extent(a), _byte_extent(b)
    if a_lo < b_hi and b_lo < a_hi and not _interleaved_apart(a, b, inner):
        raise ValueError(f"{op}: argument '{a_name}' must not share memory with argument '{b_name}'")


@triton.jit
def e4m3_value(b):
    """fp32 of e4m3fn bits b (uint8)."""
    b = b.to(tl.int32) & 0xFF
    mag = b & 0x7F
    e = mag >> 3
    m = mag & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    v = tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)  # subnormals: m * 2^-9
    v = tl.where(mag == 0x7F, float("nan"), v)
    return tl.where(b >= 0x80, -v, v)


@triton.jit
def fp8_value(b, E5M2: tl.constexpr):
    """fp32 of fp8 bits b (uint8), exactly: e5m2 (inf and NaN included) is the high byte of
    an fp16, e4m3fn as e4m3_value decodes it."""
    if E5M2:
        return (b.to(tl.int16) << 8).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        return e4m3_value(b)


@triton.jit
def bf16_rounded(y):
    """fp32 y as bf16, rounded to nearest even on the bits: what a GPU's cast does, for
    Triton's interpreter, whose cast truncates. NaN stays a quiet NaN."""
    bits = y.to(tl.int32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = tl.where(y != y, 0x7FC0, rounded)
    return rounded.to(tl.int16).to(tl.bfloat16, bitcast=True)
