# SPDX-License-Identifier: Apache-2.0
"""RMSNorm beyond the generic sweep: layouts, alignment, poisoned outputs, the CUDA
backend's device checks, and the DLPack path from other frameworks (what every op guarantees
is in tests/contract)."""

from __future__ import annotations

import pytest
import torch

from checks import assert_matches
from conftest import DEVICE, HAS_GPU, requires_gpu, requires_native, seed_for
import gks
from gks import registry

SPEC = registry.get("rmsnorm")
TOL = SPEC.tolerance


def _rand(shape, dtype, seed, device=DEVICE):
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device).to(dtype)


def _backends():
    """(name, fn) of the backends that can run here, over torch tensors."""
    out = []
    if HAS_GPU:
        out.append(("cuda", gks.rmsnorm))
    out.append(("triton", SPEC.backend("triton").load()))
    return out


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_row_view(name, fn, dtype):
    # Rows of 1000 inside rows of 1024 (row stride 1024), and a 3-D view whose leading
    # dims cannot be merged (a slice in the middle dim).
    base = _rand((6, 5, 1024), dtype, seed_for("strided", name, str(dtype)))
    w = _rand((1000,), dtype, seed_for("w", name, str(dtype)))
    for x in (base[:, 0, :1000], base[:, 1:4, :1000]):
        assert not x.is_contiguous()
        y = fn(x, w, 1e-6)
        ref = SPEC.reference(x, w, 1e-6, precise=True)
        assert_matches(y, ref, str(dtype).split(".")[1], TOL, f"{name} strided {tuple(x.shape)}")


@pytest.mark.parametrize("name,fn", _backends())
def test_leading_dims_and_1d(name, fn):
    x = _rand((2, 3, 4, 33), torch.float32, 1)
    w = _rand((33,), torch.float32, 2)
    assert_matches(fn(x, w, 1e-5), SPEC.reference(x, w, 1e-5, precise=True), "float32", TOL, "4-D")
    v = _rand((129,), torch.float32, 3)
    wv = _rand((129,), torch.float32, 4)
    assert_matches(fn(v, wv, 1e-6), SPEC.reference(v, wv, 1e-6, precise=True), "float32", TOL, "1-D")


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("offset", [1, 3])
def test_unaligned_pointer(name, fn, offset):
    # A view starting `offset` elements into its buffer is not 16-byte aligned: the CUDA
    # backend must take its scalar path and still be right.
    buf = _rand((8 * 4096 + offset,), torch.float16, seed_for("unaligned", name, offset))
    x = buf[offset:].view(8, 4096)
    w = _rand((4096,), torch.float16, 5)
    assert_matches(fn(x, w, 1e-6), SPEC.reference(x, w, 1e-6, precise=True), "float16", TOL, "unaligned")


def test_large_eps_and_zero_rows():
    # A zero row gives zeros (0 * rsqrt(eps)); a large eps damps the scale. Checked on the
    # reference here and against it on every backend below.
    x = torch.zeros(3, 16)
    w = torch.ones(16)
    assert torch.equal(gks.reference.rmsnorm(x, w, 1e-6), x)


@pytest.mark.parametrize("name,fn", _backends())
def test_zero_rows_and_large_eps(name, fn):
    x = _rand((4, 300), torch.float32, 7)
    x[1].zero_()
    w = _rand((300,), torch.float32, 8)
    for eps in (1e-6, 10.0):
        y = fn(x, w, eps)
        assert torch.all(y[1] == 0)
        assert_matches(y, SPEC.reference(x, w, eps, precise=True), "float32", TOL, f"eps={eps}")


# ---------------------------------------------------------------- CUDA-only behaviour


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7), (5, 4096), (2, 40000), (1, 262144)])
def test_out_variant_writes_every_element_and_nothing_else(dtype, shape):
    # The output lives inside a NaN-filled buffer with a guard row on each side: every
    # element of y must be written, and no byte around it.
    m, n = shape
    x = _rand(shape, dtype, seed_for("poison", str(dtype), shape))
    w = _rand((n,), dtype, seed_for("poison-w", str(dtype), shape))
    buf = torch.full((m + 2, n + 16), float("nan"), dtype=dtype, device="cuda")
    y = buf[1 : m + 1, 8 : n + 8]
    gks.cuda.rmsnorm_out(x, w, y, 1e-6)
    torch.cuda.synchronize()
    assert_matches(y, SPEC.reference(x, w, 1e-6, precise=True), str(dtype).split(".")[1], TOL, "out")
    guard = buf.clone()
    guard[1 : m + 1, 8 : n + 8] = float("nan")
    assert torch.isnan(guard).all(), "the kernel wrote outside y"


