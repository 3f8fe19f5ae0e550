# SPDX-License-Identifier: Apache-2.0
"""The gemm family: c [M, N] = a [M, K] @ b [K, N], shapes (M, N, K).

  sgemm      c = a @ b in float32 with FP32 FMA arithmetic (no TF32).
  wmma_gemm  Tensor Core GEMM (nvcuda::wmma / mma.sync): fp16 or bf16 inputs, fp32
             accumulation.
  int8_gemm  int8 x int8 -> int32 on Tensor Cores, then per-row (a) and per-column (b)
             scales in the epilogue. The spec's dtype is the output dtype.
  gemm       fp16/bf16 GEMM with fp32 accumulation, c in a's dtype: the Hopper-native
             kernel on sm_90a (TMA + wgmma, warp-specialized, persistent), the WMMA kernel
             elsewhere; shapes (M, N, K[, epilogue]). Its fused epilogue (apply_epilogue;
             gemm_fp8 has it too, but for the scales): bias, per-row and per-column scales,
             and the gated unit (SwiGLU, GeGLU) of interleaved gate and up columns.
  grouped_gemm  the MoE expert GEMMs in one launch: group g of a's rows times b[g], fp16/
             bf16 with fp32 accumulation, contiguous (group_offsets) or masked
             (group_counts) layout; shapes (G, M, N, K, masked). See grouped_gemm below.
  gemm_fp8   fp8 (e4m3 or e5m2) x fp8 with fp32 accumulation and fp32 scales per tensor, per
             row of a and column of b, or per 1 x 128 group of a and 128 x 128 block of b
             (DeepSeek-V3's); shapes (M, N, K, scaling, kmajor, e5m2). See gemm_fp8 below.

The check bounds |out - ref| element-wise (ref in float64) by the error the arithmetic can
make, scaled by K, so one tolerance serves K = 1 and K = 14336 alike:
  * "fma"   (fp32 FFMA, round to nearest): 8 u sqrt(K) sqrt(sum_k (a_ik b_kj)^2), u = 2^-24.
            Round-to-nearest errors grow like sqrt(K) times the size of the products; the
            bound sits ~20 standard deviations above fp32's error yet below what TF32
            (10-bit mantissa) inputs would cause for any K below ~10^6, so it proves "no TF32".
  * "mma"   (Tensor Cores, fp32 accumulation that may round toward zero): 4 u sqrt(K)
            sum_k |a_ik b_kj|.
  * "exact" (int8: exact int32 sums, then two fp32 multiplies): 3 u |ref|.
  * "fp8"   (fp8 Tensor Cores, a and b the dequantized operands): (2^-11 + 4 u (sqrt(K) + 1))
            sum_k |a_ik b_kj|; the 2^-11 is Hopper's fp8 accumulator, which keeps about 14
            bits within each 128-wide stretch of K before the kernel adds it to fp32
            (DeepSeek-V3 report, 3.3.2): four 32-wide steps, each within 2^-13 of the
            stretch's sum of |products|. See gemm_fp8 below.
plus one ulp of the output dtype (2 u_out |ref|) and a tiny absolute floor for
subnormal outputs. A dropped or duplicated k-slab, a wrong row or column, an unwritten
output (NaN poison) all land far outside these bounds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import math

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, mixed_sizes, register, shape_seed

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["sgemm", "wmma_gemm", "int8_gemm", "gemm", "grouped_gemm", "grouped_gemm_fp8", "gemm_fp8"]


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
    a: torch.Tensor,
    b: torch.Tensor,
    out_dtype: torch.dtype | None = None,
    *,
    bias: torch.Tensor | None = None,
    row_scale: torch.Tensor | None = None,
    col_scale: torch.Tensor | None = None,
    gated: str | None = None,
    precise: bool = False,
) -> torch.Tensor:
    """c = a @ b for float16/bfloat16 a [M, K] and b [K, N], through the fused epilogue
    (apply_epilogue: row and column scales, bias, a gated activation on interleaved columns;
    none by default): fp32 math, rounded once to out_dtype (a's dtype when None, or float32);
    precise=True computes and returns float64."""
    import torch

    check_epilogue(a.shape[0], b.shape[1], bias, row_scale, col_scale, gated, a.device, "gks.reference.gemm")
    compute = torch.float64 if precise else torch.float32
    c = apply_epilogue(a.to(compute) @ b.to(compute), bias, row_scale, col_scale, gated)
    return c if precise else c.to(out_dtype or a.dtype)


# ---- The fused epilogue of gemm and gemm_fp8 (a policy of the Hopper kernel's epilogue):
# y = acc * row_scale[m] * col_scale[n] + bias[n] in fp32, then with `gated` the gated
# linear unit of b's interleaved columns, c[:, j] = act(y[:, 2j]) * y[:, 2j + 1] (SwiGLU for
# "silu"), c [M, N / 2]. Interleaving keeps a gate and its up in one thread's registers.
# In a spec shape the epilogue is a code (epilogue_code): 1 bias, 2 row and column scales,
# 4 (activation index + 1) the gated activation.

GATED = ("silu", "gelu", "gelu_tanh")  # act_and_mul's activations, gks::Activation's order
_BIAS_DTYPES = ("float32", "float16", "bfloat16")


def epilogue_code(bias: bool = False, scales: bool = False, gated: str | None = None) -> int:
    return int(bias) | 2 * int(scales) | 4 * (0 if gated is None else GATED.index(gated) + 1)


def epilogue_parts(code: int) -> tuple[bool, bool, str | None]:
    """(bias, scales, gated) of an epilogue code."""
    act = code >> 2
    return bool(code & 1), bool(code & 2), GATED[act - 1] if act else None


def check_epilogue(m: int, n: int, bias, row_scale, col_scale, gated, device, op: str) -> int:
    """Refuses a bad epilogue with the error every backend raises (TypeError or ValueError
    naming the argument); returns c's columns (N, or N / 2 when gated). bias [N] float32,
    float16 or bfloat16; row_scale [M] or [M, 1] and col_scale [N] or [1, N] float32; any
    strides; on the device of 'a'."""
    import torch

    for name, t, dtypes, shapes, want in (
            ("bias", bias, _BIAS_DTYPES, ((n,),), f"shape [N] with N = {n}"),
            ("row_scale", row_scale, ("float32",), ((m,), (m, 1)), f"shape [M] or [M, 1] with M = {m}"),
            ("col_scale", col_scale, ("float32",), ((n,), (1, n)), f"shape [N] or [1, N] with N = {n}")):
        if t is None:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
        if t.device != device:
            raise ValueError(f"{op}: argument '{name}' must be on the device of 'a' ({device}), got {t.device}")
        if _dtype_name(t.dtype) not in dtypes:
            names = ", ".join(dtypes[:-1]) + " or " + dtypes[-1] if len(dtypes) > 1 else dtypes[0]
            raise TypeError(f"{op}: argument '{name}' must be {names}, got {_dtype_name(t.dtype)}")
        if tuple(t.shape) not in shapes:
            raise ValueError(f"{op}: argument '{name}' must have {want}, got {list(t.shape)}")
    if gated is None:
        return n
    if gated not in GATED:
        raise ValueError(f"{op}: argument 'gated' must be None, 'silu', 'gelu' or 'gelu_tanh', got {gated!r}")
    if n % 2:
        raise ValueError(f"{op}: argument 'gated' needs an even N (b's columns interleave gate and up), "
                         f"got N = {n}")
    return n // 2


def _activation(g, gated: str):
    import torch.nn.functional as F

    if gated == "silu":
        return F.silu(g)
    return F.gelu(g, approximate="tanh" if gated == "gelu_tanh" else "none")


def apply_epilogue(y, bias=None, row_scale=None, col_scale=None, gated=None):
    """The epilogue on y [M, N] (the product, in its compute dtype): y * row_scale[m] *
    col_scale[n] + bias[n], then with `gated` act(y[:, 2j]) * y[:, 2j + 1] for j < N / 2."""
    m, n = y.shape
    if row_scale is not None:
        y = y * row_scale.to(y.dtype).reshape(m, 1)
    if col_scale is not None:
        y = y * col_scale.to(y.dtype).reshape(1, n)
    if bias is not None:
        y = y + bias.to(y.dtype).reshape(1, n)
    if gated is not None:
        y = _activation(y[:, 0::2], gated) * y[:, 1::2]
    return y


def epilogue_inputs(code: int, m: int, n: int, bias_dtype, gen, device) -> dict:
    """The epilogue's arguments for a spec shape's code: bias ~ N(0, 1) in bias_dtype,
    scales in [0.5, 1.5) (row and column alike), `gated` by name; {} for code 0."""
    import torch

    bias, scales, gated = epilogue_parts(code)
    out = {}
    if bias:
        out["bias"] = torch.randn(n, generator=gen, device=device).to(bias_dtype)
    if scales:
        out["row_scale"] = 0.5 + torch.rand(m, generator=gen, device=device)
        out["col_scale"] = 0.5 + torch.rand(n, generator=gen, device=device)
    if gated is not None:
        out["gated"] = gated
    return out


# |act'| over the reals: silu's peaks at 1.0998, gelu's (erf or tanh form) at 1.1289.
_ACT_SLOPE = 1.13
# The kernels' fp32 activations (__expf, erff, tanhf) against float64: a generous relative
# share (__expf's error grows with |x|: 2 + 1.16 |x| ulps).
_ACT_ERROR = 2.0**-16


def _epilogue_bound(acc_bound, y64, inputs):
    """The bound on |c - ref| before c's rounding, from acc_bound (that on the product) and the
    float64 product y64, through the epilogue of `inputs`: the scales multiply it, the fp32
    multiplies and add round (3 u), a gated unit's gate and up errors pass through act's slope."""
    import torch

    m, n = y64.shape
    scale = torch.ones_like(y64)
    if inputs.get("row_scale") is not None:
        scale = scale * inputs["row_scale"].to(y64).reshape(m, 1).abs()
    if inputs.get("col_scale") is not None:
        scale = scale * inputs["col_scale"].to(y64).reshape(1, n).abs()
    bias = inputs.get("bias")
    bias = torch.zeros_like(y64) if bias is None else bias.to(y64).reshape(1, n).expand(m, n)
    err = acc_bound * scale + 3 * U32 * (y64.abs() * scale + bias.abs())
    gated = inputs.get("gated")
    if gated is None:
        return err
    y = apply_epilogue(y64, inputs.get("bias"), inputs.get("row_scale"), inputs.get("col_scale"))
    g, u, eg, eu = y[:, 0::2], y[:, 1::2], err[:, 0::2], err[:, 1::2]
    act = _activation(g, gated).abs()
    out = act * u.abs()
    return _ACT_SLOPE * eg * (u.abs() + eu) + act * eu + (_ACT_ERROR + 2 * U32) * out


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
FP8_ACCUMULATOR = 2.0**-11  # the "fp8" arithmetic's share for the fp8 Tensor Cores' sums
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
# Below the smallest normal of the output dtype, rounding is absolute.
SUBNORMAL_STEP = {"float32": 2.0**-149, "float16": 2.0**-24, "bfloat16": 2.0**-133}


def flops(shape) -> float:
    m, n, k = shape[:3]
    return 2.0 * m * n * k


def gemm_check(out, ref, a, b, out_dtype: str, arithmetic: str, what: str = "", epilogue: dict | None = None) -> None:
    """Raises AssertionError unless out matches ref within the bound described above; with
    `epilogue` (a call's bias / row_scale / col_scale / gated, see apply_epilogue) the
    product's bound passes through the epilogue first (_epilogue_bound)."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    epilogue = {key: v for key, v in (epilogue or {}).items()
                if key in ("bias", "row_scale", "col_scale", "gated") and v is not None}
    n_out = n // 2 if epilogue.get("gated") else n
    assert tuple(out.shape) == (m, n_out), f"{what}: shape {tuple(out.shape)} != {(m, n_out)}"
    assert out.dtype == getattr(torch, out_dtype), f"{what}: dtype {out.dtype} != {out_dtype}"
    dev = out.device
    o = out.to(torch.float64)
    r = ref.to(device=dev, dtype=torch.float64)
    ad = a.to(device=dev, dtype=torch.float64)
    bd = b.to(device=dev, dtype=torch.float64)
    if arithmetic == "fma":
        bound = 8 * U32 * math.sqrt(max(k, 1)) * torch.sqrt(ad.square() @ bd.square())
    elif arithmetic == "mma":
        bound = 4 * U32 * math.sqrt(max(k, 1)) * (ad.abs() @ bd.abs())
    elif arithmetic == "exact":
        bound = 3 * U32 * r.abs()  # int8_gemm's ref: the exact sums, scaled
    elif arithmetic == "fp8":
        bound = (FP8_ACCUMULATOR + 4 * U32 * (math.sqrt(max(k, 1)) + 1)) * (ad.abs() @ bd.abs())
    else:
        raise ValueError(f"unknown arithmetic '{arithmetic}'")
    if epilogue:
        epilogue = {key: v.to(dev) if isinstance(v, torch.Tensor) else v for key, v in epilogue.items()}
        bound = _epilogue_bound(bound, ad @ bd, epilogue)
    # One ulp of the output dtype: round-to-nearest needs half, the Triton interpreter's
    # bfloat16 conversion truncates.
    bound = bound + 2 * UNIT_ROUNDOFF[out_dtype] * r.abs() + 2 * SUBNORMAL_STEP[out_dtype]
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
            r"sm90::gemm_kernel<gks::kernels::gemm::sm90::Mainloop<gks::kernels::gemm::sm90::ByteOperands<signed char",
            r"sm90::split_k_reduce_kernel<gks::kernels::gemm::sm90::ByteOperands<signed char",
            r"gemm::transpose_bytes_kernel\(",
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
    # The fused epilogue (M, N, K, epilogue_code): each part alone and together, every
    # activation, on the Hopper path (TMA-store, direct and split-K stores: 16 rows of K
    # 4096 split K), the WMMA fallback (K = 263, 300: rows TMA cannot read) and K = 0.
    (200, 264, 520, 1), (257, 520, 200, 2), (1, 264, 136, 4), (136, 8, 64, 7), (384, 392, 448, 9),
    (129, 136, 263, 15), (2, 600, 300, 5), (16, 264, 4096, 7), (5, 24, 0, 5), (0, 16, 32, 5),
)

