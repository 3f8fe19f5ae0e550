# SPDX-License-Identifier: Apache-2.0
"""top_k beyond the generic sweep (tests/contract), on every backend here (Triton in its
interpreter without a GPU; CUDA with a GPU and the library): sorted and unsorted against the
reference at odd widths; ties by lower index (a row of few distinct values, an all-equal
row, values that differ only in their last bits, so every radix digit is needed); NaN of
either sign above +inf, ±inf, -0.0 tying with 0.0 and keeping its bits; strided rows and
[..., N] inputs; no rows, k = 0, k = N; and, for CUDA, every config on a long row and the
_out entry point's strided outputs."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, seed_for
import gks
from gks import registry
from gks.specs.topk import check_top_k, top_k as reference

SPEC = registry.get("top_k")
DTYPES = ["float32", "float16", "bfloat16"]


def _backends():
    import gks.triton

    out = [("triton", gks.triton.top_k)]
    if HAS_GPU and gks._native.available():
        out.insert(0, ("cuda", gks.top_k))
    return out


BACKENDS = _backends()
IDS = [b[0] for b in BACKENDS]


def _randn(shape, dtype, seed):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=DEVICE).to(getattr(torch, dtype))


def _check(fn, x, k, sorted=True, what=""):
    out = fn(x, k, sorted)
    check_top_k(out, reference(x, k), x, k, sorted, what or f"{tuple(x.shape)} k={k} sorted={sorted}")
    return out


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("cols,k", [(1, 1), (7, 3), (129, 129), (4097, 64), (1000, 300)])
def test_odd_widths_against_the_reference(backend, fn, dtype, sorted, cols, k):
    x = _randn((3, cols), dtype, seed_for("widths", dtype, cols, k))
    _check(fn, x, k, sorted)


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_vocabulary_row(backend, fn, dtype):
    x = _randn((1, 151936), dtype, seed_for("vocab", dtype))
    _check(fn, x, 50)
    _check(fn, x, 2048, sorted=False)


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sorted", [True, False], ids=["sorted", "unsorted"])
def test_ties_go_to_the_lower_index(backend, fn, dtype, sorted):
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("ties", dtype))
    x = torch.randint(0, 5, (4, 1000), generator=gen, device=DEVICE).to(getattr(torch, dtype))
    for k in (1, 37, 200, 999, 1000):
        _check(fn, x, k, sorted)
    same = torch.full((2, 300), 1.5, dtype=getattr(torch, dtype), device=DEVICE)
    values, indices = fn(same, 7, sorted)
    assert indices.tolist() == [list(range(7))] * 2
    assert (values == 1.5).all()
    # Of five 2.0s and k = 6: all of the 3.0 and 2.0s, the 1.0 at index 1 before index 4.
    x = torch.tensor([[2.0, 1.0, 2.0, 3.0, 1.0, 2.0, 2.0, 2.0, 0.5]], dtype=getattr(torch, dtype), device=DEVICE)
    values, indices = fn(x, 7, sorted)
    if sorted:
        assert indices.tolist() == [[3, 0, 2, 5, 6, 7, 1]], indices
    else:
        assert indices.tolist() == [[0, 2, 3, 5, 6, 7, 1]], indices  # above the 7th value, then on it


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_radix_digit_decides(backend, fn, dtype):
    """Values a few ulps apart around 1.0 (fp32: their keys differ in the last byte alone),
    shuffled: the select must go through every digit."""
    dt = getattr(torch, dtype)
    base = torch.tensor(1.0, dtype=dt)
    steps = torch.arange(300)
    ulps = (base.view(torch.int32 if dt == torch.float32 else torch.int16) + steps).to(
        torch.int32 if dt == torch.float32 else torch.int16).view(dt)
    gen = torch.Generator().manual_seed(seed_for("digits", dtype))
    x = torch.cat([ulps, ulps[:100]])[torch.randperm(400, generator=gen)][None].to(DEVICE)
    for k in (1, 5, 150, 399):
        _check(fn, x, k)
        _check(fn, x, k, sorted=False)


def _nonfinite_row(dtype):
    nan = float("nan")
    vals = [1.0, nan, float("inf"), float("-inf"), -0.0, 0.0, nan, -2.0, 0.0, -0.0]
    x = torch.tensor([vals], dtype=getattr(torch, dtype))
    # Index 6 a NaN with the sign bit set (and another payload): NaN all the same.
    ints = torch.int32 if dtype == "float32" else torch.int16
    bits = x.view(ints).clone()
    bits[0, 6] = bits[0, 6] | (-(2**31) if dtype == "float32" else -(2**15))
    bits[0, 6] = bits[0, 6] | 1
    return bits.view(getattr(torch, dtype)).to(DEVICE)


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_inf_and_signed_zeros(backend, fn, dtype):
    x = _nonfinite_row(dtype)
    values, indices = _check(fn, x, 10)
    # NaN (either sign) above +inf, in index order; -0.0 and 0.0 tie, by index.
    assert indices.tolist() == [[1, 6, 2, 0, 4, 5, 8, 9, 7, 3]], indices
    ints = torch.int32 if dtype == "float32" else torch.int16
    assert torch.equal(values.view(ints), x.view(ints).gather(-1, indices))  # bits kept: -0.0, the NaN's sign
    assert torch.signbit(values[0, 4]) and not torch.signbit(values[0, 5])
    for k in (1, 2, 3, 5, 6, 9):
        _check(fn, x, k)
        _check(fn, x, k, sorted=False)
    torch.testing.assert_close(fn(x, 4, True)[0].float().cpu(), torch.topk(x.float().cpu(), 4).values,
                               equal_nan=True, atol=0, rtol=0)


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_strided_rows_and_leading_dims(backend, fn, dtype):
    big = _randn((10, 3, 700), dtype, seed_for("strided", dtype))
    rows = big[::2, 1, 5:605]  # rows 2100 elements apart, a view into the middle
    _check(fn, rows, 33)
    two_levels = big[:, ::2, 100:400]  # [10, 2, 300]: two strided leading levels
    _check(fn, two_levels, 300)
    _check(fn, two_levels, 17, sorted=False)
    _check(fn, big[0, 0], 9)  # a 1-D row


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
def test_no_rows_k_zero_and_k_n(backend, fn):
    values, indices = fn(torch.empty((0, 16), device=DEVICE), 4)
    assert values.shape == (0, 4) and indices.shape == (0, 4) and indices.dtype == torch.int64
    x = _randn((5, 40), "float32", seed_for("k0"))
    values, indices = fn(x, 0)
    assert values.shape == (5, 0) and indices.shape == (5, 0)
    values, indices = fn(x, 40)
    assert torch.equal(indices, torch.sort(x, dim=-1, descending=True, stable=True).indices)
    values, indices = fn(torch.empty((3, 0), device=DEVICE), 0)
    assert values.shape == (3, 0)


@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
@pytest.mark.parametrize("k", [-1, 17, 2049])
def test_a_bad_k_is_refused_naming_it(backend, fn, k):
    x = _randn((2, 16 if k != 2049 else 4096), "float32", 0)
    with pytest.raises(ValueError, match=r"argument 'k' must be from 0 to min\(N, 2048\)"):
        fn(x, k)


@pytest.mark.skipif(not (HAS_GPU and gks._native.available()), reason="the CUDA backend needs a GPU and the library")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sorted", [True, False], ids=["sorted", "unsorted"])
@pytest.mark.parametrize("shape", [(3, 131072, 2048), (2, 262144, 50), (70, 20000, 1024), (1, 9000, 1)])
def test_cuda_every_config_on_long_rows(dtype, sorted, shape):
    """Each launch shape (one CTA a row of 256 or 1024 threads, clusters of 2, 4, 8 on sm_90,
    with the slice kept in shared memory or not) on rows that split over a cluster."""
    m, n, k = shape
    x = _randn((m, n), dtype, seed_for("configs", dtype, shape))
    ref = reference(x, k)
    for config in range(len(SPEC.configs)):
        out = gks.top_k(x, k, sorted, config=config)
        check_top_k(out, ref, x, k, sorted, f"config {SPEC.configs[config]['name']} {shape} {dtype}")


@pytest.mark.skipif(not (HAS_GPU and gks._native.available()), reason="the CUDA backend needs a GPU and the library")
def test_cuda_out_takes_strided_outputs():
    import gks.cuda

    x = _randn((6, 5000), "bfloat16", seed_for("out-strided"))
    values = torch.full((6, 3, 64), -1.0, dtype=torch.bfloat16, device="cuda")[:, 1, 10:50]
    indices = torch.full((6, 2, 40), -1, dtype=torch.int64, device="cuda")[:, 0]
    gks.cuda.top_k_out(x, values, indices, 40, True)
    check_top_k((values, indices), reference(x, 40), x, 40, True, "strided outputs")


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with several GB")
@pytest.mark.parametrize("backend,fn", BACKENDS, ids=IDS)
def test_rows_2_31_elements_apart(backend, fn):
    """Row offsets in 64 bits: two rows 2^31 + 64 elements apart (fp16, 4 GB), the second
    past element 2^31."""
    n, stride = 4096, 2**31 + 64
    x = _randn((2, n), "float16", seed_for("apart"))
    buf = torch.empty(stride + n, dtype=torch.float16, device="cuda")
    spread = buf.as_strided((2, n), (stride, 1))
    spread.copy_(x)
    for sorted in (True, False):
        out = fn(spread, 100, sorted)
        torch.cuda.synchronize()
        check_top_k(out, reference(x, 100), x, 100, sorted, f"rows {stride} apart")
    del buf, spread
    torch.cuda.empty_cache()
