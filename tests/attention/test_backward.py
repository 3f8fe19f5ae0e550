# SPDX-License-Identifier: Apache-2.0
"""flash_attention_bwd on the CUDA (a GPU only), Triton and Pallas backends, and the differentiable
gks.triton.flash_attention (torch.autograd) and gks.pallas.flash_attention (jax.custom_vjp):
gradients against the float64 reference with FlashAttention's criterion (error at most 2x
PyTorch's own in the input dtype, gks.specs.attention.check_bwd) over head dims, causal,
windows, softcap, GQA, odd lengths and Sq != Sk; rows that see no key; finite differences
of the reference itself (torch.autograd.gradcheck); strided views. The registry-driven
contract tests (tests/contract) cover the spec's test shapes, bad inputs and NaN inputs.

Without a GPU the kernels run in Triton's interpreter and Pallas interpret mode; the
GPU-only cases (determinism, 64-bit offsets, larger shapes) skip.
"""

from __future__ import annotations

import math

import pytest
import torch

from conftest import DEVICE, requires_gpu, requires_native, seed_for
from gks import registry
from gks.reference import flash_attention_bwd as reference
from gks.reference import flash_attention_fwd as forward_reference
from gks.specs.attention import bwd_bytes_moved, bwd_flops, check_bwd, flops, full_shape

BACKENDS = (pytest.param("cuda", marks=(requires_gpu, requires_native)), "triton", "pallas")
SPEC = registry.get("flash_attention_bwd")


def _op(backend: str):
    if backend == "cuda":
        import gks

        return gks.flash_attention_bwd
    if backend == "triton":
        from gks.triton import flash_attention_bwd

        return flash_attention_bwd
    from gks.pallas._bridge import flash_attention_bwd

    return flash_attention_bwd


def _randn(gen, shape, dtype, scale=1.0):
    return (torch.randn(shape, generator=gen, device=DEVICE, dtype=torch.float32) * scale).to(dtype)


