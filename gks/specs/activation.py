# SPDX-License-Identifier: Apache-2.0
"""The activation family: the gated activations of a transformer's MLP.

act_and_mul: y = act(gate) * up, where x [..., 2d] holds gate in its first half and up in its
second (a fused gate/up projection's output) and y is [..., d]; act is silu (SwiGLU), gelu
(the erf form, GeGLU) or gelu_tanh (the tanh approximation). fp32 math, y in x's dtype.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["act_and_mul"]


def act_and_mul(x: torch.Tensor, activation: str = "silu", *, precise: bool = False) -> torch.Tensor:
    """act(x[..., :d]) * x[..., d:] for x [..., 2d]."""
    import torch
    import torch.nn.functional as F

    compute = torch.float64 if precise else torch.float32
    d = x.shape[-1] // 2
    gate, up = x[..., :d].to(compute), x[..., d:].to(compute)
    if activation == "silu":
        act = F.silu(gate)
    else:
        act = F.gelu(gate, approximate="tanh" if activation == "gelu_tanh" else "none")
    y = act * up
    return y if precise else y.to(x.dtype)


def _inputs(shape, dtype, device, seed):
    """x [M, N] ~ 2 N(0, 1) (gates across the activations' bend), N = 2d."""
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    x = 2.0 * torch.randn(shape, generator=gen, device=device)
    return {"x": x.to(getattr(torch, dtype)), "activation": "silu"}


def _torch_act_and_mul():
    import torch.nn.functional as F

    def run(x, activation):
        d = x.shape[-1] // 2
        gate = x[..., :d]
        act = F.silu(gate) if activation == "silu" else F.gelu(
            gate, approximate="tanh" if activation == "gelu_tanh" else "none")
        return act * x[..., d:]

    return run


def _liger_act_and_mul():
    from liger_kernel.ops.swiglu import LigerFusedGateUpSiLUMulFunction

    def run(x, activation="silu"):
        if activation != "silu":
            raise ValueError(f"Liger's fused gate/up kernel is SwiGLU (silu) only, not {activation!r}")
        return LigerFusedGateUpSiLUMulFunction.apply(x)

    return run


def _bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, x=None, activation="silu"):
        return {"x": t.randn(4, 8, device=d) if x is None else x, "activation": activation}

    return (
        BadInput("x-odd-last-dim", lambda t, d: call(t, d, x=t.randn(4, 7, device=d)), ValueError,
                 "argument 'x' must have an even last dim"),
        BadInput("activation-unknown", lambda t, d: call(t, d, activation="relu"), ValueError,
                 "argument 'activation' must be 'silu', 'gelu' or 'gelu_tanh', got 'relu'"),
        BadInput("x-int", lambda t, d: call(t, d, x=t.ones(4, 8, device=d, dtype=t.int32)), TypeError,
                 "argument 'x'"),
        BadInput("x-last-dim-strided", lambda t, d: call(t, d, x=t.randn(8, 4, device=d).t()), ValueError,
                 "argument 'x'", jax=False),
    )


ACT_AND_MUL = register(
    OpSpec(
        name="act_and_mul",
        family="activation",
        summary="act(gate) * up of a fused gate/up projection: silu, gelu or gelu_tanh",
        signature="act_and_mul(x[..., 2d], activation='silu') -> y[..., d] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_inputs,
        reference=act_and_mul,
        # Against the fp64 result: a few ulps of the output dtype (the fp32 exp / erf / tanh
        # add an ulp or two of fp32 on top).
        tolerance={"float32": (1e-5, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)},
        # the activation (about 8 with its exp or erf) and the product: about 10 per output.
        flops=lambda s: 10.0 * s[0] * (s[1] // 2),
        # read x [M, 2d], write y [M, d].
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * 1.5 * s[0] * s[1],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=((1, 2), (3, 14), (5, 258), (2, 8194), (7, 2), (33, 2000), (4, 16384), (0, 64), (3, 0)),
        bench_shapes=((16384, 2 * 14336), (4096, 2 * 11008), (65536, 2 * 1024)),
        peers=(Peer("F.silu*up", _torch_act_and_mul), reference_peer("act_and_mul", compiled=True),
               Peer("Liger", _liger_act_and_mul, package="liger-kernel")),
        example_shape=(33, 2000),
        bad_inputs=_bad_inputs(),
        cuda_out=lambda cuda, i, o: cuda.act_and_mul_out(i["x"], o[0], i["activation"]),
        outputs=("y",),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::ActAndMulRow<",),
    )
)
