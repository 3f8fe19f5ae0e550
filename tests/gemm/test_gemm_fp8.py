# SPDX-License-Identifier: Apache-2.0
"""gemm_fp8 beyond the contract tests (tests/contract runs the registry's test shapes, the
bad-input table and a NaN / inf in each scale): every scaling x output dtype x fp8 type x b
layout on odd shapes against the float64 reference into poisoned outputs; K-major and
row-major b alike; K = 0 (c = 0 whatever the scales) and empty outputs; block scaling's
partial last group and block; strided operands and scales of any strides; a NaN in an
operand; every block shape forced; the reference's own meaning (the dequantized product)
and the claim that quantize_fp8's scales are the op's; the arch refusal below sm_89; and on
a GPU, larger shapes and a's rows past element 2^31.

Without a GPU the Triton kernel runs in the interpreter (conftest sets TRITON_INTERPRET=1)
on small sizes; GPU-only tests carry @requires_gpu.
"""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, poison_allocator, poisoned_host_outputs, requires_gpu, seed_for
import gks.triton
from gks import registry
from gks.specs.gemm import GEMM_FP8_SCALINGS, gemm_fp8_dequantized
from gks.specs.quantize import quantize_fp8

SPEC = registry.get("gemm_fp8")
OUT_DTYPES = ("bfloat16", "float16", "float32")
FP8 = {"e4m3": 0, "e5m2": 1}


def _backends():
    for b in SPEC.backends:
        marks = () if HAS_GPU or b.interpreted else pytest.mark.skip(reason=f"{b.name} has no interpreter")
        yield pytest.param(b, id=b.name, marks=marks)


def _inputs(m, n, k, scaling, out_dtype="bfloat16", fp8="e4m3", kmajor=True, *tag):
    shape = (m, n, k, GEMM_FP8_SCALINGS.index(scaling), int(kmajor), FP8[fp8])
    return SPEC.make_inputs(shape, out_dtype, DEVICE, seed_for("gemm_fp8", shape, out_dtype, *tag))


def _call(inputs, backend=None, **kw):
    """The op (gks.triton's, or `backend`'s) into outputs that start as NaN, so an element
    it never writes fails the check: on a GPU through the caching allocator, on the host by
    torch.empty itself."""
    fn = backend.load() if backend is not None else gks.triton.gemm_fp8
    m, n = inputs["a"].shape[0], inputs["b"].shape[1]
    poison_allocator(4 * m * n, DEVICE)
    with poisoned_host_outputs((torch.float32, torch.float16, torch.bfloat16)):
        return fn(**inputs, **kw)


def _check(out, inputs, what=""):
    ref = SPEC.reference(**inputs, precise=True)
    dtype = str(inputs["out_dtype"]).removeprefix("torch.")
    try:
        SPEC.check(out, ref, dtype, inputs)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


# M = 1, N = 1, primes, K = 16 (one k-step), K = 144 and 400 (a partial last 128-group),
# N = 131 and 200 (a partial last 128-block of b), tiles of the interpreter's 32 crossed.
SHAPES = [(1, 1, 16), (1, 37, 144), (7, 1, 32), (37, 131, 144), (33, 200, 400)]


