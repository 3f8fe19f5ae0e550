# SPDX-License-Identifier: Apache-2.0
"""flash_attention_fwd on every backend: numerics against the float64 reference (error
within 2x PyTorch's own error in the input dtype, see gks/specs/attention.py),
edge shapes, strided views, fully masked rows, large scores; GPU-only: poisoned outputs, 64-bit
offsets, CUDA graphs (what every op guarantees is in tests/contract).

Without a GPU the Triton and Pallas kernels run in their interpreters and the CUDA
backend's cases skip (its host-side validation is covered by tests/cpp/test_attention.cpp).
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_gpu, requires_native, seed_for
from gks.reference import flash_attention_fwd as reference
from gks.specs.attention import check, flops, visible_pairs

BACKENDS = ("cuda", "triton", "pallas")
DTYPES = ("float16", "bfloat16")


def _op(backend: str):
    if backend == "cuda":
        if not HAS_GPU:
            pytest.skip("CUDA backend needs a GPU; this machine has none")
        if not HAS_NATIVE:
            pytest.skip("the gks CUDA library is not built")
        import gks

        return gks.flash_attention_fwd
    if backend == "triton":
        from gks.triton import flash_attention_fwd

        return flash_attention_fwd
    from gks.pallas._bridge import flash_attention_fwd

    return flash_attention_fwd


def _randn(gen, shape, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32) * scale).to(dtype)


def _inputs(shape, dtype, seed, *, bshd=False, k_scale=1.0, softmax_scale=None):
    """q, k, v for (B, Hq, Hkv, Sq, Sk, D, causal). bshd: [B, S, H, D] buffers passed as
    .transpose(1, 2) views (the layout most models hold)."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal = shape
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    if bshd:
        q = _randn(gen, (batch, seqlen_q, heads_q, head_dim), dt).transpose(1, 2)
        k = _randn(gen, (batch, seqlen_k, heads_kv, head_dim), dt, k_scale).transpose(1, 2)
        v = _randn(gen, (batch, seqlen_k, heads_kv, head_dim), dt).transpose(1, 2)
    else:
        q = _randn(gen, (batch, heads_q, seqlen_q, head_dim), dt)
        k = _randn(gen, (batch, heads_kv, seqlen_k, head_dim), dt, k_scale)
        v = _randn(gen, (batch, heads_kv, seqlen_k, head_dim), dt)
    return {"q": q, "k": k, "v": v, "causal": bool(causal), "softmax_scale": softmax_scale}


def _run_and_check(backend, dtype, inputs, what):
    out = _op(backend)(**inputs)
    ref = reference(**inputs, precise=True)
    check(out, ref, dtype, inputs, what)
    return out


# (B, Hq, Hkv, Sq, Sk, D, causal): every D; Sq = Sk, Sq < Sk, Sq > Sk; lengths of 1, primes
# and non-multiples of every block size (16, 32, 64, 128); Hq / Hkv of 1, 4 and 8.
SHAPES = [
    (1, 2, 2, 64, 64, 32, 0),
    (1, 2, 1, 97, 97, 64, 1),
    (1, 1, 1, 70, 70, 96, 0),
    (1, 4, 4, 48, 48, 128, 1),
    (1, 1, 1, 33, 33, 256, 1),
    (1, 4, 1, 17, 113, 64, 1),    # Sq < Sk, causal: bottom-right aligned
    (1, 4, 1, 17, 113, 64, 0),
    (1, 2, 2, 113, 17, 64, 1),    # Sq > Sk, causal: the first 96 rows see no key
    (2, 2, 1, 113, 17, 128, 0),
    (1, 8, 1, 1, 1000, 64, 1),    # one query (decoding): sees every key
    (1, 8, 8, 1, 200, 128, 0),
    (1, 2, 2, 200, 1, 32, 1),     # one key: only the last row sees it
    (1, 1, 1, 1, 1, 256, 0),
    (1, 8, 2, 113, 1000, 32, 0),
    (1, 4, 4, 129, 257, 96, 1),
    (1, 2, 1, 65, 191, 256, 0),
    # Sk a multiple of every key tile (no bounds masks): the causal diagonal alone decides,
    # with Sq = Sk, Sq < Sk and Sq > Sk (rows that see no key), and the unmasked walk.
    (1, 2, 1, 256, 256, 64, 1),
    (1, 2, 2, 100, 256, 128, 1),
    (1, 2, 2, 300, 128, 64, 1),
    (1, 2, 1, 128, 384, 32, 0),
]


