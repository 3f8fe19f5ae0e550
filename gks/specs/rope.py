# SPDX-License-Identifier: Apache-2.0
"""The rope family: rotary position embeddings on attention's query and key heads.

apply_rope: q [..., Hq, D] and k [..., Hk, D] (the same token dims: [B, S, H, D] or packed
[T, H, D]) rotated at each token's position. positions (int32/int64, q's token dims) index
cos_sin_cache [max_pos, rotary_dim] (fp32; cos in the first half of a row, sin in the
second). The first rotary_dim values of a head are rotated in pairs — NeoX style (is_neox)
pairs i with i + rotary_dim/2, GPT-J style 2i with 2i + 1 — (a, b) -> (a c - b s, b c + a s)
with c, s the row's i-th cos and sin; the rest pass through. fp32 math, outputs in q's dtype.
A position outside [0, max_pos) has no angles: its token's rotated values are NaN.
apply_rope_ is the in-place form (q and k overwritten).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["apply_rope", "rope_cos_sin_cache"]


def rope_cos_sin_cache(max_pos: int, rotary_dim: int, base: float = 10000.0, device=None):
    """The usual cache: row p holds cos(p f_i) then sin(p f_i), f_i = base^(-2i/rotary_dim),
    in fp32 (computed in float64)."""
    import torch

    inv_freq = base ** (-torch.arange(0, rotary_dim, 2, dtype=torch.float64, device=device) / rotary_dim)
    angles = torch.arange(max_pos, dtype=torch.float64, device=device)[:, None] * inv_freq[None, :]
    return torch.cat([angles.cos(), angles.sin()], dim=-1).to(torch.float32)


def _rotate(x, c, s, rotary_dim: int, is_neox: bool):
    import torch

    half = rotary_dim // 2
    rot = x[..., :rotary_dim]
    if is_neox:
        a, b = rot[..., :half], rot[..., half:]
        out = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack([a * c - b * s, b * c + a * s], dim=-1).flatten(-2)
    return torch.cat([out, x[..., rotary_dim:]], dim=-1)


def apply_rope(q: torch.Tensor, k: torch.Tensor, cos_sin_cache: torch.Tensor, positions: torch.Tensor,
               is_neox: bool = True, *, precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q_out, k_out) as defined above."""
    import torch

    compute = torch.float64 if precise else torch.float32
    max_pos, rotary_dim = cos_sin_cache.shape
    half = rotary_dim // 2
    pos = positions.long()
    valid = (pos >= 0) & (pos < max_pos)
    rows = cos_sin_cache.to(compute)[pos.clamp(0, max(max_pos - 1, 0))] if max_pos else torch.zeros(
        (*pos.shape, rotary_dim), dtype=compute, device=q.device)
    nan = torch.tensor(float("nan"), dtype=compute, device=q.device)
    c = torch.where(valid[..., None], rows[..., :half], nan)[..., None, :]  # broadcast over heads
    s = torch.where(valid[..., None], rows[..., half:], 0.0)[..., None, :]
    outs = tuple(_rotate(t.to(compute), c, s, rotary_dim, is_neox) for t in (q, k))
    return outs if precise else tuple(o.to(q.dtype) for o in outs)


def _inputs(shape, dtype, device, seed):
    """q [T, Hq, D], k [T, Hk, D] ~ N(0, 1); positions uniform in [0, 4096); the usual cache
    (base 10000) of rotary_dim R; NeoX pairs."""
    import torch

    tokens, heads_q, heads_k, head_dim, rotary_dim = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn((tokens, heads_q, head_dim), generator=gen, device=device).to(dt)
    k = torch.randn((tokens, heads_k, head_dim), generator=gen, device=device).to(dt)
    max_pos = 4096
    positions = torch.randint(0, max_pos, (tokens,), generator=gen, device=device)
    return {"q": q, "k": k, "cos_sin_cache": rope_cos_sin_cache(max_pos, rotary_dim, device=device),
            "positions": positions, "is_neox": True}


def _check(out, ref, dtype, inputs) -> None:
    from gks.testing import assert_matches

    what = f"apply_rope/{dtype}/{tuple(inputs['q'].shape)}/{tuple(inputs['k'].shape)}"
    assert isinstance(out, tuple) and len(out) == 2, f"{what}: returned {type(out)}"
    for name, o, r in zip(("q_out", "k_out"), out, ref):
        assert_matches(o, r, dtype, APPLY_ROPE.tolerance, f"{what}: {name}")


def _torch_apply_rope():
    # Eager PyTorch as a model writes it (HF's rotate_half form): the cache rows gathered,
    # cos and sin repeated over both halves.
    import torch

    def run(q, k, cos_sin_cache, positions, is_neox=True):
        if not is_neox:
            raise ValueError("the rotate_half peer pairs NeoX style only")
        half = cos_sin_cache.shape[1] // 2
        rows = cos_sin_cache[positions]
        c = torch.cat([rows[..., :half]] * 2, dim=-1)[..., None, :]
        s = torch.cat([rows[..., half:]] * 2, dim=-1)[..., None, :]
        rd = 2 * half

        def one(x):
            r = x[..., :rd].float()
            rot = torch.cat([-r[..., half:], r[..., :half]], dim=-1)
            return torch.cat([(r * c + rot * s).to(x.dtype), x[..., rd:]], dim=-1)

        return one(q), one(k)

    return run


