# SPDX-License-Identifier: Apache-2.0
"""RMSNorm: y = x / sqrt(mean(x^2, last dim) + eps) * weight."""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, NativeConfigs, OpSpec, Peer, reference_peer, register


def make_inputs(shape, dtype, device, seed, weight_spread=0.1):
    """x [M, N] ~ N(0, 1) and weight [N] ~ 1 + weight_spread * N(0, 1), in `dtype`."""
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    x = torch.randn((m, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    weight = (1.0 + weight_spread * torch.randn((n,), generator=gen, device=device)).to(dt)
    return {"x": x, "weight": weight, "eps": 1e-6}


def _reference(x, weight, eps=1e-6, *, precise=False):
    from gks.reference import rmsnorm

    return rmsnorm(x, weight, eps, precise=precise)


def _torch_rms_norm():
    import torch.nn.functional as F

    return lambda x, weight, eps: F.rms_norm(x, (x.shape[-1],), weight, eps)



SPEC = register(
    OpSpec(
        name="rmsnorm",
        summary="RMSNorm over the last dim with a fused affine weight",
        signature="rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=_reference,
        # Against the fp64 result; the bound is a few ulps of the output dtype.
        tolerance={"float32": (1e-5, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)},
        # square, sum, scale by inv_rms, scale by weight: about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=(
            Backend("cuda", "gks._torch_ops:rmsnorm", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:rmsnorm", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", "gks.pallas._bridge:rmsnorm", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=(
            (1, 1), (1, 4096), (3, 7), (5, 129), (2, 4097), (7, 1), (33, 1000),
            (4, 8192), (2, 32768), (1, 262144), (0, 64), (3, 0),
        ),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm", _torch_rms_norm), reference_peer("rmsnorm", compiled=True)),
        # RmsNormArgs::config indexes these (kRmsNormConfigs in csrc/include/gks/norms.h).
        configs=NativeConfigs("rmsnorm"),
    )
)