def _id(shape):
    return "x".join(map(str, shape))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_matches_reference(backend, dtype, shape):
    inputs = _inputs(shape, dtype, seed_for("fa", backend, dtype, shape))
    _run_and_check(backend, dtype, inputs, f"{backend}/{dtype}/{shape}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 4, 2, 75, 75, 64, 1), (1, 8, 1, 33, 130, 128, 0),
                                   (1, 2, 2, 50, 20, 32, 1)], ids=_id)
def test_strided_bshd_views(backend, dtype, shape):
    """[B, S, H, D] tensors passed as .transpose(1, 2): only the last dim is contiguous."""
    inputs = _inputs(shape, dtype, seed_for("fa-bshd", backend, dtype, shape), bshd=True)
    assert not inputs["q"].is_contiguous() and inputs["q"].stride(-1) == 1
    o, _ = _run_and_check(backend, dtype, inputs, f"{backend}/{dtype}/{shape}/bshd")
    assert o.is_contiguous()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
def test_large_scores_exercise_running_max(backend, dtype, causal):
    """Scores of +-50 (softmax_scale 1): the running max moves by far more than exp's
    range between tiles; wrong corrections overflow or vanish."""
    shape = (1, 4, 2, 100, 300, 64, int(causal))
    head_dim = shape[5]
    inputs = _inputs(shape, dtype, seed_for("fa-large", backend, dtype, causal),
                     k_scale=50.0 / (3.0 * math.sqrt(head_dim)), softmax_scale=1.0)
    scores = inputs["q"][:, :1].float() @ inputs["k"][:, :1].float().transpose(-1, -2)
    assert scores.abs().max() > 40
    _run_and_check(backend, dtype, inputs, f"{backend}/{dtype}/large/causal={causal}")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("head_dim", [64, 128, 256])
def test_lse_does_not_drift_over_many_key_tiles(backend, head_dim):
    """2^17 keys: a thousand or more K/V tiles whose running max mostly stays put. The
    rescale factor of such a tile must be exactly 1: computed as exp2(old * c - new * c)
    (an fma keeps the rounding error of new * c) it was 1 +- 1.7e-7, compounding to an lse
    error of ~1e-4 here (0.04 at 2^23 keys). The kernels' own lse error is ~1e-6."""
    shape = (1, 2, 2, 64, 1 << 17, head_dim, 0)
    inputs = _inputs(shape, "float16", seed_for("fa-lse-drift", head_dim))
    configs = KERNELS if backend == "cuda" else [None]
    ref_lse = reference(**inputs, precise=True)[1].double().cpu()
    for config in configs:
        extra = {} if config is None else {"config": config}
        _, lse = _op(backend)(**inputs, **extra)
        err = (lse.double().cpu() - ref_lse).abs().max().item()
        assert err < 3e-5, f"{backend} config {config} D={head_dim}: lse off by {err:.3g} over 2^17 keys"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rising", [False, True])