# The squares, then M in {128, 1024, 4096} x (N, K); 4096^3 is both, and is timed once (a
# shape listed twice was timed twice, and a baseline row could pair ours from one timing
# with the peer of the other).
GEMM_BENCH_SHAPES = tuple(dict.fromkeys(((4096, 4096, 4096), (8192, 8192, 8192)) + tuple(
    (m, n, k) for m in (128, 1024, 4096) for n, k in ((4096, 4096), (14336, 4096), (4096, 14336))
)))
# The fused epilogue on an LLM MLP's gate/up projection (hidden 4096, 2 x 14336 interleaved
# columns): SwiGLU, SwiGLU with a bias, and the bias alone; decode (128 rows) and prefill.
GEMM_EPILOGUE_BENCH_SHAPES = tuple((m, 28672, 4096, code) for m in (128, 4096) for code in (4, 5, 1))


def epilogue_args(inputs: dict) -> dict:
    """The epilogue's keyword arguments among a call's inputs (those given)."""
    return {key: inputs[key] for key in ("bias", "row_scale", "col_scale", "gated") if inputs.get(key) is not None}


def _gemm_inputs(shape, dtype, device, seed):
    """a, b ~ N(0, 1); a shape's fourth element, an epilogue code, adds that epilogue's
    arguments (epilogue_inputs: the bias in a's dtype), and with a gated unit b / sqrt(K), so
    that gate x up stays inside float16 for any K."""
    import torch

    m, n, k = shape[:3]
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    gated = len(shape) > 3 and epilogue_parts(shape[3])[2] is not None
    a = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32).to(dt)
    b = torch.randn((k, n), generator=gen, device=device, dtype=torch.float32)
    b = (b / math.sqrt(max(k, 1)) if gated else b).to(dt)
    epilogue = epilogue_inputs(shape[3], m, n, dt, gen, device) if len(shape) > 3 else {}
    return {"a": a, "b": b, **epilogue}


def _gemm_check(out, ref, dtype, inputs, what: str = "gemm") -> None:
    """Element-wise against the float64 reference: the output dtype's rounding plus a
    Tensor Core fp32-accumulation bound that grows with sqrt(K) (gemm_check), through the
    call's epilogue."""
    out_dtype = inputs.get("out_dtype") or inputs["a"].dtype
    gemm_check(out, ref, inputs["a"], inputs["b"], str(out_dtype).removeprefix("torch."), "mma",
               f"{what}/{dtype}", epilogue=inputs)


def _torch_epilogue(product, compiled: bool):
    """A peer of the fused epilogue: `product` (cuBLAS: torch.matmul, or cuBLASLt's fp8
    GEMMs) then the epilogue in torch on its output, eagerly (a kernel a step) or compiled
    by torch.compile (Inductor fuses the pointwise steps into one kernel). A call with no
    epilogue is the bare product's; the compiled peer leaves it out."""
    import torch

    fn = torch.compile(apply_epilogue, dynamic=False) if compiled else apply_epilogue

    def run(bias=None, row_scale=None, col_scale=None, gated=None, **call):
        if compiled and bias is None and row_scale is None and col_scale is None and gated is None:
            raise NotImplementedError("no epilogue: the compiled peer is the bare product's")
        return fn(product(**call), bias, row_scale, col_scale, gated)

    return run


def _cublas_epilogue(compiled: bool):
    """The peer's maker (torch is imported when it is made: the specs load without it)."""

    def make():
        import torch

        def product(a, b, out_dtype=None, **_):
            return torch.matmul(a, b) if out_dtype in (None, a.dtype) else torch.matmul(a.float(), b.float())

        return _torch_epilogue(product, compiled)

    return make


def _epilogue_bad_inputs(args, scales: bool = True) -> tuple[BadInput, ...]:
    """The epilogue's refusals, on top of `args(t, d, **change)`: a valid call of M = 4 and
    N = 5 (odd, so that gated refuses it); scales: the op takes row_scale and col_scale."""

    def bad(id_, error, message, **change):
        return BadInput(id_, lambda t, d: args(t, d, **{k: v(t, d) for k, v in change.items()}), error, message)

    scale_cases = (
        bad("row_scale-shape", ValueError, "argument 'row_scale' must have shape [M] or [M, 1] with M = 4, "
                                           "got [1, 4]", row_scale=lambda t, d: t.ones(1, 4, device=d)),
        bad("col_scale-half", TypeError, "argument 'col_scale' must be float32, got float16",
            col_scale=lambda t, d: t.ones(5, device=d, dtype=t.float16)),
    )
    return (scale_cases if scales else ()) + (
        bad("bias-shape", ValueError, "argument 'bias' must have shape [N] with N = 5, got [1, 5]",
            bias=lambda t, d: t.zeros(1, 5, device=d)),
        bad("bias-int32", TypeError, "argument 'bias' must be float32, float16 or bfloat16, got int32",
            bias=lambda t, d: t.zeros(5, device=d, dtype=t.int32)),
        bad("gated-relu", ValueError, "argument 'gated' must be None, 'silu', 'gelu' or 'gelu_tanh', got 'relu'",
            gated=lambda t, d: "relu"),
        bad("gated-odd-n", ValueError, "argument 'gated' needs an even N (b's columns interleave gate and up), "
                                       "got N = 5", gated=lambda t, d: "silu"),
        BadInput("bias-on-cpu", lambda t, d: args(t, d, bias=t.zeros(5)), ValueError,
                 "argument 'bias' must be on the device of 'a'", gpu=True),
    )


def _gemm_args(t, d, **change):
    """A valid gemm call of 4 x 5 x 8 (fp16) with `change` applied (bad_inputs)."""
    return {"a": t.randn(4, 8, device=d).half(), "b": t.randn(8, 5, device=d).half(), **change}


GEMM = register(
    OpSpec(
        name="gemm",
        family="gemm",
        summary="fp16/bf16 GEMM, fp32 accumulation: TMA + wgmma on sm_90a, WMMA elsewhere; fused epilogue: "
                "bias, row/column scales, SwiGLU / GeGLU of interleaved gate and up columns",
        signature="gemm(a[M, K], b[K, N], out_dtype=None, config=-1, *, bias=None, row_scale=None, "
                  "col_scale=None, gated=None) -> c[M, N, or N / 2 gated] (a's dtype)",
        shape_names=("M", "N", "K", "epilogue"),
        optional_dims={"epilogue": 0},  # epilogue_code; none unless given
        bucket_exact=("epilogue",),
        dtypes=("float16", "bfloat16"),
        make_inputs=_gemm_inputs,
        reference=gemm,
        # Nominal (atol, rtol); `check` applies the K-aware bound instead.
        tolerance={"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 8e-3)},
        flops=flops,
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (s[0] * s[2] + s[2] * s[1] + s[0] * s[1]),
        backends=(Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),),
        test_shapes=HOPPER_TEST_SHAPES,
        bench_shapes=GEMM_BENCH_SHAPES + GEMM_EPILOGUE_BENCH_SHAPES,
        peers=(Peer("cuBLAS (torch.matmul) + torch epilogue", _cublas_epilogue(False)),
               Peer("torch.compile (matmul + epilogue)", _cublas_epilogue(True))),
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
        ) + _epilogue_bad_inputs(_gemm_args),
        cuda_out=lambda cuda, i, o, **kw: cuda.gemm_out(i["a"], i["b"], o[0], **kw, **epilogue_args(i)),
        outputs=("c",),
        sass_kernels=(
            # (The grouped schedule's instantiations are grouped_gemm's.)
            r"sm90::gemm_kernel<gks::kernels::gemm::sm90::Mainloop<gks::kernels::gemm::sm90::HalfOperands<"
            r"(?!.*GroupedScheduler<)",
            r"sm90::split_k_reduce_kernel<gks::kernels::gemm::sm90::HalfOperands<",
            # The fused epilogue's finishing pass (gemm_fp8's K = 0 takes it too).
            r"gemm::apply_epilogue_kernel<",
        ),
    )
)


# ---- grouped_gemm: the MoE expert GEMMs in one launch.
#
# Two layouts of the same product, chosen by which of group_offsets / group_counts is given:
#   contiguous  a [T, K], tokens sorted by expert; group g is rows [group_offsets[g],
#               group_offsets[g + 1]) of a and of c [T, N] (prefill, training).
#   masked      a [G, M_max, K], group g its first group_counts[g] rows; c [G, M_max, N]
#               (decode under CUDA graphs: the counts stay on the device).
# Shapes (G, M, N, K, masked): M is the rows a group may have (the contiguous layout's group
# sizes are drawn in [0, M], the masked layout's M_max = M).

_INT32_LIMIT = 2**31


def check_grouped_gemm(a, b, group_offsets, group_counts, op: str) -> bool:
    """Refuses a bad grouped_gemm call with the error every backend (and the reference)
    raises: TypeError or ValueError naming the argument and what was expected. Reads no
    value of group_offsets / group_counts (no host synchronization). Returns whether the
    call is the masked layout."""
    return _check_grouped(a, b, group_offsets, group_counts, op, fp8=False)


def _dtype_name(dtype) -> str:  # as the C++ API names it (and JAX): float32, not torch.float32
    return str(dtype).removeprefix("torch.")


