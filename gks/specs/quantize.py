# SPDX-License-Identifier: Apache-2.0
"""The quantize family: INT8 quantization and dequantization, symmetric per row.

quantize_int8: INT8 quantization, symmetric per row: scale = absmax / 127, q = rint(x / scale).

The op is defined by an fp32 formula (gks.reference.quantize_int8 gives it exactly), and
every backend matches it bit for bit: q and scale are checked for equality, not closeness.

dequantize_int8: INT8 dequantization: out = q * scale (an fp32 product) in the dtype asked.

The spec's dtype is the output dtype. Outputs must equal the fp32-formula reference bit for
bit, and lie within half an ulp of the output dtype (plus the fp32 rounding) of the exact
product.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, reference_peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["quantize_int8", "dequantize_int8"]


def _absmax(xf: torch.Tensor) -> torch.Tensor:
    import torch

    if xf.shape[-1] == 0:  # the max over nothing of |x| >= 0
        return torch.zeros((*xf.shape[:-1], 1), dtype=xf.dtype, device=xf.device)
    return xf.abs().amax(dim=-1, keepdim=True)  # amax propagates NaN


def quantize_int8(x: torch.Tensor, *, precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(q int8 [..., N], scale fp32 [..., 1]) with scale = absmax / 127, q = rint(x / scale)."""
    import torch

    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"gks.reference.quantize_int8: argument 'x' must be float32, float16 or bfloat16, got {x.dtype}")
    if x.dim() < 1:
        raise ValueError("gks.reference.quantize_int8: argument 'x' must have at least 1 dim, got a scalar")
    xf = x.to(torch.float32)
    absmax = _absmax(xf)
    if precise:
        scale = (absmax.double() / 127.0).float()
        v = (xf.double() / scale.double()).float()
    else:
        scale = absmax / torch.full_like(absmax, 127.0)
        v = xf / scale
    q = torch.where(torch.isnan(v), torch.zeros_like(v), v.clamp(-127.0, 127.0).round())
    return q.to(torch.int8), scale


def dequantize_int8(
    q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype | None = None, *, precise: bool = False
) -> torch.Tensor:
    """q * scale (fp32 product) in ``dtype`` (float16 when None); scale is fp32 [..., 1] (q's
    shape, last dim 1)."""
    import torch

    dtype = torch.float16 if dtype is None else dtype
    if q.dtype != torch.int8:
        raise TypeError(f"gks.reference.dequantize_int8: argument 'q' must be int8, got {q.dtype}")
    if scale.dtype != torch.float32:
        raise TypeError(f"gks.reference.dequantize_int8: argument 'scale' must be float32, got {scale.dtype}")
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(
            f"gks.reference.dequantize_int8: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}"
        )
    if q.dim() < 1 or tuple(scale.shape) != (*q.shape[:-1], 1):
        raise ValueError(
            f"gks.reference.dequantize_int8: argument 'scale' must have shape {[*q.shape[:-1], 1]} "
            f"('q' with its last dim 1), got {list(scale.shape)}"
        )
    if precise:
        return q.double() * scale.double()  # exact: 8 x 24 significant bits fit in 53
    return (q.float() * scale).to(dtype)


# Both ops: N in {1, 31, 1000, 4096, 32768, 262144}: warp per row, block per row in registers,
# the looped kernel, unaligned rows (N = 31, 1000), 1x1, odd row counts, empty.
TEST_SHAPES = (
    (1, 1), (7, 1), (5, 31), (3, 1000), (33, 64), (3, 4096), (2, 4112), (2, 32768),
    (1, 262144), (0, 64), (3, 0),
)
BENCH_SHAPES = ((32768, 4096), (8192, 32768), (65536, 1024))


def _quantize_inputs(shape, dtype, device, seed):
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    # Rows of very different magnitudes (1e-4 to 1e3), so scales span many binades; fp16
    # rows of the small ones hold subnormals.
    row_scale = 10.0 ** (7.0 * torch.rand((m, 1), generator=gen, device=device) - 4.0)
    x = torch.randn((m, n), generator=gen, device=device, dtype=torch.float32) * row_scale
    return {"x": x.to(getattr(torch, dtype))}


