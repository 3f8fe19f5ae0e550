# SPDX-License-Identifier: Apache-2.0
"""The activation family's DLPack entry points: act_and_mul. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["act_and_mul_out"]


def act_and_mul_out(x, y, activation: str = "silu") -> None:
    """y = act(x[..., :d]) * x[..., d:], written into y [..., d] (x's dtype; apart from x).
    activation: 'silu', 'gelu' (erf) or 'gelu_tanh'."""
    _native.module().act_and_mul(x, y, str(activation))
