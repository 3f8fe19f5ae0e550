# SPDX-License-Identifier: Apache-2.0
"""cross_entropy beyond the generic sweep (tests/contract): every reduction, forward and
gradient (through autograd) against float64 on every backend, vocabularies from 1 to
151936, strided logits, int32 targets, ignored rows (all of them too), out-of-range targets
(NaN for their row alone), empty batches, non-finite logits; and, on the GPU, the CUDA
entry points under every config, in place, with an expanded dloss, torch.compile with the
backward, opcheck of the custom ops and the memory a forward + backward takes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from conftest import DEVICE, HAS_GPU, HAS_NATIVE, seed_for
import gks
from gks import registry
from gks.specs.loss import cross_entropy as reference, cross_entropy_grad

SPEC = registry.get("cross_entropy")
DTYPES = ["float32", "float16", "bfloat16"]
REDUCTIONS = ["mean", "sum", "none"]
CUDA = HAS_GPU and HAS_NATIVE
requires_cuda = pytest.mark.skipif(not CUDA, reason="the CUDA ops need a GPU and the built library")

# The gradient against float64, (atol, rtol), atol in units of the largest |dloss|: the
# output dtype's rounding over fp32 math (exp2 on the SFU).
GRAD_TOL = {"float32": (1e-6, 1e-4), "float16": (2e-6, 2e-3), "bfloat16": (2e-5, 1.6e-2)}


def _backends():
    import gks.triton

    out = [("triton", gks.triton.cross_entropy)]
    if CUDA:
        out.insert(0, ("cuda", gks.cross_entropy))
    return out


BACKENDS = _backends()
IDS = [b[0] for b in BACKENDS]


def _inputs(rows, cols, dtype, seed, *, ignore=0.125, target_dtype=torch.int64, row_stride=None):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    width = cols if row_stride is None else row_stride
    buf = 2.0 * torch.randn((rows, width), generator=gen, device=DEVICE)
    logits = buf.to(getattr(torch, dtype))[:, :cols]
    target = torch.randint(0, cols, (rows,), generator=gen, device=DEVICE)
    dropped = torch.rand((rows,), generator=gen, device=DEVICE) < ignore
    target = torch.where(dropped, torch.full_like(target, -100), target).to(target_dtype)
    return logits, target


def _dloss(target, reduction, upstream=1.0):
    """The per-row gradient autograd hands the backward for loss * upstream."""
    rows = target.shape[0]
    if reduction == "mean":
        # With every row ignored the mean's factor is moot (ignored rows get 0): 1 then.
        counted = max(int((target != -100).sum().item()), 1)
        return torch.full((rows,), upstream / counted, dtype=torch.float64, device=target.device)
    if reduction == "sum":
        return torch.full((rows,), upstream, dtype=torch.float64, device=target.device)
    return None


def _check_grad(grad, logits, target, dloss, dtype, what, ignore_index=-100):
    want = cross_entropy_grad(logits, target, dloss, ignore_index, precise=True)
    atol, rtol = GRAD_TOL[dtype]
    scale = dloss.abs().max().item() if dloss.numel() else 1.0
    assert grad.dtype == logits.dtype and grad.shape == logits.shape, what
    torch.testing.assert_close(grad.double(), want, atol=atol * scale, rtol=rtol, equal_nan=True,
                               msg=lambda m: f"{what}: {m}")


def _run(fn, logits, target, reduction, upstream=None, ignore_index=-100):
    """The loss, and the gradient of sum(loss * upstream) through autograd."""
    x = logits.detach().requires_grad_()  # the same view: strided rows stay strided
    loss = fn(x, target, ignore_index=ignore_index, reduction=reduction)
    up = torch.ones_like(loss) if upstream is None else upstream.to(loss.dtype)
    (loss * up).sum().backward()
    return loss.detach(), x.grad


def test_the_reference_is_torchs_cross_entropy():
    """On finite logits the reference and its gradient are F.cross_entropy's (float64)."""
    logits, target = _inputs(9, 37, "float32", 1)
    x = logits.double().requires_grad_()
    for reduction in REDUCTIONS:
        want = F.cross_entropy(x, target, ignore_index=-100, reduction=reduction)
        torch.testing.assert_close(reference(logits, target, -100, reduction, precise=True), want.detach())
    x.grad = None
    F.cross_entropy(x, target, reduction="mean").backward()
    torch.testing.assert_close(cross_entropy_grad(logits, target, _dloss(target, "mean"), precise=True), x.grad)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (6, 7), (17, 129), (3, 4097), (2, 32000), (1, 151936)],
                         ids=lambda s: "x".join(map(str, s)))
