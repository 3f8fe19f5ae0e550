# SPDX-License-Identifier: Apache-2.0
"""gks::wmma_gemm — see gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks.profile.autotune import gemm_dims, resolve_config


def _out_dtype(a: torch.Tensor, out_dtype: torch.dtype) -> torch.dtype:
    if out_dtype not in (torch.float32, a.dtype):
        raise TypeError(
            f"gks.wmma_gemm: argument 'out_dtype' must be torch.float32 or the dtype of 'a' "
            f"({a.dtype}), got {out_dtype}"
        )
    return out_dtype


def _wmma_gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, config: int = -1
) -> torch.Tensor:
    """c = a @ b on Tensor Cores (nvcuda::wmma, mma.sync): float16 or bfloat16 a [M, K] and
    b [K, N], fp32 accumulation, c in out_dtype (float32, or a's dtype).

    Operands are row-major with any leading dimension (stride(1) == 1); transposed views
    are rejected (ValueError). config: -1 = autotuned entry if any, else the heuristic; an
    index into gks.cuda.gemm_config_names("wmma_gemm") forces that config.
    """
    m, n, k = gemm_dims("gks.wmma_gemm", a, b)
    c = a.new_empty((m, n), dtype=_out_dtype(a, out_dtype))
    cuda.wmma_gemm_out(a, b, c, resolve_config("wmma_gemm", a, (m, n, k), config))
    return c


wmma_gemm = gks_op("wmma_gemm", _wmma_gemm)


@wmma_gemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype = torch.float32, config: int = -1):
    return torch.empty((a.shape[0], b.shape[1]), dtype=_out_dtype(a, out_dtype), device=a.device)
