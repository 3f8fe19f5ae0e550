# SPDX-License-Identifier: Apache-2.0
"""flash_attention_decode beyond the generic sweep (tests/contract): against the float64
reference (each sequence's keys gathered and run through gks.reference.flash_attention_fwd),
on dense and paged caches, for

- mixed lengths in one batch (0, 1, page_size +- 1, a few thousand), lengths past the
  capacity (clamped) and below 0 (empty);
- pages in a random order, sequences sharing prefix pages, a page index outside the cache
  (its keys read as zeros);
- Sq from 1 to 16 with the causal diagonal aligned bottom-right per sequence, and queries
  before the first key (o = 0, lse = -inf); GQA ratios 1, 4 and 8;
- page sizes 1, 16, 64 and 256 (and 48, not a power of two);
- num_splits forced to 1, 3 and 16, and chosen (0): the same answer;
- windows, the softcap and a strided [B, S, H, D] cache;
- the split-count rule itself (gks.specs.attention.decode_num_splits);
GPU only: outputs poisoned first, and a CUDA graph captured with one set of lengths
replayed with others (the split count and the partials depend on shapes alone).

Without a GPU the Triton port runs in its interpreter and the CUDA cases skip (the C++
planner's host tests are in tests/cpp/test_attention.cpp)."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, HAS_NATIVE, capture, poison_allocator, public_op, refill, requires_gpu, seed_for
from gks.specs.attention import (
    check_decode,
    decode_cache,
    decode_num_splits,
    flash_attention_decode as reference,
)

BACKENDS = ("cuda", "triton")
DTYPES = ("float16", "bfloat16")


def _op(backend: str):
    return public_op("flash_attention_decode", backend)


def _inputs(seed, dtype, *, batch_lengths, heads_q=4, heads_kv=2, seqlen_q=1, head_dim=64, capacity=None,
            page=0, bshd=False, shared_prefix_pages=0, **extra):
    """q, caches and lengths: `batch_lengths` the sequences' lengths (capacity: the longest,
    unless given). page > 0: a paged cache of that page size, pages in a random order;
    shared_prefix_pages: every sequence's first pages are sequence 0's (a shared prompt)."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)
    batch = len(batch_lengths)
    capacity = capacity if capacity is not None else max(max(batch_lengths), 1)

    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dt).to(DEVICE)

    q = randn(batch, heads_q, seqlen_q, head_dim)
    if bshd:
        k = randn(batch, capacity, heads_kv, head_dim).transpose(1, 2)
        v = randn(batch, capacity, heads_kv, head_dim).transpose(1, 2)
    else:
        k = randn(batch, heads_kv, capacity, head_dim)
        v = randn(batch, heads_kv, capacity, head_dim)
    lengths = torch.tensor(batch_lengths, dtype=torch.int32, device=DEVICE)
    args = {"q": q, "k_cache": k, "v_cache": v, "cache_seqlens": lengths, **extra}
    if page:
        state = gen.get_state()
        k_pages, table = decode_cache(k, page, gen)
        gen.set_state(state)
        v_pages, _ = decode_cache(v, page, gen)
        if shared_prefix_pages:
            table[1:, :shared_prefix_pages] = table[0, :shared_prefix_pages]
        args.update(k_cache=k_pages, v_cache=v_pages, page_table=table)
    return args