def test_loss_and_gradient_match_float64(backend, reduction, dtype, shape):
    name, fn = backend
    logits, target = _inputs(*shape, dtype, seed_for("ce", name, reduction, dtype, shape), ignore=0.2)
    upstream = None
    if reduction == "none":  # a gradient per row, not all alike
        upstream = torch.randn(shape[0], device=DEVICE, generator=torch.Generator(device=DEVICE).manual_seed(3))
    loss, grad = _run(fn, logits, target, reduction, upstream)
    want = reference(logits, target, -100, reduction, precise=True)
    atol, rtol = SPEC.tolerance[dtype]
    assert loss.dtype == logits.dtype and loss.shape == want.shape
    torch.testing.assert_close(loss.double(), want, atol=atol, rtol=rtol, equal_nan=True,
                               msg=lambda m: f"{name} {reduction} loss: {m}")
    dloss = _dloss(target, reduction) if upstream is None else upstream.to(logits.dtype).double()
    _check_grad(grad, logits, target, dloss, dtype, f"{name} {reduction} {dtype} {shape}")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_and_int32_targets(backend, dtype):
    name, fn = backend
    logits, target = _inputs(11, 1000, dtype, seed_for("strided", name, dtype), target_dtype=torch.int32,
                             row_stride=1064)
    assert logits.stride(0) == 1064 and target.dtype == torch.int32
    loss, grad = _run(fn, logits, target, "mean")
    torch.testing.assert_close(loss.double(), reference(logits, target, -100, "mean", precise=True),
                               atol=SPEC.tolerance[dtype][0], rtol=SPEC.tolerance[dtype][1])
    _check_grad(grad, logits, target, _dloss(target, "mean"), dtype, f"{name} strided")


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_ignored_rows_give_zero_and_all_ignored_mean_is_nan(backend):
    name, fn = backend
    logits, target = _inputs(5, 33, "float32", seed_for("ignored", name), ignore=0.0)
    target[[1, 3]] = 7
    target[[0, 2, 4]] = torch.tensor([0, 6, 32], device=target.device)  # random ones might be 7 too
    loss, grad = _run(fn, logits, target, "none", ignore_index=7)  # a class index as the ignored value
    assert torch.all(loss[[1, 3]] == 0) and torch.all(loss[[0, 2, 4]] > 0), loss
    assert torch.all(grad[[1, 3]] == 0) and torch.all(grad[[0, 2, 4]].abs().sum(-1) > 0)
    target.fill_(-100)
    loss, grad = _run(fn, logits, target, "mean")
    assert torch.isnan(loss), f"{name}: a mean over no rows is NaN (torch's), got {loss}"
    loss, grad = _run(fn, logits, target, "sum")
    assert loss.item() == 0 and torch.all(grad == 0)


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_out_of_range_targets_make_their_row_nan(backend):
    name, fn = backend
    logits, target = _inputs(6, 20, "bfloat16", seed_for("oob", name), ignore=0.0)
    target[1], target[4] = 20, -1  # V and a negative index that is not ignore_index
    loss, grad = _run(fn, logits, target, "none")
    assert loss[[1, 4]].isnan().all() and not loss[[0, 2, 3, 5]].isnan().any(), loss
    assert grad[[1, 4]].isnan().all() and not grad[[0, 2, 3, 5]].isnan().any()
    total, _ = _run(fn, logits, target, "mean")
    assert total.isnan()


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_an_empty_batch(backend, reduction):
    name, fn = backend
    logits, target = _inputs(0, 50, "float16", 0)
    loss, grad = _run(fn, logits, target, reduction)
    want = reference(logits, target, -100, reduction, precise=True)
    assert loss.shape == want.shape and grad.shape == (0, 50)
    if reduction == "mean":
        assert loss.isnan()
    elif reduction == "sum":
        assert loss.item() == 0


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_non_finite_logits(backend, dtype):
    """-inf target logit: loss +inf, a finite gradient; a -inf elsewhere: a finite row; +inf
    or NaN in a row: NaN; an all -inf row that is ignored: 0 and a zero gradient."""
    name, fn = backend
    logits, target = _inputs(6, 40, dtype, seed_for("nonfinite", name, dtype), ignore=0.0)
    target[5] = -100
    logits[0, target[0]] = float("-inf")
    logits[1, (target[1] + 1) % 40] = float("-inf")
    logits[2, 3] = float("inf")
    logits[3, 5] = float("nan")
    logits[5] = float("-inf")
    upstream = torch.linspace(0.5, 1.5, 6, device=DEVICE)
    loss, grad = _run(fn, logits, target, "none", upstream)
    assert loss[0].item() == float("inf") and torch.isfinite(loss[1]) and torch.isfinite(loss[4])
    assert loss[2].isnan() and loss[3].isnan() and loss[5].item() == 0
    want = reference(logits, target, -100, "none", precise=True)
    torch.testing.assert_close(loss.double(), want, atol=SPEC.tolerance[dtype][0], rtol=SPEC.tolerance[dtype][1],
                               equal_nan=True)
    _check_grad(grad, logits, target, upstream.to(logits.dtype).double(), dtype, f"{name} non-finite")
    assert torch.isfinite(grad[[0, 1, 4]]).all() and torch.all(grad[5] == 0)
    assert grad[[2, 3]].isnan().all()


