# SPDX-License-Identifier: Apache-2.0
"""What the three GEMM specs share: shapes, FLOP count, the K-aware output check.

Shapes are (M, N, K): c [M, N] = a [M, K] @ b [K, N].

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

import math

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
    err = (o - r).abs()
    bad = ~(err <= bound)  # NaN in out counts as bad
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        ratio = float((err / bound.clamp_min(1e-300)).nan_to_num(float("inf")).max())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {out.numel()} elements outside the bound "
            f"(worst error/bound {ratio:.3g}); first at {idx}: out {float(o[idx])!r}, "
            f"ref {float(r[idx])!r}, bound {float(bound[idx]):.3g}"
        )
