# SPDX-License-Identifier: Apache-2.0
"""softmax(rmsnorm(x) * weight), fused, beyond the generic sweep: against the two-step
reference and eager PyTorch, non-finite and degenerate rows, layouts, poisoned outputs (what
every op guarantees is in tests/contract).

Without a GPU, Triton runs in its interpreter and Pallas in interpret mode (both on CPU
tensors); the CUDA cases skip and run on the GPU machine.
"""

from __future__ import annotations

import importlib

import pytest
import torch
import torch.nn.functional as F

from checks import assert_matches
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_gpu, requires_native, seed_for
import gks
from gks import registry

SPEC = registry.get("softmax_rmsnorm")
TOL = SPEC.tolerance
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INF, NAN = float("inf"), float("nan")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[1]


def _rand(shape, dtype, seed, device=DEVICE, mean=0.0, scale=1.0):
    gen = torch.Generator(device=device).manual_seed(seed)
    return (mean + scale * torch.randn(shape, generator=gen, device=device)).to(dtype)


def _cuda_out(config):
    def run(x, w, eps=1e-6):
        y = torch.empty_like(x)
        gks.cuda.softmax_rmsnorm_out(x, w, y, eps, config)
        return y

    return run


def _backends(aligned_only=False):
    """(name, fn) of the backends that can run here, over torch tensors. aligned_only drops
    Pallas: JAX takes only aligned buffers, so an unaligned view cannot reach it."""
    out = []
    if HAS_GPU and HAS_NATIVE:
        out.append(("cuda", gks.softmax_rmsnorm))
        for config in range(len(SPEC.configs)):  # every kernel shape, forced
            out.append((f"cuda-config{config}", _cuda_out(config)))
    out.append(("triton", SPEC.backend("triton").load()))
    if not aligned_only:
        out.append(("pallas", SPEC.backend("pallas").load()))
    return out


def _check(y, x, w, eps, what):
    assert_matches(y, SPEC.reference(x, w, eps, precise=True), _name(x.dtype), TOL, what)


# ---------------------------------------------------------------- the fused meaning


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [7, 1000, 4096, 40000])
def test_matches_the_two_step_reference(name, fn, dtype, n):
    # fused == softmax(rmsnorm(x)) computed as two separate fp64 steps.
    x = _rand((3, n), dtype, seed_for("two-step", name, str(dtype), n))
    w = _rand((n,), dtype, seed_for("two-step-w", name, str(dtype), n), mean=1.0, scale=0.5)
    two_step = gks.reference.softmax(gks.reference.rmsnorm(x, w, 1e-6, precise=True), precise=True)
    assert_matches(fn(x, w, 1e-6), two_step, _name(dtype), TOL, f"{name} vs two-step n={n}")


def test_reference_keeps_the_intermediate_in_fp32():
    # The fp32 reference equals fp32 rmsnorm then fp32 softmax (no rounding to x's dtype in
    # between), and for bf16 that is closer to the fp64 truth than eager PyTorch's two
    # steps, which round the normalized row to bf16.
    x = _rand((64, 512), torch.bfloat16, 1, device="cpu")
    w = _rand((512,), torch.bfloat16, 2, device="cpu", mean=1.0, scale=0.5)
    exact = SPEC.reference(x, w, 1e-6, precise=True)
    fused = gks.reference.softmax_rmsnorm(x, w, 1e-6)
    z32 = gks.reference.rmsnorm(x.float(), w.float(), 1e-6)
    assert torch.equal(fused, torch.softmax(z32, -1).to(torch.bfloat16))
    eager = torch.softmax(F.rms_norm(x, (512,), w, 1e-6), -1)

    def err(y):
        return ((y.double() - exact).abs() / exact).mean().item()

    assert err(fused) < err(eager)


@pytest.mark.parametrize("name,fn", _backends())
def test_close_to_eager_pytorch_in_fp32(name, fn):
    x = _rand((4, 3000), torch.float32, 3)
    w = _rand((3000,), torch.float32, 4, mean=1.0, scale=0.5)
    eager = torch.softmax(F.rms_norm(x, (3000,), w, 1e-5), -1)
    torch.testing.assert_close(fn(x, w, 1e-5), eager, atol=1e-9, rtol=3e-5)


# ---------------------------------------------------------------- non-finite and degenerate rows


