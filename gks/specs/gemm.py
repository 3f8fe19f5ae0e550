# SPDX-License-Identifier: Apache-2.0
"""The gemm family: c [M, N] = a [M, K] @ b [K, N], shapes (M, N, K).

  sgemm      c = a @ b in float32 with FP32 FMA arithmetic (no TF32).
  wmma_gemm  Tensor Core GEMM (nvcuda::wmma / mma.sync): fp16 or bf16 inputs, fp32
             accumulation.
  int8_gemm  int8 x int8 -> int32 on Tensor Cores, then per-row (a) and per-column (b)
             scales in the epilogue. The spec's dtype is the output dtype.
  gemm       fp16/bf16 GEMM with fp32 accumulation, c in a's dtype: the Hopper-native
             kernel on sm_90a (TMA + wgmma, warp-specialized, persistent), the WMMA kernel
             elsewhere.

The check bounds |out - ref| element-wise (ref in float64) by the error the arithmetic can
make, scaled by K, so one tolerance serves K = 1 and K = 14336 alike:
  * "fma"   (fp32 FFMA, round to nearest): 8 u sqrt(K) sqrt(sum_k (a_ik b_kj)^2), u = 2^-24.
            Round-to-nearest errors grow like sqrt(K) times the size of the products; the
            bound sits ~20 standard deviations above fp32's error yet below what TF32
            (10-bit mantissa) inputs would cause for any K below ~10^6, so it proves "no TF32".
  * "mma"   (Tensor Cores, fp32 accumulation that may round toward zero): 4 u sqrt(K)
            sum_k |a_ik b_kj|.
  * "exact" (int8: exact int32 sums, then two fp32 multiplies): 3 u |ref|.
plus one ulp of the output dtype (2 u_out |ref|) and a tiny absolute floor for
subnormal outputs. A dropped or duplicated k-slab, a wrong row or column, an unwritten
output (NaN poison) all land far outside these bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "gemm"]


def sgemm(a: torch.Tensor, b: torch.Tensor, *, precise: bool = False) -> torch.Tensor:
    """c = a @ b for float32 a [M, K], b [K, N]. Computed in float64 (never TF32): the
    float32 result is the correctly rounded product; precise=True returns float64."""
    import torch

    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(torch.float32)


def wmma_gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K], b [K, N], accumulated exactly (float64) and
    rounded once to out_dtype (float32 when None, or a's dtype); precise=True returns float64."""
    import torch

    c = a.to(torch.float64) @ b.to(torch.float64)
    return c if precise else c.to(out_dtype or torch.float32)


def int8_gemm(
    a_q: torch.Tensor,
    b_q: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype | None = None,
    *,
    precise: bool = False,
) -> torch.Tensor:
    """c = (a_q @ b_q) * a_scale * b_scale: a_q [M, K] and b_q [K, N] int8, a_scale [M, 1]
    (or [M]) the per-row scale of a, b_scale [1, N] (or [N]) the per-column scale of b.
    The integer product is exact (float64 holds it for any K below 2^38); the default
    result applies the scales in float32 like the kernels do and rounds to out_dtype (float16
    when None), precise=True in float64."""
    import torch

    acc = a_q.to(torch.float64) @ b_q.to(torch.float64)
    m, n = acc.shape
    if precise:
        return acc * a_scale.to(torch.float64).reshape(m, 1) * b_scale.to(torch.float64).reshape(1, n)
    c = acc.to(torch.float32) * a_scale.to(torch.float32).reshape(m, 1) * b_scale.to(torch.float32).reshape(1, n)
    return c.to(out_dtype or torch.float16)


def gemm(
    a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype | None = None, *, precise: bool = False
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K] and b [K, N]: fp32 math, rounded once to
    out_dtype (a's dtype when None, or float32); precise=True computes and returns float64."""
    import torch

    if precise:
        return a.to(torch.float64) @ b.to(torch.float64)
    return (a.to(torch.float32) @ b.to(torch.float32)).to(out_dtype or a.dtype)


SQUARE_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))
SKINNY_SHAPES = tuple((m, n, k) for m in (16, 128, 1024)
                      for n, k in ((4096, 4096), (14336, 4096), (4096, 14336)))
