# SPDX-License-Identifier: Apache-2.0
"""rmsnorm_bwd beyond the generic sweep (tests/contract), and rmsnorm's autograd through it:
the reference against float64 autograd of F.rms_norm; strided rows, leading dims and 1-D
inputs; dweight the same bits run after run; gks.rmsnorm (torch autograd, on meta tensors
here and on the GPU), gks.triton.rmsnorm (torch.autograd.Function) and gks.pallas.rmsnorm
(jax.custom_vjp, under jax.jit) differentiable in x and weight, saving x and weight alone,
their gradients those of the backward op and within tolerance of float64; and, on the GPU,
the CUDA entry point under every config into poisoned outputs with guards, in place, and
torch.compile(fullgraph=True) with the backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from checks import check_output
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_native, seed_for
import gks
import gks.triton
from gks import registry
from gks.specs.norms import rmsnorm_bwd as reference

SPEC = registry.get("rmsnorm_bwd")
DTYPES = ["float32", "float16", "bfloat16"]
CUDA = HAS_GPU and HAS_NATIVE
requires_cuda = pytest.mark.skipif(not CUDA, reason="the CUDA ops need a GPU and the built library")


def _backends():
    """(name, rmsnorm_bwd over torch tensors) of the backends that run here."""
    from gks.pallas import _bridge

    out = [("triton", gks.triton.rmsnorm_bwd), ("pallas", _bridge.rmsnorm_bwd)]
    if CUDA:
        out.insert(0, ("cuda", gks.rmsnorm_bwd))
    return out


BACKENDS = _backends()
IDS = [b[0] for b in BACKENDS]
TORCH_BACKENDS = [b for b in BACKENDS if b[0] != "pallas"]  # strided views: torch tensors only


def _inputs(shape, dtype, seed):
    """x, dy of `shape` (any leading dims) and weight [N], as the spec makes them."""
    m = 1
    for d in shape[:-1]:
        m *= d
    inputs = SPEC.make_inputs((m, shape[-1]), dtype, DEVICE, seed)
    return {**inputs, "x": inputs["x"].reshape(shape), "dy": inputs["dy"].reshape(shape)}


def _float64_autograd(dy, x, weight, eps):
    """torch's own gradients of F.rms_norm in float64."""
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_()
    y = F.rms_norm(x64, (x.shape[-1],), w64, eps)
    return torch.autograd.grad(y, (x64, w64), dy.double())


@pytest.mark.parametrize("shape", [(9, 37), (2, 3, 64), (129,), (1, 1), (0, 16)], ids=str)
def test_the_reference_is_float64_autograd_of_f_rms_norm(shape):
    inputs = _inputs(shape, "float32", seed_for("bwd-ref", shape))
    dx, dweight = reference(**inputs, precise=True)
    want_dx, want_dweight = _float64_autograd(**inputs)
    torch.testing.assert_close(dx, want_dx)
    torch.testing.assert_close(dweight, want_dweight)
    # The fp32 form rounds the float64 one.
    dx32, dweight32 = reference(**inputs)
    assert dx32.dtype == torch.float32 and dweight32.dtype == torch.float32
    torch.testing.assert_close(dx32.double(), dx, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name,fn", TORCH_BACKENDS, ids=[b[0] for b in TORCH_BACKENDS])
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_of_x_and_dy(name, fn, dtype):
    # Rows of 1000 inside rows of 1024, and a 3-D view whose leading dims do not merge.
    dt = getattr(torch, dtype)
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("bwd-strided", name, dtype))
    base_x = torch.randn((6, 5, 1024), generator=gen, device=DEVICE).to(dt)
    base_dy = torch.randn((6, 5, 1024), generator=gen, device=DEVICE).to(dt)
    w = (1 + 0.1 * torch.randn((1000,), generator=gen, device=DEVICE)).to(dt)
    for index in ((slice(None), 0, slice(0, 1000)), (slice(None), slice(1, 4), slice(0, 1000))):
        x, dy = base_x[index], base_dy[index]
        assert not x.is_contiguous()
        inputs = {"dy": dy, "x": x, "weight": w, "eps": 1e-6}
        out = fn(**inputs)
        assert out[0].shape == x.shape
        check_output(SPEC, out, inputs, dtype, f"{name} strided {tuple(x.shape)}")


