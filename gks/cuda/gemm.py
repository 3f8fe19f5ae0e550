# SPDX-License-Identifier: Apache-2.0
"""The gemm family's DLPack entry points: sgemm, wmma_gemm, int8_gemm, gemm, gemm_fp8,
grouped_gemm and grouped_gemm_fp8, their config names, heuristics and path queries. See
gks.cuda."""

from __future__ import annotations

from gks import _native, registry

__all__ = [
    "sgemm_out", "wmma_gemm_out", "int8_gemm_out", "int8_gemm_alloc", "int8_gemm_path", "gemm_out",
    "gemm_alloc", "gemm_path", "gemm_config_names", "gemm_heuristic", "gemm_fp8_out", "grouped_gemm_out",
    "grouped_gemm_heuristic", "grouped_gemm_fp8_out",
]


def sgemm_out(a, b, c, config: int = -1) -> None:
    """c = a @ b in fp32 (FFMA, no TF32), written into c [M, N] float32. a [M, K] and
    b [K, N] are float32, row-major with any leading dimension (transposed views are
    rejected). config: an index into gemm_config_names("sgemm"), or -1 for the heuristic."""
    _native.module().sgemm(a, b, c, int(config))


def wmma_gemm_out(a, b, c, config: int = -1) -> None:
    """c = a @ b on Tensor Cores: a [M, K], b [K, N] float16 or bfloat16 (row-major, any
    leading dimension), fp32 accumulation, c [M, N] float32 or a's dtype."""
    _native.module().wmma_gemm(a, b, c, int(config))


def int8_gemm_out(a_q, b_q, a_scale, b_scale, c, config: int = -1) -> None:
    """c = float(a_q @ b_q) * a_scale * b_scale: a_q [M, K] int8 (row-major, any leading
    dimension), b_q [K, N] int8, row-major or K-major (a transposed view of [N, K]: stride(0)
    == 1, stride(1) >= K), int32 accumulation; a_scale [M, 1] (or [M]), b_scale [1, N] (or
    [N]) float32; c [M, N] float16, bfloat16 or float32. On sm_90 the Hopper kernel (TMA +
    int8 wgmma, reading b_q K-major), else the mma.sync kernel (reading b_q row-major); a
    b_q in the other layout is transposed into a stream-ordered temporary first. See
    int8_gemm_path and gks.int8_gemm. config: an index into
    gemm_config_names("int8_gemm") (mma.sync configs first, then the "hopper_" ones), or -1
    for the heuristic."""
    _native.module().int8_gemm(a_q, b_q, a_scale, b_scale, c, int(config))


def int8_gemm_alloc(a_q, b_q, a_scale, b_scale, out_dtype, config: int = -1):
    """int8_gemm_out into a new [M, N] tensor of out_dtype allocated through the caller's
    framework, as gemm_alloc does."""
    return _native.module().int8_gemm_alloc(a_q, b_q, a_scale, b_scale, out_dtype, int(config))


def int8_gemm_path(a_q, b_q, a_scale, b_scale, c, config: int = -1) -> str:
    """The path int8_gemm_out(..., config) takes on this GPU (after the same argument
    checks): 'hopper' (b_q K-major, read in place), 'hopper+transpose' (row-major b_q
    transposed first; M >= 512 or a forced "hopper_" config), 'mma' (b_q row-major) or
    'mma+transpose' (K-major b_q transposed first). The Hopper kernel needs an sm_90 GPU
    and a_q (and an in-place b_q) 16-byte aligned: base pointer and leading dimension."""
    return str(_native.module().int8_gemm_path(a_q, b_q, a_scale, b_scale, c, int(config)))


def _check_gemm(kernel: str, what: str) -> None:
    gemms = registry.ops_with("cuda", tunable=True)
    gemms = [name for name in gemms if registry.get(name).family == "gemm"]
    if kernel not in gemms:
        raise ValueError(f"{what}: unknown GEMM '{kernel}' (the GEMMs: {', '.join(gemms)})")


def gemm_config_names(kernel: str) -> list[str]:
    """The names of the tile configs compiled for 'sgemm', 'wmma_gemm', 'int8_gemm' or 'gemm'
    (the Hopper kernel), in index order (the `config` argument indexes this list)."""
    _check_gemm(kernel, "gemm_config_names")
    return [c["name"] for c in _native.config_table(kernel)]


def gemm_heuristic(kernel: str, m: int, n: int, k: int, num_sms: int) -> int:
    """The config index the C++ heuristic picks for an M x N x K problem on num_sms SMs."""
    _check_gemm(kernel, "gemm_heuristic")
    if kernel in ("grouped_gemm", "grouped_gemm_fp8"):
        raise ValueError(f"gemm_heuristic: {kernel}'s heuristic takes the groups too: call "
                         f"grouped_gemm_heuristic(rows, n, k, groups, num_sms, kernel={kernel!r})")
    return int(getattr(_native.module(), f"{kernel}_heuristic")(m, n, k, num_sms))


def grouped_gemm_heuristic(rows: int, n: int, k: int, groups: int, num_sms: int,
                           kernel: str = "grouped_gemm") -> int:
    """The config index the C++ heuristic picks for `kernel` ('grouped_gemm' or
    'grouped_gemm_fp8') with groups of about `rows` rows (the contiguous layout's mean, the
    masked layout's M_max) on num_sms SMs."""
    if kernel not in ("grouped_gemm", "grouped_gemm_fp8"):
        raise ValueError(f"grouped_gemm_heuristic: argument 'kernel' must be 'grouped_gemm' or "
                         f"'grouped_gemm_fp8', got {kernel!r}")
    return int(getattr(_native.module(), f"{kernel}_heuristic")(rows, n, k, groups, num_sms))


