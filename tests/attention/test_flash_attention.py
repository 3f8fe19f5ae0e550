# SPDX-License-Identifier: Apache-2.0
"""flash_attention_fwd on every backend: numerics against the float64 reference (error
within 2x PyTorch's own error in the input dtype, see gks/specs/attention.py),
edge shapes, strided views, fully masked rows, large scores, sliding windows and the softcap;
GPU-only: poisoned outputs, 64-bit offsets, CUDA graphs (what every op guarantees is in
tests/contract).

Without a GPU the Triton and Pallas kernels run in their interpreters and the CUDA
backend's cases skip (its host-side validation is covered by tests/cpp/test_attention.cpp).
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_gpu, requires_native, seed_for
from gks import registry
from gks.reference import flash_attention_fwd as reference
from gks.specs.attention import check, flops, full_shape, visible_pairs

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


def _inputs(shape, dtype, seed, *, bshd=False, k_scale=1.0, softmax_scale=None, window_size=(-1, -1),
            softcap=0.0):
    """q, k, v for (B, Hq, Hkv, Sq, Sk, D, causal[, Dv]) (v's head dim Dv, D unless given),
    with the call's other arguments. bshd: [B, S, H, D] buffers passed as .transpose(1, 2)
    views (the layout most models hold)."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, head_dim_v = full_shape(shape)
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    if bshd:
        q = _randn(gen, (batch, seqlen_q, heads_q, head_dim), dt).transpose(1, 2)
        k = _randn(gen, (batch, seqlen_k, heads_kv, head_dim), dt, k_scale).transpose(1, 2)
        v = _randn(gen, (batch, seqlen_k, heads_kv, head_dim_v), dt).transpose(1, 2)
    else:
        q = _randn(gen, (batch, heads_q, seqlen_q, head_dim), dt)
        k = _randn(gen, (batch, heads_kv, seqlen_k, head_dim), dt, k_scale)
        v = _randn(gen, (batch, heads_kv, seqlen_k, head_dim_v), dt)
    return {"q": q, "k": k, "v": v, "causal": bool(causal), "softmax_scale": softmax_scale,
            "window_size": window_size, "softcap": softcap}


def _run_and_check(backend, dtype, inputs, what):
    out = _op(backend)(**inputs)
    ref = reference(**inputs, precise=True)
    check(out, ref, dtype, inputs, what)
    return out


# (B, Hq, Hkv, Sq, Sk, D, causal[, Dv]): every D, and D = 192 with Dv = 128 (DeepSeek's
# MLA); Sq = Sk, Sq < Sk, Sq > Sk; lengths of 1, primes and non-multiples of every block size
# (16, 32, 64, 128); Hq / Hkv of 1, 2, 4 and 8.
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
    # D = 192 (q and k padded to 256 columns in the ports) and v of 128 beside it.
    (1, 2, 1, 70, 70, 192, 0),
    (1, 2, 2, 37, 150, 192, 1),
    (1, 4, 2, 97, 150, 192, 1, 128),   # GQA, causal, Sq < Sk
    (1, 2, 1, 113, 17, 192, 1, 128),   # Sq > Sk, causal: the first 96 rows see no key
    (1, 4, 4, 65, 65, 192, 0, 128),
    (1, 8, 1, 1, 300, 192, 0, 128),    # one query (decoding), MQA
    (1, 2, 2, 128, 256, 192, 1, 128),  # Sk a multiple of every key tile
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
                                   (1, 2, 2, 50, 20, 32, 1), (1, 4, 2, 50, 77, 192, 1, 128),
                                   (1, 2, 1, 40, 33, 192, 0)], ids=_id)
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
@pytest.mark.parametrize("head_dims", [(64,), (128,), (256,), (192, 128)],
                         ids=lambda d: "-".join(map(str, d)))
def test_lse_does_not_drift_over_many_key_tiles(backend, head_dims):
    """2^17 keys: a thousand or more K/V tiles whose running max mostly stays put. The
    rescale factor of such a tile must be exactly 1: computed as exp2(old * c - new * c)
    (an fma keeps the rounding error of new * c) it was 1 +- 1.7e-7, compounding to an lse
    error of ~1e-4 here (0.04 at 2^23 keys). The kernels' own lse error is ~1e-6."""
    shape = (1, 2, 2, 64, 1 << 17, head_dims[0], 0, *head_dims[1:])
    inputs = _inputs(shape, "float16", seed_for("fa-lse-drift", head_dims))
    configs = KERNELS if backend == "cuda" else [None]
    ref_lse = reference(**inputs, precise=True)[1].double().cpu()
    for config in configs:
        extra = {} if config is None else {"config": config}
        _, lse = _op(backend)(**inputs, **extra)
        err = (lse.double().cpu() - ref_lse).abs().max().item()
        assert err < 3e-5, f"{backend} config {config} D={head_dims}: lse off by {err:.3g} over 2^17 keys"


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
    # The same with DeepSeek's head dims: o takes v's.
    q = torch.randn(2, 4, 0, 192, device=DEVICE).half()
    k, v = torch.randn(2, 2, 9, 192, device=DEVICE).half(), torch.randn(2, 2, 9, 128, device=DEVICE).half()
    o, lse = op(q, k, v, causal)
    assert o.shape == (2, 4, 0, 128) and lse.shape == (2, 4, 0)
    q = torch.randn(2, 4, 5, 192, device=DEVICE).half()
    k, v = torch.randn(2, 2, 0, 192, device=DEVICE).half(), torch.randn(2, 2, 0, 128, device=DEVICE).half()
    o, lse = op(q, k, v, causal)
    assert o.shape == (2, 4, 5, 128) and o.dtype == q.dtype
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


