# SPDX-License-Identifier: Apache-2.0
"""Argument checks the Python ports share with the C++ API's bindings
(csrc/bindings/common.h), so that every backend refuses the same numbers with the same
message: a Python float becomes the kernels' float32 only if it survives the narrowing."""

from __future__ import annotations

import numpy as np


def float32_scalar(value: float, arg: str, op: str) -> float:
    """`value` as float32 holds it, or ValueError naming `arg` when the narrowing would turn
    a non-zero value into 0 or a finite one into inf (an eps of 1e-50 must not become 0).
    NaN and infinities pass, for the op's own checks."""
    v = float(value)
    with np.errstate(over="ignore", under="ignore"):
        narrowed = float(np.float32(v))
    if (v != 0 and narrowed == 0) or (np.isfinite(v) and np.isinf(narrowed)):
        raise ValueError(f"{op}: argument '{arg}' must be 0 or of a magnitude float32 holds "
                         f"(1.4e-45 to 3.4e+38), got {value}")
    return narrowed


# act_and_mul's activations, as the C++ binding names them (csrc/bindings/activation.cc).
ACTIVATIONS = ("silu", "gelu", "gelu_tanh")


def activation_index(activation, op: str) -> int:
    """The activation's index in ACTIVATIONS (the kernels' order), or the ValueError every
    backend gives."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"{op}: argument 'activation' must be 'silu', 'gelu' or 'gelu_tanh', got '{activation}'")
    return ACTIVATIONS.index(activation)
