# SPDX-License-Identifier: Apache-2.0
"""SGEMM in Triton: c = a @ b in fp32 with tl.dot(input_precision="ieee") (FP32 FMA,
never TF32). Any strides (transposed views included), any M, N, K."""

from __future__ import annotations

import torch

from gks.triton._common import check_device
from gks.triton._gemm import check_operand, check_pair, launch, plan_key, run_plan


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
