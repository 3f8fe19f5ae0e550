# SPDX-License-Identifier: Apache-2.0
"""Tensor Core GEMM in Triton: fp16/bf16 a @ b with fp32 accumulation (tl.dot), output
fp32 by default or the input dtype. Any strides, any M, N, K."""

from __future__ import annotations

import torch

from gks.triton._common import check_device
from gks.triton._gemm import check_operand, check_pair, interpreting, launch, plan_key, run_plan

_HALF = (torch.float16, torch.bfloat16)


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
