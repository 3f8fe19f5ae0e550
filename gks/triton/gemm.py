# SPDX-License-Identifier: Apache-2.0
"""The GEMMs in Triton:

  sgemm      c = a @ b in fp32 with tl.dot(input_precision="ieee") (FP32 FMA, never TF32).
             Any strides (transposed views included), any M, N, K.
  wmma_gemm  Tensor Core GEMM: fp16/bf16 a @ b with fp32 accumulation (tl.dot), output
             fp32 by default or the input dtype. Any strides, any M, N, K.
  int8_gemm  int8 a_q @ b_q with int32 accumulation (tl.dot), then the per-row scale of a
             and the per-column scale of b, output float16 (default), bfloat16 or float32.
  grouped_gemm  the MoE expert GEMMs in one launch (fp16/bf16, fp32 accumulation), the
             contiguous and the masked layout: kernels of their own, at the end of this
             module; grouped_gemm_fp8 runs them on e4m3 operands with DeepSeek-V3's block
             scales (sm_89+ on a GPU).
  gemm_fp8   fp8 (e4m3 or e5m2) a @ b with fp32 accumulation and fp32 scales per tensor, per
             row / column or per 1 x 128 group of a and 128 x 128 block of b (see
             gks.reference.gemm_fp8), then optionally the fused epilogue (a bias, a gated
             activation of interleaved gate / up columns): a kernel of its own
             (_gemm_fp8_kernel) on the same launch path, block shapes and tuning as the three
             above; sm_89+ on a GPU.

The kernels behind them: one tiled kernel (grouped tile order for L2 reuse, masked edges,
int64 offsets, any strides) with a compile-time arithmetic mode:

  "ieee"  fp32 inputs, tl.dot with input_precision="ieee": FP32 FMA, never TF32.
  "mma"   fp16/bf16 inputs on Tensor Cores, fp32 accumulation.
  "int8"  int8 inputs on Tensor Cores, int32 accumulation; the epilogue multiplies by the
          per-row scale of a and the per-column scale of b.

and, for "mma" on sm_90+, a variant whose operands the Tensor Memory Accelerator loads.

On a GPU each mode runs one of a few block shapes (CONFIGS): the one `python -m gks
autotune --backend triton --kernel OP` stored for the device, dtype and shape bucket if
any (see gks.runtime.tables), else the one Triton's own autotuner picks (timed in-process
on the first call of each M, N, K, unchecked); `config=i` forces the i-th. Some block
shapes split K among several programs per output tile (split-K, for outputs of few tiles),
some load by TMA; see CONFIGS. A call like an earlier one repeats its launch without
Triton's per-call dispatch (see _launch and run_plan). Under the interpreter
(TRITON_INTERPRET=1) one small block shape is used, with the split and TMA choice of the
config asked for.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import NamedTuple

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from gks.triton._common import (check_device, check_same_device, fp8_value, interpreter_variant, next_pow2,
                                on_tensor_device)
from gks.triton.activation import _activation

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "grouped_gemm", "grouped_gemm_fp8", "gemm_fp8", "gemm_config_names",
           "sgemm_config_names", "wmma_gemm_config_names", "int8_gemm_config_names", "gemm_fp8_config_names"]


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """(row, column) of program pid's output tile: GROUP_M tile rows at a time, down each
    column of the group before the next, so programs running together share tiles of b in L2."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    return first_m + (pid % per_group) % rows_in_group, (pid % per_group) // rows_in_group


@triton.jit
def _k_tiles(K, BLOCK_K: tl.constexpr, SPLIT_K: tl.constexpr):
    """[begin, end) of the k-tiles of this program. Split-K: program (tile, s) takes k-tiles
    [s * per_split, (s + 1) * per_split). Without it the bounds stay compile-time simple (a
    loop from 0 pipelines best)."""
    tiles_k = tl.cdiv(K, BLOCK_K)
    if SPLIT_K == 1:
        return 0, tiles_k
    else:
        per_split = tl.cdiv(tiles_k, SPLIT_K)
        begin = tl.program_id(1) * per_split
        return begin, tl.minimum(begin + per_split, tiles_k)


@triton.jit
def _gemm_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_sa, stride_sb,
    MODE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr = 1,
):
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    kt_begin, kt_end = _k_tiles(K, BLOCK_K, SPLIT_K)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_first = kt_begin * BLOCK_K + tl.arange(0, BLOCK_K)  # the k of this program's first tile
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + k_first[None, :].to(tl.int64) * stride_ak
    b_ptrs = b_ptr + k_first[:, None].to(tl.int64) * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    rk = tl.arange(0, BLOCK_K)  # offsets within a tile, for the masks
    if MODE == "int8":
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    else:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(kt_begin, kt_end):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=(rm[:, None] < M) & (rk[None, :] < k_left), other=0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & (rn[None, :] < N), other=0)
        if MODE == "ieee":
            acc = tl.dot(a, b, acc, input_precision="ieee")
        elif MODE == "int8":
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        else:
            acc = tl.dot(a, b, acc, out_dtype=tl.float32)
        a_ptrs += tl.cast(stride_ak, tl.int64) * BLOCK_K  # a stride of 1 arrives as a plain int
        b_ptrs += tl.cast(stride_bk, tl.int64) * BLOCK_K

    if MODE == "int8":
        sa = tl.load(sa_ptr + rm.to(tl.int64) * stride_sa, mask=rm < M, other=0.0)
        sb = tl.load(sb_ptr + rn.to(tl.int64) * stride_sb, mask=rn < N, other=0.0)
        out = acc.to(tl.float32) * sa[:, None] * sb[None, :]
    else:
        out = acc
    _store_tile(c_ptr, out, rm, rn, M, N, stride_cm, stride_cn, SPLIT_K)


