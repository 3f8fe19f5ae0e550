# SPDX-License-Identifier: Apache-2.0
"""The attention family's torch op: gks::flash_attention_fwd (see gks._torch_ops for what every
custom op guarantees)."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import attention_dims
from gks.runtime.tables import resolve_config

__all__ = ["flash_attention_fwd"]


def _aligned16(t: torch.Tensor, fake: bool) -> bool:
    """The kernel copies 16-byte chunks: the data pointer and the batch, head and sequence
    strides must be 16-byte multiples. A fake tensor has no data pointer: its storage offset
    stands in (allocations are 16-byte aligned)."""
    elems = 16 // t.element_size()
    address = t.storage_offset() * t.element_size() if fake else t.data_ptr()
    return address % 16 == 0 and all(
        s % elems == 0 or n <= 1 for n, s in zip(t.shape[:3], t.stride()[:3])
    )


def _kernel_input(t: torch.Tensor, fake: bool = False) -> torch.Tensor:
    # A view whose rows do not start on 16-byte boundaries (a slice at an odd offset, a
    # stride that is not a multiple of 8) is copied; every other layout is used in place.
    if t.dim() == 4 and t.numel() > 0 and t.stride(-1) == 1 and not _aligned16(t, fake):
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
