# SPDX-License-Identifier: Apache-2.0
"""The norms family's torch ops: gks::rmsnorm (differentiable in x and weight: its backward
is gks::rmsnorm_bwd; and its in-place form gks::rmsnorm_), gks::fused_add_rmsnorm (and its
in-place form
gks::fused_add_rmsnorm_), gks::layernorm, gks::softmax_rmsnorm (softmax's row kernel with the norm folded
in), and gks::rmsnorm_quant / gks::fused_add_rmsnorm_quant (the norm with an int8 or fp8 output). See gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op
from gks._torch_ops._fake import validate
from gks.runtime.dims import row_dims
from gks.runtime.tables import resolve_config

__all__ = ["rmsnorm", "rmsnorm_bwd", "rmsnorm_", "fused_add_rmsnorm", "fused_add_rmsnorm_", "layernorm",
           "softmax_rmsnorm", "rmsnorm_quant", "fused_add_rmsnorm_quant"]


def _rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """RMSNorm over the last dim of x [..., N]; fp32 math, output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides.
    weight: [N], x's dtype. Runs on the current CUDA stream.
    config: the kernel shape (-1: the tuned table's pick for this shape if any, else the
    heuristic; see gks.cuda.rmsnorm_out). The sum of squares is fp32, as in F.rms_norm: exact
    while sum(x^2) < 3.4e38; a row past that gives 0 (the fp32 formula's result), in every
    backend.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.rmsnorm_out(x, weight, y, eps, resolve_config("rmsnorm", x, row_dims(x), config))
    return y


rmsnorm = gks_op("rmsnorm", _rmsnorm)


@rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.rmsnorm_out, x, weight, y, eps, config)
    return y


def _rmsnorm_bwd(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                 config: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight): the gradients of gks.rmsnorm(x, weight, eps) given dy, the gradient of
    its output (x's shape and dtype, last dim contiguous). rstd is recomputed from x; xhat =
    x * rstd, dx = (dy * weight - xhat * mean(dy * weight * xhat)) * rstd in x's dtype and
    dweight = the sum over the rows of dy * xhat in weight's, fp32 sums. dweight is
    deterministic (no atomics: per-block partial sums in a stream-ordered temporary, added up
    in a fixed order). config: the row kernels' shape (-1: the tuned table's pick, else the
    heuristic; see gks.cuda.rmsnorm_bwd_out). Runs on the current CUDA stream.
    """
    dx = torch.empty_like(x, memory_format=torch.contiguous_format)
    dweight = torch.empty_like(weight, memory_format=torch.contiguous_format)
    cuda.rmsnorm_bwd_out(dy, x, weight, dx, dweight, eps, resolve_config("rmsnorm_bwd", x, row_dims(x), config))
    return dx, dweight


rmsnorm_bwd = gks_op("rmsnorm_bwd", _rmsnorm_bwd)


@rmsnorm_bwd.op.register_fake
def _(dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
      config: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    dweight = torch.empty(weight.shape, dtype=weight.dtype, device=weight.device)
    validate(cuda.rmsnorm_bwd_out, dy, x, weight, dx, dweight, eps, config)
    return dx, dweight


# gks.rmsnorm is differentiable in x and weight: its backward is gks.rmsnorm_bwd on the saved
# x and weight (nothing else is saved: rstd is recomputed, a pass over x the backward makes
# anyway). The forward's config picks the forward's kernel only.
def _rmsnorm_setup_context(ctx, inputs, output) -> None:
    x, weight = inputs[0], inputs[1]
    ctx.eps = inputs[2] if len(inputs) > 2 else 1e-6
    ctx.save_for_backward(x, weight)


def _rmsnorm_backward(ctx, dy):
    x, weight = ctx.saved_tensors
    if not (ctx.needs_input_grad[0] or ctx.needs_input_grad[1]):
        return None, None, None, None
    dx, dweight = rmsnorm_bwd(dy.contiguous(), x, weight, ctx.eps)  # e.g. the expanded gradient of y.sum()
    return (dx if ctx.needs_input_grad[0] else None, dweight if ctx.needs_input_grad[1] else None, None, None)


rmsnorm.op.register_autograd(_rmsnorm_backward, setup_context=_rmsnorm_setup_context)


def _rmsnorm_(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> None:
    """In place: x <- rmsnorm(x, weight, eps). x may be any view with a contiguous last dim,
    e.g. the q or k heads [..., H, D] of a fused qkv projection normalized per head (weight
    [D]) without a copy. Otherwise as gks.rmsnorm."""
    cuda.rmsnorm_out(x, weight, x, eps, resolve_config("rmsnorm", x, row_dims(x), config))


rmsnorm_ = gks_op("rmsnorm_", _rmsnorm_, mutates_args=("x",))


@rmsnorm_.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> None:
    validate(cuda.rmsnorm_out, x, weight, x, eps, config)


def _fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): residual_out = x + residual (added in fp32, rounded to x's dtype) and
    y = rmsnorm(residual_out, weight, eps), in one pass over the rows.

    x, residual: [..., N] of one float dtype on one CUDA device, last dim contiguous, any
    leading strides. weight: [N], x's dtype. y equals gks.rmsnorm(x + residual, weight, eps).
    gks.fused_add_rmsnorm_ is the in-place form. config: as for gks.rmsnorm (the same kernel
    shapes). Runs on the current CUDA stream.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    residual_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    config = resolve_config("fused_add_rmsnorm", x, row_dims(x), config)
    cuda.fused_add_rmsnorm_out(x, residual, weight, y, residual_out, eps, config)
    return y, residual_out


fused_add_rmsnorm = gks_op("fused_add_rmsnorm", _fused_add_rmsnorm)


@fused_add_rmsnorm.op.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
      config: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.fused_add_rmsnorm_out, x, residual, weight, y, residual_out, eps, config)
    return y, residual_out


def _fused_add_rmsnorm_(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1
) -> None:
    """In place (FlashInfer's fused_add_rmsnorm): residual <- x + residual (added in fp32,
    rounded to x's dtype), then x <- rmsnorm(residual, weight, eps). Arguments as for
    gks.fused_add_rmsnorm; x and residual must not share memory."""
    config = resolve_config("fused_add_rmsnorm", x, row_dims(x), config)
    cuda.fused_add_rmsnorm_out(x, residual, weight, x, residual, eps, config)


fused_add_rmsnorm_ = gks_op("fused_add_rmsnorm_", _fused_add_rmsnorm_, mutates_args=("x", "residual"))


@fused_add_rmsnorm_.op.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
      config: int = -1) -> None:
    validate(cuda.fused_add_rmsnorm_out, x, residual, weight, x, residual, eps, config)


def _layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5,
               config: int = -1) -> torch.Tensor:
    """LayerNorm over the last dim of x [..., N]: (x - mean) / sqrt(var + eps) * weight (+ bias),
    the mean and the biased variance in fp32 (F.layer_norm's meaning), output in x's dtype.

    x: fp32/fp16/bf16 CUDA tensor, last dim contiguous, any leading strides. weight and bias
    (optional): [N], x's dtype. config: as for gks.rmsnorm (the same kernel shapes). Runs on
    the current CUDA stream.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.layernorm_out(x, weight, bias, y, eps, resolve_config("layernorm", x, row_dims(x), config))
    return y


layernorm = gks_op("layernorm", _layernorm)


@layernorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5,
      config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.layernorm_out, x, weight, bias, y, eps, config)
    return y


def _softmax_rmsnorm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    """softmax(rmsnorm(x, weight, eps)) over the last dim of x [..., N], in one kernel.

    fp32 math throughout; the normalized row is never rounded to x's dtype, only the output
    is. weight: [N], x's dtype. Runs on the current CUDA stream. config: as for softmax.
    """
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    config = resolve_config("softmax_rmsnorm", x, row_dims(x), config)
    cuda.softmax_rmsnorm_out(x, weight, y, eps, config)
    return y


softmax_rmsnorm = gks_op("softmax_rmsnorm", _softmax_rmsnorm)


@softmax_rmsnorm.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, config: int = -1) -> torch.Tensor:
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.softmax_rmsnorm_out, x, weight, y, eps, config)
    return y


