# SPDX-License-Identifier: Apache-2.0
"""Output checks shared by the tests and the benchmark's re-check of timed outputs."""

from __future__ import annotations

from typing import Any

import torch


def assert_matches(out: torch.Tensor, ref: torch.Tensor, dtype: str, tolerance, what: str = "") -> None:
    """out (the op's dtype) against ref (float64): shape, dtype, no NaN where ref has none,
    |out - ref| <= atol + rtol * |ref| everywhere, with (atol, rtol) = tolerance[dtype]."""
    atol, rtol = tolerance[dtype]
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == getattr(torch, dtype), f"{what}: dtype {out.dtype} != {dtype}"
    torch.testing.assert_close(
        out.to(torch.float64), ref.to(device=out.device, dtype=torch.float64), atol=atol, rtol=rtol,
        equal_nan=True, msg=lambda m: f"{what}: {m}",
    )


def check_output(spec, out: Any, inputs: dict, dtype: str, what: str = "", ref: Any = None) -> None:
    """Checks an op's output against its float64 reference (spec.check when the op needs its
    own comparison, e.g. tuple outputs); raises AssertionError with `what` on mismatch."""
    if ref is None:
        ref = spec.reference(**inputs, precise=True)
    if spec.check is not None:
        spec.check(out, ref, dtype, inputs)
    else:
        assert_matches(out, ref, dtype, spec.tolerance, what)