def _special_rows(n: int, dtype, seed: int):
    x = _rand((6, n), torch.float32, seed, device="cpu")
    mid, last = n // 2, n - 1
    x[0] = 0.0                       # zero row: logits all 0, uniform 1/N
    x[1, mid] = NAN                  # NaN: NaN row
    x[2, last] = INF                 # +inf: inv_rms = 0, inf * 0 = NaN: NaN row
    x[3, 0] = -INF                   # -inf: NaN row as well
    x[4] *= 1e-20                    # tiny values: eps dominates the rms
    x[5] *= 1e4                      # large values: normalized back to O(1)
    return x.to(dtype).to(DEVICE)


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [5, 1000, 20000, 40000])
def test_special_rows(name, fn, dtype, n):
    x = _special_rows(n, dtype, seed_for("special", name, str(dtype), n))
    w = _rand((n,), dtype, seed_for("special-w", n), mean=1.0, scale=0.5)
    y = fn(x, w, 1e-6)
    ref = SPEC.reference(x, w, 1e-6, precise=True)
    assert torch.equal(torch.isnan(y).cpu(), torch.isnan(ref).cpu()), f"{name}: NaN pattern differs"
    assert torch.isnan(y[1:4]).all()
    torch.testing.assert_close(y[0].double().cpu(), torch.full((n,), 1.0 / n, dtype=torch.float64),
                               atol=TOL[_name(dtype)][0], rtol=TOL[_name(dtype)][1])
    assert_matches(y, ref, _name(dtype), TOL, f"{name} special n={n}")


@pytest.mark.parametrize("name,fn", _backends())
def test_zero_row_with_zero_eps_is_nan(name, fn):
    # rsqrt(0 + 0) = inf and 0 * inf = NaN: the reference's (and torch's) result.
    x = _rand((2, 100), torch.float32, 5)
    x[0] = 0.0
    w = torch.ones(100, device=DEVICE)
    y = fn(x, w, 0.0)
    assert torch.isnan(y[0]).all() and not torch.isnan(y[1]).any()
    _check(y, x, w, 0.0, f"{name} eps=0")


# ---------------------------------------------------------------- layouts


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_row_views(name, fn, dtype):
    base = _rand((6, 5, 1024), dtype, seed_for("strided", name, str(dtype)))
    w = _rand((1000,), dtype, seed_for("strided-w", name, str(dtype)), mean=1.0, scale=0.5)
    for x in (base[:, 0, :1000], base[:, 1:4, :1000]):
        assert not x.is_contiguous()
        _check(fn(x, w, 1e-6), x, w, 1e-6, f"{name} strided {tuple(x.shape)}")


@pytest.mark.parametrize("name,fn", _backends())
def test_leading_dims_and_1d(name, fn):
    x = _rand((2, 3, 4, 33), torch.float32, 6)
    w = _rand((33,), torch.float32, 7, mean=1.0)
    _check(fn(x, w, 1e-5), x, w, 1e-5, f"{name} 4-D")
    v = _rand((129,), torch.float32, 8)
    wv = _rand((129,), torch.float32, 9, mean=1.0)
    _check(fn(v, wv, 1e-6), v, wv, 1e-6, f"{name} 1-D")


@pytest.mark.parametrize("name,fn", _backends(aligned_only=True))
@pytest.mark.parametrize("which", ["x", "weight"])
def test_unaligned_pointers(name, fn, which):
    # Either operand off 16-byte alignment sends the CUDA backend down its scalar path.
    x = _rand((8, 4096), torch.float16, 10)
    w = _rand((4096,), torch.float16, 11, mean=1.0, scale=0.5)
    buf = _rand((8 * 4096 + 1,), torch.float16, 12)
    if which == "x":
        x = buf[1:].view(8, 4096)
    else:
        w = buf[1:4097]
    _check(fn(x, w, 1e-6), x, w, 1e-6, f"{name} unaligned {which}")


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("shape", [(0, 64), (3, 0)])
def test_empty(name, fn, shape):
    x = torch.empty(shape, device=DEVICE)
    y = fn(x, torch.ones(shape[-1], device=DEVICE), 1e-6)
    assert y.shape == x.shape and y.dtype == x.dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [16384, 20000, 32768])
