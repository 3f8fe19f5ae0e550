# SPDX-License-Identifier: Apache-2.0
"""The fused epilogue of gks.gemm and gks.gemm_fp8 (bias, row / column scales, the gated
unit of interleaved columns) beyond the registry's sweep, which already runs every config
of both ops on the epilogue test shapes with poisoned outputs:

- what the epilogue means: the gated unit is act_and_mul of the de-interleaved product, and
  the check catches a wrong activation, a dropped bias or scale (no GPU needed);
- each store path of the Hopper kernel with every part of the epilogue: TMA-store configs
  with bias and scales, the staged path (fp32 or 16-bit c, aligned or not) gated, the
  direct path with row scales alone, split-K's reduction, the WMMA fallback, K = 0, and a c
  inside a NaN-filled buffer that must stay untouched around it;
- the tensors' own layouts: bias in every dtype and strided, scales [M, 1] / [1, N] and
  strided;
- the torch op under torch.compile and opcheck with an epilogue.
"""

from __future__ import annotations

import pytest
import torch

from conftest import HAS_GPU, requires_gpu, seed_for
from gks import registry
from gks.specs import activation as act_spec
from gks.specs.gemm import GATED, apply_epilogue, epilogue_code, gemm_check

GEMM = registry.get("gemm")
FP8 = registry.get("gemm_fp8")
IS_SM90 = HAS_GPU and torch.cuda.get_device_capability() == (9, 0)
requires_sm90 = pytest.mark.skipif(not IS_SM90, reason="needs an sm_90 (Hopper) GPU")
DEVICE = "cuda" if HAS_GPU else "cpu"


def _gemm_inputs(shape, dtype="bfloat16", salt=""):
    return GEMM.make_inputs(tuple(shape), dtype, DEVICE, seed_for("epilogue", shape, dtype, salt))


def _check(out, inputs, what, out_dtype=None):
    ref = GEMM.reference(**inputs, precise=True)
    out_dtype = str(out_dtype or inputs.get("out_dtype") or inputs["a"].dtype).removeprefix("torch.")
    gemm_check(out, ref, inputs["a"], inputs["b"], out_dtype, "mma", what, epilogue=inputs)


# ---------------------------------------------------------------- no GPU needed


@pytest.mark.parametrize("gated", GATED)
def test_the_gated_unit_is_act_and_mul_of_the_deinterleaved_product(gated):
    """gemm(a, b, gated=act) with b's columns interleaved [g0, u0, g1, u1, ...] is act_and_mul
    of the product with the gates first ([g0, g1, ..., u0, u1, ...]): its layout, not its math."""
    gen = torch.Generator().manual_seed(1)
    a = torch.randn(7, 48, generator=gen, dtype=torch.float64)
    b = torch.randn(48, 20, generator=gen, dtype=torch.float64)
    bias = torch.randn(20, generator=gen)  # float32: a bias dtype the op takes
    fused = GEMM.reference(a, b, bias=bias, gated=gated, precise=True)
    halves = torch.cat([b[:, 0::2], b[:, 1::2]], dim=1)
    halves_bias = torch.cat([bias[0::2], bias[1::2]])
    plain = act_spec.act_and_mul(a @ halves + halves_bias.double(), gated, precise=True)
    torch.testing.assert_close(fused, plain, rtol=1e-12, atol=1e-12)


def test_the_order_of_the_terms():
    """y = acc * row_scale * col_scale + bias: the bias is not scaled."""
    y = torch.tensor([[2.0, 3.0]], dtype=torch.float64)
    out = apply_epilogue(y, torch.tensor([10.0, 20.0], dtype=torch.float64), torch.tensor([0.5]),
                         torch.tensor([2.0, 4.0]))
    assert out.tolist() == [[12.0, 26.0]]


@pytest.mark.parametrize("wrong", ["bias", "row_scale", "col_scale", "gated"])
def test_the_check_catches_a_wrong_epilogue(wrong):
    """An output computed without one part of the epilogue (or with another activation)
    fails the check: the epilogue bound is not so loose that it passes anything."""
    inputs = GEMM.make_inputs((33, 64, 40, 15), "float16", "cpu", 3)
    changed = dict(inputs)
    if wrong == "gated":
        changed["gated"] = "gelu"  # inputs' code 15 is gelu_tanh + bias + scales
    else:
        changed[wrong] = None
    out = GEMM.reference(**changed)
    with pytest.raises(AssertionError, match="outside the bound"):
        _check(out, inputs, wrong)