def _check_grouped(a, b, group_offsets, group_counts, op: str, fp8: bool) -> bool:
    """check_grouped_gemm, and for grouped_gemm_fp8 (fp8) its operands' rules: e4m3, K a
    multiple of 16, b row-major or K-major."""
    import torch

    if (group_offsets is None) == (group_counts is None):
        given = "both" if group_offsets is not None else "neither"
        raise ValueError(f"{op}: exactly one of the arguments 'group_offsets' (the contiguous layout) "
                         f"and 'group_counts' (the masked layout) must be given, got {given}")
    masked = group_counts is not None
    groups_name, groups = ("group_counts", group_counts) if masked else ("group_offsets", group_offsets)
    for name, t in (("a", a), ("b", b), (groups_name, groups)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    if fp8 and a.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{op}: argument 'a' must be float8_e4m3fn, got {_dtype_name(a.dtype)}")
    if not fp8 and a.dtype not in (torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'a' must be float16 or bfloat16, got {_dtype_name(a.dtype)}")
    a_rank, a_dims = (3, "[G, M_max, K] (the masked layout: group_counts given)") if masked else \
        (2, "[T, K] (the contiguous layout: group_offsets given)")
    if a.dim() != a_rank:
        raise ValueError(f"{op}: argument 'a' must be {a_rank}-D {a_dims}, got {a.dim()} dims "
                         f"(shape {list(a.shape)})")
    for name, t in (("b", b), (groups_name, groups)):
        if t.device != a.device:
            raise ValueError(f"{op}: argument '{name}' must be on the device of 'a' ({a.device}), got {t.device}")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: argument 'b' must have the dtype of 'a' ({_dtype_name(a.dtype)}), "
                        f"got {_dtype_name(b.dtype)}")
    if b.dim() != 3:
        raise ValueError(f"{op}: argument 'b' must be 3-D [G, K, N], got {b.dim()} dims (shape {list(b.shape)})")
    k = a.shape[-1]
    if b.shape[1] != k:
        raise ValueError(f"{op}: argument 'b' must have shape [G, K, N] with K = {k} (the last dim of 'a', "
                         f"{list(a.shape)}), got {list(b.shape)}")
    groups_count = b.shape[0]
    if masked and a.shape[0] != groups_count:
        raise ValueError(f"{op}: argument 'b' must have shape [G, K, N] with G = {a.shape[0]} (dim 0 of 'a', "
                         f"{list(a.shape)}), got {list(b.shape)}")
    if groups.dtype != torch.int32:
        raise TypeError(f"{op}: argument '{groups_name}' must be int32, got {_dtype_name(groups.dtype)}")
    want = groups_count if masked else groups_count + 1
    if list(groups.shape) != [want]:
        what = "[G]" if masked else "[G + 1]"
        raise ValueError(f"{op}: argument '{groups_name}' must have shape {what} = [{want}] (G = {groups_count}, "
                         f"dim 0 of 'b'), got {list(groups.shape)}")
    if fp8:
        n = b.shape[2]
        if k % GEMM_FP8_K_MULTIPLE:
            raise ValueError(f"{op}: K (the last dim of argument 'a') must be a multiple of {GEMM_FP8_K_MULTIPLE}, "
                             f"got {k}")
        if k > 1 and a.stride(-1) != 1:
            raise ValueError(f"{op}: argument 'a' must be row-major with a contiguous last dim (stride(-1) == 1), "
                             f"got strides {tuple(a.stride())}")
        if not (n <= 1 or k <= 1 or b.stride(2) == 1 or b.stride(1) == 1):
            raise ValueError(f"{op}: argument 'b' must be row-major (stride(2) == 1) or K-major (stride(1) == 1: "
                             f"the view w.transpose(1, 2) of a [G, N, K] w), got strides {tuple(b.stride())}")
    else:
        # Rows are loaded as vectors along their last dim; the other dims may be strided. As
        # with the other GEMMs, a transposed view is refused, not copied.
        for name, t in (("a", a), ("b", b)):
            if t.shape[-1] > 1 and t.stride(-1) != 1:
                raise ValueError(f"{op}: argument '{name}' must be row-major with a contiguous last dim "
                                 f"(stride(-1) == 1), got strides {tuple(t.stride())}")
    if max((*a.shape, *b.shape), default=0) >= _INT32_LIMIT:
        raise ValueError(f"{op}: every dim of 'a' and 'b' must be below 2^31, got {list(a.shape)} and "
                         f"{list(b.shape)}")
    return masked


def grouped_gemm_fp8_scale_shapes(a, b, masked: bool) -> tuple:
    """(a_scale's shape, the library's words for it), then b_scale's, for a grouped_gemm_fp8
    call whose operands check_grouped_gemm_fp8 took."""
    groups, k, n = b.shape
    kg, nb = -(-k // 128), -(-n // 128)
    rows = a.shape[1] if masked else a.shape[0]
    sa = (groups, rows, kg) if masked else (rows, kg)
    sa_words = "[G, M_max, ceil(K / 128)]" if masked else "[T, ceil(K / 128)]"
    return ((sa, f"{sa_words} = {list(sa)}"),
            ((groups, kg, nb), f"[G, ceil(K / 128), ceil(N / 128)] = {[groups, kg, nb]}"))


def check_grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, out_dtype, op: str) -> bool:
    """Refuses a bad grouped_gemm_fp8 call with the error every backend (and the reference)
    raises, as check_grouped_gemm does (the scales: float32 on a's device, of the shapes
    grouped_gemm_fp8_scale_shapes gives). Returns whether the call is the masked layout."""
    import torch

    masked = _check_grouped(a, b, group_offsets, group_counts, op, fp8=True)
    scales = (("a_scale", a_scale), ("b_scale", b_scale))
    for name, t in scales:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    for (name, t), (shape, words) in zip(scales, grouped_gemm_fp8_scale_shapes(a, b, masked)):
        if t.device != a.device:
            raise ValueError(f"{op}: argument '{name}' must be on the device of 'a' ({a.device}), got {t.device}")
        if t.dtype != torch.float32:
            raise TypeError(f"{op}: argument '{name}' must be float32, got {_dtype_name(t.dtype)}")
        if tuple(t.shape) != shape:
            raise ValueError(f"{op}: argument '{name}' must have shape {words}, got {list(t.shape)}")
    checked_fp8_out_dtype(out_dtype, op)
    return masked


def grouped_gemm_bounds(group_offsets, total: int) -> list[tuple[int, int]]:
    """[start, end) of each group's rows as the kernels read group_offsets: every bound
    clamped into [0, total] and each end to at least its start, exactly as
    gks.specs.attention.varlen_bounds reads cu_seqlens (a host copy: for the reference and
    the tests)."""
    import torch

    offsets = group_offsets.to("cpu", torch.int64).tolist()
    bounds = []
    for g in range(len(offsets) - 1):
        lo = min(max(offsets[g], 0), total)
        bounds.append((lo, min(max(offsets[g + 1], lo), total)))
    return bounds


def grouped_gemm_counts(group_counts, rows: int) -> list[int]:
    """Each group's rows as the kernels read group_counts: clamped into [0, rows] (M_max)."""
    import torch

    return [min(max(m, 0), rows) for m in group_counts.to("cpu", torch.int64).tolist()]


def grouped_gemm_shape(a, b, masked: bool) -> tuple[int, int, int, int, int]:
    """The spec shape (G, M, N, K, masked) of a call that check_grouped_gemm takes, which
    keys the tuned tables: M is the masked layout's M_max, the contiguous layout's mean
    rows a group (the bench shapes' groups are full, so T = G M there)."""
    groups, k, n = b.shape
    rows = a.shape[1] if masked else a.shape[0] // max(groups, 1)
    return groups, rows, n, k, int(masked)


def grouped_gemm_owners(bounds, total: int) -> list[int]:
    """The group whose product each of the `total` rows of the contiguous layout holds: the
    last group that contains the row (only non-monotone offsets make groups overlap), -1 for
    a row in no group."""
    owner = [-1] * total
    for g, (lo, hi) in enumerate(bounds):
        owner[lo:hi] = [g] * (hi - lo)
    return owner


def grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    group_offsets: torch.Tensor | None = None,
    group_counts: torch.Tensor | None = None,
    *,
    precise: bool = False,
) -> torch.Tensor:
    """The MoE expert GEMMs, c = a @ b[g] for each group g of a's rows; exactly one of
    group_offsets and group_counts is given (ValueError naming both otherwise).

    Contiguous layout (group_offsets): a [T, K] (tokens sorted by expert), b [G, K, N],
    group_offsets [G + 1] int32 on a's device. Group g is rows [group_offsets[g],
    group_offsets[g + 1]) of a, and c [T, N] has c[rows of g] = a[rows of g] @ b[g]. Every
    bound is clamped into [0, T] and each end to at least its start (as
    gks.specs.attention.varlen_bounds reads cu_seqlens), so no offset can make a kernel read
    or write out of bounds; groups may be empty. The op owns its whole output: a row in no
    group is written as 0, and a row in several groups (only non-monotone offsets give
    overlapping bounds) holds the product of the last of them.

    Masked layout (group_counts): a [G, M_max, K], b [G, K, N], group_counts [G] int32 on
    a's device; c [G, M_max, N] with c[g, :m_g] = a[g, :m_g] @ b[g], m_g =
    clamp(group_counts[g], 0, M_max), and rows past m_g written as 0. For decode under CUDA
    graphs: the counts stay on the device, nothing is sized by their values and nothing
    synchronizes with the host (this reference does, to read them).

    a and b are float16 or bfloat16 of one dtype, each row-major in its last dim (other dims
    may be strided). The kernels accumulate in fp32 and write c in a's dtype; this reference
    computes in fp32 and rounds once to a's dtype, or in float64 throughout with
    precise=True."""
    import torch

    masked = check_grouped_gemm(a, b, group_offsets, group_counts, "gks.reference.grouped_gemm")
    compute = torch.float64 if precise else torch.float32
    out_dtype = torch.float64 if precise else a.dtype
    n = b.shape[2]
    c = torch.zeros((*a.shape[:-1], n), dtype=out_dtype, device=a.device)
    if a.device.type == "meta":  # shapes alone: no groups to read
        return c
    if masked:
        for g, m in enumerate(grouped_gemm_counts(group_counts, a.shape[1])):
            if m:
                c[g, :m] = (a[g, :m].to(compute) @ b[g].to(compute)).to(out_dtype)
        return c
    for g, (lo, hi) in enumerate(grouped_gemm_bounds(group_offsets, a.shape[0])):
        if hi > lo:  # in group order: a later group's rows overwrite an earlier one's
            c[lo:hi] = (a[lo:hi].to(compute) @ b[g].to(compute)).to(out_dtype)
    return c


def grouped_gemm_check(out, ref, dtype, inputs) -> None:
    """Each group's rows against the float64 reference with gemm_check's "mma" bound (fp32
    accumulation on Tensor Cores, one rounding to the dtype), and rows in no group or past
    a group's count exactly 0 (an unwritten row, NaN-poisoned, fails)."""
    a, b = inputs["a"], inputs["b"]
    what = f"grouped_gemm/{dtype}"
    assert out.dtype == a.dtype, f"{what}: dtype {out.dtype} != {a.dtype}"

    def check_group(g, pick, out_rows, ref_rows):
        gemm_check(out_rows, ref_rows, pick(a), b[g], dtype, "mma", f"{what} group {g}")

    check_grouped_rows(out, ref, inputs, what, check_group)


def check_grouped_rows(out, ref, inputs, what: str, check_group) -> None:
    """The grouped ops' check: out's shape, each group's rows handed to check_group(g, pick,
    out_rows, ref_rows), where pick(t) takes the group's rows of a tensor laid out as a
    (a itself, or a_scale), and every row in no group or past a group's count exactly 0."""
    import torch

    a, b = inputs["a"], inputs["b"]
    counts = inputs.get("group_counts")
    shape = (*a.shape[:-1], b.shape[2])
    assert tuple(out.shape) == shape, f"{what}: shape {tuple(out.shape)} != {shape}"
    r = ref.to(out.device)

    def zeros(rows, where):
        if rows.numel() and not bool((rows == 0).all()):
            bad = int((rows != 0).sum())
            raise AssertionError(f"{what}: {where}: {bad} elements are not 0 (first values "
                                 f"{rows[rows != 0][:4].tolist()})")

    if counts is not None:
        for g, m in enumerate(grouped_gemm_counts(counts, a.shape[1])):
            if m:
                check_group(g, lambda t, g=g, m=m: t[g, :m], out[g, :m], r[g, :m])
            zeros(out[g, m:], f"group {g}'s rows past its count {m}")
        return
    owner = torch.tensor(grouped_gemm_owners(grouped_gemm_bounds(inputs["group_offsets"], a.shape[0]),
                                             a.shape[0]), dtype=torch.int64, device=out.device)
    for g in range(b.shape[0]):
        rows = (owner == g).nonzero().squeeze(1)
        if rows.numel():
            on_a = rows.to(a.device)
            check_group(g, lambda t, on_a=on_a: t.index_select(0, on_a.to(t.device)), out.index_select(0, rows),
                        r.index_select(0, rows))
    zeros(out[owner < 0], "rows in no group")


