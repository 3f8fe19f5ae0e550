# SPDX-License-Identifier: Apache-2.0
"""gks.gemm: fp16/bf16 GEMM with fp32 accumulation — the Hopper-native kernel on sm_90a
(TMA + wgmma, warp-specialized, persistent), the WMMA kernel elsewhere.

Shapes are (M, N, K): c [M, N] = a [M, K] @ b [K, N], c in a's dtype.
"""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, NativeConfigs, OpSpec, Peer, register
from gks.specs import _gemm

# Every operand stays within 2^18 elements. The Hopper kernel needs rows of a and b that
# are 16-byte aligned (K and N multiples of 8 for contiguous operands); the other shapes
# exercise the WMMA fallback through the same entry point.
TEST_SHAPES = (
    (1, 1, 1), (1, 37, 19), (7, 1, 33), (17, 33, 1), (127, 257, 511), (129, 135, 263),
    (300, 72, 1), (2, 600, 300),
    # Hopper path: M, N and K off every tile size (128/256 x 64/128/256 x 64), M = 1,
    # N = 8, one k-block, several k-blocks with a partial last one, several tile rows.
    (200, 264, 520), (1, 264, 136), (136, 8, 64), (257, 520, 200), (384, 392, 448),
    (64, 64, 64), (513, 128, 8),
)

# The squares, then M in {128, 1024, 4096} x (N, K); 4096^3 is both, and is timed once (a
# shape listed twice was timed twice, and a baseline row could pair ours from one timing
# with the peer of the other).
BENCH_SHAPES = tuple(dict.fromkeys(((4096, 4096, 4096), (8192, 8192, 8192)) + tuple(
    (m, n, k) for m in (128, 1024, 4096) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))
)))



def make_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    return {"a": a, "b": b}


def _reference(a, b, out_dtype=None, *, precise=False):
    from gks.reference import gemm

    return gemm(a, b, out_dtype, precise=precise)


def check(out, ref, dtype, inputs, what: str = "gemm") -> None:
    """Element-wise against the float64 reference: the output dtype's rounding plus a
    Tensor Core fp32-accumulation bound that grows with sqrt(K) (see gks/specs/_gemm.py)."""
    out_dtype = inputs.get("out_dtype") or inputs["a"].dtype
    _gemm.gemm_check(out, ref, inputs["a"], inputs["b"], str(out_dtype).removeprefix("torch."),
                     "mma", f"{what}/{dtype}")


def _cublas():
    import torch

    return lambda a, b, **_: torch.matmul(a, b)


SPEC = register(
    OpSpec(
        name="gemm",
        summary="fp16/bf16 GEMM, fp32 accumulation: TMA + wgmma on sm_90a, WMMA elsewhere",
        signature="gemm(a[M, K], b[K, N], out_dtype=None, config=-1) -> c[M, N] (a's dtype)",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=_reference,
        # Nominal (atol, rtol); `check` applies the K-aware bound instead.
        tolerance={"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 8e-3)},
        flops=_gemm.flops,
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
        backends=(Backend("cuda", "gks._torch_ops:gemm", archs=("sm_80", "sm_90a")),),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(Peer("cuBLAS (torch.matmul)", _cublas),),
        # The Hopper kernel's: BMxBNxBK_s<stages>_c<cluster along M> or _cn<cluster along N>,
        # then _pp (ping-pong consumers) or _sk (stream-K).
        configs=NativeConfigs("gemm"),
        compute="tensor",
        check=check,
    )
)