@pytest.mark.parametrize("name,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("shape", [(2, 3, 40), (129,)], ids=str)
def test_leading_dims_and_1d(name, fn, shape):
    inputs = _inputs(shape, "float32", seed_for("bwd-dims", name, shape))
    out = fn(**inputs)
    assert out[0].shape == inputs["x"].shape and out[1].shape == (shape[-1],)
    check_output(SPEC, out, inputs, "float32", f"{name} {shape}")


@pytest.mark.parametrize("name,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("shape", [(300, 96), (5, 40000)], ids=str)
def test_dweight_is_the_same_bits_every_run(name, fn, shape):
    """No atomics: the column sums are added in a fixed order (rows held whole, and rows
    walked in chunks)."""
    inputs = _inputs(shape, "bfloat16", seed_for("bwd-bits", name, shape))
    first = fn(**inputs)
    for _ in range(2):
        again = fn(**inputs)
        assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])


@pytest.mark.parametrize("name,fn", BACKENDS, ids=IDS)
def test_a_zero_row_and_a_large_eps(name, fn):
    inputs = _inputs((4, 300), "float32", seed_for("bwd-zero-row", name))
    inputs["x"][1].zero_()
    for eps in (1e-6, 10.0):
        out = fn(**{**inputs, "eps": eps})  # row 1: dx = dy * w / sqrt(eps), nothing for dweight
        check_output(SPEC, out, {**inputs, "eps": eps}, "float32", f"{name} eps={eps}")


# ---- rmsnorm's autograd ----

AUTOGRAD_CASES = [((33, 1000), "float32"), ((2, 5, 96), "bfloat16"), ((4, 40000), "float16")]


def _check_grads(grads, inputs, dtype, what):
    """(x.grad, weight.grad) against float64 autograd, with the backward op's tolerances."""
    check_output(SPEC, tuple(grads), inputs, dtype, what, ref=_float64_autograd(**inputs))


def _torch_autograd(rmsnorm, inputs, needs=(True, True)):
    """rmsnorm's gradients through autograd, and what it saved for the backward."""
    x = inputs["x"].clone().requires_grad_(needs[0])
    w = inputs["weight"].clone().requires_grad_(needs[1])
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = rmsnorm(x, w, inputs["eps"])
    y.backward(inputs["dy"])
    return x.grad, w.grad, saved, (x, w)


@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=str)
def test_triton_rmsnorm_is_differentiable(case):
    shape, dtype = case
    inputs = _inputs(shape, dtype, seed_for("bwd-autograd-triton", case))
    dx, dweight, saved, leaves = _torch_autograd(gks.triton.rmsnorm, inputs)
    assert [t.data_ptr() for t in saved] == [t.data_ptr() for t in leaves]  # x and weight alone
    direct = gks.triton.rmsnorm_bwd(inputs["dy"], inputs["x"], inputs["weight"], inputs["eps"])
    assert torch.equal(dx, direct[0]) and torch.equal(dweight, direct[1])
    _check_grads((dx, dweight), inputs, dtype, f"triton autograd {shape}")


def test_triton_rmsnorm_takes_an_expanded_gradient_and_one_input_requiring_grad():
    inputs = _inputs((7, 64), "float16", seed_for("bwd-expanded"))
    w = inputs["weight"].clone().requires_grad_()
    gks.triton.rmsnorm(inputs["x"], w, 1e-6).sum().backward()  # dy: ones, stride 0
    ones = torch.ones_like(inputs["x"])
    assert torch.equal(w.grad, gks.triton.rmsnorm_bwd(ones, inputs["x"], inputs["weight"])[1])
    dx, dweight, _, _ = _torch_autograd(gks.triton.rmsnorm, inputs, needs=(True, False))
    assert dweight is None
    assert torch.equal(dx, gks.triton.rmsnorm_bwd(inputs["dy"], inputs["x"], inputs["weight"])[0])