@triton.jit
def _gemm_fp8_kernel(
    a_ptr, b_ptr, c_ptr, sa_ptr, sb_ptr, bias_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_sa, stride_sb,
    stride_sa_group, stride_sb_group, stride_bias,
    SCALING: tl.constexpr, E5M2: tl.constexpr, INTERPRETED: tl.constexpr,
    HAS_BIAS: tl.constexpr, GATED: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr = 1,
):
    """gemm_fp8's tile: _gemm_kernel's walk (grouped tile order, split-K, masked edges, int64
    offsets) over fp8 a and b with fp32 accumulation. SCALING 0 (tensor: sa, sb one value
    each) and 1 (row: sa [M] of stride_sa, sb [N] of stride_sb) scale the sum once at the
    end; 2 (block: sa [M, K / 128], sb [K / 128, N / 128], the group strides apart) takes K
    128 at a time, one scale group a k-tile, and adds each group's product, a fresh
    accumulator scaled by its row and column scales, to the fp32 total. The scaled tile then
    goes through the epilogue (_store_epilogue: HAS_BIAS, GATED) into c; split-K's parts
    are only summed here, the epilogue then runs on the sum (_epilogue_kernel)."""
    tl.static_assert(SCALING != 2 or BLOCK_K == 128, "block scaling takes one 128-wide scale group a k-tile")
    tl.static_assert(SPLIT_K == 1 or (not HAS_BIAS and GATED == 0),
                     "split-K parts add up in c before the epilogue runs (_epilogue_kernel)")
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    kt_begin, kt_end = _k_tiles(K, BLOCK_K, SPLIT_K)

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    m_ok = rm < M
    n_ok = rn < N
    k_first = kt_begin * BLOCK_K + tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None].to(tl.int64) * stride_am + k_first[None, :].to(tl.int64) * stride_ak
    b_ptrs = b_ptr + k_first[:, None].to(tl.int64) * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    sa_rows = sa_ptr + rm.to(tl.int64) * stride_sa
    if SCALING == 2:  # a column's scale is its 128-wide block's
        sb_cols = sb_ptr + (rn // 128).to(tl.int64) * stride_sb
    else:
        sb_cols = sb_ptr + rn.to(tl.int64) * stride_sb
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(kt_begin, kt_end):
        k_left = K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=m_ok[:, None] & (rk[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & n_ok[None, :], other=0.0)
        if INTERPRETED:
            # Triton's interpreter reads an e4m3fn NaN as a number and cannot fill a masked
            # fp8 load: there (only) a and b come as their bits, widened here exactly to
            # fp32; the products are exact in fp32 as on the Tensor Cores, the sums fp32.
            a = fp8_value(a, E5M2)
            b = fp8_value(b, E5M2)
        if SCALING == 2:
            group = tl.cast(kt, tl.int64)
            sa = tl.load(sa_rows + group * stride_sa_group, mask=m_ok, other=0.0)
            sb = tl.load(sb_cols + group * stride_sb_group, mask=n_ok, other=0.0)
            if INTERPRETED:
                part = tl.dot(a, b, input_precision="ieee")
            else:
                part = tl.dot(a, b, out_dtype=tl.float32)
            acc += part * sa[:, None] * sb[None, :]
        elif INTERPRETED:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            # Hopper's fp8 Tensor Cores keep about 14 bits of a running sum: promote it into
            # the fp32 accumulator after every k-tile (as DeepGEMM and cuBLAS do), not once.
            acc = tl.dot(a, b, acc, max_num_imprecise_acc=BLOCK_K)
        a_ptrs += tl.cast(stride_ak, tl.int64) * BLOCK_K
        b_ptrs += tl.cast(stride_bk, tl.int64) * BLOCK_K

    if SCALING == 0:
        out = acc * tl.load(sa_ptr) * tl.load(sb_ptr)
    elif SCALING == 1:
        sa = tl.load(sa_rows, mask=m_ok, other=0.0)
        sb = tl.load(sb_cols, mask=n_ok, other=0.0)
        out = acc * sa[:, None] * sb[None, :]
    else:
        out = acc
    if SPLIT_K == 1:
        _store_epilogue(c_ptr, out, rm, pid_n * BLOCK_N, M, N, stride_cm, stride_cn, bias_ptr, stride_bias,
                        HAS_BIAS, GATED, BLOCK_M, BLOCK_N)
    else:
        _store_tile(c_ptr, out, rm, rn, M, N, stride_cm, stride_cn, SPLIT_K)


@triton.jit
def _store_epilogue(c_ptr, y, rm, col0, M, N, stride_cm, stride_cn, bias_ptr, stride_bias,
                    HAS_BIAS: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Stores gemm_fp8's epilogue of the fp32 tile y (rows rm, columns col0 ... col0 +
    BLOCK_N - 1 of the product [M, N]) into c: y + bias[n] (HAS_BIAS: bias_ptr [N], stride_bias
    apart, read as fp32), then with GATED (1 silu, 2 gelu, 3 gelu_tanh: GATED's order in
    gks.specs.gemm, plus one) act(y[:, 2j]) * y[:, 2j + 1] into c's columns col0 / 2 + j of
    N / 2. Neither: the tile itself."""
    rn = col0 + tl.arange(0, BLOCK_N)
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rn.to(tl.int64) * stride_bias, mask=rn < N, other=0.0)
        y = y + bias.to(tl.float32)[None, :]
    if GATED == 0:
        _store_tile(c_ptr, y, rm, rn, M, N, stride_cm, stride_cn, 1)
    else:
        # b's columns interleave gate and up, so a tile (col0 and BLOCK_N even) holds whole
        # pairs: the pairs' halves side by side, split without leaving registers.
        gate, up = tl.split(tl.reshape(y, (BLOCK_M, BLOCK_N // 2, 2)))
        out = _activation(gate, GATED - 1) * up
        _store_tile(c_ptr, out, rm, col0 // 2 + tl.arange(0, BLOCK_N // 2), M, N // 2, stride_cm, stride_cn, 1)


@triton.jit
def _epilogue_kernel(y_ptr, c_ptr, bias_ptr, M, N, stride_ym, stride_yn, stride_cm, stride_cn, stride_bias,
                     HAS_BIAS: tl.constexpr, GATED: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """c = gemm_fp8's epilogue (_store_epilogue) of the fp32 product y [M, N], a tile a
    program: for the product that split-K's parts sum in y, or that K = 0 makes 0."""
    tiles_n = tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    rm = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    col0 = (pid % tiles_n) * BLOCK_N
    rn = col0 + tl.arange(0, BLOCK_N)
    y_ptrs = y_ptr + rm[:, None].to(tl.int64) * stride_ym + rn[None, :].to(tl.int64) * stride_yn
    y = tl.load(y_ptrs, mask=(rm[:, None] < M) & (rn[None, :] < N), other=0.0)
    _store_epilogue(c_ptr, y, rm, col0, M, N, stride_cm, stride_cn, bias_ptr, stride_bias,
                    HAS_BIAS, GATED, BLOCK_M, BLOCK_N)


@triton.jit
def _store_tile(c_ptr, out, rm, rn, M, N, stride_cm, stride_cn, SPLIT_K: tl.constexpr):
    """Stores a tile of c (its rows rm, columns rn, masked at the edges), or with split-K adds
    it to c, fp32 and zeroed, where the splits add their parts (in no fixed order)."""
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
    c_mask = (rm[:, None] < M) & (rn[None, :] < N)
    if SPLIT_K == 1:
        tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=c_mask)
    else:
        tl.atomic_add(c_ptrs, out, mask=c_mask, sem="relaxed")


@triton.jit
def _gemm_tma_kernel(a_desc, b_desc, c_ptr, M, N, K, stride_cm, stride_cn,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     GROUP_M: tl.constexpr):
    """The "mma" mode of _gemm_kernel with a and b brought in by the Tensor Memory
    Accelerator (sm_90+): one bulk copy a tile instead of every thread's loads and address
    arithmetic, the edges zero-filled by the copy itself. No split-K."""
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        a = a_desc.load([pid_m * BLOCK_M, kt * BLOCK_K])
        b = b_desc.load([kt * BLOCK_K, pid_n * BLOCK_N])
        acc = tl.dot(a, b, acc, out_dtype=tl.float32)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class Block(NamedTuple):
    """A block shape: BLOCK_M x BLOCK_N x BLOCK_K, warps, pipeline stages, the programs K is
    split among, and whether a and b come in by TMA (_gemm_tma_kernel; "mma" mode, no split,
    operands a tensor map can describe, sm_90+: else the same block by _gemm_kernel)."""
    m: int
    n: int
    k: int
    warps: int
    stages: int
    split: int = 1
    tma: bool = False


# The block shapes per mode: what a GPU chooses among.
# Split-K (fp32 FMA and fp16/bf16 modes) is for outputs of few tiles and long K (M of 16 or
# 128 with N = 4096): the splits add their sums atomically into a zeroed fp32 output, in
# no fixed order (see tuned_config for deterministic mode). The "mma" blocks of 16 rows and
# 64x64x128 fill the GPU at M = 16 or 128 without split-K, so a call needs no zeroed output
# first (a second launch: host time, which decides the speed of GEMMs that small). The TMA
# blocks keep the memory system busier with fewer instructions than the same blocks by
# pointers (docs/perf/gemm.md). Every "fp8" block takes K 128 at a time (128-byte rows of a
# and b, one 1 x 128 scale group of block scaling a k-tile); its split-K blocks are for the
# 128-row outputs. Not yet timed on a GPU.
B = Block
CONFIGS = {
    "ieee": [B(128, 128, 16, 8, 3), B(128, 128, 32, 8, 2), B(128, 64, 32, 4, 3),
             B(64, 128, 32, 4, 3), B(64, 64, 32, 4, 4), B(32, 64, 32, 4, 4),
             B(64, 128, 32, 4, 3, 4), B(64, 64, 32, 4, 4, 4), B(32, 64, 32, 4, 4, 8)],
    "mma": [B(128, 256, 64, 8, 3), B(256, 128, 64, 8, 3), B(128, 128, 64, 4, 4),
            B(128, 128, 64, 8, 4), B(64, 128, 64, 4, 4), B(64, 64, 64, 4, 4),
            B(16, 128, 128, 4, 4), B(128, 128, 64, 4, 4, 2), B(64, 128, 64, 4, 4, 4),
            B(64, 64, 64, 4, 4, 4), B(16, 64, 128, 4, 4, 8), B(16, 64, 128, 4, 4),
            B(16, 32, 128, 4, 6), B(64, 64, 128, 4, 4),
            B(128, 256, 64, 8, 3, tma=True), B(128, 128, 64, 4, 4, tma=True),
            B(64, 128, 64, 4, 4, tma=True), B(64, 64, 128, 4, 4, tma=True),
            B(16, 64, 128, 4, 6, tma=True), B(16, 32, 128, 4, 6, tma=True)],
    "int8": [B(128, 256, 128, 8, 3), B(256, 128, 128, 8, 3), B(128, 128, 128, 4, 4),
             B(128, 128, 128, 8, 4), B(64, 128, 128, 4, 4), B(64, 64, 128, 4, 4),
             B(16, 128, 256, 4, 4)],
    "fp8": [B(128, 256, 128, 8, 3), B(256, 128, 128, 8, 3), B(128, 128, 128, 8, 4),
            B(128, 128, 128, 4, 4), B(64, 128, 128, 4, 4), B(64, 64, 128, 4, 4),
            B(16, 128, 128, 4, 4), B(16, 64, 128, 4, 5), B(128, 128, 128, 8, 4, 2),
            B(64, 128, 128, 4, 4, 4)],
}
del B
# The op each mode serves (the autotune cache's kernel name is "triton." + op).
MODE_OF = {"sgemm": "ieee", "wmma_gemm": "mma", "int8_gemm": "int8", "gemm_fp8": "fp8"}
# The ops whose tuned tables key on the output's dtype (their spec's dtypes), not the inputs'.
OUTPUT_KEYED = ("int8_gemm", "gemm_fp8")
FP8_BLOCK_K = 128


def config_names(op: str) -> list[str]:
    """Names of the block shapes gks.triton.<op> runs, in the order `config` indexes."""
    return [f"{s.m}x{s.n}x{s.k}_w{s.warps}_s{s.stages}" + (f"_k{s.split}" if s.split > 1 else "")
            + ("_tma" if s.tma else "") for s in CONFIGS[MODE_OF[op]]]


# gks.triton.gemm_config_names(op): any of the four GEMMs' names.
gemm_config_names = config_names


def sgemm_config_names() -> list[str]:
    """config_names("sgemm")."""
    return config_names("sgemm")


def wmma_gemm_config_names() -> list[str]:
    """config_names("wmma_gemm")."""
    return config_names("wmma_gemm")


def int8_gemm_config_names() -> list[str]:
    """config_names("int8_gemm")."""
    return config_names("int8_gemm")


def gemm_fp8_config_names() -> list[str]:
    """config_names("gemm_fp8")."""
    return config_names("gemm_fp8")


def _block(spec) -> dict:
    bm, bn, bk = spec[:3]
    return {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8}


# Triton's own autotuner (no tuned entry) chooses among the configs without split-K, whose
# output needs zeroing first.
GPU_CONFIGS = {
    mode: [triton.Config(_block(spec), num_warps=spec.warps, num_stages=spec.stages)
           for spec in specs if spec.split == 1 and not spec.tma]
    for mode, specs in CONFIGS.items()
}
# One shape under the interpreter (power-of-two blocks keep tl.dot's shape rules happy).
INTERPRETER_BLOCK = {"BLOCK_M": 32, "BLOCK_N": 32, "BLOCK_K": 32, "GROUP_M": 8}

_tuned = {
    mode: triton.autotune(configs=cfgs, key=["M", "N", "K", "SCALING", "HAS_BIAS", "GATED"] if mode == "fp8"
                          else ["M", "N", "K"])(
        _gemm_fp8_kernel if mode == "fp8" else _gemm_kernel)
    for mode, cfgs in GPU_CONFIGS.items()
}


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_operand(t: torch.Tensor, op: str, arg: str, dtypes: tuple, what: str) -> None:
    if t.dtype not in dtypes:
        raise TypeError(f"{op}: argument '{arg}' must be {what}, got {t.dtype}")
    if t.dim() != 2:
        raise ValueError(f"{op}: argument '{arg}' must be a 2-D matrix, got {t.dim()} dims "
                         f"(shape {list(t.shape)})")


def check_pair(a: torch.Tensor, b: torch.Tensor, op: str, a_name: str = "a", b_name: str = "b") -> None:
    check_same_device(a, a_name, b, b_name, op)
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"{op}: argument '{b_name}' must have shape [K, N] with K = "
                         f"{a.shape[1]} (the columns of '{a_name}', {list(a.shape)}), got "
                         f"{list(b.shape)}")


