# SPDX-License-Identifier: Apache-2.0
"""fused_add_rmsnorm beyond the generic sweep (tests/contract): it is the two steps it fuses,
bit for bit; its in-place form; strided rows; what the in-place form refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from checks import check_output
from conftest import DEVICE, HAS_GPU, requires_gpu, requires_native, seed_for
import gks
from gks import registry

SPEC = registry.get("fused_add_rmsnorm")
RMSNORM = registry.get("rmsnorm")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _rand(shape, dtype, seed, device=DEVICE):
    gen = torch.Generator(device=device).manual_seed(seed)
    return torch.randn(shape, generator=gen, device=device).to(dtype)


def _backends():
    """(name, fused, in-place fused or None, rmsnorm) of the backends that run here."""
    import gks.triton

    out = []
    if HAS_GPU and gks._native.available():
        out.append(("cuda", gks.fused_add_rmsnorm, gks.fused_add_rmsnorm_, gks.rmsnorm))
    out.append(("triton", gks.triton.fused_add_rmsnorm, gks.triton.fused_add_rmsnorm_, gks.triton.rmsnorm))
    return out


def _name(dtype):
    return str(dtype).split(".")[1]


def _inputs(name, dtype, shape):
    """x, residual and weight, fresh for this backend, dtype and shape."""
    return (_rand(shape, dtype, seed_for("x", name, dtype, shape)), _rand(shape, dtype, seed_for("r", name, dtype, shape)),
            _rand(shape[-1:], dtype, seed_for("w", name, dtype, shape)))


# Rows held whole (1000, 4097) and, past 32768 elements, walked twice in chunks (Triton) or
# looped (CUDA's long rows).
SHAPES = [(3, 1000), (2, 4097), (2, 40000)]


@pytest.mark.parametrize("name,fused,_in_place,rmsnorm", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_it_is_the_add_then_the_norm_bit_for_bit(name, fused, _in_place, rmsnorm, dtype, shape):
    x, r, w = _inputs(name, dtype, shape)
    y, residual_out = fused(x, r, w, 1e-6)
    assert torch.equal(residual_out, (x.float() + r.float()).to(dtype))
    # The same kernel shape runs the norm either way, so the same sums in the same order.
    assert torch.equal(y, rmsnorm(residual_out, w, 1e-6))


@pytest.mark.parametrize("name,fused,in_place,_rmsnorm", _backends(), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("dtype", DTYPES, ids=_name)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_the_in_place_form_writes_both_inputs(name, fused, in_place, _rmsnorm, dtype, shape):
    x, r, w = _inputs(name, dtype, shape)
    y, residual_out = fused(x, r, w, 1e-6)
    assert in_place(x, r, w, 1e-6) is None
    assert torch.equal(x, y) and torch.equal(r, residual_out)


@pytest.mark.parametrize("name,fused,in_place,_rmsnorm", _backends(), ids=lambda v: v if isinstance(v, str) else "")
def test_strided_rows_in_and_out_of_place(name, fused, in_place, _rmsnorm):
    # Rows of 1000 inside rows of 1024 (x) and of 1536 (residual), and a 3-D view whose
    # leading dims cannot be merged.
    dtype = torch.bfloat16
    xb = _rand((6, 5, 1024), dtype, seed_for("xb", name))
    rb = _rand((6, 5, 1536), dtype, seed_for("rb", name))
    w = _rand((1000,), dtype, seed_for("w", name))
    for x, r in ((xb[:, 0, :1000], rb[:, 2, 500:1500]), (xb[:, 1:4, :1000], rb[:, 1:4, :1000])):
        assert not x.is_contiguous() and not r.is_contiguous()
        inputs = {"x": x, "residual": r, "weight": w, "eps": 1e-6}
        check_output(SPEC, fused(**inputs), inputs, "bfloat16", f"{name} strided {tuple(x.shape)}")
        expected = SPEC.reference(**inputs)
        xc, rc = x.clone(), r.clone()
        in_place(x, r, w, 1e-6)
        assert torch.equal(r, expected[1]), name
        check_output(SPEC, (x.clone(), r.clone()), {**inputs, "x": xc, "residual": rc}, "bfloat16", name)


@pytest.mark.parametrize("name,_fused,in_place,_rmsnorm", _backends(), ids=lambda v: v if isinstance(v, str) else "")
def test_the_in_place_form_refuses_a_residual_that_is_x(name, _fused, in_place, _rmsnorm):
    x = _rand((4, 64), torch.float32, 1)
    w = torch.ones(64, device=DEVICE)
    # x as its own residual would be both outputs at once; half of one buffer overlapping.
    with pytest.raises(ValueError, match="must not share memory with argument"):
        in_place(x, x, w, 1e-6)
    buf = _rand((6, 64), torch.float32, 2)
    with pytest.raises(ValueError, match="must not share memory with argument"):
        in_place(buf[:4], buf[2:], w, 1e-6)
    before = buf.clone()
    in_place(buf[:3], buf[3:], w, 1e-6)  # the two halves of one buffer: apart, and taken
    assert torch.equal(buf[3:], (before[:3] + before[3:]))


def test_pallas_matches_the_reference_and_its_own_rmsnorm():
    import jax.numpy as jnp

    import gks.pallas

    for shape in ((3, 1000), (2, 40000)):
        x, r = _rand(shape, torch.float32, 3, "cpu"), _rand(shape, torch.float32, 4, "cpu")
        w = _rand(shape[-1:], torch.float32, 5, "cpu")
        y, residual_out = gks.pallas.fused_add_rmsnorm(jnp.asarray(x.numpy()), jnp.asarray(r.numpy()),
                                                       jnp.asarray(w.numpy()), 1e-6)
        inputs = {"x": x, "residual": r, "weight": w, "eps": 1e-6}
        check_output(SPEC, (torch.from_numpy(np.asarray(y)), torch.from_numpy(np.asarray(residual_out))),
                     inputs, "float32", f"pallas {shape}")
        assert np.array_equal(np.asarray(y), np.asarray(gks.pallas.rmsnorm(residual_out, jnp.asarray(w.numpy()), 1e-6)))


@requires_gpu
@requires_native
def test_the_in_place_op_under_torch_compile():
    x, r = _rand((8, 512), torch.bfloat16, 6), _rand((8, 512), torch.bfloat16, 7)
    w = _rand((512,), torch.bfloat16, 8)
    y, residual_out = gks.fused_add_rmsnorm(x, r, w)

    @torch.compile(fullgraph=True)
    def step(x, r, w):
        gks.fused_add_rmsnorm_(x, r, w)
        return x * 2

    out = step(x, r, w)
    assert torch.equal(r, residual_out) and torch.equal(x, y) and torch.equal(out, y * 2)
