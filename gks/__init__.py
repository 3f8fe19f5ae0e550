# SPDX-License-Identifier: Apache-2.0
"""gks — GPU Kernel Suite.

``gks.<op>`` runs the CUDA backend on torch tensors (a torch custom op); ``gks.<op>_`` is an
op's in-place form where it has one (``gks.fused_add_rmsnorm_``). The same ops, with
the same meaning, are ``gks.triton.<op>`` (torch tensors), ``gks.pallas.<op>`` (JAX arrays)
and ``gks.reference.<op>`` (plain PyTorch). ``gks.cuda`` holds the framework-neutral
DLPack entry points and ``gks.registry`` the op specs: the one list of ops, through which
all of these find theirs.

Backends are imported on first use, so ``import gks`` needs neither triton nor jax.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_SUBMODULES = ("cuda", "pallas", "reference", "registry", "runtime", "triton")
# Names that are no op of their own: gks.flash_attention (o of flash_attention_fwd, for
# training through autograd).
_EXTRAS = {"flash_attention": "gks._torch_ops.attention"}


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"gks.{name}")
    if name in _EXTRAS:
        fn = globals()[name] = getattr(importlib.import_module(_EXTRAS[name]), name)
        return fn
    from gks import registry

    # `<op>_` is an op's in-place form, where it has one (gks.fused_add_rmsnorm_).
    try:
        spec = registry.get(name[:-1] if name.endswith("_") else name)
    except KeyError:
        spec = None
    if spec is not None and spec.has_backend("cuda"):
        op = getattr(importlib.import_module("gks._torch_ops"), name, None)
        if op is not None:
            # Kept as a module attribute, so that later `gks.<op>` lookups skip this function
            # and its import machinery (several µs a call, as much as a small kernel).
            globals()[name] = op
            return op
    raise AttributeError(f"module 'gks' has no attribute '{name}'")


def __dir__() -> list[str]:
    from gks import registry

    return sorted(set(globals()) | set(_SUBMODULES) | set(_EXTRAS) | set(registry.ops_with("cuda")))
