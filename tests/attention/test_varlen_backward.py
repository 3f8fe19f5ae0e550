# SPDX-License-Identifier: Apache-2.0
"""flash_attention_varlen_bwd beyond the generic sweep (tests/contract): against the float64
reference (each sequence through gks.reference.flash_attention_bwd), for

- mixed lengths in one batch (0, 1, 63, 64, 65, 130), sequences without queries (dk = dv =
  0) or without keys (dq = 0), rows that see no key;
- causal bottom-right per sequence, sliding windows, the softcap, GQA, every head dim;
- max_seqlen below the longest sequence: still computed whole;
- one sequence: the dense backward's answer (the CUDA kernels bit for bit);
- rows in no sequence: 0 from the op, untouched by the _out form;
GPU only: outputs poisoned first, autograd through gks.flash_attention_varlen_fwd (and its
refusal over a paged cache), and a CUDA graph replayed with other lengths.

Without a GPU the Triton port runs in its interpreter and the CUDA cases skip."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, capture, poison_allocator, public_op, refill, requires_gpu, seed_for
from gks.specs.attention import (check_varlen_bwd, cu_seqlens, flash_attention_varlen_bwd as reference,
                                 flash_attention_varlen_fwd as forward_reference)

BACKENDS = ("cuda", "triton")


def _op(backend: str):
    return public_op("flash_attention_varlen_bwd", backend)


def _inputs(seed, dtype, *, lens_q, lens_k=None, heads_q=4, heads_kv=2, head_dim=64, head_dim_v=None,
            causal=True, window_size=(-1, -1), softcap=0.0):
    """Packed q, k, v, dO of sequences of these lengths (lens_k: lens_q's unless given), the
    forward's o and lse (the fp32 reference), and the options."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = getattr(torch, dtype)
    lens_k = lens_q if lens_k is None else lens_k

    def randn(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float32).to(dt).to(DEVICE)

    q = randn(sum(lens_q), heads_q, head_dim)
    k = randn(sum(lens_k), heads_kv, head_dim)
    v = randn(sum(lens_k), heads_kv, head_dim_v or head_dim)
    do = randn(sum(lens_q), heads_q, head_dim_v or head_dim)
    inputs = {"q": q, "k": k, "v": v, "cu_seqlens_q": cu_seqlens(lens_q, DEVICE),
              "cu_seqlens_k": cu_seqlens(lens_k, DEVICE), "max_seqlen_q": max(lens_q, default=0),
              "max_seqlen_k": max(lens_k, default=0), "causal": causal, "window_size": window_size,
              "softcap": softcap}
    o, lse = forward_reference(**inputs)
    return {"do": do, **inputs, "o": o, "lse": lse}


def _check(backend, dtype, inputs, what):
    ref = reference(**inputs, precise=True)
    if backend == "cuda":
        poison_allocator(sum(r.numel() * 2 for r in ref), DEVICE)
    out = _op(backend)(**inputs)
    check_varlen_bwd(out, ref, dtype, inputs, f"{backend} {what}")
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("causal", [False, True])
def test_mixed_lengths(backend, dtype, causal):
    """Lengths 0, 1, 63, 64, 65 and 130; keys shorter than queries in some, none in one."""
    inputs = _inputs(seed_for("varlen-bwd-mixed", backend, dtype, causal), dtype, lens_q=[63, 0, 1, 65, 64, 130],
                     lens_k=[100, 5, 0, 65, 20, 130], causal=causal)
    _check(backend, dtype, inputs, f"mixed lengths, causal={causal}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim,head_dim_v,group", [(32, None, 1), (96, None, 4), (128, None, 2), (192, 128, 2),
                                                        (256, None, 1)])
def test_head_dims_and_groups(backend, head_dim, head_dim_v, group):
    inputs = _inputs(seed_for("varlen-bwd-dims", backend, head_dim, head_dim_v), "bfloat16", lens_q=[40, 17, 70],
                     lens_k=[55, 30, 70], heads_q=4, heads_kv=4 // group, head_dim=head_dim, head_dim_v=head_dim_v)
    _check(backend, "bfloat16", inputs, f"D = {head_dim}, Dv = {head_dim_v}, group {group}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("window,causal,softcap", [((8, 0), True, 0.0), ((5, 3), False, 0.0), ((-1, -1), False, 5.0)])
def test_windows_and_softcap(backend, window, causal, softcap):
    inputs = _inputs(seed_for("varlen-bwd-window", backend, window, softcap), "float16", lens_q=[33, 70, 1],
                     lens_k=[50, 70, 9], causal=causal, window_size=window, softcap=softcap)
    _check(backend, "float16", inputs, f"window {window}, softcap {softcap}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("max_seqlen", [0, 1, 30])
def test_max_seqlen_below_the_longest_still_computes_it(backend, max_seqlen):
    inputs = _inputs(seed_for("varlen-bwd-max", backend, max_seqlen), "float16", lens_q=[90, 20], lens_k=[130, 45])
    _check(backend, "float16", {**inputs, "max_seqlen_q": max_seqlen, "max_seqlen_k": max_seqlen},
           f"max_seqlen {max_seqlen}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_in_no_sequence(backend):
    """cu_seqlens starting past row 0 and ending before the totals: the op's gradients are 0
    on those rows (checked by check_varlen_bwd); the CUDA _out form leaves them as they were."""
    inputs = _inputs(seed_for("varlen-bwd-gaps", backend), "float16", lens_q=[5, 40, 7], lens_k=[9, 50, 3])
    inputs["cu_seqlens_q"] = torch.tensor([5, 45, 47], dtype=torch.int32, device=DEVICE)  # rows 0-4, 47-51 outside
    inputs["cu_seqlens_k"] = torch.tensor([9, 59, 60], dtype=torch.int32, device=DEVICE)
    inputs["o"], inputs["lse"] = forward_reference(**{n: inputs[n] for n in (
        "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k", "causal")})
    _check(backend, "float16", inputs, "rows in no sequence")
    if backend != "cuda":
        return
    from gks import cuda

    grads = [torch.full_like(inputs[n], 7.0) for n in ("q", "k", "v")]
    args = [inputs[n] for n in ("do", "q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q",
                                "max_seqlen_k", "o", "lse")]
    cuda.flash_attention_varlen_bwd_out(*args, *grads, causal=True)
    for g, outside in zip(grads, (list(range(5)) + list(range(47, 52)), list(range(9)) + list(range(60, 62)),
                                  list(range(9)) + list(range(60, 62)))):
        assert (g[outside] == 7.0).all()


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_sequence_is_the_dense_op(backend):
    """One sequence of varlen is flash_attention_bwd on [1, H, S, D]: the CUDA kernels (the
    same mma.sync kernels, forced on the dense op) bit for bit; Triton to the reference."""
    inputs = _inputs(seed_for("varlen-bwd-dense", backend), "float16", lens_q=[77], lens_k=[130],
                     window_size=(40, 0))
    out = _check(backend, "float16", inputs, "one sequence")
    if backend != "cuda":
        return
    import gks

    dense = [t.transpose(0, 1).unsqueeze(0) for t in (inputs["do"], inputs["q"], inputs["k"], inputs["v"],
                                                       inputs["o"])]
    grads = gks.flash_attention_bwd(*dense, inputs["lse"][None], causal=True, window_size=(40, 0), config=0)
    for g, d in zip(out, grads):
        assert torch.equal(g, d[0].transpose(0, 1))


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(8, 8, 2, 300, 700, 128, 1), (5, 16, 4, 900, 900, 64, 0),
                                   (4, 8, 8, 1024, 1024, 96, 1)])
def test_larger_packed_shapes(backend, shape):
    """The spec's inputs at training sizes (mixed lengths below 1024 rows, full from 1024)."""
    from gks import registry

    spec = registry.get("flash_attention_varlen_bwd")
    inputs = spec.make_inputs(shape, "bfloat16", DEVICE, seed_for("varlen-bwd-large", backend, shape))
    _check(backend, "bfloat16", inputs, f"{shape}")


@requires_gpu
def test_autograd_through_the_varlen_forward():
    """loss.backward() through gks.flash_attention_varlen_fwd runs gks.flash_attention_varlen_bwd:
    q, k and v get the reference's gradients of the op's o."""
    import gks

    inputs = _inputs(seed_for("varlen-bwd-autograd"), "bfloat16", lens_q=[40, 0, 130, 7], lens_k=[60, 9, 130, 3])
    leaves = {n: inputs[n].detach().clone().requires_grad_() for n in ("q", "k", "v")}
    o, lse = gks.flash_attention_varlen_fwd(leaves["q"], leaves["k"], leaves["v"], inputs["cu_seqlens_q"],
                                            inputs["cu_seqlens_k"], inputs["max_seqlen_q"], inputs["max_seqlen_k"],
                                            causal=True)
    assert not lse.requires_grad
    o.backward(inputs["do"])
    ref = reference(**{**inputs, "o": o.detach(), "lse": lse}, precise=True)
    check_varlen_bwd(tuple(leaves[n].grad for n in ("q", "k", "v")), ref, "bfloat16",
                     {**inputs, "o": o.detach(), "lse": lse}, "autograd")


@requires_gpu
def test_autograd_refuses_a_paged_cache():
    import gks
    from gks.specs.attention import decode_cache

    q = torch.randn(10, 2, 64, device=DEVICE, dtype=torch.float16, requires_grad=True)
    k, table = decode_cache(torch.randn(1, 2, 32, 64, dtype=torch.float16), 16, torch.Generator().manual_seed(0))
    k = k.to(DEVICE).requires_grad_()
    cu = torch.tensor([0, 10], dtype=torch.int32, device=DEVICE)
    o, _ = gks.flash_attention_varlen_fwd(q, k, k, cu, torch.tensor([0, 32], dtype=torch.int32, device=DEVICE), 10,
                                          32, page_table=table.to(DEVICE))
    with pytest.raises(ValueError, match="the backward takes packed keys"):
        o.sum().backward()


@requires_gpu
def test_cuda_graph_replays_with_other_lengths():
    """A capture of the op replays on other lengths of the same totals (they stay on the
    device): the replay's gradients are the new lengths' reference."""
    import gks

    first = _inputs(seed_for("varlen-bwd-graph"), "float16", lens_q=[100, 28], lens_k=[70, 90])
    second = _inputs(seed_for("varlen-bwd-graph", 2), "float16", lens_q=[28, 100], lens_k=[150, 10])
    names = ("do", "q", "k", "v", "o", "lse", "cu_seqlens_q", "cu_seqlens_k")
    live = {**{n: first[n].clone() for n in names}, "max_seqlen_q": 128, "max_seqlen_k": 150, "causal": True}
    graph, out, _ = capture(gks.flash_attention_varlen_bwd, live)
    refill(live, second)
    graph.replay()
    torch.cuda.synchronize()
    check_varlen_bwd(out, reference(**second, precise=True), "float16", second, "graph replay")
