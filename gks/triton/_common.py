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