def _quantize_check(out, ref, dtype, inputs) -> None:
    """q and scale equal the reference's exactly (NaN scales equal each other), and
    |q * scale - x| <= scale * (0.5 + 2^-17) wherever the scale is finite and positive."""
    import torch

    x = inputs["x"]
    assert isinstance(out, tuple) and len(out) == 2, f"quantize_int8 returned {type(out)}"
    q, scale = out
    ref_q, ref_scale = ref
    what = f"quantize_int8/{dtype}/{tuple(x.shape)}"
    assert q.dtype == torch.int8, f"{what}: q dtype {q.dtype}"
    assert scale.dtype == torch.float32, f"{what}: scale dtype {scale.dtype}"
    assert q.shape == x.shape, f"{what}: q shape {tuple(q.shape)}"
    assert scale.shape == (*x.shape[:-1], 1), f"{what}: scale shape {tuple(scale.shape)}"
    q, scale, ref_q, ref_scale = q.cpu(), scale.cpu(), ref_q.cpu(), ref_scale.cpu()
    same_scale = (scale == ref_scale) | (scale.isnan() & ref_scale.isnan())
    if not bool(same_scale.all()):
        i = tuple(int(k) for k in (~same_scale).nonzero()[0])
        raise AssertionError(
            f"{what}: {int((~same_scale).sum())} scales differ; first at {i}: "
            f"{scale[i].item()!r} != {ref_scale[i].item()!r}"
        )
    differ = q != ref_q
    if bool(differ.any()):
        i = tuple(int(k) for k in differ.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(differ.sum())} of {q.numel()} q differ; first at {i}: "
            f"{int(q[i])} != {int(ref_q[i])} (x = {x.cpu()[i].item()!r}, scale = {scale[i[:-1] + (0,)].item()!r})"
        )
    s = scale.double()
    finite = (s > 0) & s.isfinite()
    err = (q.double() * s - x.cpu().double()).abs()
    bound = s * (0.5 + 2.0**-17)
    assert bool(((err <= bound) | ~finite).all()), f"{what}: |q * scale - x| exceeds scale / 2"


QUANTIZE_INT8 = register(
    OpSpec(
        name="quantize_int8",
        family="quantize",
        summary="Symmetric per-row INT8 quantization (absmax / 127 scales)",
        signature="quantize_int8(x[..., N]) -> (q[..., N] int8, scale[..., 1] fp32)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_quantize_inputs,
        # precise=True evaluates the same fp32 formula exactly (see gks.reference.quantize_int8).
        reference=quantize_int8,
        # Exact equality (see `check`); no tolerance applies.
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},
        # |x|, max, divide, round (clamp): about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x once, write q (1 byte per element) and one fp32 scale per row.
        bytes_moved=lambda s, dt: (ELEM_BYTES[dt] + 1.0) * s[0] * s[1] + 4.0 * s[0],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(reference_peer("quantize_int8", compiled=False), reference_peer("quantize_int8", compiled=True)),
        check=_quantize_check,
        example_shape=(3, 1000),
        bad_inputs=(
            BadInput("x-int32", lambda t, d: {"x": t.ones(2, 4, device=d, dtype=t.int32)}, TypeError,
                     "argument 'x' must be float32, float16 or bfloat16, got"),
            BadInput("x-scalar", lambda t, d: {"x": t.tensor(1.0, device=d)}, ValueError, "argument 'x' must have"),
            BadInput("x-last-dim-strided", lambda t, d: {"x": t.ones(8, 6, device=d).t()}, ValueError,
                     "argument 'x' must be contiguous in its last dim", jax=False),
        ),
        cuda_out=lambda cuda, i, o: cuda.quantize_int8_out(i["x"], o[0], o[1]),
        outputs=("q", "scale"),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::QuantizeRow<",),
    )
)


# Against the exact (float64) product: the fp32 product is within 2^-24 relative, the cast
# to fp16/bf16 adds half an ulp (2^-11 / 2^-8 relative); atol covers fp16 subnormals.
DEQUANTIZE_TOLERANCE = {"float32": (0.0, 1.2e-7), "float16": (6e-8, 5e-4), "bfloat16": (0.0, 4e-3)}


