# SPDX-License-Identifier: Apache-2.0
"""Tensor Core GEMM (nvcuda::wmma / mma.sync): fp16 or bf16 inputs, fp32 accumulation."""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, NativeConfigs, OpSpec, Peer, register
from gks.specs import _gemm


def make_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    return {"a": a, "b": b}


def _reference(a, b, out_dtype=None, *, precise=False):
    import torch

    from gks.reference import wmma_gemm

    return wmma_gemm(a, b, out_dtype or torch.float32, precise=precise)


def _check(out, ref, dtype, inputs):
    import torch

    out_dtype = str(inputs.get("out_dtype", torch.float32)).removeprefix("torch.")
    _gemm.gemm_check(out, ref, inputs["a"], inputs["b"], out_dtype, "mma", f"wmma_gemm/{dtype}")


def _cublas():
    import torch

    return lambda a, b, **_: torch.matmul(a, b)


SPEC = register(
    OpSpec(
        name="wmma_gemm",
        summary="fp16/bf16 GEMM on Tensor Cores via nvcuda::wmma (mma.sync), fp32 accumulation",
        signature="wmma_gemm(a[M, K], b[K, N], out_dtype=float32, config=-1) -> c[M, N]",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=_reference,
        tolerance={"float16": (1e-4, 1e-5), "bfloat16": (1e-4, 1e-5)},
        flops=_gemm.flops,
        # a and b in their dtype, c in float32 (the default output)
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[2] + s[2] * s[1]) + 4.0 * s[0] * s[1],
        backends=(
            Backend("cuda", "gks._torch_ops:wmma_gemm", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:wmma_gemm", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=_gemm.TEST_SHAPES,
        bench_shapes=_gemm.BENCH_SHAPES,
        peers=(Peer("cuBLAS (torch.matmul)", _cublas),),
        configs=NativeConfigs("wmma_gemm"),
        compute="tensor",
        check=_check,
    )
)
