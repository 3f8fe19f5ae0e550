# SPDX-License-Identifier: Apache-2.0
"""The quantize family: INT8 quantization and dequantization, symmetric per row; FP8 e4m3
quantization and dequantization with fp32 scales per tensor, token, 1 x 128 group or
128 x 128 block (the contract above quantize_fp8 below, and in gks/quantize.h).

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


# The quantize ops with all three backends.
_BACKENDS = (
    Backend("cuda", archs=("sm_80", "sm_90a")),
    Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
    Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
)

# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["quantize_int8", "dequantize_int8", "quantize_fp8", "dequantize_fp8"]


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
        backends=_BACKENDS,
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
        backends=_BACKENDS,
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


# ---- FP8 (e4m3) quantization: fp32 scales per tensor, per token, per 1 x 128 group, per
# 128 x 128 block (DeepSeek-V3's layouts) ----
#
# The contract, which every backend meets bit for bit (the CUDA kernel's division is
# Markstein's correctly rounded quotient, see gks/quantize.h):
#  1. absmax is the largest |x| of the scale's group, NaN-propagating; 0 for an empty one.
#  2. scale = absmax / 448, one IEEE fp32 division; with scale_ue8m0 it is then rounded up
#     to a power of two (DeepSeek's UE8M0 scales), at least 2^-126 (0, inf and NaN stay).
#  3. v = x / scale, one IEEE fp32 division; v = 0 where scale is 0 (an all-zero group).
#  4. q = e4m3(clamp(v, -448, 448)), rounded to nearest even; NaN stays NaN.
# So an all-zero group gives scale 0 and q 0; a group holding a NaN gives scale NaN and q
# NaN throughout; a group holding +-inf (no NaN) gives scale inf, q NaN at the infinities
# and 0 elsewhere (it dequantizes to NaN: flagged, not clipped).
FP8_MAX = 448.0
FP8_GROUP = 128
FP8_GRANULARITIES = ("tensor", "token", "group", "block")


def fp8_check_granularity(granularity, group_size, op: str) -> str:
    """The checks every backend makes of (granularity, group_size), with the same errors."""
    if granularity not in FP8_GRANULARITIES:
        raise ValueError(f"{op}: argument 'granularity' must be 'tensor', 'token', 'group' or 'block', "
                         f"got {granularity!r}")
    if group_size != FP8_GROUP:
        raise ValueError(f"{op}: argument 'group_size' must be 128 (1 x 128 groups, 128 x 128 blocks), "
                         f"got {group_size!r}")
    return granularity


def fp8_scale_shape(shape, granularity: str, op: str) -> tuple[int, ...]:
    """The scale's shape for an input of `shape` (after fp8_check_granularity)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) < 1:
        raise ValueError(f"{op}: argument 'x' must have at least 1 dim, got a scalar")
    if granularity == "tensor":
        return (1,)
    if granularity == "token":
        return (*shape[:-1], 1)
    if granularity == "group":
        return (*shape[:-1], -(-shape[-1] // FP8_GROUP))
    if len(shape) != 2:
        raise ValueError(f"{op}: argument 'x' must be 2-D [M, K] for granularity 'block', got {len(shape)} dims")
    return (-(-shape[0] // FP8_GROUP), -(-shape[1] // FP8_GROUP))


def _ue8m0(scale: torch.Tensor) -> torch.Tensor:
    """scale (fp32, >= 0 or NaN) rounded up to a power of two >= 2^-126; 0, inf, NaN kept."""
    import torch

    bits = scale.view(torch.int32)
    up = (bits + 0x7FFFFF) & -0x800000  # 0xFF800000: the sign and exponent bits
    keep = (scale == 0) | ~torch.isfinite(scale)
    return torch.where(keep, scale, up.view(torch.float32))


def _group_view(xf: torch.Tensor, granularity: str) -> torch.Tensor:
    """xf padded with zeros and viewed so that each scale's group is the last dim."""
    import torch.nn.functional as F

    if granularity == "tensor":
        return xf.reshape(1, -1)
    if granularity == "token":
        return xf.unsqueeze(-2)  # [..., 1, K]
    k = xf.shape[-1]
    kp = -(-k // FP8_GROUP) * FP8_GROUP
    if granularity == "group":
        xp = F.pad(xf, (0, kp - k))
        return xp.reshape(*xf.shape[:-1], kp // FP8_GROUP, FP8_GROUP)
    m = xf.shape[0]
    mp = -(-m // FP8_GROUP) * FP8_GROUP
    xp = F.pad(xf, (0, kp - k, 0, mp - m))
    blocks = xp.reshape(mp // FP8_GROUP, FP8_GROUP, kp // FP8_GROUP, FP8_GROUP).permute(0, 2, 1, 3)
    return blocks.reshape(mp // FP8_GROUP, kp // FP8_GROUP, FP8_GROUP * FP8_GROUP)


def fp8_expand_scale(scale: torch.Tensor, shape, granularity: str) -> torch.Tensor:
    """The scale of each element of a tensor of `shape` (broadcast to it)."""
    if granularity in ("tensor", "token"):
        return scale.reshape(-1).expand(*shape) if granularity == "tensor" else scale.expand(*shape)
    k = shape[-1]
    s = scale.repeat_interleave(FP8_GROUP, dim=-1)[..., :k]
    if granularity == "block":
        s = s.repeat_interleave(FP8_GROUP, dim=0)[: shape[0]]
    return s


def quantize_fp8(
    x: torch.Tensor, granularity: str = "token", group_size: int = 128, scale_ue8m0: bool = False,
    *, precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q float8_e4m3fn, x's shape; scale fp32) with scale = absmax / 448 per group and
    q = e4m3(x / scale). granularity: 'tensor' (scale [1]), 'token' (scale [..., 1]),
    'group' (1 x 128 groups along the last dim, scale [..., ceil(K / 128)]), 'block'
    (x 2-D [M, K], 128 x 128 blocks, scale [ceil(M / 128), ceil(K / 128)]); partial groups
    and blocks at the ends are allowed. scale_ue8m0: scales rounded up to powers of two."""
    import torch

    op = "gks.reference.quantize_fp8"
    if x.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'x' must be float32, float16 or bfloat16, got {x.dtype}")
    fp8_check_granularity(granularity, group_size, op)
    scale_shape = fp8_scale_shape(x.shape, granularity, op)
    xf = x.to(torch.float32)
    groups = _group_view(xf, granularity)
    if groups.shape[-1] == 0:
        absmax = torch.zeros(groups.shape[:-1], dtype=torch.float32, device=x.device)
    else:
        absmax = groups.abs().amax(dim=-1)  # amax propagates NaN
    if precise:
        scale = (absmax.double() / FP8_MAX).float()
    else:
        scale = absmax / torch.full_like(absmax, FP8_MAX)
    if scale_ue8m0:
        scale = _ue8m0(scale)
    scale = scale.reshape(scale_shape)
    s = fp8_expand_scale(scale, x.shape, granularity)
    v = (xf.double() / s.double()).float() if precise else xf / s
    v = torch.where(s == 0, torch.zeros_like(v), v).clamp(-FP8_MAX, FP8_MAX)
    return v.to(torch.float8_e4m3fn), scale


def dequantize_fp8(
    q: torch.Tensor, scale: torch.Tensor, granularity: str = "token", group_size: int = 128,
    dtype: torch.dtype | None = None, *, precise: bool = False,
) -> torch.Tensor:
    """q * scale (an fp32 product) in ``dtype`` (bfloat16 when None), scale laid out as
    quantize_fp8 gives it for `granularity`."""
    import torch

    op = "gks.reference.dequantize_fp8"
    dtype = torch.bfloat16 if dtype is None else dtype
    if q.dtype != torch.float8_e4m3fn:
        raise TypeError(f"{op}: argument 'q' must be float8_e4m3fn, got {q.dtype}")
    if scale.dtype != torch.float32:
        raise TypeError(f"{op}: argument 'scale' must be float32, got {scale.dtype}")
    if dtype not in (torch.float32, torch.float16, torch.bfloat16):
        raise TypeError(f"{op}: argument 'dtype' must be float32, float16 or bfloat16, got {dtype}")
    fp8_check_granularity(granularity, group_size, op)
    want = fp8_scale_shape(q.shape, granularity, op)
    if tuple(scale.shape) != want:
        raise ValueError(f"{op}: argument 'scale' must have shape {list(want)} for granularity "
                         f"'{granularity}', got {list(scale.shape)}")
    s = fp8_expand_scale(scale, q.shape, granularity)
    if precise:
        return q.double() * s.double()  # exact: 4 x 24 significant bits fit in 53
    return (q.float() * s).to(dtype)


# Shapes (M, K, granularity, ue8m0): granularity indexes FP8_GRANULARITIES (0 tensor,
# 1 token, 2 group, 3 block), ue8m0 0 or 1. K = 1, 7, 129, 4097: partial groups; M = 130:
# a partial block row; (0, 64) and (3, 0): empty.
_FP8_BASE = ((1, 1), (5, 7), (3, 129), (2, 4097), (33, 256), (130, 300), (0, 64), (3, 0))
FP8_TEST_SHAPES = tuple((m, k, g, 0) for g in range(4) for m, k in _FP8_BASE) + (
    (130, 300, 0, 1), (3, 129, 1, 1), (33, 256, 2, 1), (130, 300, 3, 1), (2, 40000, 1, 0),
)
# Activations per token and per group (M tokens x K 4096 / 7168), weights per block, and a
# per-tensor case.
FP8_BENCH_SHAPES = tuple((m, k, g, 0) for g in (1, 2) for m in (1, 16, 256, 4096, 16384) for k in (4096, 7168)) + (
    (4096, 7168, 3, 0), (7168, 4096, 3, 1), (16384, 7168, 2, 1), (4096, 7168, 0, 0), (16384, 7168, 0, 0),
)


def _fp8_quantize_inputs(shape, dtype, device, seed):
    import torch

    m, k, g, ue8m0 = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    # Rows of very different magnitudes (1e-4 to 1e3), so scales span many binades, and an
    # all-zero row and group where there is room for them.
    row_scale = 10.0 ** (7.0 * torch.rand((m, 1), generator=gen, device=device) - 4.0)
    x = torch.randn((m, k), generator=gen, device=device, dtype=torch.float32) * row_scale
    if m >= 3 and k >= 1:
        x[1] = 0
    if m >= 3 and k > 128:
        x[2, :128] = 0
    return {"x": x.to(getattr(torch, dtype)), "granularity": FP8_GRANULARITIES[g], "scale_ue8m0": bool(ue8m0)}


def _fp8_bits(q):
    """The e4m3 bits of q with every NaN as 0x7f (q NaN in either sign compares equal)."""
    import torch

    b = q.view(torch.uint8).to(torch.int16)
    return torch.where((b & 0x7F) == 0x7F, torch.full_like(b, 0x7F), b)


def _fp8_quantize_check(out, ref, dtype, inputs) -> None:
    """q and scale equal the reference's exactly (NaN equal to NaN), and the dequantized
    value is within half an e4m3 ulp of x: |q * scale - x| <= 2^-4 |x| + 2^-10 scale (the
    relative half ulp of 3 mantissa bits, the subnormals' absolute one), wherever the scale
    is finite and positive."""
    import torch

    x = inputs["x"]
    g = inputs["granularity"]
    assert isinstance(out, tuple) and len(out) == 2, f"quantize_fp8 returned {type(out)}"
    q, scale = out
    ref_q, ref_scale = ref
    what = f"quantize_fp8/{g}/{dtype}/{tuple(x.shape)}"
    assert q.dtype == torch.float8_e4m3fn, f"{what}: q dtype {q.dtype}"
    assert scale.dtype == torch.float32, f"{what}: scale dtype {scale.dtype}"
    assert q.shape == x.shape, f"{what}: q shape {tuple(q.shape)}"
    assert scale.shape == ref_scale.shape, f"{what}: scale shape {tuple(scale.shape)} != {tuple(ref_scale.shape)}"
    q, scale, ref_q, ref_scale = q.cpu(), scale.cpu(), ref_q.cpu(), ref_scale.cpu()
    same_scale = (scale == ref_scale) | (scale.isnan() & ref_scale.isnan())
    if not bool(same_scale.all()):
        i = tuple(int(k) for k in (~same_scale).nonzero()[0])
        raise AssertionError(f"{what}: {int((~same_scale).sum())} scales differ; first at {i}: "
                             f"{scale[i].item()!r} != {ref_scale[i].item()!r}")
    differ = _fp8_bits(q) != _fp8_bits(ref_q)
    if bool(differ.any()):
        i = tuple(int(k) for k in differ.nonzero()[0])
        raise AssertionError(f"{what}: {int(differ.sum())} of {q.numel()} q differ; first at {i}: "
                             f"{q[i].float().item()!r} != {ref_q[i].float().item()!r} (x = {x.cpu()[i].item()!r})")
    s = fp8_expand_scale(scale.double(), x.shape, g)
    xd = x.cpu().double()
    finite = (s > 0) & s.isfinite() & xd.isfinite()
    err = (q.double() * s - xd).abs()
    bound = (xd.abs() * 2.0**-4 + s * 2.0**-10) * (1 + 2.0**-20)
    assert bool(((err <= bound) | ~finite).all()), f"{what}: |q * scale - x| exceeds half an e4m3 ulp"


QUANTIZE_FP8 = register(
    OpSpec(
        name="quantize_fp8",
        family="quantize",
        summary="FP8 e4m3 quantization with fp32 scales per tensor, token, 1x128 group or 128x128 block",
        signature=("quantize_fp8(x[..., K], granularity, group_size=128, scale_ue8m0=False) -> "
                   "(q[..., K] float8_e4m3fn, scale fp32)"),
        shape_names=("M", "K", "granularity", "ue8m0"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_fp8_quantize_inputs,
        reference=quantize_fp8,
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},  # exact (check)
        # |x|, max, divide, convert: about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x once, write q (1 byte per element) and the scales (per tensor reads x twice,
        # but its fewest bytes are these).
        bytes_moved=lambda s, dt: (ELEM_BYTES[dt] + 1.0) * s[0] * s[1] + 4.0 * _fp8_scale_count(s),
        backends=_BACKENDS,
        test_shapes=FP8_TEST_SHAPES,
        bench_shapes=FP8_BENCH_SHAPES,
        peers=(reference_peer("quantize_fp8", compiled=False), reference_peer("quantize_fp8", compiled=True)),
        check=_fp8_quantize_check,
        example_shape=(130, 300, 2, 0),
        bucket_exact=("granularity", "ue8m0"),
        bad_inputs=(
            BadInput("x-int32", lambda t, d: {"x": t.ones(2, 4, device=d, dtype=t.int32)}, TypeError,
                     "argument 'x' must be float32, float16 or bfloat16, got"),
            BadInput("x-scalar", lambda t, d: {"x": t.tensor(1.0, device=d)}, ValueError, "argument 'x' must have"),
            BadInput("granularity", lambda t, d: {"x": t.ones(2, 4, device=d), "granularity": "row"}, ValueError,
                     "argument 'granularity' must be 'tensor', 'token', 'group' or 'block', got"),
            BadInput("group-size-64", lambda t, d: {"x": t.ones(2, 256, device=d), "granularity": "group",
                                                    "group_size": 64},
                     ValueError, "argument 'group_size' must be 128"),
            BadInput("block-3d", lambda t, d: {"x": t.ones(2, 3, 256, device=d), "granularity": "block"}, ValueError,
                     "argument 'x' must be 2-D [M, K] for granularity 'block', got 3 dims"),
            BadInput("x-last-dim-strided", lambda t, d: {"x": t.ones(8, 6, device=d).t(), "granularity": "group"},
                     ValueError, "argument 'x' must be contiguous in its last dim", jax=False),
        ),
        cuda_out=lambda cuda, i, o: cuda.quantize_fp8_out(i["x"], o[0], o[1], i["granularity"], 128,
                                                          i["scale_ue8m0"]),
        outputs=("q", "scale"),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::QuantizeFp8\w+<",
                      r"rows::fp8_tensor_absmax_kernel<"),
    )
)


def _fp8_scale_count(s) -> int:
    m, k, g = s[0], s[1], s[2]
    if g == 0:
        return 1
    if g == 1:
        return m
    if g == 2:
        return m * (-(-k // FP8_GROUP))
    return (-(-m // FP8_GROUP)) * (-(-k // FP8_GROUP))


FP8_DEQUANTIZE_TOLERANCE = {"float32": (0.0, 1.2e-7), "float16": (6e-8, 5e-4), "bfloat16": (0.0, 4e-3)}


def _fp8_dequantize_inputs(shape, dtype, device, seed):
    import torch

    m, k, g = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    bits = torch.randint(0, 256, (m, k), generator=gen, device=device, dtype=torch.int32)
    bits = torch.where((bits & 0x7F) == 0x7F, bits & 0x80, bits).to(torch.uint8)  # no NaN codes
    q = bits.view(torch.float8_e4m3fn)
    granularity = FP8_GRANULARITIES[g]
    scale_shape = fp8_scale_shape((m, k), granularity, "make_inputs")
    # Scales from 1e-6 to 10 (q * scale stays inside fp16's range).
    scale = 10.0 ** (7.0 * torch.rand(scale_shape, generator=gen, device=device) - 6.0)
    return {"q": q, "scale": scale.to(torch.float32), "granularity": granularity, "dtype": getattr(torch, dtype)}


def _fp8_dequantize_check(out, ref, dtype, inputs) -> None:
    """Bit-equal to q * scale in fp32 then out's dtype, and close to the exact product."""
    import torch

    q = inputs["q"]
    what = f"dequantize_fp8/{inputs['granularity']}/{dtype}/{tuple(q.shape)}"
    assert out.dtype == getattr(torch, dtype), f"{what}: dtype {out.dtype}"
    assert out.shape == q.shape, f"{what}: shape {tuple(out.shape)}"
    want = dequantize_fp8(q, inputs["scale"], inputs["granularity"], 128, inputs["dtype"]).cpu()
    got = out.cpu()
    differ = (got != want) & ~(got.isnan() & want.isnan())
    if bool(differ.any()):
        i = tuple(int(k) for k in differ.nonzero()[0])
        raise AssertionError(f"{what}: {int(differ.sum())} of {got.numel()} outputs differ from q * scale in fp32; "
                             f"first at {i}: {got[i].item()!r} != {want[i].item()!r}")
    atol, rtol = FP8_DEQUANTIZE_TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), ref.cpu(), atol=atol, rtol=rtol, equal_nan=True)


def _fp8_dequantize_args(t, d, **change):
    args = {"q": t.zeros(4, 256, device=d, dtype=t.float8_e4m3fn), "scale": t.ones(4, 2, device=d),
            "granularity": "group", "dtype": t.bfloat16}
    return {**args, **change}


DEQUANTIZE_FP8 = register(
    OpSpec(
        name="dequantize_fp8",
        family="quantize",
        summary="FP8 e4m3 dequantization with fp32 scales per tensor, token, 1x128 group or 128x128 block",
        signature="dequantize_fp8(q[..., K] float8_e4m3fn, scale fp32, granularity, group_size=128, dtype) -> out",
        shape_names=("M", "K", "granularity"),
        dtypes=("float32", "float16", "bfloat16"),  # the output dtype
        make_inputs=_fp8_dequantize_inputs,
        reference=dequantize_fp8,
        tolerance=FP8_DEQUANTIZE_TOLERANCE,
        flops=lambda s: 1.0 * s[0] * s[1],
        bytes_moved=lambda s, dt: (1.0 + ELEM_BYTES[dt]) * s[0] * s[1] + 4.0 * _fp8_scale_count(s),
        backends=_BACKENDS,
        test_shapes=tuple((m, k, g) for g in range(4) for m, k in _FP8_BASE),
        bench_shapes=((4096, 7168, 2), (16384, 7168, 1), (7168, 4096, 3)),
        peers=(reference_peer("dequantize_fp8", compiled=False), reference_peer("dequantize_fp8", compiled=True)),
        check=_fp8_dequantize_check,
        example_shape=(130, 300, 2),
        bucket_exact=("granularity",),
        bad_inputs=(
            BadInput("q-int8", lambda t, d: _fp8_dequantize_args(t, d, q=t.zeros(4, 256, device=d, dtype=t.int8)),
                     TypeError, "argument 'q' must be float8_e4m3fn, got"),
            BadInput("scale-half", lambda t, d: _fp8_dequantize_args(t, d, scale=t.ones(4, 2, device=d).half()),
                     TypeError, "argument 'scale' must be float32, got"),
            BadInput("scale-shape", lambda t, d: _fp8_dequantize_args(t, d, scale=t.ones(4, 1, device=d)), ValueError,
                     "argument 'scale' must have shape [4, 2] for granularity 'group'"),
            BadInput("dtype-int32", lambda t, d: _fp8_dequantize_args(t, d, dtype=t.int32), TypeError,
                     "argument 'dtype' must be float32, float16 or bfloat16"),
            BadInput("group-size", lambda t, d: _fp8_dequantize_args(t, d, group_size=256), ValueError,
                     "argument 'group_size' must be 128"),
        ),
        cuda_out=lambda cuda, i, o: cuda.dequantize_fp8_out(i["q"], i["scale"], o[0], i["granularity"], 128),
        outputs=("out",),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::DequantizeFp8Row<",),
    )
)


def check_quantized_close(what: str, q, scale, ref_q, ref_scale, y, quant_dtype, granularity: str) -> None:
    """The check of a fused op's quantized output (norm or activation + quantize), whose y
    the kernels compute in fp32 to within a few ulps of the fp32 formula (approximate
    rsqrt / exp, other summation orders), so that q and the scales are held to a bound, not
    to bits: the scales within 2^-18 (relative) of the reference's (ref_scale: quantizing
    float64 y rounded to fp32), NaN and inf where it has them; q NaN (e4m3) where the
    reference's is; and q * scale within half a step of y (float64), with 2^-10 of it to
    spare: int8 scale * (0.5 + 2^-10), e4m3 2^-4 |y| (1 + 2^-10) + 2^-10 scale."""
    import torch

    q, scale, ref_q, ref_scale, y = q.cpu(), scale.cpu(), ref_q.cpu(), ref_scale.cpu(), y.cpu().double()
    assert scale.dtype == torch.float32 and scale.shape == ref_scale.shape, f"{what}: scale {tuple(scale.shape)}"
    same_class = (scale.isnan() == ref_scale.isnan()) & (scale.isinf() == ref_scale.isinf())
    assert bool(same_class.all()), f"{what}: scales NaN/inf where the reference's are not"
    close = (scale - ref_scale).abs() <= ref_scale.abs() * 2.0**-18
    assert bool((close | ~ref_scale.isfinite()).all()), (
        f"{what}: scales differ: max rel {((scale - ref_scale).abs() / ref_scale.abs()).nan_to_num().max().item():.3g}")
    s = fp8_expand_scale(scale.double(), q.shape, granularity)
    if quant_dtype == torch.float8_e4m3fn:
        assert bool((q.float().isnan() == ref_q.float().isnan()).all()), f"{what}: q NaN where the reference's is not"
        bound = y.abs() * 2.0**-4 * (1 + 2.0**-10) + s * 2.0**-10
    else:
        bound = s * (0.5 + 2.0**-10)
    qd = q.double() if quant_dtype == torch.float8_e4m3fn else q.to(torch.float64)
    judged = s.isfinite() & (s > 0) & y.isfinite()
    bad = ~((qd * s - y).abs() <= bound) & judged
    if bool(bad.any()):
        i = tuple(int(k) for k in bad.nonzero()[0])
        raise AssertionError(f"{what}: {int(bad.sum())} values off by more than half a step; first at {i}: "
                             f"q * scale = {(qd * s)[i].item()!r}, y = {y[i].item()!r}")