def test_triton_rmsnorm_without_grad_runs_the_plain_forward():
    inputs = _inputs((3, 20), "float32", seed_for("bwd-nograd"))
    x = inputs["x"].clone().requires_grad_()
    with torch.no_grad():
        y = gks.triton.rmsnorm(x, inputs["weight"])
    assert not y.requires_grad


@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=str)
def test_pallas_grad_inside_jit(case):
    """jax.grad through gks.pallas.rmsnorm inside jax.jit: the Pallas backward's gradients."""
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from gks import pallas
    from gks.pallas._bridge import _to_jax, _to_torch

    shape, dtype = case
    inputs = _inputs(shape, dtype, seed_for("bwd-autograd-pallas", case))
    x, w, dy = (_to_jax(inputs[n]) for n in ("x", "weight", "dy"))
    eps = inputs["eps"]

    def loss(x, w):
        y = pallas.rmsnorm(x, w, eps)
        return jnp.sum(y.astype(jnp.float32) * dy.astype(jnp.float32))

    dx, dweight = jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w)
    assert dx.dtype == x.dtype and dweight.dtype == w.dtype
    direct = pallas.rmsnorm_bwd(dy, x, w, eps)
    got = _to_torch((dx, dweight))
    assert torch.equal(got[0], _to_torch(direct[0])) and torch.equal(got[1], _to_torch(direct[1]))
    _check_grads(got, inputs, dtype, f"pallas grad {shape}")


@requires_native
def test_cuda_rmsnorm_is_differentiable_on_meta_tensors():
    """gks.rmsnorm's autograd traced on meta tensors (the fake kernels, which run the
    library's checks): y.sum()'s expanded gradient reaches gks.rmsnorm_bwd, which gives
    gradients of x's and weight's shapes and dtypes."""
    import gks

    gks.rmsnorm  # registers torch.ops.gks.* (whatever ran before this test)
    x = torch.empty(2, 3, 96, device="meta", dtype=torch.bfloat16, requires_grad=True)
    w = torch.empty(96, device="meta", dtype=torch.bfloat16, requires_grad=True)
    y = torch.ops.gks.rmsnorm(x, w, 1e-6)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype
    assert w.grad.shape == w.shape and w.grad.dtype == w.dtype


@requires_native
def test_cuda_backward_fake_kernel_refuses_a_bad_dy():
    import gks

    gks.rmsnorm_bwd  # registers torch.ops.gks.* (whatever ran before this test)
    x = torch.empty(4, 96, device="meta", dtype=torch.float16)
    w = torch.empty(96, device="meta", dtype=torch.float16)
    with pytest.raises(ValueError, match="gks.rmsnorm_bwd: argument 'dy' must have the shape of 'x' "
                                         r"\[4, 96\], got \[4, 95\]"):
        torch.ops.gks.rmsnorm_bwd(torch.empty(4, 95, device="meta", dtype=torch.float16), x, w)


def _jax_ffi():
    jax = pytest.importorskip("jax")
    pytest.importorskip("jax_tvm_ffi", reason="jax-tvm-ffi is not installed")
    import gks.jax as gj

    return jax, gj


