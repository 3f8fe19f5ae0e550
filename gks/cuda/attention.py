# SPDX-License-Identifier: Apache-2.0
"""The attention family's DLPack entry points: FlashAttention forward and its path query. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["flash_attention_fwd_out", "flash_attention_fwd_path"]


def flash_attention_fwd_out(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                            config: int = -1) -> None:
    """(o, lse) = flash_attention_fwd(q, k, v, causal, softmax_scale), written into o
    ([B, Hq, Sq, D], q's dtype, last dim contiguous) and lse ([B, Hq, Sq], float32).
    q, k, v and o must be 16-byte aligned (base and batch/head/sequence strides); see
    gks.flash_attention_fwd for the meaning. config: -1 runs the best kernel here, else an
    index into the library's table (gks.registry.get("flash_attention_fwd").configs):
    "mma.sync", or "wgmma" (head dims 64 and 128 on an sm_90 GPU with the library built for
    sm_90a; elsewhere it gives way to mma.sync). flash_attention_fwd_path
    tells which runs."""
    scale = None if softmax_scale is None else float(softmax_scale)
    _native.module().flash_attention_fwd(q, k, v, o, lse, bool(causal), scale, int(config))


def flash_attention_fwd_path(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                             config: int = -1) -> str:
    """'wgmma' or 'mma.sync': the kernel flash_attention_fwd_out(...) with these arguments
    runs on this GPU (after the same argument checks)."""
    scale = None if softmax_scale is None else float(softmax_scale)
    return str(_native.module().flash_attention_fwd_path(q, k, v, o, lse, bool(causal), scale,
                                                          int(config)))
