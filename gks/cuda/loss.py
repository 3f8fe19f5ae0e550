# SPDX-License-Identifier: Apache-2.0
"""The loss family's DLPack entry points: cross entropy's forward and backward. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["cross_entropy_fwd_out", "cross_entropy_bwd_out"]


def cross_entropy_fwd_out(logits, target, loss, lse, ignore_index: int = -100, config: int = -1) -> None:
    """Per row of logits [T, V] (fp32/fp16/bf16, last dim contiguous) and target [T]
    (int64/int32): lse [T] (float32) = log(sum(exp(logits[row]))) and loss [T] (float32 or
    the logits' dtype) = lse - logits[row, target]. A row whose target is ignore_index gets
    loss 0; any other target outside [0, V) gets NaN. No reduction over the rows.

    config: -1 picks a warp or a block a row by heuristic, else an index into the library's
    table (gks.registry.get("cross_entropy") names it: "warp", "block-256", "block-512")."""
    _native.module().cross_entropy_fwd(logits, target, loss, lse, int(ignore_index), int(config))


def cross_entropy_bwd_out(logits, target, lse, dloss, dlogits, ignore_index: int = -100, config: int = -1) -> None:
    """dlogits [T, V] (the logits' dtype) = (exp(logits - lse[:, None]) - onehot(target)) *
    dloss[:, None]: the gradient of the per-row losses, from the forward's lse. dloss: [T]
    float32, any stride (an expanded scalar too). Rows whose target is ignore_index are zero;
    rows with a target outside [0, V) are NaN. dlogits may be logits itself (in place)."""
    _native.module().cross_entropy_bwd(logits, target, lse, dloss, dlogits, int(ignore_index), int(config))
