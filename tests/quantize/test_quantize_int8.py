# SPDX-License-Identifier: Apache-2.0
"""INT8 quantize / dequantize beyond the generic op tests: the exact contract of
gks.reference.quantize_int8 (rounding midpoints, all-zero rows, a single huge value,
non-finite input, scales that underflow), the round trip within scale / 2, strided and
unaligned views, and on the GPU poisoned outputs through the raw *_out entry points and
their output checks (what every op guarantees is in tests/contract).

Every backend is held to bit equality with the reference: q and scale exactly, NaN scales
equal each other. Without a GPU, Triton and Pallas run in their interpreters and the CUDA
backend's tests that need a GPU skip.
"""

from __future__ import annotations

import pytest
import torch

import gks
from conftest import DEVICE, HAS_GPU, requires_gpu, requires_native, seed_for
from gks import reference
from gks.specs.quantize import DEQUANTIZE_INT8, QUANTIZE_INT8

check_quantize, check_dequantize = QUANTIZE_INT8.check, DEQUANTIZE_INT8.check

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
requires_cuda_backend = [requires_gpu, requires_native]


def _ops(backend: str):
    """(quantize, dequantize) of a backend, both on torch tensors."""
    if backend == "reference":
        return reference.quantize_int8, reference.dequantize_int8
    if backend == "cuda":
        return gks.quantize_int8, gks.dequantize_int8
    if backend == "triton":
        from gks import triton as gks_triton

        return gks_triton.quantize_int8, gks_triton.dequantize_int8
    from gks.pallas import _bridge

    return _bridge.quantize_int8, _bridge.dequantize_int8


BACKENDS = [
    "reference",
    "triton",
    "pallas",
    pytest.param("cuda", marks=requires_cuda_backend),
]


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _expect_quantized(backend, x, q=None, scale=None):
    """Runs the backend on x; checks it against the reference, and against the expected
    q and scale where given."""
    quantize, _ = _ops(backend)
    out = quantize(x)
    ref = reference.quantize_int8(x, precise=True)
    check_quantize(out, ref, _dtype_name(x.dtype), {"x": x})
    if q is not None:
        assert out[0].cpu().tolist() == q, f"q: {out[0].cpu().tolist()} != {q}"
    if scale is not None:
        got = out[1].cpu().flatten().tolist()
        assert len(got) == len(scale) and all(
            (g == w) or (g != g and w != w) for g, w in zip(got, scale)
        ), f"scale: {got} != {scale}"
    return out


