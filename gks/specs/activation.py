# SPDX-License-Identifier: Apache-2.0
"""The activation family: the gated activations of a transformer's MLP.

act_and_mul: y = act(gate) * up, where x [..., 2d] holds gate in its first half and up in its
second (a fused gate/up projection's output) and y is [..., d]; act is silu (SwiGLU), gelu
(the erf form, GeGLU) or gelu_tanh (the tanh approximation). fp32 math, y in x's dtype.

act_and_mul_quant: act_and_mul's y in fp32 (never rounded to x's dtype), quantized to fp8
e4m3 per 1 x 128 group (quantize_fp8's contract on y): the input of an fp8 GEMM with
DeepSeek-V3's activation scales, in one pass; d must be a multiple of 128.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["act_and_mul", "act_and_mul_quant"]


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


def act_quant_shapes(x_shape, op: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """q's and scale's shapes for act_and_mul_quant of an x of x_shape, with the checks of
    x's last dim every backend makes."""
    if len(x_shape) < 1:
        raise ValueError(f"{op}: argument 'x' must have 1 to 8 dims, got 0")
    n = int(x_shape[-1])
    if n % 2:
        raise ValueError(f"{op}: argument 'x' must have an even last dim (gate, then up), got {list(x_shape)}")
    d = n // 2
    if d % 128:
        raise ValueError(f"{op}: argument 'x' must have a last dim of 2d with d a multiple of 128 (1 x 128 groups), "
                         f"got {list(x_shape)}")
    return (*x_shape[:-1], d), (*x_shape[:-1], d // 128)


def act_and_mul_quant(x: torch.Tensor, activation: str = "silu", scale_ue8m0: bool = False, *,
                      precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q float8_e4m3fn [..., d], scale fp32 [..., d / 128]): act_and_mul's y in fp32 (float64
    rounded once to fp32 when precise), quantized per 1 x 128 group (quantize_fp8)."""
    import torch

    from gks.specs.quantize import quantize_fp8

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"gks.reference.act_and_mul_quant: argument 'x' must be float32, float16 or bfloat16, "
                        f"got {x.dtype}")
    act_quant_shapes(x.shape, "gks.reference.act_and_mul_quant")
    y = act_and_mul(x, activation, precise=True).float() if precise else _act_fp32(x, activation)
    return quantize_fp8(y, "group", 128, scale_ue8m0, precise=precise)


def _act_fp32(x, activation):
    import torch

    return act_and_mul(x.to(torch.float32), activation)


def _act_quant_inputs(shape, dtype, device, seed):
    m, n, ue8m0 = shape
    return {**_inputs((m, n), dtype, device, seed), "scale_ue8m0": bool(ue8m0)}


def _act_quant_check(out, ref, dtype, inputs) -> None:
    """q and scale against the reference's quantization of float64 y rounded to fp32, within
    the fused ops' bound (gks.specs.quantize.check_quantized_close)."""
    import torch

    from gks.specs.quantize import check_quantized_close

    x = inputs["x"]
    what = f"act_and_mul_quant/{inputs['activation']}/{dtype}/{tuple(x.shape)}"
    assert isinstance(out, tuple) and len(out) == 2, f"{what}: returned {type(out)}"
    q, scale = out
    assert q.dtype == torch.float8_e4m3fn and q.shape == ref[0].shape, f"{what}: q {q.dtype} {tuple(q.shape)}"
    y = act_and_mul(x.cpu(), inputs["activation"], precise=True)
    check_quantized_close(what, q, scale, ref[0], ref[1], y, torch.float8_e4m3fn, "group")


def _act_quant_bad_inputs() -> tuple[BadInput, ...]:
    def call(t, d, x=None, activation="silu"):
        return {"x": t.randn(4, 256, device=d) if x is None else x, "activation": activation}

    return (
        BadInput("x-odd-last-dim", lambda t, d: call(t, d, x=t.randn(4, 257, device=d)), ValueError,
                 "argument 'x' must have an even last dim"),
        BadInput("d-not-groups", lambda t, d: call(t, d, x=t.randn(4, 200, device=d)), ValueError,
                 "argument 'x' must have a last dim of 2d with d a multiple of 128"),
        BadInput("activation-unknown", lambda t, d: call(t, d, activation="relu"), ValueError,
                 "argument 'activation' must be 'silu', 'gelu' or 'gelu_tanh'"),
        BadInput("x-int", lambda t, d: call(t, d, x=t.ones(4, 256, device=d, dtype=t.int32)), TypeError,
                 "argument 'x' must be float32, float16 or bfloat16"),
        BadInput("x-last-dim-strided", lambda t, d: call(t, d, x=t.randn(256, 4, device=d).t()), ValueError,
                 "argument 'x' must be contiguous in its last dim", jax=False),
    )


ACT_AND_MUL_QUANT = register(
    OpSpec(
        name="act_and_mul_quant",
        family="activation",
        summary="act(gate) * up quantized to fp8 e4m3 per 1x128 group with fp32 scales, in one pass",
        signature=("act_and_mul_quant(x[..., 2d], activation='silu', scale_ue8m0=False) -> "
                   "(q[..., d] float8_e4m3fn, scale[..., d/128] fp32)"),
        shape_names=("M", "N", "ue8m0"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_act_quant_inputs,
        reference=act_and_mul_quant,
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},  # see the check
        check=_act_quant_check,
        flops=lambda s: 14.0 * s[0] * (s[1] // 2),
        # read x [M, 2d], write q [M, d] (a byte an element) and the scales.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * s[0] * s[1] + 0.5 * s[0] * s[1] + 4.0 * s[0] * (s[1] // 256),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=((1, 256, 0), (3, 768, 0), (5, 2304, 0), (33, 4096, 0), (2, 14336, 0), (7, 768, 1), (0, 256, 0),
                     (3, 0, 0)),
        bench_shapes=tuple((m, 2 * d, 0) for m in (1, 16, 256, 4096, 16384) for d in (4096, 7168)) + (
            (4096, 2 * 18432, 1),),
        peers=(reference_peer("act_and_mul_quant", compiled=False), reference_peer("act_and_mul_quant", compiled=True)),
        example_shape=(33, 4096, 0),
        bucket_exact=("ue8m0",),
        bad_inputs=_act_quant_bad_inputs(),
        cuda_out=lambda cuda, i, o: cuda.act_and_mul_quant_out(i["x"], o[0], o[1], i["activation"], i["scale_ue8m0"]),
        outputs=("q", "scale"),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::ActAndMulQuantRow<",),
    )
)
