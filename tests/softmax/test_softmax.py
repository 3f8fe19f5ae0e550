# SPDX-License-Identifier: Apache-2.0
"""Softmax beyond the generic sweep: non-finite input on every backend, layouts and
alignment, poisoned outputs, the raw entry's output checks (what every op guarantees is in
tests/contract).

Without a GPU, Triton runs in its interpreter and Pallas in interpret mode (both on CPU
tensors); the CUDA cases skip and run on the GPU machine.
"""

from __future__ import annotations

import pytest
import torch

from checks import assert_matches
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_gpu, requires_native, seed_for
import gks
from gks import registry

SPEC = registry.get("softmax")
TOL = SPEC.tolerance
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
INF, NAN = float("inf"), float("nan")


def _name(dtype: torch.dtype) -> str:
    return str(dtype).split(".")[1]


def _rand(shape, dtype, seed, device=DEVICE, scale=3.0):
    gen = torch.Generator(device=device).manual_seed(seed)
    return (scale * torch.randn(shape, generator=gen, device=device)).to(dtype)


def _backends(aligned_only=False):
    """(name, fn) of the backends that can run here, over torch tensors. aligned_only drops
    Pallas: JAX takes only aligned buffers, so an unaligned view cannot reach it."""
    out = []
    if HAS_GPU and HAS_NATIVE:
        out.append(("cuda", gks.softmax))
        # The two kernel shapes, forced, so each meets every case whatever the heuristic picks.
        for config in range(len(SPEC.configs)):  # every kernel shape, forced
            out.append((f"cuda-config{config}", _cuda_out(config)))
    out.append(("triton", SPEC.backend("triton").load()))
    if not aligned_only:
        out.append(("pallas", SPEC.backend("pallas").load()))
    return out


def _cuda_out(config):
    def run(x):
        y = torch.empty_like(x)
        gks.cuda.softmax_out(x, y, config)
        return y

    return run


def _check(y, x, what):
    assert_matches(y, SPEC.reference(x, precise=True), _name(x.dtype), TOL, what)


# ---------------------------------------------------------------- non-finite input


def _non_finite_rows(n: int, dtype, seed: int) -> torch.Tensor:
    """One row per case, special values spread over the row (first, middle, last column)
    so that they land in different threads and in the ragged tail."""
    x = _rand((12, n), torch.float32, seed, device="cpu")
    mid, last = n // 2, n - 1
    x[0] = -INF                                   # all -inf: NaN row
    x[1, [0, mid, last]] = -INF                   # some -inf: 0 there, the rest normal
    x[2, mid] = INF                               # one +inf: NaN row
    x[3, last] = NAN                              # one NaN: NaN row
    x[4, 0], x[4, last] = INF, -INF               # +inf and -inf: NaN row
    x[5, [0, last]] = INF                         # two +inf: NaN row
    x[6] = -INF                                   # one finite value among -inf: 1 there
    x[6, mid] = 2.0
    x[7] = -INF                                   # NaN among -inf only: NaN row
    x[7, mid] = NAN
    x[8, mid:] = -INF                             # finite first half; second half -inf and
    x[8, last] = NAN                              # one NaN: NaN row
    x[9] = -INF                                   # max far below 0, most threads all -inf:
    x[9, : min(n, 3)] = -1000.0 + torch.arange(min(n, 3), dtype=torch.float32)  # 0, not NaN
    x[10] += 1.0e4                                # large offset: subtracting the max matters
    # x[11] stays finite (control).
    return x.to(dtype).to(DEVICE)


def test_reference_matches_torch_on_non_finite_rows():
    # The semantics every backend is held to: torch.softmax's, on CPU, in float64.
    x = _non_finite_rows(37, torch.float64, 0).cpu()
    y = gks.reference.softmax(x, precise=True)
    assert torch.equal(torch.isnan(y), torch.isnan(torch.softmax(x, -1)))
    assert torch.isnan(y[[0, 2, 3, 4, 5, 7, 8]]).all()
    assert not torch.isnan(y[[1, 6, 9, 10, 11]]).any()
    assert (y[1, [0, 18, 36]] == 0).all() and (y[6] == torch.nn.functional.one_hot(torch.tensor(18), 37)).all()


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 7, 1000, 5000, 20000, 40000])
def test_non_finite_rows_match_torch(name, fn, dtype, n):
    x = _non_finite_rows(n, dtype, seed_for("non-finite", name, str(dtype), n))
    y = fn(x)
    ref = SPEC.reference(x, precise=True)
    nan_ref = torch.isnan(ref)
    assert torch.equal(torch.isnan(y).cpu(), nan_ref.cpu()), f"{name}: NaN pattern differs from torch.softmax"
    assert torch.equal((y == 0).cpu() & torch.isinf(x).cpu(), (ref == 0).cpu() & torch.isinf(x).cpu()), (
        f"{name}: -inf entries must give exactly 0"
    )
    assert_matches(y, ref, _name(dtype), TOL, f"{name} non-finite n={n}")


@pytest.mark.parametrize("name,fn", _backends())
def test_unaligned_non_finite(name, fn):
    # The scalar (unaligned) CUDA path with the same cases.
    x = _non_finite_rows(4097 + 1, torch.float16, 3)[:, 1:]
    _check(fn(x), x, f"{name} unaligned non-finite")


# ---------------------------------------------------------------- layouts and values


