# SPDX-License-Identifier: Apache-2.0
"""The attention family's DLPack entry points: FlashAttention forward and its path query, its
backward, its varlen form, split-KV decode, and the merge of partial attention states. See
gks.cuda."""

from __future__ import annotations

from gks import _native
from gks.specs.attention import (DECODE_OP, SOFTCAP_ERROR, VARLEN_BWD_OP, VARLEN_OP, checked_max_seqlen,
                                 checked_num_splits, window_pair)

__all__ = ["flash_attention_bwd_out", "flash_attention_bwd_path", "flash_attention_decode_out", "flash_attention_fwd_out", "flash_attention_fwd_path",
           "flash_attention_varlen_bwd_out", "flash_attention_varlen_fwd_out", "merge_state_out", "merge_states_out"]

_OP = "gks.flash_attention_fwd"
_BWD_OP = "gks.flash_attention_bwd"


def _args(causal, softmax_scale, window_size, softcap, config, op: str = _OP) -> tuple:
    """The binding's scalar arguments. Only what the binding's types cannot take is refused
    here (window_size not a pair of ints, a softcap that is no number), in the C++ API's
    words; the C++ API checks the values."""
    left, right = window_pair(op, window_size)
    try:
        cap = float(softcap)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: {SOFTCAP_ERROR}{softcap!r}") from None
    scale = None if softmax_scale is None else float(softmax_scale)
    return bool(causal), scale, left, right, cap, int(config)


def flash_attention_fwd_out(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                            window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            config: int = -1) -> None:
    """(o, lse) = flash_attention_fwd(q, k, v, causal, softmax_scale, window_size, softcap),
    written into o ([B, Hq, Sq, Dv], v's head dim, q's dtype, last dim contiguous) and lse
    ([B, Hq, Sq], float32); q and k [.., D], v [B, Hkv, Sk, Dv], Dv = D or, with D = 192,
    128. q, k, v and o must be 16-byte aligned (base and batch/head/sequence strides);
    see gks.flash_attention_fwd for the meaning. config: -1 runs the best kernel here, else
    an index into the library's table (gks.registry.get("flash_attention_fwd").configs,
    e.g. "mma.sync", "wgmma"); a Hopper kernel forced where it cannot run gives way.
    flash_attention_fwd_path tells which runs."""
    _native.module().flash_attention_fwd(q, k, v, o, lse, *_args(causal, softmax_scale, window_size,
                                                                 softcap, config))


def flash_attention_fwd_path(q, k, v, o, lse, causal: bool = False, softmax_scale=None,
                             window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             config: int = -1) -> str:
    """The name of the kernel (a name in the config table, e.g. 'wgmma' or 'mma.sync')
    flash_attention_fwd_out(...) with these arguments runs on this GPU (after the same
    argument checks)."""
    return str(_native.module().flash_attention_fwd_path(
        q, k, v, o, lse, *_args(causal, softmax_scale, window_size, softcap, config)))


def flash_attention_bwd_out(do, q, k, v, o, lse, dq, dk, dv, causal: bool = False, softmax_scale=None,
                            window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            deterministic: bool = False, config: int = -1) -> None:
    """(dq, dk, dv) = flash_attention_bwd(do, q, k, v, o, lse, causal, softmax_scale,
    window_size, softcap) (see gks.flash_attention_bwd), written into dq ([B, Hq, Sq, D]),
    dk ([B, Hkv, Sk, D]) and dv ([B, Hkv, Sk, Dv]), q's dtype, last dim contiguous, apart from
    the inputs. Every tensor but lse must be 16-byte aligned (base and batch/head/sequence
    strides). config: -1 runs the best kernel here (wgmma.ws on sm_90 at D = Dv = 64 or 128,
    else mma.sync), else an index into the library's table (gks.registry.get(
    "flash_attention_bwd").configs: "mma.sync", "wgmma", "wgmma.ws"; a forced config gives
    way where it cannot run: wgmma.ws to wgmma, wgmma to mma.sync). The wgmma kernels add dQ
    in fp32 (atomics, or the L2's bulk reduce-adds), so its last bits vary from run to run;
    deterministic=True gives the same bits run after run: wgmma.ws adding dQ in a fixed
    order of key blocks (with a causal or window mask, or where ceil(Sk / 128) <= the SM
    count), else mma.sync.
    flash_attention_bwd_path tells which runs. delta = rowsum(do * o) (and the wgmma
    kernels' fp32 dQ and lse2) go through stream-ordered temporaries."""
    _native.module().flash_attention_bwd(do, q, k, v, o, lse, dq, dk, dv,
                                         *_bwd_args(causal, softmax_scale, window_size, softcap, deterministic, config))


def flash_attention_bwd_path(do, q, k, v, o, lse, dq, dk, dv, causal: bool = False, softmax_scale=None,
                             window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                             deterministic: bool = False, config: int = -1) -> str:
    """The name of the kernel ('wgmma.ws', 'wgmma' or 'mma.sync') flash_attention_bwd_out(...) with these
    arguments runs on this GPU (after the same argument checks)."""
    return str(_native.module().flash_attention_bwd_path(
        do, q, k, v, o, lse, dq, dk, dv, *_bwd_args(causal, softmax_scale, window_size, softcap, deterministic, config)))