@requires_native
def test_jax_rmsnorm_grad_runs_the_backward_custom_call():
    """jax.grad through gks.jax.rmsnorm (jax.custom_vjp): gradients of x's and weight's
    shapes and dtypes, from a custom call of rmsnorm_bwd beside rmsnorm's (traced and
    lowered for CUDA: no GPU needed)."""
    jax, gj = _jax_ffi()
    import jax.numpy as jnp

    x = jax.ShapeDtypeStruct((6, 256), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((256,), jnp.bfloat16)
    # value_and_grad: the loss's value keeps the forward's call (grad alone needs only the
    # backward's, for a loss whose gradient does not depend on y).
    grad = jax.value_and_grad(lambda x, w: gj.rmsnorm(x, w).astype(jnp.float32).sum(), argnums=(0, 1))
    _, (dx, dweight) = jax.eval_shape(grad, x, w)
    assert dx == x and dweight == w
    text = jax.jit(grad).trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
    assert "custom_call @gks.rmsnorm." in text and "custom_call @gks.rmsnorm_bwd." in text, text
    with pytest.raises(ValueError, match="gks.rmsnorm_bwd: argument 'dy' must have the shape of 'x'"):
        jax.eval_shape(gj.rmsnorm_bwd, jax.ShapeDtypeStruct((6, 255), jnp.bfloat16), x, w)


@requires_cuda
def test_jax_rmsnorm_grad_on_the_gpu():
    jax, gj = _jax_ffi()
    import jax.numpy as jnp

    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("needs a CUDA GPU that JAX sees (jax[cuda])")
    from gks.pallas._bridge import _to_jax, _to_torch

    inputs = _inputs((33, 1000), "bfloat16", seed_for("bwd-jax-gpu"))
    x, w, dy = (_to_jax(inputs[n]) for n in ("x", "weight", "dy"))

    def loss(x, w):
        return jnp.sum(gj.rmsnorm(x, w, 1e-6).astype(jnp.float32) * dy.astype(jnp.float32))

    got = _to_torch(jax.jit(jax.grad(loss, argnums=(0, 1)))(x, w))
    direct = gks.rmsnorm_bwd(inputs["dy"], inputs["x"], inputs["weight"], 1e-6)
    assert torch.equal(got[0], direct[0]) and torch.equal(got[1], direct[1])
    _check_grads(got, inputs, "bfloat16", "gks.jax grad")


@requires_cuda
@pytest.mark.parametrize("case", AUTOGRAD_CASES, ids=str)
def test_cuda_rmsnorm_is_differentiable(case):
    shape, dtype = case
    inputs = _inputs(shape, dtype, seed_for("bwd-autograd-cuda", case))
    dx, dweight, saved, leaves = _torch_autograd(gks.rmsnorm, inputs)
    assert [t.data_ptr() for t in saved] == [t.data_ptr() for t in leaves]  # x and weight alone
    direct = gks.rmsnorm_bwd(inputs["dy"], inputs["x"], inputs["weight"], inputs["eps"])
    assert torch.equal(dx, direct[0]) and torch.equal(dweight, direct[1])
    _check_grads((dx, dweight), inputs, dtype, f"cuda autograd {shape}")


@requires_cuda
def test_cuda_rmsnorm_takes_an_expanded_gradient_and_one_input_requiring_grad():
    inputs = _inputs((7, 64), "float16", seed_for("bwd-expanded-cuda"))
    w = inputs["weight"].clone().requires_grad_()
    gks.rmsnorm(inputs["x"], w, 1e-6).sum().backward()
    ones = torch.ones_like(inputs["x"])
    assert torch.equal(w.grad, gks.rmsnorm_bwd(ones, inputs["x"], inputs["weight"])[1])
    dx, dweight, _, _ = _torch_autograd(gks.rmsnorm, inputs, needs=(True, False))
    assert dweight is None


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_torch_compile_fullgraph_with_backward(dtype):
    inputs = _inputs((33, 1000), dtype, seed_for("bwd-compile", dtype))
    grads = []
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, w: gks.rmsnorm(x, w, 1e-6), fullgraph=True, dynamic=False)
    for fn in (lambda x, w: gks.rmsnorm(x, w, 1e-6), compiled):
        x = inputs["x"].clone().requires_grad_()
        w = inputs["weight"].clone().requires_grad_()
        fn(x, w).backward(inputs["dy"])
        grads.append((x.grad, w.grad))
    for a, b in zip(*grads):
        assert torch.equal(a, b)
    _check_grads(grads[1], inputs, dtype, "compiled")


@requires_cuda
def test_cuda_opcheck_of_the_differentiable_forward():
    inputs = _inputs((17, 129), "bfloat16", seed_for("bwd-opcheck"))
    x = inputs["x"].clone().requires_grad_()
    w = inputs["weight"].clone().requires_grad_()
    torch.library.opcheck(torch.ops.gks.rmsnorm.default, (x, w, 1e-6))


