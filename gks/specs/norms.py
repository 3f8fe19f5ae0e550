# SPDX-License-Identifier: Apache-2.0
"""The norms family: RMSNorm, and softmax(rmsnorm(x) * weight) fused (a norm whose output
feeds softmax's row kernel: its kernels are softmax's with the norm folded in).

rmsnorm: RMSNorm: y = x / sqrt(mean(x^2, last dim) + eps) * weight. Every backend sums the
squares in fp32, as torch's F.rms_norm does: a row is exact while sum(x^2) < 3.4e38 (float32's
largest value), and past it the sum is inf and the row gives 0 (NaN where x is inf): the fp32
formula's answer, tests/contract/test_non_finite.py holds both sides of the line.

softmax_rmsnorm: softmax(rmsnorm(x) * weight) over the last dim, fused: two reductions in one kernel and
no round trip of the normalized row through memory (it stays fp32, never rounded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register
from gks.specs.softmax import TEST_SHAPES as SOFTMAX_TEST_SHAPES, softmax

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["rmsnorm", "softmax_rmsnorm"]


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""
    import torch

    compute = torch.float64 if precise else torch.float32
    xc = x.to(compute)
    inv_rms = torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps)
    y = xc * inv_rms * weight.to(compute)
    return y if precise else y.to(x.dtype)


def softmax_rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim.

    The normalized row is kept in the compute precision (fp32, or fp64 when precise): it is
    NOT rounded to x's dtype between the two steps, and only y is. That is what the fused
    kernels compute, and it differs (slightly, for fp16/bf16) from running the two ops one
    after the other, which rounds the intermediate.
    """
    import torch

    if precise:
        z = rmsnorm(x, weight, eps, precise=True)
    else:
        z = rmsnorm(x.to(torch.float32), weight.to(torch.float32), eps)
    y = softmax(z, precise=precise)
    return y if precise else y.to(x.dtype)


