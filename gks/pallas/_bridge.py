# SPDX-License-Identifier: Apache-2.0
"""Torch-in, torch-out adapters over the Pallas ops, for the test and bench harness (whose
common currency is torch tensors). Tensors cross by DLPack, zero-copy where the layout
allows; the public gks.pallas ops take and return JAX arrays."""

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


rmsnorm = via_jax(pallas.rmsnorm)
softmax = via_jax(pallas.softmax)
softmax_rmsnorm = via_jax(pallas.softmax_rmsnorm)
quantize_int8 = via_jax(pallas.quantize_int8)
dequantize_int8 = via_jax(pallas.dequantize_int8)
sgemm = via_jax(pallas.sgemm)
flash_attention_fwd = via_jax(pallas.flash_attention_fwd)
