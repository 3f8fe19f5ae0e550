# SPDX-License-Identifier: Apache-2.0
"""The loss family: cross entropy over a vocabulary, forward and backward.

cross_entropy: logits [T, V] (fp32/fp16/bf16, rows of any stride), target [T] (int64 or
int32). A row's loss is lse - logits[row, target] with lse = log(sum_j exp(logits[row, j]))
(fp32 math); a row whose target is ignore_index has loss 0 (and a zero gradient); any other
target outside [0, V) gives that row loss NaN (and a NaN gradient row): a GPU cannot refuse
it without a synchronisation. reduction: 'none' (the [T] losses), 'sum', or 'mean' (the sum
over the count of rows not ignored: NaN when every row is ignored, as in torch). The loss
comes out in the logits' dtype. Non-finite logits give torch.nn.functional.cross_entropy's
losses (a row with a NaN or +inf, or all -inf, is NaN; a -inf target logit is +inf; an
ignored row is 0 whatever it holds), and its gradients, but for an ignored row's, which is
always 0 (torch's is NaN where such a row is non-finite).

The gradient (cross_entropy_grad, what the backward kernels compute): dlogits =
(softmax(logits) - onehot(target)) * dloss_row, zero rows where ignored, NaN rows where the
target is out of range. The kernels never hold a [T, V] softmax: the forward keeps each
row's lse [T] (fp32) for the backward, which reads logits once and writes dlogits once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["cross_entropy", "cross_entropy_grad"]

REDUCTIONS = ("mean", "sum", "none")


def _row_losses(logits, target, ignore_index: int, compute):
    """Each row's loss in `compute` (the semantics above), and the ignored-row mask."""
    import torch
    import torch.nn.functional as F

    x = logits.to(compute)
    t = target.long()
    ignored = t == ignore_index
    valid = ~ignored & (t >= 0) & (t < x.shape[-1])
    rows = F.cross_entropy(x, torch.where(valid, t, torch.zeros_like(t)), reduction="none")
    nan = torch.full_like(rows, float("nan"))
    return torch.where(ignored, torch.zeros_like(rows), torch.where(valid, rows, nan)), ignored


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100, reduction: str = "mean",
                  *, precise: bool = False) -> torch.Tensor:
    """The loss as defined above (fp32 math, float64 with precise), in the logits' dtype."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"gks.reference.cross_entropy: argument 'reduction' must be 'mean', 'sum' or 'none', "
                         f"got {reduction!r}")
    import torch

    compute = torch.float64 if precise else torch.float32
    rows, ignored = _row_losses(logits, target, ignore_index, compute)
    if reduction == "none":
        out = rows
    elif reduction == "sum":
        out = rows.sum()
    else:
        out = rows.sum() / (~ignored).sum()
    return out if precise else out.to(logits.dtype)


def cross_entropy_grad(logits: torch.Tensor, target: torch.Tensor, dloss: torch.Tensor, ignore_index: int = -100,
                       *, precise: bool = False) -> torch.Tensor:
    """d(sum(loss_rows * dloss)) / d logits: (softmax(logits) - onehot(target)) * dloss[:, None],
    zero rows where the target is ignore_index, NaN rows where it is out of range. In the
    logits' dtype (float64 with precise)."""
    import torch

    compute = torch.float64 if precise else torch.float32
    x = logits.to(compute)
    t = target.long()
    ignored = t == ignore_index
    valid = ~ignored & (t >= 0) & (t < x.shape[-1])
    # torch's log_softmax makes a row with +inf or all -inf NaN, as the forward's lse does.
    grad = torch.log_softmax(x, dim=-1).exp()
    onehot = torch.zeros_like(grad)
    onehot.scatter_(-1, torch.where(valid, t, torch.zeros_like(t))[:, None], 1.0)
    grad = (grad - onehot * valid[:, None]) * dloss.to(compute)[:, None]
    grad = torch.where(valid[:, None], grad, torch.full_like(grad, float("nan")))
    grad = torch.where(ignored[:, None], torch.zeros_like(grad), grad)
    return grad if precise else grad.to(logits.dtype)


def make_inputs(shape, dtype, device, seed):
    """logits [T, V] ~ 2 N(0, 1); targets uniform in [0, V), about one row in eight set to
    ignore_index (-100); reduction 'none' (the per-row losses: what the _out entry point
    writes and the contract tests compare row by row)."""
    import torch

    rows, cols = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    logits = 2.0 * torch.randn((rows, cols), generator=gen, device=device, dtype=torch.float32)
    target = torch.randint(0, max(cols, 1), (rows,), generator=gen, device=device)
    ignored = torch.rand((rows,), generator=gen, device=device) < 0.125
    target = torch.where(ignored, torch.full_like(target, -100), target)
    return {"logits": logits.to(getattr(torch, dtype)), "target": target, "ignore_index": -100, "reduction": "none"}


def _quack_cross_entropy():
    from quack.cross_entropy import cross_entropy as quack_ce

    return lambda logits, target, ignore_index=-100, reduction="mean": quack_ce(
        logits, target, ignore_index=ignore_index, reduction=reduction)


def _liger_cross_entropy():
    from liger_kernel.transformers import LigerCrossEntropyLoss

    def run(logits, target, ignore_index=-100, reduction="mean"):
        return LigerCrossEntropyLoss(ignore_index=ignore_index, reduction=reduction)(logits, target)

    return run


def _torch_cross_entropy():
    import torch.nn.functional as F

    return lambda logits, target, ignore_index=-100, reduction="mean": F.cross_entropy(
        logits, target, ignore_index=ignore_index, reduction=reduction)