def _check(backend, dtype, inputs, what, **call):
    op = _op(backend)
    ref = reference(**inputs, precise=True)
    if backend == "cuda":
        poison_allocator(sum(r.numel() * r.element_size() for r in ref), DEVICE)
    out = op(**inputs, **call)
    check_decode(out, ref, dtype, inputs, f"{backend} {what}")
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("page", [0, 1, 16, 64, 256, 48])
def test_mixed_lengths_every_page_size(backend, dtype, page):
    """One batch of lengths 0, 1, page +- 1 and a longer one, in a cache of spare capacity."""
    p = page or 16
    lengths = [0, 1, max(p - 1, 0), p + 1, 3 * p + 5]
    inputs = _inputs(seed_for("decode-mixed", backend, dtype, page), dtype, batch_lengths=lengths,
                     capacity=3 * p + 9, page=page)
    _check(backend, dtype, inputs, f"page {page} lengths {lengths}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("num_splits", [0, 1, 3, 16])
@pytest.mark.parametrize("page", [0, 64])
def test_a_few_thousand_keys_every_split_count(backend, num_splits, page):
    """The same long sequences under every split count (the last splits of the short one
    empty), each against float64."""
    inputs = _inputs(seed_for("decode-long", backend, num_splits, page), "float16", batch_lengths=[2500, 700],
                     heads_q=2, heads_kv=1, page=page)
    _check(backend, "float16", inputs, f"{num_splits} splits", num_splits=num_splits)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("seqlen_q", [1, 2, 5, 16])
@pytest.mark.parametrize("group", [1, 4, 8])
def test_queries_and_gqa(backend, seqlen_q, group):
    """Sq rows per sequence on the causal diagonal aligned to each sequence's end, G query
    heads a KV head packed into a CTA; a sequence shorter than Sq has queries before its
    first key (o = 0, lse = -inf)."""
    lengths = [3, 90, 130]
    inputs = _inputs(seed_for("decode-q", backend, seqlen_q, group), "bfloat16", batch_lengths=lengths,
                     heads_q=2 * group, heads_kv=2, seqlen_q=seqlen_q, page=16)
    out = _check(backend, "bfloat16", inputs, f"Sq {seqlen_q} G {group}", num_splits=3)
    if seqlen_q > 3:  # sequence 0's first Sq - 3 queries precede its keys
        lse = out[1][0, :, : seqlen_q - 3]
        assert torch.isneginf(lse).all() and (out[0][0, :, : seqlen_q - 3] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_not_causal_sees_every_key(backend):
    inputs = _inputs(seed_for("decode-noncausal", backend), "float16", batch_lengths=[5, 77],
                     seqlen_q=4, page=16, causal=False)
    _check(backend, "float16", inputs, "causal=False", num_splits=2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("window", [(10, 0), (0, 0), (40, -1)])
def test_sliding_windows(backend, window):
    inputs = _inputs(seed_for("decode-window", backend, window), "float16", batch_lengths=[200, 31, 0],
                     seqlen_q=3, heads_q=8, heads_kv=2, page=16, causal=False, window_size=window)
    _check(backend, "float16", inputs, f"window {window}", num_splits=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softcap_and_scale(backend):
    inputs = _inputs(seed_for("decode-cap", backend), "bfloat16", batch_lengths=[150, 64], softcap=5.0,
                     softmax_scale=0.3)
    _check(backend, "bfloat16", inputs, "softcap 5, scale 0.3", num_splits=3)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_head_dims_and_a_bshd_cache(backend, head_dim):
    """Every head dim, on a [B, S, H, D] cache read through .transpose(1, 2)."""
    inputs = _inputs(seed_for("decode-bshd", backend, head_dim), "float16", batch_lengths=[70, 129],
                     head_dim=head_dim, seqlen_q=2, bshd=True)
    _check(backend, "float16", inputs, f"D {head_dim} bshd", num_splits=2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_shared_prefix_pages(backend):
    """Three sequences whose first two pages are the same pages (a shared prompt)."""
    inputs = _inputs(seed_for("decode-prefix", backend), "float16", batch_lengths=[70, 100, 40], page=16,
                     shared_prefix_pages=2)
    assert (inputs["page_table"][:, :2] == inputs["page_table"][0, :2]).all()
    _check(backend, "float16", inputs, "shared prefix pages", num_splits=3)


@pytest.mark.parametrize("backend", BACKENDS)
def test_lengths_are_clamped_and_bad_pages_read_as_zeros(backend):
    """A length past the capacity reads the whole cache, a negative one none; a page index
    outside [0, num_pages) reads as zero keys and values (never out of bounds)."""
    inputs = _inputs(seed_for("decode-clamp", backend), "float16", batch_lengths=[10_000, -5, 40], capacity=64,
                     page=16)
    inputs["page_table"][2, 1] = inputs["k_cache"].shape[0] + 7
    inputs["page_table"][2, 2] = -1
    out = _check(backend, "float16", inputs, "clamped lengths, bad pages", num_splits=2)
    assert torch.isneginf(out[1][1]).all() and (out[0][1] == 0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_split_count_does_not_change_the_answer(backend):
    """Every split count gives the float64 answer; the splits agree with each other closely
    (they differ only in fp32 summation order)."""
    inputs = _inputs(seed_for("decode-splits", backend), "float16", batch_lengths=[1000, 333, 0, 64], page=64)
    op = _op(backend)
    outs = [op(**inputs, num_splits=n) for n in (1, 2, 7, 16)]
    ref = reference(**inputs, precise=True)
    for n, out in zip((1, 2, 7, 16), outs):
        check_decode(out, ref, "float16", inputs, f"{backend} {n} splits")
        torch.testing.assert_close(out[1], outs[0][1], atol=1e-4, rtol=1e-5, equal_nan=True)


def test_the_split_rule():
    """Shapes alone: no split once the CTAs fill the SMs; otherwise about two CTAs an SM,
    each split at least two tiles, the tiles dealt out so that no split of a full sequence
    is empty; at most 256."""
    assert decode_num_splits(64, 8, 1, 8192, 64, 132) == 1            # 512 CTAs
    assert decode_num_splits(1, 8, 1, 64, 64, 132) == 1              # one tile
    assert decode_num_splits(1, 8, 1, 131072, 64, 132) == 33          # 8 CTAs: 264 / 8
    assert decode_num_splits(1, 1, 1, 10**7, 64, 132) == 256          # capped
    for batch, heads, capacity, sms in [(1, 8, 1024, 132), (1, 8, 131072, 132), (8, 8, 4096, 132), (2, 1, 777, 108),
                                        (3, 2, 130, 132), (1, 1, 10**6, 132)]:
        splits = decode_num_splits(batch, heads, 1, capacity, 64, sms)
        tiles = math.ceil(capacity / 64)
        assert 1 <= splits <= 256 and splits <= max(1, tiles // 2)
        per = math.ceil(tiles / splits)
        assert (splits - 1) * per < tiles, (batch, heads, capacity, splits)  # the last split has a tile


def _graph_inputs(seed, page):
    return _inputs(seed, "float16", batch_lengths=[900, 17, 0, 300], heads_q=8, heads_kv=2, seqlen_q=2,
                   capacity=1024, page=page)


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("page", [0, 16])
def test_cuda_graph_replays_with_other_lengths(backend, page):
    """Captured with one set of lengths, replayed with others of the same capacity (and a
    new page order): right each time. The split count and partials come from shapes only."""
    op = _op(backend)
    inputs = _graph_inputs(seed_for("decode-graph", backend, page), page)
    graph, captured, _ = capture(op, inputs)
    graph.replay()
    torch.cuda.synchronize()
    check_decode(captured, reference(**inputs, precise=True), "float16", inputs, f"{backend} captured")
    for lengths in ([1, 1024, 513, 0], [0, 0, 0, 0], [1024, 1024, 1024, 1024], [64, 65, 63, 1]):
        fresh = _graph_inputs(seed_for("decode-graph-replay", backend, page, lengths), page)
        fresh["cache_seqlens"] = torch.tensor(lengths, dtype=torch.int32, device=DEVICE)
        refill(inputs, fresh)
        graph.replay()
        torch.cuda.synchronize()
        check_decode(captured, reference(**inputs, precise=True), "float16", inputs,
                     f"{backend} replay with lengths {lengths}")


@requires_gpu
@pytest.mark.parametrize("num_splits", [1, 5])
def test_the_out_entry_point_writes_only_its_outputs(num_splits):
    """gks.cuda's _out form into NaN-filled buffers with guard elements after each output."""
    if not HAS_NATIVE:
        pytest.skip("the gks CUDA library is not built")
    import gks.cuda

    inputs = _inputs(seed_for("decode-out", num_splits), "bfloat16", batch_lengths=[300, 0, 5], seqlen_q=3,
                     page=16)
    ref = reference(**inputs, precise=True)
    o_buf = torch.full((ref[0].numel() + 64,), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    l_buf = torch.full((ref[1].numel() + 64,), float("nan"), dtype=torch.float32, device=DEVICE)
    o, lse = o_buf[: ref[0].numel()].view(ref[0].shape), l_buf[: ref[1].numel()].view(ref[1].shape)
    gks.cuda.flash_attention_decode_out(inputs["q"], inputs["k_cache"], inputs["v_cache"], inputs["cache_seqlens"],
                                        o, lse, inputs["page_table"], num_splits=num_splits)
    torch.cuda.synchronize()
    check_decode((o, lse), ref, "bfloat16", inputs, f"_out, {num_splits} splits")
    assert o_buf[ref[0].numel():].isnan().all() and l_buf[ref[1].numel():].isnan().all()