def grouped_gemm_sizes(groups: int, rows: int, gen, full: bool = False) -> list[int]:
    """Rows of each of G groups, at most `rows`: every group full, or (mixed) the first
    full, the second empty (with three or more) and the others uniform in [0, rows] from
    `gen` (a CPU generator)."""
    return [rows] * groups if full else mixed_sizes(groups, rows, gen)


def make_grouped_gemm_inputs(sizes, rows: int, n: int, k: int, dtype: str, device, seed: int,
                             masked: bool) -> dict:
    """A grouped_gemm call with groups of these sizes: contiguous (a [sum(sizes), K] and
    group_offsets, their running sums) or masked (a [G, rows, K], all of it random, the
    rows past each count included, and group_counts = sizes)."""
    import itertools

    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)

    def randn(*size):
        return torch.randn(size, generator=gen, device=device, dtype=torch.float32).to(dt)

    groups = len(sizes)
    if masked:
        return {"a": randn(groups, rows, k), "b": randn(groups, k, n),
                "group_counts": torch.tensor(sizes, dtype=torch.int32, device=device)}
    offsets = [0, *itertools.accumulate(sizes)]
    return {"a": randn(offsets[-1], k), "b": randn(groups, k, n),
            "group_offsets": torch.tensor(offsets, dtype=torch.int32, device=device)}


# Shapes (G, M, N, K, masked). The contract tests run a test shape in the interpreters when
# the product of its dims is at most 2^18, which a contiguous shape's masked = 0 always
# makes it: those stay small. Groups that cross the 32-row tiles of the interpreter's block,
# N and K off every tile size; the masked layout's larger ones run on a GPU only, as do
# tests/gemm/test_grouped_gemm.py's large contiguous ones (DeepSeek-V3's expert shapes).
GROUPED_TEST_SHAPES = (
    (1, 1, 1, 1, 0), (3, 21, 17, 33, 0), (4, 24, 40, 48, 0), (6, 9, 130, 65, 0), (2, 70, 8, 16, 0),
    (1, 1, 1, 1, 1), (3, 20, 17, 33, 1), (4, 33, 40, 40, 1),
    (8, 100, 1000, 520, 1), (16, 48, 2048, 7168, 1), (8, 64, 7168, 2048, 1),
)
# Prefill (contiguous): 32 experts of 512 tokens each (the issue's two projections), then
# the issue's models at 4k tokens routed top-k: DeepSeek-V3 (256 experts of 7168 -> 2048,
# top-8: 128 tokens an expert), Qwen3-MoE (128 of 4096 -> 1536, top-8: 256) and Mixtral (8
# of 4096 -> 14336, top-2: 1024). Decode (masked): 32 experts of up to 64 tokens.
GROUPED_BENCH_SHAPES = (
    (32, 512, 4096, 7168, 0), (32, 512, 7168, 2048, 0),
    (256, 128, 2048, 7168, 0), (128, 256, 1536, 4096, 0), (8, 1024, 14336, 4096, 0),
    (32, 64, 4096, 7168, 1), (32, 64, 7168, 2048, 1),
)


def _grouped_inputs(shape, dtype, device, seed):
    """Groups mixed at the test shapes (grouped_gemm_sizes), every group full at any other
    shape (the bench shapes: flops and bytes_moved count full groups). The contiguous
    layout's sizes follow from the shape alone, so that every input set of a shape has one
    T (a CUDA graph replays on new values of the same sizes); the masked layout's counts,
    which size nothing, from the seed."""
    import torch

    groups, rows, n, k, masked = shape
    full = tuple(shape) not in GROUPED_TEST_SHAPES
    gen = torch.Generator().manual_seed(seed if masked else shape_seed(shape))
    sizes = grouped_gemm_sizes(groups, rows, gen, full)
    return make_grouped_gemm_inputs(sizes, rows, n, k, dtype, device, seed, bool(masked))


def _grouped_flops(shape) -> float:
    """2 sum(m_g) N K with every group full (m_g = M), as at the bench shapes."""
    groups, rows, n, k, _ = shape
    return 2.0 * groups * rows * n * k


def _grouped_bytes(shape, dtype) -> float:
    """a [G M, K] (or [G, M, K]), b [G, K, N] and c [G M, N], every group full; the int32
    offsets or counts left out."""
    groups, rows, n, k, _ = shape
    return ELEM_BYTES[dtype] * (groups * rows * k + groups * k * n + groups * rows * n)


def _host_groups(group_offsets, group_counts, a):
    """The groups' rows on the host (the peers' loop needs them there; a MoE layer that
    loops knows its split on the host already): [(group, rows)] with rows a slice of a's
    first (contiguous) or second (masked) dim, and the contiguous layout's stretches of rows
    in no group."""
    if group_counts is not None:
        return [(g, slice(0, m)) for g, m in enumerate(grouped_gemm_counts(group_counts, a.shape[1]))], []
    total = a.shape[0]
    bounds = grouped_gemm_bounds(group_offsets, total)
    gaps, start = [], None
    for r, g in enumerate(grouped_gemm_owners(bounds, total) + [0]):  # a sentinel row ends the last
        if g < 0 and start is None:
            start = r
        elif g >= 0 and start is not None:
            gaps.append(slice(start, r))
            start = None
    return [(g, slice(lo, hi)) for g, (lo, hi) in enumerate(bounds)], gaps


def _torch_loop():
    """A torch.matmul (cuBLAS) call per group into its rows of c (in group order, so a
    later group's rows win where bounds overlap), the rows in no group zeroed. The groups
    are read to the host on an input set's first call and kept (holding the tensors keeps
    their addresses unique)."""
    import torch

    cached = {}

    def run(a, b, group_offsets=None, group_counts=None, **_):
        groups = group_counts if group_counts is not None else group_offsets
        key = (groups.data_ptr(), a.data_ptr())
        if key not in cached:
            cached[key] = (groups, a, *_host_groups(group_offsets, group_counts, a))
        _, _, parts, gaps = cached[key]
        c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=a.dtype, device=a.device)
        if group_counts is not None:
            for g, rows in parts:
                torch.matmul(a[g, rows], b[g], out=c[g, rows])
                c[g, rows.stop:].zero_()
            return c
        for g, rows in parts:
            if rows.stop > rows.start:
                torch.matmul(a[rows], b[g], out=c[rows])
        for rows in gaps:  # at the bench shapes, none
            c[rows].zero_()
        return c

    return run


def _torch_grouped_mm():
    """torch._grouped_mm (CUTLASS grouped GEMM on sm_90). Contiguous: offs = the groups' end
    rows (group_offsets[1:], its first bound 0). Masked: the 3-D x 3-D batched form, which
    computes all M_max rows of every group (at the bench shapes every group is full)."""
    import torch

    if not hasattr(torch, "_grouped_mm"):
        raise RuntimeError(f"torch {torch.__version__} has no torch._grouped_mm")

    def run(a, b, group_offsets=None, group_counts=None, **_):
        if group_counts is not None:
            return torch._grouped_mm(a, b)
        return torch._grouped_mm(a, b, offs=group_offsets[1:])

    return run


def _grouped_args(t, d, *, masked=False, dtype=None, **change):
    """A valid grouped_gemm call (G = 3, 4 rows a group, N = 5, K = 8) with `change`
    applied (bad_inputs)."""
    dt = dtype or t.float16
    if masked:
        args = {"a": t.randn(3, 4, 8, device=d).to(dt), "b": t.randn(3, 8, 5, device=d).to(dt),
                "group_counts": t.tensor([4, 0, 2], dtype=t.int32, device=d)}
    else:
        args = {"a": t.randn(6, 8, device=d).to(dt), "b": t.randn(3, 8, 5, device=d).to(dt),
                "group_offsets": t.tensor([0, 4, 4, 6], dtype=t.int32, device=d)}
    return {**args, **change}


def _grouped_bad_inputs():
    def offsets(t, d, values, dtype=None):
        return t.tensor(values, dtype=dtype or t.int32, device=d)

    return (
        BadInput("both-layouts", lambda t, d: _grouped_args(t, d, group_counts=offsets(t, d, [4, 0, 2])),
                 ValueError, "exactly one of the arguments 'group_offsets' (the contiguous layout) and "
                             "'group_counts' (the masked layout) must be given, got both"),
        BadInput("neither-layout", lambda t, d: _grouped_args(t, d, group_offsets=None),
                 ValueError, "and 'group_counts' (the masked layout) must be given, got neither"),
        BadInput("a-float32", lambda t, d: _grouped_args(t, d, dtype=t.float32),
                 TypeError, "argument 'a' must be float16 or bfloat16, got float32"),
        BadInput("b-dtype", lambda t, d: _grouped_args(t, d, b=t.randn(3, 8, 5, device=d).bfloat16()),
                 TypeError, "argument 'b' must have the dtype of 'a'"),
        BadInput("a-3d-contiguous", lambda t, d: _grouped_args(t, d, a=t.randn(3, 2, 8, device=d).half()),
                 ValueError, "argument 'a' must be 2-D [T, K]"),
        BadInput("a-2d-masked", lambda t, d: _grouped_args(t, d, masked=True, a=t.randn(6, 8, device=d).half()),
                 ValueError, "argument 'a' must be 3-D [G, M_max, K]"),
        BadInput("b-2d", lambda t, d: _grouped_args(t, d, b=t.randn(8, 5, device=d).half()),
                 ValueError, "argument 'b' must be 3-D [G, K, N]"),
        BadInput("b-inner-dim", lambda t, d: _grouped_args(t, d, b=t.randn(3, 9, 5, device=d).half()),
                 ValueError, "argument 'b' must have shape [G, K, N] with K = 8"),
        BadInput("b-groups-masked", lambda t, d: _grouped_args(t, d, masked=True, b=t.randn(2, 8, 5, device=d).half()),
                 ValueError, "argument 'b' must have shape [G, K, N] with G = 3"),
        BadInput("b-transposed", lambda t, d: _grouped_args(t, d, b=t.randn(3, 5, 8, device=d).half().transpose(1, 2)),
                 ValueError, "argument 'b' must be row-major with a contiguous last dim"),
        BadInput("a-transposed", lambda t, d: _grouped_args(t, d, a=t.randn(8, 6, device=d).half().t()),
                 ValueError, "argument 'a' must be row-major with a contiguous last dim"),
        BadInput("group_offsets-int64", lambda t, d: _grouped_args(t, d, group_offsets=offsets(t, d, [0, 4, 4, 6], t.int64)),
                 TypeError, "argument 'group_offsets' must be int32, got int64"),
        BadInput("group_offsets-length", lambda t, d: _grouped_args(t, d, group_offsets=offsets(t, d, [0, 4, 6])),
                 ValueError, "argument 'group_offsets' must have shape [G + 1] = [4] (G = 3, dim 0 of 'b')"),
        BadInput("group_counts-length", lambda t, d: _grouped_args(t, d, masked=True, group_counts=offsets(t, d, [4, 0])),
                 ValueError, "argument 'group_counts' must have shape [G] = [3] (G = 3, dim 0 of 'b')"),
        BadInput("group_counts-float", lambda t, d: _grouped_args(t, d, masked=True, group_counts=offsets(t, d, [4, 0, 2], t.float32)),
                 TypeError, "argument 'group_counts' must be int32, got float32"),
        BadInput("group_offsets-on-cpu", lambda t, d: _grouped_args(t, d, group_offsets=t.tensor([0, 4, 4, 6], dtype=t.int32)),
                 ValueError, "argument 'group_offsets' must be on the device of 'a'", gpu=True),
        BadInput("group_counts-on-cpu", lambda t, d: _grouped_args(t, d, masked=True, group_counts=t.tensor([4, 0, 2], dtype=t.int32)),
                 ValueError, "argument 'group_counts' must be on the device of 'a'", gpu=True),
    )