BENCH_SHAPES = SQUARE_SHAPES + SKINNY_SHAPES

# 1x1x1, M = 1, N = 1, K = 1, small non-multiples (these fit the interpreters: M*N*K <= 2^18),
# then primes, non-multiples of every tile size (M, N, K of 8, 16, 32, 64, 128, 256),
# skinny shapes and K past several k-tiles (GPU only).
TEST_SHAPES = (
    (1, 1, 1), (1, 37, 19), (7, 1, 33), (17, 33, 1), (33, 65, 17), (13, 129, 100), (64, 64, 64),
    (127, 257, 511), (129, 135, 263), (2, 1000, 300), (300, 2, 129), (1, 4096, 4096),
    (257, 300, 1031), (1000, 24, 72),
)

U32 = 2.0**-24
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Below the smallest normal of the output dtype, rounding is absolute.
SUBNORMAL_STEP = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def flops(shape) -> float:
    m, n, k = shape
    return 2.0 * m * n * k


def gemm_check(out, ref, a, b, out_dtype: str, arithmetic: str, what: str = "") -> None:
    """Raises AssertionError unless out matches ref within the bound described above."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    assert tuple(out.shape) == (m, n), f"{what}: shape {tuple(out.shape)} != {(m, n)}"
    assert out.dtype == getattr(torch, out_dtype), f"{what}: dtype {out.dtype} != {out_dtype}"
    dev = out.device
    o = out.to(torch.float64)
    r = ref.to(device=dev, dtype=torch.float64)
    ad = a.to(device=dev, dtype=torch.float64)
    bd = b.to(device=dev, dtype=torch.float64)
    # One ulp of the output dtype: round-to-nearest needs half, the Triton interpreter's
    # bfloat16 conversion truncates.
    bound = 2 * UNIT_ROUNDOFF[out_dtype] * r.abs() + 2 * SUBNORMAL_STEP[out_dtype]
    if arithmetic == "fma":
        bound += 8 * U32 * math.sqrt(max(k, 1)) * torch.sqrt(ad.square() @ bd.square())
    elif arithmetic == "mma":
        bound += 4 * U32 * math.sqrt(max(k, 1)) * (ad.abs() @ bd.abs())
    elif arithmetic == "exact":
        bound += 3 * U32 * r.abs()
    else:
        raise ValueError(f"unknown arithmetic '{arithmetic}'")
    # Where the reference is NaN or infinite (a non-finite input), out must be that value.
    finite = torch.isfinite(r)
    same = (o == r) | (torch.isnan(o) & torch.isnan(r))
    err = (o - r).abs()
    bad = torch.where(finite, ~(err <= bound), ~same)  # NaN in out counts as bad
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        ratio = float((err / bound.clamp_min(1e-300)).nan_to_num(float("inf")).max())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {out.numel()} elements outside the bound "
            f"(worst error/bound {ratio:.3g}); first at {idx}: out {float(o[idx])!r}, "
            f"ref {float(r[idx])!r}, bound {float(bound[idx]):.3g}"
        )


def _sgemm_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32)
    return {"a": a, "b": b}


def _sgemm_check(out, ref, dtype, inputs):
    gemm_check(out, ref, inputs["a"], inputs["b"], "float32", "fma", "sgemm")


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


SGEMM = register(
    OpSpec(
        name="sgemm",
        family="gemm",
        summary="fp32 GEMM on CUDA cores (FFMA, no TF32), register-tiled, cp.async pipeline",
        signature="sgemm(a[M, K], b[K, N], config=-1) -> c[M, N] (float32)",
        shape_names=("M", "N", "K"),
        dtypes=("float32",),
        make_inputs=_sgemm_inputs,
        reference=sgemm,
        # Representative only: the check scales the bound with K (gemm_check).
        tolerance={"float32": (1e-4, 1e-5)},
        flops=flops,
        bytes_moved=lambda s, dt: 4.0 * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(Peer("cuBLAS fp32 (torch.matmul, TF32 off)", _cublas_fp32),),
        compute="fp32",
        check=_sgemm_check,
        example_shape=(129, 135, 263),
        bad_inputs=(
            BadInput("b-float16", lambda t, d: {"a": t.randn(4, 6, device=d), "b": t.randn(6, 5, device=d).half()},
                     TypeError, "argument 'b' must be float32"),
            BadInput("b-inner-dim", lambda t, d: {"a": t.randn(4, 6, device=d), "b": t.randn(7, 5, device=d)},
                     ValueError, "argument 'b' must have shape [K, N] with K = 6"),
            BadInput("a-3d", lambda t, d: {"a": t.randn(2, 4, 6, device=d), "b": t.randn(6, 5, device=d)},
                     ValueError, "argument 'a' must be a 2-D matrix"),
        ),
        cuda_out=lambda cuda, i, o, **kw: cuda.sgemm_out(i["a"], i["b"], o[0], **kw),
        outputs=("c",),
        sass_kernels=(r"gemm::sgemm_kernel<",),
    )
)


def _wmma_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    return {"a": a, "b": b}


def _wmma_check(out, ref, dtype, inputs):
    import torch

    out_dtype = str(inputs.get("out_dtype", torch.float32)).removeprefix("torch.")
    gemm_check(out, ref, inputs["a"], inputs["b"], out_dtype, "mma", f"wmma_gemm/{dtype}")


def _cublas():
    """cuBLAS through torch.matmul, in the operands' dtype (the peer of every 16-bit GEMM)."""
    import torch

    return lambda a, b, **_: torch.matmul(a, b)


