# SPDX-License-Identifier: Apache-2.0
"""The attention family: FlashAttention forward with lse, (o, lse) = attention(q, k, v,
causal, softmax_scale, window_size, softcap); and the merge of partial attention states
(merge_state, merge_states: split-KV decode and cascade attention combine their parts so).

A shape is (B, Hq, Hkv, Sq, Sk, D, causal) or (B, Hq, Hkv, Sq, Sk, D, causal, Dv): q
[B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], causal 0 or 1. Dv, v's (and o's)
head dim, is D unless given (DeepSeek's MLA runs D = 192 with Dv = 128): it comes last and
optional so that every shape of D = Dv, and the tuned tables' keys made from them, stay as
they were (gks.runtime.dims.attention_dims gives it only where it differs from D). The
sliding window and the softcap are options of a call, not dims of a shape: the inputs a
shape makes use neither (no window, no cap), and the tuned tables key on the shape alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math
import operator

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, mixed_sizes, reference_peer, register, shape_seed
from gks.runtime.args import float32_scalar

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["flash_attention_bwd", "flash_attention_decode", "flash_attention_fwd", "flash_attention_varlen_bwd",
           "flash_attention_varlen_fwd", "merge_state", "merge_states"]


HEAD_DIMS = (32, 64, 96, 128, 192, 256)  # the q/k head dims every backend compiles
# v's head dims other than q/k's that a q/k head dim also takes: DeepSeek-V3's MLA (192, 128),
# as FlashAttention-3 runs it.
OTHER_V_HEAD_DIMS = {192: (128,)}


def v_head_dim_ok(head_dim: int, head_dim_v: int) -> bool:
    """Whether v's head dim may be head_dim_v beside q and k's head_dim (a supported one)."""
    return head_dim_v == head_dim or head_dim_v in OTHER_V_HEAD_DIMS.get(head_dim, ())


def check_attention_shapes(op: str, q_shape, k_shape, v_shape) -> None:
    """The shape rules the Triton and Pallas backends enforce once q, k and v are known to
    have 4 dims: a supported head dim D, k [B, Hkv, Sk, D] with q's B and D, v [B, Hkv, Sk,
    Dv] with k's first three dims and Dv = D (or 128 with D = 192), and Hq a multiple of
    Hkv. Raises ValueError naming the argument, in the C++ API's words and order."""
    batch, heads_q, _, head_dim = q_shape
    if head_dim not in HEAD_DIMS:
        raise ValueError(
            f"{op}: head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, "
            f"got {head_dim}"
        )
    if k_shape[0] != batch or k_shape[3] != head_dim:
        raise ValueError(
            f"{op}: argument 'k' must have shape [{batch}, Hkv, Sk, {head_dim}] (q's batch "
            f"and head dim), got {list(k_shape)}"
        )
    if tuple(v_shape[:3]) != tuple(k_shape[:3]) or not v_head_dim_ok(head_dim, v_shape[3]):
        raise ValueError(
            f"{op}: argument 'v' must have shape [{k_shape[0]}, {k_shape[1]}, {k_shape[2]}, "
            f"{head_dim}] (k's first three dims and the head dim; 128 is also allowed with head "
            f"dim 192), got {list(v_shape)}"
        )
    heads_kv = k_shape[1]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(
            f"{op}: the query heads ({heads_q}, dim 1 of q) must be a multiple of the key/value "
            f"heads ({heads_kv}, dim 1 of k and v)"
        )


def checked_softmax_scale(op: str, softmax_scale: float | None, head_dim: int) -> float:
    """The scale the Triton and Pallas backends apply: 1/sqrt(head_dim) unless given, which
    must be a finite number > 0 (ValueError naming the argument otherwise)."""
    if softmax_scale is None:
        return 1.0 / math.sqrt(head_dim)
    scale = float32_scalar(softmax_scale, "softmax_scale", op)  # as the C++ binding narrows it
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"{op}: argument 'softmax_scale' must be a finite number > 0, got {scale}")
    return float(softmax_scale)


WINDOW_ERROR = "argument 'window_size' must be (left, right) with each -1 (unbounded) or >= 0, got "
CAUSAL_WINDOW_ERROR = ("argument 'window_size' must have right -1 or 0 with causal=True (causal is "
                       "right = 0), got ")
SOFTCAP_ERROR = "argument 'softcap' must be 0 (none) or a finite number > 0, got "
SOFTCAP_RANGE_ERROR = ("argument 'softcap' must be 0 or between 1e-30 and 1e30 (the kernels take "
                       "float32 factors of it), got ")
SOFTCAP_RATIO_ERROR = ("argument 'softcap' must leave softmax_scale / softcap a float32 normal "
                       "number (1.2e-38 to 3.4e+38), got ")
# The caps the kernels take: the C++ API narrows softcap and softmax_scale / softcap to float32.
SOFTCAP_MIN, SOFTCAP_MAX = 1e-30, 1e30
FLOAT32_NORMAL_MIN, FLOAT32_MAX = 1.1754943508222875e-38, 3.4028234663852886e38


def window_pair(op: str, window_size) -> tuple[int, int]:
    """(left, right) of window_size, a tuple or list of two ints (anything with __index__:
    floats are refused); the values are not checked (checked_window does that, or the C++
    API). ValueError naming the argument otherwise, as the C++ API words it."""
    pair = None
    if isinstance(window_size, (tuple, list)) and len(window_size) == 2:
        try:
            pair = (operator.index(window_size[0]), operator.index(window_size[1]))
        except TypeError:
            pass
    if pair is None:
        # A sequence shows as a tuple, as the C++ API shows a pair: the torch op's schema hands
        # the body a list for any sequence given.
        shown = (f"({', '.join(map(repr, window_size))})" if isinstance(window_size, (tuple, list))
                 else repr(window_size))
        raise ValueError(f"{op}: {WINDOW_ERROR}{shown}")
    return pair


def checked_window(op: str, window_size, causal: bool) -> tuple[int, int]:
    """(left, right) as the Triton and Pallas backends take it: each -1 (unbounded) or >= 0,
    and right -1 or 0 with causal (which is right = 0; the result has right 0 then).
    ValueError naming the argument otherwise, with the C++ API's words."""
    left, right = window_pair(op, window_size)
    if left < -1 or right < -1:
        raise ValueError(f"{op}: {WINDOW_ERROR}({left}, {right})")
    if causal and right > 0:
        raise ValueError(f"{op}: {CAUSAL_WINDOW_ERROR}({left}, {right})")
    return left, 0 if causal else right


def checked_softcap(op: str, softcap, scale: float) -> float:
    """softcap as the Triton and Pallas backends take it: 0 (none) or a finite number in
    [1e-30, 1e30] that leaves scale / softcap (the factor the kernels multiply the raw
    scores by) a float32 normal number. ValueError naming the argument otherwise, with the
    C++ API's words (its numbers printed as C++ streams them, %g)."""
    try:
        cap = float(softcap)
    except (TypeError, ValueError):
        raise ValueError(f"{op}: {SOFTCAP_ERROR}{softcap!r}") from None
    if not (math.isfinite(cap) and cap >= 0.0):
        raise ValueError(f"{op}: {SOFTCAP_ERROR}{cap:g}")
    if cap != 0.0 and not SOFTCAP_MIN <= cap <= SOFTCAP_MAX:
        raise ValueError(f"{op}: {SOFTCAP_RANGE_ERROR}{cap:g}")
    if cap != 0.0 and not FLOAT32_NORMAL_MIN <= scale / cap <= FLOAT32_MAX:
        raise ValueError(f"{op}: {SOFTCAP_RATIO_ERROR}{scale / cap:g}")
    return cap


def kernel_window(left: int, right: int, seqlen_q: int, seqlen_k: int) -> tuple[int, int]:
    """The bounds a kernel needs to apply, from checked ones: a bound that leaves every row
    all of its keys on that side becomes -1 (row i sees keys up to i + Sk - Sq + right, all
    of them once right >= Sq - 1; from i + Sk - Sq - left, all once left >= Sk - 1), so the
    kernels' 32-bit arithmetic never sees a larger one. The C++ API drops the same bounds."""
    return (left if 0 <= left < seqlen_k - 1 else -1, right if 0 <= right < seqlen_q - 1 else -1)


def flash_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softmax_scale: float | None = None,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention forward with the log-sum-exp of each query row.

    q [B, Hq, Sq, D], k [B, Hkv, Sk, D], v [B, Hkv, Sk, Dv], Hq % Hkv == 0. Returns o
    [B, Hq, Sq, Dv] (q's dtype; float64 when precise) and lse [B, Hq, Sq] (float32; float64
    when precise), the natural log of the sum of exp(scores). Query i sees key j when
    j >= i + (Sk - Sq) - left (left = -1: unbounded) and j <= i + (Sk - Sq) + right, for
    window_size = (left, right) (FlashAttention's sliding window, aligned bottom-right);
    causal is right = 0. The scores are softmax_scale * q . k, capped to
    softcap * tanh(s / softcap) when softcap > 0. A row that sees no key gets o = 0 and
    lse = -inf. softmax_scale defaults to 1/sqrt(D), q and k's head dim.
    """
    import torch

    compute = torch.float64 if precise else torch.float32
    o, lse = attention_in(q, k, v, causal, softmax_scale, compute, window_size, softcap)
    if precise:
        return o, lse
    return o.to(q.dtype), lse.to(torch.float32)


def attention_in(q, k, v, causal, softmax_scale, dtype: torch.dtype, window_size=(-1, -1),
                 softcap: float = 0.0):
    """The same math done entirely in `dtype` (scores, their cap, softmax and P V). With the
    inputs' own dtype this is "PyTorch in the input dtype", the yardstick the tests hold
    every backend's error to."""
    import torch

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
    left, right = window_pair("flash_attention_fwd", window_size)
    right = 0 if causal else right
    softcap = float(softcap)
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
        if softcap > 0:  # before the mask: a masked score stays -inf
            scores = torch.tanh(scores.div_(softcap)).mul_(softcap)
        if left >= 0 or right >= 0:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            cols = torch.arange(seqlen_k, device=q.device)[None, :]
            diag = cols - rows - (seqlen_k - seqlen_q)  # key j's place right of row i's diagonal
            hidden = torch.zeros_like(diag, dtype=torch.bool)
            if right >= 0:
                hidden |= diag > right
            if left >= 0:
                hidden |= diag < -left
            scores = scores.masked_fill(hidden, float("-inf"))
        lse = torch.logsumexp(scores, dim=-1)  # -inf for a row that sees no key (or Sk = 0)
        # Shift by 0 where lse is -inf: every score there is -inf, so p = 0 and o = 0, not NaN.
        shift = torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))
        p = torch.exp(scores.sub_(shift[..., None]))
        del scores
        outs.append(torch.matmul(p, vc))
        lses.append(lse)
    return torch.cat(outs, dim=2), torch.cat(lses, dim=2)


_SCORES_BUDGET_BYTES = 1 << 30


def full_shape(shape) -> tuple[int, ...]:
    """(B, Hq, Hkv, Sq, Sk, D, causal, Dv) of a shape with or without its Dv (then D)."""
    if len(shape) == 7:
        return (*shape, shape[5])
    if len(shape) == 8:
        return tuple(shape)
    raise ValueError(f"flash_attention_fwd: a shape is (B, Hq, Hkv, Sq, Sk, D, causal[, Dv]), got {shape}")


def make_inputs(shape, dtype, device, seed):
    import torch

    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, head_dim_v = full_shape(shape)
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)

    def randn(*size):
        return torch.randn(size, generator=gen, device=device, dtype=torch.float32).to(dt)

    return {
        "q": randn(batch, heads_q, seqlen_q, head_dim),
        "k": randn(batch, heads_kv, seqlen_k, head_dim),
        "v": randn(batch, heads_kv, seqlen_k, head_dim_v),
        "causal": bool(causal),
        "softmax_scale": None,
    }


def visible_pairs(seqlen_q: int, seqlen_k: int, causal: bool, window_size=(-1, -1)) -> int:
    """(query, key) pairs the mask leaves: row i sees the keys j with
    i + offset - left <= j <= i + offset + right (offset = Sk - Sq, aligned bottom-right;
    right = 0 when causal; -1 unbounded), i.e. the pairs with j - i in
    [offset - left, offset + right]."""
    left, right = window_size
    right = 0 if causal else right
    upper = _pairs_up_to(seqlen_q, seqlen_k, seqlen_k - seqlen_q + right) if right >= 0 else seqlen_q * seqlen_k
    below = _pairs_up_to(seqlen_q, seqlen_k, seqlen_k - seqlen_q - left - 1) if left >= 0 else 0
    return upper - below


def _pairs_up_to(seqlen_q: int, seqlen_k: int, diag: int) -> int:
    """Pairs (i, j) of the Sq x Sk grid with j - i <= diag: row i has min(Sk, max(0,
    i + 1 + diag)) of them."""
    if seqlen_k == 0:
        return 0
    # Rows with i + 1 + diag in [1, Sk) have a partial prefix; later rows all Sk keys.
    first = min(seqlen_q, max(0, -diag))  # first row with a key
    full_from = min(seqlen_q, max(first, seqlen_k - diag - 1))  # first row with all Sk
    partial = sum_range(first + 1 + diag, full_from + diag)  # sum of i + 1 + diag
    return partial + (seqlen_q - full_from) * seqlen_k


def sum_range(lo: int, hi: int) -> int:
    """lo + (lo + 1) + ... + hi (0 when hi < lo)."""
    return (lo + hi) * (hi - lo + 1) // 2 if hi >= lo else 0


def flops(shape) -> float:
    batch, heads_q, _, seqlen_q, seqlen_k, head_dim, causal, head_dim_v = full_shape(shape)
    # Two matmuls, Q K^T over D and P V over Dv, of 2 flops per multiply-add over the
    # unmasked pairs.
    return (2.0 * batch * heads_q * (head_dim + head_dim_v)
            * visible_pairs(seqlen_q, seqlen_k, bool(causal)))


def bytes_moved(shape, dtype) -> float:
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, _, head_dim_v = full_shape(shape)
    elem = ELEM_BYTES[dtype]
    # q, k (D) and v (Dv) read once, o (Dv) written once, lse (fp32) written once.
    return (elem * (batch * heads_q * seqlen_q * (head_dim + head_dim_v)
                    + batch * heads_kv * seqlen_k * (head_dim + head_dim_v))
            + 4.0 * batch * heads_q * seqlen_q)


def _attention_bad_inputs() -> tuple[BadInput, ...]:
    """What every backend refuses, with the same message: head dims it does not compile,
    heads that do not group, mixed dtypes, float32, a strided last dim, 3-D tensors, k of
    another head dim, a softmax_scale that is not a finite number > 0, a window bound below
    -1 or a right bound with causal, a softcap that is NaN, negative or past what float32
    factors of it hold, v of a head dim the q/k head dim does not pair with (only 192 takes
    another, 128) or of other first dims than k's."""

    def call(t, d, q=(1, 4, 16, 64), kv=(1, 2, 16, 64), dtype="float16", k_dtype=None, strided=False,
             v=None, **extra):
        dt = getattr(t, dtype)
        q_t = t.randn(q, device=d).to(dt)
        if strided:
            q_t = t.randn(*q[:3], 2 * q[3], device=d).to(dt)[..., ::2]
        k_t = t.randn(kv, device=d).to(getattr(t, k_dtype) if k_dtype else dt)
        return {"q": q_t, "k": k_t, "v": t.randn(v or kv, device=d).to(dt), **extra}

    heads = "the query heads (4, dim 1 of q) must be a multiple of the key/value heads (3"
    v_shape = ("argument 'v' must have shape [1, 2, 16, {}] (k's first three dims and the head dim; "
               "128 is also allowed with head dim 192), got {}")
    return (
        BadInput("head_dim_48", lambda t, d: call(t, d, (1, 4, 16, 48), (1, 2, 16, 48)), ValueError,
                 "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got 48"),
        BadInput("head_dim_512", lambda t, d: call(t, d, (1, 4, 16, 512), (1, 2, 16, 512)), ValueError,
                 "must be one of 32, 64, 96, 128, 192, 256, got 512"),
        BadInput("v_head_dim_64_with_128",
                 lambda t, d: call(t, d, (1, 4, 16, 128), (1, 2, 16, 128), v=(1, 2, 16, 64)), ValueError,
                 v_shape.format(128, "[1, 2, 16, 64]")),
        BadInput("v_head_dim_128_with_64", lambda t, d: call(t, d, v=(1, 2, 16, 128)), ValueError,
                 v_shape.format(64, "[1, 2, 16, 128]")),
        BadInput("v_head_dim_64_with_192",
                 lambda t, d: call(t, d, (1, 4, 16, 192), (1, 2, 16, 192), v=(1, 2, 16, 64)), ValueError,
                 v_shape.format(192, "[1, 2, 16, 64]")),
        BadInput("v_seqlen", lambda t, d: call(t, d, v=(1, 2, 15, 64)), ValueError,
                 v_shape.format(64, "[1, 2, 15, 64]")),
        BadInput("heads_not_multiple", lambda t, d: call(t, d, kv=(1, 3, 16, 64)), ValueError, heads),
        BadInput("k_dtype", lambda t, d: call(t, d, k_dtype="bfloat16"), TypeError,
                 "argument 'k' must have the dtype of 'q'"),
        BadInput("float32", lambda t, d: call(t, d, dtype="float32"), TypeError,
                 "argument 'q' must be float16 or bfloat16, got"),
        BadInput("last_dim_strided", lambda t, d: call(t, d, strided=True), ValueError,
                 "argument 'q' must be contiguous in its last dim (stride 1), got stride 2", jax=False),
        BadInput("three_dims", lambda t, d: {n: t.randn(4, 16, 64, device=d).half() for n in "qkv"}, ValueError,
                 "argument 'q' must have 4 dims [batch, heads, seq, head_dim]"),
        BadInput("k_head_dim", lambda t, d: call(t, d, kv=(1, 2, 16, 32)), ValueError,
                 "argument 'k' must have shape [1, Hkv, Sk, 64]"),
        BadInput("softmax_scale", lambda t, d: call(t, d, softmax_scale=-1.0), ValueError,
                 "argument 'softmax_scale' must be a finite number > 0"),
        BadInput("softmax_scale-underflows-float32", lambda t, d: call(t, d, softmax_scale=1e-50), ValueError,
                 "argument 'softmax_scale' must be 0 or of a magnitude float32 holds"),
        BadInput("window_element_below_-1", lambda t, d: call(t, d, window_size=(-2, 0)), ValueError,
                 WINDOW_ERROR + "(-2, 0)"),
        BadInput("window_right_with_causal", lambda t, d: call(t, d, causal=True, window_size=(4, 1)), ValueError,
                 CAUSAL_WINDOW_ERROR + "(4, 1)"),
        BadInput("softcap_nan", lambda t, d: call(t, d, softcap=float("nan")), ValueError, SOFTCAP_ERROR + "nan"),
        BadInput("softcap_negative", lambda t, d: call(t, d, softcap=-1.0), ValueError, SOFTCAP_ERROR + "-1"),
        BadInput("softcap_below_1e-30", lambda t, d: call(t, d, softcap=1e-40), ValueError,
                 SOFTCAP_RANGE_ERROR + "1e-40"),
        BadInput("softmax_scale_over_softcap_overflows_float32",
                 lambda t, d: call(t, d, softmax_scale=1e10, softcap=1e-29), ValueError,
                 SOFTCAP_RATIO_ERROR + "1e+39"),
    )


