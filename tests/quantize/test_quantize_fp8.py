# SPDX-License-Identifier: Apache-2.0
"""quantize_fp8 / dequantize_fp8 semantics beyond the contract tests (tests/contract runs
the fp64 reference on every test shape, the bad-input table, NaN/inf in one element):
the e4m3 rounding at every boundary, UE8M0 scales, all-zero and non-finite groups, strided
views, partial groups and blocks, the round trip, and offsets past 2^31 on a GPU."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, HAS_NATIVE, seed_for
from gks import reference, registry
from gks.specs.quantize import FP8_GRANULARITIES, fp8_expand_scale

SPEC = registry.get("quantize_fp8")
DEQ = registry.get("dequantize_fp8")
FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _backends(spec=SPEC):
    for b in spec.backends:
        marks = ()
        if b.name == "cuda":
            marks = pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="CUDA backend needs a GPU and the library")
        elif not HAS_GPU and not b.interpreted:
            marks = pytest.mark.skip(reason=f"{b.name} has no interpreter")
        yield pytest.param(b, id=b.name, marks=marks)


def _bits(q):
    b = q.view(torch.uint8).to(torch.int16)
    return torch.where((b & 0x7F) == 0x7F, torch.full_like(b, 0x7F), b).cpu()


def _same(out, ref):
    q, s = out
    rq, rs = ref
    assert tuple(s.shape) == tuple(rs.shape)
    s, rs = s.cpu(), rs.cpu()
    assert bool(((s == rs) | (s.isnan() & rs.isnan())).all()), (s, rs)
    assert torch.equal(_bits(q), _bits(rq))


@pytest.mark.parametrize("backend", list(_backends()))
def test_every_rounding_boundary_of_e4m3(backend):
    """One token row holding 448 (so scale = 1 exactly and v = x): every e4m3 value, the
    midpoints between neighbours (ties go to even) and the fp32 values either side of them,
    subnormals included; compared with torch's conversion."""
    codes = torch.arange(0, 0x7F, dtype=torch.int32).to(torch.uint8)  # every finite non-negative code
    values = codes.view(torch.float8_e4m3fn).float()
    mids = (values[:-1] + values[1:]) / 2
    near = torch.cat([mids, torch.nextafter(mids, torch.full_like(mids, 0)), torch.nextafter(mids, torch.full_like(mids, 1e9))])
    extra = torch.tensor([448.0, 2.0**-10, 2.0**-11, 3 * 2.0**-10, 1e-30, 0.0])
    row = torch.cat([values, near, extra])
    x = torch.cat([row, -row]).reshape(1, -1).to(DEVICE)
    out = backend.load()(x=x, granularity="token")
    assert float(out[1].item()) == 1.0
    want = x.cpu().clamp(-448, 448).to(torch.float8_e4m3fn)
    assert torch.equal(_bits(out[0]), _bits(want))
    _same(out, reference.quantize_fp8(x, "token", precise=True))


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("granularity", FP8_GRANULARITIES)
def test_ue8m0_scales_are_the_next_power_of_two(backend, granularity):
    gen = torch.Generator().manual_seed(seed_for("ue8m0", granularity))
    x = (torch.randn(130, 300, generator=gen) * 10.0 ** (torch.rand(130, 1, generator=gen) * 6 - 3)).to(DEVICE)
    q, s = backend.load()(x=x, granularity=granularity, scale_ue8m0=True)
    _, plain = reference.quantize_fp8(x, granularity)
    s, plain = s.cpu(), plain.cpu()
    mantissa, _ = torch.frexp(s)
    assert bool((mantissa == 0.5).all()), "UE8M0 scales must be powers of two"
    assert bool((s >= plain).all() and (s < 2 * plain).all())
    _same((q, s), reference.quantize_fp8(x, granularity, scale_ue8m0=True, precise=True))


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("granularity", FP8_GRANULARITIES)
@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_strided_views_and_odd_widths(backend, granularity, dtype):
    """x a view with a padded row stride (and an odd offset: unaligned rows), widths 1, 7,
    129, 4097; M = 130 leaves a partial block row."""
    m = 130 if granularity == "block" else 5
    for k in (1, 7, 129, 4097):
        gen = torch.Generator().manual_seed(seed_for("strided", granularity, str(dtype), k))
        base = torch.randn(m, k + 9, generator=gen).to(dtype).to(DEVICE)
        for x in (base[:, :k], base[:, 3:3 + k]):
            out = backend.load()(x=x, granularity=granularity)
            _same(out, reference.quantize_fp8(x, granularity, precise=True))


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("granularity", FP8_GRANULARITIES)
def test_all_zero_groups_give_scale_0_and_q_0(backend, granularity):
    x = torch.zeros(130, 300, device=DEVICE)
    q, s = backend.load()(x=x, granularity=granularity)
    assert bool((s.cpu() == 0).all())
    assert bool((q.view(torch.uint8).cpu() == 0).all())
    # One zero group among others (group granularity: the second group of row 5).
    y = torch.randn(130, 300, device=DEVICE)
    y[5, 128:256] = 0
    q, s = backend.load()(x=y, granularity="group")
    assert float(s[5, 1]) == 0.0 and bool((q[5, 128:256].view(torch.uint8).cpu() == 0).all())
    assert not bool(q.float().isnan().any())


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")], ids=str)
def test_non_finite_flags_its_group_only(backend, value):
    """NaN: its group's scale is NaN and its q all NaN. +-inf: scale inf, q NaN at the
    infinity and 0 elsewhere in the group (dequantizing to NaN). Other groups untouched."""
    x = torch.randn(4, 384, device=DEVICE)
    x[2, 200] = value
    q, s = backend.load()(x=x, granularity="group")
    q, s = q.cpu().float(), s.cpu()
    if value != value:
        assert bool(s[2, 1].isnan()) and bool(q[2, 128:256].isnan().all())
    else:
        assert float(s[2, 1]) == float("inf")
        assert bool(q[2, 200].isnan())
        others = torch.cat([q[2, 128:200], q[2, 201:256]])
        assert bool((others == 0).all())
    finite = torch.ones_like(s, dtype=torch.bool)
    finite[2, 1] = False
    assert bool(s[finite].isfinite().all())
    assert not bool(q[:, :128].isnan().any()) and not bool(q[2, 256:].isnan().any())


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("granularity", FP8_GRANULARITIES)
def test_empty_tensors(backend, granularity):
    for shape in ((0, 300), (5, 0), (0, 0)):
        x = torch.empty(shape, device=DEVICE)
        q, s = backend.load()(x=x, granularity=granularity)
        assert q.shape == x.shape and q.dtype == torch.float8_e4m3fn
        _same((q, s), reference.quantize_fp8(x, granularity, precise=True))