WMMA_GEMM = register(
    OpSpec(
        name="wmma_gemm",
        family="gemm",
        summary="fp16/bf16 GEMM on Tensor Cores via nvcuda::wmma (mma.sync), fp32 accumulation",
        signature="wmma_gemm(a[M, K], b[K, N], out_dtype=float32, config=-1) -> c[M, N]",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16"),
        make_inputs=_wmma_inputs,
        reference=wmma_gemm,
        tolerance={"float16": (1e-4, 1e-5), "bfloat16": (1e-4, 1e-5)},
        flops=flops,
        # a and b in their dtype, c in float32 (the default output)
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[2] + s[2] * s[1]) + 4.0 * s[0] * s[1],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(Peer("cuBLAS (torch.matmul)", _cublas),),
        compute="tensor",
        check=_wmma_check,
        example_shape=(129, 135, 263),
        bad_inputs=(
            BadInput("a-float32", lambda t, d: {"a": t.randn(4, 6, device=d), "b": t.randn(6, 5, device=d)},
                     TypeError, "argument 'a' must be float16 or bfloat16"),
            BadInput("b-inner-dim", lambda t, d: {"a": t.randn(4, 6, device=d).half(), "b": t.randn(7, 5, device=d).half()},
                     ValueError, "argument 'b' must have shape [K, N] with K = 6"),
        ),
        cuda_out=lambda cuda, i, o, **kw: cuda.wmma_gemm_out(i["a"], i["b"], o[0], **kw),
        outputs=("c",),
        sass_kernels=(r"gemm::wmma_gemm_kernel<",),
    )
)


_OUT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def _int8_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    a_q = torch.randint(-127, 128, (m, k), generator=gen, device=device, dtype=torch.int8)
    # b_q K-major, a transposed view of [N, K]: the layout quantizing b per column gives
    # (quantize_int8(b.t()), then .t()), that of an nn.Linear weight, and the one the Hopper
    # kernel reads in place. Tests cover the row-major layout on their own.
    b_q = torch.randint(-127, 128, (n, k), generator=gen, device=device, dtype=torch.int8).t()
    # Scales of the size absmax / 127 gives for unit-variance data.
    a_scale = 0.01 + 0.02 * torch.rand((m, 1), generator=gen, device=device)
    b_scale = 0.01 + 0.02 * torch.rand((1, n), generator=gen, device=device)
    return {"a_q": a_q, "b_q": b_q, "a_scale": a_scale, "b_scale": b_scale,
            "out_dtype": getattr(torch, dtype)}


