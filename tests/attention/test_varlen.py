# SPDX-License-Identifier: Apache-2.0
"""flash_attention_varlen_fwd beyond the generic sweep (tests/contract): against the float64
reference (each sequence through gks.reference.flash_attention_fwd), for

- mixed lengths in one batch (0, 1, 63, 64, 65, a few thousand), sequences without queries
  or without keys, queries before the first key (o = 0, lse = -inf);
- causal bottom-right per sequence, sliding windows, the softcap, GQA ratios 1, 4 and 8,
  every head dim (D = 192 with Dv = 128 too);
- seqused_k (a sequence using fewer keys than it holds);
- max_seqlen_q below the longest sequence: still computed whole;
- cu_seqlens that decrease or pass the packed rows: clamped, never out of bounds;
- q, k, v as strided views of a fused [T, 3, H, D] qkv;
- one sequence: the dense op's answer (the CUDA kernel bit for bit);
- a paged KV cache: page sizes 1, 16, 48, 64 and 256, pages in a random order, sequences
  sharing prefix pages, a page index outside the cache (its keys read as zeros);
GPU only: outputs poisoned first, a CUDA graph captured with one set of lengths replayed
with others, and the _out form writing nothing but its sequences' rows.

Without a GPU the Triton port runs in its interpreter and the CUDA cases skip."""

from __future__ import annotations

import pytest
import torch

from conftest import (DEVICE, HAS_GPU, HAS_NATIVE, capture, poison_allocator, public_op, refill, requires_gpu,
                      seed_for)
from gks.specs.attention import check_varlen, cu_seqlens, decode_cache, flash_attention_varlen_fwd as reference

BACKENDS = ("cuda", "triton")
DTYPES = ("float16", "bfloat16")


def _op(backend: str):
    return public_op("flash_attention_varlen_fwd", backend)


def _inputs(seed, dtype, *, lens_q, lens_k=None, heads_q=4, heads_kv=2, head_dim=64, head_dim_v=None,
            causal=True, fused_qkv=False, page=0, **extra):
    """Packed q, k, v of sequences of these lengths (lens_k: lens_q's unless given); page > 0:
    k and v a paged cache of that page size, pages in a random order."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)
    lens_k = lens_q if lens_k is None else lens_k
    total_q, total_k = sum(lens_q), sum(lens_k)

    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dt).to(DEVICE)

    if fused_qkv:  # q, k, v as views of one [T, 3, H, D] tensor (MHA, equal lengths)
        qkv = randn(total_q, 3, heads_q, head_dim)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
    elif page:
        q = randn(total_q, heads_q, head_dim)
        longest = max(max(lens_k, default=0), 1)
        dense_k = randn(len(lens_k), heads_kv, longest, head_dim)
        dense_v = randn(len(lens_k), heads_kv, longest, head_dim_v or head_dim)
        state = gen.get_state()
        k, table = decode_cache(dense_k.cpu(), page, gen)
        gen.set_state(state)
        v, _ = decode_cache(dense_v.cpu(), page, gen)
        k, v, extra["page_table"] = k.to(DEVICE), v.to(DEVICE), table.to(DEVICE)
    else:
        q = randn(total_q, heads_q, head_dim)
        k = randn(total_k, heads_kv, head_dim)
        v = randn(total_k, heads_kv, head_dim_v or head_dim)
    return {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens(lens_q, DEVICE), "cu_seqlens_k": cu_seqlens(lens_k, DEVICE),
            "max_seqlen_q": max(lens_q, default=0), "max_seqlen_k": max(lens_k, default=0), "causal": causal,
            **extra}


def _check(backend, dtype, inputs, what):
    op = _op(backend)
    ref = reference(**inputs, precise=True)
    if backend == "cuda":
        poison_allocator(sum(r.numel() * r.element_size() for r in ref), DEVICE)
    out = op(**inputs)
    check_varlen(out, ref, dtype, inputs, f"{backend} {what}")
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_mixed_lengths(backend, dtype, causal):
    """Lengths 0, 1, 63, 64, 65 and 130 in one batch; keys shorter than queries in some."""
    inputs = _inputs(seed_for("varlen-mixed", backend, dtype, causal), dtype, lens_q=[63, 0, 1, 65, 64, 130],
                     lens_k=[100, 5, 0, 65, 20, 130], causal=causal)
    _check(backend, dtype, inputs, f"mixed lengths, causal={causal}")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(8, 8, 2, 300, 700, 128, 1, 0), (5, 16, 4, 900, 900, 64, 1, 0),
                                   (16, 32, 8, 128, 1000, 128, 1, 0), (4, 32, 8, 512, 2048, 128, 0, 0)])
def test_larger_packed_shapes(backend, shape):
    """The spec's inputs at serving sizes (mixed lengths below 1024 rows, full from 1024)."""
    from gks import registry

    spec = registry.get("flash_attention_varlen_fwd")
    inputs = spec.make_inputs(shape, "bfloat16", DEVICE, seed_for("varlen-larger", backend, shape))
    _check(backend, "bfloat16", inputs, f"shape {shape}")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_few_thousand_rows(backend):
    inputs = _inputs(seed_for("varlen-long", backend), "bfloat16", lens_q=[3000, 1, 517, 2048],
                     lens_k=[3000, 4000, 517, 2048], heads_q=8, heads_kv=1, head_dim=128)
    _check(backend, "bfloat16", inputs, "a few thousand rows")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("group", [1, 4, 8])
