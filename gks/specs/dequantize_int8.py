# SPDX-License-Identifier: Apache-2.0
"""INT8 dequantization: out = q * scale (an fp32 product) in the dtype asked.

The spec's dtype is the output dtype. Outputs must equal the fp32-formula reference bit for
bit, and lie within half an ulp of the output dtype (plus the fp32 rounding) of the exact
product."""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, OpSpec, reference_peer, register

# Against the exact (float64) product: the fp32 product is within 2^-24 relative, the cast
# to fp16/bf16 adds half an ulp (2^-11 / 2^-8 relative); atol covers fp16 subnormals.
TOLERANCE = {"float32": (0.0, 1.2e-7), "float16": (6e-8, 5e-4), "bfloat16": (0.0, 4e-3)}


def make_inputs(shape, dtype, device, seed):
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    q = torch.randint(-127, 128, (m, n), generator=gen, device=device, dtype=torch.int8)
    # Scales from 1e-6 to 10 (q * scale stays inside fp16's range).
    scale = 10.0 ** (7.0 * torch.rand((m, 1), generator=gen, device=device) - 6.0)
    return {"q": q, "scale": scale.to(torch.float32), "dtype": getattr(torch, dtype)}


def _reference(q, scale, dtype, *, precise=False):
    from gks.reference import dequantize_int8

    return dequantize_int8(q, scale, dtype, precise=precise)


def check(out, ref, dtype, inputs) -> None:
    """Bit-equal to the fp32-formula reference, and close to the exact product."""
    import torch

    from gks.reference import dequantize_int8

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
    atol, rtol = TOLERANCE[dtype]
    torch.testing.assert_close(got.double(), ref.cpu(), atol=atol, rtol=rtol, equal_nan=True)




SPEC = register(
    OpSpec(
        name="dequantize_int8",
        summary="INT8 dequantization with per-row fp32 scales",
        signature="dequantize_int8(q[..., N] int8, scale[..., 1] fp32, dtype) -> out[..., N] (dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),  # the output dtype
        make_inputs=make_inputs,
        reference=_reference,
        tolerance=TOLERANCE,
        # one multiply per element (the int8 -> fp32 conversion not counted).
        flops=lambda s: 1.0 * s[0] * s[1],
        # read q (1 byte per element) and one fp32 scale per row, write out once.
        bytes_moved=lambda s, dt: (1.0 + ELEM_BYTES[dt]) * s[0] * s[1] + 4.0 * s[0],
        backends=(
            Backend("cuda", "gks._torch_ops:dequantize_int8", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:dequantize_int8", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", "gks.pallas._bridge:dequantize_int8", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        test_shapes=(
            (1, 1), (7, 1), (5, 31), (3, 1000), (33, 64), (3, 4096), (2, 4112), (2, 32768),
            (1, 262144), (0, 64), (3, 0),
        ),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(reference_peer("dequantize_int8", compiled=False), reference_peer("dequantize_int8", compiled=True)),
        check=check,
    )
)
