# SPDX-License-Identifier: Apache-2.0
"""Non-finite and extreme values (issue 34, class 6), for every op, backend and dtype:

- a NaN, +inf or -inf in one element of each floating-point input gives what the float64
  reference gives, NaN where it has NaN (attention: NaN only; a query row whose scores hold
  a NaN gives o = NaN and lse = NaN, never the -inf of a row that saw no key);
- RMSNorm's range (both norm ops): the sum of squares is float32, as in torch's
  F.rms_norm, so a row is exact while sum(x^2) stays below 3.4e38 (checked just below it
  against float64), and a row past it normalizes as the float32 formula does (0 for
  rmsnorm, a uniform row for the fused op), which the tests pin.

Without a GPU the Triton and Pallas backends run in their interpreters; CUDA skips."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import DEVICE, HAS_GPU, HAS_NATIVE, seed_for
from gks import registry

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def _skip(backend):
    if backend.name == "cuda" and not (HAS_GPU and HAS_NATIVE):
        return "CUDA backend needs a GPU and the built library"
    if not HAS_GPU and not backend.interpreted:
        return f"{backend.name} backend has no interpreter mode"
    return None


def _cases():
    for spec in registry.ops():
        values = ("nan",) if spec.family == "attention" else ("nan", "inf", "-inf")
        for backend in spec.backends:
            for dtype in spec.dtypes:
                for value in values:
                    yield pytest.param(spec, backend, dtype, value,
                                       id=f"{spec.name}-{backend.name}-{dtype}-{value}")


@pytest.mark.parametrize("spec,backend,dtype,value", list(_cases()))
def test_a_non_finite_element_gives_the_reference(spec, backend, dtype, value):
    reason = _skip(backend)
    if reason:
        pytest.skip(reason)
    poisoned = 0
    for name in spec.make_inputs(spec.example_shape, dtype, DEVICE, 0):
        inputs = spec.make_inputs(spec.example_shape, dtype, DEVICE, seed_for(spec.name, dtype, value, name))
        t = inputs[name]
        if not (isinstance(t, torch.Tensor) and t.dtype in FLOATS and t.numel() > 0):
            continue
        flat = t.view(-1) if t.is_contiguous() else None
        if flat is None:
            continue
        flat[t.numel() // 2] = float(value)
        poisoned += 1
        out = backend.load()(**inputs)
        check_output(spec, out, inputs, dtype, f"{spec.name}/{backend.name}/{dtype}: {value} in '{name}'")
    assert poisoned, f"{spec.name}: no floating-point input to poison"


NORMS = [registry.get("rmsnorm"), registry.get("softmax_rmsnorm")]
FP32_MAX = torch.finfo(torch.float32).max


def _norm_cases():
    for spec in NORMS:
        for backend in spec.backends:
            for dtype in ("float32", "bfloat16"):  # float16 cannot hold a value that overflows
                yield pytest.param(spec, backend, dtype, id=f"{spec.name}-{backend.name}-{dtype}")


@pytest.mark.parametrize("spec,backend,dtype", list(_norm_cases()))
def test_rmsnorm_range_is_float32_sum_of_squares(spec, backend, dtype):
    reason = _skip(backend)
    if reason:
        pytest.skip(reason)
    n = 1000
    inputs = spec.make_inputs((3, n), dtype, DEVICE, seed_for(spec.name, dtype, "range"))
    x = inputs["x"].float()
    # Row 0: sum(x^2) at a quarter of float32's largest value: in range, exact.
    x[0] = x[0] / x[0].norm() * (FP32_MAX / 4) ** 0.5
    # Row 1: sum(x^2) at about 4x float32's largest value: past the range.
    x[1] = x[1] / x[1].norm() * (4 * FP32_MAX) ** 0.5
    inputs["x"] = x.to(getattr(torch, dtype))
    out = backend.load()(**inputs)
    in_range = {**inputs, "x": inputs["x"][:1]}
    check_output(spec, out[:1], in_range, dtype, f"{spec.name}/{backend.name}: sum(x^2) = 3.4e38 / 4")
    past = {**inputs, "x": inputs["x"][1:2]}
    expected = spec.reference(**past)  # the float32 formula: the documented result
    assert torch.isinf(inputs["x"][1].float().square().sum()), "row 1 must overflow float32"
    torch.testing.assert_close(out[1:2].float(), expected.float(), atol=0, rtol=0,
                               msg=lambda m: f"{spec.name}/{backend.name}: past the range: {m}")
