# SPDX-License-Identifier: Apache-2.0
"""INT8 quantization, symmetric per row: scale = absmax / 127, q = rint(x / scale).

The op is defined by an fp32 formula (gks.reference.quantize_int8 gives it exactly), and
every backend matches it bit for bit: q and scale are checked for equality, not closeness.
"""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, OpSpec, reference_peer, register


def make_inputs(shape, dtype, device, seed):
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    # Rows of very different magnitudes (1e-4 to 1e3), so scales span many binades; fp16
    # rows of the small ones hold subnormals.
    row_scale = 10.0 ** (7.0 * torch.rand((m, 1), generator=gen, device=device) - 4.0)
    x = torch.randn((m, n), generator=gen, device=device, dtype=torch.float32) * row_scale
    return {"x": x.to(getattr(torch, dtype))}


def _reference(x, *, precise=False):
    from gks.reference import quantize_int8

    return quantize_int8(x, precise=precise)


def check(out, ref, dtype, inputs) -> None:
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




SPEC = register(
    OpSpec(
        name="quantize_int8",
        summary="Symmetric per-row INT8 quantization (absmax / 127 scales)",
        signature="quantize_int8(x[..., N]) -> (q[..., N] int8, scale[..., 1] fp32)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=make_inputs,
        # precise=True evaluates the same fp32 formula exactly (see gks.reference.quantize_int8).
        reference=_reference,
        # Exact equality (see `check`); no tolerance applies.
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},
        # |x|, max, divide, round (clamp): about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x once, write q (1 byte per element) and one fp32 scale per row.
        bytes_moved=lambda s, dt: (ELEM_BYTES[dt] + 1.0) * s[0] * s[1] + 4.0 * s[0],
        backends=(
            Backend("cuda", "gks._torch_ops:quantize_int8", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:quantize_int8", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", "gks.pallas._bridge:quantize_int8", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # N in {1, 31, 1000, 4096, 32768, 262144}: warp per row, block per row in registers,
        # the looped kernel, unaligned rows (N = 31, 1000), 1x1, odd row counts, empty.
        test_shapes=(
            (1, 1), (7, 1), (5, 31), (3, 1000), (33, 64), (3, 4096), (2, 4112), (2, 32768),
            (1, 262144), (0, 64), (3, 0),
        ),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(reference_peer("quantize_int8", compiled=False), reference_peer("quantize_int8", compiled=True)),
        check=check,
    )
)