@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_triton_persistent_rows(dtype, n, layout):
    # The Triton kernel for long one-pass rows: one program an SM walks rows and loads the
    # next row's quarters while it reduces and stores the current one. More rows than
    # programs and a count that does not divide evenly (a program's last row loads itself
    # again), special rows among ordinary ones (a NaN row must not leak into the next),
    # masked and unmasked rows, a row view with a stride between rows.
    softmax_mod = importlib.import_module("gks.triton.softmax")
    if softmax_mod._fused_rows_plan(softmax_mod.next_pow2(n), dtype.itemsize, n == softmax_mod.next_pow2(n)) is None:
        pytest.skip("rows of this length and dtype run one program a row")
    m = 2 * softmax_mod._persistent_programs(torch.device(DEVICE)) + 3
    seed = seed_for("tri-persistent", str(dtype), n, layout)
    if layout == "contiguous":
        x = _rand((m, n), dtype, seed, scale=2.0)
    else:
        x = _rand((m, 2, n + 8), dtype, seed, scale=2.0)[:, 1, :n]
    special = _special_rows(n, dtype, seed_for("tri-persistent-special", str(dtype), n))
    for i, row in enumerate(range(1, m, max(m // 6, 1))):
        x[row] = special[i % len(special)]
    w = _rand((n,), dtype, seed_for("tri-persistent-w", str(dtype), n), mean=1.0, scale=0.5)
    y = gks.triton.softmax_rmsnorm(x, w, 1e-6)
    ref = SPEC.reference(x, w, 1e-6, precise=True)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN pattern differs"
    assert_matches(y, ref, _name(dtype), TOL, f"triton persistent {layout} {tuple(x.shape)}")


# ---------------------------------------------------------------- CUDA-only behaviour


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", [-1, *range(len(SPEC.configs))])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7), (5, 1000), (5, 4096), (3, 4097), (4, 32768), (2, 40000), (1, 262144)])
def test_out_variant_writes_every_element_and_nothing_else(config, dtype, shape):
    m, n = shape
    x = _rand(shape, dtype, seed_for("poison", config, str(dtype), shape))
    w = _rand((n,), dtype, seed_for("poison-w", config, str(dtype), shape), mean=1.0, scale=0.5)
    buf = torch.full((m + 2, n + 16), NAN, dtype=dtype, device="cuda")
    y = buf[1 : m + 1, 8 : n + 8]
    gks.cuda.softmax_rmsnorm_out(x, w, y, 1e-6, config)
    torch.cuda.synchronize()
    _check(y, x, w, 1e-6, f"out config={config}")
    guard = buf.clone()
    guard[1 : m + 1, 8 : n + 8] = NAN
    assert torch.isnan(guard).all(), "the kernel wrote outside y"


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", [-1, 4])  # the heuristic, staged
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(300, 16392), (133, 32768), (1, 24000)])
def test_persistent_blocks_walk_many_rows(config, dtype, shape):
    # The staged kernel's blocks (one an SM) each take several rows and fetch the next
    # while they work on the current one: more rows than SMs, a count that does not divide
    # evenly, special rows among ordinary ones (a NaN row must not leak into its
    # neighbours), a poisoned output.
    m, n = shape
    x = _rand(shape, dtype, seed_for("staged", config, str(dtype), shape), scale=2.0)
    special = _special_rows(n, dtype, seed_for("staged-special", str(dtype), n))
    for i, row in enumerate(range(m // 2, m, max(m // 12, 1))):
        x[row] = special[i % len(special)]
    w = _rand((n,), dtype, seed_for("staged-w", str(dtype), n), mean=1.0, scale=0.5)
    buf = torch.full((m + 2, n + 16), NAN, dtype=dtype, device="cuda")
    y = buf[1 : m + 1, 8 : n + 8]
    gks.cuda.softmax_rmsnorm_out(x, w, y, 1e-6, config)
    torch.cuda.synchronize()
    ref = SPEC.reference(x, w, 1e-6, precise=True)
    assert torch.equal(torch.isnan(y), torch.isnan(ref)), "NaN pattern differs"
    assert_matches(y, ref, _name(dtype), TOL, f"staged config={config} {shape}")
    guard = buf.clone()
    guard[1 : m + 1, 8 : n + 8] = NAN
    assert torch.isnan(guard).all(), "the kernel wrote outside y"


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_chained_calls_read_the_previous_output(dtype):
    # The staged kernel starts early (programmatic dependent launch): each call must still
    # wait for the one before it on the stream, whose output it reads here. Ten chained
    # calls with no synchronization between them; then each step against the reference of
    # the step before.
    m, n = 400, 32768
    x = _rand((m, n), dtype, seed_for("chained", str(dtype)), scale=2.0)
    w = _rand((n,), dtype, seed_for("chained-w", str(dtype)), mean=1.0, scale=0.5)
    steps = [x]
    for _ in range(10):
        y = torch.empty_like(x)
        gks.cuda.softmax_rmsnorm_out(steps[-1], w, y, 1e-6, -1)
        steps.append(y)
    torch.cuda.synchronize()
    for i in range(1, len(steps)):
        ref = SPEC.reference(steps[i - 1], w, 1e-6, precise=True)
        assert_matches(steps[i], ref, _name(dtype), TOL, f"chained call {i}")