def test_reference_v_head_dim_definition():
    """With v of another head dim than q and k (DeepSeek's 192 / 128): o = softmax(q k^T /
    sqrt(D)) v has v's head dim, the default scale is q's head dim's, and lse does not
    depend on v."""
    q = torch.randn(1, 2, 5, 192, dtype=torch.float64)
    k = torch.randn(1, 1, 7, 192, dtype=torch.float64)
    v = torch.randn(1, 1, 7, 128, dtype=torch.float64)
    o, lse = reference(q, k, v, precise=True)
    assert o.shape == (1, 2, 5, 128) and lse.shape == (1, 2, 5)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(192)
    torch.testing.assert_close(o, torch.softmax(scores, -1) @ v)
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1))
    _, lse_k = reference(q, k, k, precise=True)
    torch.testing.assert_close(lse, lse_k)


def test_flops_and_bytes_count_each_head_dim():
    """Q K^T runs over D, P V over Dv; o and v move Dv columns. A shape without Dv is D = Dv."""
    from gks.specs.attention import bytes_moved

    assert flops((2, 4, 1, 8, 8, 192, 1, 128)) == 2 * 2 * 4 * (192 + 128) * 36
    assert flops((2, 4, 1, 8, 8, 64, 1, 64)) == flops((2, 4, 1, 8, 8, 64, 1))
    assert bytes_moved((1, 4, 2, 10, 20, 192, 0, 128), "float16") == (
        2 * (4 * 10 * (192 + 128) + 2 * 20 * (192 + 128)) + 4 * 4 * 10)
    assert bytes_moved((1, 4, 2, 10, 20, 64, 0), "bfloat16") == bytes_moved((1, 4, 2, 10, 20, 64, 0, 64),
                                                                             "bfloat16")


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


KERNELS = (0, 1, 2)  # gks.cuda.flash_attention_fwd_out's configs: mma.sync, wgmma, wgmma.ws
KERNEL_IDS = ("mma.sync", "wgmma", "wgmma.ws")


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[5] in (64, 96, 128, 192, 256)], ids=_id)
def test_cuda_each_kernel(config, dtype, shape):
    """Every CUDA kernel, forced, on every edge shape of the head dims the Hopper kernels
    serve (on an sm_90 GPU config 1 is the wgmma kernel for D = Dv = 64 and 128, config 2
    the warp-specialized one for D = 64, 96, 128, 192 and 256 and DeepSeek's D = 192 with
    Dv = 128; elsewhere they give way)."""
    import gks

    inputs = _inputs(shape, dtype, seed_for("fa-kernel", config, dtype, shape))
    out = gks.flash_attention_fwd(**inputs, config=config)
    check(out, reference(**inputs, precise=True), dtype, inputs, f"config {config}/{dtype}/{shape}")


@requires_gpu
@requires_native
def test_cuda_kernel_choice():
    """On an sm_90 GPU in an sm_90a build (gks builds for sm_90a by default, as
    test_gemm_hopper assumes too): the warp-specialized kernel runs head dims 64, 96, 128,
    192 and 256 and the pair (192, 128) (the default and config 2), wgmma D = Dv = 64 and 128
    (config 1, and where config 2 gives way at Sk = 0); mma.sync everything else, and
    anything with config 0."""
    from gks import cuda

    sm90 = torch.cuda.get_device_capability() == (9, 0)
    for head_dim, head_dim_v in ((32, 32), (64, 64), (96, 96), (128, 128), (192, 192), (192, 128),
                                 (256, 256)):
        for seqlen_k in (8, 0):
            inputs = _inputs((1, 2, 2, 8, seqlen_k, head_dim, 0, head_dim_v), "float16", 0)
            q = inputs["q"]
            o = q.new_empty((*q.shape[:-1], head_dim_v))
            lse = q.new_empty(q.shape[:-1], dtype=torch.float32)
            wgmma = "wgmma" if sm90 and head_dim == head_dim_v and head_dim in (64, 128) else "mma.sync"
            ws = "wgmma.ws" if sm90 and head_dim != 32 and seqlen_k > 0 else wgmma
            for config, expect in ((-1, ws), (0, "mma.sync"), (1, wgmma), (2, ws)):
                path = cuda.flash_attention_fwd_path(q, inputs["k"], inputs["v"], o, lse, False,
                                                     None, config=config)
                assert path == expect, (head_dim, head_dim_v, seqlen_k, config, path)
        with pytest.raises(ValueError, match="argument 'config' must be -1"):
            cuda.flash_attention_fwd_out(q, inputs["k"], inputs["v"], o, lse, False, None,
                                         config=len(registry.get("flash_attention_fwd").configs))


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", KERNELS, ids=KERNEL_IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dims", [(32, 32), (64, 64), (96, 96), (128, 128), (192, 192), (192, 128),
                                       (256, 256)], ids=lambda d: f"D{d[0]}-Dv{d[1]}")