def _rmsnorm_inputs(shape, dtype, device, seed, weight_spread=0.1):
    """x [M, N] ~ N(0, 1) and weight [N] ~ 1 + weight_spread * N(0, 1), in `dtype`."""
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    x = torch.randn((m, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    weight = (1.0 + weight_spread * torch.randn((n,), generator=gen, device=device)).to(dt)
    return {"x": x, "weight": weight, "eps": 1e-6}


def _torch_rms_norm():
    import torch.nn.functional as F

    return lambda x, weight, eps: F.rms_norm(x, (x.shape[-1],), weight, eps)


def _quack_rmsnorm():
    from quack.rmsnorm import rmsnorm as quack_rmsnorm

    return lambda x, weight, eps: quack_rmsnorm(x, weight, eps=eps)


def _liger_rmsnorm():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    # "gemma" casting: everything in fp32, the output rounded once, as gks computes it.
    return lambda x, weight, eps: LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma", False)


def _rmsnorm_bad_inputs(op: str) -> tuple[BadInput, ...]:
    """What rmsnorm and the fused op refuse alike: the weight's dtype, length, rank, stride
    and device, a strided last dim of x, an integer x, a negative or NaN eps, or one that
    float32 would flush to 0."""

    def call(t, d, x=None, weight=None, eps=1e-6):
        x = t.randn(4, 8, device=d) if x is None else x
        return {"x": x, "weight": t.ones(8, device=d) if weight is None else weight, "eps": eps}

    return (
        BadInput("weight-dtype", lambda t, d: call(t, d, weight=t.ones(8, device=d).half()),
                 (TypeError, ValueError), "argument 'weight'"),
        BadInput("weight-length", lambda t, d: call(t, d, weight=t.ones(7, device=d)), ValueError,
                 "argument 'weight'"),
        BadInput("weight-2d", lambda t, d: call(t, d, weight=t.ones(2, 8, device=d)), ValueError,
                 "argument 'weight'"),
        BadInput("x-last-dim-strided", lambda t, d: call(t, d, x=t.randn(8, 4, device=d).t(),
                                                         weight=t.ones(4, device=d)),
                 ValueError, "argument 'x'", jax=False),
        BadInput("x-int", lambda t, d: call(t, d, x=t.ones(4, 8, device=d, dtype=t.int32)), TypeError,
                 "argument 'x'"),
        BadInput("eps-negative", lambda t, d: call(t, d, eps=-1.0), ValueError, "argument 'eps'"),
        BadInput("eps-nan", lambda t, d: call(t, d, eps=float("nan")), ValueError, "argument 'eps'"),
        BadInput("eps-underflows-float32", lambda t, d: call(t, d, eps=1e-50), ValueError,
                 "argument 'eps' must be 0 or of a magnitude float32 holds"),
        BadInput("weight-strided", lambda t, d: call(t, d, weight=t.ones(16, device=d)[::2]), ValueError,
                 "argument 'weight'", jax=False),
        BadInput("weight-on-cpu", lambda t, d: call(t, d, weight=t.ones(8)), ValueError,
                 "argument 'weight' must be on the device of 'x'", jax=False, gpu=True),
    )


RMSNORM = register(
    OpSpec(
        name="rmsnorm",
        family="norms",
        summary="RMSNorm over the last dim with a fused affine weight",
        signature="rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_rmsnorm_inputs,
        reference=rmsnorm,
        # Against the fp64 result; the bound is a few ulps of the output dtype.
        tolerance={"float32": (1e-5, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)},
        # square, sum, scale by inv_rms, scale by weight: about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=(
            (1, 1), (1, 4096), (3, 7), (5, 129), (2, 4097), (7, 1), (33, 1000),
            (4, 8192), (2, 32768), (1, 262144), (0, 64), (3, 0),
        ),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm", _torch_rms_norm), reference_peer("rmsnorm", compiled=True),
               Peer("QuACK", _quack_rmsnorm, package="quack-kernels"),
               Peer("Liger", _liger_rmsnorm, package="liger-kernel")),
        example_shape=(33, 1000),
        bad_inputs=_rmsnorm_bad_inputs("rmsnorm"),
        cuda_out=lambda cuda, i, o, **kw: cuda.rmsnorm_out(i["x"], i["weight"], o[0], i["eps"], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormRow<",),
    )
)


def _softmax_rmsnorm_inputs(shape, dtype, device, seed):
    # A spread-out weight makes the normalized logits span a few units, like real ones.
    return _rmsnorm_inputs(shape, dtype, device, seed, weight_spread=0.5)


def _torch_two_step():
    # Eager PyTorch as a user would write it: two kernels, the intermediate rounded to x's
    # dtype and written to memory in between.
    import torch
    import torch.nn.functional as F

    return lambda x, weight, eps: torch.softmax(F.rms_norm(x, (x.shape[-1],), weight, eps), -1)


SOFTMAX_RMSNORM = register(
    OpSpec(
        name="softmax_rmsnorm",
        family="norms",
        summary="softmax(rmsnorm(x) * weight) over the last dim in one kernel",
        signature="softmax_rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_softmax_rmsnorm_inputs,
        reference=softmax_rmsnorm,
        # Against the fp64 result; as softmax's (the normalized logits are O(1), so their
        # fp32 rounding adds little).
        tolerance={"float32": (1e-12, 2e-5), "float16": (6e-8, 1e-3), "bfloat16": (1e-12, 8e-3)},
        # square and add (sum of squares), two multiplies (inv_rms, weight), then softmax's
        # 5 (max, subtract, exp, add, scale): 9 flops per element.
        flops=lambda s: 9.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Beyond softmax's: rows the cluster config splits over 2 and 4 CTAs (in 16-bit, the
        # last of the 4 holds only columns past the row's end).
        test_shapes=SOFTMAX_TEST_SHAPES + ((2, 8192), (3, 12288)),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm+torch.softmax", _torch_two_step), reference_peer("softmax_rmsnorm", compiled=True)),
        example_shape=(3, 1000),
        bad_inputs=_rmsnorm_bad_inputs("softmax_rmsnorm"),
        cuda_out=lambda cuda, i, o, **kw: cuda.softmax_rmsnorm_out(i["x"], i["weight"], o[0], i["eps"], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(
            r"rows::\w+_kernel<gks::kernels::rows::SoftmaxRmsNormRow<",
            r"rows::softmax_rmsnorm_staged_kernel<",
        ),
    )
)
