# SPDX-License-Identifier: Apache-2.0
from __future__ import annotations

import torch

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_float(t: torch.Tensor, op: str, arg: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{op}: argument '{arg}' must be float32, float16 or bfloat16, got {t.dtype}")


def check_same(a: torch.Tensor, a_name: str, b: torch.Tensor, b_name: str, op: str) -> None:
    if b.device != a.device:
        raise ValueError(
            f"{op}: argument '{b_name}' must be on the device of '{a_name}' ({a.device}), got {b.device}"
        )
    if b.dtype != a.dtype:
        raise TypeError(
            f"{op}: argument '{b_name}' must have the dtype of '{a_name}' ({a.dtype}), got {b.dtype}"
        )


def check_device(t: torch.Tensor, op: str, arg: str) -> None:
    """CUDA tensors, or CPU tensors under Triton's interpreter."""
    import os

    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    if t.device.type != "cuda" and not (interpreted and t.device.type == "cpu"):
        raise ValueError(
            f"{op}: argument '{arg}' must be a CUDA tensor (or a CPU tensor with "
            f"TRITON_INTERPRET=1), got a tensor on {t.device}"
        )


def check_norm_weight(weight: torch.Tensor, cols: int, op: str) -> None:
    """The weight of rmsnorm and softmax_rmsnorm: [cols] (x's last dim), contiguous."""
    if weight.dim() != 1 or weight.shape[0] != cols:
        raise ValueError(
            f"{op}: argument 'weight' must have shape [{cols}] (the last dim of x), "
            f"got {list(weight.shape)}"
        )
    if weight.numel() > 1 and weight.stride(0) != 1:
        raise ValueError(f"{op}: argument 'weight' must be contiguous, got stride {weight.stride(0)}")


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def row_num_warps(block_n: int, elem_bytes: int, max_warps: int = 16) -> int:
    """Warps for a program that holds a block of block_n elements: about 64 bytes of it a
    thread (16 bytes x 4 accesses), between 1 and max_warps."""
    return max(1, min(max_warps, block_n * elem_bytes // (32 * 64)))


def long_row_max_warps(elem_bytes: int, fused: bool = False) -> int:
    """The warp cap for the one-pass row kernels (softmax, quantize). 16-bit rows of 32768
    take 32 warps (32 values a thread): measured on an H200 at 8192x32768, fp16 fused
    softmax(rmsnorm) 387 vs 434 us at 16 warps, quantize 226 vs 230, softmax even; fp32
    rows stay at 16 (quantize 323 vs 329 at 32; softmax 518 vs 550), except the fused op's,
    which holds the weight beside the row (a persistent variant at 32 warps ran 721 us vs
    the 16-warp kernel's 794: 104 registers a thread at 16 warps, 53 at 32)."""
    return 32 if elem_bytes < 4 or fused else 16
