# SPDX-License-Identifier: Apache-2.0
"""The gemm family as XLA custom calls: sgemm, wmma_gemm, int8_gemm, gemm, gemm_fp8, grouped_gemm,
grouped_gemm_fp8.
See gks.jax.
JAX arrays are row-major, so b (and b_q) always reach the kernels [K, N] row-major."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from gks.jax._ffi import call, dtype_of, like, tuned
from gks.specs.gemm import GATED, checked_fp8_out_dtype, epilogue_code, grouped_gemm_shape

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "gemm", "gemm_fp8", "grouped_gemm", "grouped_gemm_fp8"]


def _mnk(a, b) -> tuple[int, int, int] | None:
    """The spec dims (M, N, K) of a [M, K] @ b [K, N]; None unless both are matrices."""
    return (a.shape[0], b.shape[1], a.shape[1]) if a.ndim == 2 and b.ndim == 2 else None


def _mn(a, b) -> tuple[int, int]:
    """c's [M, N]; for operands that are not matrices (which the library refuses, naming
    them) whatever dims there are."""
    return (a.shape[0] if a.ndim else 0, b.shape[-1] if b.ndim else 0)


def sgemm(a, b, config: int = -1):
    """c = a @ b in fp32 on CUDA cores (see gks.sgemm)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    return call("sgemm", {"a": a, "b": b}, (like(a, jnp.float32, _mn(a, b)),),
                config=tuned("sgemm", config, a.dtype, _mnk(a, b)))[0]


def wmma_gemm(a, b, out_dtype=jnp.float32, config: int = -1):
    """c = a @ b on Tensor Cores (WMMA), c float32 or a's dtype (see gks.wmma_gemm)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    out = dtype_of(out_dtype, "wmma_gemm", "out_dtype")
    if out not in (np.dtype(jnp.float32), np.dtype(a.dtype)):
        raise TypeError(f"gks.wmma_gemm: argument 'out_dtype' must be float32 or the dtype of 'a' ({a.dtype}), "
                        f"got {out}")
    return call("wmma_gemm", {"a": a, "b": b}, (like(a, out, _mn(a, b)),),
                config=tuned("wmma_gemm", config, a.dtype, _mnk(a, b)))[0]


def _epilogue(bias, row_scale, col_scale, gated) -> dict:
    """The epilogue's inputs given (arrays, and gated by name), as the spec's inputs name them."""
    given = {"bias": bias, "row_scale": row_scale, "col_scale": col_scale}
    out = {k: jnp.asarray(v) for k, v in given.items() if v is not None}
    if gated is not None:
        out["gated"] = gated
    return out


def _gated_mn(a, b, gated) -> tuple[int, int]:
    """c's [M, N], or [M, N / 2] with a gated unit (an odd N is the library's to refuse)."""
    m, n = _mn(a, b)
    return (m, n // 2) if gated is not None else (m, n)


def gemm(a, b, out_dtype=None, config: int = -1, *, bias=None, row_scale=None, col_scale=None, gated=None):
    """c = a @ b, c in a's dtype or out_dtype (float32 or a's), through the fused epilogue
    where given: bias, row_scale, col_scale, gated (see gks.gemm)."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    out = np.dtype(a.dtype) if out_dtype is None else dtype_of(out_dtype, "gemm", "out_dtype")
    dims = _mnk(a, b)
    if dims is not None and gated in (None, *GATED):  # the tuned tables key on the epilogue too, as gks.gemm's
        dims += (epilogue_code(bias is not None, row_scale is not None or col_scale is not None, gated),)
    return call("gemm", {"a": a, "b": b, **_epilogue(bias, row_scale, col_scale, gated)},
                (like(a, out, _gated_mn(a, b, gated)),), config=tuned("gemm", config, a.dtype, dims))[0]


