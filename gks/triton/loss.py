# SPDX-License-Identifier: Apache-2.0
"""The loss family in Triton: cross_entropy, forward and backward, differentiable in the
logits through a torch.autograd.Function.

Forward: one program a row walks it in BLOCK-wide chunks keeping a running max and rescaled
sum per lane (one read of the row), merges the lanes, and writes the row's lse and loss (the
target's logit read on its own). Backward: programs over (row, chunk of BLOCK columns), no
reduction: dlogits = (exp(x - lse) - onehot(target)) * dloss[row]. The reduction over rows
is plain torch, as in the CUDA backend (gks/_torch_ops/loss.py says why). Semantics as
gks.cross_entropy: ignored rows 0 (loss and gradient), other targets outside [0, V) NaN,
non-finite logits as torch's F.cross_entropy."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from gks.triton._common import check_device, check_float, check_same_device, next_pow2, on_tensor_device

__all__ = ["cross_entropy"]

REDUCTIONS = ("mean", "sum", "none")
LOG2E = tl.constexpr(1.4426950408889634)
FWD_BLOCK = 4096  # columns a forward step (per program)
BWD_BLOCK = 4096  # columns a backward program


@triton.jit
def _offset(m):
    # The max a sum is kept relative to: 0 for an all -inf set (-inf - -inf is NaN).
    return tl.where(m == float("-inf"), 0.0, m)


@triton.jit
def _fwd_kernel(x_ptr, x_stride, t_ptr, t_stride, loss_ptr, lse_ptr, V, ignore_index,
                BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_stride
    t = tl.load(t_ptr + row * t_stride).to(tl.int64)
    ignored = t == ignore_index
    valid = (t >= 0) & (t < V) & (t != ignore_index)
    x_t = tl.load(x_row + tl.where(valid, t, 0), mask=valid, other=0.0).to(tl.float32)
    cols = tl.arange(0, BLOCK)
    m = tl.full((BLOCK,), float("-inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, V, BLOCK):
        c = start + cols
        x = tl.load(x_row + c, mask=c < V, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m, x)
        off = _offset(m_new)
        s = s * tl.exp2((m - off) * LOG2E) + tl.exp2((x - off) * LOG2E)
        m = m_new
    m_row = tl.max(m, 0)
    off = _offset(m_row)
    s_row = tl.sum(s * tl.exp2((m - off) * LOG2E), 0)
    finite = tl.abs(m_row) < float("inf")  # false for +-inf and NaN
    lse = tl.where(finite, m_row + tl.log(s_row), float("nan"))
    loss = tl.where(ignored, 0.0, tl.where(valid, lse - x_t, float("nan")))
    tl.store(lse_ptr + row, lse)
    tl.store(loss_ptr + row, loss)


@triton.jit
def _bwd_kernel(x_ptr, x_stride, t_ptr, t_stride, lse_ptr, dloss_ptr, dloss_stride, dx_ptr, dx_stride, V,
                ignore_index, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = c < V
    t = tl.load(t_ptr + row * t_stride).to(tl.int64)
    ignored = t == ignore_index
    valid = (t >= 0) & (t < V) & (t != ignore_index)
    lse = tl.load(lse_ptr + row)
    scale = tl.where(valid, tl.load(dloss_ptr + row * dloss_stride), float("nan"))
    x = tl.load(x_ptr + row * x_stride + c, mask=mask & ~ignored, other=0.0).to(tl.float32)
    prob = tl.exp2((x - lse) * LOG2E)
    g = tl.where(c == t, prob - 1.0, prob) * scale
    g = tl.where(ignored, 0.0, g)
    tl.store(dx_ptr + row * dx_stride + c, g.to(dx_ptr.dtype.element_ty), mask=mask)


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check(logits: torch.Tensor, target: torch.Tensor, op: str) -> None:
    """The C++ API's checks of logits and target, with its messages."""
    check_device(logits, op, "logits")
    check_float(logits, op, "logits")
    if logits.dim() != 2:
        raise ValueError(f"{op}: argument 'logits' must be [T, V] (tokens x classes), got {list(logits.shape)}")
    if logits.shape[1] < 1:
        raise ValueError(f"{op}: argument 'logits' must have at least one class (V >= 1), got {list(logits.shape)}")
    if logits.shape[1] > 1 and logits.stride(1) != 1:
        raise ValueError(f"{op}: argument 'logits' must be contiguous in its last dim (stride 1), "
                         f"got stride {logits.stride(1)}")
    check_same_device(logits, "logits", target, "target", op)
    if target.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"{op}: argument 'target' must be int64 or int32, got {_name(target.dtype)}")
    if target.dim() != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"{op}: argument 'target' must have shape [{logits.shape[0]}] (a value for each row of "
                         f"logits), got {list(target.shape)}")