def test_cuda_poisoned_outputs_every_head_dim(config, dtype, causal, head_dims):
    """The raw entry writes every element of o and lse (buffers start as NaN), for strided
    outputs too; sizes cross several Q and K blocks with ragged ends; every kernel."""
    from gks import cuda

    head_dim, head_dim_v = head_dims
    shape = (2, 6, 3, 300, 517, head_dim, int(causal), head_dim_v)
    inputs = _inputs(shape, dtype, seed_for("fa-poison", dtype, causal, head_dims))
    q = inputs["q"]
    o_buf = torch.full((2, 300, 6, head_dim_v), float("nan"), device="cuda", dtype=q.dtype)
    o = o_buf.transpose(1, 2)  # [B, S, H, D] storage
    lse = torch.full((2, 6, 300), float("nan"), device="cuda")
    cuda.flash_attention_fwd_out(q, inputs["k"], inputs["v"], o, lse, causal, None, config=config)
    check((o, lse), reference(**inputs, precise=True), dtype, inputs,
          f"poison/config {config}/{dtype}/{head_dims}")


@requires_gpu
@requires_native
@pytest.mark.parametrize("shape", [(2, 16, 4, 1000, 1000, 128, 1), (1, 8, 8, 2048, 2048, 64, 0),
                                   (4, 4, 1, 512, 3000, 64, 1), (1, 2, 2, 4096, 333, 128, 1),
                                   (2, 16, 16, 1000, 1000, 192, 1, 128), (1, 8, 2, 700, 2048, 192, 0)],
                         ids=_id)
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
    (1, 2, 1, 97, 70, 192, 1, 128),  # DeepSeek's head dims: q/k and v/o padded apart
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

    for head_dim in (32, 64, 96, 128, 192, 256):
        assert _config(head_dim) in CONFIGS
    assert _config(192) == _config(256)  # 192 pads to 256 columns


# ---- the Pallas kernel's configs (gks autotune --backend pallas): each on its own ----


@pytest.mark.parametrize("shape", [(1, 2, 1, 70, 45, 64, 1), (1, 2, 1, 70, 45, 192, 1, 128)], ids=_id)
def test_pallas_every_config(shape):
    """GQA, causal with Sq > Sk, lengths off the block sizes; D = 64, and DeepSeek's head
    dims (q/k and v/o padded apart)."""
    from gks.pallas import _bridge, flash_attention_fwd_config_names

    names = flash_attention_fwd_config_names()
    assert len(names) == len(set(names)) >= 2
    for config, name in enumerate(names):
        inputs = _inputs(shape, "float16", seed_for("fa-pallas-config", config, shape))
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
    assert [CONFIGS[_default_config(d)] for d in (32, 64, 96, 128, 192, 256)] == [
        (128, 64, 4, 2), (128, 64, 4, 2), (128, 64, 8, 2), (128, 64, 8, 2), (64, 32, 8, 2), (64, 32, 8, 2)]


# ---- the sliding window (window_size) and the softcap ----

ATTENTION = registry.get("flash_attention_fwd")

# (shape, window_size, dtype): windows of 0, 1, a few, past Sk, left only, right only and
# both, with and without causal; Hq / Hkv of 1, 2, 4 and 8; Sq = Sk, Sq < Sk, Sq > Sk and
# Sq = 1; lengths off every tile size, and Sk a multiple of every key tile (no bounds masks:
# the window's masks alone decide).
WINDOW_CASES = [
    ((1, 2, 2, 70, 70, 32, 0), (0, 0), "float16"),       # Sq = Sk: each row its diagonal key
    ((1, 4, 1, 70, 70, 64, 1), (1, -1), "bfloat16"),     # causal, left 1: two keys a row
    ((1, 4, 2, 37, 150, 32, 0), (16, 5), "float16"),     # Sq < Sk, both bounds
    ((1, 4, 2, 37, 150, 32, 1), (20, 0), "bfloat16"),    # causal sliding window, Sq < Sk
    ((1, 2, 1, 113, 40, 64, 0), (3, 2), "float16"),      # Sq > Sk: rows 0..70 see no key
    ((1, 2, 1, 113, 40, 64, 1), (5, -1), "bfloat16"),    # causal, Sq > Sk
    ((1, 8, 1, 1, 300, 64, 0), (50, -1), "float16"),     # one query, left only: keys 249..299
    ((1, 8, 1, 1, 300, 64, 1), (0, 0), "bfloat16"),      # one query, window 0: the last key
    ((1, 2, 2, 1, 1, 32, 0), (0, 0), "float16"),
    ((1, 2, 2, 100, 100, 96, 0), (-1, 7), "bfloat16"),   # right only
    ((1, 2, 2, 100, 100, 128, 0), (7, -1), "float16"),   # left only
    ((1, 2, 2, 65, 90, 32, 0), (200, 300), "bfloat16"),  # both past Sk: no window
    ((1, 2, 1, 65, 90, 32, 1), (1000, 0), "float16"),    # causal, left past Sk: causal alone
    ((1, 4, 4, 129, 257, 64, 0), (64, 64), "bfloat16"),
    ((1, 2, 2, 128, 256, 32, 0), (40, 8), "float16"),    # Sk a multiple of every key tile
    ((1, 2, 1, 256, 256, 32, 1), (64, 0), "bfloat16"),   # Mistral's causal sliding window
    ((1, 2, 2, 50, 20, 256, 0), (0, 1), "float16"),      # D = 256, Sq > Sk
    ((1, 4, 2, 60, 130, 192, 0, 128), (20, 5), "bfloat16"),  # DeepSeek's head dims, both bounds
    ((1, 2, 1, 90, 45, 192, 1, 128), (10, 0), "float16"),    # causal window, Sq > Sk
    ((1, 2, 2, 70, 100, 192, 0), (-1, 9), "float16"),        # D = 192, right only
]