@pytest.mark.parametrize("backend", BACKENDS, ids=IDS)
def test_bad_backward_arguments_are_named(backend):
    name, _ = backend
    logits, target = _inputs(4, 16, "float32", 0)
    lse = torch.zeros(4, device=DEVICE)
    if name == "cuda":
        import gks.cuda

        def bwd(lse, dloss):
            gks.cuda.cross_entropy_bwd_out(logits, target, lse, dloss, torch.empty_like(logits))
    else:
        from gks.triton.loss import cross_entropy_bwd

        def bwd(lse, dloss):
            cross_entropy_bwd(logits, target, lse, dloss)
    with pytest.raises(TypeError, match="argument 'dloss' must be float32, got float16"):
        bwd(lse, lse.half())
    with pytest.raises(ValueError, match=r"argument 'lse' must have shape \[4\]"):
        bwd(torch.zeros(3, device=DEVICE), lse)


# ---- the CUDA entry points (GPU) ----


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1, 7, 129, 4097, 32001, 151936])
def test_cuda_every_config_in_place_and_expanded_dloss(dtype, cols):
    import gks.cuda

    logits, target = _inputs(9, cols, dtype, seed_for("configs", dtype, cols), ignore=0.2)
    rows = logits.shape[0]
    want_loss = reference(logits, target, -100, "none", precise=True)
    dloss = torch.full((1,), 0.25, device="cuda").expand(rows)  # stride 0, as autograd's sum backward gives
    from gks import _native

    for config in range(len(_native.config_table("cross_entropy"))):
        for loss_dtype in (torch.float32, logits.dtype):
            loss = torch.full((rows,), float("nan"), dtype=loss_dtype, device="cuda")
            lse = torch.full((rows,), float("nan"), device="cuda")
            gks.cuda.cross_entropy_fwd_out(logits, target, loss, lse, -100, config)
            tol = (1e-5, 1e-5) if loss_dtype == torch.float32 else SPEC.tolerance[dtype]
            torch.testing.assert_close(loss.double(), want_loss, atol=tol[0], rtol=tol[1],
                                       msg=lambda m: f"config {config}: {m}")
            torch.testing.assert_close(lse.double(), torch.logsumexp(logits.double(), -1), atol=1e-5, rtol=1e-6)
        dlogits = torch.full_like(logits, float("nan"))
        gks.cuda.cross_entropy_bwd_out(logits, target, lse, dloss, dlogits, -100, config)
        _check_grad(dlogits, logits, target, dloss.double(), dtype, f"config {config}")
        in_place = logits.clone()
        gks.cuda.cross_entropy_bwd_out(in_place, target, lse, dloss, in_place, -100, config)
        assert torch.equal(in_place, dlogits), f"config {config}: in place differs"


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_torch_compile_fullgraph_with_backward(dtype):
    logits, target = _inputs(33, 1000, dtype, seed_for("compile", dtype))
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, t: gks.cross_entropy(x, t), fullgraph=True, dynamic=False)
    x = logits.detach().requires_grad_()
    loss = compiled(x, target)
    loss.backward()  # the backward graph AOTAutograd compiled with the forward
    grad = x.grad
    torch.testing.assert_close(loss.double(), reference(logits, target, precise=True),
                               atol=SPEC.tolerance[dtype][0], rtol=SPEC.tolerance[dtype][1])
    _check_grad(grad, logits, target, _dloss(target, "mean"), dtype, "compiled")


@requires_cuda
def test_cuda_opcheck_of_the_forward_and_backward_ops():
    logits, target = _inputs(17, 129, "bfloat16", 5)
    x = logits.detach().requires_grad_()
    torch.library.opcheck(torch.ops.gks.cross_entropy_fwd.default, (x, target, -100))
    lse = torch.logsumexp(logits.float(), -1)
    dloss = torch.rand(17, device="cuda")
    torch.library.opcheck(torch.ops.gks.cross_entropy_bwd.default, (logits, target, lse, dloss, -100))
    torch.library.opcheck(torch.ops.gks.cross_entropy.default, (x, target, -100, "mean"))


@requires_cuda
def test_cuda_forward_and_backward_hold_no_fp32_logits_buffer():
    """bf16 [T, V]: a forward + backward allocates the gradient and [T] vectors, never a
    [T, V] float32 (or any second [T, V]) buffer."""
    rows, cols = 512, 32000
    logits, target = _inputs(rows, cols, "bfloat16", 9)
    x = logits.detach().requires_grad_()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    gks.cross_entropy(x, target).backward()
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - base
    # The gradient (the allocator rounds it up to 2 MiB) and [T] vectors; a [T, V] fp32
    # buffer would add 65 MB, a second bf16 one 33 MB.
    assert extra < rows * cols * 2 + (4 << 20), f"{extra} bytes beyond the logits: more than one bf16 gradient"
    _check_grad(x.grad, logits, target, _dloss(target, "mean"), "bfloat16", "memory")