def cross_entropy_fwd(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                      op: str = "gks.triton.cross_entropy") -> tuple[torch.Tensor, torch.Tensor]:
    """(loss [T], lse [T]), float32, per row (no reduction)."""
    _check(logits, target, op)
    rows, cols = logits.shape
    loss = torch.empty((rows,), dtype=torch.float32, device=logits.device)
    lse = torch.empty((rows,), dtype=torch.float32, device=logits.device)
    if rows:
        block = max(16, min(next_pow2(cols), FWD_BLOCK))  # at least 16 lanes: masked past the row
        _fwd_kernel[(rows,)](logits, logits.stride(0), target, target.stride(0), loss, lse, cols, int(ignore_index),
                             BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return loss, lse


def cross_entropy_bwd(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor, dloss: torch.Tensor,
                      ignore_index: int = -100, op: str = "gks.triton.cross_entropy_backward") -> torch.Tensor:
    """dlogits [T, V] in the logits' dtype: (exp(logits - lse) - onehot(target)) * dloss[:, None]."""
    _check(logits, target, op)
    rows, cols = logits.shape
    for t, name in ((lse, "lse"), (dloss, "dloss")):
        check_same_device(logits, "logits", t, name, op)
        if t.dtype != torch.float32:
            raise TypeError(f"{op}: argument '{name}' must be float32, got {_name(t.dtype)}")
        if t.dim() != 1 or t.shape[0] != rows:
            raise ValueError(f"{op}: argument '{name}' must have shape [{rows}] (a value for each row of logits), "
                             f"got {list(t.shape)}")
    dlogits = torch.empty((rows, cols), dtype=logits.dtype, device=logits.device)
    if rows:
        block = max(16, min(next_pow2(cols), BWD_BLOCK))  # at least 16 lanes: masked past the row
        _bwd_kernel[(rows, triton.cdiv(cols, block))](
            logits, logits.stride(0), target, target.stride(0), lse, dloss, dloss.stride(0), dlogits,
            dlogits.stride(0), cols, int(ignore_index), BLOCK=block, num_warps=8 if block >= 2048 else 4)
    return dlogits


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index):
        loss, lse = cross_entropy_fwd(logits, target, ignore_index)
        ctx.save_for_backward(logits, target, lse)
        ctx.ignore_index = ignore_index
        ctx.mark_non_differentiable(lse)
        return loss, lse

    @staticmethod
    def backward(ctx, dloss, _dlse):
        logits, target, lse = ctx.saved_tensors
        dlogits = None
        if ctx.needs_input_grad[0]:
            dlogits = cross_entropy_bwd(logits, target, lse, dloss.float(), ctx.ignore_index)
        return dlogits, None, None


@on_tensor_device
def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean") -> torch.Tensor:
    """gks.cross_entropy in Triton: the loss of logits [T, V] against target [T] (int64/int32)
    in the logits' dtype; 'mean', 'sum' or 'none'; differentiable in logits."""
    op = "gks.triton.cross_entropy"
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: argument 'reduction' must be 'mean', 'sum' or 'none', got {reduction!r}")
    _check(logits, target, op)
    loss, _ = _CrossEntropy.apply(logits, target, int(ignore_index))
    if reduction == "none":
        return loss.to(logits.dtype)
    total = loss.sum()
    if reduction == "sum":
        return total.to(logits.dtype)
    return (total / (target != ignore_index).sum()).to(logits.dtype)
