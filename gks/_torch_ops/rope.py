# SPDX-License-Identifier: Apache-2.0
"""The rope family's torch ops: gks::apply_rope and its in-place form gks::apply_rope_. See
gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate

__all__ = ["apply_rope", "apply_rope_"]


def _apply_rope(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
                is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_out, k_out): the rotary embedding of q [..., Hq, D] and k [..., Hk, D] (the same
    token dims; [B, S, H, D] or packed [T, H, D]) at each token's position. positions: int32
    or int64, q's token dims. cos_sin_cache: [max_pos, rotary_dim] fp32, cos in the first
    half of a row and sin in the second; rotary_dim <= D is even, the values past it pass
    through. is_neox: NeoX (half-split) pairs, else GPT-J (interleaved). A position outside
    [0, max_pos) makes its token's rotated values NaN. gks.apply_rope_ is the in-place form.
    Runs on the current CUDA stream."""
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    cuda.apply_rope_out(q, k, cos_sin_cache, positions, q_out, k_out, is_neox)
    return q_out, k_out


apply_rope = gks_op("apply_rope", _apply_rope)


@apply_rope.op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
      is_neox: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    q_out, k_out = torch.empty_like(q), torch.empty_like(k)
    validate(cuda.apply_rope_out, q, k, cos_sin_cache, positions, q_out, k_out, is_neox)
    return q_out, k_out


def _apply_rope_(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
                 is_neox: bool = True) -> None:
    """gks.apply_rope in place (FlashInfer's and vLLM's form): q and k overwritten, e.g. the
    q and k views of a fused qkv tensor."""
    cuda.apply_rope_out(q, k, cos_sin_cache, positions, q, k, is_neox)


apply_rope_ = gks_op("apply_rope_", _apply_rope_, mutates_args=("q", "k"))


@apply_rope_.op.register_fake
def _(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
      is_neox: bool = True) -> None:
    validate(cuda.apply_rope_out, q, k, cos_sin_cache, positions, q, k, is_neox)
