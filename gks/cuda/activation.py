# SPDX-License-Identifier: Apache-2.0
"""The activation family's DLPack entry points: act_and_mul and act_and_mul_quant. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["act_and_mul_out", "act_and_mul_quant_out"]


def act_and_mul_out(x, y, activation: str = "silu") -> None:
    """y = act(x[..., :d]) * x[..., d:], written into y [..., d] (x's dtype; apart from x).
    activation: 'silu', 'gelu' (erf) or 'gelu_tanh'."""
    _native.module().act_and_mul(x, y, str(activation))


def act_and_mul_quant_out(x, q, scale, activation: str = "silu", scale_ue8m0: bool = False) -> None:
    """act(x[..., :d]) * x[..., d:] in fp32, quantized to e4m3 per 1 x 128 group: q [..., d]
    (float8_e4m3fn) and scale [..., d / 128] (fp32); d a multiple of 128. See
    gks.reference.act_and_mul_quant."""
    _native.module().act_and_mul_quant(x, q, scale, str(activation), bool(scale_ue8m0))
