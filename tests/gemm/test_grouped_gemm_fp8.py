# SPDX-License-Identifier: Apache-2.0
"""grouped_gemm_fp8 beyond the contract tests (tests/contract): both layouts x output dtypes
against the float64 reference on group sizes that matter, b K-major (the expert weights read
in place) and row-major, strided operands and scales, offsets out of range (clamped as
grouped_gemm's), rows outside every group written as 0 into a poisoned output, edge sizes,
block scales that a kernel must take per row, per 128 of K and per group (the check fails on
a kernel that takes another's), the reference's own checks, and on a GPU: every CUDA config
forced, DeepSeek-V3's expert shapes, a CUDA-graph replay on other counts, no host
synchronization, and the cuBLASLt peer meaning the op.

Every test runs each backend: Triton (without a GPU in the interpreter, on small sizes) and
CUDA (the Hopper kernel's grouped schedule with fp8 promotion: on an sm_90 GPU only).
"""

from __future__ import annotations

import pytest
import torch

from conftest import (DEVICE, HAS_GPU, HAS_NATIVE, backend_params, capture, poison_allocator,
                      poisoned_host_outputs, refill, requires_gpu, seed_for)
from gks import registry
from gks.specs.gemm import grouped_gemm_sizes, make_grouped_gemm_fp8_inputs

SPEC = registry.get("grouped_gemm_fp8")
LAYOUTS = ("contiguous", "masked")


BACKENDS = backend_params(SPEC)


def _op(backend: str):
    if backend == "cuda":
        if not HAS_NATIVE:
            pytest.skip("the gks CUDA library is not built")
        if torch.cuda.get_device_capability() != (9, 0):
            pytest.skip("the CUDA grouped GEMM runs on sm_90 only")
    elif HAS_GPU and torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("Triton's fp8 dot needs sm_89+")
    return SPEC.public(backend)


def _call(inputs, backend="triton", **kw):
    """Outputs start as NaN (poisoned allocator on a GPU, poisoned host outputs in the
    interpreter), so an element the op never writes fails the check."""
    op = _op(backend)
    a, b = inputs["a"], inputs["b"]
    poison_allocator(a[..., :1].numel() * b.shape[2] * 4, DEVICE)
    with poisoned_host_outputs((torch.float32, torch.float16, torch.bfloat16)):
        return op(**inputs, **kw)


def _check(out, inputs, what=""):
    ref = SPEC.reference(**inputs, precise=True)
    dtype = str(inputs["out_dtype"]).removeprefix("torch.")
    try:
        SPEC.check(out, ref, dtype, inputs)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _inputs(sizes, n, k, masked, *tag, rows=None, out_dtype="bfloat16", k_major=True):
    rows = max(sizes, default=0) + 3 if rows is None else rows  # masked: rows past every count
    return make_grouped_gemm_fp8_inputs(sizes, rows, n, k, out_dtype, DEVICE,
                                        seed_for("grouped_gemm_fp8", tuple(sizes), n, k, masked, *tag), masked,
                                        k_major=k_major)


SIZES = {"mixed": [5, 0, 17, 1, 40, 3], "rows-of-one": [1] * 5, "empty-ends": [0, 12, 33, 0]}