def _inputs(shape, dtype, seed, *, bshd=False, k_scale=1.0, softmax_scale=None, window_size=(-1, -1),
            softcap=0.0):
    """q, k, v for (B, Hq, Hkv, Sq, Sk, D, causal[, Dv]), the forward's o and lse (the fp32
    reference, o rounded to the dtype), dO, and the options. bshd: q, k, v, o and dO as
    .transpose(1, 2) views of [B, S, H, D] buffers and lse as a view of a [B, Sq, Hq] one."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, causal, head_dim_v = full_shape(shape)
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    q = _randn(gen, (batch, heads_q, seqlen_q, head_dim), dt)
    k = _randn(gen, (batch, heads_kv, seqlen_k, head_dim), dt, k_scale)
    v = _randn(gen, (batch, heads_kv, seqlen_k, head_dim_v), dt)
    do = _randn(gen, (batch, heads_q, seqlen_q, head_dim_v), dt)
    o, lse = forward_reference(q, k, v, bool(causal), softmax_scale, window_size, softcap)
    inputs = {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do}
    if bshd:
        inputs = {n: t.transpose(1, 2).contiguous().transpose(1, 2) for n, t in inputs.items()}
        inputs["lse"] = lse.transpose(1, 2).contiguous().transpose(1, 2)
        assert not inputs["q"].is_contiguous() and not inputs["lse"].is_contiguous()
    return {**inputs, "causal": bool(causal), "softmax_scale": softmax_scale, "window_size": window_size,
            "softcap": softcap}


def _run_and_check(backend, dtype, inputs, what):
    out = _op(backend)(**inputs)
    check_bwd(out, reference(**inputs, precise=True), dtype, inputs, what)
    return out


def _large_k_scale(head_dim):
    # With softmax_scale 1, scores of std 50/3 (up to about +-60): a cap of 30 bites.
    return 50.0 / (3.0 * math.sqrt(head_dim))


def _id(shape):
    return "x".join(map(str, shape))


# (shape, window_size, softcap, large scores, dtype): every head dim, D = 192 with Dv = 128;
# causal and not, windows (both bounds, one, causal sliding), softcaps that bite and a tiny
# one; GQA / MQA; Sq = Sk, Sq < Sk, Sq > Sk with rows that see no key; lengths off every tile.
CASES = [
    ((1, 4, 2, 37, 90, 64, 1), (-1, -1), 0.0, False, "float16"),        # GQA, causal, Sq < Sk
    ((1, 2, 2, 70, 30, 32, 1), (-1, -1), 0.0, False, "bfloat16"),       # Sq > Sk: rows 0..39 see no key
    ((1, 2, 1, 50, 50, 64, 0), (5, 3), 0.0, False, "float16"),          # both bounds
    ((1, 4, 1, 40, 100, 32, 1), (20, 0), 0.0, False, "bfloat16"),       # causal sliding window, MQA
    ((1, 2, 1, 90, 45, 32, 0), (3, 2), 0.0, False, "float16"),          # Sq > Sk: rows 0..41 see no key
    ((1, 2, 2, 60, 100, 64, 0), (-1, 7), 0.0, False, "bfloat16"),       # right bound only
    ((1, 2, 2, 60, 100, 64, 0), (7, -1), 0.0, False, "float16"),        # left bound only
    ((1, 4, 2, 45, 77, 64, 0), (-1, -1), 30.0, True, "float16"),        # a cap that bites
    ((1, 2, 1, 40, 60, 32, 1), (10, 0), 30.0, True, "bfloat16"),        # cap, causal window
    ((1, 2, 2, 33, 50, 128, 0), (-1, -1), 0.5, False, "float16"),       # a tiny cap: near uniform
    ((1, 4, 2, 30, 70, 192, 1, 128), (16, 0), 30.0, True, "bfloat16"),  # DeepSeek's head dims
    ((1, 2, 1, 20, 40, 256, 0), (-1, -1), 0.0, False, "float16"),
    ((1, 2, 2, 40, 40, 96, 1), (-1, -1), 0.0, False, "bfloat16"),
    ((2, 3, 3, 17, 129, 192, 0), (-1, -1), 0.0, False, "float16"),      # Sk past a tile by one
]


def _case_id(case):
    shape, window, cap, _, dtype = case
    return f"{_id(shape)}-w{window[0]}_{window[1]}-cap{cap:g}-{dtype}"


def _case_inputs(case, salt):
    shape, window, cap, large, dtype = case
    return _inputs(shape, dtype, seed_for("fa-bwd", salt, case), k_scale=_large_k_scale(shape[5]) if large else 1.0,
                   softmax_scale=1.0 if large else None, window_size=window, softcap=cap)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_matches_reference(backend, case):
    inputs = _case_inputs(case, backend)
    _run_and_check(backend, case[4], inputs, f"{backend}/{_case_id(case)}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_bshd_views(backend):
    """q, k, v, o, dO as [B, S, H, D] buffers seen as [B, H, S, D], lse as a [B, Sq, Hq] one."""
    shape = (1, 4, 2, 45, 70, 64, 1)
    inputs = _inputs(shape, "bfloat16", seed_for("fa-bwd-bshd", backend), bshd=True, window_size=(30, 0))
    dq, dk, dv = _run_and_check(backend, "bfloat16", inputs, f"{backend}/bshd")
    assert dq.is_contiguous() and dk.is_contiguous() and dv.is_contiguous()


@pytest.mark.parametrize("backend", BACKENDS)
def test_rows_that_see_no_key_contribute_nothing(backend):
    """Sq > Sk, causal: rows 0..32 see no key (lse = -inf). Their dq is exactly 0, and their
    dO, however large, changes no bit of dq, dk, dv elsewhere."""
    inputs = _inputs((1, 2, 1, 40, 7, 64, 1), "float16", seed_for("fa-bwd-unseen", backend))
    assert torch.isneginf(inputs["lse"][:, :, :33]).all() and torch.isfinite(inputs["lse"][:, :, 33:]).all()
    dq, dk, dv = _run_and_check(backend, "float16", inputs, f"{backend}/unseen rows")
    assert (dq[:, :, :33] == 0).all() and (dq[:, :, 33:] != 0).any()
    loud = dict(inputs)
    loud["do"] = inputs["do"].clone()
    loud["do"][:, :, :33] = 1000.0
    for a, b in zip((dq, dk, dv), _op(backend)(**loud)):
        assert torch.equal(a, b)


@pytest.mark.parametrize("backend", BACKENDS)
def test_keys_no_row_sees_get_zero(backend):
    """A window (2, 0) with Sq < Sk: row i sees keys i + 38 .. i + 40, so keys 0..37 are seen by
    no row and their dk, dv are 0."""
    inputs = _inputs((1, 2, 1, 20, 60, 32, 0), "bfloat16", seed_for("fa-bwd-unseen-keys", backend),
                     window_size=(2, 0))
    _, dk, dv = _run_and_check(backend, "bfloat16", inputs, f"{backend}/unseen keys")
    assert (dk[:, :, :38] == 0).all() and (dv[:, :, :38] == 0).all()
    assert (dk[:, :, 38:] != 0).any() and (dv[:, :, 38:] != 0).any()


@pytest.mark.parametrize("backend", BACKENDS)
def test_explicit_softmax_scale(backend):
    inputs = _inputs((1, 2, 2, 45, 77, 64, 1), "float16", seed_for("fa-bwd-scale", backend), softmax_scale=0.3)
    _run_and_check(backend, "float16", inputs, f"{backend}/scale=0.3")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [False, True])
def test_empty_sequences(backend, causal):
    """Sq = 0: dk = dv = 0; Sk = 0: dq = 0 (and DeepSeek's head dims alike)."""
    op = _op(backend)
    for head_dims in ((64, 64), (192, 128)):
        for seqlen_q, seqlen_k in ((0, 9), (5, 0)):
            inputs = _inputs((2, 4, 2, seqlen_q, seqlen_k, head_dims[0], int(causal), head_dims[1]), "float16",
                             seed_for("fa-bwd-empty", backend, seqlen_q))
            dq, dk, dv = op(**inputs)
            assert dq.shape == inputs["q"].shape and dk.shape == inputs["k"].shape and dv.shape == inputs["v"].shape
            assert dq.dtype == dk.dtype == dv.dtype == torch.float16
            assert (dq == 0).all() and (dk == 0).all() and (dv == 0).all()


def test_reference_softcap_bites_in_the_softcap_cases():
    """The caps of 30 and 0.5 change the gradients well past the tolerance (a kernel that
    dropped the cap's derivative would fail), and check_bwd says so."""
    for case in CASES:
        if not case[2]:
            continue
        inputs = _case_inputs(case, "reference")
        capped = reference(**inputs, precise=True)
        plain = reference(**{**inputs, "softcap": 0.0}, precise=True)
        change = max((a - b).abs().max().item() for a, b in zip(capped, plain))
        assert change > 0.05, (case, change)
        # (Large uncapped scores against the capped lse overflow: then it is not finite.)
        wrong = tuple(g.to(getattr(torch, case[4])) for g in plain)
        with pytest.raises(AssertionError, match="max error|not finite"):
            check_bwd(wrong, capped, case[4], inputs)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_check_bwd_takes_the_fp32_reference_and_refuses_a_small_error(dtype):
    """The criterion is not vacuous: the fp32 reference passes it, and a gradient off by 5% of
    its largest value at one element fails it (which gradient: any)."""
    inputs = _inputs((1, 4, 2, 37, 60, 64, 1), dtype, seed_for("fa-bwd-criterion", dtype), window_size=(20, 0))
    exact = reference(**inputs, precise=True)
    check_bwd(reference(**inputs), exact, dtype, inputs)
    for i in range(3):
        out = list(reference(**inputs))
        g = out[i].clone()
        g.view(-1)[g.numel() // 3] += 0.05 * exact[i].abs().max().to(g.dtype)
        out[i] = g
        with pytest.raises(AssertionError, match="max error"):
            check_bwd(tuple(out), exact, dtype, inputs)


class _ReferenceAttention(torch.autograd.Function):
    """o of the float64 forward reference, whose backward is the float64 backward reference:
    what torch.autograd.gradcheck compares with finite differences of the forward."""

    @staticmethod
    def forward(ctx, q, k, v, causal, softmax_scale, window_size, softcap):
        o, lse = forward_reference(q, k, v, causal, softmax_scale, window_size, softcap, precise=True)
        ctx.save_for_backward(q, k, v, o, lse)
        ctx.options = (causal, softmax_scale, window_size, softcap)
        return o

    @staticmethod
    def backward(ctx, do):
        return (*reference(do, *ctx.saved_tensors, *ctx.options, precise=True), None, None, None, None)


# (B, Hq, Hkv, Sq, Sk, D, Dv, causal, window, softcap, softmax_scale)
GRADCHECK_CASES = [
    (1, 2, 1, 4, 6, 8, 8, True, (-1, -1), 0.0, None),     # GQA, causal, Sq < Sk
    (1, 2, 2, 6, 3, 8, 4, True, (-1, -1), 0.0, None),     # Sq > Sk: rows that see no key; Dv != D
    (2, 3, 1, 5, 5, 4, 4, False, (1, 2), 3.0, 0.7),       # window, softcap, scale, MQA
    (1, 1, 1, 3, 7, 4, 4, False, (-1, -1), 0.5, 2.0),     # a cap that bites hard
    (1, 2, 1, 5, 8, 4, 6, True, (2, 0), 1.5, None),       # causal sliding window with a cap
]


@pytest.mark.parametrize("case", GRADCHECK_CASES, ids=lambda c: "-".join(map(str, c[:8])) + f"-w{c[8]}-cap{c[9]}")
def test_reference_gradients_are_the_forwards_derivatives(case):
    """torch.autograd.gradcheck: the float64 backward reference against finite differences
    of the float64 forward reference, on tiny cases."""
    batch, heads_q, heads_kv, seqlen_q, seqlen_k, head_dim, head_dim_v, causal, window, cap, scale = case
    gen = torch.Generator().manual_seed(seed_for("fa-bwd-gradcheck", case))
    q = torch.randn(batch, heads_q, seqlen_q, head_dim, generator=gen, dtype=torch.float64, requires_grad=True)
    k = torch.randn(batch, heads_kv, seqlen_k, head_dim, generator=gen, dtype=torch.float64, requires_grad=True)
    v = torch.randn(batch, heads_kv, seqlen_k, head_dim_v, generator=gen, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, v: _ReferenceAttention.apply(q, k, v, causal, scale, window, cap), (q, k, v))


def test_reference_is_autograd_of_the_forward():
    """A larger case than gradcheck's: the backward reference equals torch.autograd through
    the float64 forward math (attention_grads_autograd), to rounding."""
    from gks.specs.attention import attention_grads_autograd

    inputs = _inputs((2, 4, 2, 33, 57, 32, 1), "float16", seed_for("fa-bwd-autograd"), window_size=(12, 0),
                     softcap=4.0)
    f64 = {n: (t.double() if isinstance(t, torch.Tensor) else t) for n, t in inputs.items()}
    f64["o"], f64["lse"] = forward_reference(f64["q"], f64["k"], f64["v"], True, None, (12, 0), 4.0, precise=True)
    ours = reference(**f64, precise=True)
    theirs = attention_grads_autograd(f64["do"], f64["q"], f64["k"], f64["v"], True, None, torch.float64, (12, 0), 4.0)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_flops_and_bytes():
    """Five matmuls: 2 (3 D + 2 Dv) flops a visible pair, 2.5x the forward's where D = Dv."""
    for shape in ((2, 8, 2, 100, 300, 64, 1), (1, 4, 4, 77, 77, 128, 0)):
        assert bwd_flops(shape) == 2.5 * flops(shape)
    shape = (1, 4, 2, 50, 80, 192, 1, 128)
    assert bwd_flops(shape) == 2 * 4 * (3 * 192 + 2 * 128) * sum(min(80, i + 31) for i in range(50))
    # q, dq (D), o, dO (Dv) per query row; k, dk (D), v, dv (Dv) per key; lse (fp32).
    assert bwd_bytes_moved(shape, "bfloat16") == 2 * (4 * 50 * (2 * 192 + 2 * 128) + 2 * 2 * 80 * (192 + 128)) + 4 * 200


# ---- the differentiable ops


AUTOGRAD_CASES = [
    ((1, 4, 2, 37, 53, 64, 1), (-1, -1), 0.0, "float16"),
    ((1, 2, 1, 40, 30, 32, 0), (6, 4), 5.0, "bfloat16"),          # window + cap, Sq > Sk
    ((1, 4, 2, 20, 33, 192, 1, 128), (-1, -1), 0.0, "bfloat16"),  # DeepSeek's head dims
]


def _autograd_id(case):
    return f"{_id(case[0])}-w{case[1][0]}_{case[1][1]}-cap{case[2]:g}-{case[3]}"


@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=_autograd_id)
def test_triton_autograd_saves_only_qkv_o_lse_and_gives_the_backward(case):
    from gks.triton import flash_attention, flash_attention_bwd, flash_attention_fwd

    shape, window, cap, dtype = case
    inputs = _inputs(shape, dtype, seed_for("fa-bwd-autograd-triton", case), window_size=window, softcap=cap)
    q, k, v = (inputs[n].clone().requires_grad_() for n in "qkv")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        o = flash_attention(q, k, v, inputs["causal"], None, window, cap)
    o_ref, lse = flash_attention_fwd(inputs["q"], inputs["k"], inputs["v"], inputs["causal"], None, window, cap)
    assert torch.equal(o, o_ref)
    assert [t.data_ptr() for t in saved[:4]] == [q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr()]
    assert len(saved) == 5 and saved[4].shape == lse.shape and torch.equal(saved[4], lse)
    o.backward(inputs["do"])
    direct = flash_attention_bwd(inputs["do"], inputs["q"], inputs["k"], inputs["v"], o_ref, lse,
                                 inputs["causal"], None, window, cap)
    for grad, d in zip((q.grad, k.grad, v.grad), direct):
        assert torch.equal(grad, d)
    fwd_out = {**inputs, "o": o_ref, "lse": lse}
    check_bwd((q.grad, k.grad, v.grad), reference(**fwd_out, precise=True), dtype, fwd_out, "triton autograd")


def test_cuda_forward_is_differentiable_in_o_on_meta_tensors():
    """gks.flash_attention_fwd's autograd, traced on meta tensors (the fake kernels): o
    requires grad and lse does not (non-differentiable), and o.sum()'s expanded gradient
    reaches the backward op, which gives dq, dk, dv of q's, k's and v's shapes and dtype."""
    import gks

    gks.flash_attention_fwd  # registers the ops
    q = torch.empty(1, 4, 8, 192, device="meta", dtype=torch.bfloat16, requires_grad=True)
    k = torch.empty(1, 2, 9, 192, device="meta", dtype=torch.bfloat16, requires_grad=True)
    v = torch.empty(1, 2, 9, 128, device="meta", dtype=torch.bfloat16, requires_grad=True)
    o, lse = torch.ops.gks.flash_attention_fwd(q, k, v, True)
    assert o.requires_grad and not lse.requires_grad
    o.sum().backward()
    for t in (q, k, v):
        assert t.grad.shape == t.shape and t.grad.dtype == t.dtype


@requires_gpu
@requires_native
@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=_autograd_id)
def test_cuda_autograd_saves_only_qkv_o_lse_and_gives_the_backward(case):
    """gks.flash_attention_fwd under autograd: it saves q, k, v, o and lse only, and the
    gradients are gks.flash_attention_bwd's on them (the same bits), within FA's criterion
    of the float64 reference."""
    import gks

    shape, window, cap, dtype = case
    inputs = _inputs(shape, dtype, seed_for("fa-bwd-autograd-cuda", case), window_size=window, softcap=cap)
    q, k, v = (inputs[n].clone().requires_grad_() for n in "qkv")
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        o, lse = gks.flash_attention_fwd(q, k, v, inputs["causal"], None, window, cap)
    assert [t.data_ptr() for t in saved] == [t.data_ptr() for t in (q, k, v, o, lse)]
    o.backward(inputs["do"])
    direct = gks.flash_attention_bwd(inputs["do"], inputs["q"], inputs["k"], inputs["v"], o.detach(), lse,
                                     inputs["causal"], None, window, cap)
    _assert_same_gradients((q.grad, k.grad, v.grad), direct)
    fwd_out = {**inputs, "o": o.detach(), "lse": lse}
    check_bwd((q.grad, k.grad, v.grad), reference(**fwd_out, precise=True), dtype, fwd_out, "cuda autograd")