GROUPED_GEMM = register(
    OpSpec(
        name="grouped_gemm",
        family="gemm",
        summary="MoE grouped GEMM (fp32 accumulation): contiguous (tokens sorted by expert, group offsets) "
                "or masked (per-group counts on the device, CUDA-graph safe); empty groups allowed",
        signature="grouped_gemm(a[T, K] | a[G, M_max, K], b[G, K, N], group_offsets=None ([G + 1] int32), "
                  "group_counts=None ([G] int32)) -> c[T, N] | c[G, M_max, N] (a's dtype)",
        shape_names=("G", "M", "N", "K", "masked"),
        bucket_exact=("masked",),
        dtypes=("float16", "bfloat16"),
        make_inputs=_grouped_inputs,
        reference=grouped_gemm,
        # Nominal (atol, rtol); `check` applies gemm_check's K-aware bound group by group.
        tolerance={"float16": (1e-3, 2e-3), "bfloat16": (1e-2, 8e-3)},
        flops=_grouped_flops,
        bytes_moved=_grouped_bytes,
        backends=(Backend("cuda", archs=("sm_90a",), tunable=True),
                  Backend("triton", archs=("sm_80", "sm_90"), interpreted=True)),
        test_shapes=GROUPED_TEST_SHAPES,
        bench_shapes=GROUPED_BENCH_SHAPES,
        peers=(Peer("torch.matmul per group (cuBLAS)", _torch_loop),
               Peer("torch._grouped_mm", _torch_grouped_mm)),
        compute="tensor",
        check=grouped_gemm_check,
        example_shape=(4, 24, 40, 48, 0),
        bad_inputs=_grouped_bad_inputs(),
        outputs=("c",),
        cuda_out=lambda cuda, i, o, **kw: cuda.grouped_gemm_out(i["a"], i["b"], i.get("group_offsets"),
                                                               i.get("group_counts"), o[0], **kw),
        # The Hopper GEMM with the grouped schedule, and the packing of operands TMA cannot
        # read in place.
        sass_kernels=(r"sm90::gemm_kernel<.*HalfOperands<.*GroupedScheduler<", r"pack_rows_kernel<unsigned short>"),
    )
)


# ---- gemm_fp8: fp8 x fp8 with fp32 accumulation and fp32 scales (issue 32).
#
# Shapes (M, N, K, scaling, kmajor, e5m2): scaling indexes GEMM_FP8_SCALINGS (0 tensor, 1
# row, 2 block); kmajor 1 when b is the K-major view w.t() of a row-major [N, K] weight w (an
# nn.Linear weight: the layout cuBLASLt and the bench take), 0 for a row-major [K, N] b; e5m2
# 1 for float8_e5m2 operands, 0 for float8_e4m3fn. The spec's dtype is the output dtype.

GEMM_FP8_SCALINGS = ("tensor", "row", "block")
GEMM_FP8_K_MULTIPLE = 16  # 16 bytes of K: the row alignment a TMA load of an fp8 tile needs
# quantize_fp8's granularity for a, and for the weight w [N, K] of b = w.t(), per scaling.
GEMM_FP8_GRANULARITY = {"tensor": ("tensor", "tensor"), "row": ("token", "token"), "block": ("group", "block")}
FP8_E5M2_MAX = 57344.0  # = 448 * 128: an e5m2 scale is the e4m3 one over 128, exactly


def gemm_fp8_scale_shapes(m: int, n: int, k: int, scaling: str) -> tuple:
    """For a_scale, then b_scale, of an [M, K] @ [K, N] call with this scaling: (the shapes
    it may have, what check_gemm_fp8 says it must have). The wording is the library's."""
    if scaling == "tensor":
        one = "one element (shape [] or [1]) for scaling 'tensor'"
        return (((), (1,)), one), (((), (1,)), one)
    if scaling == "row":
        return ((((m, 1), (m,)), f"shape [M, 1] or [M] with M = {m}"),
                (((1, n), (n,)), f"shape [1, N] or [N] with N = {n}"))
    groups, blocks = -(-k // 128), -(-n // 128)
    return ((((m, groups),), f"shape [M, ceil(K / 128)] = [{m}, {groups}] for scaling 'block'"),
            (((groups, blocks),), f"shape [ceil(K / 128), ceil(N / 128)] = [{groups}, {blocks}] for scaling 'block'"))


def checked_fp8_out_dtype(out_dtype, op: str):
    """out_dtype if gemm_fp8 writes it (bfloat16, float16 or float32: a torch dtype, or a
    NumPy / JAX one for gks.jax), else the TypeError every backend raises."""
    if str(out_dtype).removeprefix("torch.") not in ("bfloat16", "float16", "float32"):
        raise TypeError(f"{op}: argument 'out_dtype' must be torch.bfloat16, torch.float16 or torch.float32, "
                        f"got {out_dtype}")
    return out_dtype


def check_gemm_fp8(a, b, a_scale, b_scale, scaling, out_dtype, op: str) -> tuple[int, int, int, int, int, int]:
    """Refuses a bad gemm_fp8 call with the error every backend (and the reference) raises:
    TypeError or ValueError naming the argument and what was expected. Returns the call's
    spec shape (gemm_fp8_shape)."""
    import torch

    tensors = (("a", a), ("b", b), ("a_scale", a_scale), ("b_scale", b_scale))
    for name, t in tensors:
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{op}: argument '{name}' must be a torch.Tensor, got {type(t).__name__}")
    for name, t in tensors[1:]:
        if t.device != a.device:
            raise ValueError(f"{op}: argument '{name}' must be on the device of 'a' ({a.device}), got {t.device}")
    if a.dtype not in (torch.float8_e4m3fn, torch.float8_e5m2):
        raise TypeError(f"{op}: argument 'a' must be float8_e4m3fn or float8_e5m2, got {a.dtype}")
    if b.dtype != a.dtype:
        raise TypeError(f"{op}: argument 'b' must have the dtype of 'a' ({a.dtype}), got {b.dtype}")
    for name, t in tensors[:2]:
        if t.dim() != 2:
            raise ValueError(f"{op}: argument '{name}' must be a 2-D matrix, got {t.dim()} dims "
                             f"(shape {list(t.shape)})")
    m, k = a.shape
    n = b.shape[1]
    if b.shape[0] != k:
        raise ValueError(f"{op}: argument 'b' must have shape [K, N] with K = {k} (the columns of 'a', "
                         f"{list(a.shape)}), got {list(b.shape)}")
    if k % GEMM_FP8_K_MULTIPLE:
        raise ValueError(f"{op}: K (the columns of argument 'a') must be a multiple of {GEMM_FP8_K_MULTIPLE}, "
                         f"got {k}")
    if k > 1 and a.stride(1) != 1:
        raise ValueError(f"{op}: argument 'a' must be row-major with a contiguous last dim (stride(1) == 1), "
                         f"got strides {tuple(a.stride())}")
    if not (n <= 1 or b.stride(1) == 1 or k <= 1 or b.stride(0) == 1):
        raise ValueError(f"{op}: argument 'b' must be row-major (stride(1) == 1) or K-major (stride(0) == 1: "
                         f"the view w.t() of a row-major [N, K] w), got strides {tuple(b.stride())}")
    if scaling not in GEMM_FP8_SCALINGS:
        raise ValueError(f"{op}: argument 'scaling' must be 'tensor', 'row' or 'block', got {scaling!r}")
    checked_fp8_out_dtype(out_dtype, op)
    for (name, t), (shapes, want) in zip(tensors[2:], gemm_fp8_scale_shapes(m, n, k, scaling)):
        if t.dtype != torch.float32:
            raise TypeError(f"{op}: argument '{name}' must be float32, got {t.dtype}")
        if tuple(t.shape) not in shapes:
            raise ValueError(f"{op}: argument '{name}' must have {want}, got {list(t.shape)}")
    return gemm_fp8_shape(a, b, scaling)


def gemm_fp8_shape(a, b, scaling: str) -> tuple[int, int, int, int, int, int]:
    """The spec shape (M, N, K, scaling, kmajor, e5m2) of a call that check_gemm_fp8 takes:
    what keys the tuned tables (kmajor 1 where b is not row-major)."""
    import torch

    m, k = a.shape
    n = b.shape[1]
    kmajor = int(n > 1 and b.stride(1) != 1)
    return m, n, k, GEMM_FP8_SCALINGS.index(scaling), kmajor, int(a.dtype == torch.float8_e5m2)


def gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    scaling: str = "tensor",
    out_dtype: torch.dtype | None = None,
    *,
    bias: torch.Tensor | None = None,
    gated: str | None = None,
    precise: bool = False,
) -> torch.Tensor:
    """c [M, N] = the product of fp8 a [M, K] and b [K, N] with fp32 scales, in out_dtype.

    a and b: both torch.float8_e4m3fn or both torch.float8_e5m2. a row-major (stride(1) ==
    1, any leading dim); b row-major [K, N] or K-major, the view b = w.t() of a row-major
    [N, K] w (stride(0) == 1): both are taken and give the same result. K must be a
    multiple of 16 (ValueError naming 'a'); M or N may be 0 (an empty c), and K = 0 gives
    c = 0 whatever the scales. Products accumulate in fp32; out_dtype is torch.bfloat16 (the
    default, also for None here), torch.float16 or torch.float32.

    scaling (a_scale and b_scale fp32, any strides):
      "tensor"  a_scale and b_scale of one element each, shape [] or [1];
                c = (a . b) * a_scale * b_scale.
      "row"     a_scale [M] or [M, 1], b_scale [N] or [1, N];
                c[m, n] = (a . b)[m, n] * a_scale[m] * b_scale[n].
      "block"   DeepSeek-V3's (DeepGEMM's): a_scale [M, ceil(K / 128)], one per row and
                128 of K, as gks.quantize_fp8(x, "group") returns it with a;
                b_scale [ceil(K / 128), ceil(N / 128)], one per 128 x 128 block of b [K, N],
                as gks.quantize_fp8(x, "block") returns it for the [K, N] matrix x (for a
                weight w [N, K] quantized with "block": b = w_q.t() and b_scale =
                w_scale.t(), the same blocks);
                c[m, n] = sum over k-groups g of (sum_{k in g} a[m, k] b[k, n])
                          * a_scale[m, g] * b_scale[g, n // 128],
                each 128-wide group's product promoted to fp32 and scaled before it is
                added; the last group and block may be partial.

    bias and gated: gemm's fused epilogue on the scaled product (apply_epilogue; bias [N]
    added, then with gated c [M, N / 2] = act(y[:, 2j]) * y[:, 2j + 1]). The per-row and
    per-column scales are scaling "row"'s.

    Bad input raises TypeError or ValueError naming the argument (check_gemm_fp8), the same
    in every backend. The default result computes in fp32 (each group's product, then its
    scales) and rounds once to out_dtype; precise=True computes and returns float64."""
    import torch

    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    m, n, k, *_ = check_gemm_fp8(a, b, a_scale, b_scale, scaling, out_dtype, "gks.reference.gemm_fp8")
    check_epilogue(m, n, bias, None, None, gated, a.device, "gks.reference.gemm_fp8")
    compute = torch.float64 if precise else torch.float32
    c = torch.zeros((m, n), dtype=compute, device=a.device)
    sa, sb = a_scale.to(compute), b_scale.to(compute)
    if k and scaling != "block":
        rows, cols = (1, 1) if scaling == "tensor" else (m, n)
        c = (a.to(compute) @ b.to(compute)) * sa.reshape(rows, 1) * sb.reshape(1, cols)
    elif k:
        column_scales = sb.repeat_interleave(128, dim=1)[:, :n]  # [groups, N]
        for g in range(sa.shape[1]):
            ks = slice(128 * g, min(k, 128 * (g + 1)))
            c += (a[:, ks].to(compute) @ b[ks].to(compute)) * sa[:, g:g + 1] * column_scales[g]
    c = apply_epilogue(c, bias, gated=gated)
    return c if precise else c.to(out_dtype)


