# SPDX-License-Identifier: Apache-2.0
"""SGEMM in Pallas: c = a @ b in fp32 with precision HIGHEST (on the GPU's Triton
lowering: input_precision "ieee", FP32 FMA, never TF32).

One program per (BLOCK_M x BLOCK_N) tile of c; it walks K in BLOCK_K slices of the a-row
and b-column strips it was handed. Block shapes must be powers of two on the Triton
lowering, so the operands are zero-padded to whole blocks (zeros add nothing to the sums)
and the result is sliced back."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import default_interpret

BLOCK_M = 64
BLOCK_N = 64
BLOCK_K = 32


def _kernel(a_ref, b_ref, c_ref, *, k_steps):
    def step(i, acc):
        a = a_ref[:, pl.ds(i * BLOCK_K, BLOCK_K)]
        b = b_ref[pl.ds(i * BLOCK_K, BLOCK_K), :]
        return acc + jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST,
                             preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, k_steps, step, jnp.zeros((BLOCK_M, BLOCK_N), jnp.float32))
    c_ref[...] = acc


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@functools.partial(jax.jit, static_argnames=("interpret",))
def _sgemm(a, b, *, interpret):
    m, k = a.shape
    n = b.shape[1]
    mp, np_, kp = _round_up(m, BLOCK_M), _round_up(n, BLOCK_N), _round_up(k, BLOCK_K)
    if (mp, kp) != (m, k):
        a = jnp.pad(a, ((0, mp - m), (0, kp - k)))
    if (kp, np_) != (k, n):
        b = jnp.pad(b, ((0, kp - k), (0, np_ - n)))
    c = pl.pallas_call(
        functools.partial(_kernel, k_steps=kp // BLOCK_K),
        out_shape=jax.ShapeDtypeStruct((mp, np_), jnp.float32),
        grid=(mp // BLOCK_M, np_ // BLOCK_N),
        in_specs=[
            pl.BlockSpec((BLOCK_M, kp), lambda i, j: (i, 0)),
            pl.BlockSpec((kp, BLOCK_N), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((BLOCK_M, BLOCK_N), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=4, num_stages=3),
    )(a, b)
    return c[:m, :n] if (mp, np_) != (m, n) else c


def sgemm(a: jax.Array, b: jax.Array, *, interpret: bool | None = None) -> jax.Array:
    """c [M, N] float32 = a [M, K] @ b [K, N] (float32 JAX arrays)."""
    op = "gks.pallas.sgemm"
    for x, name in ((a, "a"), (b, "b")):
        if x.dtype != jnp.float32:
            raise TypeError(f"{op}: argument '{name}' must be float32, got {x.dtype}")
        if x.ndim != 2:
            raise ValueError(f"{op}: argument '{name}' must be a 2-D matrix, got {x.ndim} dims "
                             f"(shape {list(x.shape)})")
    if b.shape[0] != a.shape[1]:
        raise ValueError(f"{op}: argument 'b' must have shape [K, N] with K = {a.shape[1]} "
                         f"(the columns of 'a', {list(a.shape)}), got {list(b.shape)}")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return jnp.zeros((m, n), jnp.float32)
    if interpret is None:
        interpret = default_interpret(a)
    return _sgemm(a, b, interpret=interpret)