@pytest.mark.parametrize("backend", list(_backends()))
@pytest.mark.parametrize("kmajor", [True, False], ids=["b-kmajor", "b-rowmajor"])
@pytest.mark.parametrize("fp8", list(FP8))
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
def test_matches_the_float64_reference(backend, scaling, out_dtype, fp8, kmajor):
    for m, n, k in SHAPES:
        inputs = _inputs(m, n, k, scaling, out_dtype, fp8, kmajor)
        out = _call(inputs, backend)
        assert out.dtype == getattr(torch, out_dtype) and tuple(out.shape) == (m, n)
        _check(out, inputs, f"{scaling}/{out_dtype}/{fp8}/kmajor={kmajor}/{(m, n, k)}")


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
def test_k_major_and_row_major_b_give_the_same_result(scaling):
    inputs = _inputs(37, 131, 144, scaling, "float32", "e4m3", True)
    assert inputs["b"].stride(0) == 1
    row_major = {**inputs, "b": inputs["b"].contiguous()}
    assert row_major["b"].stride(1) == 1
    out_k, out_r = _call(inputs), _call(row_major)
    _check(out_k, inputs, f"{scaling} K-major")
    _check(out_r, row_major, f"{scaling} row-major")
    if not HAS_GPU:  # the interpreter sums the same tiles the same way
        assert torch.equal(out_k, out_r)


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
def test_k_zero_gives_zeros_whatever_the_scales(scaling, out_dtype):
    inputs = _inputs(5, 9, 0, scaling, out_dtype)
    for name in ("a_scale", "b_scale"):
        inputs[name] = torch.full_like(inputs[name], float("nan"))
    assert tuple(inputs["a"].shape) == (5, 0)
    for fn in (gks.triton.gemm_fp8, SPEC.reference):
        out = _call(inputs) if fn is gks.triton.gemm_fp8 else fn(**inputs)
        assert out.dtype == getattr(torch, out_dtype) and tuple(out.shape) == (5, 9)
        assert bool((out == 0).all()), fn


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
@pytest.mark.parametrize("m,n", [(0, 16), (5, 0), (0, 0)])
def test_empty_outputs(scaling, m, n):
    inputs = _inputs(m, n, 144, scaling)
    out = _call(inputs)
    assert tuple(out.shape) == (m, n) and out.dtype == torch.bfloat16