# The output may be off by at most this multiple of PyTorch's own error in the input dtype
# (the FlashAttention test criterion), plus the rounding of the output itself.
ERROR_MULTIPLE = 2.0
# lse is fp32 from fp32-accumulated scores: an absolute + relative bound.
LSE_ATOL, LSE_RTOL = 2e-3, 1e-4


def check(out, ref, dtype, inputs, what: str = "flash_attention_fwd") -> None:
    """out = (o, lse) from a backend, ref = the float64 reference (o, lse)."""
    import torch

    o, lse = out
    o_ref, lse_ref = ref
    dt = getattr(torch, dtype)
    assert o.shape == o_ref.shape, f"{what}: o shape {tuple(o.shape)} != {tuple(o_ref.shape)}"
    assert o.dtype == dt, f"{what}: o dtype {o.dtype} != {dtype}"
    assert lse.shape == lse_ref.shape, f"{what}: lse shape {tuple(lse.shape)} != {tuple(lse_ref.shape)}"
    assert lse.dtype == torch.float32, f"{what}: lse dtype {lse.dtype} != float32"
    if o.numel() == 0:
        return
    o64, o_ref = o.double().cpu(), o_ref.double().cpu()
    lse64, lse_ref = lse.double().cpu(), lse_ref.double().cpu()
    # A NaN score (a NaN input) makes its rows NaN in o and lse, exactly where the reference
    # has them; everything else is finite and compared below.
    o_nan, lse_nan = torch.isnan(o_ref), torch.isnan(lse_ref)
    assert torch.equal(torch.isnan(o64), o_nan), (
        f"{what}: o is NaN at {torch.isnan(o64).sum().item()} places, the reference at {o_nan.sum().item()}"
    )
    assert torch.equal(torch.isnan(lse64), lse_nan), (
        f"{what}: lse is NaN on {torch.isnan(lse64).sum().item()} rows, the reference on {lse_nan.sum().item()}"
    )
    finite = ~o_nan
    assert torch.isfinite(o64[finite]).all(), f"{what}: o has non-finite values where the reference has none"

    unseen = torch.isneginf(lse_ref)  # rows that see no key
    assert torch.equal(torch.isneginf(lse64), unseen), (
        f"{what}: lse is -inf on {torch.isneginf(lse64).sum().item()} rows, the reference on "
        f"{unseen.sum().item()}"
    )
    assert (o64[unseen] == 0).all(), f"{what}: o must be 0 on rows that see no key"
    seen = ~unseen & ~lse_nan
    if seen.any():
        lse_err = (lse64[seen] - lse_ref[seen]).abs()
        lse_tol = LSE_ATOL + LSE_RTOL * lse_ref[seen].abs()
        worst = (lse_err - lse_tol).argmax()
        assert (lse_err <= lse_tol).all(), (
            f"{what}: lse off by {lse_err[worst].item():.3g} (allowed {lse_tol[worst].item():.3g})"
        )

    # PyTorch doing the same math in the input dtype sets the scale of acceptable error.
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    o_same_dtype, _ = attention_in(q, k, v, inputs["causal"], inputs["softmax_scale"], dt,
                                   inputs.get("window_size", (-1, -1)), inputs.get("softcap", 0.0))
    if not finite.any():
        return
    base_err = (o_same_dtype.double().cpu() - o_ref)[finite].abs().nan_to_num(0.0).max().item()
    rounding = (o_ref.to(dt).double() - o_ref)[finite].abs().max().item()
    err = (o64 - o_ref)[finite].abs().max().item()
    allowed = ERROR_MULTIPLE * base_err + 2.0 * rounding + 1e-5
    assert err <= allowed, (
        f"{what}: o max error {err:.3g} > {allowed:.3g} ({ERROR_MULTIPLE} x PyTorch's "
        f"{dtype} error {base_err:.3g} + 2 x output rounding {rounding:.3g})"
    )


def _sdpa(backend_name: str):
    def make():
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, backend_name)

        def run(q, k, v, causal=False, softmax_scale=None):
            # SDPA aligns a causal mask top-left when Sq != Sk; the bench shapes have Sq = Sk.
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(
                    q, k, v, is_causal=causal, scale=softmax_scale,
                    enable_gqa=q.shape[1] != k.shape[1],
                )

        return run

    return make


def _jax_bshd_peer(attend_bshd):
    """A JAX attention on [B, S, H, D] arrays, attend_bshd(q, k, v, causal=, scale=), as a
    harness peer: jitted with the layout swaps inside it, called on the harness's
    [B, H, S, D] torch tensors."""
    import functools

    import jax
    import jax.numpy as jnp

    from gks.pallas._bridge import via_jax

    @functools.partial(jax.jit, static_argnames=("causal", "scale"))
    def attend(q, k, v, *, causal, scale):
        out = attend_bshd(jnp.swapaxes(q, 1, 2), jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2),
                          causal=causal, scale=scale)
        return jnp.swapaxes(out, 1, 2)

    def run(q, k, v, causal=False, softmax_scale=None):
        scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
        return via_jax(functools.partial(attend, causal=bool(causal), scale=scale))(q, k, v)

    return run


def _jax_dot_product_attention():
    import jax

    return _jax_bshd_peer(lambda q, k, v, *, causal, scale: jax.nn.dot_product_attention(
        q, k, v, scale=scale, is_causal=causal))


def _fa4():
    from flash_attn.cute import flash_attn_func

    def run(q, k, v, causal=False, softmax_scale=None):
        # FlashAttention takes [B, S, H, D]: the harness's [B, H, S, D] tensors as transposed
        # views (the last dim stays contiguous, no copy).
        out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                              softmax_scale=softmax_scale, causal=bool(causal), return_lse=True)
        o, lse = out if isinstance(out, tuple) else (out, None)
        return o.transpose(1, 2), lse

    return run


def _fa3_jax():
    from flash_attn3_jax import flash_mha

    return _jax_bshd_peer(lambda q, k, v, *, causal, scale: flash_mha(
        q, k, v, softmax_scale=scale, is_causal=causal))