def gemm_fp8_dequantized(a, b, a_scale, b_scale, scaling: str):
    """(a, b) dequantized in float64: each element times its scale, the scales expanded by
    quantize_fp8's rule for a and for b.t(), the weight [N, K] (GEMM_FP8_GRANULARITY). Their
    product is c for finite scales; the check sizes its bound with their magnitudes."""
    from gks.specs.quantize import fp8_expand_scale

    m, k = a.shape
    n = b.shape[1]
    sa, sb = a_scale.double(), b_scale.double()
    if scaling == "row":
        sa, sb = sa.reshape(m, 1), sb.reshape(n, 1)
    elif scaling == "block":
        sb = sb.t()
    for_a, for_w = GEMM_FP8_GRANULARITY[scaling]
    deq_a = a.double() * fp8_expand_scale(sa, (m, k), for_a)
    deq_w = b.t().double() * fp8_expand_scale(sb, (n, k), for_w)
    return deq_a, deq_w.t()


def quantize_fp8_as(x, granularity: str, dtype):
    """(q, scale) of x by quantize_fp8's rule (scale = absmax / the fp8 type's largest value
    per group; an all-zero group gives q = 0 and scale 0) in float8_e4m3fn (gks.reference.
    quantize_fp8 itself) or float8_e5m2 (its scales / 128, q = e5m2(x / scale))."""
    import torch

    from gks.specs.quantize import fp8_expand_scale, quantize_fp8

    q, scale = quantize_fp8(x, granularity)
    if dtype == torch.float8_e4m3fn:
        return q, scale
    scale = scale / 128.0
    s = fp8_expand_scale(scale, x.shape, granularity)
    v = torch.where(s == 0, torch.zeros_like(s), x.float() / s).clamp(-FP8_E5M2_MAX, FP8_E5M2_MAX)
    return v.to(torch.float8_e5m2), scale


