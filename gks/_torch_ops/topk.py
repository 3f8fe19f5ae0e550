# SPDX-License-Identifier: Apache-2.0
"""The topk family's torch op: gks::top_k (see gks._torch_ops for what every custom op
guarantees)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import row_dims
from gks.runtime.tables import resolve_config

__all__ = ["top_k"]


def _outputs(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    # A k the library refuses still gets outputs to hand it, so that it names k itself
    # (torch.empty would refuse a negative size first, or try a huge one).
    n = x.shape[-1] if x.dim() else 1
    shape = (*x.shape[:-1], min(max(k, 0), n))
    return (torch.empty(shape, dtype=x.dtype, device=x.device),
            torch.empty(shape, dtype=torch.int64, device=x.device))


def _top_k(x: torch.Tensor, k: int, sorted: bool = True, config: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, indices): the k largest values of each row of x [..., N] (its last dim) and
    their int64 indices, [..., k] each, values in x's dtype. torch.topk's order: NaN above
    +inf, -0.0 equal to 0.0, and equal values by the lower index. sorted: descending (ties
    by ascending index); else those above the k-th value in index order, then those equal
    to it in index order. 0 <= k <= min(N, 2048).

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides. Runs on the
    current CUDA stream. config: the launch shape (-1: the tuned table's pick for this shape
    if any, else the heuristic; see gks.cuda.top_k_out)."""
    values, indices = _outputs(x, k)
    m, n = row_dims(x)
    cuda.top_k_out(x, values, indices, k, sorted, resolve_config("top_k", x, (m, n, k), config))
    return values, indices


top_k = gks_op("top_k", _top_k)


@top_k.op.register_fake
def _(x: torch.Tensor, k: int, sorted: bool = True, config: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = _outputs(x, k)
    validate(cuda.top_k_out, x, values, indices, k, sorted, config)
    return values, indices
