# SPDX-License-Identifier: Apache-2.0
"""The attention family's torch ops: gks::flash_attention_fwd, gks::flash_attention_bwd,
gks::flash_attention_varlen_fwd, gks::flash_attention_varlen_bwd, gks::flash_attention_decode, gks::merge_state (and its
in-place form gks::merge_state_) and gks::merge_states (see gks._torch_ops for what every
custom op guarantees)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import attention_dims, varlen_attention_dims
from gks.runtime.tables import resolve_config

__all__ = ["flash_attention_bwd", "flash_attention_decode", "flash_attention_fwd", "flash_attention_varlen_bwd",
           "flash_attention_varlen_fwd", "merge_state", "merge_state_", "merge_states"]


def _aligned16(t: torch.Tensor, fake: bool) -> bool:
    """The kernel copies 16-byte chunks: the data pointer and every stride but the last must
    be 16-byte multiples. A fake tensor has no data pointer: its storage offset stands in
    (allocations are 16-byte aligned)."""
    elems = 16 // t.element_size()
    address = t.storage_offset() * t.element_size() if fake else t.data_ptr()
    return address % 16 == 0 and all(
        s % elems == 0 or n <= 1 for n, s in zip(t.shape[:-1], t.stride()[:-1])
    )


def _kernel_input(t: torch.Tensor, fake: bool = False, dims: int = 4) -> torch.Tensor:
    # A view whose rows do not start on 16-byte boundaries (a slice at an odd offset, a
    # stride that is not a multiple of 8) is copied; every other layout is used in place.
    if t.dim() == dims and t.numel() > 0 and t.stride(-1) == 1 and not _aligned16(t, fake):
        return t.clone(memory_format=torch.contiguous_format)
    return t


def _flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    config: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward: (o, lse) = softmax(scores) v and its log-sum-exp, with scores
    softmax_scale * q k^T, capped to softcap * tanh(scores / softcap) when softcap > 0.

    q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv]: fp16 or bf16 CUDA tensors,
    Hq % Hkv == 0, D in {32, 64, 96, 128, 192, 256}, Dv = D or, with D = 192, 128
    (DeepSeek-V3's MLA); the last dim contiguous, other strides free (a [B, S, H, D] tensor
    passed as .transpose(1, 2) is read in place). softmax_scale defaults to 1 / sqrt(D).
    Query i sees key j when i + (Sk - Sq) - left <= j <= i + (Sk - Sq) + right for
    window_size = (left, right), -1 unbounded (FlashAttention's sliding window, aligned
    bottom-right); causal is right = 0 (window_size's right must then be -1 or 0). softcap:
    0 (none) or a finite number > 0. Returns o [B, Hq, Sq, Dv] (contiguous, q's dtype) and
    lse [B, Hq, Sq] (float32, natural log; -inf for a row that sees no key, whose o is 0).
    Runs on the current CUDA stream. config: -1 the tuned table's kernel for this shape, else
    the best kernel here; an index forces one (see gks.cuda.flash_attention_fwd_out).
    Differentiable in o (autograd: gks.flash_attention_bwd on the saved q, k, v, o, lse);
    lse is not differentiable.
    """
    dims = attention_dims(q, k, causal, v)
    if dims is not None:
        config = resolve_config("flash_attention_fwd", q, dims, config)
    o, lse = _outputs(q, v)
    cuda.flash_attention_fwd_out(
        _kernel_input(q), _kernel_input(k), _kernel_input(v), o, lse, causal, softmax_scale,
        window_size, softcap, config,
    )
    return o, lse


def _outputs(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """o [B, Hq, Sq, Dv] (contiguous, q's dtype: v's head dim, which may differ from q's) and
    lse [B, Hq, Sq]; for inputs that are not 4-D, q-shaped ones, which the library then
    refuses, naming the argument."""
    o_shape = (*q.shape[:-1], v.shape[-1]) if q.dim() == 4 and v.dim() == 4 else q.shape
    o = torch.empty(o_shape, dtype=q.dtype, device=q.device)
    return o, q.new_empty(q.shape[:-1], dtype=torch.float32)


# torch infers no schema with a tuple default (window_size): it is given here, in the body's order.
_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, bool causal=False, float? softmax_scale=None, "
    "int[] window_size=[-1, -1], float softcap=0., int config=-1) -> (Tensor, Tensor)"
)