def _magnitudes(rows: int, k: int, gen, device):
    """2^e for e uniform in [-3, 3], one per row and 128 of K: scales that differ from row to
    row and group to group, so that a kernel taking the wrong one fails."""
    import torch

    e = torch.randint(-3, 4, (rows, -(-k // 128)), generator=gen, device=device).float()
    return torch.exp2(e).repeat_interleave(128, dim=1)[:, :k]


def _gemm_fp8_inputs(shape, dtype, device, seed):
    """a and b quantized afresh from random data by quantize_fp8's rule for the shape's
    scaling (GEMM_FP8_GRANULARITY: b as its weight w [N, K]), so the scales are the ones a
    model would have; with room for it, a's row 1 starts with an all-zero group (scale 0)."""
    import torch

    m, n, k, code, kmajor, e5m2 = shape[:6]
    scaling = GEMM_FP8_SCALINGS[code]
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((m, k), generator=gen, device=device) * _magnitudes(m, k, gen, device)
    w = torch.randn((n, k), generator=gen, device=device) * _magnitudes(n, k, gen, device)
    if len(shape) > 6 and epilogue_parts(shape[6])[2] is not None:
        w = w / (8 * math.sqrt(max(k, 1)))  # gate x up inside float16 (the magnitudes reach 8)
    if m >= 3 and k >= 128:
        x[1, :128] = 0
    fp8 = torch.float8_e5m2 if e5m2 else torch.float8_e4m3fn
    for_a, for_w = GEMM_FP8_GRANULARITY[scaling]
    a, a_scale = quantize_fp8_as(x, for_a, fp8)
    w_q, w_scale = quantize_fp8_as(w, for_w, fp8)
    b, b_scale = w_q.t(), w_scale.t()
    if not kmajor:
        b, b_scale = b.contiguous(), b_scale.contiguous()
    epilogue = {}
    if len(shape) > 6:  # its epilogue: a float32 bias, no scales (scaling "row"'s are)
        assert not epilogue_parts(shape[6])[1], f"gemm_fp8 shape {shape}: no epilogue scales"
        epilogue = epilogue_inputs(shape[6], m, n, torch.float32, gen, device)
    return {"a": a, "b": b, "a_scale": a_scale, "b_scale": b_scale, "scaling": scaling,
            "out_dtype": getattr(torch, dtype), **epilogue}


def _gemm_fp8_check(out, ref, dtype, inputs) -> None:
    """Element-wise against the float64 reference with gemm_check's "fp8" bound, sized by the
    dequantized operands (gemm_fp8_dequantized); non-finite where the reference is."""
    import torch

    deq_a, deq_b = gemm_fp8_dequantized(inputs["a"], inputs["b"], inputs["a_scale"], inputs["b_scale"],
                                        inputs["scaling"])
    out_dtype = str(inputs.get("out_dtype", torch.bfloat16)).removeprefix("torch.")
    gemm_check(out, ref, deq_a, deq_b, out_dtype, "fp8", f"gemm_fp8/{inputs['scaling']}/{out_dtype}",
               epilogue=inputs)


def _gemm_fp8_scale_count(shape) -> int:
    m, n, k, code = shape[:4]
    if code == 0:
        return 2
    if code == 1:
        return m + n
    groups = -(-k // 128)
    return groups * (m + -(-n // 128))


def _gemm_fp8_bytes(shape, dtype) -> float:
    """a and b (a byte an element), c in the output dtype, the fp32 scales."""
    m, n, k = shape[:3]
    return m * k + k * n + _OUT_BYTES[dtype] * m * n + 4.0 * _gemm_fp8_scale_count(shape)


def _scaled_mm():
    """torch._scaled_mm (cuBLASLt) with per-tensor or row-wise scales (a_scale [M, 1], b_scale
    [1, N]), b K-major as cuBLASLt takes it; not block scaling (the next peer's)."""
    import torch

    def run(a, b, a_scale, b_scale, scaling="tensor", out_dtype=torch.bfloat16, **_):
        if scaling == "block":
            raise NotImplementedError("torch._scaled_mm's tensor and row-wise forms: see the blockwise peer")
        if b.stride(0) != 1 or a.dtype == torch.float8_e5m2:
            raise NotImplementedError("cuBLASLt takes b K-major (w.t()), and no e5m2 x e5m2 product")
        if scaling == "tensor":
            return torch._scaled_mm(a, b, a_scale.reshape(()), b_scale.reshape(()), out_dtype=out_dtype)
        return torch._scaled_mm(a, b, a_scale.reshape(-1, 1), b_scale.reshape(1, -1), out_dtype=out_dtype)

    return run


def _scaled_mm_blockwise():
    """torch.nn.functional.scaled_mm with DeepSeek's recipe (BlockWise1x128 for a,
    BlockWise128x128 for b: cuBLASLt 12.9+, sm_90 only). cuBLASLt wants the scales in its own
    layouts (a's M-major, b's blocks K-major with K / 128 padded to a multiple of 4), made once
    per input set on its first call, outside the timed calls. K and N must be multiples of
    128 and the operands e4m3, b K-major."""
    import torch
    from torch.nn.functional import ScalingType, scaled_mm

    layouts = {}

    def run(a, b, a_scale, b_scale, scaling="tensor", out_dtype=torch.bfloat16, **_):
        m, k = a.shape
        n = b.shape[1]
        if scaling != "block" or k % 128 or n % 128 or a.dtype != torch.float8_e4m3fn or b.stride(0) != 1:
            raise NotImplementedError("cuBLASLt's blockwise fp8 GEMM: block scaling, e4m3, b K-major, "
                                      "K and N multiples of 128")
        key = (a_scale.data_ptr(), b_scale.data_ptr(), m, n, k)
        if key not in layouts:
            groups = k // 128
            padded = torch.zeros((n // 128, -(-groups // 4) * 4), dtype=torch.float32, device=b.device)
            padded[:, :groups] = b_scale.t()
            # holding the scales keeps their addresses unique
            layouts[key] = (a_scale, b_scale, a_scale.t().contiguous().t(), padded.t())
        sa, sb = layouts[key][2:]
        return scaled_mm(a, b, sa, ScalingType.BlockWise1x128, sb, ScalingType.BlockWise128x128,
                         output_dtype=out_dtype)

    return run


def _gemm_fp8_args(t, d, block=False, **change):
    """A valid gemm_fp8 call of 4 x 5 x 256 (tensor scaling, or block with block=True) with
    `change` applied (bad_inputs)."""
    fp8 = t.float8_e4m3fn
    args = {"a": t.zeros(4, 256, device=d, dtype=fp8), "b": t.zeros(256, 5, device=d, dtype=fp8),
            "a_scale": t.ones(4, 2, device=d) if block else t.ones(1, device=d),
            "b_scale": t.ones(2, 1, device=d) if block else t.ones(1, device=d),
            "scaling": "block" if block else "tensor"}
    return {**args, **change}


def _gemm_fp8_bad_inputs():
    def fp8(t, d, *size, dtype=None):
        return t.zeros(*size, device=d, dtype=dtype or t.float8_e4m3fn)

    def bad(id_, error, message, block=False, **change):
        return BadInput(id_, lambda t, d: _gemm_fp8_args(t, d, block, **{k: v(t, d) for k, v in change.items()}),
                        error, message)

    return (
        bad("a-bfloat16", TypeError, "argument 'a' must be float8_e4m3fn or float8_e5m2",
            a=lambda t, d: t.zeros(4, 256, device=d, dtype=t.bfloat16)),
        bad("b-int8", TypeError, "argument 'b' must have the dtype of 'a'",
            b=lambda t, d: t.zeros(256, 5, device=d, dtype=t.int8)),
        bad("b-e5m2", TypeError, "argument 'b' must have the dtype of 'a'",
            b=lambda t, d: fp8(t, d, 256, 5, dtype=t.float8_e5m2)),
        bad("a-3d", ValueError, "argument 'a' must be a 2-D matrix, got 3 dims",
            a=lambda t, d: fp8(t, d, 2, 4, 256)),
        bad("b-inner-dim", ValueError, "argument 'b' must have shape [K, N] with K = 256",
            b=lambda t, d: fp8(t, d, 128, 5)),
        bad("k-not-16", ValueError, "K (the columns of argument 'a') must be a multiple of 16, got 40",
            a=lambda t, d: fp8(t, d, 4, 40), b=lambda t, d: fp8(t, d, 40, 5)),
        bad("a-transposed", ValueError, "argument 'a' must be row-major",
            a=lambda t, d: fp8(t, d, 256, 4).t()),
        bad("b-strided", ValueError, "argument 'b' must be row-major", b=lambda t, d: fp8(t, d, 256, 10)[:, ::2]),
        bad("scaling-unknown", ValueError, "argument 'scaling' must be 'tensor', 'row' or 'block', got 'column'",
            scaling=lambda t, d: "column"),
        bad("out_dtype-int8", TypeError, "argument 'out_dtype' must be torch.bfloat16, torch.float16 or "
                                         "torch.float32", out_dtype=lambda t, d: t.int8),
        bad("a_scale-half", TypeError, "argument 'a_scale' must be float32",
            a_scale=lambda t, d: t.ones(1, device=d, dtype=t.float16)),
        bad("a_scale-tensor-shape", ValueError, "argument 'a_scale' must have one element (shape [] or [1]) for "
                                                "scaling 'tensor', got [4, 1]",
            a_scale=lambda t, d: t.ones(4, 1, device=d)),
        bad("a_scale-row-shape", ValueError, "argument 'a_scale' must have shape [M, 1] or [M] with M = 4, "
                                             "got [1, 4]",
            scaling=lambda t, d: "row", a_scale=lambda t, d: t.ones(1, 4, device=d),
            b_scale=lambda t, d: t.ones(5, device=d)),
        bad("b_scale-row-shape", ValueError, "argument 'b_scale' must have shape [1, N] or [N] with N = 5, "
                                             "got [5, 1]",
            scaling=lambda t, d: "row", a_scale=lambda t, d: t.ones(4, device=d),
            b_scale=lambda t, d: t.ones(5, 1, device=d)),
        bad("a_scale-block-shape", ValueError, "argument 'a_scale' must have shape [M, ceil(K / 128)] = [4, 2] "
                                               "for scaling 'block', got [4, 1]",
            block=True, a_scale=lambda t, d: t.ones(4, 1, device=d)),
        bad("b_scale-block-shape", ValueError, "argument 'b_scale' must have shape [ceil(K / 128), "
                                               "ceil(N / 128)] = [2, 1] for scaling 'block', got [2, 2]",
            block=True, b_scale=lambda t, d: t.ones(2, 2, device=d)),
        BadInput("b_scale-on-cpu", lambda t, d: _gemm_fp8_args(t, d, b_scale=t.ones(1)), ValueError,
                 "argument 'b_scale' must be on the device of 'a'", gpu=True),
    ) + _epilogue_bad_inputs(_gemm_fp8_args, scales=False)


# 1x1x16, M = 1 with K = 144 (the last 128-group 16 wide), N = 1, primes with K = 16, N =
# 131 (a partial 128-block of b), four groups with N past one block, K = 0 (c = 0), M or N
# = 0; in each scaling with b K-major and e4m3, then b row-major and e5m2 operands. The
# interpreters run every shape whose dims multiply to at most 2^18, so every one with a
# flag 0: these stay small. The last two run on a GPU only.
_GEMM_FP8_BASE = ((1, 1, 16), (1, 37, 144), (7, 1, 32), (31, 67, 16), (67, 131, 144), (33, 200, 400),
                  (64, 64, 0), (0, 16, 32), (5, 0, 16))
GEMM_FP8_TEST_SHAPES = (
    tuple((m, n, k, s, 1, 0) for s in range(3) for m, n, k in _GEMM_FP8_BASE)
    + tuple((67, 131, 144, s, 0, 0) for s in range(3))
    + tuple(shape for s in range(3) for shape in ((31, 67, 16, s, 0, 1), (5, 131, 144, s, 1, 1)))
    + ((257, 520, 1040, 1, 1, 1), (130, 260, 528, 2, 1, 1))
    # The fused epilogue (bias 1, gated activation 4 (act + 1)): each scaling, both layouts,
    # every activation, K = 0 (c = the epilogue of 0), then split-K's reduction (GPU only).
    + ((31, 66, 144, 0, 1, 0, 5), (33, 200, 400, 1, 0, 0, 1), (67, 130, 144, 2, 1, 0, 13),
       (1, 38, 144, 2, 0, 0, 8), (8, 24, 0, 1, 1, 0, 5), (16, 264, 4096, 2, 1, 0, 5))
)
# The issue's: squares in every scaling, then M in {128, 4096} x (N, K) of the LLM
# projections in row and block scaling; b K-major, e4m3.
GEMM_FP8_BENCH_SHAPES = (
    tuple((s, s, s, code, 1, 0) for code in range(3) for s in (4096, 6144, 8192))
    + tuple((m, n, k, code, 1, 0) for code in (1, 2) for m in (128, 4096)
            for n, k in ((7168, 16384), (4096, 7168), (28672, 4096)))
    # The fused epilogue on the gate/up projection (SwiGLU, with a bias), as gemm's.
    + tuple((m, 28672, 4096, code, 1, 0, epi) for code in (1, 2) for m in (128, 4096) for epi in (4, 5))
)

GEMM_FP8 = register(
    OpSpec(
        name="gemm_fp8",
        family="gemm",
        summary="fp8 GEMM (e4m3 or e5m2, fp32 accumulation) with fp32 scales per tensor, per row and column, "
                "or per 1x128 group of a and 128x128 block of b (DeepSeek-V3); fused bias and SwiGLU / GeGLU",
        signature="gemm_fp8(a[M, K] fp8, b[K, N] fp8 (row-major or K-major), a_scale, b_scale (fp32, per "
                  "scaling), scaling='tensor', out_dtype=bfloat16, config=-1, *, bias=None, gated=None) "
                  "-> c[M, N, or N / 2 gated] (out_dtype)",
        shape_names=("M", "N", "K", "scaling", "kmajor", "e5m2", "epilogue"),
        optional_dims={"epilogue": 0},  # epilogue_code (bias, gated; no scales); none unless given
        bucket_exact=("scaling", "kmajor", "e5m2", "epilogue"),
        dtypes=("bfloat16", "float16", "float32"),  # the output dtype
        make_inputs=_gemm_fp8_inputs,
        reference=gemm_fp8,
        # Nominal (atol, rtol); `check` applies gemm_check's K-aware "fp8" bound instead.
        tolerance={"bfloat16": (1e-2, 8e-3), "float16": (1e-3, 2e-3), "float32": (1e-4, 1e-4)},
        flops=lambda s: 2.0 * s[0] * s[1] * s[2],
        bytes_moved=_gemm_fp8_bytes,
        # CUDA: the Hopper GEMM's fp8 operands (sm_90a only: no fp8 Tensor Cores before it).
        backends=(Backend("cuda", archs=("sm_90a",), tunable=True),
                  Backend("triton", archs=("sm_90",), interpreted=True, tunable=True)),
        test_shapes=GEMM_FP8_TEST_SHAPES,
        bench_shapes=GEMM_FP8_BENCH_SHAPES,
        peers=(Peer("torch._scaled_mm (cuBLASLt) + torch epilogue", lambda: _torch_epilogue(_scaled_mm(), False)),
               Peer("F.scaled_mm blockwise (cuBLASLt) + torch epilogue",
                    lambda: _torch_epilogue(_scaled_mm_blockwise(), False)),
               Peer("torch._scaled_mm (cuBLASLt) + compiled epilogue", lambda: _torch_epilogue(_scaled_mm(), True)),
               Peer("F.scaled_mm blockwise (cuBLASLt) + compiled epilogue",
                    lambda: _torch_epilogue(_scaled_mm_blockwise(), True))),
        compute="fp8",
        check=_gemm_fp8_check,
        example_shape=(67, 131, 144, 2, 1, 0),
        bad_inputs=_gemm_fp8_bad_inputs(),
        outputs=("c",),
        cuda_out=lambda cuda, i, o, **kw: cuda.gemm_fp8_out(i["a"], i["b"], i["a_scale"], i["b_scale"], o[0],
                                                           i["scaling"], **kw, **epilogue_args(i)),
        # The Hopper GEMM's fp8 instantiations (its byte transpose is int8_gemm's).
        sass_kernels=(
            # (The grouped schedule's instantiations are grouped_gemm_fp8's.)
            r"sm90::gemm_kernel<gks::kernels::gemm::sm90::Mainloop<gks::kernels::gemm::sm90::ByteOperands<__nv_fp8_e"
            r"(?!.*GroupedScheduler<)",
            r"sm90::split_k_reduce_kernel<gks::kernels::gemm::sm90::ByteOperands<__nv_fp8_e",
        ),
    )
)


# ---- grouped_gemm_fp8: grouped_gemm's product (both layouts, the same group semantics) of
# e4m3 operands with DeepSeek-V3's block scales, as gemm_fp8's "block" scaling does it a group
# at a time. Shapes (G, M, N, K, masked) as grouped_gemm's; the spec's dtype is the output's.


def grouped_gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    group_offsets: torch.Tensor | None = None,
    group_counts: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    *,
    precise: bool = False,
) -> torch.Tensor:
    """The MoE expert GEMMs of fp8 operands with block scales: for each group g of a's rows
    (grouped_gemm's two layouts and group semantics, exactly), c[rows of g] =
    gemm_fp8(a[rows of g], b[g], a_scale[rows of g], b_scale[g], "block").

    a float8_e4m3fn [T, K] (contiguous, group_offsets [G + 1] int32) or [G, M_max, K]
    (masked, group_counts [G] int32), row-major in its last dim; b float8_e4m3fn [G, K, N],
    row-major (stride(2) == 1) or K-major (stride(1) == 1: b = w.transpose(1, 2) for the
    [G, N, K] expert weights w); K a multiple of 16. a_scale float32 [T, ceil(K / 128)] or
    [G, M_max, ceil(K / 128)] (one per row and 128 of K, as gks.quantize_fp8(x, "group")
    gives it); b_scale float32 [G, ceil(K / 128), ceil(N / 128)] (one per 128 x 128 block of
    b[g], i.e. w_scale.transpose(1, 2) for w quantized with "block" a group at a time); any
    strides. Each 128-wide group of K's product is promoted to fp32 and scaled before it is
    added (gemm_fp8). c [T, N] or [G, M_max, N] in out_dtype (bfloat16, the default, float16
    or float32), 0 in every row outside the groups.

    Bad input raises TypeError or ValueError naming the argument (check_grouped_gemm_fp8),
    the same in every backend. The default result computes in fp32 and rounds once to
    out_dtype; precise=True computes and returns float64."""
    import torch

    out_dtype = torch.bfloat16 if out_dtype is None else out_dtype
    op = "gks.reference.grouped_gemm_fp8"
    masked = check_grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, out_dtype, op)
    result = torch.float64 if precise else out_dtype
    c = torch.zeros((*a.shape[:-1], b.shape[2]), dtype=result, device=a.device)
    if a.device.type == "meta":  # shapes alone: no groups to read
        return c

    def product(g, rows_a, rows_scale):
        return gemm_fp8(rows_a, b[g], rows_scale, b_scale[g], "block", out_dtype, precise=precise)

    if masked:
        for g, m in enumerate(grouped_gemm_counts(group_counts, a.shape[1])):
            if m:
                c[g, :m] = product(g, a[g, :m], a_scale[g, :m])
        return c
    for g, (lo, hi) in enumerate(grouped_gemm_bounds(group_offsets, a.shape[0])):
        if hi > lo:  # in group order: a later group's rows overwrite an earlier one's
            c[lo:hi] = product(g, a[lo:hi], a_scale[lo:hi])
    return c


def _grouped_fp8_check(out, ref, dtype, inputs) -> None:
    """grouped_gemm_check's walk with gemm_fp8's check a group at a time: the "fp8" bound
    sized by the group's dequantized operands, rows outside the groups exactly 0."""
    import torch

    a, b, sa, sb = inputs["a"], inputs["b"], inputs["a_scale"], inputs["b_scale"]
    out_dtype = str(inputs.get("out_dtype", torch.bfloat16)).removeprefix("torch.")
    what = f"grouped_gemm_fp8/{out_dtype}"
    assert out.dtype == getattr(torch, out_dtype), f"{what}: dtype {out.dtype} != {out_dtype}"

    def check_group(g, pick, out_rows, ref_rows):
        deq_a, deq_b = gemm_fp8_dequantized(pick(a), b[g], pick(sa), sb[g], "block")
        gemm_check(out_rows, ref_rows, deq_a, deq_b, out_dtype, "fp8", f"{what} group {g}")

    check_grouped_rows(out, ref, inputs, what, check_group)


def make_grouped_gemm_fp8_inputs(sizes, rows: int, n: int, k: int, out_dtype: str, device, seed: int,
                                 masked: bool, k_major: bool = True) -> dict:
    """A grouped_gemm_fp8 call with groups of these sizes (make_grouped_gemm_inputs' layouts):
    a quantized afresh by quantize_fp8's "group" rule, each expert's weight w[g] [N, K] by
    its "block" rule, with scales that differ from row to row and group to group; b =
    w.transpose(1, 2) (K-major, the weights read in place) or, k_major=False, its row-major
    copy."""
    import itertools

    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    groups = len(sizes)
    total = groups * rows if masked else sum(sizes)
    x = torch.randn((total, k), generator=gen, device=device) * _magnitudes(total, k, gen, device)
    a, a_scale = quantize_fp8_as(x, "group", torch.float8_e4m3fn)
    w_q, w_scale = [], []
    for _ in range(groups):
        w = torch.randn((n, k), generator=gen, device=device) * _magnitudes(n, k, gen, device)
        q, s = quantize_fp8_as(w, "block", torch.float8_e4m3fn)
        w_q.append(q)
        w_scale.append(s)
    b = torch.stack(w_q).transpose(1, 2) if groups else torch.empty((0, k, n), dtype=a.dtype, device=device)
    b_scale = torch.stack(w_scale).transpose(1, 2) if groups else \
        torch.empty((0, -(-k // 128), -(-n // 128)), device=device)
    if not k_major:
        b = b.contiguous()
    args = {"b": b, "b_scale": b_scale, "out_dtype": getattr(torch, out_dtype)}
    if masked:
        return {**args, "a": a.reshape(groups, rows, k), "a_scale": a_scale.reshape(groups, rows, a_scale.shape[1]),
                "group_counts": torch.tensor(sizes, dtype=torch.int32, device=device)}
    offsets = [0, *itertools.accumulate(sizes)]
    return {**args, "a": a, "a_scale": a_scale,
            "group_offsets": torch.tensor(offsets, dtype=torch.int32, device=device)}


# grouped_gemm's test shapes with K a multiple of 16: groups across the interpreter's tiles,
# N past one 128-block of b_scale and K past one 128-group of a_scale; the larger masked ones
# (and tests/gemm/test_grouped_gemm.py's large contiguous ones) on a GPU only.
GROUPED_FP8_TEST_SHAPES = (
    (1, 1, 1, 16, 0), (3, 21, 17, 48, 0), (4, 24, 40, 144, 0), (6, 9, 130, 160, 0), (2, 70, 8, 16, 0),
    (1, 1, 1, 16, 1), (3, 20, 17, 144, 1), (4, 33, 40, 32, 1),
    (8, 100, 1000, 528, 1), (16, 48, 2048, 7168, 1),
)


def _grouped_fp8_inputs(shape, dtype, device, seed):
    """_grouped_inputs' groups (mixed at the test shapes, full elsewhere), fp8 operands."""
    import torch

    groups, rows, n, k, masked = shape
    full = tuple(shape) not in GROUPED_FP8_TEST_SHAPES
    gen = torch.Generator().manual_seed(seed if masked else shape_seed(shape))
    sizes = grouped_gemm_sizes(groups, rows, gen, full)
    return make_grouped_gemm_fp8_inputs(sizes, rows, n, k, dtype, device, seed, bool(masked))


def _grouped_fp8_bytes(shape, dtype) -> float:
    """a and b (a byte an element), c in the output dtype, the fp32 scales; every group full."""
    groups, rows, n, k, _ = shape
    kg, nb = -(-k // 128), -(-n // 128)
    return (groups * rows * k + groups * k * n + _OUT_BYTES[dtype] * groups * rows * n
            + 4.0 * (groups * rows * kg + groups * kg * nb))


def _fp8_loop():
    """A cuBLASLt blockwise fp8 GEMM (F.scaled_mm, _scaled_mm_blockwise's) per group into its
    rows of c, the groups read to the host once per input set, as _torch_loop does."""
    import torch

    blockwise = _scaled_mm_blockwise()
    cached = {}

    def run(a, b, a_scale, b_scale, group_offsets=None, group_counts=None, out_dtype=torch.bfloat16, **_):
        groups = group_counts if group_counts is not None else group_offsets
        key = (groups.data_ptr(), a.data_ptr())
        if key not in cached:
            cached[key] = (groups, a, *_host_groups(group_offsets, group_counts, a))
        _, _, parts, gaps = cached[key]
        c = torch.empty((*a.shape[:-1], b.shape[2]), dtype=out_dtype, device=a.device)
        masked = group_counts is not None
        for g, rows in parts:
            if rows.stop > rows.start:
                sa, out = (a_scale[g, rows], c[g, rows]) if masked else (a_scale[rows], c[rows])
                out.copy_(blockwise(a[g, rows] if masked else a[rows], b[g], sa, b_scale[g], "block", out_dtype))
            if masked:
                c[g, rows.stop:].zero_()
        for rows in gaps:
            c[rows].zero_()
        return c

    return run


def _grouped_fp8_args(t, d, *, masked=False, **change):
    """A valid grouped_gemm_fp8 call (G = 3, 4 rows a group, N = 5, K = 256: two scale
    groups) with `change` applied (bad_inputs)."""
    fp8 = t.float8_e4m3fn
    if masked:
        args = {"a": t.zeros(3, 4, 256, device=d, dtype=fp8), "a_scale": t.ones(3, 4, 2, device=d),
                "group_counts": t.tensor([4, 0, 2], dtype=t.int32, device=d)}
    else:
        args = {"a": t.zeros(6, 256, device=d, dtype=fp8), "a_scale": t.ones(6, 2, device=d),
                "group_offsets": t.tensor([0, 4, 4, 6], dtype=t.int32, device=d)}
    args.update(b=t.zeros(3, 256, 5, device=d, dtype=fp8), b_scale=t.ones(3, 2, 1, device=d))
    return {**args, **change}


def _grouped_fp8_bad_inputs():
    def fp8(t, d, *size, dtype=None):
        return t.zeros(*size, device=d, dtype=dtype or t.float8_e4m3fn)

    def bad(id_, error, message, masked=False, gpu=False, **change):
        return BadInput(id_, lambda t, d: _grouped_fp8_args(t, d, masked=masked,
                                                            **{k: v(t, d) for k, v in change.items()}),
                        error, message, gpu=gpu)

    return (
        bad("both-layouts", ValueError, "exactly one of the arguments 'group_offsets' (the contiguous layout) and "
                                        "'group_counts' (the masked layout) must be given, got both",
            group_counts=lambda t, d: t.tensor([4, 0, 2], dtype=t.int32, device=d)),
        bad("a-bfloat16", TypeError, "argument 'a' must be float8_e4m3fn, got bfloat16",
            a=lambda t, d: t.zeros(6, 256, device=d, dtype=t.bfloat16)),
        bad("a-e5m2", TypeError, "argument 'a' must be float8_e4m3fn, got float8_e5m2",
            a=lambda t, d: fp8(t, d, 6, 256, dtype=t.float8_e5m2)),
        bad("b-dtype", TypeError, "argument 'b' must have the dtype of 'a' (float8_e4m3fn), got bfloat16",
            b=lambda t, d: t.zeros(3, 256, 5, device=d, dtype=t.bfloat16)),
        bad("a-2d-masked", ValueError, "argument 'a' must be 3-D [G, M_max, K]", masked=True,
            a=lambda t, d: fp8(t, d, 6, 256)),
        bad("b-inner-dim", ValueError, "argument 'b' must have shape [G, K, N] with K = 256",
            b=lambda t, d: fp8(t, d, 3, 128, 5)),
        bad("k-not-16", ValueError, "K (the last dim of argument 'a') must be a multiple of 16, got 40",
            a=lambda t, d: fp8(t, d, 6, 40), b=lambda t, d: fp8(t, d, 3, 40, 5),
            a_scale=lambda t, d: t.ones(6, 1, device=d), b_scale=lambda t, d: t.ones(3, 1, 1, device=d)),
        bad("a-transposed", ValueError, "argument 'a' must be row-major with a contiguous last dim",
            a=lambda t, d: fp8(t, d, 256, 6).t()),
        bad("b-strided", ValueError, "argument 'b' must be row-major (stride(2) == 1) or K-major (stride(1) == 1",
            b=lambda t, d: fp8(t, d, 3, 256, 10)[:, :, ::2]),
        bad("group_offsets-length", ValueError, "argument 'group_offsets' must have shape [G + 1] = [4] (G = 3, "
                                                "dim 0 of 'b')",
            group_offsets=lambda t, d: t.tensor([0, 4, 6], dtype=t.int32, device=d)),
        bad("a_scale-half", TypeError, "argument 'a_scale' must be float32, got float16",
            a_scale=lambda t, d: t.ones(6, 2, device=d, dtype=t.float16)),
        bad("a_scale-shape", ValueError, "argument 'a_scale' must have shape [T, ceil(K / 128)] = [6, 2], got [6, 1]",
            a_scale=lambda t, d: t.ones(6, 1, device=d)),
        bad("a_scale-shape-masked", ValueError, "argument 'a_scale' must have shape [G, M_max, ceil(K / 128)] = "
                                                "[3, 4, 2], got [12, 2]", masked=True,
            a_scale=lambda t, d: t.ones(12, 2, device=d)),
        bad("b_scale-shape", ValueError, "argument 'b_scale' must have shape [G, ceil(K / 128), ceil(N / 128)] = "
                                         "[3, 2, 1], got [2, 1]",
            b_scale=lambda t, d: t.ones(2, 1, device=d)),
        bad("out_dtype-int8", TypeError, "argument 'out_dtype' must be torch.bfloat16, torch.float16 or "
                                         "torch.float32", out_dtype=lambda t, d: t.int8),
        bad("b_scale-on-cpu", ValueError, "argument 'b_scale' must be on the device of 'a'", gpu=True,
            b_scale=lambda t, d: t.ones(3, 2, 1)),
    )


GROUPED_GEMM_FP8 = register(
    OpSpec(
        name="grouped_gemm_fp8",
        family="gemm",
        summary="MoE grouped GEMM of e4m3 operands with DeepSeek-V3's block scales (1x128 for a, 128x128 for "
                "each expert's b), fp32 promotion every 128 of K; grouped_gemm's two layouts",
        signature="grouped_gemm_fp8(a[T, K] | a[G, M_max, K] e4m3, b[G, K, N] e4m3 (row-major or K-major), "
                  "a_scale[T | G, M_max, ceil(K/128)], b_scale[G, ceil(K/128), ceil(N/128)], group_offsets=None, "
                  "group_counts=None, out_dtype=bfloat16, config=-1) -> c[T, N] | c[G, M_max, N] (out_dtype)",
        shape_names=("G", "M", "N", "K", "masked"),
        bucket_exact=("masked",),
        dtypes=("bfloat16", "float16", "float32"),  # the output dtype
        make_inputs=_grouped_fp8_inputs,
        reference=grouped_gemm_fp8,
        # Nominal (atol, rtol); `check` applies gemm_check's "fp8" bound group by group.
        tolerance={"bfloat16": (1e-2, 8e-3), "float16": (1e-3, 2e-3), "float32": (1e-4, 1e-4)},
        flops=_grouped_flops,
        bytes_moved=_grouped_fp8_bytes,
        backends=(Backend("cuda", archs=("sm_90a",), tunable=True),
                  Backend("triton", archs=("sm_90",), interpreted=True)),
        test_shapes=GROUPED_FP8_TEST_SHAPES,
        bench_shapes=GROUPED_BENCH_SHAPES,
        peers=(Peer("F.scaled_mm blockwise per group (cuBLASLt)", _fp8_loop),),
        compute="fp8",
        check=_grouped_fp8_check,
        example_shape=(4, 24, 40, 144, 0),
        bad_inputs=_grouped_fp8_bad_inputs(),
        outputs=("c",),
        cuda_out=lambda cuda, i, o, **kw: cuda.grouped_gemm_fp8_out(
            i["a"], i["b"], i["a_scale"], i["b_scale"], i.get("group_offsets"), i.get("group_counts"), o[0], **kw),
        # The grouped schedule's fp8 instantiations, and the packing of an a TMA cannot read
        # (a row-major b's transpose is int8_gemm's kernel).
        sass_kernels=(r"sm90::gemm_kernel<.*ByteOperands<.*GroupedScheduler<", r"pack_rows_kernel<unsigned char>"),
    )
)
