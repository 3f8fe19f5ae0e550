# SPDX-License-Identifier: Apache-2.0
"""rmsnorm_quant / fused_add_rmsnorm_quant beyond the contract tests: strided views and odd
widths, all-zero rows, the in-place residual of the _out entry point, agreement with the
two-step pipeline (rmsnorm in fp32, then quantize), and the CUDA row-length limit."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, seed_for
from gks import registry

SPECS = [registry.get("rmsnorm_quant"), registry.get("fused_add_rmsnorm_quant")]
FORMATS = [(torch.int8, "token", False), (torch.float8_e4m3fn, "token", False),
           (torch.float8_e4m3fn, "group", False), (torch.float8_e4m3fn, "group", True)]


def _cases():
    for spec in SPECS:
        for b in spec.backends:
            marks = ()
            if b.name == "cuda":
                marks = pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="CUDA backend needs a GPU and the library")
            yield pytest.param(spec, b, id=f"{spec.name}-{b.name}", marks=marks)


def _inputs(spec, x, fmt, seed):
    quant_dtype, granularity, ue8m0 = fmt
    gen = torch.Generator().manual_seed(seed)
    n = x.shape[-1]
    inputs = {"x": x, "weight": (1 + 0.1 * torch.randn(n, generator=gen)).to(x.dtype).to(DEVICE), "eps": 1e-6,
              "quant_dtype": quant_dtype, "granularity": granularity, "scale_ue8m0": ue8m0}
    if spec.name.startswith("fused_add"):
        base = torch.randn(x.shape[0], n + 5, generator=gen).to(x.dtype).to(DEVICE)
        inputs = {"x": x, "residual": base[:, 5:], **{k: v for k, v in inputs.items() if k != "x"}}
    return inputs


@pytest.mark.parametrize("spec,backend", list(_cases()))
@pytest.mark.parametrize("fmt", FORMATS, ids=lambda f: f"{str(f[0]).removeprefix('torch.')}-{f[1]}{'-ue8m0' if f[2] else ''}")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_strided_views_and_odd_widths(spec, backend, fmt, dtype):
    widths = (128, 384, 4096) if fmt[1] == "group" else (1, 7, 129, 4097)
    for n in widths:
        gen = torch.Generator().manual_seed(seed_for(spec.name, dtype, n, str(fmt)))
        base = torch.randn(6, n + 3, generator=gen).to(getattr(torch, dtype)).to(DEVICE)
        for x in (base[:, :n], base[:, 3:], base[::2, :n]):  # padded rows, unaligned rows, every other row
            inputs = _inputs(spec, x, fmt, seed_for("w", n))
            out = backend.load()(**inputs)
            check_output(spec, out, inputs, dtype, f"{spec.name}/{backend.name}/{dtype}/{n}/{fmt}")


@pytest.mark.parametrize("spec,backend", list(_cases()))
@pytest.mark.parametrize("fmt", FORMATS[:3], ids=["int8", "fp8-token", "fp8-group"])
def test_all_zero_rows_give_scale_0_and_q_0(spec, backend, fmt):
    x = torch.randn(3, 256, device=DEVICE)
    x[1] = 0
    inputs = _inputs(spec, x, fmt, 1)
    if "residual" in inputs:
        inputs["residual"] = torch.zeros_like(x)
    q, scale = backend.load()(**inputs)[:2]
    assert bool((scale[1].cpu() == 0).all())
    assert bool((q[1].view(torch.uint8).cpu() == 0).all())
    assert bool((scale[0].cpu() > 0).all())


@pytest.mark.parametrize("spec,backend", list(_cases()))
def test_matches_rmsnorm_then_quantize_in_fp32(spec, backend):
    """For fp32 x the fused op is the two steps: rmsnorm (fp32 out), then quantize_fp8 of it,
    to the check's bound (the steps' kernels may sum in another order)."""
    from gks import reference

    gen = torch.Generator().manual_seed(seed_for(spec.name, "two-step"))
    x = torch.randn(5, 1024, generator=gen).to(DEVICE)
    inputs = _inputs(spec, x, FORMATS[2], 3)
    q, scale = backend.load()(**inputs)[:2]
    src = inputs["x"] if "residual" not in inputs else (inputs["x"] + inputs["residual"])
    y = reference.rmsnorm(src.cpu(), inputs["weight"].cpu(), 1e-6, precise=True).float()
    rq, rs = reference.quantize_fp8(y, "group", precise=True)
    assert torch.allclose(scale.cpu(), rs, rtol=2.0**-18, atol=0)
    # Mostly bit-equal: an element differs only where y sat within its last bits of a tie.
    same = (q.view(torch.uint8).cpu() == rq.view(torch.uint8)).float().mean().item()
    assert same > 0.99, same


@pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="the _out entry point needs a GPU and the library")
def test_fused_add_in_place_residual():
    from gks import cuda

    spec = SPECS[1]
    inputs = spec.make_inputs((7, 1024, 2), "bfloat16", "cuda", 5)
    want = spec.reference(**inputs)
    residual = inputs["residual"].clone()
    q = torch.empty(7, 1024, dtype=torch.float8_e4m3fn, device="cuda")
    scale = torch.empty(7, 8, device="cuda")
    cuda.fused_add_rmsnorm_quant_out(inputs["x"], residual, inputs["weight"], q, scale, residual, 1e-6, "group")
    assert torch.equal(residual, want[2])
    check_output(spec, (q, scale, residual), inputs, "bfloat16", "in place")


@pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="CUDA backend needs a GPU and the library")
def test_cuda_refuses_rows_longer_than_its_registers():
    import gks

    x = torch.randn(2, 65536 + 8, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="argument 'x' has rows of 65544 elements"):
        gks.rmsnorm_quant(x, torch.ones(65544, device="cuda", dtype=torch.bfloat16))