def _bench_shapes():
    shapes = []
    tokens, hidden = 32768, 2048
    for head_dim in (64, 128):
        heads = hidden // head_dim
        for seqlen in (1024, 4096, 16384):
            for causal in (0, 1):
                shapes.append((tokens // seqlen, heads, heads, seqlen, seqlen, head_dim, causal))
    # DeepSeek-V3's MLA prefill on one GPU of eight (16 of its 128 heads): D = 192, Dv = 128.
    shapes.append((tokens // 4096, 16, 16, 4096, 4096, 192, 1, 128))
    return tuple(shapes)


# The dense attention ops' shapes (flash_attention_fwd's and its backward's): Dv last and
# optional (D unless given), so the shapes of D = Dv keep their 7 dims; the head dims pick
# the kernels' tiles, causal is a flag, not a size.
_DENSE_SHAPES = dict(
    shape_names=("B", "Hq", "Hkv", "Sq", "Sk", "D", "causal", "Dv"),
    optional_dims={"Dv": "D"},
    bucket_exact=("D", "causal", "Dv"),
    dtypes=("float16", "bfloat16"),
)

FLASH_ATTENTION_FWD = register(
    OpSpec(
        name="flash_attention_fwd",
        family="attention",
        summary=("FlashAttention forward with log-sum-exp: causal, sliding window, softcap, GQA/MQA, any "
                 "Sq/Sk, DeepSeek's head dims 192/128"),
        signature=(
            "flash_attention_fwd(q[B, Hq, Sq, D], k[B, Hkv, Sk, D], v[B, Hkv, Sk, Dv], "
            "causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0) "
            "-> (o[B, Hq, Sq, Dv] (q's dtype), lse[B, Hq, Sq] (fp32))"
        ),
        **_DENSE_SHAPES,
        make_inputs=make_inputs,
        reference=flash_attention_fwd,
        # Only used where `check` is not: the bound of a plain comparison of o.
        tolerance={"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        flops=flops,
        bytes_moved=bytes_moved,
        backends=(
            # Its configs: mma.sync for every GPU and head dim; on sm_90, wgmma for D = Dv = 64
            # and 128 and the warp-specialized wgmma.ws for D = 64, 96, 128, 192 and 256 and
            # (192, 128) (the default; elsewhere they give way).
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
        ),
        # Small enough for the CPU interpreters (each tensor <= 2^18 elements). The sweep
        # (tests/contract/test_reference.py) skips a shape whose product passes 2^18 under an
        # interpreter, so the causal shapes that must run there (product includes causal = 1)
        # are the tiny ones; the rest run on GPU.
        test_shapes=(
            (1, 1, 1, 1, 1, 32, 0),
            (2, 4, 1, 113, 113, 64, 0),      # MQA, prime lengths
            (1, 8, 8, 64, 200, 128, 0),      # Sq < Sk
            (1, 4, 2, 37, 1000, 32, 0),      # GQA, long Sk
            (1, 2, 2, 130, 66, 96, 0),       # Sq > Sk, D = 96
            (1, 2, 1, 65, 129, 256, 0),
            (1, 2, 1, 65, 100, 192, 0),      # GQA, D = 192
            (1, 4, 2, 65, 100, 192, 0, 128), # DeepSeek's D = 192, Dv = 128
            (1, 1, 1, 0, 16, 64, 0),         # Sq = 0
            (1, 2, 1, 5, 0, 64, 0),          # Sk = 0
            (1, 1, 1, 64, 64, 64, 1),
            (1, 2, 1, 37, 53, 32, 1),        # causal, Sq < Sk
            (1, 2, 2, 53, 17, 32, 1),        # causal, Sq > Sk: fully masked rows
            (1, 1, 1, 16, 40, 256, 1),
            (1, 1, 1, 16, 40, 192, 1),
            (1, 1, 1, 2, 5, 192, 1, 128),    # Dv counts in the product: tiny to run interpreted
            (1, 1, 1, 1, 1, 64, 1),
            (2, 8, 1, 129, 129, 128, 1),     # GPU only under an interpreter's size limit (see above)
            (1, 4, 4, 200, 1000, 96, 1),
            (2, 8, 2, 300, 517, 192, 1, 128),
        ),
        bench_shapes=_bench_shapes(),
        compute="tensor",
        peers=(
            Peer("sdpa-flash", _sdpa("FLASH_ATTENTION")),
            Peer("sdpa-cudnn", _sdpa("CUDNN_ATTENTION")),
            Peer("sdpa-efficient", _sdpa("EFFICIENT_ATTENTION")),
            Peer("jax.nn.dot_product_attention", _jax_dot_product_attention),
            Peer("FA4", _fa4, package="flash-attn-4"),
            Peer("FA3 (JAX)", _fa3_jax, package="flash-attn3-jax"),
        ),
        check=check,
        example_shape=(1, 2, 1, 37, 53, 32, 1),
        bad_inputs=_attention_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.flash_attention_fwd_out(
            i["q"], i["k"], i["v"], o[0], o[1], i["causal"], i["softmax_scale"],
            i.get("window_size", (-1, -1)), i.get("softcap", 0.0), **kw),
        outputs=("o", "lse"),
        # The mma.sync and wgmma kernels' last template argument is kVarlen: false here.
        sass_kernels=(r"attention::flash_attention_fwd(_wgmma)?_kernel<.*, false>\(",
                      r"attention::ws::flash_attention_fwd_ws_kernel<"),
    )
)


# ---- flash_attention_varlen_fwd: B sequences packed along one row dim (a server's prefill).
# Sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q, o and lse and its keys rows
# [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v (the first seqused_k[b] of them when
# given), or with a page_table its keys are in a paged cache; within a sequence the meaning
# is flash_attention_fwd's. A shape is (B, Hq, Hkv, Sq, Sk, D, causal, page[, Dv]): the
# dense op's with Sq and Sk the longest lengths, and page 0 (packed keys) or the page size of
# a paged cache (pages in a random order). Below 1024 rows the lengths are mixed (the first
# sequence full, the second without queries, the others uniform), from 1024 every sequence
# full (the bench shapes, whose flops and bytes are the dense op's).

VARLEN_OP = "gks.flash_attention_varlen_fwd"


def varlen_bounds(cu_seqlens_q, cu_seqlens_k, seqused_k, total_q: int, total_k: int,
                  capacity: int | None = None) -> list[tuple[int, int, int, int]]:
    """(q0, q1, k0, k1) of each sequence, as the kernels read them: every bound clamped into
    [0, total] (q1 >= q0, k1 >= k0), and k1 - k0 to seqused_k[b] when given. Paged keys
    (capacity: max_pages * page_size): k0 = 0 and k1 = seqused_k[b], or cu_seqlens_k[b + 1] -
    cu_seqlens_k[b], clamped to [0, capacity]."""
    import torch

    cq = cu_seqlens_q.to("cpu", torch.int64).tolist()
    ck = cu_seqlens_k.to("cpu", torch.int64).tolist()
    used = None if seqused_k is None else seqused_k.to("cpu", torch.int64).tolist()
    out = []
    for b in range(len(cq) - 1):
        q0 = min(max(cq[b], 0), total_q)
        q1 = min(max(cq[b + 1], q0), total_q)
        if capacity is not None:
            out.append((q0, q1, 0, min(max(used[b] if used is not None else ck[b + 1] - ck[b], 0), capacity)))
            continue
        k0 = min(max(ck[b], 0), total_k)
        k1 = min(max(ck[b + 1], k0), total_k)
        if used is not None:
            k1 = k0 + min(max(used[b], 0), k1 - k0)
        out.append((q0, q1, k0, k1))
    return out


def _sequence_keys(k, v, page_table, b: int, k0: int, k1: int):
    """Sequence b's keys and values [k0, k1) as dense [1, Hkv, L, D] tensors: rows of the
    packed k and v, or (page_table) gathered from the paged cache."""
    if page_table is None:
        return _dense(k, k0, k1), _dense(v, k0, k1)
    return _decode_keys(k, v, page_table, b, k1 - k0)


def _bounds_of(inputs) -> list[tuple[int, int, int, int]]:
    q, k, table = inputs["q"], inputs["k"], inputs.get("page_table")
    return varlen_bounds(inputs["cu_seqlens_q"], inputs["cu_seqlens_k"], inputs.get("seqused_k"), q.shape[0],
                         k.shape[0], None if table is None else table.shape[1] * k.shape[1])


def _dense(t, lo: int, hi: int):
    """Rows [lo, hi) of a packed [total, H, D] tensor as a dense [1, H, S, D] view."""
    return t[lo:hi].transpose(0, 1).unsqueeze(0)


def flash_attention_varlen_fwd(
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
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention over B packed sequences, each as flash_attention_fwd over its own rows.

    q [total_q, Hq, D], k [total_k, Hkv, D], v [total_k, Hkv, Dv]; cu_seqlens_q and
    cu_seqlens_k [B + 1] (int32): sequence b is rows [cu_seqlens_q[b], cu_seqlens_q[b + 1])
    of q and keys [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v, of which the first
    seqused_k[b] ([B], int32) when given. With page_table ([B, max_pages] int32), k and v are
    a paged cache [num_pages, page_size, Hkv, D|Dv]: sequence b's key j is row j % page_size
    of page page_table[b, j // page_size] (zeros where that index is outside the cache), and
    it has seqused_k[b] keys, or cu_seqlens_k[b + 1] - cu_seqlens_k[b], up to max_pages *
    page_size. Causal and the window align bottom-right within each sequence. Returns o [total_q, Hq, Dv] (q's dtype) and lse [Hq, total_q] (float32);
    rows in no sequence get o = 0 and lse = -inf here (the kernels leave them unwritten).
    max_seqlen_q and max_seqlen_k (the longest lengths) size the kernels' grids; the meaning
    does not depend on them.
    """
    import torch

    del max_seqlen_q, max_seqlen_k
    total_q, heads_q = q.shape[0], q.shape[1]
    out_dtype = torch.float64 if precise else q.dtype
    o = torch.zeros((total_q, heads_q, v.shape[-1]), dtype=out_dtype, device=q.device)
    lse = torch.full((heads_q, total_q), float("-inf"), dtype=torch.float64 if precise else torch.float32,
                     device=q.device)
    if cu_seqlens_q.device.type == "meta":  # shapes alone: no lengths to read
        return o, lse
    bounds = _bounds_of({"q": q, "k": k, "cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k,
                         "seqused_k": seqused_k, "page_table": page_table})
    for b, (q0, q1, k0, k1) in enumerate(bounds):
        if q1 == q0:
            continue
        k_b, v_b = _sequence_keys(k, v, page_table, b, k0, k1)
        ob, lb = flash_attention_fwd(_dense(q, q0, q1), k_b, v_b, causal, softmax_scale, window_size, softcap,
                                     precise=precise)
        o[q0:q1] = ob[0].transpose(0, 1)
        lse[:, q0:q1] = lb[0]
    return o, lse


def varlen_lengths(batch: int, longest: int, gen) -> list[int]:
    """Lengths of B sequences up to `longest` (see above): below 1024 mixed, the first full
    and the second 0 (with three or more), the others uniform in [0, longest] from `gen` (a
    CPU generator); from 1024 all full."""
    return [longest] * batch if longest >= 1024 else mixed_sizes(batch, longest, gen)


def cu_seqlens(lengths, device) -> torch.Tensor:
    """[B + 1] int32 offsets of sequences of these lengths packed in order."""
    import itertools

    import torch

    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=device)


def varlen_shape(shape) -> tuple[int, ...]:
    """(B, Hq, Hkv, Sq, Sk, D, causal, page, Dv) of a varlen shape with or without its Dv."""
    if len(shape) == 8:
        return (*shape, shape[5])
    if len(shape) == 9:
        return tuple(shape)
    raise ValueError(f"flash_attention_varlen_fwd: a shape is (B, Hq, Hkv, Sq, Sk, D, causal, page[, Dv]), got {shape}")


def _as_dense_shape(shape) -> tuple[int, ...]:
    """The dense op's shape of the same sizes (every sequence full): its flops and bytes."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, _, head_dim_v = varlen_shape(shape)
    return (batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, head_dim_v)


def make_varlen_inputs(shape, dtype, device, seed):
    import torch

    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, page, head_dim_v = varlen_shape(shape)
    # The packed sizes follow from the shape alone (every input set of a shape has the same
    # total_q and total_k: a CUDA graph replays on new values).
    host = torch.Generator().manual_seed(shape_seed(shape))
    lens_q, lens_k = varlen_lengths(batch, seqlen_q, host), varlen_lengths(batch, seqlen_k, host)
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)

    def randn(*size):
        return torch.randn(size, generator=gen, device=device, dtype=torch.float32).to(dt)

    q = randn(sum(lens_q), heads_q, head_dim)
    page_table = None
    if page:  # each sequence's keys in pages of a shared cache, in a random order
        k = randn(batch, heads_kv, seqlen_k, head_dim)
        v = randn(batch, heads_kv, seqlen_k, head_dim_v)
        state = gen.get_state()
        k, page_table = decode_cache(k, page, gen)
        gen.set_state(state)
        v, _ = decode_cache(v, page, gen)
    else:
        k = randn(sum(lens_k), heads_kv, head_dim)
        v = randn(sum(lens_k), heads_kv, head_dim_v)
    return {
        "q": q, "k": k, "v": v,
        "cu_seqlens_q": cu_seqlens(lens_q, device),
        "cu_seqlens_k": cu_seqlens(lens_k, device),
        "max_seqlen_q": max(lens_q, default=0),
        "max_seqlen_k": max(lens_k, default=0),
        "seqused_k": None,
        "page_table": page_table,
        "causal": bool(causal),
        "softmax_scale": None,
    }


def checked_max_seqlen(op: str, name: str, value) -> int:
    """max_seqlen_q / max_seqlen_k as the backends take them: an int >= 0 (an int64 for the
    C++ API)."""
    try:
        n = operator.index(value)
    except TypeError:
        n = None
    if n is None or not 0 <= n < 1 << 63:
        raise ValueError(f"{op}: argument '{name}' must be an int >= 0, got {value!r}")
    return n


def check_varlen_inputs(op: str, q, k, v, cu_seqlens_q, cu_seqlens_k, seqused_k, max_seqlen_q, max_seqlen_k,
                        page_table=None) -> None:
    """The shape and dtype rules beyond flash_attention_fwd's that the Python backends
    enforce, in the C++ API's words and order: q, k, v 3-dim [total, heads, head_dim] with a
    contiguous last dim; the shapes (check_attention_shapes on them as one sequence);
    cu_seqlens_q and cu_seqlens_k [B + 1] int32 alike; seqused_k [B] int32; max_seqlen_q and
    max_seqlen_k ints >= 0. TypeError for a dtype, ValueError otherwise; each names the
    argument."""
    import torch

    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'q' must be float16 or bfloat16, got {q.dtype}")
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    paged = page_table is not None
    key_dims = 4 if paged else 3
    for name, t in (("q", q), ("k", k), ("v", v)):
        want = 3 if name == "q" else key_dims
        if t.dim() != want:
            layout = "[num_pages, page_size, heads, head_dim]" if want == 4 else "[total, heads, head_dim]"
            raise ValueError(f"{op}: argument '{name}' must have {want} dims {layout}, got {t.dim()} dims "
                             f"{list(t.shape)}")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{op}: argument '{name}' must be contiguous in its last dim (stride 1), got "
                             f"stride {t.stride(-1)}")
    head_dim = q.shape[2]
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"{op}: head dim (the last dim of q and k) must be one of "
                         f"{', '.join(map(str, HEAD_DIMS))}, got {head_dim}")
    lead = list(k.shape[:-1])
    if k.shape[-1] != head_dim:
        want = "[num_pages, page_size, Hkv, " if paged else "[total_k, Hkv, "
        raise ValueError(f"{op}: argument 'k' must have shape {want}{head_dim}] (q's head dim), got {list(k.shape)}")
    if list(v.shape[:-1]) != lead or not v_head_dim_ok(head_dim, v.shape[-1]):
        which = "three" if paged else "two"
        raise ValueError(f"{op}: argument 'v' must have shape {lead + [head_dim]} (k's first {which} dims and the "
                         f"head dim; 128 is also allowed with head dim 192), got {list(v.shape)}")
    for name, t in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        if t.dtype != torch.int32:
            raise TypeError(f"{op}: argument '{name}' must be int32, got {t.dtype}")
        if t.dim() != 1 or t.shape[0] < 1:
            raise ValueError(f"{op}: argument '{name}' must have shape [B + 1] (B >= 0 sequences), got "
                             f"{list(t.shape)}")
    batch = cu_seqlens_q.shape[0] - 1
    if cu_seqlens_k.shape[0] != batch + 1:
        raise ValueError(f"{op}: argument 'cu_seqlens_k' must have shape [{batch + 1}] (cu_seqlens_q's), got "
                         f"{list(cu_seqlens_k.shape)}")
    if seqused_k is not None:
        if seqused_k.dtype != torch.int32:
            raise TypeError(f"{op}: argument 'seqused_k' must be int32, got {seqused_k.dtype}")
        if tuple(seqused_k.shape) != (batch,):
            raise ValueError(f"{op}: argument 'seqused_k' must have shape [{batch}] (one per sequence), got "
                             f"{list(seqused_k.shape)}")
    if paged:
        if page_table.dtype != torch.int32:
            raise TypeError(f"{op}: argument 'page_table' must be int32, got {page_table.dtype}")
        if page_table.dim() != 2 or page_table.shape[0] != batch:
            raise ValueError(f"{op}: argument 'page_table' must have shape [{batch}, max_pages] (one row per "
                             f"sequence), got {list(page_table.shape)}")
    checked_max_seqlen(op, "max_seqlen_q", max_seqlen_q)
    checked_max_seqlen(op, "max_seqlen_k", max_seqlen_k)
    heads_q, heads_kv = q.shape[1], k.shape[key_dims - 2]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(f"{op}: the query heads ({heads_q}, dim 1 of q) must be a multiple of the key/value "
                         f"heads ({heads_kv}, dim {key_dims - 2} of k and v)")


def check_varlen(out, ref, dtype, inputs, what: str = "flash_attention_varlen_fwd") -> None:
    """flash_attention_fwd's check, sequence by sequence (rows in no sequence are not the
    op's to write)."""
    import torch

    o, lse = out
    o_ref, lse_ref = ref
    assert o.dtype == getattr(torch, dtype) and tuple(o.shape) == tuple(o_ref.shape), (
        f"{what}: o {o.dtype} {tuple(o.shape)}, want {dtype} {tuple(o_ref.shape)}")
    assert lse.dtype == torch.float32 and tuple(lse.shape) == tuple(lse_ref.shape), (
        f"{what}: lse {lse.dtype} {tuple(lse.shape)}, want float32 {tuple(lse_ref.shape)}")
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    for b, (q0, q1, k0, k1) in enumerate(_bounds_of(inputs)):
        k_b, v_b = _sequence_keys(k, v, inputs.get("page_table"), b, k0, k1)
        fwd_inputs = {"q": _dense(q, q0, q1), "k": k_b, "v": v_b,
                      "causal": inputs.get("causal", False), "softmax_scale": inputs.get("softmax_scale"),
                      "window_size": inputs.get("window_size", (-1, -1)), "softcap": inputs.get("softcap", 0.0)}
        check((_dense(o, q0, q1), lse[None, :, q0:q1]), (_dense(o_ref, q0, q1), lse_ref[None, :, q0:q1]), dtype,
              fwd_inputs, f"{what} (sequence {b}: {q1 - q0} rows, {k1 - k0} keys)")


def _varlen_bad_inputs() -> tuple[BadInput, ...]:
    """What every backend refuses alike, beyond the options flash_attention_fwd shares: 4-dim
    (dense) tensors, a head dim with no kernel, k or v of another shape, cu_seqlens of
    another index type, rank or length, seqused_k of another type or length, heads that do
    not group, max_seqlen below 0."""

    def call(t, d, q=(12, 4, 64), kv=(20, 2, 64), v=None, dtype="float16", cu_q=None, cu_k=None, used=None,
             table=None, **extra):
        dt = getattr(t, dtype)
        args = {"q": t.randn(q, device=d).to(dt), "k": t.randn(kv, device=d).to(dt),
                "v": t.randn(v or kv, device=d).to(dt),
                "cu_seqlens_q": (cu_q or (lambda t, d: t.tensor([0, 5, 12], dtype=t.int32, device=d)))(t, d),
                "cu_seqlens_k": (cu_k or (lambda t, d: t.tensor([0, 8, 20], dtype=t.int32, device=d)))(t, d),
                "max_seqlen_q": 7, "max_seqlen_k": 12}
        if used is not None:
            args["seqused_k"] = used(t, d)
        if table is not None:
            args["page_table"] = table(t, d)
        return {**args, **extra}

    def ints(values, dtype="int32"):
        return lambda t, d: t.tensor(values, dtype=getattr(t, dtype), device=d)

    return (
        BadInput("q-float32", lambda t, d: call(t, d, dtype="float32"), TypeError,
                 "argument 'q' must be float16 or bfloat16, got"),
        BadInput("q-four-dims", lambda t, d: call(t, d, q=(1, 12, 4, 64)), ValueError,
                 "argument 'q' must have 3 dims [total, heads, head_dim]"),
        BadInput("head_dim_48", lambda t, d: call(t, d, q=(12, 4, 48), kv=(20, 2, 48)), ValueError,
                 "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got 48"),
        BadInput("k-head_dim", lambda t, d: call(t, d, kv=(20, 2, 32)), ValueError,
                 "argument 'k' must have shape [total_k, Hkv, 64] (q's head dim), got [20, 2, 32]"),
        BadInput("v-rows", lambda t, d: call(t, d, v=(19, 2, 64)), ValueError,
                 "argument 'v' must have shape [20, 2, 64] (k's first two dims and the head dim; 128 is also "
                 "allowed with head dim 192), got [19, 2, 64]"),
        BadInput("cu_seqlens_q-int64", lambda t, d: call(t, d, cu_q=ints([0, 5, 12], "int64")), TypeError,
                 "argument 'cu_seqlens_q' must be int32, got"),
        BadInput("cu_seqlens_k-two-dims", lambda t, d: call(t, d, cu_k=ints([[0, 8, 20]])), ValueError,
                 "argument 'cu_seqlens_k' must have shape [B + 1] (B >= 0 sequences), got [1, 3]"),
        BadInput("cu_seqlens_k-length", lambda t, d: call(t, d, cu_k=ints([0, 8, 14, 20])), ValueError,
                 "argument 'cu_seqlens_k' must have shape [3] (cu_seqlens_q's), got [4]"),
        BadInput("seqused_k-int64", lambda t, d: call(t, d, used=ints([3, 4], "int64")), TypeError,
                 "argument 'seqused_k' must be int32, got"),
        BadInput("seqused_k-length", lambda t, d: call(t, d, used=ints([3, 4, 5])), ValueError,
                 "argument 'seqused_k' must have shape [2] (one per sequence), got [3]"),
        BadInput("paged-k-three-dims", lambda t, d: call(t, d, table=ints([[0, 1], [2, 3]])), ValueError,
                 "argument 'k' must have 4 dims [num_pages, page_size, heads, head_dim], got 3 dims [20, 2, 64]"),
        BadInput("page_table-int64", lambda t, d: call(t, d, kv=(5, 4, 2, 64), table=ints([[0, 1], [2, 3]], "int64")),
                 TypeError, "argument 'page_table' must be int32, got"),
        BadInput("page_table-rows", lambda t, d: call(t, d, kv=(5, 4, 2, 64), table=ints([[0, 1]])), ValueError,
                 "argument 'page_table' must have shape [2, max_pages] (one row per sequence), got [1, 2]"),
        BadInput("paged-heads_not_multiple", lambda t, d: call(t, d, kv=(5, 4, 3, 64), table=ints([[0, 1], [2, 3]])),
                 ValueError, "must be a multiple of the key/value heads (3, dim 2 of k and v)"),
        BadInput("max_seqlen_q-negative", lambda t, d: call(t, d, max_seqlen_q=-1), ValueError,
                 "argument 'max_seqlen_q' must be an int >= 0, got -1"),
        BadInput("heads_not_multiple", lambda t, d: call(t, d, kv=(20, 3, 64)), ValueError,
                 "the query heads (4, dim 1 of q) must be a multiple of the key/value heads (3, dim 1 of k and v)"),
        BadInput("softmax_scale", lambda t, d: call(t, d, softmax_scale=-1.0), ValueError,
                 "argument 'softmax_scale' must be a finite number > 0"),
        BadInput("window_right_with_causal", lambda t, d: call(t, d, causal=True, window_size=(4, 1)), ValueError,
                 CAUSAL_WINDOW_ERROR + "(4, 1)"),
        BadInput("softcap_negative", lambda t, d: call(t, d, softcap=-1.0), ValueError, SOFTCAP_ERROR + "-1"),
    )


def _fa4_varlen():
    import inspect

    from flash_attn.cute import flash_attn_varlen_func

    takes = inspect.signature(flash_attn_varlen_func).parameters

    def run(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, seqused_k=None, page_table=None,
            causal=False, softmax_scale=None):
        kw = {"cu_seqlens_q": cu_seqlens_q, "cu_seqlens_k": cu_seqlens_k, "seqused_k": seqused_k,
              "max_seqlen_q": max_seqlen_q, "max_seqlen_k": max_seqlen_k, "softmax_scale": softmax_scale,
              "causal": bool(causal), "return_lse": True}
        if page_table is not None:
            # FA takes a paged cache's lengths as seqused_k alone (no cu_seqlens_k); the
            # difference is one small kernel, timed with the call.
            kw.update(page_table=page_table, cu_seqlens_k=None,
                      seqused_k=seqused_k if seqused_k is not None else cu_seqlens_k.diff())
        return flash_attn_varlen_func(q, k, v, **{n: x for n, x in kw.items() if n in takes})

    return run


FLASH_ATTENTION_VARLEN_FWD = register(
    OpSpec(
        name="flash_attention_varlen_fwd",
        family="attention",
        summary=("FlashAttention forward over packed sequences of different lengths (cu_seqlens, seqused_k): "
                 "causal/window bottom-right per sequence, softcap, GQA, CUDA-graph safe"),
        signature=(
            "flash_attention_varlen_fwd(q[total_q, Hq, D], k[total_k, Hkv, D], v[total_k, Hkv, Dv], "
            "cu_seqlens_q[B + 1] int32, cu_seqlens_k[B + 1] int32, max_seqlen_q, max_seqlen_k, "
            "seqused_k=None ([B] int32), page_table=None ([B, max_pages] int32: k, v [pages, page_size, Hkv, D]), "
            "causal=False, softmax_scale=None, window_size=(-1, -1), softcap=0.0) "
            "-> (o[total_q, Hq, Dv], lse[Hq, total_q] fp32)"
        ),
        shape_names=("B", "Hq", "Hkv", "Sq", "Sk", "D", "causal", "page", "Dv"),
        optional_dims={"Dv": "D"},
        bucket_exact=("D", "causal", "page", "Dv"),
        dtypes=("float16", "bfloat16"),
        make_inputs=make_varlen_inputs,
        reference=flash_attention_varlen_fwd,
        tolerance={"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        flops=lambda shape: flops(_as_dense_shape(shape)),
        bytes_moved=lambda shape, dtype: bytes_moved(_as_dense_shape(shape), dtype),
        backends=(
            # Its configs: on sm_90 wgmma at D = Dv = 64 and 128 (the default there), mma.sync
            # on every GPU; the warp-specialized kernel is dense-only.
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Mixed lengths below 1024 (one full, one without queries); under the interpreters'
        # size limit the first ones.
        test_shapes=(
            (1, 1, 1, 1, 1, 32, 0, 0),
            (3, 4, 2, 40, 70, 64, 0, 0),        # GQA, one sequence without queries
            (4, 2, 1, 33, 50, 64, 1, 0),        # causal, MQA, mixed lengths
            (3, 2, 2, 65, 30, 128, 1, 0),       # causal, Sq > Sk in some sequences
            (2, 2, 1, 17, 40, 256, 1, 0),
            (2, 2, 1, 20, 33, 192, 1, 0, 128),  # DeepSeek's head dims
            (3, 2, 2, 50, 64, 96, 0, 0),
            (3, 2, 1, 30, 70, 64, 1, 16),       # paged: 16 keys a page
            (2, 2, 2, 20, 40, 64, 0, 1),        # page size 1
            (3, 2, 1, 25, 90, 128, 1, 48),      # page size 48: not a power of two
            # GPU only (the interpreter sweep skips a shape whose dims multiply past 2^18; the
            # larger packed ones, whose page 0 zeroes the product, are in
            # tests/attention/test_varlen.py).
            (8, 8, 2, 200, 1500, 128, 1, 64),   # paged 64
            (4, 8, 1, 100, 800, 128, 1, 256),   # paged 256
        ),
        bench_shapes=(
            (16, 32, 8, 512, 8192, 128, 1, 0),   # the issue's chunked prefill
            (16, 32, 8, 512, 8192, 128, 1, 16),  # ... over a paged cache of 16-key pages
            (16, 32, 8, 512, 8192, 128, 1, 64),
            (8, 32, 8, 2048, 2048, 128, 1, 0),
            (8, 16, 16, 4096, 4096, 64, 1, 0),
            (4, 32, 8, 4096, 4096, 128, 0, 0),
        ),
        compute="tensor",
        peers=(Peer("FA4 varlen", _fa4_varlen, package="flash-attn-4"),),
        check=check_varlen,
        example_shape=(3, 4, 2, 40, 70, 64, 0, 0),
        bad_inputs=_varlen_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.flash_attention_varlen_fwd_out(
            i["q"], i["k"], i["v"], i["cu_seqlens_q"], i["cu_seqlens_k"], i["max_seqlen_q"], i["max_seqlen_k"],
            o[0], o[1], i.get("seqused_k"), i.get("page_table"), i.get("causal", False), i.get("softmax_scale"),
            i.get("window_size", (-1, -1)), i.get("softcap", 0.0), **kw),
        outputs=("o", "lse"),
        sass_kernels=(r"attention::flash_attention_fwd(_wgmma)?_kernel<.*, true>\(",),
    )
)


# ---- merge_state / merge_states: partial attention states (v, s), s the lse of the scores
# a part saw (natural log, fp32), merged into the state over all of them. A part that saw no
# key (s = -inf) contributes nothing and its v is not read; a row of such parts only gives
# v = 0, s = -inf; a NaN or +inf s gives a NaN row.


def merge_states(v: torch.Tensor, s: torch.Tensor, *, precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The merge of the K states of each row: v [..., K, D], s [..., K] -> v [..., D] (v's
    dtype), s [...] (float32)."""
    import torch

    compute = torch.float64 if precise else torch.float32
    vc, sc = v.to(compute), s.to(compute)
    lead = v.shape[:-2]
    if v.shape[-2] == 0:  # no states: nothing seen
        out_v = torch.zeros((*lead, v.shape[-1]), dtype=compute, device=v.device)
        out_s = torch.full(lead, -math.inf, dtype=compute, device=v.device)
    else:
        invalid = (torch.isnan(sc) | (sc == math.inf)).any(-1)
        m = sc.amax(-1)
        empty = m == -math.inf
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        w = torch.exp(sc - m.unsqueeze(-1))
        total = w.sum(-1)
        # A weight of 0 (a state that saw no key) skips the state's v, whatever it holds.
        parts = torch.where(w.unsqueeze(-1) > 0, w.unsqueeze(-1) * vc, torch.zeros_like(vc))
        out_v = parts.sum(-2) / total.unsqueeze(-1)
        out_s = m + torch.log(total)
        out_v = torch.where(empty.unsqueeze(-1), torch.zeros_like(out_v), out_v)
        out_s = torch.where(empty, torch.full_like(out_s, -math.inf), out_s)
        out_v = torch.where(invalid.unsqueeze(-1), torch.full_like(out_v, math.nan), out_v)
        out_s = torch.where(invalid, torch.full_like(out_s, math.nan), out_s)
    if precise:
        return out_v, out_s
    return out_v.to(v.dtype), out_s.to(torch.float32)


def merge_state(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor, *,
                precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The merge of two states: v_a, v_b [..., D], s_a, s_b [...] -> (v [..., D], s [...])."""
    import torch

    return merge_states(torch.stack([v_a, v_b], -2), torch.stack([s_a, s_b], -1), precise=precise)


def _poison_unseen(v: torch.Tensor, s: torch.Tensor) -> None:
    """NaN in the v of every state whose s is -inf: an op that reads what it must skip shows."""
    v.masked_fill_((s == -math.inf).unsqueeze(-1), math.nan)


def _unseen(s: torch.Tensor, every: int, offset: int) -> None:
    """Sets every `every`-th score (from `offset`) to -inf: states that saw no key."""
    flat = s.view(-1)
    flat[offset::every] = -math.inf


def _merge_state_inputs(shape, dtype, device, seed):
    """v_a, v_b [T, H, D] ~ N(0, 1) and s_a, s_b [T, H] ~ 4 N(0, 1) (weights from 1 to e^-20),
    with states that saw no key (s = -inf, their v NaN): every 5th of a's, every 3rd of b's,
    so some rows have both."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    t, h, d = shape
    v_a = torch.randn((t, h, d), generator=gen, device=device).to(dt)
    v_b = torch.randn((t, h, d), generator=gen, device=device).to(dt)
    s_a = 4.0 * torch.randn((t, h), generator=gen, device=device)
    s_b = 4.0 * torch.randn((t, h), generator=gen, device=device)
    _unseen(s_a, 5, 1)
    _unseen(s_b, 3, 1)
    _poison_unseen(v_a, s_a)
    _poison_unseen(v_b, s_b)
    return {"v_a": v_a, "s_a": s_a, "v_b": v_b, "s_b": s_b}


def _merge_states_inputs(shape, dtype, device, seed):
    """v [T, H, K, D] ~ N(0, 1), s [T, H, K] ~ 4 N(0, 1), every 4th state unseen (s = -inf,
    its v NaN)."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    t, h, k, d = shape
    v = torch.randn((t, h, k, d), generator=gen, device=device).to(getattr(torch, dtype))
    s = 4.0 * torch.randn((t, h, k), generator=gen, device=device)
    _unseen(s, 4, 2)
    _poison_unseen(v, s)
    return {"v": v, "s": s}


def check_merged(out, ref, dtype, inputs, what: str = "merge_state") -> None:
    """v in the op's dtype within its tolerance; s float32 within a few fp32 ulps (it is m +
    log of a sum of at most K terms); -inf and NaN where the reference has them."""
    from gks.testing import assert_matches

    assert_matches(out[0], ref[0], dtype, MERGE_TOLERANCE, f"{what} v")
    assert_matches(out[1], ref[1], "float32", MERGE_TOLERANCE, f"{what} s")


# v: a weighted mean of values of the dtype, rounded once; s: fp32 exp / log.
MERGE_TOLERANCE = {"float32": (2e-5, 2e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)}


def _merge_bytes(stacked: bool):
    """Each state's v and s read once, v and s written once: (T, H, D) with two states, or
    (T, H, K, D)."""
    def bytes_moved(shape, dtype):
        rows, k = (math.prod(shape[:-2]), shape[-2]) if stacked else (math.prod(shape[:-1]), 2)
        return rows * (k + 1) * (ELEM_BYTES[dtype] * shape[-1] + 4)
    return bytes_moved


def _merge_bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, **over):
        args = {"v_a": t.randn(3, 2, 8, device=d), "s_a": t.randn(3, 2, device=d),
                "v_b": t.randn(3, 2, 8, device=d), "s_b": t.randn(3, 2, device=d)}
        args.update({k: v(t, d) for k, v in over.items()})
        return args

    return (
        BadInput("v_a-int", lambda t, d: call(t, d, v_a=lambda t, d: t.ones(3, 2, 8, device=d, dtype=t.int32)),
                 TypeError, "argument 'v_a'"),
        BadInput("v_b-dtype", lambda t, d: call(t, d, v_b=lambda t, d: t.randn(3, 2, 8, device=d).half()),
                 TypeError, "argument 'v_b' must have the dtype of 'v_a'"),
        BadInput("v_b-shape", lambda t, d: call(t, d, v_b=lambda t, d: t.randn(3, 2, 4, device=d)),
                 ValueError, "argument 'v_b' must have the shape of 'v_a'"),
        BadInput("s_a-half", lambda t, d: call(t, d, s_a=lambda t, d: t.randn(3, 2, device=d).half()),
                 TypeError, "argument 's_a' must be float32"),
        BadInput("s_b-shape", lambda t, d: call(t, d, s_b=lambda t, d: t.randn(3, 2, 8, device=d)),
                 ValueError, "argument 's_b' must be [3, 2]"),
        BadInput("v_a-last-dim-strided", lambda t, d: call(
            t, d, v_a=lambda t, d: t.randn(3, 8, 2, device=d).transpose(1, 2),
            v_b=lambda t, d: t.randn(3, 8, 2, device=d).transpose(1, 2)), ValueError, "argument 'v_a'", jax=False),
    )


def _merge_states_bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, v=None, s=None):
        return {"v": t.randn(3, 2, 4, 8, device=d) if v is None else v(t, d),
                "s": t.randn(3, 2, 4, device=d) if s is None else s(t, d)}

    return (
        BadInput("v-1d", lambda t, d: call(t, d, v=lambda t, d: t.randn(8, device=d),
                                           s=lambda t, d: t.randn(1, device=d)),
                 ValueError, "argument 'v' must be [..., K, D]"),
        BadInput("v-int", lambda t, d: call(t, d, v=lambda t, d: t.ones(3, 2, 4, 8, device=d, dtype=t.int32)),
                 TypeError, "argument 'v'"),
        BadInput("s-half", lambda t, d: call(t, d, s=lambda t, d: t.randn(3, 2, 4, device=d).half()),
                 TypeError, "argument 's' must be float32"),
        BadInput("s-shape", lambda t, d: call(t, d, s=lambda t, d: t.randn(3, 2, 5, device=d)),
                 ValueError, "argument 's' must be [3, 2, 4]"),
    )


MERGE_STATE = register(
    OpSpec(
        name="merge_state",
        family="attention",
        summary="merge two partial attention states (v, lse) into one, in place allowed",
        signature="merge_state(v_a[..., D], s_a[...], v_b, s_b) -> (v[..., D], s[...] float32)",
        shape_names=("T", "H", "D"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_merge_state_inputs,
        reference=merge_state,
        tolerance=MERGE_TOLERANCE,
        # per value: two weights' products and the sum; per row: exps and a log
        flops=lambda s: 4.0 * s[0] * s[1] * s[2],
        bytes_moved=_merge_bytes(False),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=((1, 1, 1), (7, 3, 64), (5, 4, 128), (33, 2, 256), (2, 3, 96), (3, 5, 7), (0, 4, 64),
                     (4, 2, 0), (129, 1, 8)),
        bench_shapes=((64, 32, 128), (1024, 32, 128), (16384, 32, 128), (32768, 16, 256)),
        peers=(reference_peer("merge_state", compiled=False), reference_peer("merge_state", compiled=True)),
        check=check_merged,
        example_shape=(7, 3, 64),
        bad_inputs=_merge_bad_inputs(),
        cuda_out=lambda cuda, i, o: cuda.merge_state_out(i["v_a"], i["s_a"], i["v_b"], i["s_b"], o[0], o[1]),
        outputs=("v", "s"),
        in_place={"v": "v_a", "s": "s_a"},
        sass_kernels=(r"attention::merge_state_kernel<[^>]*(false|\(bool\)0)>",),
    )
)

MERGE_STATES = register(
    OpSpec(
        name="merge_states",
        family="attention",
        summary="merge K partial attention states (v, lse) of each row into one",
        signature="merge_states(v[..., K, D], s[..., K]) -> (v[..., D], s[...] float32)",
        shape_names=("T", "H", "K", "D"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_merge_states_inputs,
        reference=merge_states,
        tolerance=MERGE_TOLERANCE,
        flops=lambda s: 2.0 * s[0] * s[1] * s[2] * s[3],
        bytes_moved=_merge_bytes(True),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=((1, 1, 1, 1), (7, 3, 4, 64), (5, 2, 16, 128), (3, 2, 3, 256), (2, 3, 1, 96), (3, 2, 5, 7),
                     (0, 2, 4, 64), (3, 2, 0, 64), (4, 1, 2, 0)),
        bench_shapes=((1, 32, 64, 128), (64, 32, 16, 128), (256, 32, 8, 128), (4096, 32, 4, 128)),
        peers=(reference_peer("merge_states", compiled=False), reference_peer("merge_states", compiled=True)),
        check=lambda out, ref, dtype, inputs: check_merged(out, ref, dtype, inputs, "merge_states"),
        example_shape=(7, 3, 4, 64),
        bad_inputs=_merge_states_bad_inputs(),
        cuda_out=lambda cuda, i, o: cuda.merge_states_out(i["v"], i["s"], o[0], o[1]),
        outputs=("v_out", "s_out"),
        sass_kernels=(r"attention::merge_state_kernel<[^>]*(true|\(bool\)1)>",),
    )
)


# ---- flash_attention_decode: split-KV attention of a few new queries per sequence over a
# KV cache (issue 30, item 3), dense or paged. A shape is (B, Hq, Hkv, Sq, Sk, D, page): q
# [B, Hq, Sq, D]; the cache holds Sk keys a sequence (dense: k_cache [B, Hkv, Sk, D]; page
# > 0: [num_pages, page, Hkv, D] pages through page_table [B, ceil(Sk / page)]); the
# sequences' lengths are cache_seqlens [B] (int32, on the device, from 0 to Sk).

DECODE_HEAD_DIMS = (64, 128, 256)
DECODE_MAX_SPLITS = 256


def decode_capacity(k_cache_shape, page_table_shape=None) -> int:
    """The keys a sequence's cache can hold: S_max (dense), or max_pages * page_size."""
    if page_table_shape is None:
        return int(k_cache_shape[2])
    return int(page_table_shape[1]) * int(k_cache_shape[1])


def decode_num_splits(batch: int, heads_kv: int, m_blocks: int, capacity: int, block_n: int,
                      sms: int, min_tiles: int = 2) -> int:
    """The split count the decode kernels take for num_splits = 0, from shapes alone (a CUDA
    graph captured with one set of lengths then replays with any other): no split when the
    (batch, kv head, row block) CTAs already fill two waves of the SMs' first CTA each;
    otherwise enough splits for about two CTAs an SM, each split at least `min_tiles` key
    tiles, then evened out over the tiles so that no split is left short. The CUDA planner
    (gks::detail::plan_flash_attention_decode) computes the same from its own tile."""
    ctas = max(1, batch * heads_kv * m_blocks)
    tiles = -(-max(capacity, 0) // block_n)
    if tiles <= min_tiles or ctas >= sms:
        return 1
    wanted = -(-2 * sms // ctas)
    splits = max(1, min(wanted, tiles // min_tiles, DECODE_MAX_SPLITS))
    per = -(-tiles // splits)
    return -(-tiles // per)


def _decode_keys(k_cache, v_cache, page_table, b: int, length: int):
    """Sequence b's first `length` keys and values as [1, Hkv, length, D]; keys on a page whose
    index is outside [0, num_pages) read as zeros (the kernels never read such a page)."""
    import torch

    if page_table is None:
        return k_cache[b : b + 1, :, :length], v_cache[b : b + 1, :, :length]
    page_size, num_pages = k_cache.shape[1], k_cache.shape[0]
    idx = torch.arange(length, device=k_cache.device)
    pages = page_table[b].long()[idx // page_size]
    ok = (pages >= 0) & (pages < num_pages)
    safe = torch.where(ok, pages, torch.zeros_like(pages))
    rows = idx % page_size
    k = torch.where(ok[:, None, None], k_cache[safe, rows], torch.zeros((), dtype=k_cache.dtype, device=k_cache.device))
    v = torch.where(ok[:, None, None], v_cache[safe, rows], torch.zeros((), dtype=v_cache.dtype, device=v_cache.device))
    return k.permute(1, 0, 2).unsqueeze(0), v.permute(1, 0, 2).unsqueeze(0)


def flash_attention_decode(
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
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of each sequence's Sq new queries over its KV cache.

    q [B, Hq, Sq, D]; dense caches k_cache, v_cache [B, Hkv, S_max, D], or paged ones
    [num_pages, page_size, Hkv, D] with page_table [B, max_pages] (int32): key j of sequence b
    is row j % page_size of page page_table[b, j // page_size]. cache_seqlens [B] (int32):
    sequence b holds keys [0, L_b), L_b = cache_seqlens[b] clamped to [0, capacity]
    (capacity S_max, or max_pages * page_size), and its queries are its last Sq positions:
    query i sits at L_b - Sq + i, and causal / window_size align bottom-right on it as
    flash_attention_fwd does with Sk = L_b. Returns o [B, Hq, Sq, D] (q's dtype) and lse
    [B, Hq, Sq] (float32); a row that sees no key (L_b = 0, or a query before the first key)
    gets o = 0, lse = -inf. num_splits only chooses how the kernels split the keys: the
    meaning is the same for every value.
    """
    import torch

    del num_splits
    batch = q.shape[0]
    compute = torch.float64 if precise else None
    if batch == 0 or cache_seqlens.device.type == "meta":  # no rows, or shapes alone (no lengths to read)
        o = torch.zeros(q.shape, dtype=compute or q.dtype, device=q.device)
        return o, torch.zeros(q.shape[:3], dtype=compute or torch.float32, device=q.device)
    capacity = decode_capacity(k_cache.shape, None if page_table is None else page_table.shape)
    lengths = cache_seqlens.to("cpu", torch.int64).clamp(0, capacity).tolist()
    outs, lses = [], []
    for b in range(batch):
        k, v = _decode_keys(k_cache, v_cache, page_table, b, lengths[b])
        o, lse = flash_attention_fwd(q[b : b + 1], k, v, causal, softmax_scale, window_size, softcap,
                                     precise=precise)
        outs.append(o)
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses)


def decode_shape(shape) -> tuple[int, ...]:
    """(B, Hq, Hkv, Sq, Sk, D, page) of a decode shape."""
    if len(shape) != 7:
        raise ValueError(f"flash_attention_decode: a shape is (B, Hq, Hkv, Sq, Sk, D, page), got {shape}")
    return tuple(int(s) for s in shape)


def decode_lengths(batch: int, seqlen_k: int, gen, device) -> torch.Tensor:
    """Cache lengths: below 1024 keys (the test shapes) mixed, the first sequence full, the
    second empty (when there are three or more), the others uniform in [0, Sk]; from 1024
    (the bench shapes, whose bytes_moved counts full caches) every sequence full."""
    import torch

    lengths = [seqlen_k] * batch if seqlen_k >= 1024 else mixed_sizes(batch, seqlen_k, gen)
    return torch.tensor(lengths, dtype=torch.int32, device=device)


def decode_cache(k: torch.Tensor, page_size: int, gen, *, spare_pages: int = 2):
    """Dense [B, Hkv, Sk, D] keys (or values) laid out as a paged cache in pages of
    page_size in a random order, with `spare_pages` unused pages of noise among them:
    (pages [num_pages, page_size, Hkv, D], page_table [B, max_pages] int32). The random
    numbers come from `gen`, on its device."""
    import torch

    batch, heads_kv, seqlen_k, head_dim = k.shape
    max_pages = -(-seqlen_k // page_size)
    num_pages = batch * max_pages + spare_pages
    perm = torch.randperm(num_pages, generator=gen, device=gen.device).to(k.device)
    table = perm[: batch * max_pages].view(batch, max_pages).to(torch.int32)
    pages = torch.randn((num_pages, page_size, heads_kv, head_dim), generator=gen, device=gen.device)
    pages = pages.to(k.dtype).to(k.device)
    padded = torch.zeros((batch, heads_kv, max_pages * page_size, head_dim), dtype=k.dtype, device=k.device)
    padded[:, :, :seqlen_k] = k
    # Keys past Sk on a sequence's last page keep the noise the page held.
    src = padded.view(batch, heads_kv, max_pages, page_size, head_dim).permute(0, 2, 3, 1, 4)
    tail = seqlen_k % page_size
    if tail:
        src[:, -1, tail:] = pages[table[:, -1].long(), tail:]
    pages[table.long()] = src
    return pages, table


def make_decode_inputs(shape, dtype, device, seed):
    import torch

    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, page = decode_shape(shape)
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)

    def randn(*size):
        return torch.randn(size, generator=gen, device=device, dtype=torch.float32).to(dt)

    q = randn(batch, heads_q, seqlen_q, head_dim)
    k = randn(batch, heads_kv, seqlen_k, head_dim)
    v = randn(batch, heads_kv, seqlen_k, head_dim)
    lengths = decode_lengths(batch, seqlen_k, torch.Generator().manual_seed(seed), device)
    page_table = None
    if page:
        state = gen.get_state()
        k, page_table = decode_cache(k, page, gen)
        gen.set_state(state)  # the same page order for v
        v, _ = decode_cache(v, page, gen)
    return {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": lengths, "page_table": page_table,
            "causal": True, "softmax_scale": None}


def decode_flops(shape) -> float:
    """Every sequence full (Sk keys), the causal pairs of its last Sq rows."""
    batch, heads_q, _, seqlen_q, seqlen_k, head_dim, _ = decode_shape(shape)
    return 4.0 * batch * heads_q * head_dim * visible_pairs(seqlen_q, seqlen_k, True)


def decode_bytes(shape, dtype) -> float:
    """Every sequence full: its K and V read once, q read and o written once, lse written."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, _ = decode_shape(shape)
    elem = ELEM_BYTES[dtype]
    return (elem * (2 * batch * heads_q * seqlen_q * head_dim + 2 * batch * heads_kv * seqlen_k * head_dim)
            + 4.0 * batch * heads_q * seqlen_q + 4.0 * batch)


DECODE_OP = "gks.flash_attention_decode"


def check_decode_inputs(op: str, q, k_cache, v_cache, cache_seqlens, page_table) -> None:
    """The shape and dtype rules the Triton backend enforces, in the C++ API's words and
    order (q, k_cache, v_cache, cache_seqlens, page_table): q [B, Hq, Sq, D] fp16/bf16 with
    D one of DECODE_HEAD_DIMS; the caches q's dtype, [B, Hkv, S_max, D] (dense) or
    [num_pages, page_size, Hkv, D] (paged), v_cache k_cache's shape; Hq a multiple of Hkv;
    cache_seqlens [B] int32; page_table [B, max_pages] int32. TypeError for a dtype,
    ValueError otherwise; each names the argument."""
    import torch

    if q.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'q' must be float16 or bfloat16, got {q.dtype}")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    if q.dim() != 4:
        raise ValueError(f"{op}: argument 'q' must have 4 dims [batch, heads, seq, head_dim], got "
                         f"{q.dim()} dims {list(q.shape)}")
    paged = page_table is not None
    layout = "[num_pages, page_size, kv_heads, head_dim]" if paged else "[batch, kv_heads, seq, head_dim]"
    for name, t in (("q", q), ("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dim() != 4:
            raise ValueError(f"{op}: argument '{name}' must have 4 dims {layout}, got {t.dim()} dims "
                             f"{list(t.shape)}")
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{op}: argument '{name}' must be contiguous in its last dim (stride 1), got "
                             f"stride {t.stride(-1)}")
    batch, heads_q, _, head_dim = q.shape
    if head_dim not in DECODE_HEAD_DIMS:
        raise ValueError(f"{op}: head dim (the last dim of q) must be one of "
                         f"{', '.join(map(str, DECODE_HEAD_DIMS))}, got {head_dim}")
    heads_kv = k_cache.shape[2] if paged else k_cache.shape[1]
    if k_cache.shape[3] != head_dim or (not paged and k_cache.shape[0] != batch):
        want = f"[num_pages, page_size, Hkv, {head_dim}]" if paged else f"[{batch}, Hkv, S_max, {head_dim}]"
        raise ValueError(f"{op}: argument 'k_cache' must have shape {want} (q's "
                         f"{'head dim' if paged else 'batch and head dim'}), got {list(k_cache.shape)}")
    if tuple(v_cache.shape) != tuple(k_cache.shape):
        raise ValueError(f"{op}: argument 'v_cache' must have the shape of 'k_cache' {list(k_cache.shape)}, "
                         f"got {list(v_cache.shape)}")
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(f"{op}: the query heads ({heads_q}, dim 1 of q) must be a multiple of the key/value "
                         f"heads ({heads_kv}, dim {2 if paged else 1} of k_cache)")
    if cache_seqlens.dtype != torch.int32:
        raise TypeError(f"{op}: argument 'cache_seqlens' must be int32, got {cache_seqlens.dtype}")
    if tuple(cache_seqlens.shape) != (batch,):
        raise ValueError(f"{op}: argument 'cache_seqlens' must have shape [{batch}] (q's batch), got "
                         f"{list(cache_seqlens.shape)}")
    if paged:
        if page_table.dtype != torch.int32:
            raise TypeError(f"{op}: argument 'page_table' must be int32, got {page_table.dtype}")
        if page_table.dim() != 2 or page_table.shape[0] != batch:
            raise ValueError(f"{op}: argument 'page_table' must have shape [{batch}, max_pages] (q's batch), "
                             f"got {list(page_table.shape)}")


def checked_num_splits(op: str, num_splits) -> int:
    """num_splits as the backends take it: 0 (chosen from the shape) or 1 to 256."""
    try:
        n = operator.index(num_splits)
    except TypeError:
        n = None
    if n is None or not 0 <= n <= DECODE_MAX_SPLITS:
        raise ValueError(f"{op}: argument 'num_splits' must be 0 (chosen from the shape) or from 1 to "
                         f"{DECODE_MAX_SPLITS}, got {num_splits!r}")
    return n


def check_decode(out, ref, dtype, inputs, what: str = "flash_attention_decode") -> None:
    """As flash_attention_fwd's check, with PyTorch's same-dtype error taken sequence by
    sequence over the keys each holds."""
    import torch

    dt = getattr(torch, dtype)
    q, lengths = inputs["q"], inputs["cache_seqlens"]
    capacity = decode_capacity(inputs["k_cache"].shape,
                               None if inputs.get("page_table") is None else inputs["page_table"].shape)
    clamped = lengths.to("cpu", torch.int64).clamp(0, capacity).tolist()
    o, lse = out
    o_ref, lse_ref = ref
    for b in range(q.shape[0]):
        k, v = _decode_keys(inputs["k_cache"], inputs["v_cache"], inputs.get("page_table"), b, clamped[b])
        fwd_inputs = {"q": q[b : b + 1], "k": k, "v": v, "causal": inputs.get("causal", True),
                      "softmax_scale": inputs.get("softmax_scale"),
                      "window_size": inputs.get("window_size", (-1, -1)), "softcap": inputs.get("softcap", 0.0)}
        check((o[b : b + 1], lse[b : b + 1]), (o_ref[b : b + 1], lse_ref[b : b + 1]), dtype, fwd_inputs,
              f"{what} (sequence {b}, length {clamped[b]})")
    assert o.dtype == dt and tuple(o.shape) == tuple(o_ref.shape), f"{what}: o {o.dtype} {tuple(o.shape)}"
    assert lse.dtype == torch.float32 and tuple(lse.shape) == tuple(lse_ref.shape), f"{what}: lse"


def _decode_bad_inputs() -> tuple[BadInput, ...]:
    """What every backend refuses alike: caches of another dtype or shape, a head dim with
    no kernel, heads that do not group, cache_seqlens or page_table of another index type or
    shape, a 3-dim cache, num_splits out of range, and the scalar checks flash_attention_fwd
    shares (softmax_scale, window_size, softcap)."""

    def call(t, d, q=(2, 4, 1, 64), kv=(2, 2, 16, 64), dtype="float16", kv_dtype=None, v=None,
             seqlens=None, table=None, **extra):
        dt = getattr(t, dtype)
        lengths = t.tensor([16, 3], dtype=t.int32, device=d) if seqlens is None else seqlens(t, d)
        args = {"q": t.randn(q, device=d).to(dt), "k_cache": t.randn(kv, device=d).to(getattr(t, kv_dtype or dtype)),
                "v_cache": t.randn(v or kv, device=d).to(dt), "cache_seqlens": lengths}
        if table is not None:
            args["page_table"] = table(t, d)
        return {**args, **extra}

    paged = (5, 4, 2, 64)  # 5 pages of 4 keys

    def table(shape=(2, 2), dtype="int32"):
        return lambda t, d: t.zeros(shape, dtype=getattr(t, dtype), device=d)

    return (
        BadInput("q-float32", lambda t, d: call(t, d, dtype="float32"), TypeError,
                 "argument 'q' must be float16 or bfloat16, got"),
        BadInput("k_cache-dtype", lambda t, d: call(t, d, kv_dtype="bfloat16"), TypeError,
                 "argument 'k_cache' must have the dtype of 'q'"),
        BadInput("q-three-dims", lambda t, d: call(t, d, q=(2, 4, 64)), ValueError,
                 "argument 'q' must have 4 dims [batch, heads, seq, head_dim]"),
        BadInput("k_cache-three-dims", lambda t, d: call(t, d, kv=(2, 16, 64)), ValueError,
                 "argument 'k_cache' must have 4 dims [batch, kv_heads, seq, head_dim]"),
        BadInput("head_dim_32", lambda t, d: call(t, d, q=(2, 4, 1, 32), kv=(2, 2, 16, 32)), ValueError,
                 "head dim (the last dim of q) must be one of 64, 128, 256, got 32"),
        BadInput("k_cache-batch", lambda t, d: call(t, d, kv=(3, 2, 16, 64)), ValueError,
                 "argument 'k_cache' must have shape [2, Hkv, S_max, 64] (q's batch and head dim), got [3, 2, 16, 64]"),
        BadInput("v_cache-shape", lambda t, d: call(t, d, v=(2, 2, 8, 64)), ValueError,
                 "argument 'v_cache' must have the shape of 'k_cache' [2, 2, 16, 64], got [2, 2, 8, 64]"),
        BadInput("heads_not_multiple", lambda t, d: call(t, d, kv=(2, 3, 16, 64)), ValueError,
                 "the query heads (4, dim 1 of q) must be a multiple of the key/value heads (3, dim 1 of k_cache)"),
        BadInput("cache_seqlens-int64", lambda t, d: call(t, d, seqlens=lambda t, d: t.tensor([16, 3], device=d)),
                 TypeError, "argument 'cache_seqlens' must be int32, got"),
        BadInput("cache_seqlens-length",
                 lambda t, d: call(t, d, seqlens=lambda t, d: t.tensor([16, 3, 1], dtype=t.int32, device=d)),
                 ValueError, "argument 'cache_seqlens' must have shape [2] (q's batch), got [3]"),
        BadInput("page_table-int64", lambda t, d: call(t, d, kv=paged, table=table(dtype="int64")), TypeError,
                 "argument 'page_table' must be int32, got"),
        BadInput("page_table-one-dim", lambda t, d: call(t, d, kv=paged, table=table(shape=(4,))), ValueError,
                 "argument 'page_table' must have shape [2, max_pages] (q's batch), got [4]"),
        BadInput("page_table-batch", lambda t, d: call(t, d, kv=paged, table=table(shape=(3, 2))), ValueError,
                 "argument 'page_table' must have shape [2, max_pages] (q's batch), got [3, 2]"),
        BadInput("paged-k_cache-head_dim", lambda t, d: call(t, d, kv=(5, 4, 2, 128), table=table()), ValueError,
                 "argument 'k_cache' must have shape [num_pages, page_size, Hkv, 64] (q's head dim), got "
                 "[5, 4, 2, 128]"),
        BadInput("num_splits-too-many", lambda t, d: call(t, d, num_splits=257), ValueError,
                 "argument 'num_splits' must be 0 (chosen from the shape) or from 1 to 256, got 257"),
        BadInput("num_splits-negative", lambda t, d: call(t, d, num_splits=-1), ValueError,
                 "argument 'num_splits' must be 0 (chosen from the shape) or from 1 to 256, got -1"),
        BadInput("softmax_scale", lambda t, d: call(t, d, softmax_scale=-1.0), ValueError,
                 "argument 'softmax_scale' must be a finite number > 0"),
        BadInput("window_right_with_causal", lambda t, d: call(t, d, causal=True, window_size=(4, 1)), ValueError,
                 CAUSAL_WINDOW_ERROR + "(4, 1)"),
        BadInput("softcap_negative", lambda t, d: call(t, d, softcap=-1.0), ValueError, SOFTCAP_ERROR + "-1"),
    )


def _decode_bench_shapes():
    """Sq = 1, D = 128, Hq / Hkv = 32 / 8 (the issue's target), dense and paged (16, 64), at
    batch 1, 8, 64, 256 and cache lengths from 1k to 128k, up to about 4 GiB of K/V."""
    shapes = []
    for page in (0, 16, 64):
        for batch in (1, 8, 64, 256):
            for seqlen_k in (1024, 8192, 32768, 131072):
                if batch * seqlen_k <= 1 << 20:
                    shapes.append((batch, 32, 8, 1, seqlen_k, 128, page))
    return tuple(shapes)


def _fa4_decode():
    from flash_attn.cute import flash_attn_varlen_func

    def run(q, k_cache, v_cache, cache_seqlens, page_table=None, causal=True, softmax_scale=None):
        # FA's layouts: q [B, Sq, Hq, D]; a dense cache [B, S, Hkv, D] (ours, [B, Hkv, S, D],
        # as a transposed view) or the same pages as ours. num_splits=0: FA's split heuristic.
        if page_table is None:
            k_cache, v_cache = k_cache.transpose(1, 2), v_cache.transpose(1, 2)
        o, lse = flash_attn_varlen_func(q.transpose(1, 2), k_cache, v_cache, seqused_k=cache_seqlens,
                                        page_table=page_table, softmax_scale=softmax_scale, causal=bool(causal),
                                        num_splits=0, return_lse=True)
        return o.transpose(1, 2), lse

    return run


def _sdpa_decode(backend_name: str):
    """SDPA on a dense cache whose sequences are all full (the bench shapes): with one query
    row, bottom-right causal sees every key, which SDPA's unmasked call computes."""

    def make():
        sdpa = _sdpa(backend_name)()

        def run(q, k_cache, v_cache, cache_seqlens, page_table=None, causal=True, softmax_scale=None):
            if page_table is not None or q.shape[2] != 1:
                raise NotImplementedError("SDPA takes neither a paged cache nor bottom-right causal rows")
            return sdpa(q, k_cache, v_cache, causal=False, softmax_scale=softmax_scale)

        return run

    return make


FLASH_ATTENTION_DECODE = register(
    OpSpec(
        name="flash_attention_decode",
        family="attention",
        summary=("split-KV decode attention over a dense or paged KV cache: per-sequence lengths, Sq >= 1 "
                 "bottom-right causal, GQA heads packed, window, softcap"),
        signature=(
            "flash_attention_decode(q[B, Hq, Sq, D], k_cache, v_cache ([B, Hkv, S_max, D] or "
            "[pages, page_size, Hkv, D]), cache_seqlens[B] int32, page_table=None ([B, max_pages] int32), "
            "causal=True, softmax_scale=None, window_size=(-1, -1), softcap=0.0, num_splits=0) "
            "-> (o[B, Hq, Sq, D], lse[B, Hq, Sq] fp32)"
        ),
        shape_names=("B", "Hq", "Hkv", "Sq", "Sk", "D", "page"),
        bucket_exact=("D", "page"),
        dtypes=("float16", "bfloat16"),
        make_inputs=make_decode_inputs,
        reference=flash_attention_decode,
        tolerance={"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        flops=decode_flops,
        bytes_moved=decode_bytes,
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Small enough for the interpreter (product <= 2^18): mixed lengths (one full, one 0).
        test_shapes=(
            (1, 1, 1, 1, 1, 64, 0),
            (3, 4, 1, 1, 100, 64, 0),       # MQA, one empty sequence
            (2, 8, 2, 3, 77, 128, 0),       # GQA 4, Sq = 3
            (3, 4, 4, 2, 65, 64, 16),       # paged, MHA
            (2, 8, 1, 1, 40, 64, 1),        # page size 1
            (2, 4, 2, 5, 130, 64, 64),      # paged 64, Sq = 5
            (1, 2, 1, 16, 300, 64, 256),    # page 256, Sq = 16
            (2, 2, 1, 1, 33, 256, 0),       # D = 256
            (4, 32, 8, 1, 1000, 128, 16),   # GPU only: the issue's heads, mixed lengths
            (1, 32, 8, 1, 20000, 128, 16),  # GPU only: batch 1, many splits, full length
            (8, 16, 2, 4, 3000, 128, 0),
            (3, 4, 2, 2, 70, 64, 16),       # the example shape
        ),
        bench_shapes=_decode_bench_shapes(),
        compute="tensor",
        peers=(Peer("FA4", _fa4_decode, package="flash-attn-4"), Peer("sdpa-cudnn", _sdpa_decode("CUDNN_ATTENTION")),
               Peer("sdpa-flash", _sdpa_decode("FLASH_ATTENTION"))),
        check=check_decode,
        example_shape=(3, 4, 2, 2, 70, 64, 16),
        bad_inputs=_decode_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.flash_attention_decode_out(
            i["q"], i["k_cache"], i["v_cache"], i["cache_seqlens"], o[0], o[1], i.get("page_table"),
            i.get("causal", True), i.get("softmax_scale"), i.get("window_size", (-1, -1)),
            i.get("softcap", 0.0), i.get("num_splits", 0), **kw),
        outputs=("o", "lse"),
        sass_kernels=(r"attention::flash_attention_decode_kernel<", r"attention::merge_partials_kernel<"),
    )
)


# ---- flash_attention_bwd: the gradients of flash_attention_fwd (issue 31). From the
# forward's o and lse and the gradient dO of o, with S the (scaled, capped, masked) scores:
#   P = exp(S - lse) (0 on a row with lse = -inf: it saw no key), dV = P^T dO,
#   dP = dO V^T, delta = rowsum(dO * o), dS = P * (dP - delta) (times 1 - tanh^2 of the
#   capped score under a softcap), dQ = scale dS K, dK = scale dS^T Q;
# dK and dV summed over the query heads of a group. A shape is the forward's (B, Hq, Hkv,
# Sq, Sk, D, causal[, Dv]); its inputs hold the forward's o and lse of q, k and v.

BWD_OP = "flash_attention_bwd"


def flash_attention_bwd(
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
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of attention (flash_attention_fwd's meaning) with respect to q, k, v.

    do and o [B, Hq, Sq, Dv] (the gradient of o, and o), lse [B, Hq, Sq] (float32, from the
    forward), q, k, v and the options as flash_attention_fwd takes them. Returns dq
    [B, Hq, Sq, D], dk [B, Hkv, Sk, D] and dv [B, Hkv, Sk, Dv] in q's dtype (float64 when
    precise), dk and dv summed over the Hq / Hkv query heads of each key/value head. The
    gradient is computed from the given o and lse, as every FlashAttention backward does: P =
    exp(S - lse), delta = rowsum(dO * o). Only the (query, key) pairs the mask leaves
    contribute; a row with lse = -inf (it saw no key) contributes nothing and gets dq = 0.
    """
    import torch

    compute = torch.float64 if precise else torch.float32
    grads = attention_bwd_in(do, q, k, v, o, lse, causal, softmax_scale, compute, window_size, softcap)
    if precise:
        return grads
    return tuple(g.to(q.dtype) for g in grads)


def _hidden_pairs(start: int, stop: int, seqlen_q: int, seqlen_k: int, left: int, right: int, device):
    """[stop - start, Sk] True where query row i (of rows start..stop) does not see key j
    (bottom-right aligned bounds, -1 unbounded); None when every pair is seen."""
    import torch

    if left < 0 and right < 0:
        return None
    rows = torch.arange(start, stop, device=device)[:, None]
    cols = torch.arange(seqlen_k, device=device)[None, :]
    diag = cols - rows - (seqlen_k - seqlen_q)
    hidden = torch.zeros_like(diag, dtype=torch.bool)
    if right >= 0:
        hidden |= diag > right
    if left >= 0:
        hidden |= diag < -left
    return hidden


def _bwd_options(q, k, causal, softmax_scale, window_size, softcap):
    """(scale, left, right, cap) as the references take them (right 0 with causal)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    left, right = window_pair(BWD_OP, window_size)
    return scale, left, 0 if causal else right, float(softcap)


def _check_ref_dims(op: str, **tensors) -> None:
    for name, t in tensors.items():
        want = 3 if name == "lse" else 4
        if t.dim() != want:
            raise ValueError(f"{op}: argument '{name}' must have {want} dims, got {t.dim()}")
    heads_q, heads_kv = tensors["q"].shape[1], tensors["k"].shape[1]
    if heads_kv == 0 or heads_q % heads_kv != 0:
        raise ValueError(f"{op}: the query heads ({heads_q}) must be a multiple of the key/value heads ({heads_kv})")


def attention_bwd_in(do, q, k, v, o, lse, causal, softmax_scale, dtype: torch.dtype, window_size=(-1, -1),
                     softcap: float = 0.0):
    """flash_attention_bwd's formulas done entirely in `dtype`, a block of query rows at a
    time (the scores of the bench shapes do not fit at once in float64)."""
    import torch

    _check_ref_dims(BWD_OP, do=do, q=q, k=k, v=v, o=o, lse=lse)
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    scale, left, right, cap = _bwd_options(q, k, causal, softmax_scale, window_size, softcap)
    group = heads_q // heads_kv
    qc, kc, vc, doc = (t.to(dtype) for t in (q, k, v, do))
    if group > 1:
        kc = kc.repeat_interleave(group, dim=1)
        vc = vc.repeat_interleave(group, dim=1)
    delta = (doc * o.to(dtype)).sum(-1)
    lse_c = lse.to(dtype)
    dq = torch.zeros_like(qc)
    dk = torch.zeros((batch, heads_q, seqlen_k, head_dim), dtype=dtype, device=q.device)
    dv = torch.zeros((batch, heads_q, seqlen_k, head_dim_v), dtype=dtype, device=q.device)
    # Scores, capped scores, P, dP and dS of a block are alive at once.
    scores_per_row = max(1, batch * heads_q * seqlen_k)
    block = max(1, _SCORES_BUDGET_BYTES // (6 * scores_per_row * qc.element_size()))
    zero = torch.zeros((), dtype=dtype, device=q.device)
    for start in range(0, seqlen_q, block):
        stop = min(seqlen_q, start + block)
        x = torch.matmul(qc[:, :, start:stop], kc.transpose(-1, -2)) * scale
        t = None
        if cap > 0:
            t = torch.tanh(x / cap)
            x = t * cap
        hidden = _hidden_pairs(start, stop, seqlen_q, seqlen_k, left, right, q.device)
        if hidden is not None:
            x = x.masked_fill(hidden, float("-inf"))
        row_lse = lse_c[:, :, start:stop, None]
        p = torch.where(torch.isneginf(row_lse), zero, torch.exp(x - row_lse))
        del x
        d_o = doc[:, :, start:stop]
        dv += torch.matmul(p.transpose(-1, -2), d_o)
        ds = p * (torch.matmul(d_o, vc.transpose(-1, -2)) - delta[:, :, start:stop, None])
        del p
        if t is not None:
            ds = ds * (1 - t * t)
        dq[:, :, start:stop] = torch.matmul(ds, kc) * scale
        dk += torch.matmul(ds.transpose(-1, -2), qc[:, :, start:stop]) * scale
    if group > 1:
        dk = dk.view(batch, heads_kv, group, seqlen_k, head_dim).sum(2)
        dv = dv.view(batch, heads_kv, group, seqlen_k, head_dim_v).sum(2)
    return dq, dk, dv


def attention_grads_autograd(do, q, k, v, causal, softmax_scale, dtype: torch.dtype, window_size=(-1, -1),
                             softcap: float = 0.0):
    """(dq, dk, dv) by torch.autograd through attention done in `dtype` (torch.softmax of the
    masked scores, then P V; rows that see no key give 0): with the inputs' own dtype, what a
    PyTorch training step computes, the yardstick of check_bwd. A block of query rows at a
    time (each block's o depends on its own rows of q alone, so its gradients add up); dk and
    dv accumulate over the blocks in float32 and round once, as one matmul would."""
    import torch

    _check_ref_dims(BWD_OP, do=do, q=q, k=k, v=v)
    batch, heads_q, seqlen_q, _ = q.shape
    seqlen_k = k.shape[2]
    scale, left, right, cap = _bwd_options(q, k, causal, softmax_scale, window_size, softcap)
    group = heads_q // k.shape[1]
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    dq = torch.zeros(q.shape, dtype=dtype, device=q.device)
    dk = torch.zeros(k.shape, dtype=acc, device=q.device)
    dv = torch.zeros(v.shape, dtype=acc, device=q.device)
    scores_per_row = max(1, batch * heads_q * seqlen_k)
    block = max(1, _SCORES_BUDGET_BYTES // (6 * scores_per_row * torch.finfo(dtype).bits // 8))
    for start in range(0, seqlen_q, block):
        stop = min(seqlen_q, start + block)
        with torch.enable_grad():
            qb = q[:, :, start:stop].detach().to(dtype).requires_grad_()
            kb = k.detach().to(dtype).requires_grad_()
            vb = v.detach().to(dtype).requires_grad_()
            kr = kb.repeat_interleave(group, dim=1) if group > 1 else kb
            vr = vb.repeat_interleave(group, dim=1) if group > 1 else vb
            scores = torch.matmul(qb, kr.transpose(-1, -2)) * scale
            if cap > 0:
                scores = torch.tanh(scores / cap) * cap
            hidden = _hidden_pairs(start, stop, seqlen_q, seqlen_k, left, right, q.device)
            if hidden is not None:
                scores = scores.masked_fill(hidden, float("-inf"))
            p = torch.softmax(scores, dim=-1)
            if hidden is not None:  # a row that sees no key: softmax gives NaN, the op 0
                p = p.masked_fill(hidden.all(-1, keepdim=True), 0.0)
            out = torch.matmul(p, vr)
            gq, gk, gv = torch.autograd.grad(out, (qb, kb, vb), do[:, :, start:stop].to(dtype))
        dq[:, :, start:stop] = gq
        dk += gk
        dv += gv
    return dq, dk.to(dtype), dv.to(dtype)


def make_bwd_inputs(shape, dtype, device, seed):
    """The forward's q, k, v (make_inputs), its o and lse (the fp32 reference, o rounded to
    the dtype), and dO ~ N(0, 1)."""
    fwd = make_inputs(shape, dtype, device, seed)
    o, lse = flash_attention_fwd(fwd["q"], fwd["k"], fwd["v"], fwd["causal"], fwd["softmax_scale"])
    do = random_grad(o, seed)
    # q first: the argument the others' devices and dtypes are named against.
    return {"q": fwd["q"], "k": fwd["k"], "v": fwd["v"], "o": o, "lse": lse, "do": do,
            "causal": fwd["causal"], "softmax_scale": None}


def random_grad(o, seed: int):
    """dO ~ N(0, 1) in o's shape, dtype and device, from a seed of its own (the inputs'
    seed, offset)."""
    import torch

    gen = torch.Generator(device=o.device).manual_seed((seed + 0x9E3779B9) % (1 << 63))
    return torch.randn(o.shape, generator=gen, device=o.device, dtype=torch.float32).to(o.dtype)


def bwd_flops(shape) -> float:
    """Five matmuls over the pairs the mask leaves: Q K^T, dO V^T, P^T dO, dS K and dS^T Q, of
    2 flops a multiply-add: 2 (3 D + 2 Dv) a pair, 2.5x the forward's where D = Dv."""
    batch, heads_q, _, seqlen_q, seqlen_k, head_dim, causal, head_dim_v = full_shape(shape)
    return (2.0 * batch * heads_q * (3 * head_dim + 2 * head_dim_v)
            * visible_pairs(seqlen_q, seqlen_k, bool(causal)))


def bwd_bytes_moved(shape, dtype) -> float:
    """Read q, k, v, o, dO and lse once, write dq, dk and dv once."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, _, head_dim_v = full_shape(shape)
    elem = ELEM_BYTES[dtype]
    return (elem * (batch * heads_q * seqlen_q * (2 * head_dim + 2 * head_dim_v)
                    + 2 * batch * heads_kv * seqlen_k * (head_dim + head_dim_v))
            + 4.0 * batch * heads_q * seqlen_q)


def check_bwd_shapes(op: str, q_shape, v_shape, do_shape, o_shape, lse_shape) -> None:
    """The rules for do, o and lse the Triton and Pallas backends enforce once q, k and v
    passed check_attention_shapes: do and o [B, Hq, Sq, Dv] (q's first three dims, v's head
    dim), lse [B, Hq, Sq]. ValueError naming the argument."""
    for name, shape in (("do", do_shape), ("o", o_shape)):
        if len(shape) != 4:
            raise ValueError(f"{op}: argument '{name}' must have 4 dims [batch, heads, seq, head_dim], got "
                             f"{len(shape)} dims {list(shape)}")
    if len(lse_shape) != 3:
        raise ValueError(f"{op}: argument 'lse' must have 3 dims [batch, heads, seq], got {len(lse_shape)} dims "
                         f"{list(lse_shape)}")
    want = [*q_shape[:3], v_shape[3]]
    for name, shape in (("do", do_shape), ("o", o_shape)):
        if list(shape) != want:
            raise ValueError(f"{op}: argument '{name}' must have shape {want} (q's batch, heads and sequence, "
                             f"v's head dim), got {list(shape)}")
    if list(lse_shape) != want[:3]:
        raise ValueError(f"{op}: argument 'lse' must have shape {want[:3]} (q's batch, heads and sequence), got "
                         f"{list(lse_shape)}")


def _nan_reach(inputs):
    """(dq, dk, dv) masks of where a NaN among the inputs must show: through every (query,
    key) pair the mask leaves on a row that saw a key, which every kernel computes. (Through
    a masked pair, P = 0 times a NaN, it may or may not: the reference's plain matmuls carry
    it everywhere, a kernel only within the tiles it visits.)"""
    import torch

    q, k, v, o, lse, do = (inputs[n].detach().cpu() for n in ("q", "k", "v", "o", "lse", "do"))
    batch, heads_q, seqlen_q, head_dim = q.shape
    heads_kv, seqlen_k, head_dim_v = k.shape[1], k.shape[2], v.shape[3]
    group = heads_q // heads_kv
    _, left, right, _ = _bwd_options(q, k, inputs.get("causal", False), inputs.get("softmax_scale"),
                                     inputs.get("window_size", (-1, -1)), inputs.get("softcap", 0.0))
    hidden = _hidden_pairs(0, seqlen_q, seqlen_q, seqlen_k, left, right, "cpu")
    seen = torch.ones(seqlen_q, seqlen_k, dtype=torch.bool) if hidden is None else ~hidden
    active = seen & ~torch.isneginf(lse)[..., None]  # [B, Hq, Sq, Sk]
    nan_k = torch.isnan(k).repeat_interleave(group, 1)
    nan_v = torch.isnan(v).repeat_interleave(group, 1)
    nan_q, nan_do = torch.isnan(q), torch.isnan(do)
    nan_p = active & (nan_q.any(-1)[..., None] | nan_k.any(-1)[..., None, :] | torch.isnan(lse)[..., None])
    nan_ds = active & (nan_p | nan_do.any(-1)[..., None] | nan_v.any(-1)[..., None, :]
                       | torch.isnan(o).any(-1)[..., None])
    a, f = active.double(), lambda m: m.double()
    dq = (nan_ds.any(-1)[..., None] | (a @ f(nan_k) > 0)).expand(batch, heads_q, seqlen_q, head_dim)
    dk = (nan_ds.any(-2)[..., None] | (a.transpose(-1, -2) @ f(nan_q) > 0)).expand(
        batch, heads_q, seqlen_k, head_dim)
    dv = (nan_p.any(-2)[..., None] | (a.transpose(-1, -2) @ f(nan_do) > 0)).expand(
        batch, heads_q, seqlen_k, head_dim_v)
    dk = dk.reshape(batch, heads_kv, group, seqlen_k, head_dim).any(2)
    dv = dv.reshape(batch, heads_kv, group, seqlen_k, head_dim_v).any(2)
    return dq, dk, dv


def check_bwd(out, ref, dtype, inputs, what: str = "flash_attention_bwd") -> None:
    """out = (dq, dk, dv) from a backend, ref = the float64 reference. FlashAttention's
    criterion for each: the max error at most ERROR_MULTIPLE x PyTorch's own (autograd in the
    input dtype, attention_grads_autograd) plus twice the output's rounding; dq exactly 0 on
    the rows that saw no key. A NaN input: NaN nowhere the reference is finite, and NaN
    wherever it must reach (_nan_reach)."""
    import torch

    dt = getattr(torch, dtype)
    names = ("dq", "dk", "dv")
    assert isinstance(out, (tuple, list)) and len(out) == 3, f"{what}: want (dq, dk, dv), got {type(out)}"
    for name, g, r in zip(names, out, ref):
        assert tuple(g.shape) == tuple(r.shape), f"{what}: {name} shape {tuple(g.shape)} != {tuple(r.shape)}"
        assert g.dtype == dt, f"{what}: {name} dtype {g.dtype} != {dtype}"
    tensors = [inputs[n] for n in ("q", "k", "v", "o", "lse", "do")]
    has_nan = any(torch.isnan(t).any().item() for t in tensors)
    reach = _nan_reach(inputs) if has_nan else (None, None, None)
    # PyTorch's same-dtype gradients set the scale of acceptable error. With a NaN input it
    # is taken on the inputs with the NaN as 0: a scale, compared where the reference is
    # finite (which a NaN does not reach).
    clean = {n: (inputs[n].nan_to_num(0.0) if has_nan else inputs[n]) for n in ("do", "q", "k", "v")}
    base = attention_grads_autograd(clean["do"], clean["q"], clean["k"], clean["v"], inputs.get("causal", False),
                                    inputs.get("softmax_scale"), dt, inputs.get("window_size", (-1, -1)),
                                    inputs.get("softcap", 0.0))
    for name, g, r, b, must in zip(names, out, ref, base, reach):
        if g.numel() == 0:
            continue
        g64, r64, b64 = g.double().cpu(), r.double().cpu(), b.double().cpu()
        may = torch.isnan(r64)
        got = torch.isnan(g64)
        assert not (got & ~may).any(), (
            f"{what}: {name} is NaN at {(got & ~may).sum().item()} places where the reference is finite")
        if must is not None:
            missed = must & ~got
            assert not missed.any(), f"{what}: {name} lacks the NaN of an input at {missed.sum().item()} places"
        finite = ~may
        if not finite.any():
            continue
        assert torch.isfinite(g64[finite]).all(), f"{what}: {name} is not finite where the reference is"
        both = finite & torch.isfinite(b64)
        base_err = (b64 - r64)[both].abs().max().item() if both.any() else 0.0
        rounding = (r64.to(dt).double() - r64)[finite].abs().max().item()
        err = (g64 - r64)[finite].abs().max().item()
        allowed = ERROR_MULTIPLE * base_err + 2.0 * rounding + 1e-5
        assert err <= allowed, (
            f"{what}: {name} max error {err:.3g} > {allowed:.3g} ({ERROR_MULTIPLE} x PyTorch's {dtype} "
            f"error {base_err:.3g} + 2 x output rounding {rounding:.3g})")
    unseen = torch.isneginf(inputs["lse"].cpu())
    dq = out[0].cpu()
    if unseen.any() and dq.numel():
        rows = dq[unseen]
        rows_ref = ref[0].cpu()[unseen]
        assert (rows[~torch.isnan(rows_ref)] == 0).all(), f"{what}: dq must be 0 on rows that see no key"


def _attention_bwd_bad_inputs() -> tuple[BadInput, ...]:
    """What every backend refuses alike: flash_attention_fwd's rules on q, k, v and the
    options, do and o of q's dtype and shape [B, Hq, Sq, Dv], lse float32 [B, Hq, Sq], do
    contiguous in its last dim."""

    def call(t, d, q=(1, 4, 16, 64), kv=(1, 2, 16, 64), v=None, dtype="float16", k_dtype=None, do=None,
             o=None, lse=None, do_dtype=None, o_dtype=None, lse_dtype="float32", strided_do=False, **extra):
        dt = getattr(t, dtype)
        out = (*q[:3], (v or kv)[-1])
        args = {"q": t.randn(q, device=d).to(dt), "k": t.randn(kv, device=d).to(getattr(t, k_dtype or dtype)),
                "v": t.randn(v or kv, device=d).to(dt),
                "o": t.randn(o or out, device=d).to(getattr(t, o_dtype or dtype)),
                "lse": t.randn(lse or out[:3], device=d).to(getattr(t, lse_dtype)),
                "do": t.randn(do or out, device=d).to(getattr(t, do_dtype or dtype))}
        if strided_do:
            args["do"] = t.randn(*out[:3], 2 * out[3], device=d).to(dt)[..., ::2]
        return {**args, **extra}

    heads = "the query heads (4, dim 1 of q) must be a multiple of the key/value heads (3"
    out_shape = "argument '{}' must have shape [1, 4, 16, 64] (q's batch, heads and sequence, v's head dim), got {}"
    return (
        BadInput("head_dim_48", lambda t, d: call(t, d, (1, 4, 16, 48), (1, 2, 16, 48)), ValueError,
                 "head dim (the last dim of q and k) must be one of 32, 64, 96, 128, 192, 256, got 48"),
        BadInput("v_head_dim_128_with_64", lambda t, d: call(t, d, v=(1, 2, 16, 128)), ValueError,
                 "argument 'v' must have shape [1, 2, 16, 64] (k's first three dims and the head dim; 128 is "
                 "also allowed with head dim 192), got [1, 2, 16, 128]"),
        BadInput("heads_not_multiple", lambda t, d: call(t, d, kv=(1, 3, 16, 64)), ValueError, heads),
        BadInput("float32", lambda t, d: call(t, d, dtype="float32"), TypeError,
                 "argument 'q' must be float16 or bfloat16, got"),
        BadInput("k_dtype", lambda t, d: call(t, d, k_dtype="bfloat16"), TypeError,
                 "argument 'k' must have the dtype of 'q'"),
        BadInput("o_dtype", lambda t, d: call(t, d, o_dtype="bfloat16"), TypeError,
                 "argument 'o' must have the dtype of 'q'"),
        BadInput("do_dtype", lambda t, d: call(t, d, do_dtype="float32"), TypeError,
                 "argument 'do' must have the dtype of 'q'"),
        BadInput("lse_float16", lambda t, d: call(t, d, lse_dtype="float16"), TypeError,
                 "argument 'lse' must be float32, got"),
        BadInput("q_three_dims", lambda t, d: call(t, d, (4, 16, 64)), ValueError,
                 "argument 'q' must have 4 dims [batch, heads, seq, head_dim]"),
        BadInput("do_three_dims", lambda t, d: call(t, d, do=(4, 16, 64)), ValueError,
                 "argument 'do' must have 4 dims [batch, heads, seq, head_dim]"),
        BadInput("lse_four_dims", lambda t, d: call(t, d, lse=(1, 4, 16, 1)), ValueError,
                 "argument 'lse' must have 3 dims [batch, heads, seq]"),
        BadInput("do_seqlen", lambda t, d: call(t, d, do=(1, 4, 17, 64)), ValueError,
                 out_shape.format("do", "[1, 4, 17, 64]")),
        BadInput("o_head_dim", lambda t, d: call(t, d, o=(1, 4, 16, 32)), ValueError,
                 out_shape.format("o", "[1, 4, 16, 32]")),
        BadInput("lse_heads", lambda t, d: call(t, d, lse=(1, 2, 16)), ValueError,
                 "argument 'lse' must have shape [1, 4, 16] (q's batch, heads and sequence), got [1, 2, 16]"),
        BadInput("do_last_dim_strided", lambda t, d: call(t, d, strided_do=True), ValueError,
                 "argument 'do' must be contiguous in its last dim (stride 1), got stride 2", jax=False),
        BadInput("softmax_scale", lambda t, d: call(t, d, softmax_scale=-1.0), ValueError,
                 "argument 'softmax_scale' must be a finite number > 0"),
        BadInput("window_element_below_-1", lambda t, d: call(t, d, window_size=(-2, 0)), ValueError,
                 WINDOW_ERROR + "(-2, 0)"),
        BadInput("window_right_with_causal", lambda t, d: call(t, d, causal=True, window_size=(4, 1)), ValueError,
                 CAUSAL_WINDOW_ERROR + "(4, 1)"),
        BadInput("softcap_nan", lambda t, d: call(t, d, softcap=float("nan")), ValueError, SOFTCAP_ERROR + "nan"),
        BadInput("softcap_negative", lambda t, d: call(t, d, softcap=-1.0), ValueError, SOFTCAP_ERROR + "-1"),
    )


def _autograd_peer(make_forward):
    """A peer's backward timed alone: the attention forward `make_forward()` returns (q, k,
    v, causal=, softmax_scale=) -> o (or (o, ...)) runs once per input set, on its first
    call, keeping its graph; every call then runs torch.autograd.grad of that o with the
    set's dO. Returns (dq, dk, dv)."""

    def make():
        import torch

        forward = make_forward()
        graphs = {}

        def run(q, k, v, o, lse, do, causal=False, softmax_scale=None):
            key = (id(q), id(k), id(v), bool(causal), softmax_scale)
            entry = graphs.get(key)
            if entry is None or entry[0] is not q or entry[1] is not k or entry[2] is not v:
                leaves = tuple(t.detach().requires_grad_() for t in (q, k, v))
                with torch.enable_grad():
                    out = forward(*leaves, causal=causal, softmax_scale=softmax_scale)
                out = out[0] if isinstance(out, tuple) else out
                entry = graphs[key] = (q, k, v, leaves, out)
            return torch.autograd.grad(entry[4], entry[3], do, retain_graph=True)

        return run

    return make


def _fa3_jax_bwd():
    """FlashAttention-3's backward (flash_attn3_jax: the VJP of flash_mha) timed alone: the
    forward and its residuals once per input set, then a jitted VJP of each dO, with the
    [B, H, S, D] <-> [B, S, H, D] swaps of dO and the gradients inside it (copies the torch
    peers do not pay: about 3% of the backward at the bench shapes)."""
    import jax
    import jax.numpy as jnp
    from flash_attn3_jax import flash_mha

    from gks.pallas._bridge import _to_jax, _to_torch

    @jax.jit
    def apply(vjp_fn, do):
        grads = vjp_fn(jnp.swapaxes(do, 1, 2))
        return tuple(jnp.swapaxes(g, 1, 2) for g in grads)

    graphs = {}

    def run(q, k, v, o, lse, do, causal=False, softmax_scale=None):
        key = (id(q), id(k), id(v), bool(causal), softmax_scale)
        entry = graphs.get(key)
        if entry is None or entry[0] is not q or entry[1] is not k or entry[2] is not v:
            scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
            qkv = (jnp.swapaxes(_to_jax(t), 1, 2) for t in (q, k, v))
            _, vjp_fn = jax.vjp(lambda q, k, v: flash_mha(q, k, v, softmax_scale=scale, is_causal=bool(causal)), *qkv)
            entry = graphs[key] = (q, k, v, vjp_fn)
        return _to_torch(apply(entry[3], _to_jax(do)))

    return run


FLASH_ATTENTION_BWD = register(
    OpSpec(
        name=BWD_OP,
        family="attention",
        summary=("FlashAttention backward (dq, dk, dv from dO, o, lse): causal, sliding window, softcap, "
                 "GQA/MQA summed per KV head, any Sq/Sk, head dims 192/128"),
        signature=(
            "flash_attention_bwd(do[B, Hq, Sq, Dv], q[B, Hq, Sq, D], k[B, Hkv, Sk, D], v[B, Hkv, Sk, Dv], "
            "o[B, Hq, Sq, Dv], lse[B, Hq, Sq] fp32, causal=False, softmax_scale=None, window_size=(-1, -1), "
            "softcap=0.0) -> (dq[B, Hq, Sq, D], dk[B, Hkv, Sk, D], dv[B, Hkv, Sk, Dv]) (q's dtype)"
        ),
        **_DENSE_SHAPES,
        make_inputs=make_bwd_inputs,
        reference=flash_attention_bwd,
        tolerance={"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        flops=bwd_flops,
        bytes_moved=bwd_bytes_moved,
        backends=(
            # Every backend: dK, dV per key block (looping over the query heads of its
            # group). CUDA's configs: mma.sync (kernels/attention/bwd_sm80.cuh, every GPU and
            # head dim; dQ per query block, deterministic) and, on sm_90 at D = Dv = 64 and
            # 128, wgmma and wgmma.ws (bwd_sm90.cuh; dQ added in fp32 by atomics or bulk
            # reduce-adds; wgmma.ws, warp-specialized with TMA, the default there).
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Under the interpreters' size limit as flash_attention_fwd's (the product of a
        # shape, causal included, at most 2^18 runs interpreted; the last ones run on a GPU).
        test_shapes=(
            (1, 1, 1, 1, 1, 32, 0),
            (2, 4, 1, 45, 45, 64, 0),        # MQA, odd lengths
            (1, 4, 4, 40, 100, 128, 0),      # Sq < Sk
            (1, 4, 2, 37, 300, 32, 0),       # GQA, longer Sk
            (1, 2, 2, 90, 40, 96, 0),        # Sq > Sk, D = 96
            (1, 2, 1, 33, 50, 256, 0),
            (1, 2, 1, 33, 50, 192, 0),
            (1, 4, 2, 33, 50, 192, 0, 128),  # DeepSeek's D = 192, Dv = 128, GQA
            (1, 1, 1, 0, 16, 64, 0),         # Sq = 0: dk = dv = 0
            (1, 2, 1, 5, 0, 64, 0),          # Sk = 0: dq = 0
            (1, 1, 1, 64, 64, 64, 1),
            (1, 2, 1, 37, 53, 32, 1),        # causal, Sq < Sk
            (1, 2, 2, 53, 17, 32, 1),        # causal, Sq > Sk: rows that see no key
            (1, 1, 1, 16, 40, 256, 1),
            (1, 1, 1, 2, 5, 192, 1, 128),
            (1, 1, 1, 1, 1, 64, 1),
            (2, 8, 1, 129, 129, 128, 1),     # GPU only under an interpreter's size limit (see above)
            (1, 4, 4, 200, 1000, 96, 1),
            (2, 8, 2, 300, 517, 192, 1, 128),
        ),
        bench_shapes=_bench_shapes(),
        compute="tensor",
        peers=(
            Peer("sdpa-flash", _autograd_peer(_sdpa("FLASH_ATTENTION"))),
            Peer("sdpa-cudnn", _autograd_peer(_sdpa("CUDNN_ATTENTION"))),
            Peer("FA4", _autograd_peer(_fa4), package="flash-attn-4"),
            Peer("FA3 (JAX)", _fa3_jax_bwd, package="flash-attn3-jax"),
        ),
        check=check_bwd,
        example_shape=(1, 2, 1, 37, 53, 32, 1),
        bad_inputs=_attention_bwd_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.flash_attention_bwd_out(
            i["do"], i["q"], i["k"], i["v"], i["o"], i["lse"], o[0], o[1], o[2], i.get("causal", False),
            i.get("softmax_scale"), i.get("window_size", (-1, -1)), i.get("softcap", 0.0),
            i.get("deterministic", False), **kw),
        outputs=("dq", "dk", "dv"),
        # The mma.sync kernels' last template argument is kVarlen (true: the varlen op's).
        sass_kernels=(r"attention::flash_attention_bwd_(delta|dkdv|dq)_kernel<.*, false>\(",
                      r"attention::(bwd_ws::)?flash_attention_bwd_(wgmma|ws|dq_convert)_kernel<"),
    )
)


# ---- flash_attention_varlen_bwd: the backward of flash_attention_varlen_fwd over packed keys
# (a training step on packed sequences). A shape is the varlen forward's without its page:
# (B, Hq, Hkv, Sq, Sk, D, causal[, Dv]), lengths mixed below 1024 as the forward's.

VARLEN_BWD_OP = "gks.flash_attention_varlen_bwd"


def flash_attention_varlen_bwd(
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
    *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients of flash_attention_varlen_fwd (packed keys) with respect to q, k, v.

    do and o [total_q, Hq, Dv], lse [Hq, total_q] (float32, the forward's), q, k, v, the
    cu_seqlens and the options as flash_attention_varlen_fwd takes them (no seqused_k, no
    page table). Each sequence's gradients are flash_attention_bwd's over its rows and keys.
    Returns dq [total_q, Hq, D], dk [total_k, Hkv, D], dv [total_k, Hkv, Dv] in q's dtype
    (float64 when precise); rows in no sequence are 0. max_seqlen_q and max_seqlen_k size the
    kernels' grids and deterministic picks among kernels; the meaning depends on neither.
    """
    import torch

    del max_seqlen_q, max_seqlen_k, deterministic
    out = torch.float64 if precise else q.dtype
    dq, dk, dv = (torch.zeros(t.shape, dtype=out, device=q.device) for t in (q, k, v))
    if cu_seqlens_q.device.type == "meta":
        return dq, dk, dv
    bounds = varlen_bounds(cu_seqlens_q, cu_seqlens_k, None, q.shape[0], k.shape[0])
    for q0, q1, k0, k1 in bounds:
        if q1 == q0 and k1 == k0:
            continue
        grads = flash_attention_bwd(_dense(do, q0, q1), _dense(q, q0, q1), _dense(k, k0, k1), _dense(v, k0, k1),
                                    _dense(o, q0, q1), lse[None, :, q0:q1], causal, softmax_scale, window_size,
                                    softcap, precise=precise)
        for full, g, lo, hi in zip((dq, dk, dv), grads, (q0, k0, k0), (q1, k1, k1)):
            full[lo:hi] = g[0].transpose(0, 1)
    return dq, dk, dv


def varlen_bwd_shape(shape) -> tuple[int, ...]:
    """The varlen forward's shape (page 0) of a varlen backward shape."""
    full = full_shape(shape)
    return (*full[:7], 0, full[7])


def make_varlen_bwd_inputs(shape, dtype, device, seed):
    """The varlen forward's packed q, k, v and cu_seqlens (make_varlen_inputs), its o and lse
    (the fp32 reference, o rounded to the dtype; rows in no sequence 0 and -inf), and dO ~
    N(0, 1)."""
    fwd = make_varlen_inputs(varlen_bwd_shape(shape), dtype, device, seed)
    o, lse = flash_attention_varlen_fwd(fwd["q"], fwd["k"], fwd["v"], fwd["cu_seqlens_q"], fwd["cu_seqlens_k"],
                                        fwd["max_seqlen_q"], fwd["max_seqlen_k"], causal=fwd["causal"])
    do = random_grad(o, seed)
    return {"q": fwd["q"], "k": fwd["k"], "v": fwd["v"], "o": o, "lse": lse, "do": do,
            "cu_seqlens_q": fwd["cu_seqlens_q"], "cu_seqlens_k": fwd["cu_seqlens_k"],
            "max_seqlen_q": fwd["max_seqlen_q"], "max_seqlen_k": fwd["max_seqlen_k"],
            "causal": fwd["causal"], "softmax_scale": None}


def check_varlen_bwd_inputs(op: str, do, q, k, v, o, lse) -> None:
    """What the Python backends check beyond check_varlen_inputs, in the C++ API's words: o
    and do of q's dtype and shape [total_q, Hq, Dv] with a contiguous last dim, lse float32
    [Hq, total_q]."""
    import torch

    for name, t in (("o", o), ("do", do)):
        if t.dtype != q.dtype:
            raise TypeError(f"{op}: argument '{name}' must have the dtype of 'q' ({q.dtype}), got {t.dtype}")
    if lse.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'lse' must be float32, got {lse.dtype}")
    want = [q.shape[0], q.shape[1], v.shape[-1]]
    if list(o.shape) != want:
        raise ValueError(f"{op}: argument 'o' must have shape {want} (q's first two dims and v's head dim), got "
                         f"{list(o.shape)}")
    if list(lse.shape) != [q.shape[1], q.shape[0]]:
        raise ValueError(f"{op}: argument 'lse' must have shape {[q.shape[1], q.shape[0]]} (q's heads and rows), "
                         f"got {list(lse.shape)}")
    if list(do.shape) != want:
        raise ValueError(f"{op}: argument 'do' must have shape {want} (o's shape), got {list(do.shape)}")
    for name, t in (("o", o), ("do", do)):
        if t.shape[-1] > 1 and t.stride(-1) != 1:
            raise ValueError(f"{op}: argument '{name}' must be contiguous in its last dim (stride 1), got "
                             f"stride {t.stride(-1)}")


def check_varlen_bwd(out, ref, dtype, inputs, what: str = "flash_attention_varlen_bwd") -> None:
    """check_bwd sequence by sequence (on each one's rows and keys), and 0 on the rows of dq,
    dk and dv in no sequence."""
    import torch

    assert isinstance(out, (tuple, list)) and len(out) == 3, f"{what}: want (dq, dk, dv), got {type(out)}"
    for name, g, r in zip(("dq", "dk", "dv"), out, ref):
        assert tuple(g.shape) == tuple(r.shape) and g.dtype == getattr(torch, dtype), (
            f"{what}: {name} {g.dtype} {tuple(g.shape)}, want {dtype} {tuple(r.shape)}")
    q, k = inputs["q"], inputs["k"]
    bounds = varlen_bounds(inputs["cu_seqlens_q"], inputs["cu_seqlens_k"], None, q.shape[0], k.shape[0])
    covered_q = torch.zeros(q.shape[0], dtype=torch.bool)
    covered_k = torch.zeros(k.shape[0], dtype=torch.bool)
    for b, (q0, q1, k0, k1) in enumerate(bounds):
        covered_q[q0:q1] = True
        covered_k[k0:k1] = True
        seq_inputs = {"q": _dense(q, q0, q1), "k": _dense(k, k0, k1), "v": _dense(inputs["v"], k0, k1),
                      "o": _dense(inputs["o"], q0, q1), "do": _dense(inputs["do"], q0, q1),
                      "lse": inputs["lse"][None, :, q0:q1], "causal": inputs.get("causal", False),
                      "softmax_scale": inputs.get("softmax_scale"),
                      "window_size": inputs.get("window_size", (-1, -1)), "softcap": inputs.get("softcap", 0.0)}
        check_bwd(tuple(_dense(t, lo, hi) for t, lo, hi in zip(out, (q0, k0, k0), (q1, k1, k1))),
                  tuple(_dense(t, lo, hi) for t, lo, hi in zip(ref, (q0, k0, k0), (q1, k1, k1))), dtype, seq_inputs,
                  f"{what} (sequence {b}: {q1 - q0} rows, {k1 - k0} keys)")
    for name, g, covered in zip(("dq", "dk", "dv"), out, (covered_q, covered_k, covered_k)):
        outside = g.cpu()[~covered]
        assert not outside.numel() or (outside == 0).all(), f"{what}: {name} is not 0 on rows in no sequence"


def _varlen_bwd_bad_inputs() -> tuple[BadInput, ...]:
    """What every backend refuses alike beyond the varlen forward's rules (which it shares):
    o, do and lse of another dtype or shape, do strided in its last dim, max_seqlen_k below 0."""

    def call(t, d, do=None, o=None, lse=None, dtype="float16", do_dtype=None, lse_dtype="float32",
             strided_do=False, **extra):
        dt = getattr(t, dtype)
        args = {"q": t.randn(12, 4, 64, device=d).to(dt), "k": t.randn(20, 2, 64, device=d).to(dt),
                "v": t.randn(20, 2, 64, device=d).to(dt),
                "o": t.randn(o or (12, 4, 64), device=d).to(dt),
                "lse": t.randn(lse or (4, 12), device=d).to(getattr(t, lse_dtype)),
                "do": t.randn(do or (12, 4, 64), device=d).to(getattr(t, do_dtype or dtype)),
                "cu_seqlens_q": t.tensor([0, 5, 12], dtype=t.int32, device=d),
                "cu_seqlens_k": t.tensor([0, 8, 20], dtype=t.int32, device=d),
                "max_seqlen_q": 7, "max_seqlen_k": 12}
        if strided_do:
            args["do"] = t.randn(12, 4, 128, device=d).to(dt)[..., ::2]
        return {**args, **extra}

    return (
        BadInput("q-four-dims", lambda t, d: call(t, d, q=t.randn(1, 12, 4, 64, device=d).half()), ValueError,
                 "argument 'q' must have 3 dims [total, heads, head_dim]"),
        BadInput("do_dtype", lambda t, d: call(t, d, do_dtype="bfloat16"), TypeError,
                 "argument 'do' must have the dtype of 'q'"),
        BadInput("lse_float16", lambda t, d: call(t, d, lse_dtype="float16"), TypeError,
                 "argument 'lse' must be float32, got"),
        BadInput("o_rows", lambda t, d: call(t, d, o=(11, 4, 64)), ValueError,
                 "argument 'o' must have shape [12, 4, 64] (q's first two dims and v's head dim), got [11, 4, 64]"),
        BadInput("lse_transposed", lambda t, d: call(t, d, lse=(12, 4)), ValueError,
                 "argument 'lse' must have shape [4, 12] (q's heads and rows), got [12, 4]"),
        BadInput("do_heads", lambda t, d: call(t, d, do=(12, 2, 64)), ValueError,
                 "argument 'do' must have shape [12, 4, 64] (o's shape), got [12, 2, 64]"),
        BadInput("do_last_dim_strided", lambda t, d: call(t, d, strided_do=True), ValueError,
                 "argument 'do' must be contiguous in its last dim (stride 1), got stride 2"),
        BadInput("max_seqlen_k-negative", lambda t, d: call(t, d, max_seqlen_k=-1), ValueError,
                 "argument 'max_seqlen_k' must be an int >= 0, got -1"),
        BadInput("cu_seqlens_k-length", lambda t, d: call(
            t, d, cu_seqlens_k=t.tensor([0, 8, 14, 20], dtype=t.int32, device=d)), ValueError,
                 "argument 'cu_seqlens_k' must have shape [3] (cu_seqlens_q's), got [4]"),
        BadInput("window_right_with_causal", lambda t, d: call(t, d, causal=True, window_size=(4, 1)), ValueError,
                 CAUSAL_WINDOW_ERROR + "(4, 1)"),
    )


FLASH_ATTENTION_VARLEN_BWD = register(
    OpSpec(
        name="flash_attention_varlen_bwd",
        family="attention",
        summary=("FlashAttention backward over packed sequences (cu_seqlens): dq, dk, dv per sequence, causal/window "
                 "bottom-right, softcap, GQA, CUDA-graph safe"),
        signature=(
            "flash_attention_varlen_bwd(do[total_q, Hq, Dv], q[total_q, Hq, D], k[total_k, Hkv, D], "
            "v[total_k, Hkv, Dv], o[total_q, Hq, Dv], lse[Hq, total_q] fp32, cu_seqlens_q[B + 1] int32, "
            "cu_seqlens_k[B + 1] int32, max_seqlen_q, max_seqlen_k, causal=False, softmax_scale=None, "
            "window_size=(-1, -1), softcap=0.0) -> (dq[total_q, Hq, D], dk[total_k, Hkv, D], dv[total_k, Hkv, Dv])"
        ),
        **_DENSE_SHAPES,
        make_inputs=make_varlen_bwd_inputs,
        reference=flash_attention_varlen_bwd,
        tolerance={"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        flops=bwd_flops,
        bytes_moved=bwd_bytes_moved,
        backends=(
            # CUDA: the mma.sync kernels of flash_attention_bwd (kernels/attention/bwd_sm80.cuh,
            # kVarlen: each CTA moves to its sequence's rows), every head dim and GPU; one
            # kernel family, nothing to tune.
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Mixed lengths below 1024 (one full, one without queries); under the interpreters'
        # size limit the first ones.
        test_shapes=(
            (1, 1, 1, 1, 1, 32, 0),
            (3, 4, 2, 40, 70, 64, 0),        # GQA, one sequence without queries
            (4, 2, 1, 33, 50, 64, 1),        # causal, MQA, mixed lengths
            (3, 2, 2, 65, 30, 128, 1),       # causal, Sq > Sk in some sequences
            (2, 2, 1, 17, 40, 256, 1),
            (2, 2, 1, 20, 33, 192, 1, 128),  # DeepSeek's head dims
            (3, 2, 2, 50, 64, 96, 0),
            (4, 8, 2, 300, 517, 128, 1),     # GPU only under an interpreter's size limit
        ),
        bench_shapes=(
            (8, 16, 16, 2048, 2048, 128, 1),
            (4, 32, 8, 4096, 4096, 128, 1),
            (8, 16, 16, 4096, 4096, 64, 0),
        ),
        compute="tensor",
        # No peer yet: FA4's varlen backward on sm_90 is to be checked on a GPU first.
        check=check_varlen_bwd,
        example_shape=(3, 4, 2, 40, 70, 64, 0),
        bad_inputs=_varlen_bwd_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.flash_attention_varlen_bwd_out(
            i["do"], i["q"], i["k"], i["v"], i["cu_seqlens_q"], i["cu_seqlens_k"], i["max_seqlen_q"],
            i["max_seqlen_k"], i["o"], i["lse"], o[0], o[1], o[2], i.get("causal", False), i.get("softmax_scale"),
            i.get("window_size", (-1, -1)), i.get("softcap", 0.0), i.get("deterministic", False), **kw),
        outputs=("dq", "dk", "dv"),
        sass_kernels=(r"attention::flash_attention_bwd_(delta|dkdv|dq)_kernel<.*, true>\(",),
    )
)