def check_config(op: str, config: int) -> None:
    count = len(CONFIGS[MODE_OF[op]])
    if not isinstance(config, int) or not -1 <= config < count:
        raise ValueError(f"gks.triton.{op}: argument 'config' must be -1 (the tuned entry, else "
                         f"Triton's autotuner) or an index below {count} into "
                         f"gks.triton.gemm_config_names('{op}'), got {config!r}")


def launch(op: str, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
           a_scale: torch.Tensor | None = None, b_scale: torch.Tensor | None = None, *,
           config: int = -1, mode: str | None = None, plan: tuple | None = None,
           fp8: dict | None = None, shape: tuple | None = None, bias: torch.Tensor | None = None) -> None:
    """c = a @ b (sgemm, wmma_gemm), or c = (a @ b) * a_scale * b_scale (int8_gemm), with
    op's arithmetic mode unless `mode` overrides it; `config` as check_config says. With
    `plan` (plan_key's answer for this call) a direct launch is kept for run_plan. gemm_fp8
    passes `fp8`, its kernel's SCALING, E5M2, INTERPRETED, HAS_BIAS and GATED (its scales as
    2-D views: see _kernel_args), `bias` where HAS_BIAS, and `shape`, its spec shape, the
    tuned tables' key ((M, N, K) else)."""
    check_config(op, config)
    mode = mode or MODE_OF[op]
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if k == 0:  # c = 0 whatever the scales (0 x a NaN scale would not be), or the epilogue of 0
        if _has_epilogue(fp8):
            _run_epilogue(torch.zeros((m, n), dtype=torch.float32, device=c.device), c, bias, fp8)
        else:
            c.zero_()
        return
    if interpreting():  # one block shape; a config's split-K and TMA still apply
        spec = CONFIGS[MODE_OF[op]][config] if config >= 0 else Block(32, 32, 32, 4, 1)
        block = INTERPRETER_BLOCK if fp8 is None else {**INTERPRETER_BLOCK, "BLOCK_K": FP8_BLOCK_K}
        _launch_block(a, b, c, a_scale, b_scale, mode, spec, block, {}, fp8, bias)
        return
    if config == -1:
        config = tuned_config(op, a, c, m, n, k, shape)
    if config >= 0:
        spec = CONFIGS[MODE_OF[op]][config]
        launched = _launch_block(a, b, c, a_scale, b_scale, mode, spec, _block(spec),
                                 {"num_warps": spec.warps, "num_stages": spec.stages}, fp8, bias)
        if plan is not None and launched is not None:
            if len(_PLANS) >= _COMPILED_MAX:
                _PLANS.clear()
            _PLANS[plan] = (*launched, spec.split, tuple(c.shape), c.dtype, c.device, c.device.index)
        return

    def autotuned_grid(meta):
        return (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]),)

    _tuned[mode][autotuned_grid](*_kernel_args(a, b, c, a_scale, b_scale, fp8 is not None, bias),
                                 **(fp8 or {"MODE": mode}))