def test_monotone_scores(backend, rising):
    """Scores that rise (or fall) along the keys by 100 over the sequence: the max changes
    at every tile in one direction of the walk and never in the other."""
    dtype, seqlen_k, head_dim = "float16", 300, 32
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("fa-ramp", backend, rising))
    q = torch.zeros(1, 2, 40, head_dim, device=DEVICE)
    q[..., 0] = 1.0
    k = 0.1 * torch.randn(1, 2, seqlen_k, head_dim, generator=gen, device=DEVICE)
    ramp = torch.linspace(-50.0, 50.0, seqlen_k, device=DEVICE)
    k[..., 0] = ramp if rising else ramp.flip(0)
    v = torch.randn(1, 2, seqlen_k, head_dim, generator=gen, device=DEVICE)
    inputs = {"q": q.half(), "k": k.half(), "v": v.half(), "causal": False, "softmax_scale": 1.0}
    _run_and_check(backend, dtype, inputs, f"{backend}/ramp/rising={rising}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_fully_masked_rows_give_zero_and_minus_inf(backend):
    inputs = _inputs((1, 2, 1, 40, 7, 64, 1), "bfloat16", seed_for("fa-masked", backend))
    o, lse = _op(backend)(**inputs)
    # Row i sees keys j <= i - 33: rows 0..32 see none.
    assert torch.isneginf(lse[:, :, :33]).all()
    assert (o[:, :, :33] == 0).all()
    assert torch.isfinite(lse[:, :, 33:]).all()
    ref = reference(**inputs, precise=True)
    check((o, lse), ref, "bfloat16", inputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_softmax_scale(backend):
    inputs = _inputs((1, 2, 2, 45, 77, 64, 1), "float16", seed_for("fa-scale", backend),
                     softmax_scale=0.3)
    _run_and_check(backend, "float16", inputs, f"{backend}/scale=0.3")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequences(backend, causal):
    op = _op(backend)
    q = torch.randn(2, 4, 0, 64, device=DEVICE).half()
    k = torch.randn(2, 2, 9, 64, device=DEVICE).half()
    o, lse = op(q, k, k, causal)
    assert o.shape == (2, 4, 0, 64) and lse.shape == (2, 4, 0)
    # Sk = 0: every row sees no key.
    q = torch.randn(2, 4, 5, 64, device=DEVICE).half()
    k = torch.randn(2, 2, 0, 64, device=DEVICE).half()
    o, lse = op(q, k, k, causal)
    assert o.shape == q.shape and o.dtype == q.dtype and lse.dtype == torch.float32
    assert (o == 0).all() and torch.isneginf(lse).all()


def test_reference_fully_masked_and_lse_definition():
    q = torch.randn(1, 1, 6, 32, dtype=torch.float64)
    k = torch.randn(1, 1, 3, 32, dtype=torch.float64)
    o, lse = reference(q, k, k, causal=True, precise=True)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(32)
    # Row i sees keys j <= i - 3.
    assert torch.isneginf(lse[0, 0, :3]).all() and (o[0, 0, :3] == 0).all()
    for i in range(3, 6):
        expect = torch.logsumexp(scores[0, 0, i, : i - 2], dim=-1)
        torch.testing.assert_close(lse[0, 0, i], expect)


def test_flops_count_only_visible_pairs():
    def brute(sq, sk, causal):
        return sum(min(sk, max(0, i + 1 + sk - sq)) if causal else sk for i in range(sq))

    for sq in (0, 1, 5, 17, 64):
        for sk in (0, 1, 9, 64, 100):
            for causal in (False, True):
                assert visible_pairs(sq, sk, causal) == brute(sq, sk, causal), (sq, sk, causal)
    assert flops((2, 4, 1, 8, 8, 64, 1)) == 4 * 2 * 4 * 64 * 36


# ---- bad input beyond the spec's table (tests/contract/test_bad_inputs.py) ----


@requires_native
def test_cuda_rejects_cpu_tensors():
    """Runs without a GPU: the native library loads and its validation rejects CPU data."""
    from gks import cuda

    q = torch.randn(1, 2, 8, 64).half()
    o, lse = torch.empty_like(q), torch.empty(1, 2, 8)
    with pytest.raises(ValueError, match="argument 'q' must be a CUDA tensor, got a tensor on cpu"):
        cuda.flash_attention_fwd_out(q, q, q, o, lse)


@requires_gpu
def test_triton_rejects_cpu_tensor_on_gpu_machine():
    q = torch.randn(1, 2, 8, 64).half()
    from gks.triton import flash_attention_fwd

    with pytest.raises(ValueError, match="argument 'q' must be a CUDA tensor"):
        flash_attention_fwd(q, q, q)


# ---- GPU only: the CUDA backend's raw entry, layouts, capture, compile ----


@requires_gpu
@requires_native
def test_cuda_other_device_and_raw_entry_validation():
    from gks import cuda

    q = torch.randn(1, 2, 8, 64, device="cuda").half()
    o, lse = torch.empty_like(q), torch.empty(1, 2, 8, device="cuda")
    with pytest.raises(ValueError, match="argument 'k' must be on the device of 'q' \\(cuda:0\\), got cpu"):
        cuda.flash_attention_fwd_out(q, q.cpu(), q, o, lse)
    with pytest.raises(TypeError, match="argument 'lse' must be float32"):
        cuda.flash_attention_fwd_out(q, q, q, o, lse.half())
    with pytest.raises(ValueError, match="argument 'lse' must have shape \\[1, 2, 8\\]"):
        cuda.flash_attention_fwd_out(q, q, q, o, torch.empty(1, 2, 7, device="cuda"))
    with pytest.raises(ValueError, match="argument 'softmax_scale' must be a finite number > 0"):
        cuda.flash_attention_fwd_out(q, q, q, o, lse, False, float("nan"))
    # Rows that do not start on 16-byte boundaries: the raw entry refuses them ...
    buf = torch.randn(1, 2, 8, 65, device="cuda").half()
    unaligned = buf[..., 1:]
    with pytest.raises(ValueError, match="argument 'q' must be 16-byte aligned"):
        cuda.flash_attention_fwd_out(unaligned, q, q, o, lse)


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_cuda_unaligned_views_are_copied(dtype):
    """... and the torch op copies them, so any last-dim-contiguous view works."""
    import gks

    dt = getattr(torch, dtype)
    buf = torch.randn(2, 3, 50, 65, device="cuda").to(dt)
    q = buf[..., 1:]  # row stride 65 elements: not a multiple of 8
    k = torch.randn(2, 3, 70, 64 + 8, device="cuda").to(dt)[..., 8:]  # aligned, strided rows
    inputs = {"q": q, "k": k, "v": k, "causal": True, "softmax_scale": None}
    out = gks.flash_attention_fwd(**inputs)
    check(out, reference(**inputs, precise=True), dtype, inputs)


KERNELS = (0, 1)  # gks.cuda.flash_attention_fwd_out's configs: mma.sync, wgmma
KERNEL_IDS = ("mma.sync", "wgmma")


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[5] in (64, 128)], ids=_id)
def test_cuda_each_kernel(config, dtype, shape):
    """Both CUDA kernels, forced, on every edge shape of the head dims wgmma serves (on an
    sm_90 GPU config 1 is the wgmma kernel, elsewhere it gives way to mma.sync)."""
    import gks

    inputs = _inputs(shape, dtype, seed_for("fa-kernel", config, dtype, shape))
    out = gks.flash_attention_fwd(**inputs, config=config)
    check(out, reference(**inputs, precise=True), dtype, inputs, f"config {config}/{dtype}/{shape}")