_GUARD = 64


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(3, 7), (2000, 96), (5, 4096), (600, 1000), (2, 40000), (0, 64)], ids=str)
def test_cuda_every_config_into_poisoned_outputs(dtype, shape):
    """dx inside a NaN-filled buffer with a guard row on each side, dweight followed by NaN
    guards: every element written, nothing around them; in place (dx is x) the same bits."""
    import gks.cuda

    inputs = _inputs(shape, dtype, seed_for("bwd-configs", dtype, shape))
    m, n = shape
    dt = getattr(torch, dtype)
    ref = reference(**inputs, precise=True)
    for config in range(len(SPEC.configs)):
        buf = torch.full((m + 2, n + 16), float("nan"), dtype=dt, device="cuda")
        dx = buf[1:m + 1, 8:n + 8]
        wbuf = torch.full((n + _GUARD,), float("nan"), dtype=dt, device="cuda")
        dweight = wbuf[:n]
        gks.cuda.rmsnorm_bwd_out(inputs["dy"], inputs["x"], inputs["weight"], dx, dweight, inputs["eps"], config)
        torch.cuda.synchronize()
        check_output(SPEC, (dx, dweight), inputs, dtype, f"config {config}", ref)
        guard = buf.clone()
        guard[1:m + 1, 8:n + 8] = float("nan")
        assert torch.isnan(guard).all() and torch.isnan(wbuf[n:]).all(), f"config {config}: wrote outside"
        x = inputs["x"].clone()
        dweight2 = torch.empty_like(dweight)
        gks.cuda.rmsnorm_bwd_out(inputs["dy"], x, inputs["weight"], x, dweight2, inputs["eps"], config)
        assert torch.equal(x, dx) and torch.equal(dweight2, dweight), f"config {config}: in place differs"


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with tens of GB")
@pytest.mark.xdist_group("large-memory")
@pytest.mark.parametrize("name", IDS)
def test_rows_past_element_2_31(name):
    """x and dy of more than 2^31 elements (tests/contract/test_large_offsets.py's shape): dx's
    rows on both sides of element 2^31 against the float64 reference of those rows, and
    dweight, a sum over every row, against float64 sums taken a block of rows at a time."""
    fn = dict(BACKENDS)[name]
    n = 4096
    m = 2**31 // n + 3
    inputs = SPEC.make_inputs((m, n), "float16", "cuda", seed_for("bwd-large"))
    dx, dweight = fn(**inputs)
    torch.cuda.synchronize()
    pick = torch.tensor([0, 1, 2**31 // n - 1, 2**31 // n, m - 1], device="cuda")
    picked = {k: (v.index_select(0, pick) if isinstance(v, torch.Tensor) and v.dim() == 2 else v)
              for k, v in inputs.items()}
    want_dx, _ = reference(**picked, precise=True)
    torch.testing.assert_close(dx.index_select(0, pick).double(), want_dx, atol=SPEC.tolerance["float16"][0],
                               rtol=SPEC.tolerance["float16"][1])
    want = torch.zeros(n, dtype=torch.float64, device="cuda")
    scale = torch.zeros_like(want)
    for start in range(0, m, 1 << 16):
        block = {k: (v[start:start + (1 << 16)] if isinstance(v, torch.Tensor) and v.dim() == 2 else v)
                 for k, v in inputs.items()}
        x = block["x"].double()
        terms = block["dy"].double() * x * torch.rsqrt(x.square().mean(-1, keepdim=True) + block["eps"])
        want += terms.sum(0)
        scale += terms.abs().sum(0)
    atol, rtol = SPEC.tolerance["float16"]
    err = (dweight.double() - want).abs()
    assert bool((err <= atol + rtol * want.abs() + 2.0**-16 * scale).all()), f"{name}: dweight off by {err.max()}"
    del inputs, dx, dweight
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
