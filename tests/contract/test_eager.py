# SPDX-License-Identifier: Apache-2.0
"""gks.<op> in plain eager use runs the op's body without the dispatcher; everything else
(meta and CPU tensors, autograd, torch.compile) goes through the custom op."""

from __future__ import annotations

import pytest
import torch

from conftest import requires_gpu, requires_native
import gks
from gks._torch_ops import __all__ as OPS
from gks._torch_ops._eager import _plain_eager


@pytest.mark.parametrize("name", OPS)
def test_every_op_keeps_its_custom_op(name):
    f = getattr(gks, name)
    assert f.__wrapped__.__name__ == f"_{name}" and f.__doc__ == f.__wrapped__.__doc__
    assert hasattr(torch.ops.gks, name)
    # The custom op and torch.ops.gks.<name> are one op.
    assert f.op._opoverload is getattr(torch.ops.gks, name).default


def test_meta_and_cpu_tensors_take_the_custom_op():
    assert not _plain_eager((torch.empty(2, 3, device="meta"),), {})
    assert not _plain_eager((torch.empty(2, 3),), {"w": torch.empty(3)})
    assert gks.rmsnorm(torch.empty(4, 8, device="meta"), torch.empty(8, device="meta")).shape == (4, 8)


@requires_gpu
@requires_native
def test_fast_path_only_when_nothing_needs_the_dispatcher():
    x = torch.randn(64, 1000, device="cuda")
    w = torch.randn(1000, device="cuda")
    assert _plain_eager((x, w), {"eps": 1e-6})
    assert torch.equal(gks.rmsnorm(x, w), gks.rmsnorm.op(x, w))
    xg = x.clone().requires_grad_()
    assert not _plain_eager((xg, w), {})
    with torch.no_grad():
        assert _plain_eager((xg, w), {})
    assert not _plain_eager((x, w.cpu()), {})  # then the C++ API names the CPU argument
    with pytest.raises(ValueError, match="argument 'weight' must be on the device of 'x'"):
        gks.rmsnorm(x, w.cpu())
    # Autograd sees the custom op: rmsnorm's backward is gks.rmsnorm_bwd; an op with no
    # backward (layernorm) says so at backward time.
    gks.rmsnorm(xg, w).sum().backward()
    assert torch.equal(xg.grad, gks.rmsnorm_bwd(torch.ones_like(x), x, w)[0])
    y = gks.layernorm(xg, w)
    with pytest.raises(RuntimeError):
        y.sum().backward()