def _window_id(case):
    shape, window, dtype = case[:3]
    return f"{_id(shape)}-w{window[0]}_{window[1]}-{dtype}"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", WINDOW_CASES, ids=_window_id)
def test_window_matches_reference(backend, case):
    shape, window, dtype = case
    inputs = _inputs(shape, dtype, seed_for("fa-window", backend, case), window_size=window)
    _run_and_check(backend, dtype, inputs, f"{backend}/{_window_id(case)}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_strided_bshd_views(backend):
    shape = (1, 4, 2, 75, 75, 64, 1)
    inputs = _inputs(shape, "bfloat16", seed_for("fa-window-bshd", backend), bshd=True,
                     window_size=(9, 0))
    o, _ = _run_and_check(backend, "bfloat16", inputs, f"{backend}/bshd/window")
    assert o.is_contiguous()


def _large_k_scale(head_dim):
    # With softmax_scale 1, scores of std 50/3 (up to about +-60): a cap of 30 bites.
    return 50.0 / (3.0 * math.sqrt(head_dim))


# (shape, window_size, softcap, large scores, dtype)
SOFTCAP_CASES = [
    ((1, 4, 2, 77, 130, 64, 0), (-1, -1), 30.0, True, "float16"),
    ((1, 4, 2, 77, 130, 64, 1), (-1, -1), 30.0, True, "bfloat16"),
    ((1, 2, 1, 90, 45, 32, 1), (10, 0), 30.0, True, "float16"),      # Sq > Sk: rows see no key
    ((1, 2, 2, 60, 100, 128, 0), (-1, -1), 0.5, False, "bfloat16"),  # a tiny cap: near uniform
    ((1, 2, 2, 60, 100, 32, 0), (20, 3), 1e4, False, "float16"),     # far above the scores
    ((1, 4, 2, 77, 130, 192, 1, 128), (-1, -1), 30.0, True, "bfloat16"),  # DeepSeek's head dims
    ((1, 2, 2, 60, 100, 192, 0), (16, 4), 30.0, True, "float16"),
]


def _softcap_inputs(backend, case):
    shape, window, cap, large, dtype = case
    return _inputs(shape, dtype, seed_for("fa-softcap", backend, case),
                   k_scale=_large_k_scale(shape[5]) if large else 1.0,
                   softmax_scale=1.0 if large else None, window_size=window, softcap=cap)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", SOFTCAP_CASES, ids=lambda c: f"{_window_id(c)}-cap{c[2]:g}")
def test_softcap_matches_reference(backend, case):
    inputs = _softcap_inputs(backend, case)
    _run_and_check(backend, case[4], inputs, f"{backend}/{_window_id(case)}/softcap {case[2]:g}")


def test_reference_softcap_bites_in_the_softcap_cases():
    """The caps of 30 and 0.5 change the result well past the tolerance (a cap that did
    nothing would let a kernel that ignored it pass); a cap of 1e4 changes next to nothing."""
    for case in SOFTCAP_CASES:
        inputs = _softcap_inputs("reference", case)
        capped = reference(**inputs, precise=True)[1]
        plain = reference(**{**inputs, "softcap": 0.0}, precise=True)[1]
        seen = torch.isfinite(plain)
        change = (capped - plain)[seen].abs().max().item()
        if case[2] <= 30:
            assert change > 0.1, (case, change)  # lse is held to ~2e-3
        else:
            assert change < 1e-3, (case, change)


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_rows_that_see_no_key(backend):
    """Sq > Sk with a right bound: row i sees keys i - 76 .. i - 71 (window (3, 2), Sk - Sq
    = -73), so rows 0..70 see none: o = 0 and lse = -inf there, whatever the cap."""
    shape = (1, 2, 1, 113, 40, 32, 0)
    inputs = _inputs(shape, "float16", seed_for("fa-window-unseen", backend), window_size=(3, 2),
                     softcap=5.0)
    o, lse = _op(backend)(**inputs)
    assert torch.isneginf(lse[:, :, :71]).all() and (o[:, :, :71] == 0).all()
    assert torch.isfinite(lse[:, :, 71:]).all()
    check((o, lse), reference(**inputs, precise=True), "float16", inputs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softcap_keeps_nan_rows(backend):
    """A NaN in q makes its row's capped scores NaN (tanh keeps NaN): that row is NaN, the
    others are not."""
    inputs = _inputs((1, 2, 1, 40, 70, 64, 1), "float16", seed_for("fa-softcap-nan", backend),
                     window_size=(16, 0), softcap=20.0)
    inputs["q"][0, 1, 17, 5] = float("nan")
    o, lse = _op(backend)(**inputs)
    assert torch.isnan(lse[0, 1, 17]) and torch.isnan(o[0, 1, 17]).all()
    check((o, lse), reference(**inputs, precise=True), "float16", inputs)


def test_reference_window_and_softcap_definition():
    """The reference against the definition, row by row: row i sees keys j with
    i + Sk - Sq - left <= j <= i + Sk - Sq + right, scores capped before the softmax."""
    sq, sk, d, cap = 9, 6, 32, 2.0
    q = torch.randn(1, 1, sq, d, dtype=torch.float64)
    k = torch.randn(1, 1, sk, d, dtype=torch.float64)
    v = torch.randn(1, 1, sk, d, dtype=torch.float64)
    scores = (q @ k.transpose(-1, -2))[0, 0] / math.sqrt(d)
    for causal, (left, right) in ((False, (1, 2)), (True, (2, -1)), (False, (-1, 0)), (False, (0, -1))):
        o, lse = reference(q, k, v, causal, None, (left, right), cap, precise=True)
        for i in range(sq):
            lo = i + sk - sq - left if left >= 0 else 0
            hi = i + sk - sq + (0 if causal else right) if (causal or right >= 0) else sk - 1
            keys = [j for j in range(sk) if lo <= j <= hi]
            if not keys:
                assert torch.isneginf(lse[0, 0, i]) and (o[0, 0, i] == 0).all(), (causal, left, right, i)
                continue
            s = cap * torch.tanh(scores[i, keys] / cap)
            torch.testing.assert_close(lse[0, 0, i], torch.logsumexp(s, 0))
            torch.testing.assert_close(o[0, 0, i], torch.softmax(s, 0) @ v[0, 0, keys])


def test_flops_count_only_visible_pairs_in_a_window():
    def brute(sq, sk, causal, left, right):
        right = 0 if causal else right
        off = sk - sq
        return sum(1 for i in range(sq) for j in range(sk)
                   if (left < 0 or j >= i + off - left) and (right < 0 or j <= i + off + right))

    for sq in (0, 1, 5, 17):
        for sk in (0, 1, 9, 20):
            for causal in (False, True):
                for window in ((-1, -1), (0, 0), (3, -1), (-1, 2), (2, 5), (30, 30), (0, 40)):
                    if causal and window[1] > 0:
                        continue
                    assert visible_pairs(sq, sk, causal, window) == brute(sq, sk, causal, *window), (
                        sq, sk, causal, window)


# The Triton and Pallas kernels pick their walk's first and last tiles per query block from
# the window: every config's block shapes, on a window with both bounds, a cap and rows that
# see no key.
WINDOW_CONFIG_CASE = dict(shape=(1, 2, 1, 97, 70, 64, 0), window_size=(17, 3), softcap=20.0)


def test_triton_every_config_window_softcap():
    from gks.triton import flash_attention_fwd, flash_attention_fwd_config_names

    for config, name in enumerate(flash_attention_fwd_config_names()):
        inputs = _inputs(WINDOW_CONFIG_CASE["shape"], "float16", seed_for("fa-triton-window-config", config),
                         window_size=WINDOW_CONFIG_CASE["window_size"], softcap=WINDOW_CONFIG_CASE["softcap"])
        out = flash_attention_fwd(**inputs, config=config)
        check(out, reference(**inputs, precise=True), "float16", inputs, f"triton config {name}, window")


def test_pallas_every_config_window_softcap():
    from gks.pallas import _bridge, flash_attention_fwd_config_names

    for config, name in enumerate(flash_attention_fwd_config_names()):
        inputs = _inputs(WINDOW_CONFIG_CASE["shape"], "float16", seed_for("fa-pallas-window-config", config),
                         window_size=WINDOW_CONFIG_CASE["window_size"], softcap=WINDOW_CONFIG_CASE["softcap"])
        out = _bridge.flash_attention_fwd(**inputs, config=config)
        check(out, reference(**inputs, precise=True), "float16", inputs, f"pallas config {name}, window")


# ---- window_size and softcap bad input beyond the spec's table: every backend alike ----

BAD_WINDOWS = [3, (1, 2, 3), (1,), (1.5, 2), "ab", None, (-3, -1), (0, -5)]
BAD_SOFTCAPS = [float("inf"), float("-inf"), -1e-3, 2e30, 1e-31, "x"]


def _bad_call_messages(backend: str, **bad) -> str:
    """The message backend gives for q, k, v of a good shape with `bad`, without its op
    prefix. The CUDA op's checks run through its fake kernel (the library in validate-only
    mode), which needs the library but no GPU."""
    if backend == "cuda":
        if not HAS_NATIVE:
            pytest.skip("the CUDA op's checks need the built library")
        import gks
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            q = torch.empty(1, 4, 16, 64, device="cuda", dtype=torch.float16)
            k = torch.empty(1, 2, 16, 64, device="cuda", dtype=torch.float16)
            with pytest.raises((ValueError, RuntimeError)) as info:
                gks.flash_attention_fwd.op(q, k, k, **bad)
    else:
        q = torch.randn(1, 4, 16, 64, device=DEVICE).half()
        k = torch.randn(1, 2, 16, 64, device=DEVICE).half()
        with pytest.raises(ValueError) as info:
            _op(backend)(q, k, k, **bad)
    text = str(info.value)
    return text[text.index("argument"):] if "argument" in text else text


@pytest.mark.parametrize("bad", BAD_WINDOWS, ids=repr)
def test_bad_window_size_is_refused_alike(bad):
    messages = {b: _bad_call_messages(b, window_size=bad) for b in ("triton", "pallas")}
    assert messages["triton"] == messages["pallas"], messages
    assert messages["triton"].startswith("argument 'window_size' must be (left, right) with each -1 "
                                         "(unbounded) or >= 0, got "), messages
    if HAS_NATIVE:
        cuda_message = _bad_call_messages("cuda", window_size=bad)
        if isinstance(bad, tuple) and all(isinstance(w, int) for w in bad):
            # Through the op's schema (int[]) the ints reach the checks, in a list.
            assert cuda_message == messages["triton"]
        else:  # a scalar, a string, None or floats: the dispatcher refuses them, naming the argument
            assert "argument 'window_size'" in cuda_message, cuda_message


@pytest.mark.parametrize("causal_window", [(0, 1), (-1, 3), (5, 2)], ids=repr)
def test_window_right_with_causal_is_refused_alike(causal_window):
    want = ("argument 'window_size' must have right -1 or 0 with causal=True (causal is right = 0), "
            f"got ({causal_window[0]}, {causal_window[1]})")
    backends = ("triton", "pallas") + (("cuda",) if HAS_NATIVE else ())
    for backend in backends:
        assert _bad_call_messages(backend, causal=True, window_size=causal_window) == want, backend


@pytest.mark.parametrize("bad", BAD_SOFTCAPS, ids=repr)
def test_bad_softcap_is_refused_alike(bad):
    messages = {b: _bad_call_messages(b, softcap=bad) for b in ("triton", "pallas")}
    assert messages["triton"] == messages["pallas"], messages
    assert messages["triton"].startswith("argument 'softcap' must be 0"), messages
    if HAS_NATIVE:
        cuda_message = _bad_call_messages("cuda", softcap=bad)
        if isinstance(bad, str):  # the schema's float refuses it, naming the argument
            assert "argument 'softcap'" in cuda_message, cuda_message
        else:
            assert cuda_message == messages["triton"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_and_softcap_edges_are_accepted(backend):
    """The least and largest caps, a window of (0, 0) with causal, lists for the pair: taken."""
    shape = (1, 2, 1, 20, 30, 32, 1)
    for window, cap in (((0, 0), 1e-30), ([4, -1], 1e30), ((-1, 0), 0.0)):
        inputs = _inputs(shape, "float16", seed_for("fa-edges", backend, cap), window_size=window, softcap=cap)
        _run_and_check(backend, "float16", inputs, f"{backend}/window {window}/softcap {cap:g}")


@requires_native
def test_fake_kernel_takes_a_window_and_a_cap():
    """The op's schema carries window_size (int[]) and softcap; its fake kernel hands them to
    the library's checks and shapes the outputs (no GPU needed)."""
    import gks
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 33, 64, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(2, 2, 50, 64, device="cuda", dtype=torch.bfloat16)
        o, lse = gks.flash_attention_fwd.op(q, k, k, True, None, (16, 0), 30.0)
        assert o.shape == q.shape and lse.shape == (2, 4, 33) and lse.dtype == torch.float32
        o, lse = gks.flash_attention_fwd.op(q, k, k, window_size=[3, 5], softcap=0.0, config=0)
        assert o.shape == q.shape


@requires_native
def test_fake_kernel_takes_deepseek_head_dims():
    """q and k of head dim 192 with v of 128: the fake kernel shapes o [B, Hq, Sq, 128] and
    the library's checks take it, for [B, S, H, D] views too (no GPU needed)."""
    import gks
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 4, 33, 192, device="cuda", dtype=torch.bfloat16)
        k = torch.empty(2, 2, 50, 192, device="cuda", dtype=torch.bfloat16)
        v = torch.empty(2, 2, 50, 128, device="cuda", dtype=torch.bfloat16)
        o, lse = gks.flash_attention_fwd.op(q, k, v, True, None, (16, 0), 30.0)
        assert o.shape == (2, 4, 33, 128) and o.dtype == q.dtype and o.is_contiguous()
        assert lse.shape == (2, 4, 33) and lse.dtype == torch.float32
        v_bshd = torch.empty(2, 50, 2, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        o, _ = gks.flash_attention_fwd.op(q, k, v_bshd, config=2)
        assert o.shape == (2, 4, 33, 128)
        o, _ = gks.flash_attention_fwd.op(q, k, k)  # D = Dv = 192
        assert o.shape == q.shape


@pytest.mark.parametrize("shape", [(1, 4, 2, 97, 150, 192, 1, 128), (2, 2, 1, 70, 45, 192, 0)], ids=_id)
def test_triton_poisoned_outputs_v_head_dim(shape, monkeypatch):
    """Every element of o [B, Hq, Sq, Dv] and lse is written: the Triton op's outputs start
    as NaN (its torch.empty made torch.full(NaN)), here as on a GPU. (Pallas's interpret mode
    starts its outputs as NaN itself; on a GPU the window tests poison every backend.)"""
    from gks.triton import attention as triton_attention

    class PoisonedTorch:  # torch as the module sees it, but for torch.empty
        def __getattr__(self, name):
            return getattr(torch, name)

        @staticmethod
        def empty(*size, **kw):
            return torch.full(size[0] if len(size) == 1 else size, float("nan"), **kw)

    fake_torch = PoisonedTorch()
    inputs = _inputs(shape, "bfloat16", seed_for("fa-triton-poison", shape), window_size=(30, -1))
    ref = reference(**inputs, precise=True)
    monkeypatch.setattr(triton_attention, "torch", fake_torch)
    out = triton_attention.flash_attention_fwd(**inputs)
    assert out[0].shape == ref[0].shape
    check(out, ref, "bfloat16", inputs, f"triton poison/{shape}")


# ---- GPU only: the CUDA kernels with a window and a cap ----

CUDA_WINDOW_CASES = [
    ((1, 4, 1, 97, 97, 64, 1), (16, 0), 0.0),
    ((1, 4, 2, 37, 300, 128, 0), (40, 7), 30.0),
    ((1, 2, 2, 300, 128, 64, 0), (5, 2), 0.0),        # Sq > Sk: rows that see no key
    ((1, 2, 2, 300, 128, 128, 1), (64, -1), 50.0),
    ((1, 8, 1, 1, 1000, 64, 1), (100, 0), 30.0),      # decoding with a sliding window
    ((1, 2, 2, 256, 256, 64, 0), (-1, 31), 0.0),      # right only, no bounds masks
    ((1, 2, 2, 256, 384, 128, 0), (63, -1), 0.5),     # left only
    ((1, 2, 1, 200, 200, 32, 0), (0, 0), 0.0),
    ((1, 2, 1, 200, 200, 96, 1), (1, -1), 30.0),
    ((1, 2, 1, 129, 257, 256, 0), (2000, 2000), 30.0),
    ((1, 4, 2, 97, 300, 192, 1, 128), (40, 0), 30.0),  # DeepSeek's head dims
    ((1, 2, 2, 300, 128, 192, 0, 128), (5, 2), 0.0),   # Sq > Sk: rows that see no key
    ((1, 2, 1, 200, 333, 192, 0), (64, 64), 30.0),
]


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CUDA_WINDOW_CASES, ids=lambda c: f"{_window_id((*c[:2], ''))}cap{c[2]:g}")
def test_cuda_each_kernel_window_softcap(dtype, case):
    """Every CUDA config forced (a Hopper kernel that cannot run a case gives way), with
    scores large enough for the caps to bite."""
    import gks

    shape, window, cap = case
    for config in range(len(ATTENTION.configs)):
        inputs = _inputs(shape, dtype, seed_for("fa-cuda-window", config, dtype, case),
                         k_scale=_large_k_scale(shape[5]) if cap else 1.0,
                         softmax_scale=1.0 if cap else None, window_size=window, softcap=cap)
        out = gks.flash_attention_fwd(**inputs, config=config)
        check(out, reference(**inputs, precise=True), dtype, inputs, f"config {config}/{dtype}/{case}")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dims", [(64, 64), (128, 128), (192, 128)], ids=lambda d: f"D{d[0]}-Dv{d[1]}")
def test_window_softcap_poisoned_outputs(backend, dtype, head_dims):
    """Every element of o and lse is written (buffers start as NaN: the CUDA raw entry on
    [B, S, H, D] storage, every config; the ports' outputs from a poisoned allocator),
    across several Q and K blocks with ragged ends, and rows that see no key."""
    from conftest import poison_allocator

    head_dim, head_dim_v = head_dims
    for shape, window, cap in (((2, 6, 3, 517, 300, head_dim, 0, head_dim_v), (100, 20), 30.0),
                               ((2, 6, 3, 300, 517, head_dim, 1, head_dim_v), (50, 0), 0.0)):
        inputs = _inputs(shape, dtype, seed_for("fa-window-poison", backend, dtype, head_dims, shape),
                         window_size=window, softcap=cap)
        ref = reference(**inputs, precise=True)
        batch, heads, seqlen_q = shape[0], shape[1], shape[3]
        if backend == "cuda":
            if not HAS_NATIVE:
                pytest.skip("the gks CUDA library is not built")
            from gks import cuda

            for config in range(len(ATTENTION.configs)):
                o_buf = torch.full((batch, seqlen_q, heads, head_dim_v), float("nan"), device="cuda",
                                   dtype=inputs["q"].dtype)
                o = o_buf.transpose(1, 2)
                lse = torch.full((batch, heads, seqlen_q), float("nan"), device="cuda")
                cuda.flash_attention_fwd_out(inputs["q"], inputs["k"], inputs["v"], o, lse, inputs["causal"],
                                             None, window, cap, config=config)
                check((o, lse), ref, dtype, inputs, f"poison/config {config}/{dtype}/{shape}")
        else:
            poison_allocator(2 * inputs["q"].numel() * inputs["q"].element_size(), "cuda")
            check(_op(backend)(**inputs), ref, dtype, inputs, f"poison/{backend}/{dtype}/{shape}")


@requires_gpu
@requires_native
def test_cuda_opcheck_and_compile_window_softcap():
    import gks

    inputs = _inputs((1, 4, 2, 65, 130, 64, 1), "bfloat16", seed_for("fa-compile-window"))
    args = (inputs["q"], inputs["k"], inputs["v"], True, None, [16, 0], 30.0)
    torch.library.opcheck(gks.flash_attention_fwd.op, args)
    compiled = torch.compile(lambda q, k, v: gks.flash_attention_fwd(q, k, v, True, window_size=(16, 0),
                                                                      softcap=30.0), fullgraph=True)
    o, lse = compiled(inputs["q"], inputs["k"], inputs["v"])
    eager_o, eager_lse = gks.flash_attention_fwd(*args)
    torch.testing.assert_close(o, eager_o, rtol=0, atol=0)
    torch.testing.assert_close(lse, eager_lse, rtol=0, atol=0)


# (shape, window_size, softcap): DeepSeek's head dims (and D = Dv = 192) on every CUDA config.
CUDA_HEAD_DIM_192_CASES = [
    ((1, 4, 2, 97, 150, 192, 1, 128), (-1, -1), 0.0),
    ((1, 2, 1, 113, 17, 192, 1, 128), (-1, -1), 0.0),   # rows that see no key
    ((1, 8, 1, 1, 300, 192, 0, 128), (-1, -1), 0.0),    # decoding
    ((2, 4, 4, 300, 517, 192, 0, 128), (100, 20), 30.0),
    ((1, 2, 2, 256, 256, 192, 1, 128), (64, 0), 0.0),   # no bounds masks
    ((1, 2, 2, 129, 257, 192, 0), (-1, -1), 30.0),
    ((1, 4, 1, 200, 200, 192, 1), (-1, -1), 0.0),
]


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CUDA_HEAD_DIM_192_CASES,
                         ids=lambda c: f"{_window_id((*c[:2], ''))}cap{c[2]:g}")
def test_cuda_every_config_head_dim_192(dtype, case):
    """Every CUDA config forced on D = 192, with v of 128 (DeepSeek-V3's MLA) and of 192: a
    config that cannot serve the pair gives way to one that can; [B, S, H, D] views in and
    the raw entry's [B, S, H, Dv] output poisoned with NaN."""
    import gks
    from gks import cuda

    shape, window, cap = case
    head_dim_v = full_shape(shape)[7]
    batch, heads, seqlen_q = shape[0], shape[1], shape[3]
    for config in range(len(ATTENTION.configs)):
        for bshd in (False, True):
            inputs = _inputs(shape, dtype, seed_for("fa-cuda-192", config, dtype, case, bshd), bshd=bshd,
                             k_scale=_large_k_scale(shape[5]) if cap else 1.0,
                             softmax_scale=1.0 if cap else None, window_size=window, softcap=cap)
            ref = reference(**inputs, precise=True)
            what = f"config {config}/{dtype}/{case}/bshd={bshd}"
            check(gks.flash_attention_fwd(**inputs, config=config), ref, dtype, inputs, what)
            o = torch.full((batch, seqlen_q, heads, head_dim_v), float("nan"), device="cuda",
                           dtype=inputs["q"].dtype).transpose(1, 2)
            lse = torch.full((batch, heads, seqlen_q), float("nan"), device="cuda")
            cuda.flash_attention_fwd_out(inputs["q"], inputs["k"], inputs["v"], o, lse, inputs["causal"],
                                         inputs["softmax_scale"], window, cap, config=config)
            check((o, lse), ref, dtype, inputs, f"raw entry/{what}")
