# SPDX-License-Identifier: Apache-2.0
"""apply_rope beyond the generic sweep (tests/contract): both pair styles on every backend
against float64 (70 heads: Triton's blocks of heads), the in-place form on the q and k views of a fused qkv tensor, [B, S, H, D]
tensors with [B, S] positions, partial rotary dims passing the rest through bit for bit,
int32 positions, and positions outside the cache giving NaN for their token alone."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, seed_for
import gks
from gks import registry
from gks.specs.rope import rope_cos_sin_cache

SPEC = registry.get("apply_rope")
DTYPES = ["float32", "float16", "bfloat16"]


def _backends():
    import gks.triton

    out = [("triton", gks.triton.apply_rope, gks.triton.apply_rope_)]
    if HAS_GPU and gks._native.available():
        out.insert(0, ("cuda", gks.apply_rope, gks.apply_rope_))
    return out


BACKENDS = _backends()
IDS = [b[0] for b in BACKENDS]


def _qk(shape_q, heads_k, dtype, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    dt = getattr(torch, dtype)
    q = torch.randn(shape_q, generator=gen, device=DEVICE).to(dt)
    k = torch.randn((*shape_q[:-2], heads_k, shape_q[-1]), generator=gen, device=DEVICE).to(dt)
    return q, k


def _check(out, inputs, dtype, what):
    ref = SPEC.reference(**inputs, precise=True)
    for name, o, r in zip(("q", "k"), out, ref):
        torch.testing.assert_close(o.double(), r.to(o.device), atol=SPEC.tolerance[dtype][0],
                                   rtol=SPEC.tolerance[dtype][1], equal_nan=True, msg=lambda m: f"{what} {name}: {m}")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 2, 1, 8, 8), (7, 3, 1, 128, 64), (5, 4, 2, 64, 64), (2, 2, 2, 130, 130),
                                   (9, 5, 3, 96, 32), (4, 2, 2, 12, 6), (3, 70, 3, 256, 200)],
                         ids=lambda s: "x".join(map(str, s)))
def test_both_styles_match_float64(backend, is_neox, dtype, shape):
    name, fn, _ = backend
    inputs = SPEC.make_inputs(shape, dtype, DEVICE, seed_for("rope", name, dtype, shape))
    inputs["is_neox"] = is_neox
    _check(fn(**inputs), inputs, dtype, f"{name} {shape}")


def test_the_styles_pair_different_values():
    inputs = SPEC.make_inputs((3, 2, 1, 8, 8), "float32", DEVICE, 1)
    neox = SPEC.reference(**inputs)
    gptj = SPEC.reference(**{**inputs, "is_neox": False})
    assert not torch.allclose(neox[0], gptj[0])


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("rotary_dim", [128, 64])
def test_in_place_on_views_of_a_fused_qkv(backend, dtype, rotary_dim):
    name, fn, fn_ = backend
    tokens, hq, hk, d = 11, 4, 2, 128
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("qkv", name, dtype, rotary_dim))
    qkv = torch.randn((tokens, (hq + 2 * hk) * d), generator=gen, device=DEVICE).to(getattr(torch, dtype))
    q = qkv[:, : hq * d].view(tokens, hq, d)
    k = qkv[:, hq * d : (hq + hk) * d].view(tokens, hk, d)
    v_before = qkv[:, (hq + hk) * d :].clone()
    cache = rope_cos_sin_cache(256, rotary_dim, device=DEVICE)
    positions = torch.randint(0, 256, (tokens,), generator=gen, device=DEVICE)
    want = fn(q, k, cache, positions)
    q_before = q.clone()
    assert fn_(q, k, cache, positions) is None
    assert torch.equal(q, want[0]) and torch.equal(k, want[1]), f"{name}: in place differs from out of place"
    assert torch.equal(qkv[:, (hq + hk) * d :], v_before), f"{name}: v was written"
    assert torch.equal(q[..., rotary_dim:], q_before[..., rotary_dim:]), f"{name}: pass-through values changed"


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_bshd_with_bs_positions_and_int32(backend, is_neox):
    name, fn, _ = backend
    q, k = _qk((2, 5, 4, 64), 2, "bfloat16", seed_for("bshd", name, is_neox))
    q = q.transpose(1, 2).contiguous().transpose(1, 2)  # [B, S, H, D] strides of a [B, H, S, D] buffer
    cache = rope_cos_sin_cache(64, 32, device=DEVICE)
    positions = torch.arange(10, device=DEVICE, dtype=torch.int32).view(2, 5) * 3
    inputs = {"q": q, "k": k, "cos_sin_cache": cache, "positions": positions, "is_neox": is_neox}
    out = fn(**inputs)
    _check(out, inputs, "bfloat16", f"{name} bshd")
    assert torch.equal(out[0][..., 32:], q[..., 32:]), f"{name}: pass-through values changed"


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_positions_outside_the_cache_give_nan_for_their_token(backend):
    name, fn, _ = backend
    q, k = _qk((4, 2, 16), 1, "float32", seed_for("oob", name))
    cache = rope_cos_sin_cache(8, 8, device=DEVICE)
    positions = torch.tensor([0, 8, -1, 7], device=DEVICE)
    q_out, k_out = fn(q, k, cache, positions)
    for o, x in ((q_out, q), (k_out, k)):
        assert o[[1, 2], :, :8].isnan().all(), f"{name}: out-of-range tokens not NaN"
        assert not o[[0, 3]].isnan().any(), f"{name}: in-range tokens touched"
        assert torch.equal(o[..., 8:], x[..., 8:]), f"{name}: pass-through values changed"


def test_position_zero_is_the_identity():
    q, k = _qk((3, 2, 8), 1, "float32", 5)
    cache = rope_cos_sin_cache(4, 8, device=DEVICE)
    out = SPEC.reference(q, k, cache, torch.zeros(3, dtype=torch.int64, device=DEVICE))
    assert torch.equal(out[0], q) and torch.equal(out[1], k)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_an_empty_cache_gives_nan_and_reads_nothing(backend):
    name, fn, _ = backend
    q, k = _qk((2, 2, 8), 1, "float32", seed_for("empty-cache", name))
    cache = torch.empty((0, 8), dtype=torch.float32, device=DEVICE)
    q_out, k_out = fn(q, k, cache, torch.tensor([0, 1], device=DEVICE))
    assert q_out.isnan().all() and k_out.isnan().all(), f"{name}: rotated values not NaN"
