# SPDX-License-Identifier: Apache-2.0
"""gks::gemm — see gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op, native_allocates
from gks.profile import autotune


def _out_dtype(a: torch.Tensor, out_dtype: torch.dtype | None) -> torch.dtype:
    if out_dtype is None:
        return a.dtype
    if out_dtype not in (torch.float32, a.dtype):
        raise TypeError(
            f"gks.gemm: argument 'out_dtype' must be None, torch.float32 or the dtype of 'a' "
            f"({a.dtype}), got {out_dtype}"
        )
    return out_dtype


def _gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, config: int = -1
) -> torch.Tensor:
    """c = a @ b: float16 or bfloat16 a [M, K] and b [K, N], fp32 accumulation, c in
    out_dtype (None: a's dtype; or torch.float32).

    On an sm_90 GPU (with the library built for sm_90a) this runs the Hopper kernel (TMA,
    wgmma, warp-specialized and persistent); elsewhere, or when a or b is not 16-byte
    aligned (base pointer, or leading dimension in bytes), the WMMA kernel
    (gks.wmma_gemm's). gks.cuda.gemm_path tells which. Operands are row-major with any
    leading dimension (stride(1) == 1); transposed views are rejected (ValueError).
    config: -1 = tuned entry if any, else the heuristic; an index into
    gks.cuda.gemm_config_names() forces that Hopper config (ignored by the WMMA fallback).
    Outputs too small to fill the GPU split K over several CTAs (a temporary of at most
    8 x M x N fp32 partial sums, allocated in stream order); the stream-K config takes a
    temporary of one tile's fp32 sums per SM instead. Runs on the current CUDA stream.
    """
    m, n, k = autotune.gemm_dims("gks.gemm", a, b)
    c_dtype = _out_dtype(a, out_dtype)
    config = autotune.resolve_config("gemm", a, (m, n, k), config)
    if native_allocates():  # one native call: c comes from PyTorch's allocator
        return cuda.gemm_alloc(a, b, c_dtype, config)
    c = a.new_empty((m, n), dtype=c_dtype)
    cuda.gemm_out(a, b, c, config)
    return c


gemm = gks_op("gemm", _gemm)


@gemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, config: int = -1):
    return torch.empty((a.shape[0], b.shape[1]), dtype=_out_dtype(a, out_dtype), device=a.device)