def tuned_config(op: str, a: torch.Tensor, c: torch.Tensor, m: int, n: int, k: int,
                 shape: tuple | None = None) -> int:
    """The autotuned config of this call (of the spec shape `shape`, else (m, n, k)), or -1
    (none: Triton's autotuner chooses). Split-K adds its parts in no fixed order, so its
    results can differ in the last bits from run to run: under
    torch.use_deterministic_algorithms(True) a split-K entry gives way."""
    from gks.runtime import tables

    # The autotune key's dtype: the output's where the spec's dtypes are (as the CUDA ops).
    key_dtype = c.dtype if op in OUTPUT_KEYED else a.dtype
    config = tables.resolve_config(f"triton.{op}", a, shape or (m, n, k), -1, dtype=key_dtype)
    if config >= 0 and CONFIGS[MODE_OF[op]][config].split > 1 and \
            torch.are_deterministic_algorithms_enabled():
        return -1
    return config


def _launch_block(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                  a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, mode: str,
                  spec: Block, block: dict, compile_opts: dict, fp8: dict | None = None,
                  bias: torch.Tensor | None = None) -> tuple | None:
    """Launches block shape `spec` with block sizes `block`: by TMA where spec asks for it
    and a tensor map can describe a and b, else by pointers (split-K as spec says). Returns
    _launch's answer."""
    if spec.tma and mode == "mma" and _tma_ok(a) and _tma_ok(b):
        return _launch_tma(a, b, c, block, compile_opts)
    return _launch_split(a, b, c, a_scale, b_scale, mode, block, spec.split, compile_opts, fp8, bias)


def _tma_ok(t: torch.Tensor) -> bool:
    """Whether a tensor map can describe t: last dim contiguous, base address and row stride
    multiples of 16 bytes, on a GPU with TMA (sm_90+; under the interpreter, any)."""
    return (t.stride(1) == 1 and t.stride(0) * t.element_size() % 16 == 0 and t.data_ptr() % 16 == 0
            and (not t.is_cuda or _has_tma(t.device.index)))


@functools.cache
def _has_tma(device: int) -> bool:
    return torch.cuda.get_device_capability(device)[0] >= 9


def _descriptors(a: torch.Tensor, b: torch.Tensor, boxes: tuple) -> tuple:
    """Tensor maps of a and b for boxes ((BLOCK_M, BLOCK_K), (BLOCK_K, BLOCK_N))."""
    return (TensorDescriptor(a, a.shape, a.stride(), boxes[0]),
            TensorDescriptor(b, b.shape, b.stride(), boxes[1]))


def _launch_tma(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, block: dict,
                compile_opts: dict) -> tuple | None:
    """One launch of _gemm_tma_kernel with block sizes `block`. Returns _launch's answer."""
    m, k = a.shape
    n = b.shape[1]
    boxes = ((block["BLOCK_M"], block["BLOCK_K"]), (block["BLOCK_K"], block["BLOCK_N"]))
    grid = (triton.cdiv(m, block["BLOCK_M"]) * triton.cdiv(n, block["BLOCK_N"]), 1)
    args = (*_descriptors(a, b, boxes), c, m, n, k, c.stride(0), c.stride(1))
    key = ("tma", *block.values(), *compile_opts.values(), a.dtype, c.dtype, a.shape, b.shape,
           a.stride(), b.stride(), c.stride(), c.data_ptr() % 16 == 0)
    launched = _launch(_gemm_tma_kernel, grid, args, 3, block, compile_opts, key)
    return None if launched is None else (*launched, boxes)


def _kernel_args(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                 a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, fp8: bool = False,
                 bias: torch.Tensor | None = None) -> tuple:
    """_gemm_kernel's arguments before its meta-parameters (absent scales: c, stride 0); with
    fp8, _gemm_fp8_kernel's, whose scales come as 2-D views (a_scale [M or 1, groups or 1],
    b_scale [groups or 1, N or N / 128 or 1]) and add their group strides, with the bias
    (absent: c, stride 0) a sixth tensor and its stride last."""
    m, k = a.shape
    tensors = (a, b, c, c if a_scale is None else a_scale, c if b_scale is None else b_scale)
    ints = (m, b.shape[1], k, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
            c.stride(0), c.stride(1), 0 if a_scale is None else a_scale.stride(0),
            0 if b_scale is None else b_scale.stride(-1))
    if not fp8:
        return (*tensors, *ints)
    return (*tensors, c if bias is None else bias, *ints, a_scale.stride(1), b_scale.stride(0),
            0 if bias is None else bias.stride(0))


def _launch_split(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                  a_scale: torch.Tensor | None, b_scale: torch.Tensor | None, mode: str,
                  block: dict, split: int, compile_opts: dict, fp8: dict | None = None,
                  bias: torch.Tensor | None = None) -> tuple | None:
    """One launch of _gemm_kernel (with `fp8`, gemm_fp8's meta-parameters: of
    _gemm_fp8_kernel, and its `bias`) with block sizes `block` over k in `split` parts. With
    split > 1 the parts add into a zeroed fp32 output: c itself when it is fp32, else a
    scratch copied into c, or, with gemm_fp8's epilogue, a scratch [M, N] that
    _epilogue_kernel then takes into c. Returns _launch's answer (None for the latter: two
    launches, no plan)."""
    grid = (triton.cdiv(a.shape[0], block["BLOCK_M"]) * triton.cdiv(b.shape[1], block["BLOCK_N"]), split)
    kernel = _gemm_kernel if fp8 is None else _gemm_fp8_kernel
    meta = {**(fp8 or {"MODE": mode}), **block, "SPLIT_K": split}
    epilogue_after = split > 1 and _has_epilogue(fp8)
    if epilogue_after:  # no program holds a whole sum: the epilogue runs once the parts are in
        meta.update(HAS_BIAS=False, GATED=0)
    acc = c
    if split > 1:
        assert mode != "int8", "split-K applies to the fp32, fp16/bf16 and fp8 modes"
        if c.dtype == torch.float32 and not epilogue_after:
            acc = c.zero_()
        else:
            acc = torch.zeros((a.shape[0], b.shape[1]), dtype=torch.float32, device=c.device)
    args = _kernel_args(a, b, acc, a_scale, b_scale, fp8 is not None, None if epilogue_after else bias)
    tensors = 5 if fp8 is None else 6  # _gemm_fp8_kernel's bias is one more
    # What Triton specializes a tensor argument on beyond its dtype: 16-byte alignment.
    key = ("ptr" if fp8 is None else "fp8", *meta.values(), *compile_opts.values(), *args[tensors:],
           *((t.dtype, t.data_ptr() % 16 == 0) for t in args[:tensors]))
    launched = _launch(kernel, grid, args, tensors, meta, compile_opts, key)
    if epilogue_after:
        _run_epilogue(acc, c, bias, fp8)
        return None
    if acc is not c:
        c.copy_(acc)
    return None if launched is None else (*launched, None)


