# SPDX-License-Identifier: Apache-2.0
"""What every CUDA op guarantees, run for each registry op with a CUDA backend on its
spec's example shape (GPU only): torch.library.opcheck, torch.compile(fullgraph=True), CUDA
graph capture on a side stream (so it runs on the caller's stream) replayed on new inputs,
the gks.cuda `_out` entry point writing every output element and nothing around it, and
every config of the library's table on every test shape."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import HAS_GPU, HAS_NATIVE, capture, refill, seed_for
from gks import registry

pytestmark = pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE),
                                reason="the CUDA ops need a GPU and the built library")

CUDA_SPECS = [s for s in registry.ops() if s.has_backend("cuda")]


def _cases():
    for spec in CUDA_SPECS:
        for dtype in spec.dtypes:
            yield pytest.param(spec, dtype, id=f"{spec.name}-{dtype}")


def _inputs(spec, dtype, salt: str):
    return spec.make_inputs(spec.example_shape, dtype, "cuda", seed_for(spec.name, dtype, salt))


def _tensors(value):
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("spec,dtype", list(_cases()))
def test_opcheck(spec, dtype):
    torch.library.opcheck(spec.public("cuda").op, args=(), kwargs=_inputs(spec, dtype, "opcheck"))


@pytest.mark.parametrize("spec,dtype", list(_cases()))
def test_torch_compile_fullgraph(spec, dtype):
    op = spec.public("cuda")
    inputs = _inputs(spec, dtype, "compile")
    # Every case compiles the same lambda's code object: without a reset, Dynamo counts the
    # cases before it as recompilations and stops at its recompile limit.
    torch._dynamo.reset()
    compiled = torch.compile(lambda **kw: op(**kw), fullgraph=True, dynamic=False)
    check_output(spec, compiled(**inputs), inputs, dtype, f"{spec.name} compiled")


@pytest.mark.parametrize("spec,dtype", list(_cases()))
def test_cuda_graph_on_a_side_stream_replays_on_new_inputs(spec, dtype):
    op = spec.public("cuda")
    inputs = _inputs(spec, dtype, "graph")
    graph, captured, eager = capture(op, inputs)  # the warm-up on the side stream too
    torch.cuda.synchronize()
    check_output(spec, eager, inputs, dtype, f"{spec.name} on a side stream")
    refill(inputs, _inputs(spec, dtype, "graph-replay"))
    graph.replay()
    torch.cuda.synchronize()
    check_output(spec, captured, inputs, dtype, f"{spec.name} graph replay")


_GUARD = 64  # elements after each output that the kernel must leave alone


def _poison(t: torch.Tensor):
    """A NaN (int8: -128, which no quantized value takes) filled buffer holding an output
    like t, with _GUARD elements after it, and the output view."""
    fill = -128 if t.dtype == torch.int8 else float("nan")
    buf = torch.full((t.numel() + _GUARD,), fill, dtype=t.dtype, device="cuda")
    return buf, buf[: t.numel()].view(t.shape)


@pytest.mark.parametrize("spec,dtype", list(_cases()))
def test_out_entry_point_writes_every_element_and_nothing_else(spec, dtype):
    import gks.cuda

    inputs = _inputs(spec, dtype, "out")
    like = _tensors(spec.reference(**inputs))
    buffers, outs = zip(*(_poison(t) for t in like))
    spec.cuda_out(gks.cuda, inputs, tuple(outs))
    torch.cuda.synchronize()
    check_output(spec, outs if len(outs) > 1 else outs[0], inputs, dtype, f"{spec.name} _out")
    for buf, t in zip(buffers, like):
        guard = buf[t.numel():]
        untouched = (guard == -128).all() if t.dtype == torch.int8 else guard.isnan().all()
        assert bool(untouched), f"{spec.name}: the _out entry point wrote past its output"


def _config_cases():
    for spec in CUDA_SPECS:
        if not spec.backend("cuda").tunable:
            continue
        for index, config in enumerate(spec.configs):
            for dtype in spec.dtypes:
                yield pytest.param(spec, index, dtype, id=f"{spec.name}-{config['name']}-{dtype}")


@pytest.mark.parametrize("spec,config,dtype", list(_config_cases()))
def test_every_config_on_every_test_shape(spec, config, dtype):
    """A forced config runs (or gives way to the kernel that can, as its table says) and is
    right on every test shape, its output poisoned first."""
    from conftest import poison_allocator

    op = spec.public("cuda")
    for shape in spec.test_shapes:
        inputs = spec.make_inputs(shape, dtype, "cuda", seed_for(spec.name, config, dtype, shape))
        ref = spec.reference(**inputs, precise=True)
        poison_allocator(sum(r.numel() * r.element_size() for r in _tensors(ref)), "cuda")
        out = op(**inputs, config=config)
        check_output(spec, out, inputs, dtype, f"{spec.name} config {config} {shape}", ref)