@requires_gpu
@requires_native
def test_cuda_kernel_choice():
    """wgmma runs head dims 64 and 128 on an sm_90 GPU in an sm_90a build (the default
    and config 1); mma.sync everything else, and anything with config 0. (gks builds for
    sm_90a by default, as test_gemm_hopper assumes too.)"""
    from gks import cuda

    sm90 = torch.cuda.get_device_capability() == (9, 0)
    for head_dim in (32, 64, 96, 128, 256):
        inputs = _inputs((1, 2, 2, 8, 8, head_dim, 0), "float16", 0)
        q = inputs["q"]
        o, lse = torch.empty_like(q), q.new_empty(q.shape[:-1], dtype=torch.float32)
        wgmma = "wgmma" if sm90 and head_dim in (64, 128) else "mma.sync"
        for config, expect in ((-1, wgmma), (0, "mma.sync"), (1, wgmma)):
            path = cuda.flash_attention_fwd_path(q, inputs["k"], inputs["v"], o, lse, False, None, config)
            assert path == expect, (head_dim, config, path)
        with pytest.raises(ValueError, match="argument 'config' must be -1"):
            cuda.flash_attention_fwd_out(q, inputs["k"], inputs["v"], o, lse, False, None, 2)


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [32, 64, 96, 128, 256])
def test_cuda_poisoned_outputs_every_head_dim(config, dtype, causal, head_dim):
    """The raw entry writes every element of o and lse (buffers start as NaN), for strided
    outputs too; sizes cross several Q and K blocks with ragged ends; both kernels."""
    from gks import cuda

    shape = (2, 6, 3, 300, 517, head_dim, int(causal))
    inputs = _inputs(shape, dtype, seed_for("fa-poison", dtype, causal, head_dim))
    q = inputs["q"]
    o_buf = torch.full((2, 300, 6, head_dim), float("nan"), device="cuda", dtype=q.dtype)
    o = o_buf.transpose(1, 2)  # [B, S, H, D] storage
    lse = torch.full((2, 6, 300), float("nan"), device="cuda")
    cuda.flash_attention_fwd_out(q, inputs["k"], inputs["v"], o, lse, causal, None, config)
    check((o, lse), reference(**inputs, precise=True), dtype, inputs,
          f"poison/config {config}/{dtype}/{head_dim}")