def test_the_reference_passes_its_own_check_in_every_dtype():
    for code in (1, 2, 3, 4, 7, 11, 15):
        for dtype in ("float16", "bfloat16"):
            inputs = GEMM.make_inputs((17, 40, 24, code), dtype, "cpu", code)
            _check(GEMM.reference(**inputs), inputs, f"code {code} {dtype}")
            _check(GEMM.reference(**inputs, out_dtype=torch.float32), inputs, f"code {code} fp32", "float32")


def test_epilogue_codes_round_trip():
    from gks.specs.gemm import epilogue_parts

    for bias in (False, True):
        for scales in (False, True):
            for gated in (None, *GATED):
                assert epilogue_parts(epilogue_code(bias, scales, gated)) == (bias, scales, gated)


# ---------------------------------------------------------------- on a GPU


def _gemm(inputs, **kw):
    import gks

    return gks.gemm(**inputs, **kw)


@requires_sm90
@pytest.mark.parametrize("code", [1, 2, 3])
def test_tma_store_configs_with_bias_and_scales(code):
    """Every config on a 16-bit c whose rows TMA can store (the TMA-store epilogue where a
    config has it), with the bias and the scales."""
    inputs = _gemm_inputs((384, 392, 448, code), salt="tma")
    for config in range(len(GEMM.configs)):
        _check(_gemm(inputs, config=config), inputs, f"config {GEMM.configs[config]['name']}")