@requires_gpu
@requires_native
def test_cuda_autograd_under_torch_compile_fullgraph():
    import gks

    inputs = _inputs((1, 4, 2, 45, 70, 64, 1), "bfloat16", seed_for("fa-bwd-compile"))
    grads = []
    for fn in (lambda q, k, v: gks.flash_attention_fwd(q, k, v, True)[0],
               torch.compile(lambda q, k, v: gks.flash_attention_fwd(q, k, v, True)[0], fullgraph=True)):
        q, k, v = (inputs[n].clone().requires_grad_() for n in "qkv")
        fn(q, k, v).backward(inputs["do"])
        grads.append((q.grad, k.grad, v.grad))
    _assert_same_gradients(*grads)


@requires_gpu
@requires_native
def test_cuda_flash_attention_in_cuda_graphs():
    """gks.flash_attention (o only, differentiable) captured forward and backward by
    torch.cuda.make_graphed_callables: replays on new inputs give eager's gradients (the
    kernels' temporaries come from the stream-ordered pool, which graphs capture)."""
    import gks

    shape = (1, 4, 2, 200, 333, 128, 1)
    sample = _inputs(shape, "bfloat16", 0)
    fn = torch.cuda.make_graphed_callables(lambda q, k, v: gks.flash_attention(q, k, v, True),
                                           tuple(sample[n].clone().requires_grad_() for n in "qkv"))
    for seed in (1, 2):
        inputs = _inputs(shape, "bfloat16", seed_for("fa-bwd-graphs", seed))
        grads = []
        for f in (fn, lambda q, k, v: gks.flash_attention(q, k, v, True)):
            q, k, v = (inputs[n].clone().requires_grad_() for n in "qkv")
            o = f(q, k, v)
            o.backward(inputs["do"])
            grads.append((o.detach(), q.grad, k.grad, v.grad))
        assert torch.equal(grads[0][0], grads[1][0])
        _assert_same_gradients(grads[0][1:], grads[1][1:])


