# SPDX-License-Identifier: Apache-2.0
"""INT8 GEMM: int8 x int8 -> int32 on Tensor Cores, then per-row (a) and per-column (b)
scales in the epilogue. The spec's dtype is the output dtype."""

from __future__ import annotations

from gks.registry import Backend, NativeConfigs, OpSpec, Peer, register
from gks.specs import _gemm

_OUT_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}


def make_inputs(shape, dtype, device, seed):
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


def _reference(a_q, b_q, a_scale, b_scale, out_dtype=None, *, precise=False):
    import torch

    from gks.reference import int8_gemm

    return int8_gemm(a_q, b_q, a_scale, b_scale, out_dtype or torch.float16, precise=precise)


def _check(out, ref, dtype, inputs):
    _gemm.gemm_check(out, ref, inputs["a_q"], inputs["b_q"], dtype, "exact", f"int8_gemm/{dtype}")


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
    """torch._int_mm as ../shared/PEERS-H200.md timed it (123 / 128 TOP/s at 4096^3 / 8192^3,
    the figure the GEMM issue's 3x is set against): b_q row-major [K, N], a layout on which
    cuBLASLt is several times slower than on the K-major b_q the inputs carry. The row-major
    copy is made once per input set, on its first call, outside the timed calls."""
    import torch

    run_int_mm = _int_mm()
    copies = {}

    def run(a_q, b_q, a_scale, b_scale, out_dtype=torch.float16, **_):
        key = (b_q.data_ptr(), tuple(b_q.shape), tuple(b_q.stride()))
        if key not in copies:
            copies[key] = (b_q, b_q.contiguous())  # holding b_q keeps its address unique
        return run_int_mm(a_q, copies[key][1], a_scale, b_scale, out_dtype)

    return run



SPEC = register(
    OpSpec(
        name="int8_gemm",
        summary="int8 GEMM on Tensor Cores (int32 accumulate) with row/column scales: TMA + "
                "wgmma on sm_90a, mma.sync m16n8k32 elsewhere",
        signature="int8_gemm(a_q[M, K], b_q[K, N], a_scale[M, 1], b_scale[1, N], "
                  "out_dtype=float16, config=-1) -> c[M, N]",
        shape_names=("M", "N", "K"),
        dtypes=("float16", "bfloat16", "float32"),
        make_inputs=make_inputs,
        reference=_reference,
        tolerance={"float16": (1e-3, 1e-3), "bfloat16": (8e-3, 8e-3), "float32": (1e-6, 1e-6)},
        flops=_gemm.flops,
        bytes_moved=lambda s, dt: (s[0] * s[2] + s[2] * s[1] + 4.0 * (s[0] + s[1])
                                   + _OUT_BYTES[dt] * s[0] * s[1]),
        backends=(
            Backend("cuda", "gks._torch_ops:int8_gemm", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:int8_gemm", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=_gemm.TEST_SHAPES,
        bench_shapes=_gemm.BENCH_SHAPES,
        peers=(Peer("torch._int_mm + scales", _int_mm),
               Peer("torch._int_mm + scales, row-major b", _int_mm_row_major_b)),
        # The mma.sync kernel's, then the Hopper kernel's ("kernel": "hopper"; TMA + int8
        # wgmma, sm_90a; where that path cannot run they give way to the mma.sync heuristic).
        configs=NativeConfigs("int8_gemm"),
        compute="int8",
        check=_check,
    )
)
