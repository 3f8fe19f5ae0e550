# SPDX-License-Identifier: Apache-2.0
"""gks::int8_gemm — see gks._torch_ops for what every custom op guarantees."""

from __future__ import annotations

import torch

from gks import cuda
from gks._torch_ops._eager import gks_op, native_allocates
from gks.profile.autotune import gemm_dims, resolve_config

_OUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _out_dtype(out_dtype: torch.dtype) -> torch.dtype:
    if out_dtype not in _OUT_DTYPES:
        raise TypeError(
            f"gks.int8_gemm: argument 'out_dtype' must be torch.float16, torch.bfloat16 or "
            f"torch.float32, got {out_dtype}"
        )
    return out_dtype


def _int8_gemm(
    a_q: torch.Tensor,
    b_q: torch.Tensor,
    a_scale: torch.Tensor,
    b_scale: torch.Tensor,
    out_dtype: torch.dtype = torch.float16,
    config: int = -1,
) -> torch.Tensor:
    """c = float(a_q @ b_q) * a_scale * b_scale on INT8 Tensor Cores (int32 accumulation).

    a_q [M, K] int8 and a_scale [M, 1] float32 are what ``gks.quantize_int8(a)`` returns;
    b_q [K, N] int8 with b_scale [1, N] float32 is b quantized per column::

        q, s = gks.quantize_int8(b.t().contiguous())   # per row of b.T = per column of b
        b_q, b_scale = q.t(), s.t()

    b_q may be row-major ([K, N], stride(1) == 1, any leading dimension) or K-major, a
    transposed view like q.t() above (stride(0) == 1, stride(1) >= K) — the layout of an
    nn.Linear weight's .t(). The scales may also be 1-D ([M], [N]) and have any stride.
    The int32 sum is exact while K * 128 * 128 < 2^31 (K < 131072); beyond that it wraps
    like torch._int_mm. out_dtype: float16 (default), bfloat16 or float32.

    On an sm_90 GPU (library built for sm_90a) with a_q 16-byte aligned (base pointer and
    leading dimension) this runs the Hopper kernel (TMA, int8 wgmma, warp-specialized and
    persistent), which reads b_q K-major: a K-major b_q is read in place; a row-major one is
    first transposed into a temporary (N x K bytes, stream-ordered) when M >= 512, and
    left to the mma.sync kernel below that. Elsewhere the mma.sync kernel runs, which reads
    b_q row-major (a K-major b_q is transposed into a temporary first).
    gks.cuda.int8_gemm_path tells which; every path gives identical results. config: -1 =
    tuned entry if any (for a K-major b_q), else the heuristic; an index into
    gks.cuda.gemm_config_names("int8_gemm") forces that config (a "hopper_" config gives
    way to the mma.sync heuristic where the Hopper kernel cannot run). Runs on the current
    CUDA stream.
    """
    m, n, k = gemm_dims("gks.int8_gemm", a_q, b_q, "a_q", "b_q")
    c_dtype = _out_dtype(out_dtype)
    # The tuned table was measured on K-major b_q (the registry's inputs); a row-major b_q
    # is left to the heuristic, which weighs the transpose the Hopper kernel would need.
    k_major = b_q.stride(0) == 1 and b_q.stride(1) != 1 and min(k, n) > 1
    cfg = config
    if k_major:
        cfg = resolve_config("int8_gemm", a_q, (m, n, k), config, dtype=c_dtype)
    if native_allocates():  # one native call: c comes from PyTorch's allocator
        return cuda.int8_gemm_alloc(a_q, b_q, a_scale, b_scale, c_dtype, cfg)
    c = a_q.new_empty((m, n), dtype=c_dtype)
    cuda.int8_gemm_out(a_q, b_q, a_scale, b_scale, c, cfg)
    return c


int8_gemm = gks_op("int8_gemm", _int8_gemm)


@int8_gemm.op.register_fake
def _(a_q, b_q, a_scale, b_scale, out_dtype: torch.dtype = torch.float16, config: int = -1):
    return torch.empty((a_q.shape[0], b_q.shape[1]), dtype=_out_dtype(out_dtype), device=a_q.device)