def test_triton_holds_16bit_rows_as_pairs_only_where_it_can():
    # Triton's softmax and quantize_int8 hold one-pass 16-bit rows as int32 pairs.
    from gks.triton._common import row_layout
    from gks.triton import _common as mod

    def can(x):
        return mod.can_hold_pairs(x, row_layout(x, "test", "x"), x.shape[-1])

    base = torch.zeros(8, 1026, dtype=torch.float16)
    assert can(base[:, :1000]) and can(base[:, 2:1002])  # even rows, 4-byte aligned
    assert not can(base[:, :999])  # odd length
    assert not can(base[:, 1:1001])  # starts 2 bytes into a 4-byte word
    assert not can(torch.zeros(8, 1001, dtype=torch.bfloat16)[:, :1000])  # odd row stride
    assert not can(torch.zeros(8, 1000, dtype=torch.float32))
    for dtype, bits in ((torch.float16, 0xFC00), (torch.bfloat16, 0xFF80)):
        word = torch.tensor([mod.neg_inf_pair(dtype)], dtype=torch.int32).view(dtype)
        assert torch.isneginf(word).all() and word.view(torch.int16)[0].item() & 0xFFFF == bits


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_row_views(name, fn, dtype):
    # Rows of 1000 inside rows of 1024 (row stride 1024), and a 3-D view whose leading dims
    # cannot be merged (a slice in the middle dim).
    base = _rand((6, 5, 1024), dtype, seed_for("strided", name, str(dtype)))
    long = _rand((3, 2, 20002), dtype, seed_for("strided-long", name, str(dtype)))
    for x in (base[:, 0, :1000], base[:, 1:4, :1000], long[:, 1, :20000]):
        assert not x.is_contiguous()
        _check(fn(x), x, f"{name} strided {tuple(x.shape)}")


@pytest.mark.parametrize("name,fn", _backends())
def test_leading_dims_and_1d(name, fn):
    x = _rand((2, 3, 4, 33), torch.float32, 1)
    _check(fn(x), x, f"{name} 4-D")
    v = _rand((129,), torch.float32, 2)
    _check(fn(v), v, f"{name} 1-D")


@pytest.mark.parametrize("name,fn", _backends(aligned_only=True))
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_unaligned_pointer(name, fn, offset):
    # A view starting `offset` elements into its buffer is not 16-byte aligned: the CUDA
    # backend must take its scalar path and still be right. (Offset 2 is 4-byte aligned:
    # Triton still reads such rows as int32 pairs.)
    for rows, n in ((8, 4096), (2, 20000)):
        buf = _rand((rows * n + offset,), torch.float16, seed_for("unaligned", name, offset, n))
        x = buf[offset:].view(rows, n)
        _check(fn(x), x, f"{name} unaligned {rows}x{n}")


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("n", [31, 4096, 40000])
def test_rows_sum_to_one_and_wide_range(name, fn, n):
    # Logits spread over +-40 (exponentials over 35 orders of magnitude): rows still sum to
    # 1 and the tiny entries are right relative to their size.
    x = _rand((3, n), torch.float32, seed_for("range", name, n), scale=15.0)
    y = fn(x)
    _check(y, x, f"{name} wide range")
    torch.testing.assert_close(y.sum(-1).double().cpu(), torch.ones(3, dtype=torch.float64), atol=1e-5, rtol=0)


@pytest.mark.parametrize("name,fn", _backends())
@pytest.mark.parametrize("shape", [(0, 64), (3, 0), (0,), (2, 0, 5)])
def test_empty(name, fn, shape):
    x = torch.empty(shape, device=DEVICE)
    y = fn(x)
    assert y.shape == x.shape and y.dtype == x.dtype


# ---------------------------------------------------------------- bad input beyond the spec's table


@requires_gpu
@requires_native
def test_cuda_out_rejects_bad_output_and_config():
    x = torch.randn(4, 8, device="cuda")
    with pytest.raises(TypeError, match="argument 'y' must have the dtype of 'x'"):
        gks.cuda.softmax_out(x, torch.empty(4, 8, device="cuda", dtype=torch.float16))
    with pytest.raises(ValueError, match=r"argument 'y' must have the shape of 'x' \[4, 8\], got \[4, 9\]"):
        gks.cuda.softmax_out(x, torch.empty(4, 9, device="cuda"))
    with pytest.raises(ValueError, match="argument 'y' must be on the device of 'x'"):
        gks.cuda.softmax_out(x, torch.empty(4, 8))
    with pytest.raises(ValueError, match="argument 'config' must be -1"):
        gks.cuda.softmax_out(x, torch.empty_like(x), len(SPEC.configs))


# ---------------------------------------------------------------- CUDA-only behaviour


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", [-1, *range(len(SPEC.configs))])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7), (5, 1000), (5, 4096), (3, 4097), (4, 32768), (2, 40000), (1, 262144)])
def test_out_variant_writes_every_element_and_nothing_else(config, dtype, shape):
    # The output lives inside a NaN-filled buffer with a guard row on each side: every
    # element of y must be written, and no byte around it.
    m, n = shape
    x = _rand(shape, dtype, seed_for("poison", config, str(dtype), shape))
    buf = torch.full((m + 2, n + 16), NAN, dtype=dtype, device="cuda")
    y = buf[1 : m + 1, 8 : n + 8]
    gks.cuda.softmax_out(x, y, config)
    torch.cuda.synchronize()
    _check(y, x, f"out config={config}")
    guard = buf.clone()
    guard[1 : m + 1, 8 : n + 8] = NAN
    assert torch.isnan(guard).all(), "the kernel wrote outside y"


@requires_gpu
@requires_native
def test_many_rows_and_grid_edges():
    # Row counts around the 4-rows-per-block edge of the warp-per-row kernel.
    for m in (1, 3, 4, 5, 4095, 65537):
        x = _rand((m, 96), torch.bfloat16, seed_for("rows", m))
        _check(gks.softmax(x), x, f"m={m}")