# _epilogue_kernel's tile: 128 columns (64 outputs gated) of 32 rows, 4 warps; a pass over
# memory, untuned (it runs only after split-K's parts, or for K = 0).
EPILOGUE_BLOCK = {"BLOCK_M": 32, "BLOCK_N": 128}


def _has_epilogue(fp8: dict | None) -> bool:
    return fp8 is not None and bool(fp8["HAS_BIAS"] or fp8["GATED"])


def _run_epilogue(y: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None, fp8: dict) -> None:
    """c = gemm_fp8's epilogue (fp8's HAS_BIAS and GATED, `bias`) of the fp32 product y
    [M, N], by _epilogue_kernel."""
    m, n = y.shape
    meta = {"HAS_BIAS": fp8["HAS_BIAS"], "GATED": fp8["GATED"], **EPILOGUE_BLOCK}
    grid = (triton.cdiv(m, meta["BLOCK_M"]) * triton.cdiv(n, meta["BLOCK_N"]), 1)
    args = (y, c, y if bias is None else bias, m, n, y.stride(0), y.stride(1), c.stride(0), c.stride(1),
            0 if bias is None else bias.stride(0))
    compile_opts = {} if interpreting() else {"num_warps": 4}
    key = ("epilogue", *meta.values(), *compile_opts.values(), *args[3:],
           *((t.dtype, t.data_ptr() % 16 == 0) for t in args[:3]))
    _launch(_epilogue_kernel, grid, args, 3, meta, compile_opts, key)


# Kernels already compiled, launched straight through their launcher. Triton's own call
# path (JITFunction.run) re-derives the specialization, reads its settings and builds launch
# metadata on every call: host time well beyond the launcher's own, which makes small GEMMs
# host-bound (docs/perf/gemm.md). The key holds all that Triton
# specializes a compiled kernel on: the meta-parameters and compile options, the dtypes, the
# exact shapes and strides (the integer arguments), and whether each tensor's address is
# 16-byte aligned (tests/gemm/test_gemm.py checks that last assumption against Triton). Triton's
# launch hooks (e.g. the Proton profiler's) are not called on this path. It uses Triton's
# CompiledKernel internals (run, function, packed_metadata, _init_handles), so it is taken
# only with the Triton versions it was checked on; any other goes through Triton's own call.
DIRECT_LAUNCH_TRITON = ("3.6.",)
_DIRECT_LAUNCH = triton.__version__.startswith(DIRECT_LAUNCH_TRITON)
_COMPILED: dict[tuple, tuple] = {}
_COMPILED_MAX = 1024
_current_stream = None  # Triton's own raw-stream getter, bound on first use


def _launch(fn, grid: tuple, args: tuple, tensors: int, meta: dict, compile_opts: dict,
            key: tuple) -> tuple | None:
    """Launches jit function fn on args (the first `tensors` of them tensors or tensor maps)
    with its meta-parameters; directly when a kernel was compiled for `key` on this device
    before. Returns (kernel, the launcher's arguments past those tensors, grid) when it is
    one the direct relaunch takes, else None."""
    global _current_stream
    if interpreting():
        fn[grid](*args, **meta, **compile_opts)
        return None
    if _current_stream is None:
        _current_stream = triton.runtime.driver.active.get_current_stream
    device = torch.cuda.current_device()
    key = (device, *key)
    found = _COMPILED.get(key)
    if found is None:
        kernel = fn[grid](*args, **meta, **compile_opts)  # compiles on first use
        if not _DIRECT_LAUNCH:
            return None
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        kernel._init_handles()
        # The launcher takes every parameter in signature order, constexprs included; past
        # the tensors they are fixed by the key.
        params = list(inspect.signature(fn.fn).parameters)
        found = _COMPILED[key] = (kernel, args[tensors:] + tuple(meta[p] for p in params[len(args):]))
        return (*found, grid)
    kernel, rest = found
    kernel.run(grid[0], grid[1], 1, _current_stream(device), kernel.function, kernel.packed_metadata,
               None, None, None, *args[:tensors], *rest)
    return kernel, rest, grid


# Plans: the launch of an earlier call, kept for calls like it. A gks.triton GEMM call first
# asks run_plan for its plan_key; a call like an earlier one in everything that decides what
# is launched (the op, config and output dtype; the operands' dtypes, shapes, strides,
# devices and 16-byte alignment; the tuned table in force and the deterministic mode) passed
# the same checks and resolves to the same config and kernel, so it skips them and repeats
# that launch into a fresh output. Host time decides the speed of a small GEMM, whose GPU
# time is no longer than the host's work a call (docs/perf/gemm.md).
_PLANS: dict[tuple, tuple] = {}
_tables = None  # gks.runtime.tables, bound on first use


def _tensor_key(t: torch.Tensor) -> tuple:
    return t.dtype, t.shape, t.stride(), t.get_device(), t.data_ptr() % 16 == 0


def plan_key(op: str, a, b, out_dtype, config, a_scale=None, b_scale=None) -> tuple | None:
    """The key of a call's plan; None where there is none to find (an argument that is not
    a tensor: the checks of the full path then say what is wrong)."""
    global _tables
    if _tables is None:
        from gks.runtime import tables as _tables
    try:
        key = (op, out_dtype, config, _tensor_key(a), _tensor_key(b), _tables.table_generation(),
               torch.are_deterministic_algorithms_enabled())
        if a_scale is not None:
            key += (_tensor_key(a_scale), _tensor_key(b_scale))
    except (AttributeError, TypeError):
        return None
    return key


def run_plan(key: tuple | None, a: torch.Tensor, b: torch.Tensor, a_scale=None, b_scale=None):
    """The output of the call `key` stands for, computed by repeating its launch; None when
    there is no plan for it (the caller then takes the full path, which makes one)."""
    plan = _PLANS.get(key) if key is not None else None
    if plan is None:
        return None
    kernel, rest, grid, boxes, split, shape, out_dtype, device, index = plan
    if index != torch.cuda.current_device():
        return None
    if split == 1:
        c = acc = torch.empty(shape, dtype=out_dtype, device=device)
    else:  # as _launch_split: the parts add into a zeroed fp32 output
        acc = torch.zeros(shape, dtype=torch.float32, device=device)
        c = acc if out_dtype == torch.float32 else None
    if boxes is None:
        tensors = (a, b, acc, acc if a_scale is None else a_scale, acc if b_scale is None else b_scale)
        if key[0].startswith("gemm_fp8:"):  # _gemm_fp8_kernel's bias, unread: no plan has an epilogue
            tensors += (acc,)
    else:
        tensors = (*_descriptors(a, b, boxes), acc)
    kernel.run(grid[0], grid[1], 1, _current_stream(index), kernel.function, kernel.packed_metadata,
               None, None, None, *tensors, *rest)
    return acc.to(out_dtype) if c is None else c


# The entry points: a call first tries its plan (run_plan), else checks its arguments and
# launches.


@on_tensor_device
def sgemm(a: torch.Tensor, b: torch.Tensor, config: int = -1) -> torch.Tensor:
    """c [M, N] float32 = a [M, K] @ b [K, N] (float32). config: -1 = the autotuned block
    shape if any, else Triton's autotuner; i = gks.triton.gemm_config_names("sgemm")[i]."""
    plan = plan_key("sgemm", a, b, None, config)
    c = run_plan(plan, a, b)
    if c is not None:
        return c
    op = "gks.triton.sgemm"
    check_device(a, op, "a")
    check_operand(a, op, "a", (torch.float32,), "float32")
    check_operand(b, op, "b", (torch.float32,), "float32")
    check_pair(a, b, op)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    launch("sgemm", a, b, c, config=config, plan=plan)
    return c


