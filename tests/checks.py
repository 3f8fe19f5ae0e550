# SPDX-License-Identifier: Apache-2.0
"""How outputs are compared with the reference (shared by the test files)."""

from __future__ import annotations

import torch


def assert_matches(out: torch.Tensor, ref: torch.Tensor, dtype: str, tolerance, what: str = "") -> None:
    """out (the op's dtype) against ref (float64): shape, dtype, no NaN where ref has none,
    |out - ref| <= atol + rtol * |ref| everywhere."""
    atol, rtol = tolerance[dtype]
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert out.dtype == getattr(torch, dtype), f"{what}: dtype {out.dtype} != {dtype}"
    torch.testing.assert_close(
        out.to(torch.float64).cpu(), ref.to(torch.float64).cpu(), atol=atol, rtol=rtol,
        equal_nan=True, msg=lambda m: f"{what}: {m}",
    )