flash_attention_fwd = gks_op("flash_attention_fwd", _flash_attention_fwd, schema=_SCHEMA)


@flash_attention_fwd.op.register_fake
def _(q, k, v, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0, config=-1):
    o, lse = _outputs(q, v)
    # What the op copies (a view whose rows are not 16-byte aligned) arrives aligned.
    q, k, v = (_kernel_input(t, fake=True) for t in (q, k, v))
    validate(cuda.flash_attention_fwd_out, q, k, v, o, lse, causal, softmax_scale, window_size,
             softcap, config)
    return o, lse


def _bwd_outputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv: q's, k's and v's shapes in q's dtype, contiguous (for inputs that are not
    4-D the same: the library then refuses them, naming the argument)."""
    return tuple(torch.empty(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))


def _flash_attention_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    deterministic: bool = False,
    config: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Attention backward: (dq, dk, dv) of flash_attention_fwd's o from do (the gradient of
    o), the forward's o and lse, and q, k, v with the forward's options (same meaning).

    do and o [B, Hq, Sq, Dv] (q's dtype, last dim contiguous), lse [B, Hq, Sq] float32.
    Returns dq [B, Hq, Sq, D], dk [B, Hkv, Sk, D], dv [B, Hkv, Sk, Dv] (q's dtype,
    contiguous; dk and dv summed over each key/value head's query heads). With S the scores
    and P = exp(S - lse): dV = P^T dO, dS = P * (dO V^T - rowsum(dO * o)), dQ = scale dS K,
    dK = scale dS^T Q (times 1 - tanh^2 of the capped score under a softcap). A row that saw
    no key (lse = -inf) gets dq = 0. On sm_90 at D = Dv = 64 or 128 the default kernel
    (wgmma.ws) adds dq in fp32 in the order its blocks finish, so its last bits may vary
    from run to run; deterministic=True gives the same bits run after run (wgmma.ws in a
    fixed order, or mma.sync). config: -1
    the tuned table's kernel for this shape, else the best kernel here; an index forces one
    (see gks.cuda.flash_attention_bwd_out). Runs on the current CUDA stream.
    """
    dims = attention_dims(q, k, causal, v)
    if dims is not None:
        config = resolve_config("flash_attention_bwd", q, dims, config)
    dq, dk, dv = _bwd_outputs(q, k, v)
    cuda.flash_attention_bwd_out(_kernel_input(do), _kernel_input(q), _kernel_input(k), _kernel_input(v),
                                 _kernel_input(o), lse, dq, dk, dv, causal, softmax_scale, window_size, softcap,
                                 deterministic, config)
    return dq, dk, dv


_BWD_SCHEMA = (
    "(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, bool causal=False, float? softmax_scale=None, "
    "int[] window_size=[-1, -1], float softcap=0., bool deterministic=False, int config=-1) -> (Tensor, Tensor, Tensor)"
)

flash_attention_bwd = gks_op("flash_attention_bwd", _flash_attention_bwd, schema=_BWD_SCHEMA)


@flash_attention_bwd.op.register_fake
def _(do, q, k, v, o, lse, causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0, deterministic=False,
      config=-1):
    dq, dk, dv = _bwd_outputs(q, k, v)
    do, q, k, v, o = (_kernel_input(t, fake=True) for t in (do, q, k, v, o))
    validate(cuda.flash_attention_bwd_out, do, q, k, v, o, lse, dq, dk, dv, causal, softmax_scale, window_size,
             softcap, deterministic, config)
    return dq, dk, dv


# gks.flash_attention_fwd is differentiable in o: its backward is gks.flash_attention_bwd on
# the saved q, k, v, o and lse (nothing else is saved). lse is marked non-differentiable (a
# loss through it would need rowsum(dO * o) - dlse in the backward, which no backend takes),
# as FlashAttention's own autograd does with its softmax_lse.
def _fwd_setup_context(ctx, inputs, output) -> None:
    q, k, v, causal, softmax_scale, window_size, softcap = inputs[:7]
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.options = (causal, softmax_scale, tuple(window_size), softcap)