_HALF = (torch.float16, torch.bfloat16)


@on_tensor_device
def wmma_gemm(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32,
              config: int = -1) -> torch.Tensor:
    """c [M, N] (out_dtype: float32 or a's dtype) = a [M, K] @ b [K, N]. config as in
    gks.triton.sgemm, over gks.triton.gemm_config_names("wmma_gemm")."""
    plan = plan_key("wmma_gemm", a, b, out_dtype, config)
    c = run_plan(plan, a, b)
    if c is not None:
        return c
    op = "gks.triton.wmma_gemm"
    check_device(a, op, "a")
    check_operand(a, op, "a", _HALF, "float16 or bfloat16")
    check_operand(b, op, "b", _HALF, "float16 or bfloat16")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: argument 'b' must have the dtype of 'a' ({a.dtype}), got {b.dtype}")
    if out_dtype not in (torch.float32, a.dtype):
        raise TypeError(f"{op}: argument 'out_dtype' must be torch.float32 or the dtype of 'a' "
                        f"({a.dtype}), got {out_dtype}")
    check_pair(a, b, op)
    c = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype, device=a.device)
    if interpreting() and a.dtype == torch.bfloat16:
        # The interpreter's tl.dot misreads bfloat16 operands (numpy has no bfloat16): widen
        # them (exactly) to fp32 there. On a GPU, and for float16, the Tensor Core path runs.
        launch("wmma_gemm", a.float(), b.float(), c, config=config, mode="ieee")
    else:
        launch("wmma_gemm", a, b, c, config=config, plan=plan)
    return c


_OUT = (torch.float16, torch.bfloat16, torch.float32)


def _scale(s: torch.Tensor, like: torch.Tensor, length: int, column: bool, op: str, arg: str) -> torch.Tensor:
    check_same_device(like, "a_q", s, arg, op)
    if s.dtype != torch.float32:
        raise TypeError(f"{op}: argument '{arg}' must be float32, got {s.dtype}")
    shape = [length, 1] if column else [1, length]
    if list(s.shape) not in (shape, [length]):
        dim = "M" if column else "N"
        raise ValueError(f"{op}: argument '{arg}' must have shape {shape} or [{dim}] with "
                         f"{dim} = {length}, got {list(s.shape)}")
    return s.reshape(length) if s.dim() == 2 else s


@on_tensor_device
def int8_gemm(a_q: torch.Tensor, b_q: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
              out_dtype: torch.dtype = torch.float16, config: int = -1) -> torch.Tensor:
    """c [M, N] = float(a_q [M, K] @ b_q [K, N]) * a_scale [M, 1] * b_scale [1, N]. config as
    in gks.triton.sgemm, over gks.triton.gemm_config_names("int8_gemm")."""
    plan = plan_key("int8_gemm", a_q, b_q, out_dtype, config, a_scale, b_scale)
    c = run_plan(plan, a_q, b_q, a_scale, b_scale)
    if c is not None:
        return c
    op = "gks.triton.int8_gemm"
    check_device(a_q, op, "a_q")
    check_operand(a_q, op, "a_q", (torch.int8,), "int8")
    check_operand(b_q, op, "b_q", (torch.int8,), "int8")
    check_pair(a_q, b_q, op, "a_q", "b_q")
    if out_dtype not in _OUT:
        raise TypeError(f"{op}: argument 'out_dtype' must be torch.float16, torch.bfloat16 or "
                        f"torch.float32, got {out_dtype}")
    sa = _scale(a_scale, a_q, a_q.shape[0], True, op, "a_scale")
    sb = _scale(b_scale, a_q, b_q.shape[1], False, op, "b_scale")
    c = torch.empty((a_q.shape[0], b_q.shape[1]), dtype=out_dtype, device=a_q.device)
    launch("int8_gemm", a_q, b_q, c, sa, sb, config=config, plan=plan)
    return c


@functools.cache
def _capability(device: int) -> tuple[tuple[int, int], str]:
    return torch.cuda.get_device_capability(device), torch.cuda.get_device_name(device)


def check_fp8_tensor_cores(capability: tuple[int, int], name: str, op: str) -> None:
    """Refuses a GPU without fp8 Tensor Cores (below sm_89: Ampere has none), naming it."""
    if tuple(capability) < (8, 9):
        raise ValueError(f"{op}: argument 'a' must be on a GPU with fp8 Tensor Cores (sm_89 or newer), "
                         f"got {name} (sm_{capability[0]}{capability[1]})")


def _scales_2d(a_scale: torch.Tensor, b_scale: torch.Tensor, m: int, n: int, scaling: str) -> tuple:
    """The scales as the fp8 kernel reads them, 2-D views (_kernel_args): a_scale [M or 1,
    groups or 1], b_scale [groups or 1, N (row) or N / 128 (block) or 1]."""
    if scaling == "tensor":
        return a_scale.reshape(1, 1), b_scale.reshape(1, 1)
    if scaling == "row":
        return a_scale.reshape(m, 1), b_scale.reshape(1, n)
    return a_scale, b_scale


@on_tensor_device
def gemm_fp8(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
             scaling: str = "tensor", out_dtype: torch.dtype = torch.bfloat16, config: int = -1, *,
             bias: torch.Tensor | None = None, gated: str | None = None) -> torch.Tensor:
    """c [M, N] (out_dtype) = fp8 a [M, K] @ b [K, N] with fp32 accumulation and the scales
    of `scaling` ('tensor', 'row' or 'block'), as gks.reference.gemm_fp8 says; b row-major
    or K-major (w.t()). The fused epilogue, in fp32: + bias [N] (float32, float16 or
    bfloat16), then with gated ('silu', 'gelu' or 'gelu_tanh') c [M, N / 2] = act(y[:, 2j])
    * y[:, 2j + 1]. config as in gks.triton.sgemm, over
    gks.triton.gemm_config_names("gemm_fp8"). Needs fp8 Tensor Cores (sm_89+) on a GPU."""
    from gks.specs.gemm import GATED, check_epilogue, check_gemm_fp8, epilogue_code

    # A plan repeats one launch of _gemm_fp8_kernel without an epilogue (it keeps no bias):
    # a call with one takes the full path every time, and leaves no plan.
    epilogue = bias is not None or gated is not None
    plan = plan_key(f"gemm_fp8:{scaling}", a, b, out_dtype, config, a_scale, b_scale) \
        if isinstance(scaling, str) and not epilogue else None
    c = run_plan(plan, a, b, a_scale, b_scale)
    if c is not None:
        return c
    op = "gks.triton.gemm_fp8"
    if isinstance(a, torch.Tensor):
        check_device(a, op, "a")
    shape = check_gemm_fp8(a, b, a_scale, b_scale, scaling, out_dtype, op)
    m, n = shape[:2]
    columns = check_epilogue(m, n, bias, None, None, gated, a.device, op)
    if a.is_cuda:
        check_fp8_tensor_cores(*_capability(a.get_device()), op)
    c = torch.empty((m, columns), dtype=out_dtype, device=a.device)
    sa, sb = _scales_2d(a_scale, b_scale, m, n, scaling)
    interpreted = interpreter_variant()
    fp8 = {"SCALING": shape[3], "E5M2": bool(shape[5]), "INTERPRETED": interpreted,
           "HAS_BIAS": bias is not None, "GATED": 0 if gated is None else GATED.index(gated) + 1}
    if epilogue:  # the tuned tables key an epilogue's shapes apart (its code, a 7th dim)
        shape = (*shape, epilogue_code(bias is not None, False, gated))
    if interpreted:  # the kernel decodes the bits itself there (see _gemm_fp8_kernel)
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    launch("gemm_fp8", a, b, c, sa, sb, config=config, plan=plan, fp8=fp8, shape=shape, bias=bias)
    return c