def int8_gemm(a_q, b_q, a_scale, b_scale, out_dtype=jnp.float16, config: int = -1):
    """c = float(a_q @ b_q) * a_scale * b_scale in out_dtype (see gks.int8_gemm). config -1
    is the heuristic, as gks.int8_gemm gives a row-major b_q (a JAX array always is one):
    the tuned table holds K-major b_q."""
    a_q, b_q, a_scale, b_scale = (jnp.asarray(t) for t in (a_q, b_q, a_scale, b_scale))
    out = dtype_of(out_dtype, "int8_gemm", "out_dtype")
    if out not in (np.dtype(jnp.float16), np.dtype(jnp.bfloat16), np.dtype(jnp.float32)):
        raise TypeError(f"gks.int8_gemm: argument 'out_dtype' must be float16, bfloat16 or float32, got {out}")
    return call("int8_gemm", {"a_q": a_q, "b_q": b_q, "a_scale": a_scale, "b_scale": b_scale},
                (like(a_q, out, _mn(a_q, b_q)),), config=config)[0]


def gemm_fp8(a, b, a_scale, b_scale, scaling: str = "tensor", out_dtype=jnp.bfloat16, config: int = -1, *,
             bias=None, gated=None):
    """c = fp8 a @ b with fp32 accumulation and the fp32 scales of `scaling` ('tensor', 'row'
    or 'block'), then the fused epilogue's bias and gated unit where given, c in out_dtype
    (see gks.gemm_fp8). b reaches the kernel row-major (a JAX array always is one), which it
    transposes first; config -1 is the heuristic."""
    a, b, a_scale, b_scale = (jnp.asarray(t) for t in (a, b, a_scale, b_scale))
    out = checked_fp8_out_dtype(dtype_of(out_dtype, "gemm_fp8", "out_dtype"), "gks.gemm_fp8")
    return call("gemm_fp8", {"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "scaling": scaling,
                             **_epilogue(bias, None, None, gated)},
                (like(a, out, _gated_mn(a, b, gated)),), config=config)[0]


def grouped_gemm(a, b, group_offsets=None, group_counts=None, config: int = -1):
    """The MoE expert GEMMs in one launch (see gks.grouped_gemm): exactly one of
    group_offsets ([G + 1] int32; a [T, K] -> c [T, N]) and group_counts ([G] int32; a
    [G, M_max, K] -> c [G, M_max, N]); b [G, K, N]. The offsets and counts stay arrays."""
    a, b = jnp.asarray(a), jnp.asarray(b)
    group_offsets = None if group_offsets is None else jnp.asarray(group_offsets)
    group_counts = None if group_counts is None else jnp.asarray(group_counts)
    c_shape = (*a.shape[:-1], b.shape[-1] if b.ndim else 0)
    dims = None
    if b.ndim == 3 and a.ndim in (2, 3) and (group_offsets is None) != (group_counts is None):
        dims = grouped_gemm_shape(a, b, group_counts is not None)
    return call("grouped_gemm", {"a": a, "b": b, "group_offsets": group_offsets, "group_counts": group_counts},
                (like(a, shape=c_shape),), config=tuned("grouped_gemm", config, a.dtype, dims))[0]


def grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets=None, group_counts=None, out_dtype=jnp.bfloat16,
                     config: int = -1):
    """grouped_gemm's product of float8_e4m3fn a and b with DeepSeek-V3's block scales, c in
    out_dtype (see gks.grouped_gemm_fp8). b reaches the kernel row-major (a JAX array always
    is one), which it transposes a group at a time first; config -1 is the heuristic."""
    a, b, a_scale, b_scale = (jnp.asarray(t) for t in (a, b, a_scale, b_scale))
    group_offsets = None if group_offsets is None else jnp.asarray(group_offsets)
    group_counts = None if group_counts is None else jnp.asarray(group_counts)
    out = checked_fp8_out_dtype(dtype_of(out_dtype, "grouped_gemm_fp8", "out_dtype"), "gks.grouped_gemm_fp8")
    c_shape = (*a.shape[:-1], b.shape[-1] if b.ndim else 0)
    return call("grouped_gemm_fp8", {"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale,
                                     "group_offsets": group_offsets, "group_counts": group_counts},
                (like(a, out, c_shape),), config=config)[0]
