# SPDX-License-Identifier: Apache-2.0
"""Torch-in, torch-out adapters over the Pallas ops, for the test and bench harness (whose
common currency is torch tensors). Tensors cross by DLPack, zero-copy where the layout
allows; the public gks.pallas ops take and return JAX arrays. ``_bridge.<op>`` is
``via_jax(gks.pallas.<op>)`` for every op with a Pallas backend (made on first use)."""

from __future__ import annotations

import functools

import jax
import torch

from gks import pallas


def _to_jax(value):
    if isinstance(value, torch.Tensor):
        value = value.contiguous()
        if value.data_ptr() % 16:  # JAX refuses buffers that are not 16-byte aligned
            value = value.clone()
        return jax.dlpack.from_dlpack(value)
    return value


def _to_torch(value):
    if isinstance(value, jax.Array):
        return torch.from_dlpack(value)
    if isinstance(value, tuple):
        return tuple(_to_torch(v) for v in value)
    return value


def via_jax(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [_to_jax(a) for a in args]
        kwargs = {k: _to_jax(v) for k, v in kwargs.items()}
        return _to_torch(fn(*args, **kwargs))

    return wrapper


def __getattr__(name: str):
    """via_jax(gks.pallas.<name>) for an op with a Pallas backend, kept in the module."""
    from gks import registry

    if name.startswith("__") or name not in registry.ops_with("pallas"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    fn = globals()[name] = via_jax(getattr(pallas, name))
    return fn
