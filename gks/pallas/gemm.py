# SPDX-License-Identifier: Apache-2.0
"""SGEMM in Pallas: c = a @ b in fp32 with precision HIGHEST (on the GPU's Triton
lowering: input_precision "ieee", FP32 FMA, never TF32).

One program per (BLOCK_M x BLOCK_N) tile of c; it walks K in BLOCK_K slices of the a-row
and b-column strips it was handed. Block shapes must be powers of two on the Triton
lowering, so the operands are zero-padded to whole blocks (zeros add nothing to the sums)
and the result is sliced back. The block shape and launch are one of CONFIGS: `config=i`
forces the i-th; -1 takes the one `python -m gks autotune --backend pallas --kernel sgemm`
stored for the GPU, dtype and shape bucket, else the first."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as plgpu

from gks.pallas._common import default_interpret, takes_arrays, tuned_config

__all__ = ["sgemm", "sgemm_config_names"]

# (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); the first is the default.
CONFIGS = [(64, 64, 32, 4, 3), (128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3),
           (128, 128, 16, 8, 3), (32, 64, 32, 4, 4)]


def sgemm_config_names() -> list[str]:
    """Names of CONFIGS, in the order `config` indexes."""
    return [f"{bm}x{bn}x{bk}_w{w}_s{st}" for bm, bn, bk, w, st in CONFIGS]


def _kernel(a_ref, b_ref, c_ref, *, k_steps, block_k):
    def step(i, acc):
        a = a_ref[:, pl.ds(i * block_k, block_k)]
        b = b_ref[pl.ds(i * block_k, block_k), :]
        return acc + jnp.dot(a, b, precision=jax.lax.Precision.HIGHEST,
                             preferred_element_type=jnp.float32)

    acc = jax.lax.fori_loop(0, k_steps, step, jnp.zeros(c_ref.shape, jnp.float32))
    c_ref[...] = acc


def _round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@functools.partial(jax.jit, static_argnames=("interpret", "config"))
def _sgemm(a, b, *, interpret, config):
    bm, bn, bk, warps, stages = CONFIGS[config]
    m, k = a.shape
    n = b.shape[1]
    mp, np_, kp = _round_up(m, bm), _round_up(n, bn), _round_up(k, bk)
    if (mp, kp) != (m, k):
        a = jnp.pad(a, ((0, mp - m), (0, kp - k)))
    if (kp, np_) != (k, n):
        b = jnp.pad(b, ((0, kp - k), (0, np_ - n)))
    c = pl.pallas_call(
        functools.partial(_kernel, k_steps=kp // bk, block_k=bk),
        out_shape=jax.ShapeDtypeStruct((mp, np_), jnp.float32),
        grid=(mp // bm, np_ // bn),
        in_specs=[
            pl.BlockSpec((bm, kp), lambda i, j: (i, 0)),
            pl.BlockSpec((kp, bn), lambda i, j: (0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j: (i, j)),
        interpret=interpret,
        compiler_params=plgpu.CompilerParams(num_warps=warps, num_stages=stages),
    )(a, b)
    return c[:m, :n] if (mp, np_) != (m, n) else c


@takes_arrays("a", "b")
def sgemm(a: jax.Array, b: jax.Array, *, interpret: bool | None = None, config: int = -1) -> jax.Array:
    """c [M, N] float32 = a [M, K] @ b [K, N] (float32 JAX arrays). config: -1 = the autotuned
    block shape if any, else CONFIGS[0]; i = CONFIGS[i] (names: sgemm_config_names())."""
    op = "gks.pallas.sgemm"
    if not isinstance(config, int) or not -1 <= config < len(CONFIGS):
        raise ValueError(f"{op}: argument 'config' must be -1 (the tuned entry, else the first) or "
                         f"an index below {len(CONFIGS)} into gks.pallas.sgemm_config_names(), "
                         f"got {config!r}")
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
    if config == -1:
        tuned = None if interpret else tuned_config(a, "pallas.sgemm", "float32", (m, n, k))
        config = 0 if tuned is None else tuned
    return _sgemm(a, b, interpret=interpret, config=config)
