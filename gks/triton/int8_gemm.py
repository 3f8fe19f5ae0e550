# SPDX-License-Identifier: Apache-2.0
"""INT8 GEMM in Triton: int8 a_q @ b_q with int32 accumulation (tl.dot), then the per-row
scale of a and the per-column scale of b, output float16 (default), bfloat16 or float32."""

from __future__ import annotations

import torch

from gks.triton._common import check_device
from gks.triton._gemm import check_operand, check_pair, launch, plan_key, run_plan

_OUT = (torch.float16, torch.bfloat16, torch.float32)


def _scale(s: torch.Tensor, length: int, column: bool, op: str, arg: str) -> torch.Tensor:
    if s.dtype != torch.float32:
        raise TypeError(f"{op}: argument '{arg}' must be float32, got {s.dtype}")
    shape = [length, 1] if column else [1, length]
    if list(s.shape) not in (shape, [length]):
        dim = "M" if column else "N"
        raise ValueError(f"{op}: argument '{arg}' must have shape {shape} or [{dim}] with "
                         f"{dim} = {length}, got {list(s.shape)}")
    return s.reshape(length) if s.dim() == 2 else s


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
    sa = _scale(a_scale, a_q.shape[0], True, op, "a_scale")
    sb = _scale(b_scale, b_q.shape[1], False, op, "b_scale")
    c = torch.empty((a_q.shape[0], b_q.shape[1]), dtype=out_dtype, device=a_q.device)
    launch("int8_gemm", a_q, b_q, c, sa, sb, config=config, plan=plan)
    return c