@requires_gpu
@requires_native
def test_cupy_and_jax_through_dlpack():
    cupy = pytest.importorskip("cupy")
    import tvm_ffi

    x = cupy.random.standard_normal((32, 777), dtype=cupy.float32)
    w = cupy.random.standard_normal(777, dtype=cupy.float32)
    y = cupy.full_like(x, cupy.nan)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream, tvm_ffi.use_raw_stream(tvm_ffi.device("cuda", 0), stream.ptr):
        gks.cuda.rmsnorm_out(x, w, y, 1e-6)
    stream.synchronize()
    xt, wt = torch.from_dlpack(x), torch.from_dlpack(w)
    assert_matches(torch.from_dlpack(y), SPEC.reference(xt, wt, 1e-6, precise=True), "float32", TOL, "cupy")

    jax = pytest.importorskip("jax")
    jx = jax.dlpack.from_dlpack(xt.clone())
    jw = jax.dlpack.from_dlpack(wt.clone())
    out = torch.empty_like(xt)
    torch.cuda.synchronize()
    gks.cuda.rmsnorm_out(jx, jw, out, 1e-6)
    torch.cuda.synchronize()
    assert_matches(out, SPEC.reference(xt, wt, 1e-6, precise=True), "float32", TOL, "jax input")


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", range(len(SPEC.configs)), ids=[c["name"] for c in SPEC.configs])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 1), (7, 1000), (3, 4097), (4, 32768), (2, 70000), (3, 262144)])
def test_each_config(config, dtype, shape):
    # Every kernel shape on its own, not only the one the heuristic picks.
    x = _rand(shape, dtype, seed_for("config", config, str(dtype), shape))
    w = _rand((shape[1],), dtype, seed_for("config-w", config, str(dtype), shape))
    y = torch.full_like(x, float("nan"))
    gks.cuda.rmsnorm_out(x, w, y, 1e-6, config)
    torch.cuda.synchronize()
    assert_matches(y, SPEC.reference(x, w, 1e-6, precise=True), str(dtype).split(".")[1], TOL, f"config {config}")


def _in_place_backends():
    import gks.triton

    out = [("triton", gks.triton.rmsnorm_, gks.triton.rmsnorm)]
    if HAS_GPU:
        out.insert(0, ("cuda", gks.rmsnorm_, gks.rmsnorm))
    return out


@pytest.mark.parametrize("name,in_place,out_of_place", _in_place_backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_per_head_norm_of_a_fused_qkv_in_place(name, in_place, out_of_place, dtype):
    # q and k of a fused qkv projection [B, S, (Hq + 2 Hkv) * D], viewed as [B, S, H, D]
    # (rows D apart within a token, a token's stride between tokens), normalized per head
    # with weights [D] in place: no copy, v untouched.
    b, s, hq, hkv, d = 2, 7, 4, 2, 64
    qkv = _rand((b, s, (hq + 2 * hkv) * d), dtype, seed_for("qkv", name, str(dtype)))
    before = qkv.clone()
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hkv) * d].view(b, s, hkv, d)
    wq, wk = _rand((d,), dtype, 1), _rand((d,), dtype, 2)
    expect_q, expect_k = out_of_place(q, wq, 1e-6), out_of_place(k, wk, 1e-6)
    assert in_place(q, wq, 1e-6) is None and in_place(k, wk, 1e-6) is None
    assert torch.equal(q, expect_q) and torch.equal(k, expect_k)
    assert torch.equal(qkv[..., (hq + hkv) * d :], before[..., (hq + hkv) * d :])
    tag = str(dtype).split(".")[1]
    assert_matches(q, SPEC.reference(before[..., : hq * d].view(b, s, hq, d), wq, 1e-6, precise=True), tag, TOL,
                   f"{name}: q heads")


@pytest.mark.parametrize("name,in_place,_out", _in_place_backends(), ids=lambda v: v if isinstance(v, str) else "")
def test_in_place_refuses_a_weight_inside_x(name, in_place, _out):
    x = _rand((4, 64), torch.float32, 3)
    with pytest.raises(ValueError, match="must not share memory with argument"):
        in_place(x, x[0], 1e-6)