def gemm_out(a, b, c, config: int = -1, *, bias=None, row_scale=None, col_scale=None, gated=None) -> None:
    """c = a @ b: a [M, K], b [K, N] float16 or bfloat16 (row-major, any leading dimension),
    fp32 accumulation, c [M, N] float32 or a's dtype, through the fused epilogue where given
    (gks.reference.gemm: c = (a @ b) * row_scale * col_scale + bias, then with gated
    ('silu', 'gelu' or 'gelu_tanh') act(y[:, 2j]) * y[:, 2j + 1] into c [M, N / 2]). The
    Hopper kernel on sm_90 (config: an index into gemm_config_names(), or -1 for the
    heuristic), else the WMMA fallback; see gemm_path."""
    if bias is None and row_scale is None and col_scale is None and gated is None:
        _native.module().gemm(a, b, c, int(config))  # a plain call's own, direct, entry point
    else:
        _native.module().gemm_epilogue(a, b, c, int(config), bias, row_scale, col_scale, _gated(gated, "gks.gemm"))


def _gated(gated, op: str) -> str:
    """gated as the bindings take it: the activation's name, "" for none; anything but a
    non-empty string (or None) is refused here, as the library refuses an unknown name."""
    if gated is None:
        return ""
    if not isinstance(gated, str) or not gated:
        raise ValueError(f"{op}: argument 'gated' must be None, 'silu', 'gelu' or 'gelu_tanh', got {gated!r}")
    return gated


def gemm_alloc(a, b, out_dtype, config: int = -1, *, bias=None, row_scale=None, col_scale=None, gated=None):
    """gemm_out into a new [M, N] (gated: [M, N / 2]) tensor of out_dtype (a's dtype or
    float32) that the library allocates through the caller's framework: tvm-ffi's
    environment allocator, which PyTorch lends (its caching allocator, current stream). One
    native call instead of a Python-level allocation plus gemm_out: less host time a call,
    which is what bounds small GEMMs on a slow host (docs/perf/gemm.md). Other frameworks get
    a ValueError saying so; they use gemm_out."""
    return _native.module().gemm_alloc(a, b, out_dtype, int(config), bias, row_scale, col_scale,
                                       _gated(gated, "gks.gemm"))


def gemm_path(a, b, c) -> str:
    """'hopper' or 'wmma': the kernel gemm_out(a, b, c) runs on this GPU (after the same
    argument checks). WMMA is the fallback off sm_90, or when a or b is not 16-byte aligned
    (base pointer, or leading dimension in bytes) so TMA cannot load it."""
    return str(_native.module().gemm_path(a, b, c))


def gemm_fp8_out(a, b, a_scale, b_scale, c, scaling: str = "tensor", config: int = -1, *, bias=None,
                 gated=None) -> None:
    """c = fp8 a [M, K] @ b [K, N] (both float8_e4m3fn or both float8_e5m2; a row-major, b
    row-major or K-major) with fp32 accumulation and the fp32 scales of `scaling`
    ('tensor', 'row' or 'block'), then the fused epilogue's bias and gated unit where given,
    written into c [M, N] (gated: [M, N / 2]) bfloat16, float16 or float32: the contract of
    gks.reference.gemm_fp8. The Hopper kernel (sm_90a only; fp8 wgmma, every 128 of K
    promoted into fp32): off compute capability 9.0, or in a build without sm_90a, it
    refuses the call. config: an index into gemm_config_names("gemm_fp8"), or -1."""
    if bias is None and gated is None:
        _native.module().gemm_fp8(a, b, a_scale, b_scale, c, scaling, int(config))
    else:
        _native.module().gemm_fp8_epilogue(a, b, a_scale, b_scale, c, scaling, int(config), bias,
                                           _gated(gated, "gks.gemm_fp8"))


def grouped_gemm_out(a, b, group_offsets, group_counts, c, config: int = -1) -> None:
    """The MoE expert GEMMs in one launch, written into c, as gks.reference.grouped_gemm says:
    exactly one of group_offsets ([G + 1] int32: a [T, K], c [T, N]) and group_counts ([G]
    int32: a [G, M_max, K], c [G, M_max, N]) is given (the other None); b [G, K, N]; fp16 or
    bf16 with fp32 accumulation, c in a's dtype, every element of c written (0 outside the
    groups). The Hopper kernel (sm_90a only; the grouped schedule of the persistent TMA +
    wgmma GEMM): off compute capability 9.0, or in a build without sm_90a, it refuses the
    call. No host synchronization. config: an index into gemm_config_names("grouped_gemm"),
    or -1 for the heuristic."""
    _native.module().grouped_gemm(a, b, group_offsets, group_counts, c, int(config))


def grouped_gemm_fp8_out(a, b, a_scale, b_scale, group_offsets, group_counts, c, config: int = -1) -> None:
    """grouped_gemm_out's grouped product (either layout) of float8_e4m3fn a and b with
    DeepSeek-V3's block scales, written into c (bfloat16, float16 or float32), as
    gks.reference.grouped_gemm_fp8 says: a_scale [T, ceil(K / 128)] or [G, M_max, ceil(K /
    128)], b_scale [G, ceil(K / 128), ceil(N / 128)]; b [G, K, N] row-major or K-major (the
    view w.transpose(1, 2) of [G, N, K] weights, read in place). The Hopper kernel only
    (sm_90a), as grouped_gemm_out. config: an index into gemm_config_names("grouped_gemm_fp8"),
    or -1 for the heuristic."""
    _native.module().grouped_gemm_fp8(a, b, a_scale, b_scale, group_offsets, group_counts, c, int(config))