def _bwd_args(causal, softmax_scale, window_size, softcap, deterministic, config) -> tuple:
    """The backward binding's scalar arguments: _args' with deterministic before config."""
    causal, scale, left, right, cap, config = _args(causal, softmax_scale, window_size, softcap, config, _BWD_OP)
    return causal, scale, left, right, cap, bool(deterministic), config


def flash_attention_varlen_fwd_out(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, o, lse,
                                   seqused_k=None, page_table=None, causal: bool = False, softmax_scale=None,
                                   window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                   config: int = -1) -> None:
    """(o, lse) = flash_attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, ...) (see
    gks.flash_attention_varlen_fwd), written into o ([total_q, Hq, Dv], q's dtype, last dim
    contiguous) and lse ([Hq, total_q], float32). q, k, v and o must be 16-byte aligned (base
    and every stride but the last). page_table ([B, max_pages] int32): k and v are a paged
    cache [num_pages, page_size, Hkv, D]. max_seqlen_q sizes the grid (a longer sequence is
    still computed whole); max_seqlen_k is checked (an int >= 0) and not needed by the
    kernel. config: -1 runs the wgmma kernel where it can (sm_90, D = Dv = 64 or 128) and
    the mma.sync kernel elsewhere, else an index into the library's table (gks.registry.get(
    "flash_attention_varlen_fwd").configs: "mma.sync", "wgmma"; wgmma gives way to mma.sync
    where it cannot run)."""
    seqlen_q = checked_max_seqlen(VARLEN_OP, "max_seqlen_q", max_seqlen_q)
    checked_max_seqlen(VARLEN_OP, "max_seqlen_k", max_seqlen_k)
    causal, scale, left, right, cap, config = _args(causal, softmax_scale, window_size, softcap, config, VARLEN_OP)
    _native.module().flash_attention_varlen_fwd(q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, seqlen_q,
                                                o, lse, causal, scale, left, right, cap, config)


def flash_attention_varlen_bwd_out(do, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int,
                                   o, lse, dq, dk, dv, causal: bool = False, softmax_scale=None,
                                   window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                                   deterministic: bool = False, config: int = -1) -> None:
    """(dq, dk, dv) = flash_attention_varlen_bwd(do, q, k, v, cu_seqlens_q, cu_seqlens_k, ...)
    (see gks.flash_attention_varlen_bwd), written into dq ([total_q, Hq, D]), dk ([total_k,
    Hkv, D]) and dv ([total_k, Hkv, Dv]), q's dtype, last dim contiguous, apart from the
    inputs; their rows outside every sequence are left as they are. max_seqlen_q and
    max_seqlen_k size the grids (a longer sequence is still computed whole). Every tensor
    but lse and the cu_seqlens must be 16-byte aligned (base and every stride but the last).
    One kernel family, config 0 "mma.sync" (deterministic whatever `deterministic` says)."""
    seqlen_q = checked_max_seqlen(VARLEN_BWD_OP, "max_seqlen_q", max_seqlen_q)
    seqlen_k = checked_max_seqlen(VARLEN_BWD_OP, "max_seqlen_k", max_seqlen_k)
    causal, scale, left, right, cap, config = _args(causal, softmax_scale, window_size, softcap, config, VARLEN_BWD_OP)
    _native.module().flash_attention_varlen_bwd(do, q, k, v, cu_seqlens_q, cu_seqlens_k, seqlen_q, seqlen_k, o, lse,
                                                dq, dk, dv, causal, scale, left, right, cap, bool(deterministic),
                                                config)


def merge_state_out(v_a, s_a, v_b, s_b, v, s) -> None:
    """(v, s) = merge_state(v_a, s_a, v_b, s_b) (see gks.merge_state), written into v (v_a's
    shape and dtype, last dim contiguous) and s (s_a's shape, float32). v may be exactly v_a
    and s exactly s_a: the in-place form."""
    _native.module().merge_state(v_a, s_a, v_b, s_b, v, s)


def merge_states_out(v, s, v_out, s_out) -> None:
    """(v_out, s_out) = merge_states(v, s) (see gks.merge_states): v [..., K, D], s [..., K]
    into v_out [..., D] (v's dtype) and s_out [...] (float32), apart from the inputs."""
    _native.module().merge_states(v, s, v_out, s_out)


def flash_attention_decode_out(q, k_cache, v_cache, cache_seqlens, o, lse, page_table=None, causal: bool = True,
                               softmax_scale=None, window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                               num_splits: int = 0) -> None:
    """(o, lse) = flash_attention_decode(q, k_cache, v_cache, cache_seqlens, page_table, ...)
    (see gks.flash_attention_decode), written into o ([B, Hq, Sq, D], q's dtype, last dim
    contiguous) and lse ([B, Hq, Sq], float32). q, the caches and o must be 16-byte aligned.
    The split partials come from the library's stream-ordered pool (a graph allocation while
    the stream is captured), sized from the shapes alone."""
    splits = checked_num_splits(DECODE_OP, num_splits)
    _native.module().flash_attention_decode(
        q, k_cache, v_cache, cache_seqlens, o, lse, page_table,
        *_args(causal, softmax_scale, window_size, softcap, splits, DECODE_OP))