def _fwd_backward(ctx, do, _dlse):
    q, k, v, o, lse = ctx.saved_tensors
    if do.dim() == 4 and do.shape[-1] > 1 and do.stride(-1) != 1:  # e.g. the expanded gradient of o.sum()
        do = do.contiguous()
    dq, dk, dv = flash_attention_bwd(do, q, k, v, o, lse, *ctx.options)
    return dq, dk, dv, None, None, None, None, None


flash_attention_fwd.op.register_autograd(_fwd_backward, setup_context=_fwd_setup_context)


def flash_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
) -> torch.Tensor:
    """Differentiable attention for training (gks.flash_attention; not an op of its own, so
    not in __all__): o of gks.flash_attention_fwd (same arguments), whose backward is
    gks.flash_attention_bwd (torch autograd; q, k, v, o and lse saved; under
    torch.compile(fullgraph=True) and in CUDA graphs too)."""
    return flash_attention_fwd(q, k, v, causal, softmax_scale, window_size, softcap)[0]


def _varlen_outputs(q: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """o [total_q, Hq, Dv] (q's dtype) and lse [Hq, total_q]; for a q that is not 3-D (or a v
    neither packed nor paged), q-shaped ones, which the library then refuses, naming the
    argument."""
    if q.dim() == 3 and v.dim() in (3, 4):
        return (torch.empty((*q.shape[:2], v.shape[-1]), dtype=q.dtype, device=q.device),
                torch.empty((q.shape[1], q.shape[0]), dtype=torch.float32, device=q.device))
    return torch.empty(q.shape, dtype=q.dtype, device=q.device), torch.empty(q.shape, dtype=torch.float32,
                                                                             device=q.device)


def _seqlen_hints(*values) -> list[int]:
    """max_seqlen values as ints (a symbolic one by its hint), for the fake kernels' checks."""
    if all(isinstance(n, int) for n in values):
        return list(values)
    return [int(getattr(getattr(n, "node", None), "hint", 0) or 0) for n in values]


def _flash_attention_varlen_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    seqused_k: torch.Tensor | None = None,
    page_table: torch.Tensor | None = None,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    config: int = -1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over B sequences of different lengths packed along one row dim (a server's
    prefill batch; FlashAttention's flash_attn_varlen_func).

    q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv]: fp16 or bf16 CUDA
    tensors, head dims as gks.flash_attention_fwd's, the last dim contiguous, other strides
    free (q, k, v of a fused [T, 3, H, D] qkv are read in place). cu_seqlens_q,
    cu_seqlens_k [B + 1] (int32, on the device): sequence b is rows [cu_seqlens_q[b],
    cu_seqlens_q[b + 1]) of q and keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v, of
    which only the first seqused_k[b] ([B] int32) when given. With page_table ([B, max_pages]
    int32) k and v are a paged KV cache [num_pages, page_size, Hkv, D] (vLLM's and
    FlashAttention's layout, any page size): key j of sequence b is row j % page_size of page
    page_table[b, j // page_size], sequence b has cu_seqlens_k[b + 1] - cu_seqlens_k[b] keys
    (or seqused_k[b]) up to max_pages * page_size, and a page index outside the cache reads as
    zeros. causal, window_size, softcap
    and GQA as gks.flash_attention_fwd's, aligned bottom-right within each sequence.
    max_seqlen_q and max_seqlen_k (ints >= 0, the longest lengths) size the grid; the
    lengths stay on the device (no host synchronization: CUDA-graph safe, a capture replays
    with other lengths), every bound is clamped into the packed tensors, and a sequence
    longer than max_seqlen_q is still computed whole. Returns o [total_q, Hq, Dv] (q's
    dtype; rows in no sequence are left unwritten) and lse [Hq, total_q] (float32; -inf,
    with o = 0, for a row that sees no key). Runs on the current CUDA stream. config: -1 the
    tuned table's kernel for this shape, else mma.sync; an index forces one (see
    gks.cuda.flash_attention_varlen_fwd_out).
    """
    dims = varlen_attention_dims(q, k, v, cu_seqlens_q, max_seqlen_q, max_seqlen_k, causal, page_table)
    if dims is not None and all(d >= 0 for d in dims):
        config = resolve_config("flash_attention_varlen_fwd", q, dims, config)
    o, lse = _varlen_outputs(q, v)
    key_dims = 3 if page_table is None else 4
    cuda.flash_attention_varlen_fwd_out(
        _kernel_input(q, dims=3), _kernel_input(k, dims=key_dims), _kernel_input(v, dims=key_dims), cu_seqlens_q,
        cu_seqlens_k, max_seqlen_q, max_seqlen_k, o, lse, seqused_k, page_table, causal, softmax_scale, window_size,
        softcap, config,
    )
    return o, lse


_VARLEN_SCHEMA = (
    "(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_k, SymInt max_seqlen_q, "
    "SymInt max_seqlen_k, Tensor? seqused_k=None, Tensor? page_table=None, bool causal=False, "
    "float? softmax_scale=None, "
    "int[] window_size=[-1, -1], float softcap=0., int config=-1) -> (Tensor, Tensor)"
)

flash_attention_varlen_fwd = gks_op("flash_attention_varlen_fwd", _flash_attention_varlen_fwd,
                                    schema=_VARLEN_SCHEMA)


@flash_attention_varlen_fwd.op.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None, page_table=None, causal=False,
      softmax_scale=None, window_size=(-1, -1), softcap=0.0, config=-1):
    o, lse = _varlen_outputs(q, v)
    key_dims = 3 if page_table is None else 4
    q = _kernel_input(q, fake=True, dims=3)
    k, v = (_kernel_input(t, fake=True, dims=key_dims) for t in (k, v))
    hint = _seqlen_hints(max_seqlen_q, max_seqlen_k)  # symbolic: checked with its hint
    validate(cuda.flash_attention_varlen_fwd_out, q, k, v, cu_seqlens_q, cu_seqlens_k, *hint, o, lse, seqused_k,
             page_table, causal, softmax_scale, window_size, softcap, config)
    return o, lse


def _flash_attention_varlen_bwd(
    do: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    o: torch.Tensor,
    lse: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    deterministic: bool = False,
    config: int = -1,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The backward of gks.flash_attention_varlen_fwd over packed keys: (dq, dk, dv) from do
    [total_q, Hq, Dv] (the gradient of o), the forward's o and lse [Hq, total_q], and q, k,
    v, the cu_seqlens and the options as the forward took them (no seqused_k, no page
    table). Each sequence's gradients are gks.flash_attention_bwd's over its rows. Returns dq
    [total_q, Hq, D], dk [total_k, Hkv, D], dv [total_k, Hkv, Dv] (q's dtype, contiguous;
    rows in no sequence are 0). max_seqlen_q and max_seqlen_k size the grids (a longer
    sequence is still computed whole; no host synchronization). Deterministic (the mma.sync
    kernels). Runs on the current CUDA stream.
    """
    # Zeroed: the kernels write the rows of the sequences alone.
    dq, dk, dv = (torch.zeros(t.shape, dtype=q.dtype, device=q.device) for t in (q, k, v))
    cuda.flash_attention_varlen_bwd_out(
        _kernel_input(do, dims=3), _kernel_input(q, dims=3), _kernel_input(k, dims=3), _kernel_input(v, dims=3),
        cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, _kernel_input(o, dims=3), lse, dq, dk, dv, causal,
        softmax_scale, window_size, softcap, deterministic, config,
    )
    return dq, dk, dv


_VARLEN_BWD_SCHEMA = (
    "(Tensor do, Tensor q, Tensor k, Tensor v, Tensor o, Tensor lse, Tensor cu_seqlens_q, Tensor cu_seqlens_k, "
    "SymInt max_seqlen_q, SymInt max_seqlen_k, bool causal=False, float? softmax_scale=None, "
    "int[] window_size=[-1, -1], float softcap=0., bool deterministic=False, int config=-1) -> (Tensor, Tensor, Tensor)"
)

flash_attention_varlen_bwd = gks_op("flash_attention_varlen_bwd", _flash_attention_varlen_bwd,
                                    schema=_VARLEN_BWD_SCHEMA)


@flash_attention_varlen_bwd.op.register_fake
def _(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal=False, softmax_scale=None,
      window_size=(-1, -1), softcap=0.0, deterministic=False, config=-1):
    dq, dk, dv = _bwd_outputs(q, k, v)
    do, q, k, v, o = (_kernel_input(t, fake=True, dims=3) for t in (do, q, k, v, o))
    validate(cuda.flash_attention_varlen_bwd_out, do, q, k, v, cu_seqlens_q, cu_seqlens_k,
             *_seqlen_hints(max_seqlen_q, max_seqlen_k), o, lse, dq, dk, dv, causal, softmax_scale, window_size,
             softcap, deterministic, config)
    return dq, dk, dv


# gks.flash_attention_varlen_fwd is differentiable in o over packed keys (no seqused_k, no
# page table: a backward needs each key's gradient row): gks.flash_attention_varlen_bwd on
# the saved q, k, v, o, lse and cu_seqlens.
def _varlen_setup_context(ctx, inputs, output) -> None:
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k, page_table = inputs[:9]
    causal, softmax_scale, window_size, softcap = inputs[9:13]
    o, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.packed = seqused_k is None and page_table is None
    ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
    ctx.lengths = (max_seqlen_q, max_seqlen_k)
    ctx.options = (causal, softmax_scale, tuple(window_size), softcap)


def _varlen_backward(ctx, do, _dlse):
    if not ctx.packed:
        raise ValueError("gks.flash_attention_varlen_fwd: the backward takes packed keys: pass neither 'seqused_k' "
                         "nor 'page_table' to a forward you differentiate")
    q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
    if do.dim() == 3 and do.shape[-1] > 1 and do.stride(-1) != 1:
        do = do.contiguous()
    dq, dk, dv = flash_attention_varlen_bwd(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, *ctx.lengths,
                                            *ctx.options)
    return (dq, dk, dv) + (None,) * 11


flash_attention_varlen_fwd.op.register_autograd(_varlen_backward, setup_context=_varlen_setup_context)


def _decode_outputs(q: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """o like q (contiguous) and lse [B, Hq, Sq]; for a q that is not 4-D, q-shaped ones,
    which the library then refuses, naming it."""
    o = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return o, q.new_empty(q.shape[:-1] if q.dim() == 4 else q.shape, dtype=torch.float32)


def _flash_attention_decode(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    cache_seqlens: torch.Tensor,
    page_table: torch.Tensor | None = None,
    causal: bool = True,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    num_splits: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode attention over a KV cache, split over the keys (flash-decoding).

    q [B, Hq, Sq, D] (fp16/bf16, D in {64, 128, 256}, last dim contiguous, other strides
    free). Dense caches k_cache, v_cache [B, Hkv, S_max, D] (strided views allowed: a
    [B, S, H, D] cache passes as .transpose(1, 2)); or paged [num_pages, page_size, Hkv, D]
    with page_table [B, max_pages] (int32): key j of sequence b is row j % page_size of page
    page_table[b, j // page_size]. cache_seqlens [B] (int32, on the device): sequence b holds
    keys [0, L_b) and its Sq queries are its last Sq positions, so causal and window_size
    align bottom-right per sequence (as gks.flash_attention_fwd with Sk = L_b). Returns o
    [B, Hq, Sq, D] (q's dtype) and lse [B, Hq, Sq] (float32; -inf, with o = 0, for a row
    that sees no key). num_splits: 0 chooses from the shapes and the SM count, never from
    the lengths' values, so the call is CUDA-graph safe; 1 to 256 forces it. Runs on the
    current CUDA stream.
    """
    o, lse = _decode_outputs(q)
    cuda.flash_attention_decode_out(
        _kernel_input(q), _kernel_input(k_cache), _kernel_input(v_cache), cache_seqlens, o, lse, page_table,
        causal, softmax_scale, window_size, softcap, num_splits,
    )
    return o, lse


_DECODE_SCHEMA = (
    "(Tensor q, Tensor k_cache, Tensor v_cache, Tensor cache_seqlens, Tensor? page_table=None, "
    "bool causal=True, float? softmax_scale=None, int[] window_size=[-1, -1], float softcap=0., "
    "int num_splits=0) -> (Tensor, Tensor)"
)

flash_attention_decode = gks_op("flash_attention_decode", _flash_attention_decode, schema=_DECODE_SCHEMA)


@flash_attention_decode.op.register_fake
def _(q, k_cache, v_cache, cache_seqlens, page_table=None, causal=True, softmax_scale=None,
      window_size=(-1, -1), softcap=0.0, num_splits=0):
    o, lse = _decode_outputs(q)
    q, k_cache, v_cache = (_kernel_input(t, fake=True) for t in (q, k_cache, v_cache))
    validate(cuda.flash_attention_decode_out, q, k_cache, v_cache, cache_seqlens, o, lse, page_table, causal,
             softmax_scale, window_size, softcap, num_splits)
    return o, lse


def _merge_state_outputs(v_a: torch.Tensor, s_a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.empty(v_a.shape, dtype=v_a.dtype, device=v_a.device), torch.empty(
        s_a.shape, dtype=torch.float32, device=v_a.device)


def _merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor,
                 s_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The merge of two partial attention states of the same rows (split-KV decode, cascade
    attention): (v_a, s_a) over some keys and (v_b, s_b) over others give (v, s) over all.
    v_a, v_b [..., D] (fp32/fp16/bf16, last dim contiguous), s_a, s_b [...] float32, the lse
    of each part's scores (natural log, as gks.flash_attention_fwd returns it):
    s = log(exp(s_a) + exp(s_b)), v = (exp(s_a - s) v_a + exp(s_b - s) v_b), in fp32. A part
    with s = -inf saw no key and contributes nothing (its v is not read); a row whose parts
    both saw nothing gives v = 0, s = -inf; a NaN or +inf s gives NaN. Returns v (v_a's
    dtype) and s (float32); gks.merge_state_ writes them into v_a and s_a."""
    v, s = _merge_state_outputs(v_a, s_a)
    cuda.merge_state_out(v_a, s_a, v_b, s_b, v, s)
    return v, s


merge_state = gks_op("merge_state", _merge_state)


@merge_state.op.register_fake
def _(v_a, s_a, v_b, s_b):
    v, s = _merge_state_outputs(v_a, s_a)
    validate(cuda.merge_state_out, v_a, s_a, v_b, s_b, v, s)
    return v, s


def _merge_state_(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor) -> None:
    """gks.merge_state in place: (v_a, s_a) becomes the merged state."""
    cuda.merge_state_out(v_a, s_a, v_b, s_b, v_a, s_a)


merge_state_ = gks_op("merge_state_", _merge_state_, mutates_args=("v_a", "s_a"))


@merge_state_.op.register_fake
def _(v_a, s_a, v_b, s_b):
    validate(cuda.merge_state_out, v_a, s_a, v_b, s_b, v_a, s_a)


def _merge_states_outputs(v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """v_out [..., D] and s_out [...] for v [..., K, D]; for a v of fewer than two dims, which
    the library refuses naming it, v-shaped ones."""
    lead = v.shape[:-2] if v.dim() >= 2 else v.shape
    d = v.shape[-1:] if v.dim() >= 2 else ()
    return (torch.empty((*lead, *d), dtype=v.dtype, device=v.device),
            torch.empty(lead, dtype=torch.float32, device=v.device))


def _merge_states(v: torch.Tensor, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The merge of K partial attention states of each row: v [..., K, D] (fp32/fp16/bf16,
    last dim contiguous, other strides free: FlashInfer's [T, K, H, D] passes as
    .transpose(1, 2)), s [..., K] float32 -> v [..., D] (v's dtype), s [...] (float32), as
    gks.merge_state merges two. K = 0 gives v = 0, s = -inf."""
    v_out, s_out = _merge_states_outputs(v)
    cuda.merge_states_out(v, s, v_out, s_out)
    return v_out, s_out


merge_states = gks_op("merge_states", _merge_states)


@merge_states.op.register_fake
def _(v, s):
    v_out, s_out = _merge_states_outputs(v)
    validate(cuda.merge_states_out, v, s, v_out, s_out)
    return v_out, s_out