def test_gqa(backend, group):
    inputs = _inputs(seed_for("varlen-gqa", backend, group), "float16", lens_q=[17, 40], heads_q=8,
                     heads_kv=8 // group)
    _check(backend, "float16", inputs, f"GQA {group}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim,head_dim_v", [(32, None), (96, None), (128, None), (192, None), (192, 128),
                                                 (256, None)])
def test_head_dims(backend, head_dim, head_dim_v):
    inputs = _inputs(seed_for("varlen-d", backend, head_dim, head_dim_v), "bfloat16", lens_q=[9, 33],
                     lens_k=[20, 33], heads_q=2, heads_kv=1, head_dim=head_dim, head_dim_v=head_dim_v)
    _check(backend, "bfloat16", inputs, f"D = {head_dim}, Dv = {head_dim_v or head_dim}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("window,causal", [((8, 0), True), ((5, 3), False), ((0, 0), False), ((-1, 2), False)])
def test_sliding_windows(backend, window, causal):
    inputs = _inputs(seed_for("varlen-window", backend, window), "float16", lens_q=[40, 3, 70],
                     lens_k=[50, 30, 70], causal=causal, window_size=window)
    _check(backend, "float16", inputs, f"window {window}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_softcap_and_scale(backend):
    inputs = _inputs(seed_for("varlen-cap", backend), "bfloat16", lens_q=[30, 12], softcap=3.0,
                     softmax_scale=0.3)
    _check(backend, "bfloat16", inputs, "softcap 3, scale 0.3")


@pytest.mark.parametrize("backend", BACKENDS)
def test_seqused_k(backend):
    """Each sequence uses the first seqused_k[b] of its keys (0, some, all)."""
    inputs = _inputs(seed_for("varlen-used", backend), "float16", lens_q=[20, 20, 20], lens_k=[50, 50, 50],
                     seqused_k=torch.tensor([0, 17, 50], dtype=torch.int32, device=DEVICE))
    _check(backend, "float16", inputs, "seqused_k")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_seqlen_q", [0, 1, 40])
def test_max_seqlen_q_below_the_longest_still_computes_it(backend, max_seqlen_q):
    """max_seqlen_q only sizes the grid: a sequence longer than it is computed whole."""
    inputs = _inputs(seed_for("varlen-max", backend, max_seqlen_q), "float16", lens_q=[200, 70, 1],
                     lens_k=[200, 90, 5])
    inputs["max_seqlen_q"] = max_seqlen_q
    _check(backend, "float16", inputs, f"max_seqlen_q {max_seqlen_q} of 200")


@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_cu_seqlens_are_clamped(backend):
    """Offsets that decrease, go below 0 or pass the packed rows are clamped into them (the
    reference clamps alike): no read or write outside q, k, v, o and lse. (Query rows of two
    sequences never overlap here: which one's write would stand is not defined.)"""
    inputs = _inputs(seed_for("varlen-clamp", backend), "float16", lens_q=[20, 20, 20], lens_k=[30, 30, 30])
    inputs["cu_seqlens_q"] = torch.tensor([-3, 25, 25, 1000], dtype=torch.int32, device=DEVICE)
    inputs["cu_seqlens_k"] = torch.tensor([-5, 40, 30, 1 << 30], dtype=torch.int32, device=DEVICE)
    _check(backend, "float16", inputs, "clamped cu_seqlens")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fused_qkv_views(backend):
    """q, k, v as strided views of one [T, 3, H, D] tensor, read in place."""
    inputs = _inputs(seed_for("varlen-qkv", backend), "bfloat16", lens_q=[33, 64, 7], heads_q=4, fused_qkv=True)
    assert not inputs["q"].is_contiguous()
    _check(backend, "bfloat16", inputs, "fused qkv views")


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_sequence_is_the_dense_op(backend):
    """One sequence of varlen is flash_attention_fwd on [1, H, S, D]: the CUDA kernel (the
    same mma.sync kernel, forced on the dense op) bit for bit; Triton to the reference."""
    inputs = _inputs(seed_for("varlen-dense", backend), "float16", lens_q=[77], lens_k=[130], heads_q=4,
                     heads_kv=2, window_size=(40, 0))
    o, lse = _check(backend, "float16", inputs, "one sequence")
    if backend != "cuda":
        return
    import gks

    dense = [t.transpose(0, 1).unsqueeze(0) for t in (inputs["q"], inputs["k"], inputs["v"])]
    o_d, lse_d = gks.flash_attention_fwd(*dense, causal=True, window_size=(40, 0), config=0)
    assert torch.equal(o, o_d[0].transpose(0, 1)) and torch.equal(lse, lse_d[0])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("page", [1, 16, 48, 64, 256])
def test_paged_cache_every_page_size(backend, page):
    """Keys in pages of a shared cache, in a random order: lengths 0, 1, page +- 1, a few pages."""
    lens_k = [page - 1, 0, 1, page + 1, 3 * page + 5] if page > 1 else [0, 1, 2, 7, 40]
    inputs = _inputs(seed_for("varlen-paged", backend, page), "float16", lens_q=[5, 3, 1, 20, 33], lens_k=lens_k,
                     page=page)
    _check(backend, "float16", inputs, f"paged, {page} keys a page")


@pytest.mark.parametrize("backend", BACKENDS)
def test_paged_shared_prefix_and_bad_pages(backend):
    """Sequences sharing their first pages (a common prompt); a page index outside the cache
    reads as zeros, never out of bounds; seqused_k over a paged cache."""
    inputs = _inputs(seed_for("varlen-paged-shared", backend), "bfloat16", lens_q=[9, 17, 4], lens_k=[70, 70, 70],
                     page=16, causal=False)
    table = inputs["page_table"]
    table[1:, :2] = table[0, :2]
    table[2, 3] = -7
    table[1, 4] = 1 << 20
    _check(backend, "bfloat16", inputs, "shared prefix pages, bad page indices")
    inputs["seqused_k"] = torch.tensor([70, 33, 0], dtype=torch.int32, device=DEVICE)
    _check(backend, "bfloat16", inputs, "paged with seqused_k")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_replays_with_other_lengths(backend):
    """Captured with one set of lengths, replayed with others of the same totals: right each
    time (the lengths stay on the device; max_seqlen_q only sizes the grid)."""
    op = _op(backend)
    lens = [[300, 0, 212, 512], [1, 1, 1, 1021], [256, 256, 256, 256], [0, 0, 0, 1024]]
    inputs = _inputs(seed_for("varlen-graph", backend), "float16", lens_q=lens[0], heads_q=8, heads_kv=2)
    graph, captured, _ = capture(op, inputs)
    for lengths in lens:
        refill(inputs, _inputs(seed_for("varlen-graph-replay", backend, lengths), "float16", lens_q=lengths,
                               heads_q=8, heads_kv=2))
        graph.replay()
        torch.cuda.synchronize()
        check_varlen(captured, reference(**inputs, precise=True), "float16", inputs,
                     f"{backend} replay with lengths {lengths}")


@requires_gpu
def test_the_out_entry_point_writes_only_its_sequences_rows():
    """gks.cuda's _out form into NaN-filled buffers: the rows of the sequences are written,
    rows in no sequence (past cu_seqlens_q[-1]) and guard elements stay NaN."""
    if not HAS_NATIVE:
        pytest.skip("the gks CUDA library is not built")
    import gks.cuda

    inputs = _inputs(seed_for("varlen-out"), "bfloat16", lens_q=[40, 0, 9, 11], lens_k=[40, 3, 9, 50])
    inputs["cu_seqlens_q"][-1] = 50  # rows 50 .. 59 belong to no sequence
    ref = reference(**inputs, precise=True)
    n_o, n_l = ref[0].numel(), ref[1].numel()
    o_buf = torch.full((n_o + 64,), float("nan"), dtype=torch.bfloat16, device=DEVICE)
    l_buf = torch.full((n_l + 64,), float("nan"), dtype=torch.float32, device=DEVICE)
    o, lse = o_buf[:n_o].view(ref[0].shape), l_buf[:n_l].view(ref[1].shape)
    gks.cuda.flash_attention_varlen_fwd_out(inputs["q"], inputs["k"], inputs["v"], inputs["cu_seqlens_q"],
                                            inputs["cu_seqlens_k"], 40, 50, o, lse, causal=True)
    torch.cuda.synchronize()
    check_varlen((o, lse), ref, "bfloat16", inputs, "_out")
    assert o[50:].isnan().all() and lse[:, 50:].isnan().all(), "rows in no sequence were written"
    assert o_buf[n_o:].isnan().all() and l_buf[n_l:].isnan().all()


def test_the_reference_clamps_as_documented():
    """varlen_bounds: the kernels' reading of cu_seqlens and seqused_k."""
    from gks.specs.attention import varlen_bounds

    cu_q = torch.tensor([-3, 25, 10, 1000], dtype=torch.int32)
    cu_k = torch.tensor([-5, 40, 30, 1 << 30], dtype=torch.int32)
    used = torch.tensor([100, 3, 1], dtype=torch.int32)
    assert varlen_bounds(cu_q, cu_k, used, 60, 90) == [(0, 25, 0, 40), (25, 25, 40, 40), (10, 60, 30, 31)]
    assert varlen_bounds(cu_q, cu_k, None, 60, 90) == [(0, 25, 0, 40), (25, 25, 40, 40), (10, 60, 30, 90)]


@pytest.mark.skipif(HAS_GPU, reason="the interpreter's case; on a GPU the CUDA tests run")
def test_triton_runs_here_in_its_interpreter():
    """A guard that the CPU sweep above really ran Triton (the CUDA cases skip here)."""
    from gks.triton import flash_attention_varlen_fwd

    inputs = _inputs(1, "float16", lens_q=[3, 4])
    o, lse = flash_attention_varlen_fwd(**inputs)
    assert o.shape == (7, 4, 64) and lse.shape == (4, 7)
