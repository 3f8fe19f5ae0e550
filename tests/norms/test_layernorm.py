# SPDX-License-Identifier: Apache-2.0
"""layernorm beyond the generic sweep (tests/contract): without a bias, rows whose mean
dwarfs their spread or with one huge element (in registers and in the long-row paths),
constant rows, rows with an inf, strided rows."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from checks import assert_matches
from conftest import DEVICE, HAS_GPU, seed_for
import gks
from gks import registry

SPEC = registry.get("layernorm")
TOL = SPEC.tolerance


def _backends():
    """(name, fn) over torch tensors of the backends that run here; Pallas through NumPy."""
    import jax.numpy as jnp

    import gks.pallas
    import gks.triton

    def pallas(x, weight, bias=None, eps=1e-5):
        arr = lambda t: None if t is None else jnp.asarray(t.cpu().numpy())  # noqa: E731
        return torch.from_numpy(np.asarray(gks.pallas.layernorm(arr(x), arr(weight), arr(bias), eps))).to(x.device)

    out = [("triton", gks.triton.layernorm), ("pallas", pallas)]
    if HAS_GPU and gks._native.available():
        out.insert(0, ("cuda", gks.layernorm))
    return out


def _rand(shape, seed, dtype=torch.float32, mean=0.0):
    gen = torch.Generator(device=DEVICE).manual_seed(seed)
    return (mean + torch.randn(shape, generator=gen, device=DEVICE)).to(dtype)


def _check(fn, name, x, w, b, what, dtype="float32"):
    y = fn(x, w, b, 1e-5)
    assert_matches(y, SPEC.reference(x, w, b, 1e-5, precise=True), dtype, TOL, f"{name}: {what}")


def _within_torch_error(fn, name, x, w, b):
    """fn's largest error against float64 at most 4x F.layer_norm's own fp32 error."""
    exact = SPEC.reference(x, w, b, 1e-5, precise=True)
    torch_err = (torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5).double() - exact).abs().max().item()
    err = (fn(x, w, b, 1e-5).double() - exact).abs().max().item()
    assert err <= 4 * torch_err + 1e-6, f"{name}: error {err:.3g} against F.layer_norm's {torch_err:.3g}"


# Rows held whole (1000) and long rows (40000: Triton's chunks, Pallas's three passes).
@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("n", [1000, 40000])
def test_without_a_bias(name, fn, n):
    x, w = _rand((3, n), seed_for("x", name, n)), _rand((n,), seed_for("w", name, n))
    _check(fn, name, x, w, None, f"no bias, rows of {n}")


@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("n", [1000, 3000, 40000])
def test_a_mean_far_from_zero_leaves_the_variance(name, fn, n):
    # mean 1000, spread 1: sum(x^2) / n - mean^2 in fp32 would keep almost nothing of the
    # variance; the held rows subtract the mean first, the long rows shift by an element.
    # The fp32 mean itself is off by about an ulp of 1000 (6e-5), so the bound is torch's
    # own fp32 error (F.layer_norm), not the O(1)-input tolerance.
    x = _rand((4, n), seed_for("far", name, n), mean=1000.0)
    w, b = _rand((n,), seed_for("w", name, n)), _rand((n,), seed_for("b", name, n))
    _within_torch_error(fn, name, x, w, b)


@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("n", [1000, 3000, 40000])
@pytest.mark.parametrize("where", ["first", "middle"])
def test_one_huge_element_leaves_the_rest(name, fn, n, where):
    # An outlier channel (1e4 among N(0, 1) values), first in the row or inside it: a shift
    # by the first element, or sum(x^2)/n - mean^2, would lose the others' spread.
    x = _rand((3, n), seed_for("outlier", name, n, where))
    x[:, 0 if where == "first" else n // 3] = 1e4
    w, b = _rand((n,), seed_for("w", name, n)), _rand((n,), seed_for("b", name, n))
    _within_torch_error(fn, name, x, w, b)


@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("n", [1000, 40000])
def test_a_row_with_an_inf_comes_out_nan(name, fn, n):
    x = _rand((2, n), seed_for("inf", name, n))
    x[1, 7] = float("inf")
    y = fn(x, torch.ones(n, device=DEVICE), None, 1e-5)
    assert torch.isnan(y[1]).all() and torch.isfinite(y[0]).all(), name


@pytest.mark.parametrize("name,fn", _backends(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_constant_row_gives_the_bias(name, fn):
    n = 512
    x = torch.full((2, n), 7.25, device=DEVICE)
    w, b = _rand((n,), 1), _rand((n,), 2)
    y = fn(x, w, b, 1e-5)
    assert torch.equal(y, b.expand(2, n)), name


@pytest.mark.parametrize("name,fn", [(n, f) for n, f in _backends() if n != "pallas"], ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_strided_rows(name, fn, dtype):
    base = _rand((6, 5, 1024), seed_for("strided", name, str(dtype)), dtype)
    w, b = _rand((1000,), 3, dtype), _rand((1000,), 4, dtype)
    for x in (base[:, 0, :1000], base[:, 1:4, :1000]):
        assert not x.is_contiguous()
        _check(fn, name, x, w, b, f"strided {tuple(x.shape)}", str(dtype).split(".")[1])