# ---------------------------------------------------------------------------------------
# grouped_gemm: the MoE expert GEMMs in one launch (gks.specs.gemm.grouped_gemm says what
# they mean). The group offsets and counts are read on the device only: nothing waits for
# the host and nothing is sized by their values, so a call captures into a CUDA graph and
# replays with other groups.
# ---------------------------------------------------------------------------------------


@triton.jit
def _group_tile(acc, a_ptrs, b_ptrs, rows_ok, rn, K, tiles_k, stride_ak, stride_bk, N,
                sa_rows, sb_cols, stride_sak, stride_sbk,
                BLOCK_K: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr, INTERPRETED: tl.constexpr):
    """acc + a's rows where rows_ok (the others read as 0) @ one group's b, over the first
    tiles_k k-tiles of K (all of them, or none). FP8 (grouped_gemm_fp8): e4m3 a and b,
    BLOCK_K = 128, one block-scale group a k-tile: each k-tile's product, a fresh fp32
    accumulator, is scaled by its rows' a scales (sa_rows, stride_sak a group apart) and
    its columns' b scales (sb_cols, stride_sbk apart) and added to the total."""
    tl.static_assert(not FP8 or BLOCK_K == 128, "block scaling takes one 128-wide scale group a k-tile")
    rk = tl.arange(0, BLOCK_K)
    n_ok = rn < N
    for kt in range(0, tiles_k):
        k_left = K - kt * BLOCK_K
        x = tl.load(a_ptrs, mask=rows_ok[:, None] & (rk[None, :] < k_left), other=0.0)
        w = tl.load(b_ptrs, mask=(rk[:, None] < k_left) & n_ok[None, :], other=0.0)
        if FP8:
            if INTERPRETED:  # the bits, decoded exactly (see _gemm_fp8_kernel)
                part = tl.dot(fp8_value(x, False), fp8_value(w, False), input_precision="ieee")
            else:
                part = tl.dot(x, w, out_dtype=tl.float32)
            group = tl.cast(kt, tl.int64)
            sa = tl.load(sa_rows + group * stride_sak, mask=rows_ok, other=0.0)
            sb = tl.load(sb_cols + group * stride_sbk, mask=n_ok, other=0.0)
            acc += part * sa[:, None] * sb[None, :]
        elif UPCAST:
            # Triton's CPU interpreter multiplies bfloat16 as raw 16-bit integers; there
            # (only) the operands go up to fp32 first, which is exact.
            acc = tl.dot(x.to(tl.float32), w.to(tl.float32), acc)
        else:
            acc = tl.dot(x, w, acc, out_dtype=tl.float32)
        a_ptrs += tl.cast(stride_ak, tl.int64) * BLOCK_K
        b_ptrs += tl.cast(stride_bk, tl.int64) * BLOCK_K
    return acc


