# SPDX-License-Identifier: Apache-2.0
"""The softmax family: softmax over the last dim, y = exp(x - max(x)) / sum(exp(x - max(x)))."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["softmax"]


def softmax(x: torch.Tensor, *, precise: bool = False) -> torch.Tensor:
    """y = exp(x - max(x)) / sum(exp(x - max(x))) over the last dim.

    Non-finite input follows torch.softmax: a row holding a NaN or a +inf, or a row that is
    all -inf, comes out all NaN; a -inf entry of any other row comes out 0.
    """
    import torch

    compute = torch.float64 if precise else torch.float32
    y = torch.softmax(x.to(compute), dim=-1)
    return y if precise else y.to(x.dtype)


def make_inputs(shape, dtype, device, seed):
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    # A spread of 3 gives exponentials over many orders of magnitude: the max matters.
    x = 3.0 * torch.randn((m, n), generator=gen, device=device, dtype=torch.float32)
    return {"x": x.to(getattr(torch, dtype))}


def _quack_softmax():
    from quack.softmax import softmax as quack_softmax

    return lambda x: quack_softmax(x)


def _liger_softmax():
    from liger_kernel.ops.softmax import LigerSoftmaxFunction

    return lambda x: LigerSoftmaxFunction.apply(x)


def _torch_softmax():
    import torch

    return lambda x: torch.softmax(x, -1)


# Against the fp64 result. Mostly relative: outputs are as small as 1/N (and much smaller),
# so an absolute bound would hide errors. atol covers only the output dtype's smallest
# steps (fp16 subnormals are 6e-8 apart); rtol is a few ulps of the output dtype, plus
# for fp32 the exp of (x - max) rounded: |x - max| * 2^-24 relative.
TOLERANCE = {"float32": (1e-12, 2e-5), "float16": (6e-8, 1e-3), "bfloat16": (1e-12, 8e-3)}

# Shapes every backend is tested on: N in {1, 31, 1000, 4096, 32768, 262144} (warp-per-row,
# block-per-row in registers, and the looped kernel), 1x1, odd row counts, empty tensors.
TEST_SHAPES = (
    (1, 1), (7, 1), (1, 31), (33, 31), (3, 1000), (5, 4096), (3, 4097), (2, 32768),
    (1, 32769), (1, 262144), (0, 64), (3, 0),
)

SOFTMAX = register(
    OpSpec(
        name="softmax",
        family="softmax",
        summary="Softmax over the last dim, one-pass online max/sum",
        signature="softmax(x[..., N]) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=softmax,
        tolerance=TOLERANCE,
        # max, subtract the max, exp, add to the sum, scale by 1/sum: 5 flops per element.
        flops=lambda s: 5.0 * s[0] * s[1],
        # read x and write y once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * 2.0 * s[0] * s[1],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("torch.softmax", _torch_softmax), reference_peer("softmax", compiled=True),
               Peer("QuACK", _quack_softmax, package="quack-kernels"),
               Peer("Liger", _liger_softmax, package="liger-kernel")),
        example_shape=(33, 31),
        bad_inputs=(
            BadInput("x-last-dim-strided", lambda t, d: {"x": t.randn(8, 4, device=d).t()}, ValueError,
                     "argument 'x' must be contiguous in its last dim", jax=False),
            BadInput("x-int", lambda t, d: {"x": t.ones(4, 8, device=d, dtype=t.int32)}, TypeError,
                     "argument 'x' must be float32, float16 or bfloat16"),
            BadInput("x-float64", lambda t, d: {"x": t.ones(4, 8, device=d, dtype=t.float64)}, TypeError,
                     "argument 'x' must be float32, float16 or bfloat16", jax=False),
            BadInput("x-scalar", lambda t, d: {"x": t.tensor(1.0, device=d)}, ValueError, "argument 'x'"),
        ),
        cuda_out=lambda cuda, i, o, **kw: cuda.softmax_out(i["x"], o[0], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::SoftmaxRow<",),
    )
)