@pytest.mark.parametrize("k", [16, 128, 144, 256, 272])
@pytest.mark.parametrize("n", [1, 127, 129, 257])
def test_block_scaling_partial_groups_and_blocks(k, n):
    """Block scaling where the last 128-group of K (K = 144, 272: 16 wide) and the last
    128-block of N (N = 127, 129, 257) are partial, a_scale and b_scale of ceil(K / 128) and
    ceil(N / 128); against the float64 reference, whose formula is checked against the
    dequantized product below."""
    inputs = _inputs(9, n, k, "block", "float32", "e4m3", True, "partial")
    groups, blocks = -(-k // 128), -(-n // 128)
    assert tuple(inputs["a_scale"].shape) == (9, groups) and tuple(inputs["b_scale"].shape) == (groups, blocks)
    _check(_call(inputs), inputs, f"block K={k} N={n}")


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
@pytest.mark.parametrize("fp8", list(FP8))
def test_the_reference_is_the_product_of_the_dequantized_operands(scaling, fp8):
    """For finite scales the spec's formula (each group's product scaled, then summed) is the
    float64 product of a and b dequantized by quantize_fp8's rule for their scales."""
    inputs = _inputs(37, 200, 400, scaling, "float32", fp8, True, "dequantized")
    deq_a, deq_b = gemm_fp8_dequantized(inputs["a"], inputs["b"], inputs["a_scale"], inputs["b_scale"], scaling)
    ref = SPEC.reference(**inputs, precise=True)
    torch.testing.assert_close(ref, deq_a @ deq_b, rtol=1e-12, atol=1e-12)
    # And the fp32 reference within the check's bound of it.
    SPEC.check(SPEC.reference(**inputs), ref, "float32", inputs)


def test_quantize_fp8_gives_the_scales_the_op_takes():
    """a_scale is gks.quantize_fp8(x, "group")'s, [M, ceil(K / 128)]; b_scale is
    gks.quantize_fp8(x, "block")'s for the [K, N] matrix x, one per 128 x 128 block, and the
    same as the transpose of a weight w = x.t()'s block scales (the layout make_inputs uses)."""
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("gemm_fp8", "quantize"))
    x = torch.randn(300, 200, generator=gen, device=DEVICE) * 3
    a_q, a_scale = quantize_fp8(x, "group")
    assert tuple(a_scale.shape) == (300, 2)
    b_q, b_scale = quantize_fp8(x, "block")
    w_q, w_scale = quantize_fp8(x.t().contiguous(), "block")
    assert tuple(b_scale.shape) == (3, 2) and torch.equal(b_scale, w_scale.t())
    assert torch.equal(b_q.view(torch.uint8), w_q.t().view(torch.uint8))
    # The op takes them as they come: a x b = the dequantized product.
    for b, sb in ((b_q, b_scale), (w_q.t(), w_scale.t())):
        inputs = {"a": a_q[:, :192], "b": b[:192], "a_scale": a_scale, "b_scale": sb[:2], "scaling": "block",
                  "out_dtype": torch.float32}
        _check(_call(inputs), inputs, "quantize_fp8's scales")


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
def test_strided_operands_and_scales(scaling):
    """a with padded rows, b K-major with stride(1) > K or row-major with stride(0) > N, and
    the scales as views of any strides (an expanded per-tensor scale, every other element of
    a buffer, a transposed block scale)."""
    inputs = _inputs(37, 131, 144, scaling, "bfloat16", "e4m3", True, "strided")
    a, b = inputs["a"], inputs["b"]
    a_buf = torch.zeros(a.shape[0], a.shape[1] + 32, dtype=a.dtype, device=DEVICE)
    w_buf = torch.zeros(b.shape[1], b.shape[0] + 48, dtype=b.dtype, device=DEVICE)
    b_buf = torch.zeros(b.shape[0], b.shape[1] + 16, dtype=b.dtype, device=DEVICE)
    strided = dict(inputs)
    strided["a"] = a_buf[:, 16:16 + a.shape[1]]
    strided["a"].copy_(a)
    w = w_buf[:, :b.shape[0]]
    w.copy_(b.t())
    for b_view in (w.t(), b_buf[:, 3:3 + b.shape[1]]):
        b_view.copy_(b)
        strided["b"] = b_view
        for name in ("a_scale", "b_scale"):
            s = inputs[name]
            if s.numel() == 1:
                strided[name] = s.reshape(()).expand(1)
            else:
                buf = torch.full((*s.shape[:-1], 2 * s.shape[-1]), float("nan"), device=DEVICE)
                strided[name] = buf[..., ::2]
                strided[name].copy_(s)
        if scaling == "block":
            strided["b_scale"] = inputs["b_scale"].t().contiguous().t()
        assert strided["a"].stride(0) != a.shape[1]
        _check(_call(strided), inputs, f"{scaling}, b strides {tuple(b_view.stride())}")


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
@pytest.mark.parametrize("fp8", list(FP8))
def test_a_nan_operand_reaches_its_row_and_column_only(scaling, fp8):
    inputs = _inputs(37, 131, 144, scaling, "float32", fp8, True, "nan")
    a = inputs["a"].clone()
    a[3, 140] = float("nan")
    inputs["a"] = a
    out = _call(inputs)
    _check(out, inputs, f"{scaling}/{fp8}: NaN in a")
    assert bool(out[3].isnan().all()) and not bool(out[torch.arange(37) != 3].isnan().any())


@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
def test_every_block_shape_forced(scaling):
    """Each config index (the interpreter runs its own block sizes, with the config's split-K)."""
    inputs = _inputs(33, 200, 400, scaling, "bfloat16", "e4m3", True, "configs")
    names = gks.triton.gemm_config_names("gemm_fp8")
    assert names == gks.triton.gemm_fp8_config_names() and len(set(names)) == len(names) >= 2
    for config in range(len(names)):
        _check(_call(inputs, config=config), inputs, f"{scaling}, config {config} ({names[config]})")
    with pytest.raises(ValueError, match=rf"argument 'config' must be -1 .* an index below {len(names)}"):
        gks.triton.gemm_fp8(**inputs, config=len(names))


