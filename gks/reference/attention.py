# SPDX-License-Identifier: Apache-2.0
"""The attention family's reference: attention forward with the log-sum-exp, and the shape and
scale rules the Triton and Pallas backends share."""

from __future__ import annotations

import math

import torch

__all__ = ["flash_attention_fwd"]

HEAD_DIMS = (32, 64, 96, 128, 256)  # the head dims every backend compiles


def check_attention_shapes(op: str, q_shape, k_shape, v_shape) -> None:
    """The shape rules the Triton and Pallas backends enforce once q, k and v are known to
    have 4 dims: a supported head dim, k [B, Hkv, Sk, D] with q's B and D, v shaped like k,
    and Hq a multiple of Hkv. Raises ValueError naming the argument."""
    batch, heads_q, _, head_dim = q_shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(
            f"{op}: head dim (the last dim of q, k and v) must be one of 32, 64, 96, 128, 256, "
            f"got {head_dim}"
        )
    if k_shape[0] != batch or k_shape[3] != head_dim:
        raise ValueError(
            f"{op}: argument 'k' must have shape [{batch}, Hkv, Sk, {head_dim}] (q's batch "
            f"and head dim), got {list(k_shape)}"
        )
    if tuple(v_shape) != tuple(k_shape):
        raise ValueError(f"{op}: argument 'v' must have the shape of 'k' {list(k_shape)}, got {list(v_shape)}")
    heads_kv = k_shape[1]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(
            f"{op}: the query heads ({heads_q}, dim 1 of q) must be a multiple of the key/value "
            f"heads ({heads_kv}, dim 1 of k and v)"
        )


def checked_softmax_scale(op: str, softmax_scale: float | None, head_dim: int) -> float:
    """The scale the Triton and Pallas backends apply: 1/sqrt(head_dim) unless given, which
    must be a finite number > 0 (ValueError naming the argument otherwise)."""
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{op}: argument 'softmax_scale' must be a finite number > 0, got {scale}")
    return scale


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward with the log-sum-exp of each query row.

    q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D], Hq % Hkv == 0. Returns o [B, Hq, Sq, D] (q's
    dtype; float64 when precise) and lse [B, Hq, Sq] (float32; float64 when precise), the
    natural log of the sum of exp(scaled scores). Causal masks key j for query i when
    j > i + (Sk - Sq); a row that sees no key gets o = 0 and lse = -inf.
    """
    compute = torch.float64 if precise else torch.float32
    o, lse = attention_in(q, k, v, causal, softmax_scale, compute)
    if precise:
        return o, lse
    return o.to(q.dtype), lse.to(torch.float32)


def attention_in(q, k, v, causal, softmax_scale, dtype: torch.dtype):
    """The same math done entirely in `dtype` (scores, softmax and P V). With the inputs'
    own dtype this is "PyTorch in the input dtype", the yardstick the tests hold every
    backend's error to."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError("flash_attention_fwd: q, k and v must have 4 dims [batch, heads, seq, head_dim]")
    _, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k = k.shape[1], k.shape[2]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(
            f"flash_attention_fwd: the query heads ({heads_q}) must be a multiple of the "
            f"key/value heads ({heads_kv})"
        )
    scale = 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)
    group = heads_q // heads_kv
    qc, kc, vc = q.to(dtype), k.to(dtype), v.to(dtype)
    if group > 1:
        kc = kc.repeat_interleave(group, dim=1)
        vc = vc.repeat_interleave(group, dim=1)
    # The scores of a block of query rows at a time, so that the bench shapes (e.g. 256
    # heads x 4096 x 4096 in float64: 32 GiB) fit beside the inputs.
    scores_per_row = max(1, q.shape[0] * heads_q * seqlen_k)
    block = max(1, _SCORES_BUDGET_BYTES // (scores_per_row * qc.element_size()))
    outs, lses = [], []
    for start in range(0, seqlen_q, block) if seqlen_q else [0]:
        stop = min(seqlen_q, start + block)
        scores = torch.matmul(qc[:, :, start:stop], kc.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            cols = torch.arange(seqlen_k, device=q.device)[None, :]
            scores = scores.masked_fill(cols > rows + (seqlen_k - seqlen_q), float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # -inf for a row that sees no key (or Sk = 0)
        # Shift by 0 where lse is -inf: every score there is -inf, so p = 0 and o = 0, not NaN.
        shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(scores.sub_(shift[..., None]))
        del scores
        outs.append(torch.matmul(p, vc))
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


_SCORES_BUDGET_BYTES = 1 << 30