@requires_gpu
@requires_native
@pytest.mark.parametrize("shape", [(2, 16, 4, 1000, 1000, 128, 1), (1, 8, 8, 2048, 2048, 64, 0),
                                   (4, 4, 1, 512, 3000, 64, 1), (1, 2, 2, 4096, 333, 128, 1)], ids=_id)
def test_cuda_larger_shapes(shape):
    inputs = _inputs(shape, "bfloat16", seed_for("fa-large-shape", shape))
    _run_and_check("cuda", "bfloat16", inputs, f"cuda/{shape}")


@requires_gpu
@requires_native
def test_cuda_offsets_past_2_pow_31_elements():
    """The second batch of k/v starts past element 2^31: offsets must be 64-bit."""
    import gks

    seqlen, head_dim = 64, 64
    batch_stride = (1 << 31) + 4096  # elements, a multiple of 8
    try:
        buf = torch.empty(batch_stride + seqlen * head_dim, device="cuda", dtype=torch.float16)
    except torch.OutOfMemoryError:
        pytest.skip("needs 4.3 GB of GPU memory")
    k = buf.as_strided((2, 1, seqlen, head_dim), (batch_stride, seqlen * head_dim, head_dim, 1))
    k[0].normal_()
    k[1].normal_()
    q = torch.randn(2, 2, seqlen, head_dim, device="cuda").half()
    inputs = {"q": q, "k": k, "v": k, "causal": False, "softmax_scale": None}
    out = gks.flash_attention_fwd(**inputs)
    dense_k = k.contiguous()
    ref = reference(q, dense_k, dense_k, precise=True)
    check(out, ref, "float16", inputs, "64-bit offsets")
    del buf