def _quant_outputs(x: torch.Tensor, quant_dtype: torch.dtype, granularity: str, op: str):
    """q and scale for a quantized-output norm (the option checks every backend makes)."""
    from gks.specs.norms import norm_quant_check_args

    scale_shape = norm_quant_check_args(x.shape, quant_dtype, granularity, op) if x.dim() >= 1 else (1,)
    if x.dim() < 1:  # the C++ API names the input itself
        return torch.empty((), dtype=quant_dtype, device=x.device), x.new_empty(scale_shape, dtype=torch.float32)
    q = torch.empty(x.shape, dtype=quant_dtype, device=x.device)
    return q, torch.empty(scale_shape, dtype=torch.float32, device=x.device)


def _rmsnorm_quant(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                   quant_dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "token",
                   scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): y = rmsnorm(x, weight, eps) in fp32 (never rounded to x's dtype),
    quantized in the same kernel: quant_dtype int8 per token (scale = absmax / 127), or
    float8_e4m3fn per token or per 1 x 128 group (scale = absmax / 448, UE8M0 with
    scale_ue8m0; the last dim a multiple of 128 for groups). scale: fp32 [..., 1] or
    [..., N / 128]. Runs on the current CUDA stream."""
    q, scale = _quant_outputs(x, quant_dtype, granularity, "gks.rmsnorm_quant")
    cuda.rmsnorm_quant_out(x, weight, q, scale, eps, granularity, scale_ue8m0)
    return q, scale


rmsnorm_quant = gks_op("rmsnorm_quant", _rmsnorm_quant)


@rmsnorm_quant.op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, quant_dtype: torch.dtype = torch.float8_e4m3fn,
      granularity: str = "token", scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    q, scale = _quant_outputs(x, quant_dtype, granularity, "gks.rmsnorm_quant")
    validate(cuda.rmsnorm_quant_out, x, weight, q, scale, eps, granularity, scale_ue8m0)
    return q, scale


def _fused_add_rmsnorm_quant(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                             quant_dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "token",
                             scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, residual_out): residual_out = x + residual (fp32 add, rounded to x's
    dtype), then rmsnorm_quant of it, in one kernel."""
    q, scale = _quant_outputs(x, quant_dtype, granularity, "gks.fused_add_rmsnorm_quant")
    residual_out = torch.empty_like(x, memory_format=torch.contiguous_format)
    cuda.fused_add_rmsnorm_quant_out(x, residual, weight, q, scale, residual_out, eps, granularity, scale_ue8m0)
    return q, scale, residual_out


fused_add_rmsnorm_quant = gks_op("fused_add_rmsnorm_quant", _fused_add_rmsnorm_quant)


@fused_add_rmsnorm_quant.op.register_fake
def _(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
      quant_dtype: torch.dtype = torch.float8_e4m3fn, granularity: str = "token",
      scale_ue8m0: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    q, scale = _quant_outputs(x, quant_dtype, granularity, "gks.fused_add_rmsnorm_quant")
    residual_out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    validate(cuda.fused_add_rmsnorm_quant_out, x, residual, weight, q, scale, residual_out, eps, granularity,
             scale_ue8m0)
    return q, scale, residual_out