@triton.jit
def _grouped_contiguous_kernel(
    a_ptr, b_ptr, c_ptr, off_ptr, sa_ptr, sb_ptr, T, N, K, G,
    stride_am, stride_ak, stride_bg, stride_bk, stride_bn, stride_cm, stride_cn, stride_off,
    stride_sam, stride_sak, stride_sbg, stride_sbk, stride_sbn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    G_BLOCK: tl.constexpr, UPCAST: tl.constexpr, FP8: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """One program per (row tile of a's T rows, column tile of N): every group whose rows
    meet the tile, in group order, multiplies its rows of the tile by b[g] and stores them;
    the tile's rows in no group are stored as 0. FP8: with the block scales sa [T, K / 128]
    and sb [G, K / 128, N / 128] (_group_tile)."""
    pid_m, pid_n = _tile_of(tl.program_id(0), T, N, BLOCK_M, BLOCK_N, GROUP_M)
    row0 = pid_m * BLOCK_M
    rm = row0 + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    # Every group's bounds at once, clamped as the spec says (start into [0, T], end into
    # [start, T]): a search by comparison rather than bisection, so that offsets in no order
    # still find every group that meets the tile. G_BLOCK (G + 1 rounded up to a power of
    # two) values a program: cheap for MoE's hundreds of experts.
    gi = tl.arange(0, G_BLOCK)
    g_ok = gi < G
    lo = tl.load(off_ptr + gi.to(tl.int64) * stride_off, mask=g_ok, other=0)
    hi = tl.load(off_ptr + (gi + 1).to(tl.int64) * stride_off, mask=g_ok, other=0)
    lo = tl.minimum(tl.maximum(lo, 0), T)
    hi = tl.minimum(tl.maximum(hi, lo), T)
    meets = g_ok & (lo < hi) & (lo < row0 + BLOCK_M) & (hi > row0)
    g = tl.min(tl.where(meets, gi, G_BLOCK), axis=0)

    a_rows = a_ptr + rm[:, None].to(tl.int64) * stride_am + rk[None, :].to(tl.int64) * stride_ak
    b_cols = b_ptr + rk[:, None].to(tl.int64) * stride_bk + rn[None, :].to(tl.int64) * stride_bn
    c_ptrs = c_ptr + rm[:, None].to(tl.int64) * stride_cm + rn[None, :].to(tl.int64) * stride_cn
    sa_rows = sa_ptr + rm.to(tl.int64) * stride_sam
    sb_cols = sb_ptr + (rn // 128).to(tl.int64) * stride_sbn
    n_ok = rn[None, :] < N
    covered = rm < 0
    while g < G:  # usually once; twice where the tile holds a group boundary
        g_lo = tl.sum(tl.where(gi == g, lo, 0), axis=0)
        g_hi = tl.sum(tl.where(gi == g, hi, 0), axis=0)
        in_g = (rm >= g_lo) & (rm < g_hi)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = _group_tile(acc, a_rows, b_cols + g.to(tl.int64) * stride_bg, in_g, rn, K,
                          tl.cdiv(K, BLOCK_K), stride_ak, stride_bk, N,
                          sa_rows, sb_cols + g.to(tl.int64) * stride_sbg, stride_sak, stride_sbk,
                          BLOCK_K, UPCAST, FP8, INTERPRETED)
        # Only this group's rows are stored: the others' accumulators hold 0 x b[g], which
        # is NaN where b[g] is not finite. A later group's store overwrites an earlier one's
        # where bounds overlap (offsets in no order), as the spec says.
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=in_g[:, None] & n_ok)
        covered = covered | in_g
        meets = meets & (gi > g)
        g = tl.min(tl.where(meets, gi, G_BLOCK), axis=0)
    zero = tl.zeros((BLOCK_M, BLOCK_N), dtype=c_ptr.dtype.element_ty)
    tl.store(c_ptrs, zero, mask=(~covered & (rm < T))[:, None] & n_ok)


@triton.jit
def _grouped_masked_kernel(
    a_ptr, b_ptr, c_ptr, count_ptr, sa_ptr, sb_ptr, M, N, K,
    stride_ag, stride_am, stride_ak, stride_bg, stride_bk, stride_bn,
    stride_cg, stride_cm, stride_cn, stride_count,
    stride_sag, stride_sam, stride_sak, stride_sbg, stride_sbk, stride_sbn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr, FP8: tl.constexpr, INTERPRETED: tl.constexpr,
):
    """One program per (group, row tile of M_max, column tile of N), a group's tiles
    together (they share b[g] in L2): rows below the group's count are a[g] @ b[g], the rest
    stored as 0; a tile wholly past the count reads nothing."""
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    pid = tl.program_id(0)
    g = pid // tiles
    pid_m, pid_n = _tile_of(pid % tiles, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    count = tl.load(count_ptr + g.to(tl.int64) * stride_count)
    rows = tl.minimum(tl.maximum(count, 0), M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    rows_ok = rm < rows
    a_rows = (a_ptr + g.to(tl.int64) * stride_ag + rm[:, None].to(tl.int64) * stride_am
              + rk[None, :].to(tl.int64) * stride_ak)
    b_cols = (b_ptr + g.to(tl.int64) * stride_bg + rk[:, None].to(tl.int64) * stride_bk
              + rn[None, :].to(tl.int64) * stride_bn)
    # A tile wholly past the count runs no k-tile (a trip count of 0 rather than a branch
    # around the loop, which Triton's pipeliner would leave unpipelined).
    tiles_k = tl.where(pid_m * BLOCK_M < rows, tl.cdiv(K, BLOCK_K), 0)
    sa_rows = sa_ptr + g.to(tl.int64) * stride_sag + rm.to(tl.int64) * stride_sam
    sb_cols = sb_ptr + g.to(tl.int64) * stride_sbg + (rn // 128).to(tl.int64) * stride_sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = _group_tile(acc, a_rows, b_cols, rows_ok, rn, K, tiles_k, stride_ak, stride_bk, N,
                      sa_rows, sb_cols, stride_sak, stride_sbk, BLOCK_K, UPCAST, FP8, INTERPRETED)
    # Rows past the count read a as 0, so their accumulators hold 0 x b[g]: NaN where b[g]
    # is not finite. They are written as 0 by selection.
    out = tl.where(rows_ok[:, None], acc, 0.0)
    c_ptrs = (c_ptr + g.to(tl.int64) * stride_cg + rm[:, None].to(tl.int64) * stride_cm
              + rn[None, :].to(tl.int64) * stride_cn)
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


class GroupedBlock(NamedTuple):
    """A grouped_gemm block shape: BLOCK_M x BLOCK_N x BLOCK_K, warps, pipeline stages."""
    m: int
    n: int
    k: int
    warps: int
    stages: int


def grouped_block(rows_per_group: int, fp8: bool = False, interpreted: bool = False) -> GroupedBlock:
    """The block shape for groups of about this many rows (the contiguous layout's mean,
    the masked layout's M_max): row tiles no taller than a group needs, so few rows of a
    tile go to waste past a count or on a second group; fp8 k-tiles are one 128-wide scale
    group. Under the interpreter one small shape (tl.dot takes blocks of 16 and more). A
    heuristic, not yet timed against alternatives on a GPU."""
    if interpreted:
        return GroupedBlock(32, 32, 128 if fp8 else 32, 4, 1)
    if rows_per_group >= 128:
        return GroupedBlock(128, 128, 128 if fp8 else 64, 8, 3)
    if rows_per_group > 32:
        return GroupedBlock(64, 128, 128 if fp8 else 64, 4, 4)
    return GroupedBlock(max(16, next_pow2(rows_per_group)), 64, 128, 4, 4)


def _run_grouped(a, b, c, group_offsets, group_counts, scales=None) -> torch.Tensor:
    """Launches grouped_gemm's kernels (either layout) for a checked call, into c; scales:
    grouped_gemm_fp8's (a_scale, b_scale), its operands e4m3."""
    if c.numel() == 0:
        return c
    interpreted = interpreter_variant()
    fp8 = scales is not None
    upcast = interpreted and a.dtype == torch.bfloat16
    if fp8:
        sa, sb = scales
        if interpreted:  # the kernel decodes the bits itself there (see _group_tile)
            a, b = a.view(torch.uint8), b.view(torch.uint8)
    else:
        sa, sb = a, a  # not read
    n, k = b.shape[2], b.shape[1]
    groups = b.shape[0]
    masked = group_counts is not None
    rows = a.shape[1] if masked else a.shape[0] // max(groups, 1)
    blk = grouped_block(rows, fp8, interpreted)
    flags = {"UPCAST": upcast, "FP8": fp8, "INTERPRETED": interpreted}
    sb_strides = sb.stride() if fp8 else (0, 0, 0)
    if masked:
        sa_strides = sa.stride() if fp8 else (0, 0, 0)
        grid = (groups * triton.cdiv(a.shape[1], blk.m) * triton.cdiv(n, blk.n),)
        _grouped_masked_kernel[grid](
            a, b, c, group_counts, sa, sb, a.shape[1], n, k, *a.stride(), *b.stride(), *c.stride(),
            group_counts.stride(0), *sa_strides, *sb_strides,
            BLOCK_M=blk.m, BLOCK_N=blk.n, BLOCK_K=blk.k, GROUP_M=8, **flags,
            num_warps=blk.warps, num_stages=blk.stages)
        return c
    total = a.shape[0]
    sa_strides = sa.stride() if fp8 else (0, 0)
    grid = (triton.cdiv(total, blk.m) * triton.cdiv(n, blk.n),)
    _grouped_contiguous_kernel[grid](
        a, b, c, group_offsets, sa, sb, total, n, k, groups, *a.stride(), *b.stride(), *c.stride(),
        group_offsets.stride(0), *sa_strides, *sb_strides, BLOCK_M=blk.m, BLOCK_N=blk.n, BLOCK_K=blk.k,
        GROUP_M=8, G_BLOCK=next_pow2(groups + 1), **flags, num_warps=blk.warps, num_stages=blk.stages)
    return c


@on_tensor_device
def grouped_gemm(a: torch.Tensor, b: torch.Tensor, group_offsets: torch.Tensor | None = None,
                 group_counts: torch.Tensor | None = None) -> torch.Tensor:
    """The MoE expert GEMMs in one launch, as gks.reference.grouped_gemm says: contiguous
    (a [T, K], b [G, K, N], group_offsets [G + 1] int32 -> c [T, N]) or masked (a [G, M_max,
    K], group_counts [G] int32 -> c [G, M_max, N]); fp16/bf16, fp32 accumulation, c in a's
    dtype, every element of c written (0 outside the groups). No host synchronization."""
    from gks.specs.gemm import check_grouped_gemm

    op = "gks.triton.grouped_gemm"
    check_grouped_gemm(a, b, group_offsets, group_counts, op)
    check_device(a, op, "a")  # the others are on a's device (checked above)
    c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=a.dtype, device=a.device)
    return _run_grouped(a, b, c, group_offsets, group_counts)


@on_tensor_device
def grouped_gemm_fp8(a: torch.Tensor, b: torch.Tensor, a_scale: torch.Tensor, b_scale: torch.Tensor,
                     group_offsets: torch.Tensor | None = None, group_counts: torch.Tensor | None = None,
                     out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """grouped_gemm's product of float8_e4m3fn a and b with DeepSeek-V3's block scales, c in
    out_dtype, as gks.reference.grouped_gemm_fp8 says (a_scale [T or G, M_max, ceil(K /
    128)], b_scale [G, ceil(K / 128), ceil(N / 128)]; b row-major or K-major). Needs fp8
    Tensor Cores (sm_89+) on a GPU. No host synchronization."""
    from gks.specs.gemm import check_grouped_gemm_fp8

    op = "gks.triton.grouped_gemm_fp8"
    if isinstance(a, torch.Tensor):
        check_device(a, op, "a")
    check_grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, out_dtype, op)
    if a.is_cuda:
        check_fp8_tensor_cores(*_capability(a.get_device()), op)
    c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=out_dtype, device=a.device)
    return _run_grouped(a, b, c, group_offsets, group_counts, (a_scale, b_scale))