@requires_gpu
@requires_native
def test_cuda_runs_on_current_stream_and_in_graph():
    import gks

    inputs = _inputs((2, 4, 2, 200, 300, 64, 1), "float16", seed_for("fa-graph"))
    expect_o, expect_lse = gks.flash_attention_fwd(**inputs)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        o, lse = gks.flash_attention_fwd(**inputs)
    stream.synchronize()
    torch.testing.assert_close(o, expect_o, rtol=0, atol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        g_o, g_lse = gks.flash_attention_fwd(**inputs)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(g_o, expect_o, rtol=0, atol=0)
    torch.testing.assert_close(g_lse, expect_lse, rtol=0, atol=0)


@requires_gpu
@requires_native
def test_cuda_opcheck_and_compile():
    import gks

    inputs = _inputs((1, 4, 2, 65, 130, 64, 1), "bfloat16", seed_for("fa-compile"))
    args = (inputs["q"], inputs["k"], inputs["v"], True, None)
    torch.library.opcheck(gks.flash_attention_fwd.op, args)
    compiled = torch.compile(lambda q, k, v: gks.flash_attention_fwd(q, k, v, True), fullgraph=True)
    o, lse = compiled(inputs["q"], inputs["k"], inputs["v"])
    eager_o, eager_lse = gks.flash_attention_fwd(*args)
    torch.testing.assert_close(o, eager_o, rtol=0, atol=0)
    torch.testing.assert_close(lse, eager_lse, rtol=0, atol=0)


# ---- the Triton kernel's configs (gks autotune --backend triton): each on its own ----

TRITON_CONFIG_SHAPES = [
    (1, 2, 1, 97, 70, 64, 1),    # GQA, causal with Sq > Sk, lengths off every block size
    (1, 2, 2, 33, 130, 32, 0),   # Sq < Sk, a partial key tile
]


@pytest.mark.parametrize("shape", TRITON_CONFIG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_triton_every_config(shape):
    from gks.triton import flash_attention_fwd, flash_attention_fwd_config_names

    names = flash_attention_fwd_config_names()
    assert len(names) == len(set(names)) >= 2
    for config, name in enumerate(names):
        inputs = _inputs(shape, "float16", seed_for("fa-triton-config", config, shape))
        out = flash_attention_fwd(**inputs, config=config)
        check(out, reference(**inputs, precise=True), "float16", inputs, f"triton config {name}")


def test_triton_bad_config_names_the_argument():
    from gks.triton import flash_attention_fwd, flash_attention_fwd_config_names

    q = torch.zeros(1, 1, 4, 32, device=DEVICE, dtype=torch.float16)
    count = len(flash_attention_fwd_config_names())
    for bad in (count, -2, 1.5):
        with pytest.raises(ValueError, match=f"argument 'config' must be -1 or an index below {count}"):
            flash_attention_fwd(q, q, q, config=bad)


def test_triton_heuristic_shapes_are_among_the_configs():
    """The shape a head dim gets without a tuned entry is one gks autotune also times."""
    from gks.triton.attention import CONFIGS, _config

    for head_dim in (32, 64, 96, 128, 256):
        assert _config(head_dim) in CONFIGS


# ---- the Pallas kernel's configs (gks autotune --backend pallas): each on its own ----


def test_pallas_every_config():
    from gks.pallas import _bridge, flash_attention_fwd_config_names

    shape = (1, 2, 1, 70, 45, 64, 1)  # GQA, causal with Sq > Sk, lengths off the block sizes
    names = flash_attention_fwd_config_names()
    assert len(names) == len(set(names)) >= 2
    for config, name in enumerate(names):
        inputs = _inputs(shape, "float16", seed_for("fa-pallas-config", config))
        out = _bridge.flash_attention_fwd(**inputs, config=config)
        check(out, reference(**inputs, precise=True), "float16", inputs, f"pallas config {name}")


def test_pallas_bad_config_names_the_argument():
    from gks.pallas import _bridge, flash_attention_fwd_config_names

    q = torch.zeros(1, 1, 4, 32, dtype=torch.float16)
    count = len(flash_attention_fwd_config_names())
    for bad in (count, -2, 1.5):
        with pytest.raises(ValueError, match=f"argument 'config' must be -1 or an index below {count}"):
            _bridge.flash_attention_fwd(q, q, q, config=bad)


def test_pallas_default_configs_per_head_dim():
    from gks.pallas.attention import CONFIGS, _default_config

    # 128-row query blocks up to D = 128 (4 warps to D = 64, 8 beyond), 64 x 32 blocks above.
    assert [CONFIGS[_default_config(d)] for d in (32, 64, 96, 128, 256)] == [
        (128, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2), (128, 64, 8, 2), (64, 32, 8, 2)]