def _bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, *, q=None, k=None, cache=None, positions=None, tokens=4):
        return {
            "q": t.randn(tokens, 2, 8, device=d) if q is None else q,
            "k": t.randn(tokens, 1, 8, device=d) if k is None else k,
            "cos_sin_cache": rope_cos_sin_cache(16, 8, device=d) if cache is None else cache,
            "positions": t.arange(tokens, device=d) if positions is None else positions,
            "is_neox": True,
        }

    return (
        BadInput("rotary-dim-odd", lambda t, d: call(t, d, cache=t.ones(16, 7, device=d)), ValueError,
                 "argument 'cos_sin_cache' must have an even rotary_dim"),
        BadInput("rotary-dim-past-head-dim", lambda t, d: call(t, d, cache=rope_cos_sin_cache(16, 10, device=d)),
                 ValueError, "argument 'cos_sin_cache' must have an even rotary_dim (its last dim) from 2 to head_dim (8), got 10"),
        BadInput("cache-fp16", lambda t, d: call(t, d, cache=rope_cos_sin_cache(16, 8, device=d).half()),
                 TypeError, "argument 'cos_sin_cache' must be float32"),
        BadInput("positions-float", lambda t, d: call(t, d, positions=t.zeros(4, device=d)), TypeError,
                 "argument 'positions' must be int32 or int64"),
        BadInput("positions-wrong-shape", lambda t, d: call(t, d, positions=t.arange(3, device=d)), ValueError,
                 "argument 'positions' must have q's token dims"),
        BadInput("k-other-head-dim", lambda t, d: call(t, d, k=t.randn(4, 1, 6, device=d)), ValueError,
                 "argument 'k' must have q's token dims and head_dim"),
        BadInput("q-2d", lambda t, d: call(t, d, q=t.randn(2, 8, device=d), k=t.randn(1, 8, device=d),
                                           positions=t.zeros((), dtype=t.int64, device=d)), ValueError,
                 "argument 'q' must be [..., heads, head_dim]"),
        BadInput("q-int", lambda t, d: call(t, d, q=t.ones(4, 2, 8, dtype=t.int32, device=d)), TypeError,
                 "argument 'q'"),
        BadInput("k-other-dtype", lambda t, d: call(t, d, k=t.randn(4, 1, 8, device=d).half()), TypeError,
                 "argument 'k' must have the dtype of 'q'"),
        BadInput("q-last-dim-strided", lambda t, d: call(t, d, q=t.randn(4, 8, 2, device=d).transpose(1, 2)),
                 ValueError, "argument 'q'", jax=False),
    )


APPLY_ROPE = register(
    OpSpec(
        name="apply_rope",
        family="rope",
        summary="rotary position embedding of q and k heads from a cos/sin cache: NeoX or GPT-J pairs",
        signature=("apply_rope(q[..., Hq, D], k[..., Hk, D], cos_sin_cache[max_pos, R], positions[...], "
                   "is_neox=True) -> (q_out, k_out) (q's dtype; in place: apply_rope_)"),
        shape_names=("T", "Hq", "Hk", "D", "R"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_inputs,
        reference=apply_rope,
        # Against the fp64 result: a few ulps of the output dtype (two products and a sum in
        # fp32, the cache's fp32 rounding of cos and sin on top).
        tolerance={"float32": (2e-6, 2e-6), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)},
        check=_check,
        # 4 multiplies and 2 adds a pair: 3 a rotated value.
        flops=lambda s: 3.0 * s[0] * (s[1] + s[2]) * s[4],
        # read and write q and k; the cache rows (fp32, R a token) and positions (int64).
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * 2.0 * s[0] * (s[1] + s[2]) * s[3] + 4.0 * s[0] * s[4] + 8.0 * s[0],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=((1, 1, 1, 2, 2), (3, 2, 1, 8, 8), (5, 4, 2, 64, 64), (7, 3, 1, 128, 64), (2, 2, 2, 130, 130),
                     (16, 8, 2, 96, 32), (0, 2, 1, 8, 8), (4, 0, 2, 16, 16)),
        bench_shapes=((16384, 32, 8, 128, 128), (4096, 32, 32, 128, 128), (65536, 8, 1, 64, 64)),
        peers=(Peer("torch rotate_half", _torch_apply_rope), reference_peer("apply_rope", compiled=True)),
        example_shape=(5, 4, 2, 64, 64),
        bad_inputs=_bad_inputs(),
        cuda_out=lambda cuda, i, o: cuda.apply_rope_out(i["q"], i["k"], i["cos_sin_cache"], i["positions"],
                                                        o[0], o[1], i["is_neox"]),
        outputs=("q_out", "k_out"),
        in_place={"q_out": "q", "k_out": "k"},
        contiguous_inputs=("cos_sin_cache",),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RopeRow<",),
    )
)