def _int8_check(out, ref, dtype, inputs):
    gemm_check(out, ref, inputs["a_q"], inputs["b_q"], dtype, "exact", f"int8_gemm/{dtype}")


def _int8_args(t, d, **change):
    """A valid int8_gemm call of 4 x 5 x 6 with `change` applied (bad_inputs)."""
    args = {"a_q": t.ones(4, 6, device=d, dtype=t.int8), "b_q": t.ones(6, 5, device=d, dtype=t.int8),
            "a_scale": t.ones(4, 1, device=d), "b_scale": t.ones(1, 5, device=d)}
    return {**args, **change}


def _int_mm():
    """torch._int_mm (cuBLASLt int8, int32 out) plus the same scale epilogue in torch.
    _int_mm needs M > 16 and K, N multiples of 8: smaller M is padded with zero rows."""
    import torch

    def run(a_q, b_q, a_scale, b_scale, out_dtype=torch.float16, **_):
        m = a_q.shape[0]
        if m <= 16:
            a_q = torch.nn.functional.pad(a_q, (0, 0, 0, 24 - m))
        acc = torch._int_mm(a_q, b_q)[:m]
        return (acc.to(torch.float32) * a_scale * b_scale).to(out_dtype)

    return run


def _int_mm_row_major_b():
    """torch._int_mm as ../shared/PEERS-H200.md timed it (the figure the GEMM issue's 3x is
    set against; docs/perf/gemm.md): b_q row-major [K, N], a layout on which cuBLASLt is
    several times slower than on the K-major b_q the inputs carry. The row-major copy is
    made once per input set, on its first call, outside the timed calls."""
    import torch

    run_int_mm = _int_mm()
    copies = {}

    def run(a_q, b_q, a_scale, b_scale, out_dtype=torch.float16, **_):
        key = (b_q.data_ptr(), tuple(b_q.shape), tuple(b_q.stride()))
        if key not in copies:
            copies[key] = (b_q, b_q.contiguous())  # holding b_q keeps its address unique
        return run_int_mm(a_q, copies[key][1], a_scale, b_scale, out_dtype)

    return run


INT8_GEMM = register(
    OpSpec(
        name="int8_gemm",
        family="gemm",
        summary="int8 GEMM on Tensor Cores (int32 accumulate) with row/column scales: TMA + "
                "wgmma on sm_90a, mma.sync m16n8k32 elsewhere",
        signature="int8_gemm(a_q[M, K], b_q[K, N], a_scale[M, 1], b_scale[1, N], "
                  "out_dtype=float16, config=-1) -> c[M, N]",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16", "float32"),
        make_inputs=_int8_inputs,
        reference=int8_gemm,
        tolerance={"float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3), "float32": (1e-6, 1e-6)},
        flops=flops,
        bytes_moved=lambda s, dt: (s[0] * s[2] + s[2] * s[1] + 4.0 * (s[0] + s[1])
                                   + _OUT_BYTES[dt] * s[0] * s[1]),
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True, tunable=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(Peer("torch._int_mm + scales", _int_mm),
               Peer("torch._int_mm + scales, row-major b", _int_mm_row_major_b)),
        compute="int8",
        check=_int8_check,
        example_shape=(129, 135, 263),
        bad_inputs=(
            BadInput("a_scale-shape", lambda t, d: _int8_args(t, d, a_scale=t.ones(1, 4, device=d)), ValueError,
                     "argument 'a_scale' must have shape"),
            BadInput("b_scale-shape", lambda t, d: _int8_args(t, d, b_scale=t.ones(5, 1, device=d)), ValueError,
                     "argument 'b_scale' must have shape"),
            BadInput("a_q-float", lambda t, d: _int8_args(t, d, a_q=t.ones(4, 6, device=d)), TypeError,
                     "argument 'a_q' must be int8"),
            BadInput("a_scale-on-cpu", lambda t, d: _int8_args(t, d, a_scale=t.ones(4, 1)), ValueError,
                     "argument 'a_scale' must be on the device of 'a_q'", gpu=True),
        ),
        cuda_out=lambda cuda, i, o, **kw: cuda.int8_gemm_out(i["a_q"], i["b_q"], i["a_scale"], i["b_scale"],
                                                             o[0], **kw),
        outputs=("c",),
        sass_kernels=(
            r"gemm::int8_gemm_kernel<",
            r"sm90::gemm_kernel<gks::kernels::gemm::sm90::Mainloop<gks::kernels::gemm::sm90::Int8Operands",
            r"sm90::split_k_reduce_kernel<gks::kernels::gemm::sm90::Int8Operands",
            r"gemm::transpose_int8_kernel\(",
        ),
    )
)


# Every operand stays within 2^18 elements. The Hopper kernel needs rows of a and b that
# are 16-byte aligned (K and N multiples of 8 for contiguous operands); the other shapes
# exercise the WMMA fallback through the same entry point.
HOPPER_TEST_SHAPES = (
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
GEMM_BENCH_SHAPES = tuple(dict.fromkeys(((4096, 4096, 4096), (8192, 8192, 8192)) + tuple(
    (m, n, k) for m in (128, 1024, 4096) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))
)))


