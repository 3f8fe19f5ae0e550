# SPDX-License-Identifier: Apache-2.0
"""gks::sgemm — see gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks.profile.autotune import gemm_dims, resolve_config


def _sgemm(a: torch.Tensor, b: torch.Tensor, config: int = -1) -> torch.Tensor:
    """c = a @ b in float32 with FP32 FMA arithmetic (never TF32).

    a [M, K], b [K, N]: float32 CUDA tensors, row-major with any leading dimension
    (stride(1) == 1). Transposed views are rejected (ValueError); pass .contiguous().
    config: -1 picks the autotuned config for this device and shape bucket if
    ``python -m gks autotune --kernel sgemm`` stored one, else the shape heuristic; an index
    into gks.cuda.gemm_config_names("sgemm") forces that tile config. Runs on the current
    CUDA stream.
    """
    m, n, k = gemm_dims("gks.sgemm", a, b)
    c = a.new_empty((m, n), dtype=torch.float32)
    cuda.sgemm_out(a, b, c, resolve_config("sgemm", a, (m, n, k), config))
    return c


sgemm = gks_op("sgemm", _sgemm)


@sgemm.op.register_fake
def _(a: torch.Tensor, b: torch.Tensor, config: int = -1) -> torch.Tensor:
    return torch.empty((a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
