# SPDX-License-Identifier: Apache-2.0
"""The loss family as XLA custom calls: cross_entropy, differentiable in the logits through
the library's backward kernel (jax.custom_vjp). See gks.jax."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from gks.jax._ffi import call, like

__all__ = ["cross_entropy"]

_OP = "gks.cross_entropy"


def _fwd_entry(cuda, i, o, **kw):
    cuda.cross_entropy_fwd_out(i["logits"], i["target"], o[0], o[1], i["ignore_index"], **kw)


def _bwd_entry(cuda, i, o, **kw):
    cuda.cross_entropy_bwd_out(i["logits"], i["target"], i["lse"], i["dloss"], o[0], i["ignore_index"], **kw)


def _rows(logits) -> int:
    return logits.shape[0] if logits.ndim else 0


def _forward(logits, target, ignore_index):
    """(loss [T], lse [T]), float32, per row."""
    rows = (_rows(logits),)
    return call("cross_entropy", {"logits": logits, "target": target, "ignore_index": ignore_index},
                (like(logits, jnp.float32, rows), like(logits, jnp.float32, rows)), entry=_fwd_entry)


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _row_losses(logits, target, ignore_index):
    return _forward(logits, target, ignore_index)[0]


def _row_losses_fwd(logits, target, ignore_index):
    loss, lse = _forward(logits, target, ignore_index)
    return loss, (logits, target, lse)


def _row_losses_bwd(ignore_index, residuals, dloss):
    logits, target, lse = residuals
    (dlogits,) = call("cross_entropy", {"logits": logits, "target": target, "lse": lse,
                                        "dloss": dloss.astype(jnp.float32), "ignore_index": ignore_index},
                      (like(logits),), entry=_bwd_entry)
    return dlogits, None


_row_losses.defvjp(_row_losses_fwd, _row_losses_bwd)


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    """Cross entropy of logits [T, V] against target [T] (int32/int64), in the logits' dtype:
    'mean' over the rows not ignored (NaN if none), 'sum' or 'none' (see gks.cross_entropy).
    Differentiable in logits."""
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{_OP}: argument 'reduction' must be 'mean', 'sum' or 'none', got {reduction!r}")
    logits, target = jnp.asarray(logits), jnp.asarray(target)
    loss = _row_losses(logits, target, int(ignore_index))
    if reduction == "none":
        return loss.astype(logits.dtype)
    total = loss.sum()
    if reduction == "sum":
        return total.astype(logits.dtype)
    return (total / (target != ignore_index).sum()).astype(logits.dtype)
