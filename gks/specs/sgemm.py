# SPDX-License-Identifier: Apache-2.0
"""SGEMM: c = a @ b in float32 with FP32 FMA arithmetic (no TF32)."""

from __future__ import annotations

from gks.registry import Backend, NativeConfigs, OpSpec, Peer, register
from gks.specs import _gemm


def make_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32)
    return {"a": a, "b": b}


def _reference(a, b, *, precise=False):
    from gks.reference import sgemm

    return sgemm(a, b, precise=precise)


def _check(out, ref, dtype, inputs):
    _gemm.gemm_check(out, ref, inputs["a"], inputs["b"], "float32", "fma", "sgemm")


def _cublas_fp32():
    """torch.matmul in fp32 with TF32 off (cuBLAS SGEMM); the caller's setting is restored."""
    import torch

    def run(a, b, **_):
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = False
        try:
            return torch.matmul(a, b)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous

    return run



SPEC = register(
    OpSpec(
        name="sgemm",
        summary="fp32 GEMM on CUDA cores (FFMA, no TF32), register-tiled, cp.async pipeline",
        signature="sgemm(a[M, K], b[K, N], config=-1) -> c[M, N] (float32)",
        shape_names=("M", "N", "K"),
        dtypes=("float32",),
        make_inputs=make_inputs,
        reference=_reference,
        # Representative only: the check scales the bound with K (see gks.specs._gemm).
        tolerance={"float32": (1e-4, 1e-5)},
        flops=_gemm.flops,
        bytes_moved=lambda s, dt: 4.0 * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
        backends=(
            Backend("cuda", "gks._torch_ops:sgemm", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:sgemm", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", "gks.pallas._bridge:sgemm", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=_gemm.TEST_SHAPES,
        bench_shapes=_gemm.BENCH_SHAPES,
        peers=(Peer("cuBLAS fp32 (torch.matmul, TF32 off)", _cublas_fp32),),
        configs=NativeConfigs("sgemm"),
        compute="fp32",
        check=_check,
    )
)