def _torch_compile_cross_entropy():
    import torch
    import torch.nn.functional as F

    torch.compiler.reset()  # a fresh cache each workload (see reference_peer)
    return torch.compile(lambda logits, target, ignore_index=-100, reduction="mean": F.cross_entropy(
        logits, target, ignore_index=ignore_index, reduction=reduction), dynamic=False)


def _cuda_out(cuda, inputs, outputs, **kw):
    """The forward's _out entry point writing the per-row losses (reduction 'none') into
    outputs[0]; its lse goes to a buffer of its own."""
    import torch

    assert inputs["reduction"] == "none", "the _out entry point writes per-row losses"
    logits = inputs["logits"]
    lse = torch.empty((logits.shape[0],), dtype=torch.float32, device=logits.device)
    cuda.cross_entropy_fwd_out(logits, inputs["target"], outputs[0], lse, inputs["ignore_index"], **kw)


def _bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, *, logits=None, target=None, reduction="mean", rows=4, cols=16):
        return {
            "logits": t.randn(rows, cols, device=d) if logits is None else logits,
            "target": t.zeros(rows, dtype=t.int64, device=d) if target is None else target,
            "ignore_index": -100,
            "reduction": reduction,
        }

    return (
        BadInput("target-wrong-length", lambda t, d: call(t, d, target=t.zeros(3, dtype=t.int64, device=d)),
                 ValueError, "argument 'target' must have shape [4] (a value for each row of logits), got [3]"),
        BadInput("target-2d", lambda t, d: call(t, d, target=t.zeros(4, 1, dtype=t.int64, device=d)),
                 ValueError, "argument 'target' must have shape [4]"),
        BadInput("target-float", lambda t, d: call(t, d, target=t.zeros(4, device=d)), TypeError,
                 "argument 'target' must be int64 or int32, got float32"),
        BadInput("target-int8", lambda t, d: call(t, d, target=t.zeros(4, dtype=t.int8, device=d)), TypeError,
                 "argument 'target' must be int64 or int32, got int8"),
        BadInput("reduction-unknown", lambda t, d: call(t, d, reduction="avg"), ValueError,
                 "argument 'reduction' must be 'mean', 'sum' or 'none', got 'avg'"),
        BadInput("logits-int", lambda t, d: call(t, d, logits=t.ones(4, 16, dtype=t.int32, device=d)), TypeError,
                 "argument 'logits' must be float32, float16 or bfloat16"),
        BadInput("logits-float64", lambda t, d: call(t, d, logits=t.ones(4, 16, dtype=t.float64, device=d)),
                 TypeError, "argument 'logits' must be float32, float16 or bfloat16", jax=False),
        BadInput("logits-1d", lambda t, d: call(t, d, logits=t.randn(16, device=d)), ValueError,
                 "argument 'logits' must be [T, V] (tokens x classes), got [16]"),
        BadInput("logits-3d", lambda t, d: call(t, d, logits=t.randn(4, 2, 8, device=d)), ValueError,
                 "argument 'logits' must be [T, V] (tokens x classes), got [4, 2, 8]"),
        BadInput("logits-no-classes", lambda t, d: call(t, d, logits=t.randn(4, 0, device=d)), ValueError,
                 "argument 'logits' must have at least one class (V >= 1), got [4, 0]"),
        BadInput("logits-last-dim-strided", lambda t, d: call(t, d, logits=t.randn(16, 4, device=d).t()),
                 ValueError, "argument 'logits' must be contiguous in its last dim", jax=False),
    )


CROSS_ENTROPY = register(
    OpSpec(
        name="cross_entropy",
        family="loss",
        summary="cross entropy over a vocabulary (ignore_index, mean/sum/none), fwd + bwd without a [T, V] softmax",
        signature=("cross_entropy(logits[T, V], target[T] int64/int32, ignore_index=-100, reduction='mean') "
                   "-> loss (logits' dtype; [T] for 'none'); differentiable in logits"),
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=cross_entropy,
        # Against the fp64 losses: fp32 math (exp2 on the SFU, the sum over V in fp32, one
        # log) errs by about 1e-6 absolute; the 16-bit losses add their own rounding.
        tolerance={"float32": (2e-5, 1e-5), "float16": (2e-5, 1e-3), "bfloat16": (2e-5, 8e-3)},
        # max, subtract, exp, add to the sum: 4 a logit (the forward: what the bench times).
        flops=lambda s: 4.0 * s[0] * s[1],
        # read the logits once and the int64 targets; write the per-row losses.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[1] + s[0]) + 8.0 * s[0],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # V of 1, 7 (ragged), 129, 4097 (past a warp a row), 32000, 151936 (Qwen's vocabulary),
        # a single row, and no rows.
        test_shapes=((1, 1), (5, 7), (33, 129), (3, 4097), (2, 32000), (1, 151936), (0, 64)),
        bench_shapes=((16384, 131072), (4096, 32000), (8192, 151936)),
        peers=(Peer("torch F.cross_entropy", _torch_cross_entropy),
               Peer("torch.compile", _torch_compile_cross_entropy),
               Peer("QuACK", _quack_cross_entropy, package="quack-kernels"),
               Peer("Liger", _liger_cross_entropy, package="liger-kernel")),
        example_shape=(33, 129),
        bad_inputs=_bad_inputs(),
        cuda_out=_cuda_out,
        outputs=("loss",),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::CrossEntropyRow<",),
    )
)