# ---- the contract, value by value ----


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
def test_rounding_midpoints_round_half_to_even(backend, dtype):
    # absmax 127 / 63.5 / 254 make the scale exactly 1 / 0.5 / 2, so x / scale lands on k + 0.5.
    x = torch.tensor(
        [
            [127.0, 2.5, -3.5, 0.5, -0.5, 1.5, 126.5, -126.5, 3.5, -1.5],
            [63.5, 1.25, 1.75, -0.25, -0.75, 0.75, 63.25, -63.25, 0.25, 2.25],
            [254.0, 5.0, 7.0, -9.0, 1.0, -1.0, 3.0, 253.0, -251.0, 0.0],
        ],
        device=DEVICE,
    ).to(dtype)
    _expect_quantized(
        backend, x,
        q=[
            [127, 2, -4, 0, 0, 2, 126, -126, 4, -2],
            [127, 2, 4, 0, -2, 2, 126, -126, 0, 4],
            [127, 2, 4, -4, 0, 0, 2, 126, -126, 0],
        ],
        scale=[1.0, 0.5, 2.0],
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_midpoints_match_the_reference(backend):
    # x = (k + 1/2) * scale rounded to fp32, and its fp32 neighbours: where the division's
    # last bit decides the rounding (the CUDA/Triton Markstein path is exact here too).
    gen = torch.Generator().manual_seed(seed_for("near-midpoints", backend))
    rows = []
    for absmax in (10.0 ** (12 * torch.rand(8, generator=gen, dtype=torch.float64) - 6)).tolist():
        scale = torch.tensor(absmax, dtype=torch.float32) / torch.tensor(127.0)
        k = torch.randint(-127, 127, (40,), generator=gen).double()
        mid = ((k + 0.5) * scale.double()).float()
        row = torch.cat([mid, mid.nextafter(torch.full_like(mid, 1e30)),
                         mid.nextafter(torch.full_like(mid, -1e30)),
                         torch.tensor([absmax], dtype=torch.float32)])
        rows.append(row.clamp(-absmax, absmax))
    _expect_quantized(backend, torch.stack(rows).to(DEVICE))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
def test_all_zero_rows_give_zero_scale_and_q(backend, dtype):
    x = torch.randn(5, 40, generator=torch.Generator().manual_seed(3)).to(dtype)
    x[1] = 0.0
    x[3] = -0.0
    q, scale = _expect_quantized(backend, x.to(DEVICE))
    assert scale[1].item() == 0.0 and scale[3].item() == 0.0
    assert not bool(scale.isnan().any())
    assert int(q[1].abs().sum()) == 0 and int(q[3].abs().sum()) == 0
    _, dequantize = _ops(backend)
    y = dequantize(q, scale, torch.float32)
    assert bool((y[1] == 0).all()) and bool((y[3] == 0).all())


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
def test_single_huge_value(backend, dtype):
    huge = {torch.float32: 3.0e38, torch.float16: 60000.0, torch.bfloat16: 3.0e38}[dtype]
    x = torch.randn(3, 257, generator=torch.Generator().manual_seed(5)).to(dtype)
    x[0, 17] = huge
    x[2, 256] = -huge
    q, scale = _expect_quantized(backend, x.to(DEVICE))
    assert int(q[0, 17]) == 127 and int(q[2, 256]) == -127
    assert int(q[0].abs().sum()) == 127 and int(q[2].abs().sum()) == 127  # the rest round to 0
    # float64 division rounded to fp32 is the correctly rounded fp32 quotient.
    assert scale[0].item() == torch.tensor(float(x[0, 17]) / 127, dtype=torch.float32).item()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
def test_non_finite_input(backend, dtype):
    nan, inf = float("nan"), float("inf")
    x = torch.tensor(
        [
            [1.0, nan, -2.0, 3.0],   # a NaN: scale NaN, q 0
            [1.0, inf, -3.0, 0.0],   # +inf: scale inf, q 0 (inf / inf is NaN -> 0)
            [-inf, 5.0, 0.0, 2.0],   # -inf: likewise
            [nan, inf, -inf, 1.0],   # NaN wins over inf
            [0.0, 0.0, 0.0, 0.0],    # all zero: scale 0, q 0
            [1.0, -2.0, 4.0, 127.0],  # finite
        ],
        device=DEVICE,
    ).to(dtype)
    q, scale = _expect_quantized(
        backend, x,
        q=[[0] * 4] * 5 + [[1, -2, 4, 127]],
        scale=[nan, inf, inf, nan, 0.0, 1.0],
    )
    _, dequantize = _ops(backend)
    y = dequantize(q, scale, dtype).cpu()
    assert bool(y[:4].isnan().all()), "rows with a non-finite scale dequantize to NaN"
    assert y[4].tolist() == [0.0] * 4 and y[5].tolist() == [1.0, -2.0, 4.0, 127.0]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", (torch.float16, torch.bfloat16), ids=_dtype_name)
def test_long_16bit_rows(backend, dtype):
    # Rows of 20000 (Triton holds such 16-bit rows as int32 pairs and interleaves q back):
    # random, a NaN, +inf, zeros, exact midpoints (absmax 127: scale 1), and for bf16 a row
    # whose scale is below 2^-64 (the exact division, on x read again).
    n = 20000
    gen = torch.Generator().manual_seed(seed_for("long-16bit", str(dtype)))
    x = torch.randn(6, n, generator=gen)
    x[1, 777] = float("nan")
    x[2, n - 1] = float("inf")
    x[3] = 0.0
    x[4] = torch.arange(n) % 254 - 126.5
    x[4, 0] = 127.0
    x[5] = torch.randn(n, generator=gen) * (2.0**-100 if dtype == torch.bfloat16 else 1.0)
    _expect_quantized(backend, x.to(dtype).to(DEVICE))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", (torch.float32, torch.bfloat16), ids=_dtype_name)
def test_tiny_rows_take_exact_divisions(backend, dtype):
    # Scales below 2^-64 (true divisions on every backend), subnormal input, and an absmax
    # whose / 127 underflows to 0: q = +-127 for the non-zero entries (x / 0 = +-inf, clamped).
    tiny = 2.0**-149 if dtype == torch.float32 else 2.0**-133  # the smallest subnormal
    x = torch.tensor(
        [
            [1e-19, -3e-20, 7e-21, 0.0],
            [2.0**-126, -(2.0**-127), 2.0**-130, 2.0**-126 * 0.75],
            [tiny, 0.0, -tiny, 0.0],
        ],
        device=DEVICE,
    ).to(dtype)
    if backend == "pallas" and not HAS_GPU:
        # Pallas interpret mode runs on XLA:CPU, which flushes subnormals to zero (documented
        # in gks.pallas.quantize_int8); the GPU lowering keeps them.
        _expect_quantized(backend, x[:1])
        return
    q, scale = _expect_quantized(backend, x)
    if dtype == torch.float32:
        assert scale[2].item() == 0.0 and q[2].tolist() == [127, 0, -127, 0]
    else:
        assert scale[2].item() > 0.0 and q[2].tolist() == [127, 0, -127, 0]


# ---- the round trip ----


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
@pytest.mark.parametrize("shape", [(1, 1), (7, 31), (4, 1000), (3, 4096)], ids=str)
def test_dequantize_of_quantize_within_half_a_scale(backend, dtype, shape):
    gen = torch.Generator().manual_seed(seed_for("roundtrip", backend, str(dtype), shape))
    mags = 10.0 ** (6 * torch.rand(shape[0], 1, generator=gen) - 3)
    x = (torch.randn(shape, generator=gen) * mags).to(dtype).to(DEVICE)
    quantize, dequantize = _ops(backend)
    q, scale = quantize(x)
    check_quantize((q, scale), reference.quantize_int8(x, precise=True), _dtype_name(dtype), {"x": x})
    y = dequantize(q, scale, torch.float32).double()
    s = scale.double()
    # |q * scale - x| <= scale * (0.5 + 2^-17); the fp32 product adds 2^-24 relative.
    bound = s * (0.5 + 2.0**-17) + y.abs() * 2.0**-24
    err = (y - x.double()).abs()
    assert bool((err <= bound).all()), f"max err / scale: {float((err / s).max())}"
    # In x's dtype, the output's rounding adds half an ulp.
    yd = dequantize(q, scale, dtype)
    assert yd.dtype == dtype
    check_dequantize(yd, reference.dequantize_int8(q, scale, dtype, precise=True), _dtype_name(dtype),
                     {"q": q, "scale": scale, "dtype": dtype})


# ---- layouts ----


def _views(n: int, dtype):
    """(name, view) pairs of strided and unaligned row views, rows of length n."""
    gen = torch.Generator().manual_seed(seed_for("views", n, str(dtype)))
    base = torch.randn(8, 2 * n + 5, generator=gen).to(dtype).to(DEVICE)
    big3 = torch.randn(2, 5, n + 16, generator=gen).to(dtype).to(DEVICE)
    return [
        ("every other row", base[::2, :n]),
        ("unaligned start", base[1:6, 1 : n + 1]),
        ("3-D sliced in S", big3[:, 1:4, :n]),
        ("1-D", base[3, 2 : n + 2]),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
@pytest.mark.parametrize("n", [1, 33, 1000, 4096, 20000])
def test_strided_and_unaligned_views(backend, dtype, n):
    quantize, dequantize = _ops(backend)
    for name, x in _views(n, dtype):
        q, scale = quantize(x)
        check_quantize((q, scale), reference.quantize_int8(x.contiguous(), precise=True),
                       _dtype_name(dtype), {"x": x})
        # Dequantize from strided q and scale views too.
        q_big = torch.zeros((*q.shape[:-1], q.shape[-1] + 3), dtype=torch.int8, device=q.device)
        q_view = q_big[..., 3:]
        q_view.copy_(q)
        s_big = torch.zeros((*scale.shape[:-1], 2), dtype=torch.float32, device=scale.device)
        s_view = s_big[..., 1:]
        s_view.copy_(scale)
        y = dequantize(q_view, s_view, dtype)
        want = reference.dequantize_int8(q, scale, dtype)
        assert torch.equal(y.cpu(), want.cpu()), f"{name}: dequantize of strided views differs"


# ---- bad input beyond the spec's table ----


@requires_gpu
@requires_native
def test_cuda_out_entry_points_reject_bad_outputs():
    x = torch.randn(4, 64, device="cuda")
    q = torch.empty(4, 64, dtype=torch.int8, device="cuda")
    scale = torch.empty(4, 1, device="cuda")
    with pytest.raises(ValueError, match="argument 'scale' must be on the device of 'x'"):
        gks.cuda.quantize_int8_out(x, q, scale.cpu())
    with pytest.raises(TypeError, match="argument 'q' must be int8, got float32"):
        gks.cuda.quantize_int8_out(x, q.float(), scale)
    with pytest.raises(ValueError, match=r"argument 'scale' must have shape \[4, 1\]"):
        gks.cuda.quantize_int8_out(x, q, torch.empty(4, 2, device="cuda"))
    with pytest.raises(ValueError, match=r"argument 'q' must have the shape of 'x'"):
        gks.cuda.quantize_int8_out(x, q[:, :32], scale)
    with pytest.raises(TypeError, match="argument 'out' must be float32, float16 or bfloat16, got int8"):
        gks.cuda.dequantize_int8_out(q, scale, q.clone())
    with pytest.raises(ValueError, match="argument 'out' must be contiguous in its last dim"):
        gks.cuda.dequantize_int8_out(q, scale, torch.empty(64, 4, device="cuda").t())


# ---- GPU: poisoned outputs ----


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES, ids=_dtype_name)
@pytest.mark.parametrize("shape", [(1, 1), (5, 31), (3, 1000), (33, 4096), (4, 4112), (2, 32768), (2, 262144)], ids=str)
def test_cuda_out_entry_points_write_every_element_and_nothing_else(dtype, shape):
    gen = torch.Generator(device="cuda").manual_seed(seed_for("poison", str(dtype), shape))
    x = (torch.randn(shape, generator=gen, device="cuda") * 3).to(dtype)
    m, n = shape
    # Outputs are views into poisoned buffers: -128 is an int8 q never takes, NaN a scale
    # finite input never gives. The padding around the views must stay poisoned.
    q_buf = torch.full((m, n + 16), -128, dtype=torch.int8, device="cuda")
    s_buf = torch.full((m, 3), float("nan"), device="cuda")
    q, scale = q_buf[:, :n], s_buf[:, 1:2]
    gks.cuda.quantize_int8_out(x, q, scale)
    check_quantize((q, scale), reference.quantize_int8(x, precise=True), _dtype_name(dtype), {"x": x})
    assert bool((q_buf[:, n:] == -128).all()), "wrote past the end of a q row"
    assert bool(s_buf[:, 0].isnan().all() and s_buf[:, 2].isnan().all()), "wrote beside the scale"

    o_buf = torch.full((m, n + 8), float("nan"), device="cuda").to(dtype)
    out = o_buf[:, :n]
    gks.cuda.dequantize_int8_out(q, scale, out)
    assert torch.equal(out, reference.dequantize_int8(q.contiguous(), scale.contiguous(), dtype))
    assert bool(o_buf[:, n:].isnan().all()), "wrote past the end of an output row"


