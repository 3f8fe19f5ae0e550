# SPDX-License-Identifier: Apache-2.0
"""act_and_mul beyond the generic sweep (tests/contract, which runs silu): every activation on
every backend against float64, strided rows (the gate/up halves of a wider buffer), and the
gelu forms told apart."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from checks import assert_matches
from conftest import DEVICE, HAS_GPU, seed_for
import gks
from gks import registry

SPEC = registry.get("act_and_mul")
ACTS = ["silu", "gelu", "gelu_tanh"]


def _backends():
    import jax.numpy as jnp

    import gks.pallas
    import gks.triton

    def pallas(x, activation="silu"):
        y = gks.pallas.act_and_mul(jnp.asarray(x.cpu().numpy()), activation)
        return torch.from_numpy(np.asarray(y)).to(x.device)

    out = [("triton", gks.triton.act_and_mul), ("pallas", pallas)]
    if HAS_GPU and gks._native.available():
        out.insert(0, ("cuda", gks.act_and_mul))
    return out


@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("activation", ACTS)
# (6, 768) and (4, 24576): halves whose width a power-of-two block divides (Pallas reads them
# as views of x, two rows a program; 3 column blocks a half); the others take its padded path.
@pytest.mark.parametrize("shape", [(3, 14), (5, 2000), (2, 3, 8194), (6, 768), (4, 24576)],
                         ids=lambda s: "x".join(map(str, s)))
def test_every_activation_matches_float64(name, fn, activation, shape):
    x = 2.0 * torch.randn(shape, generator=torch.Generator(device=DEVICE).manual_seed(seed_for(name, activation, shape)),
                          device=DEVICE)
    y = fn(x, activation)
    assert y.shape == (*shape[:-1], shape[-1] // 2)
    assert_matches(y, SPEC.reference(x, activation, precise=True), "float32", SPEC.tolerance, f"{name} {activation}")


@pytest.mark.parametrize("name,fn", [(n, f) for n, f in _backends() if n != "pallas"], ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_strided_rows(name, fn, dtype):
    # [gate | up] rows of 2 x 1000 inside rows of 2304, and a 3-D view whose leading dims
    # cannot be merged.
    base = (2.0 * torch.randn((6, 5, 2304), device=DEVICE)).to(dtype)
    for x in (base[:, 0, :2000], base[:, 1:4, 100:2100]):
        assert not x.is_contiguous()
        assert_matches(fn(x, "gelu_tanh"), SPEC.reference(x, "gelu_tanh", precise=True), str(dtype).split(".")[1],
                       SPEC.tolerance, f"{name} strided {tuple(x.shape)}")


def test_the_two_gelus_differ_where_they_should():
    # The erf and tanh forms part by up to 4.7e-4 (near x = -2.7): the fp32 tolerance tells
    # them apart, so the float32 sweep above would catch a backend that mixed them up.
    x = torch.tensor([[-2.7, 1.0]], dtype=torch.float64)
    erf, tanh = SPEC.reference(x, "gelu", precise=True), SPEC.reference(x, "gelu_tanh", precise=True)
    assert (erf - tanh).abs().item() > 10 * SPEC.tolerance["float32"][0]