@requires_gpu
@pytest.mark.parametrize("gated", GATED)
@pytest.mark.parametrize("out_f32", [False, True], ids=["out_16bit", "out_f32"])
@pytest.mark.parametrize("aligned", [True, False], ids=["aligned", "unaligned"])
def test_gated_on_every_store_path(gated, out_f32, aligned):
    """The gated unit (with the bias and scales) in fp32 and 16-bit, on a c whose rows are
    16-byte aligned and on one whose are not, every config, c inside a NaN buffer whose
    guard cells must stay NaN. On the Hopper kernel an aligned 16-bit c takes the TMA
    stores for silu and gelu_tanh (store_atom_tma_gated) and the staged path for gelu; the
    others stage, with vector or scalar stores at the end."""
    import gks.cuda

    m, n, k = 200, 264, 520
    inputs = _gemm_inputs((m, n, k, epilogue_code(True, True, gated)), salt=f"paths{out_f32}{aligned}")
    dt = torch.float32 if out_f32 else inputs["a"].dtype
    configs = range(len(GEMM.configs)) if IS_SM90 else [-1]
    # c starts `left` elements into its row of the buffer, whose rows are n / 2 + left +
    # right long: aligned, 16 bytes in and a 16-byte multiple long (what a tensor map needs).
    left, right = (8, 4) if aligned else (3, 3)
    assert not aligned or (n // 2 + left + right) * dt.itemsize % 16 == 0
    for config in configs:
        buf = torch.full((m + 2, n // 2 + left + right), float("nan"), dtype=dt, device="cuda")
        c = buf[1:1 + m, left:left + n // 2]
        gks.cuda.gemm_out(inputs["a"], inputs["b"], c, config, bias=inputs["bias"], row_scale=inputs["row_scale"],
                          col_scale=inputs["col_scale"], gated=gated)
        _check(c, inputs, f"config {config} {gated} aligned={aligned}", str(dt).removeprefix("torch."))
        guard = buf.clone()
        guard[1:1 + m, left:left + n // 2] = float("nan")
        assert bool(guard.isnan().all()), f"config {config}: the kernel wrote outside c"


@requires_gpu
def test_row_scales_alone_on_the_direct_path():
    """Row scales alone keep the direct stores (fp32 c: no TMA stores), every config."""
    inputs = _gemm_inputs((200, 264, 520, 2), salt="direct")
    inputs["col_scale"] = None
    configs = range(len(GEMM.configs)) if IS_SM90 else [-1]
    for config in configs:
        _check(_gemm(inputs, out_dtype=torch.float32, config=config), inputs, f"config {config}", "float32")


@requires_gpu
@pytest.mark.parametrize("bias_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_bias_dtypes_and_strides(bias_dtype):
    inputs = _gemm_inputs((129, 264, 200, 5), salt=str(bias_dtype))
    wide = torch.randn(2 * 264, device="cuda").to(bias_dtype)
    inputs["bias"] = wide[::2]  # stride 2
    _check(_gemm(inputs), inputs, f"bias {bias_dtype} strided")
    inputs["bias"] = wide[:264].clone()
    _check(_gemm(inputs), inputs, f"bias {bias_dtype}")


@requires_gpu
def test_scale_layouts():
    inputs = _gemm_inputs((130, 136, 64, 2), salt="layouts")
    m, n = 130, 136
    rows = torch.rand(m, 3, device="cuda") + 0.5
    cols = torch.rand(3, n, device="cuda") + 0.5
    for row_scale, col_scale in ((rows[:, :1], cols[:1, :]), (rows[:, 1], cols[2]), (rows[:, 0].clone(), None),
                                 (None, cols[1].clone())):
        inputs["row_scale"], inputs["col_scale"] = row_scale, col_scale
        _check(_gemm(inputs), inputs, f"row {None if row_scale is None else tuple(row_scale.shape)}")


@requires_gpu
@pytest.mark.parametrize("shape", [(16, 264, 4096), (8, 1000, 8192)], ids=["16x264x4096", "8x1000x8192"])
def test_split_k_reduction_takes_the_epilogue(shape):
    """Outputs of a few tiles and a long K split K: the reduction kernel applies the epilogue
    (every part, gated) to the summed partials."""
    for code in (3, 7):
        inputs = _gemm_inputs((*shape, code), salt="splitk")
        _check(_gemm(inputs), inputs, f"{shape} code {code}")


@requires_gpu
def test_wmma_fallback_and_k0():
    import gks.cuda

    inputs = _gemm_inputs((129, 136, 263, 15), salt="wmma")  # K = 263: a's rows unaligned
    assert gks.cuda.gemm_path(inputs["a"], inputs["b"], torch.empty(129, 136, dtype=inputs["a"].dtype,
                                                                     device="cuda")) == "wmma"
    _check(_gemm(inputs), inputs, "wmma fallback")
    inputs = _gemm_inputs((5, 24, 0, 7), salt="k0")
    out = _gemm(inputs)
    ref = GEMM.reference(**inputs)  # the epilogue of a zero product: act(bias_g) * bias_u
    torch.testing.assert_close(out, ref, rtol=1e-2, atol=1e-3)
    assert bool((out != 0).any())


@requires_sm90
@pytest.mark.parametrize("scaling", ["tensor", "row", "block"])
def test_gemm_fp8_gated_on_both_store_paths(scaling):
    """gemm_fp8's epilogue (bias and gated, on top of its scaling) on a c that TMA can
    store (rows 16 bytes in, 288 bytes long) and on one it cannot (staged), every config."""
    import gks.cuda
    from gks.specs.gemm import GEMM_FP8_SCALINGS

    shape = (130, 264, 400, GEMM_FP8_SCALINGS.index(scaling), 1, 0, epilogue_code(True, False, "silu"))
    inputs = FP8.make_inputs(shape, "bfloat16", "cuda", seed_for("fp8 epilogue", scaling))
    ref = FP8.reference(**inputs, precise=True)
    for config in range(len(FP8.configs)):
        for left, right in ((8, 4), (3, 3)):
            buf = torch.full((130, 132 + left + right), float("nan"), dtype=torch.bfloat16, device="cuda")
            c = buf[:, left:left + 132]
            gks.cuda.gemm_fp8_out(inputs["a"], inputs["b"], inputs["a_scale"], inputs["b_scale"], c, scaling,
                                  config, bias=inputs["bias"], gated="silu")
            FP8.check(c, ref, "bfloat16", inputs)
            guard = buf.clone()
            guard[:, left:left + 132] = float("nan")
            assert bool(guard.isnan().all()), f"config {config}: the kernel wrote outside c"


@requires_gpu
def test_torch_compile_and_opcheck_with_an_epilogue():
    import gks

    inputs = _gemm_inputs((64, 136, 72, 7), dtype="float16", salt="compile")
    compiled = torch.compile(lambda a, b, bias, rs, cs: gks.gemm(a, b, bias=bias, row_scale=rs, col_scale=cs,
                                                                  gated="silu"), fullgraph=True)
    out = compiled(inputs["a"], inputs["b"], inputs["bias"], inputs["row_scale"], inputs["col_scale"])
    assert out.shape == (64, 68)
    _check(out, inputs, "torch.compile")
    torch.library.opcheck(gks.gemm.op, (inputs["a"], inputs["b"], None, -1, inputs["bias"], inputs["row_scale"],
                                        inputs["col_scale"], "silu"))
