# SPDX-License-Identifier: Apache-2.0
"""merge_state / merge_states beyond the generic sweep (tests/contract): merging the parts of
a real attention split over its keys gives the whole attention (o and lse, against float64),
the in-place form, strided views (FlashInfer's [T, K, H, D] layout read through a transpose),
the pairwise and the stacked op agreeing, K = 0 and K = 1, and the special scores: -inf
states skipped even when their v holds NaN, a NaN or +inf score giving a NaN row."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, HAS_GPU, seed_for
import gks
from gks import registry
from gks.specs.attention import flash_attention_fwd as attention_reference

MERGE = registry.get("merge_state")
MERGES = registry.get("merge_states")
DTYPES = ["float32", "float16", "bfloat16"]


def _backends():
    import gks.triton

    out = [("triton", gks.triton.merge_state, gks.triton.merge_states)]
    if HAS_GPU and gks._native.available():
        out.insert(0, ("cuda", gks.merge_state, gks.merge_states))
    return out


BACKENDS = _backends()
IDS = [b[0] for b in BACKENDS]


def _close(out, ref, dtype, what):
    atol, rtol = MERGE.tolerance[dtype]
    torch.testing.assert_close(out[0].double(), ref[0].double().to(out[0].device), atol=atol, rtol=rtol,
                               equal_nan=True, msg=lambda m: f"{what} v: {m}")
    torch.testing.assert_close(out[1].double(), ref[1].double().to(out[1].device), atol=2e-5, rtol=2e-5,
                               equal_nan=True, msg=lambda m: f"{what} s: {m}")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("splits", [(37,), (1, 60), (20, 0, 45)], ids=["1", "2", "3"])
def test_parts_of_attention_merge_to_the_whole(backend, dtype, splits):
    """Attention over keys [0, 65) split into parts (an empty part among them) and merged
    gives attention over all the keys: o and lse against float64."""
    name, merge_state, merge_states = backend
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("merge-whole", name, dtype, splits))
    dt = getattr(torch, dtype)
    b, h, sq, d = 2, 3, 5, 64
    sk = sum(splits) if len(splits) > 1 else 65
    bounds = [0]
    for n in (splits if len(splits) > 1 else (37, sk - 37)):
        bounds.append(bounds[-1] + n)
    q = torch.randn(b, h, sq, d, generator=gen, device=DEVICE).to(dt)
    k = torch.randn(b, h, bounds[-1], d, generator=gen, device=DEVICE).to(dt)
    v = torch.randn(b, h, bounds[-1], d, generator=gen, device=DEVICE).to(dt)
    scale = 1 / math.sqrt(d)
    parts = [attention_reference(q, k[:, :, lo:hi], v[:, :, lo:hi], False, scale, precise=True)
             for lo, hi in zip(bounds, bounds[1:])]
    whole = attention_reference(q, k, v, False, scale, precise=True)
    vs = torch.stack([p[0].to(dt) for p in parts], -2)  # [B, H, Sq, K, D]
    ss = torch.stack([p[1].float() for p in parts], -1)
    _close(merge_states(vs, ss), whole, dtype, f"{name} merge_states")
    if len(parts) == 2:
        _close(merge_state(vs[..., 0, :], ss[..., 0], vs[..., 1, :], ss[..., 1]), whole, dtype,
               f"{name} merge_state")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_pairwise_and_stacked_agree(backend, dtype):
    name, merge_state, merge_states = backend
    inputs = MERGE.make_inputs((9, 4, 128), dtype, DEVICE, seed_for("merge-agree", name, dtype))
    pair = merge_state(**inputs)
    stacked = merge_states(torch.stack([inputs["v_a"], inputs["v_b"]], -2),
                           torch.stack([inputs["s_a"], inputs["s_b"]], -1))
    assert torch.equal(pair[1], stacked[1]) or torch.allclose(pair[1], stacked[1], atol=1e-6, rtol=1e-6,
                                                                  equal_nan=True)
    _close(pair, MERGE.reference(**inputs, precise=True), dtype, name)


@pytest.mark.skipif(not (HAS_GPU and gks._native.available()), reason="the in-place op is the CUDA backend's")
@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place(dtype):
    inputs = MERGE.make_inputs((33, 2, 96), dtype, DEVICE, seed_for("merge-in-place", dtype))
    ref = MERGE.reference(**inputs, precise=True)
    v_a, s_a = inputs["v_a"], inputs["s_a"]
    assert gks.merge_state_(v_a, s_a, inputs["v_b"], inputs["s_b"]) is None
    _close((v_a, s_a), ref, dtype, "merge_state_")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_views(backend, dtype):
    """FlashInfer's [T, K, H, D] states read as [T, H, K, D] through a transpose; pairwise
    states that are every other row of bigger tensors."""
    name, merge_state, merge_states = backend
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("merge-strided", name, dtype))
    dt = getattr(torch, dtype)
    v = torch.randn(6, 5, 3, 64, generator=gen, device=DEVICE).to(dt)  # [T, K, H, D]
    s = 3 * torch.randn(6, 5, 3, generator=gen, device=DEVICE)
    out = merge_states(v.transpose(1, 2), s.transpose(1, 2))
    _close(out, MERGES.reference(v.transpose(1, 2), s.transpose(1, 2), precise=True), dtype, f"{name} stacked")
    big_v = torch.randn(2, 10, 4, 72, generator=gen, device=DEVICE).to(dt)
    big_s = 3 * torch.randn(2, 10, 4, generator=gen, device=DEVICE)
    args = (big_v[0, ::2, :, :64], big_s[0, ::2], big_v[1, 1::2, :, 8:], big_s[1, 1::2])
    _close(merge_state(*args), MERGE.reference(*args, precise=True), dtype, f"{name} pairwise")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_special_scores(backend):
    """Row 0: a is -inf (its v NaN): b alone. Row 1: both -inf: v = 0, s = -inf. Row 2: a
    NaN score: NaN row. Row 3: a +inf score: NaN row. Row 4: a is far below b (its weight
    underflows to 0 in fp32): b, its v not read."""
    name, merge_state, _ = backend
    d = 16
    v_a = torch.randn(5, d, device=DEVICE)
    v_b = torch.randn(5, d, device=DEVICE)
    s_a = torch.tensor([-math.inf, -math.inf, math.nan, math.inf, -200.0], device=DEVICE)
    s_b = torch.tensor([1.5, -math.inf, 0.0, 0.0, 0.0], device=DEVICE)
    v_a[0] = math.nan
    v_a[4] = math.inf
    v, s = merge_state(v_a, s_a, v_b, s_b)
    torch.testing.assert_close(v[0], v_b[0])
    assert s[0].item() == pytest.approx(1.5)
    assert torch.equal(v[1], torch.zeros(d, device=DEVICE)) and s[1].item() == -math.inf
    assert torch.isnan(v[2]).all() and math.isnan(s[2].item())
    assert torch.isnan(v[3]).all() and math.isnan(s[3].item())
    torch.testing.assert_close(v[4], v_b[4])
    assert s[4].item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_no_states_and_one_state(backend):
    name, _, merge_states = backend
    v = torch.randn(3, 2, 0, 32, device=DEVICE)
    out_v, out_s = merge_states(v, torch.empty(3, 2, 0, device=DEVICE))
    assert torch.equal(out_v, torch.zeros(3, 2, 32, device=DEVICE))
    assert (out_s == -math.inf).all()
    v1 = torch.randn(4, 1, 40, device=DEVICE).half()
    s1 = torch.randn(4, 1, device=DEVICE)
    out_v, out_s = merge_states(v1, s1)
    assert torch.equal(out_v, v1[:, 0]) and torch.allclose(out_s, s1[:, 0])
