# SPDX-License-Identifier: Apache-2.0
"""The norms family's DLPack entry points: rmsnorm and its backward, fused_add_rmsnorm,
layernorm, the fused softmax(rmsnorm) and the norms with a quantized output. See gks.cuda."""

from __future__ import annotations

from gks import _native

__all__ = ["rmsnorm_out", "rmsnorm_bwd_out", "fused_add_rmsnorm_out", "layernorm_out", "softmax_rmsnorm_out",
           "rmsnorm_quant_out", "fused_add_rmsnorm_quant_out"]


def rmsnorm_out(x, weight, y, eps: float = 1e-6, config: int = -1) -> None:
    """y = rmsnorm(x, weight, eps), written into y (same shape and dtype as x; y may be x
    itself, in place, and may share no memory with x or weight otherwise).

    config: -1 picks the kernel shape by heuristic, else an index into the library's table
    (gks.registry.get("rmsnorm").configs; csrc/include/gks/norms.h says what each is)."""
    _native.module().rmsnorm(x, weight, y, float(eps), int(config))


def rmsnorm_bwd_out(dy, x, weight, dx, dweight, eps: float = 1e-6, config: int = -1) -> None:
    """The gradients of rmsnorm(x, weight, eps) given dy (x's shape and dtype), written into
    dx (x's shape and dtype; it may be x itself, in place) and dweight ([N], weight's dtype,
    contiguous): rstd recomputed from x, xhat = x * rstd, dx = (dy * weight - xhat *
    mean(dy * weight * xhat)) * rstd, dweight = the sum over the rows of dy * xhat (fp32
    sums; deterministic, through a stream-ordered temporary of a row of fp32 sums per block).

    config: -1 picks the kernel shape by heuristic, else an index into the library's table
    (gks.registry.get("rmsnorm_bwd").configs; csrc/include/gks/norms.h says what each is)."""
    _native.module().rmsnorm_bwd(dy, x, weight, dx, dweight, float(eps), int(config))


def fused_add_rmsnorm_out(x, residual, weight, y, residual_out, eps: float = 1e-6, config: int = -1) -> None:
    """residual_out = x + residual (added in fp32, rounded to x's dtype) and y =
    rmsnorm(residual_out, weight, eps), in one pass. All of x's shape and dtype but weight
    [N]. In place (FlashInfer's form): y may be x and residual_out may be residual; no other
    two may share memory. config: as for rmsnorm_out (the same kernel shapes)."""
    _native.module().fused_add_rmsnorm(x, residual, weight, y, residual_out, float(eps), int(config))


def layernorm_out(x, weight, bias, y, eps: float = 1e-5, config: int = -1) -> None:
    """y = layernorm(x, weight, bias, eps), written into y (x's shape and dtype; y may be x
    itself, in place). bias: [N] or None. config: as for rmsnorm_out (the same kernel
    shapes)."""
    has_bias = bias is not None
    _native.module().layernorm(x, weight, bias if has_bias else weight, has_bias, y, float(eps), int(config))


def softmax_rmsnorm_out(x, weight, y, eps: float = 1e-6, config: int = -1) -> None:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim, in one kernel, written into y
    (same shape and dtype as x; y may be x itself, in place). config: -1 picks the kernel
    shape by heuristic, else an
    index into the library's table (gks.registry.get("softmax_rmsnorm").configs: softmax's,
    then "cluster", long 16-byte aligned rows split over a thread block cluster on sm_90, and
    "staged", persistent blocks that fetch their next row into shared memory while they work
    on the current one; csrc/include/gks/norms.h says more)."""
    _native.module().softmax_rmsnorm(x, weight, y, float(eps), int(config))


def rmsnorm_quant_out(x, weight, q, scale, eps: float = 1e-6, granularity: str = "token",
                      scale_ue8m0: bool = False) -> None:
    """rmsnorm(x, weight, eps) in fp32, quantized into q (int8: per token; float8_e4m3fn:
    per token or per 1 x 128 group) and scale (fp32 [..., 1] or [..., N / 128]); see
    gks.reference.rmsnorm_quant."""
    _native.module().rmsnorm_quant(x, weight, q, scale, eps, granularity, bool(scale_ue8m0))


def fused_add_rmsnorm_quant_out(x, residual, weight, q, scale, residual_out, eps: float = 1e-6,
                                granularity: str = "token", scale_ue8m0: bool = False) -> None:
    """residual_out = x + residual (rounded to x's dtype; residual_out may be residual), then
    rmsnorm_quant_out of it into q and scale."""
    _native.module().fused_add_rmsnorm_quant(x, residual, weight, q, scale, residual_out, eps, granularity,
                                             bool(scale_ue8m0))
