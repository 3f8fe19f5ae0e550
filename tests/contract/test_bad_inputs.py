# SPDX-License-Identifier: Apache-2.0
"""Bad input gets the same clear exception from every backend: each spec's bad_inputs
table (registry.BadInput) run on each of the op's backends. The error must be of the
declared type and its message must name the argument and what was expected. Triton and
Pallas run here on any machine (their checks come before any launch); the CUDA backend
needs a GPU, since a CPU tensor is refused for being on the CPU first."""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, HAS_NATIVE
from gks import registry


def _cases():
    for spec in registry.ops():
        for backend in spec.backends:
            for bad in spec.bad_inputs:
                yield pytest.param(spec, backend, bad, id=f"{spec.name}-{backend.name}-{bad.id}")


@pytest.mark.parametrize("spec,backend,bad", list(_cases()))
def test_every_backend_refuses_it_alike(spec, backend, bad):
    if backend.name == "cuda" and not (HAS_GPU and HAS_NATIVE):
        pytest.skip("the CUDA backend's checks run on CUDA tensors: needs a GPU and the library")
    if backend.name == "pallas" and not bad.jax:
        pytest.skip("not representable as JAX arrays (no strides; no float64 by default)")
    if bad.gpu and not HAS_GPU:
        pytest.skip("mixes the GPU with the host: needs a GPU")
    inputs = bad.make(torch, DEVICE)
    with pytest.raises(bad.error) as info:
        backend.load()(**inputs)
        if backend.name == "cuda":
            torch.cuda.synchronize()
    assert bad.message in str(info.value), f"{backend.name}: {info.value}"


@pytest.mark.skipif(not HAS_NATIVE, reason="needs the built library")
@pytest.mark.parametrize("spec", [s for s in registry.ops() if s.has_backend("cuda")], ids=lambda s: s.name)
def test_the_cuda_backend_refuses_host_tensors(spec):
    """Runs without a GPU too: the C++ API checks the device before it touches CUDA."""
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[-1], "cpu", 0)
    with pytest.raises(ValueError, match=rf"gks\.{spec.name}: argument '\w+' must be a CUDA tensor, "
                                         r"got a tensor on cpu"):
        spec.public("cuda")(**inputs)


@pytest.mark.parametrize("spec", [s for s in registry.ops() if s.has_backend("pallas")], ids=lambda s: s.name)
def test_the_pallas_backend_says_it_takes_jax_arrays(spec):
    """gks.pallas.<op> given torch tensors names the argument and asks for a JAX array."""
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[-1], "cpu", 0)
    with pytest.raises(TypeError, match=rf"gks\.pallas\.{spec.name}: argument '\w+' must be a JAX array, "
                                        r"got torch\.Tensor"):
        spec.public("pallas")(**inputs)


def _config_cases():
    import inspect

    for spec in registry.ops():
        for backend in spec.backends:
            if "config" in inspect.signature(spec.public(backend.name)).parameters:
                yield pytest.param(spec, backend, id=f"{spec.name}-{backend.name}")


@pytest.mark.parametrize("spec,backend", list(_config_cases()))
@pytest.mark.parametrize("config", [2**32, 2**31, -(2**31) - 2])
def test_a_config_past_int32_is_refused_not_wrapped(spec, backend, config):
    """config arrives as a Python int: 2^32 must not become config 0 on the way to the kernel.
    The CUDA bindings check it before the tensors, so this runs without a GPU too."""
    if backend.name == "cuda" and not HAS_NATIVE:
        pytest.skip("needs the built library")
    device = DEVICE if backend.name != "cuda" else ("cuda" if HAS_GPU else "cpu")
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[-1], device, 0)
    with pytest.raises(ValueError, match="argument 'config' must be -1"):
        backend.load()(**inputs, config=config)


def _fake_cases():
    for spec in registry.ops():
        if spec.has_backend("cuda"):
            for bad in spec.bad_inputs:
                yield pytest.param(spec, bad, id=f"{spec.name}-{bad.id}")


@pytest.mark.skipif(not HAS_NATIVE, reason="the fake kernels run the library's checks: needs the built library")
@pytest.mark.parametrize("spec,bad", list(_fake_cases()))
def test_the_fake_kernel_refuses_it_as_the_op_does(spec, bad):
    """torch.compile traces an op with FakeTensors: its fake kernel refuses what the CUDA op
    refuses, with the same error, so a compiled model fails where the mistake is. No GPU
    needed: the library checks the FakeTensors' metadata (gks._torch_ops._fake)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        inputs = bad.make(torch, "cuda")
        with pytest.raises(bad.error) as info:
            spec.public("cuda").op(**inputs)
    assert bad.message in str(info.value), str(info.value)


@pytest.mark.skipif(not HAS_NATIVE, reason="the fake kernels run the library's checks: needs the built library")
@pytest.mark.parametrize("spec", [s for s in registry.ops() if s.has_backend("cuda")], ids=lambda s: s.name)
@pytest.mark.parametrize("shape_of", ["example", "first-test-shape"])
def test_the_fake_kernel_takes_good_inputs_and_shapes_the_output(spec, shape_of):
    shape = spec.example_shape if shape_of == "example" else spec.test_shapes[0]
    # Real inputs made on this machine, then described by metadata alone (meta tensors,
    # which the fake kernel stands in for the CUDA ones).
    inputs = {k: (v.to("meta") if isinstance(v, torch.Tensor) else v)
              for k, v in spec.make_inputs(shape, spec.dtypes[-1], DEVICE, 0).items()}
    out = spec.public("cuda").op(**inputs)
    ref = spec.reference(**inputs)
    outs, refs = (out, ref) if isinstance(ref, tuple) else ((out,), (ref,))
    assert [(tuple(o.shape), o.dtype) for o in outs] == [(tuple(r.shape), r.dtype) for r in refs]


def _device_mix_cases():
    for spec in registry.ops():
        for backend in spec.backends:
            if backend.name != "pallas":  # JAX arrays carry their own placement
                yield pytest.param(spec, backend, id=f"{spec.name}-{backend.name}")


@pytest.mark.skipif(not HAS_GPU, reason="mixes the GPU with the host: needs a GPU")
@pytest.mark.parametrize("spec,backend", list(_device_mix_cases()))
def test_an_argument_on_another_device_is_refused_naming_it(spec, backend):
    """Each tensor argument after the first, moved to the host in turn, is refused naming it
    and the first (issue 34, classes 4 and 8), by every backend alike."""
    if backend.name == "cuda" and not HAS_NATIVE:
        pytest.skip("needs the built library")
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[-1], "cuda", 0)
    names = [n for n, v in inputs.items() if isinstance(v, torch.Tensor)]
    for name in names[1:]:
        mixed = {**inputs, name: inputs[name].cpu()}
        with pytest.raises(ValueError, match=rf"argument '{name}' must be on the device of '{names[0]}'"):
            backend.load()(**mixed)
            torch.cuda.synchronize()