def test_the_arch_check_refuses_gpus_without_fp8_tensor_cores():
    from gks.triton.gemm import check_fp8_tensor_cores

    for cc in ((8, 9), (9, 0), (10, 0)):
        check_fp8_tensor_cores(cc, "a GPU", "gks.triton.gemm_fp8")
    for cc, name in (((8, 0), "NVIDIA A100-SXM4-80GB"), ((8, 6), "NVIDIA A10"), ((7, 5), "Tesla T4")):
        with pytest.raises(ValueError, match=rf"gks.triton.gemm_fp8: argument 'a' must be on a GPU with fp8 "
                                             rf"Tensor Cores \(sm_89 or newer\), got {name} \(sm_{cc[0]}{cc[1]}\)"):
            check_fp8_tensor_cores(cc, name, "gks.triton.gemm_fp8")


def test_the_reference_refuses_what_the_kernels_refuse():
    for bad in SPEC.bad_inputs:
        if bad.gpu and not HAS_GPU:
            continue
        with pytest.raises(bad.error, match=None) as info:
            SPEC.reference(**bad.make(torch, DEVICE))
        assert bad.message in str(info.value), (bad.id, str(info.value))
        assert str(info.value).startswith("gks.reference.gemm_fp8: "), bad.id


def test_the_spec_shapes_are_what_the_ops_key_their_tables_on():
    from gks.specs.gemm import epilogue_code, gemm_fp8_shape

    shapes = [s for s in SPEC.test_shapes if min(s[:3]) > 1]
    assert {s[3:6] for s in shapes} >= {(0, 1, 0), (1, 0, 0), (2, 1, 1)}
    for shape in shapes:
        inputs = SPEC.make_inputs(shape, "bfloat16", DEVICE, 0)
        epilogue = (epilogue_code("bias" in inputs, False, inputs.get("gated")),) if len(shape) > 6 else ()
        assert gemm_fp8_shape(inputs["a"], inputs["b"], inputs["scaling"]) + epilogue == shape, shape


@requires_gpu
@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
@pytest.mark.parametrize("shape", [(257, 520, 1040), (1000, 4096, 7168), (128, 7168, 2048), (1, 4096, 4096)])
def test_larger_shapes(scaling, shape):
    for out_dtype in OUT_DTYPES:
        inputs = _inputs(*shape, scaling, out_dtype, "e4m3", True, "large")
        _check(_call(inputs), inputs, f"{scaling}/{out_dtype}/{shape}")


@requires_gpu
@pytest.mark.parametrize("scaling", GEMM_FP8_SCALINGS)
def test_rows_of_a_past_element_2_31(scaling):
    """a [2^31 / 4096 + 3, 4096] of random e4m3 codes: its last rows start past element 2^31
    (an offset computed in 32 bits would read the wrong rows); those rows and the first
    checked against the reference."""
    m, n, k = 2**31 // 4096 + 3, 64, 4096
    gen = torch.Generator(device="cuda").manual_seed(seed_for("gemm_fp8", "past-2-31", scaling))
    bits = torch.randint(0, 256, (m, k), generator=gen, device="cuda", dtype=torch.uint8)
    bits[(bits & 0x7F) == 0x7F] = 0  # no NaN codes
    small = _inputs(8, n, k, scaling, "bfloat16", "e4m3", True, "past-2-31")
    a_scale = {"tensor": lambda: small["a_scale"],
               "row": lambda: torch.rand((m, 1), generator=gen, device="cuda") * 1e-3,
               "block": lambda: torch.rand((m, k // 128), generator=gen, device="cuda") * 1e-3}[scaling]()
    inputs = {**small, "a": bits.view(torch.float8_e4m3fn), "a_scale": a_scale}
    out = gks.triton.gemm_fp8(**inputs)
    rows = torch.tensor([0, 1, m - 4, m - 3, m - 1], device="cuda")
    picked = {**inputs, "a": inputs["a"].index_select(0, rows)}
    if scaling != "tensor":
        picked["a_scale"] = a_scale.index_select(0, rows)
    _check(out.index_select(0, rows), picked, f"{scaling}: rows past element 2^31")
    del bits, inputs, picked, out
    torch.cuda.empty_cache()