def _gemm_inputs(shape, dtype, device, seed):
    import torch

    m, n, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    return {"a": a, "b": b}


def _gemm_check(out, ref, dtype, inputs, what: str = "gemm") -> None:
    """Element-wise against the float64 reference: the output dtype's rounding plus a
    Tensor Core fp32-accumulation bound that grows with sqrt(K) (gemm_check)."""
    out_dtype = inputs.get("out_dtype") or inputs["a"].dtype
    gemm_check(out, ref, inputs["a"], inputs["b"], str(out_dtype).removeprefix("torch."), "mma",
               f"{what}/{dtype}")


GEMM = register(
    OpSpec(
        name="gemm",
        family="gemm",
        summary="fp16/bf16 GEMM, fp32 accumulation: TMA + wgmma on sm_90a, WMMA elsewhere",
        signature="gemm(a[M, K], b[K, N], out_dtype=None, config=-1) -> c[M, N] (a's dtype)",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16"),
        make_inputs=_gemm_inputs,
        reference=gemm,
        # Nominal (atol, rtol); `check` applies the K-aware bound instead.
        tolerance={"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 8e-3)},
        flops=flops,
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
        backends=(Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),),
        test_shapes=HOPPER_TEST_SHAPES,
        bench_shapes=GEMM_BENCH_SHAPES,
        peers=(Peer("cuBLAS (torch.matmul)", _cublas),),
        compute="tensor",
        check=_gemm_check,
        example_shape=(200, 264, 520),
        bad_inputs=(
            BadInput("a-float32", lambda t, d: {"a": t.randn(4, 8, device=d), "b": t.randn(8, 3, device=d)},
                     TypeError, "argument 'a' must be float16 or bfloat16, got float32"),
            BadInput("b-dtype", lambda t, d: {"a": t.randn(4, 8, device=d).half(), "b": t.randn(8, 3, device=d).bfloat16()},
                     TypeError, "argument 'b' must have the dtype of 'a'"),
            BadInput("b-inner-dim", lambda t, d: {"a": t.randn(4, 8, device=d).half(), "b": t.randn(9, 3, device=d).half()},
                     ValueError, "argument 'b' must have shape [K, N] with K = 8"),
            BadInput("b-transposed", lambda t, d: {"a": t.randn(4, 8, device=d).half(), "b": t.randn(3, 8, device=d).half().t()},
                     ValueError, "argument 'b' must be row-major"),
        ),
        cuda_out=lambda cuda, i, o, **kw: cuda.gemm_out(i["a"], i["b"], o[0], **kw),
        outputs=("c",),
        sass_kernels=(
            r"sm90::gemm_kernel<gks::kernels::gemm::sm90::Mainloop<gks::kernels::gemm::sm90::HalfOperands<",
            r"sm90::split_k_reduce_kernel<gks::kernels::gemm::sm90::HalfOperands<",
        ),
    )
)