def _assert_same_gradients(a, b):
    """dk and dv bit for bit; dq up to the order of its fp32 atomic adds (the wgmma kernel's),
    a last-bit difference of the rounded result."""
    (dq_a, dk_a, dv_a), (dq_b, dk_b, dv_b) = a, b
    assert torch.equal(dk_a, dk_b) and torch.equal(dv_a, dv_b)
    torch.testing.assert_close(dq_a, dq_b, rtol=1.6e-2, atol=1e-5)


def test_triton_autograd_takes_an_expanded_gradient_and_partial_requires_grad():
    """o.sum() hands the backward an expanded (stride 0) gradient; only k requires grad."""
    from gks.triton import flash_attention, flash_attention_bwd, flash_attention_fwd

    inputs = _inputs((1, 2, 1, 30, 41, 32, 1), "float16", seed_for("fa-bwd-expanded"))
    k = inputs["k"].clone().requires_grad_()
    flash_attention(inputs["q"], k, inputs["v"], causal=True).sum().backward()
    o, lse = flash_attention_fwd(inputs["q"], inputs["k"], inputs["v"], True)
    _, dk, _ = flash_attention_bwd(torch.ones_like(o), inputs["q"], inputs["k"], inputs["v"], o, lse, True)
    assert torch.equal(k.grad, dk)


