# SPDX-License-Identifier: Apache-2.0
"""act_and_mul_quant beyond the contract tests: every activation, strided and unaligned
views, all-zero groups, UE8M0 scales, and agreement with the two steps (act_and_mul in fp32,
then quantize_fp8 per group)."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, seed_for
from gks import reference, registry

SPEC = registry.get("act_and_mul_quant")


def _backends():
    for b in SPEC.backends:
        marks = ()
        if b.name == "cuda":
            marks = pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="CUDA backend needs a GPU and the library")
        yield pytest.param(b, id=b.name, marks=marks)


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_views_and_activations(backend, activation, dtype):
    for d in (128, 384, 7168):
        gen = torch.Generator().manual_seed(seed_for("act-quant", activation, dtype, d))
        base = (2 * torch.randn(6, 2 * d + 8, generator=gen)).to(getattr(torch, dtype)).to(DEVICE)
        for x in (base[:, : 2 * d], base[:, 3 : 3 + 2 * d], base[::2, 8:]):  # padded, unaligned, every other row
            inputs = {"x": x, "activation": activation, "scale_ue8m0": False}
            out = backend.load()(**inputs)
            check_output(SPEC, out, inputs, dtype, f"act_and_mul_quant/{backend.name}/{activation}/{dtype}/{d}")


@pytest.mark.parametrize("backend", list(_backends()))
def test_zero_groups_and_ue8m0(backend):
    x = torch.randn(3, 1024, device=DEVICE)
    x[1, 512 + 128 : 512 + 256] = 0  # the up half of group 1 of row 1: its outputs are 0
    q, scale = backend.load()(x=x, activation="silu", scale_ue8m0=True)
    assert float(scale[1, 1]) == 0.0 and bool((q[1, 128:256].view(torch.uint8).cpu() == 0).all())
    s = scale.cpu()
    nonzero = s[s > 0]
    assert bool((torch.frexp(nonzero)[0] == 0.5).all()), "UE8M0 scales are powers of two"


@pytest.mark.parametrize("backend", list(_backends()))
def test_matches_act_and_mul_then_quantize(backend):
    gen = torch.Generator().manual_seed(seed_for("act-quant", "two-step"))
    x = (2 * torch.randn(5, 2048, generator=gen)).to(DEVICE)
    q, scale = backend.load()(x=x, activation="silu")
    y = reference.act_and_mul(x.cpu(), "silu", precise=True).float()
    rq, rs = reference.quantize_fp8(y, "group", precise=True)
    assert torch.allclose(scale.cpu(), rs, rtol=2.0**-18, atol=0)
    same = (q.view(torch.uint8).cpu() == rq.view(torch.uint8)).float().mean().item()
    assert same > 0.99, same
