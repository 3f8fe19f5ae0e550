# SPDX-License-Identifier: Apache-2.0
"""gks — GPU Kernel Suite.

``gks.<op>`` runs the CUDA backend on torch tensors (a torch custom op). The same ops, with
the same meaning, are ``gks.triton.<op>`` (torch tensors), ``gks.pallas.<op>`` (JAX arrays)
and ``gks.reference.<op>`` (plain PyTorch). ``gks.cuda`` holds the framework-neutral
DLPack entry points and ``gks.registry`` the op specs.

Backends are imported on first use, so ``import gks`` needs neither triton nor jax.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = ("cuda", "pallas", "reference", "registry", "triton")
# The CUDA-backed torch ops; kept in step with gks._torch_ops.__all__ by a test.
_TORCH_OPS = (
    "rmsnorm", "softmax", "softmax_rmsnorm", "quantize_int8", "dequantize_int8",
    "sgemm", "wmma_gemm", "int8_gemm", "gemm", "flash_attention_fwd",
)


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"gks.{name}")
    if name in _TORCH_OPS:
        # Kept as a module attribute, so that later `gks.<op>` lookups skip this function
        # and its import machinery (several µs a call, as much as a small kernel).
        op = getattr(importlib.import_module("gks._torch_ops"), name)
        globals()[name] = op
        return op
    raise AttributeError(f"module 'gks' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted(list(globals()) + list(_SUBMODULES) + list(_TORCH_OPS))