def test_triton_autograd_refuses_bad_input_as_the_forward():
    from gks.triton import flash_attention

    q = torch.randn(1, 4, 16, 48, device=DEVICE).half()
    k = torch.randn(1, 2, 16, 48, device=DEVICE).half()
    with pytest.raises(ValueError, match="head dim .* must be one of 32, 64, 96, 128, 192, 256, got 48"):
        flash_attention(q, k, k)


def _jax(t):
    from gks.pallas._bridge import _to_jax

    return _to_jax(t)


@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=_autograd_id)
def test_pallas_grad_inside_jit(case):
    """jax.grad of a loss through gks.pallas.flash_attention, all inside jax.jit: the
    gradients of the Pallas backward on the Pallas forward's o and lse."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from gks import pallas

    shape, window, cap, dtype = case
    inputs = _inputs(shape, dtype, seed_for("fa-bwd-autograd-pallas", case), window_size=window, softcap=cap)
    q, k, v, do = (_jax(inputs[n]) for n in ("q", "k", "v", "do"))
    causal = inputs["causal"]

    def loss(q, k, v):
        o = pallas.flash_attention(q, k, v, causal, None, window, cap)
        return jnp.sum(o.astype(jnp.float32) * do.astype(jnp.float32))

    grads = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    o, lse = pallas.flash_attention_fwd(q, k, v, causal, None, window, cap)
    direct = pallas.flash_attention_bwd(do, q, k, v, o, lse, causal, None, window, cap)
    got = tuple(torch.from_dlpack(g) for g in grads)
    for g, d in zip(got, direct):
        # The same kernels; XLA may compile the code around them otherwise inside the outer
        # jit (on the CPU a tanh or a sum differs in the last bits), hence not bitwise.
        assert g.dtype == getattr(torch, dtype)
        torch.testing.assert_close(g, torch.from_dlpack(d))
    fwd_out = {**inputs, "o": torch.from_dlpack(o), "lse": torch.from_dlpack(lse)}
    check_bwd(got, reference(**fwd_out, precise=True), dtype, fwd_out, "pallas jax.grad")
    # The value of the differentiable op is the forward's o.
    assert bool(jnp.array_equal(jax.jit(lambda q, k, v: pallas.flash_attention(q, k, v, causal, None, window, cap))(
        q, k, v), o))


def test_pallas_grad_of_empty_sequences():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from gks import pallas

    q = jnp.ones((1, 2, 5, 64), jnp.float16)
    k = jnp.ones((1, 1, 0, 64), jnp.float16)
    dq, dk, dv = jax.grad(lambda q, k, v: pallas.flash_attention(q, k, v, True).astype(jnp.float32).sum(),
                          argnums=(0, 1, 2))(q, k, k)
    assert dq.shape == q.shape and dk.shape == k.shape and not bool(dq.any())


# ---- GPU only


# Causal GQA; no mask (D = 64, Sq > Sk: the rotated walks); a sliding window with GQA;
# causal over more key blocks (160) than an H100 or H200 has SMs (the grid launched last key
# block first).
DETERMINISM_CASES = [((2, 16, 4, 1000, 1000, 128, 1), (-1, -1)), ((1, 8, 8, 1500, 700, 64, 0), (-1, -1)),
                     ((1, 8, 2, 900, 1300, 128, 0), (200, 50)), ((1, 2, 1, 300, 20480, 64, 1), (-1, -1))]


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("case", DETERMINISM_CASES, ids=lambda c: _id(c[0]) + f"-w{c[1][0]}_{c[1][1]}")
def test_deterministic_bitwise(backend, case):
    """deterministic=True: the same inputs give the same bits, run after run, and the float64
    reference's gradients (CUDA on sm_90: wgmma.ws adding dQ in a fixed order of key blocks;
    the default adds it in whatever order the blocks finish)."""
    shape, window = case
    inputs = _inputs(shape, "bfloat16", seed_for("fa-bwd-determinism", backend, shape), window_size=window)
    first = _op(backend)(**inputs, deterministic=True)
    for _ in range(3):
        for a, b in zip(first, _op(backend)(**inputs, deterministic=True)):
            assert torch.equal(a, b)
    check_bwd(first, reference(**inputs, precise=True), "bfloat16", inputs, f"{backend}/deterministic")


# The cases of the wgmma kernel (head dims 64 and 128, v's the same), each config forced:
# CASES' and larger ones past its 128-key and 64/128-row blocks, every mask, GQA, a cap.
WGMMA_CASES = [c for c in CASES if c[0][5] in (64, 128) and len(c[0]) == 7] + [
    ((2, 4, 2, 300, 517, 128, 1), (-1, -1), 0.0, False, "bfloat16"),   # GQA, causal, Sq < Sk
    ((1, 2, 2, 257, 130, 128, 0), (40, 3), 0.0, False, "float16"),      # both bounds, Sq > Sk
    ((1, 4, 1, 200, 200, 128, 0), (-1, -1), 30.0, True, "bfloat16"),   # a cap that bites, MQA
    ((1, 2, 2, 300, 260, 128, 1), (-1, -1), 0.0, False, "float16"),     # causal, rows that see no key
    ((2, 2, 1, 129, 1, 64, 0), (-1, -1), 0.0, False, "bfloat16"),      # one key
    ((1, 8, 2, 640, 640, 64, 1), (100, 0), 0.0, False, "float16"),      # causal sliding window, GQA
    ((1, 2, 2, 1, 300, 128, 0), (-1, -1), 0.0, False, "bfloat16"),     # one query row
]


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", ["mma.sync", "wgmma", "wgmma.ws"])
@pytest.mark.parametrize("case", WGMMA_CASES, ids=_case_id)
def test_cuda_configs_match_reference(config, case):
    """Every CUDA config forced on the wgmma kernels' head dims, poisoned outputs (the
    allocator's fresh blocks hold NaN bits); on a GPU other than sm_90 the wgmma kernels
    give way."""
    import gks
    from conftest import poison_allocator

    inputs = _case_inputs(case, "configs")
    ref = reference(**inputs, precise=True)
    index = SPEC.config_names("cuda").index(config)
    poison_allocator(sum(r.numel() * 2 for r in ref), DEVICE)
    out = gks.flash_attention_bwd(**inputs, config=index)
    check_bwd(out, ref, case[-1], inputs, f"{config}/{_case_id(case)}")


@requires_gpu
@requires_native
def test_cuda_path_says_which_kernel_runs():
    """flash_attention_bwd_path: wgmma.ws on sm_90 at D = Dv = 64 and 128 unless another
    config is forced, with or without determinism (a forced wgmma gives way to mma.sync for
    it); mma.sync elsewhere; a config past the table refused."""
    from gks import cuda

    sm90 = torch.cuda.get_device_capability() == (9, 0)
    for head_dim, head_dim_v in ((32, 32), (64, 64), (96, 96), (128, 128), (192, 128), (256, 256)):
        i = _inputs((1, 2, 1, 8, 8, head_dim, 0, head_dim_v), "float16", 0)
        outs = [torch.empty_like(i[n]) for n in ("q", "k", "v")]
        args = (i["do"], i["q"], i["k"], i["v"], i["o"], i["lse"], *outs)
        hopper = sm90 and head_dim == head_dim_v and head_dim in (64, 128)
        wgmma, ws = ("wgmma", "wgmma.ws") if hopper else ("mma.sync", "mma.sync")
        for config, deterministic, expect in ((-1, False, ws), (0, False, "mma.sync"), (1, False, wgmma),
                                              (2, False, ws), (-1, True, ws), (1, True, "mma.sync"),
                                              (2, True, ws)):
            path = cuda.flash_attention_bwd_path(*args, deterministic=deterministic, config=config)
            assert path == expect, (head_dim, config, deterministic, path)
    # Deterministic over more key blocks than SMs: ordered adds with a mask, mma.sync without.
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for causal, expect in ((1, "wgmma.ws" if sm90 else "mma.sync"), (0, "mma.sync")):
        i = _inputs((1, 2, 1, 8, 128 * (sms + 1), 64, causal), "float16", 0)
        outs = [torch.empty_like(i[n]) for n in ("q", "k", "v")]
        path = cuda.flash_attention_bwd_path(i["do"], i["q"], i["k"], i["v"], i["o"], i["lse"], *outs,
                                             causal=bool(causal), deterministic=True)
        assert path == expect, (causal, path)

    with pytest.raises(ValueError, match="argument 'config' must be -1"):
        cuda.flash_attention_bwd_out(*args, config=len(SPEC.config_names("cuda")))


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", [(2, 16, 4, 1024, 1024, 64, 1), (1, 8, 8, 700, 2000, 128, 0),
                                   (1, 8, 2, 513, 1000, 192, 1, 128), (1, 4, 4, 300, 600, 256, 1)], ids=_id)
def test_larger_shapes(backend, shape):
    from conftest import poison_allocator

    inputs = _inputs(shape, "bfloat16", seed_for("fa-bwd-large", backend, shape))
    ref = reference(**inputs, precise=True)
    poison_allocator(sum(r.numel() * 2 for r in ref), DEVICE)
    out = _op(backend)(**inputs)
    check_bwd(out, ref, "bfloat16", inputs, f"{backend}/{shape}")


@requires_gpu
@pytest.mark.parametrize("backend", [pytest.param("cuda", marks=requires_native), "triton"])
@pytest.mark.parametrize("head_dims", [(64, 64), (192, 128)], ids=lambda d: f"D{d[0]}-Dv{d[1]}")
def test_kv_rows_2_25_elements_apart(backend, head_dims):
    """K/V [1, 1, 200, D] whose keys sit 2^25 + 64 elements apart (64 keys span 2^31
    elements): a kernel that computes such an offset in 32 bits reads the wrong rows."""
    seq_stride = 2**25 + 64
    head_dim, head_dim_v = head_dims
    inputs = _inputs((1, 1, 1, 64, 200, head_dim, 1, head_dim_v), "float16", seed_for("fa-bwd-kv-stride", head_dims))
    buf = torch.empty(200 * seq_stride, dtype=torch.float16, device="cuda")
    strided = dict(inputs)
    for offset, name in ((0, "k"), (head_dim, "v")):
        t = inputs[name]
        view = buf[offset:].as_strided(t.shape, (200 * seq_stride, 200 * seq_stride, seq_stride, 1))
        view.copy_(t)
        strided[name] = view
    out = _op(backend)(**strided)
    torch.cuda.synchronize()
    check_bwd(out, reference(**inputs, precise=True), "float16", inputs, f"kv stride {seq_stride}")
    del buf, strided
    torch.cuda.empty_cache()