def _dequantize_inputs(shape, dtype, device, seed):
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randint(-127, 128, (m, n), generator=gen, device=device, dtype=torch.int8)
    # Scales from 1e-6 to 10 (q * scale stays inside fp16's range).
    scale = 10.0 ** (7.0 * torch.rand((m, 1), generator=gen, device=device) - 6.0)
    return {"q": q, "scale": scale.to(torch.float32), "dtype": getattr(torch, dtype)}


def _dequantize_args(t, d, **change):
    """A valid dequantize_int8 call on 4 rows of 8 with `change` applied (bad_inputs)."""
    args = {"q": t.ones(4, 8, device=d, dtype=t.int8), "scale": t.ones(4, 1, device=d), "dtype": t.float16}
    return {**args, **change}


def _dequantize_check(out, ref, dtype, inputs) -> None:
    """Bit-equal to the fp32-formula reference, and close to the exact product."""
    import torch

    q = inputs["q"]
    what = f"dequantize_int8/{dtype}/{tuple(q.shape)}"
    assert out.dtype == getattr(torch, dtype), f"{what}: dtype {out.dtype}"
    assert out.shape == q.shape, f"{what}: shape {tuple(out.shape)}"
    want = dequantize_int8(q, inputs["scale"], inputs["dtype"]).cpu()
    got = out.cpu()
    differ = (got != want) & ~(got.isnan() & want.isnan())
    if bool(differ.any()):
        i = tuple(int(k) for k in differ.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(differ.sum())} of {got.numel()} outputs differ from q * scale in fp32; "
            f"first at {i}: {got[i].item()!r} != {want[i].item()!r}"
        )
    atol, rtol = DEQUANTIZE_TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), ref.cpu(), atol=atol, rtol=rtol, equal_nan=True)


DEQUANTIZE_INT8 = register(
    OpSpec(
        name="dequantize_int8",
        family="quantize",
        summary="INT8 dequantization with per-row fp32 scales",
        signature="dequantize_int8(q[..., N] int8, scale[..., 1] fp32, dtype) -> out[..., N] (dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),  # the output dtype
        make_inputs=_dequantize_inputs,
        reference=dequantize_int8,
        tolerance=DEQUANTIZE_TOLERANCE,
        # one multiply per element (the int8 -> fp32 conversion not counted).
        flops=lambda s: 1.0 * s[0] * s[1],
        # read q (1 byte per element) and one fp32 scale per row, write out once.
        bytes_moved=lambda s, dt: (1.0 + ELEM_BYTES[dt]) * s[0] * s[1] + 4.0 * s[0],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a")),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=TEST_SHAPES,
        bench_shapes=BENCH_SHAPES,
        peers=(reference_peer("dequantize_int8", compiled=False), reference_peer("dequantize_int8", compiled=True)),
        check=_dequantize_check,
        example_shape=(3, 1000),
        bad_inputs=(
            BadInput("q-float", lambda t, d: _dequantize_args(t, d, q=t.ones(4, 8, device=d)), TypeError,
                     "argument 'q' must be int8, got"),
            BadInput("scale-half", lambda t, d: _dequantize_args(t, d, scale=t.ones(4, 1, device=d).half()),
                     TypeError, "argument 'scale' must be float32, got"),
            BadInput("scale-1d", lambda t, d: _dequantize_args(t, d, scale=t.ones(4, device=d)), ValueError,
                     "argument 'scale' must have shape [4, 1]"),
            BadInput("scale-rows", lambda t, d: _dequantize_args(t, d, scale=t.ones(2, 1, device=d)), ValueError,
                     "argument 'scale' must have shape [4, 1]"),
            BadInput("dtype-int32", lambda t, d: _dequantize_args(t, d, dtype=t.int32), TypeError,
                     "argument 'dtype' must be float32, float16 or bfloat16"),
            BadInput("q-last-dim-strided", lambda t, d: _dequantize_args(t, d, q=t.ones(8, 4, device=d, dtype=t.int8).t()),
                     ValueError, "argument 'q' must be contiguous in its last dim", jax=False),
        ),
        cuda_out=lambda cuda, i, o: cuda.dequantize_int8_out(i["q"], i["scale"], o[0]),
        outputs=("out",),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::DequantizeRow<",),
    )
)
