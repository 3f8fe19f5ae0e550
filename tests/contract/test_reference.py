# SPDX-License-Identifier: Apache-2.0
"""Every op x backend x dtype x test shape in the registry, against the fp64 reference.

Inputs are fresh seeded random tensors per case; on the GPU the output block is poisoned
first (see conftest.poison_allocator). Without a GPU, the Triton and Pallas backends run in
their interpreters on the shapes small enough for them; the CUDA backend skips.
"""

from __future__ import annotations

import math

import pytest

from checks import check_output
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, poison_allocator, seed_for
from gks import registry

# Interpreters run on numpy, one program at a time: keep their inputs small.
INTERPRET_MAX_ELEMENTS = 1 << 18


def _cases():
    for spec in registry.ops():
        for backend in spec.backends:
            for dtype in spec.dtypes:
                for shape in spec.test_shapes:
                    yield pytest.param(
                        spec, backend, dtype, shape,
                        id=f"{spec.name}-{backend.name}-{dtype}-{'x'.join(map(str, shape))}",
                    )


def skip_reason(backend, shape) -> str | None:
    if backend.name == "cuda":
        if not HAS_GPU:
            return "CUDA backend needs a GPU; this machine has none"
        if not HAS_NATIVE:
            return "the gks CUDA library is not built"
    elif not HAS_GPU:
        if not backend.interpreted:
            return f"{backend.name} backend has no interpreter mode"
        if math.prod(shape) > INTERPRET_MAX_ELEMENTS:
            return "too large for the interpreter; runs on the GPU"
    return None


@pytest.mark.parametrize("spec,backend,dtype,shape", list(_cases()))
def test_matches_reference(spec, backend, dtype, shape):
    reason = skip_reason(backend, shape)
    if reason:
        pytest.skip(reason)
    inputs = spec.make_inputs(shape, dtype, DEVICE, seed_for(spec.name, backend.name, dtype, shape))
    ref = spec.reference(**inputs, precise=True)
    poison_allocator(sum(r.numel() * r.element_size() for r in _tensors(ref)), DEVICE)
    out = backend.load()(**inputs)
    check_output(spec, out, inputs, dtype, f"{spec.name}/{backend.name}/{dtype}/{shape}", ref)


def _tensors(value):
    return value if isinstance(value, tuple) else (value,)