@pytest.mark.parametrize("backend", list(_backends(DEQ)))
@pytest.mark.parametrize("granularity", FP8_GRANULARITIES)
def test_round_trip(backend, granularity):
    """dequantize(quantize(x)) is within half an e4m3 ulp of x, on every backend."""
    quantize = next(b for b in SPEC.backends if b.name == backend.name).load()
    gen = torch.Generator().manual_seed(seed_for("round-trip", granularity))
    x = (torch.randn(130, 300, generator=gen) * 3).to(DEVICE)
    q, s = quantize(x=x, granularity=granularity)
    y = backend.load()(q=q, scale=s, granularity=granularity, dtype=torch.float32).cpu().double()
    fp32 = reference.dequantize_fp8(q.cpu(), s.cpu(), granularity, dtype=torch.float32)
    assert torch.equal(y, fp32.double())  # q * scale in fp32, as the contract says
    per_element = fp8_expand_scale(s.cpu().double(), x.shape, granularity)
    xd = x.cpu().double()
    bound = (xd.abs() * 2.0**-4 + per_element * 2.0**-10) * (1 + 2.0**-20) + xd.abs() * 2.0**-23
    assert bool(((y - xd).abs() <= bound).all())


@pytest.mark.parametrize("backend", list(_backends()))
def test_bad_scale_outputs_are_refused_by_the_cuda_entry_point(backend):
    """The _out entry point refuses a scale of the wrong shape or dtype, naming it."""
    if backend.name != "cuda":
        pytest.skip("the _out entry point is the CUDA backend's")
    from gks import cuda

    x = torch.randn(4, 256, device="cuda")
    q = torch.empty(4, 256, device="cuda", dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match=r"argument 'scale' must have shape \[4, 2\] for granularity 'group'"):
        cuda.quantize_fp8_out(x, q, torch.empty(4, 1, device="cuda"), "group")
    with pytest.raises(TypeError, match="argument 'scale' must be float32"):
        cuda.quantize_fp8_out(x, q, torch.empty(4, 2, device="cuda", dtype=torch.float16), "group")
    with pytest.raises(TypeError, match="argument 'q' must be float8_e4m3fn"):
        cuda.quantize_fp8_out(x, torch.empty(4, 256, device="cuda", dtype=torch.int8), torch.empty(4, 2, device="cuda"),
                              "group")


@pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with several GB")
@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("granularity", ["token", "group", "tensor"])
def test_rows_past_element_2_31(backend, granularity):
    """A view whose row stride is 2^31 + 64 elements: the second row starts past element 2^31
    (the Pallas bridge would copy the view whole: JAX arrays have no strides)."""
    if backend.name == "pallas":
        pytest.skip("JAX arrays have no strides")
    stride = 2**31 + 64
    base = torch.empty(stride + 4096, dtype=torch.bfloat16, device="cuda")
    x = base.as_strided((2, 4096), (stride, 1))
    x.copy_(torch.randn(2, 4096, device="cuda"))
    out = backend.load()(x=x, granularity=granularity)
    _same(out, reference.quantize_fp8(x, granularity, precise=True))
    del base
    torch.cuda.empty_cache()