@pytest.mark.parametrize("out_dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("sizes", list(SIZES), ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layouts_match_the_float64_reference(layout, sizes, out_dtype, backend):
    # N past one 128-column block of b_scale, K past one 128-wide group of a_scale.
    inputs = _inputs(SIZES[sizes], 136, 144, layout == "masked", out_dtype=out_dtype)
    _check(_call(inputs, backend), inputs, f"{layout}/{sizes}/{out_dtype}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_b_row_major_and_k_major_give_the_same_product(layout, backend):
    masked = layout == "masked"
    k_major = _inputs([9, 0, 21], 40, 160, masked, "layout")
    row_major = _inputs([9, 0, 21], 40, 160, masked, "layout", k_major=False)
    assert k_major["b"].stride(1) == 1 and row_major["b"].stride(2) == 1
    assert torch.equal(k_major["b"].float(), row_major["b"].float())
    out_k, out_r = _call(k_major, backend), _call(row_major, backend)
    _check(out_r, row_major, f"{layout}, b row-major")
    assert torch.equal(out_k, out_r), "b's layout changed the result"


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_every_scale_is_taken_where_it_belongs(layout, backend):
    """The check fails on results from scales another row, k-group or expert holds: swapping
    two experts' b_scale, two rows' a_scale or two k-groups of a_scale gives a product the
    reference tells apart (so the passing tests mean each scale was read in its place)."""
    masked = layout == "masked"
    inputs = _inputs([20, 7, 30], 48, 272, masked, "scales")
    _check(_call(inputs, backend), inputs, f"{layout}, scales in place")
    sa, sb = inputs["a_scale"], inputs["b_scale"]
    rows = [3, 2, 1, 0, *range(4, sa.shape[-2])]  # the first four rows' (of each slab) reversed
    swaps = {
        "experts' b_scale": ("b_scale", sb[[1, 0, 2]]),
        "rows' a_scale": ("a_scale", sa[:, rows] if masked else sa[rows]),
        "k-groups of a_scale": ("a_scale", sa.flip(-1)),
    }
    for what, (name, swapped) in swaps.items():
        wrong = {**inputs, name: swapped.contiguous()}
        out = _call(wrong, backend)
        with pytest.raises(AssertionError):
            _check(out, inputs, f"{layout}, {what} swapped")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_operands_and_scales(layout, backend):
    """a with padded rows and an offset start, b's experts apart, the scales strided views
    and the group tensor too: only a's last dim must be contiguous."""
    masked = layout == "masked"
    inputs = _inputs([9, 0, 30, 4], 40, 160, masked, "strided")
    strided = dict(inputs)
    a = inputs["a"]
    a_buf = torch.zeros((*a.shape[:-1], a.shape[-1] + 32), dtype=a.dtype, device=DEVICE)
    strided["a"] = a_buf[..., 16:16 + a.shape[-1]]
    strided["a"].copy_(a)
    for name in ("a_scale", "b_scale"):
        s = inputs[name]
        buf = torch.full((*s.shape[:-1], 2 * s.shape[-1]), 1e9, device=DEVICE)
        strided[name] = buf[..., ::2]
        strided[name].copy_(s)
    groups_name = "group_counts" if masked else "group_offsets"
    g_buf = torch.full((2 * inputs[groups_name].numel(),), -99, dtype=torch.int32, device=DEVICE)
    strided[groups_name] = g_buf[::2]
    strided[groups_name].copy_(inputs[groups_name])
    _check(_call(strided, backend), inputs, f"{layout} strided")


@pytest.mark.parametrize("case,offsets", [("decreasing", [0, 20, 10, 30, 40]), ("gaps", [6, 10, 10, 20, 33])])
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_offsets_are_clamped(case, offsets, backend):
    inputs = _inputs([10, 10, 10, 10], 24, 48, False, case)
    inputs["group_offsets"] = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    _check(_call(inputs, backend), inputs, case)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("what,sizes,n,k", [("K=0", [3, 0, 5], 6, 0), ("T=0", [0, 0], 6, 16), ("G=0", [], 6, 16),
                                            ("one-row", [1], 1, 16)],
                         ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_sizes(layout, what, sizes, n, k, backend):
    inputs = _inputs(sizes, n, k, layout == "masked", what, rows=max(sizes, default=0) + 2)
    _check(_call(inputs, backend), inputs, f"{layout} {what}")


def test_the_reference_refuses_what_the_backends_refuse():
    for bad in SPEC.bad_inputs:
        if bad.gpu and not HAS_GPU:
            continue
        with pytest.raises(bad.error) as info:
            SPEC.reference(**bad.make(torch, DEVICE))
        assert bad.message in str(info.value), (bad.id, str(info.value))


# ---------------------------------------------------------------------------------------
# GPU only.
# ---------------------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_cuda_config(layout):
    """Each CUDA config forced, on groups across its row tiles; K and N that TMA reads in
    place and ones it cannot (a packed, b transposed)."""
    names = SPEC.config_names("cuda")
    for n, k, k_major in ((200, 272, True), (17, 48, False)):
        inputs = _inputs([70, 0, 130, 1, 300, 64], n, k, layout == "masked", "configs", k_major=k_major)
        for config, name in enumerate(names):
            _check(_call(inputs, "cuda", config=config), inputs, f"{layout}, N {n}, K {k}, config {name}")


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_deepseek_expert_shapes(layout, backend):
    groups, rows, n, k = 16, 200, 2048, 7168
    sizes = grouped_gemm_sizes(groups, rows, torch.Generator().manual_seed(seed_for("grouped_gemm_fp8", "sizes")))
    inputs = make_grouped_gemm_fp8_inputs(sizes, rows, n, k, "bfloat16", "cuda",
                                          seed_for("grouped_gemm_fp8", "deepseek"), layout == "masked")
    out = _call(inputs, backend)
    torch.cuda.synchronize()
    _check(out, inputs, f"{layout} DeepSeek-V3 experts")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_cuda_graph_replays_with_other_counts(backend):
    inputs = _inputs([40, 0, 70, 9], 96, 256, True, "graph", rows=80)
    graph, captured, _ = capture(_op(backend), inputs)
    refill(inputs, _inputs([80, 3, 0, 55], 96, 256, True, "graph-replay", rows=80))
    graph.replay()
    torch.cuda.synchronize()
    _check(captured, inputs, "masked graph replay")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
def test_no_host_synchronization(backend):
    op = _op(backend)
    inputs = _inputs([40, 0, 70, 9], 96, 256, False, "sync")
    op(**inputs)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = op(**inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _check(out, inputs, "without synchronizing")


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_cublaslt_peer_means_the_op(layout):
    peer = SPEC.peers[0].make()
    inputs = _inputs([128, 0, 256], 256, 512, layout == "masked", "peer", rows=256)
    try:
        out = peer(**inputs)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"cuBLASLt's blockwise fp8 GEMM does not run this here: {str(e)[:200]}")
    _check(out, inputs, f"{layout} cuBLASLt per group")
