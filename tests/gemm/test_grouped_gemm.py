# SPDX-License-Identifier: Apache-2.0
"""grouped_gemm beyond the contract tests (tests/contract): both layouts x both dtypes
against the float64 reference on group sizes that matter (empty groups, one group, groups
of one row, groups across row tiles), offsets and counts out of range (clamped, as the spec
says), rows outside every group written as 0 into a poisoned output, strided operands, the
edge sizes (K = 0, T = 0, G = 0), the reference's own checks, the cuBLAS-loop peer, and on
a GPU: DeepSeek-V3's expert shapes, a CUDA-graph replay on other offsets and counts, no
host synchronization, and offsets into b past element 2^31.

Every test runs each backend: Triton (without a GPU in the interpreter, which conftest sets
up with TRITON_INTERPRET=1, on small sizes) and CUDA (the Hopper kernel's grouped schedule:
on an sm_90 GPU only, every config forced too). GPU-only tests carry @requires_gpu.
"""

from __future__ import annotations

import pytest
import torch

from conftest import (DEVICE, HAS_GPU, HAS_NATIVE, backend_params, capture, poison_allocator,
                      poisoned_host_outputs, refill, requires_gpu, seed_for)
import gks.triton
from gks import registry
from gks.specs.gemm import (check_grouped_gemm, gemm_check, grouped_gemm_bounds, grouped_gemm_sizes,
                            make_grouped_gemm_inputs)

SPEC = registry.get("grouped_gemm")
DTYPES = ("float16", "bfloat16")
LAYOUTS = ("contiguous", "masked")


BACKENDS = backend_params(SPEC)


def _op(backend: str):
    """gks.<op> as `backend` has it; the CUDA backend (the Hopper kernel) only on sm_90."""
    if backend == "cuda":
        if not HAS_NATIVE:
            pytest.skip("the gks CUDA library is not built")
        if torch.cuda.get_device_capability() != (9, 0):
            pytest.skip("the CUDA grouped GEMM runs on sm_90 only (this GPU refuses it, as tested below)")
    return SPEC.public(backend)


def _call(inputs, backend="triton", **kw):
    """The op's outputs start as NaN, so an element it never writes fails the check: on a
    GPU through the caching allocator, on the host for the 16-bit tensors the op allocates."""
    op = _op(backend)
    a, b = inputs["a"], inputs["b"]
    poison_allocator(a[..., :1].numel() * b.shape[2] * a.element_size(), DEVICE)
    with poisoned_host_outputs():
        return op(**inputs, **kw)


def _check(out, inputs, dtype, what=""):
    ref = SPEC.reference(**inputs, precise=True)
    try:
        SPEC.check(out, ref, dtype, inputs)
    except AssertionError as e:
        raise AssertionError(f"{what}: {e}") from None


def _inputs(sizes, n, k, dtype, masked, *tag, rows=None):
    rows = max(sizes, default=0) + 3 if rows is None else rows  # masked: rows past every count
    return make_grouped_gemm_inputs(sizes, rows, n, k, dtype, DEVICE,
                                    seed_for("grouped_gemm", tuple(sizes), n, k, dtype, masked, *tag), masked)


# Group sizes across the interpreter's 32-row tiles (and a GPU's 64 / 128): empty groups
# (first, inside, last), one group, groups of one row, a group spanning several tiles.
SIZES = {
    "mixed": [5, 0, 17, 1, 40, 3],
    "one-group": [37],
    "rows-of-one": [1] * 9,
    "empty-ends": [0, 12, 33, 0],
    "all-empty": [0, 0, 0],
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", list(SIZES), ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_layouts_match_the_float64_reference(layout, sizes, dtype, backend):
    inputs = _inputs(SIZES[sizes], 24, 40, dtype, layout == "masked")
    out = _call(inputs, backend)
    _check(out, inputs, dtype, f"{layout}/{sizes}/{dtype}")


def test_bounds_read_group_offsets_as_varlen_bounds_reads_cu_seqlens():
    """One clamping rule for packed rows in the library (gks.specs.attention.varlen_bounds)."""
    from gks.specs.attention import varlen_bounds

    gen = torch.Generator().manual_seed(seed_for("grouped_gemm", "bounds"))
    for total in (0, 1, 40):
        for _ in range(20):
            offsets = torch.randint(-5, total + 6, (6,), generator=gen, dtype=torch.int32)
            expected = [(q0, q1) for q0, q1, _, _ in varlen_bounds(offsets, offsets, None, total, total)]
            assert grouped_gemm_bounds(offsets, total) == expected, offsets.tolist()


# Offsets outside [0, T] or in no order, T = 40, G = 4: each with the bounds the kernels must
# read and the group whose product each stretch of rows must hold (-1: none, written as 0).
BAD_OFFSETS = {
    # g2 = [10, 30) overlaps g0 = [0, 20): its rows 10..19 take the later group's product.
    "decreasing": ([0, 20, 10, 30, 40], [(0, 20), (20, 20), (10, 30), (30, 40)],
                   [(0, 10, 0), (10, 30, 2), (30, 40, 3)]),
    "negative": ([-7, 5, -3, 38, 40], [(0, 5), (5, 5), (0, 38), (38, 40)],
                 [(0, 38, 2), (38, 40, 3)]),
    "past-T": ([0, 10, 55, 70, 90], [(0, 10), (10, 40), (40, 40), (40, 40)],
               [(0, 10, 0), (10, 40, 1)]),
    "gaps": ([6, 10, 10, 20, 33], [(6, 10), (10, 10), (10, 20), (20, 33)],
             [(0, 6, -1), (6, 10, 0), (10, 20, 2), (20, 33, 3), (33, 40, -1)]),
    "all-past-T": ([50, 60, 70, 80, 90], [(40, 40)] * 4, [(0, 40, -1)]),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", list(BAD_OFFSETS))
@pytest.mark.parametrize("backend", BACKENDS)
def test_bad_offsets_are_clamped(case, dtype, backend):
    offsets, bounds, stretches = BAD_OFFSETS[case]
    inputs = _inputs([10, 10, 10, 10], 24, 40, dtype, False, case)
    inputs["group_offsets"] = torch.tensor(offsets, dtype=torch.int32, device=DEVICE)
    assert grouped_gemm_bounds(inputs["group_offsets"], 40) == bounds
    out = _call(inputs, backend)
    _check(out, inputs, dtype, case)
    # The same, stretch by stretch, without the spec's row-owner bookkeeping.
    a, b = inputs["a"], inputs["b"]
    for lo, hi, g in stretches:
        if g < 0:
            assert bool((out[lo:hi] == 0).all()), f"{case}: rows {lo}..{hi} must be 0"
        else:
            ref = a[lo:hi].double() @ b[g].double()
            gemm_check(out[lo:hi], ref, a[lo:hi], b[g], dtype, "mma", f"{case}: rows {lo}..{hi}, group {g}")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_counts_past_m_max_and_negative_are_clamped(dtype, backend):
    inputs = _inputs([0, 0, 0, 0], 24, 40, dtype, True, rows=9)
    inputs["group_counts"] = torch.tensor([-3, 0, 7, 50], dtype=torch.int32, device=DEVICE)
    out = _call(inputs, backend)
    _check(out, inputs, dtype, "counts")
    a, b = inputs["a"], inputs["b"]
    assert bool((out[:2] == 0).all()) and bool((out[2, 7:] == 0).all())
    for g, m in ((2, 7), (3, 9)):
        gemm_check(out[g, :m], a[g, :m].double() @ b[g].double(), a[g, :m], b[g], dtype, "mma", f"group {g}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_finite_values_stay_in_their_group(backend):
    """A NaN in b[g] reaches only group g's rows (the rows of the other groups in the same
    tile, and the rows past a count, multiply it by 0: NaN, never stored); a NaN in a row
    past its group's count is never read."""
    dtype = "float16"
    inputs = _inputs([5, 3, 20], 24, 40, dtype, False, "nan")
    inputs["b"][1, 7, 4] = float("nan")
    out = _call(inputs, backend)
    _check(out, inputs, dtype, "contiguous, NaN in b[1]")
    assert bool(out[5:8, 4].isnan().all()) and not bool(out[:5].isnan().any()) and not bool(out[8:].isnan().any())
    masked = _inputs([5, 3, 20], 24, 40, dtype, True, "nan")
    masked["b"][1, 7, 4] = float("inf")
    masked["a"][0, 6, 3] = float("nan")  # row 6 of group 0, past its count of 5
    out = _call(masked, backend)
    _check(out, masked, dtype, "masked, inf in b[1], NaN past a count")
    assert not bool(out[0].isnan().any()) and bool((out[1, 3:] == 0).all())


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_strided_operands(layout, backend):
    """a and b with padded rows and offset starts, b's groups apart, the group tensor a
    strided view: the kernels take any strides but the last."""
    dtype = "bfloat16"
    masked = layout == "masked"
    inputs = _inputs([9, 0, 30, 4], 20, 36, dtype, masked, "strided")
    strided = dict(inputs)
    a, b = inputs["a"], inputs["b"]
    a_buf = torch.full((*a.shape[:-1], a.shape[-1] + 8), 7.0, dtype=a.dtype, device=DEVICE)
    strided["a"] = a_buf[..., 3:3 + a.shape[-1]]
    strided["a"].copy_(a)
    b_buf = torch.full((b.shape[0] + 1, b.shape[1], b.shape[2] + 5), 7.0, dtype=b.dtype, device=DEVICE)
    strided["b"] = b_buf[1:, :, 2:2 + b.shape[2]]
    strided["b"].copy_(b)
    name = "group_counts" if masked else "group_offsets"
    groups = inputs[name]
    g_buf = torch.full((2 * groups.numel(),), -99, dtype=torch.int32, device=DEVICE)
    strided[name] = g_buf[::2]
    strided[name].copy_(groups)
    assert strided["a"].stride(0) != a.stride(0) and strided[name].stride(0) == 2
    out = _call(strided, backend)
    _check(out, inputs, dtype, f"{layout} strided")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("what,sizes,n,k", [
    ("K=0", [3, 0, 5], 6, 0), ("N=1", [3, 0, 5], 1, 17), ("T=0", [0, 0], 6, 8), ("G=0", [], 6, 8),
    ("one-row", [1], 1, 1),
], ids=lambda v: v if isinstance(v, str) else None)
@pytest.mark.parametrize("backend", BACKENDS)
def test_edge_sizes(layout, what, sizes, n, k, backend):
    masked = layout == "masked"
    inputs = _inputs(sizes, n, k, "float16", masked, what, rows=max(sizes, default=0) + 2)
    if what == "G=0" and not masked:
        # Rows but no group: every row is in no group, written as 0.
        inputs["a"] = torch.randn(5, k, device=DEVICE).half()
    out = _call(inputs, backend)
    _check(out, inputs, "float16", f"{layout} {what}")


def test_the_reference_refuses_what_the_backends_refuse():
    """The checks live in the spec (check_grouped_gemm): the reference raises the bad-input
    table's errors too."""
    for bad in SPEC.bad_inputs:
        if bad.gpu and not HAS_GPU:
            continue
        with pytest.raises(bad.error) as info:
            SPEC.reference(**bad.make(torch, DEVICE))
        assert bad.message in str(info.value), (bad.id, str(info.value))


def test_more_bad_input():
    op = gks.triton.grouped_gemm
    a, b = torch.randn(6, 8, device=DEVICE).half(), torch.randn(3, 8, 5, device=DEVICE).half()
    with pytest.raises(TypeError, match="argument 'group_offsets' must be a torch.Tensor, got list"):
        op(a, b, group_offsets=[0, 2, 4, 6])
    with pytest.raises(ValueError, match=r"argument 'group_offsets' must have shape \[G \+ 1\] = \[4\]"):
        op(a, b, group_offsets=torch.zeros(1, 4, dtype=torch.int32, device=DEVICE))
    with pytest.raises(TypeError, match="argument 'b' must have the dtype of 'a'"):
        op(a, b.float(), group_offsets=torch.zeros(4, dtype=torch.int32, device=DEVICE))
    # Sizes past int32 are refused from the metadata alone (meta tensors hold no memory).
    big = torch.empty(2**31, 8, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="every dim of 'a' and 'b' must be below 2\\^31"):
        check_grouped_gemm(big, b.to("meta"), torch.zeros(4, dtype=torch.int32, device="meta"), None, "op")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_cublas_loop_peer_means_the_op(layout, dtype):
    """The bench's loop of torch.matmul calls computes what the op computes (its timings
    compare like with like), on mixed groups too."""
    peer = next(p for p in SPEC.peers if "per group" in p.name).make()
    inputs = _inputs([5, 0, 17, 1], 24, 40, dtype, layout == "masked", "peer")
    out = peer(**inputs)
    _check(out, inputs, dtype, f"{layout} cuBLAS loop")
    if layout == "contiguous":  # and where offsets leave gaps or overlap
        for case in ("decreasing", "gaps"):
            bad = _inputs([10, 10, 10, 10], 24, 40, dtype, False, "peer", case)
            bad["group_offsets"] = torch.tensor(BAD_OFFSETS[case][0], dtype=torch.int32, device=DEVICE)
            with poisoned_host_outputs():
                out = peer(**bad)
            _check(out, bad, dtype, f"cuBLAS loop, {case} offsets")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_grouped_mm_peer_means_the_op_on_full_groups(layout, dtype):
    """torch._grouped_mm as the bench calls it (offs = group_offsets[1:]; the masked layout
    as a batched product of every row) computes the op where every group is full, as at the
    bench shapes."""
    peer = next(p for p in SPEC.peers if "_grouped_mm" in p.name).make()
    inputs = _inputs([16, 16, 16], 40, 48, dtype, layout == "masked", "grouped_mm", rows=16)
    try:
        out = peer(**inputs)
    except RuntimeError as e:  # e.g. a GPU its kernels are not built for: the bench says so
        if not HAS_GPU:
            raise
        pytest.skip(f"torch._grouped_mm does not run this here: {str(e)[:200]}")
    _check(out, inputs, dtype, f"{layout} torch._grouped_mm")


# ---------------------------------------------------------------------------------------
# GPU only.
# ---------------------------------------------------------------------------------------

# DeepSeek-V3's experts (up: 7168 -> 2048, down: 2048 -> 7168), fewer of them, mixed sizes
# up to M rows a group. (The contract tests' shapes with masked = 0 all run in the
# interpreter, so the large contiguous ones are here.)
LARGE = [(8, 300, 2048, 7168), (32, 200, 7168, 2048), (16, 129, 2048, 7168)]


@requires_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", LARGE, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("backend", BACKENDS)
def test_deepseek_expert_shapes(shape, layout, dtype, backend):
    groups, rows, n, k = shape
    gen = torch.Generator().manual_seed(seed_for("grouped_gemm", shape, "sizes"))
    sizes = grouped_gemm_sizes(groups, rows, gen)
    inputs = make_grouped_gemm_inputs(sizes, rows, n, k, dtype, "cuda", seed_for("grouped_gemm", shape, dtype),
                                      layout == "masked")
    out = _call(inputs, backend)
    torch.cuda.synchronize()
    _check(out, inputs, dtype, f"{layout} {shape}")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_cuda_graph_replays_with_other_offsets_and_counts(layout, backend):
    """Captured once, replayed after new group bounds (and values) are copied into the
    captured tensors: the kernels read the groups on the device at every replay."""
    masked = layout == "masked"
    dtype = "bfloat16"
    inputs = _inputs([40, 0, 70, 9], 96, 200, dtype, masked, "graph", rows=80 if masked else None)
    graph, captured, _ = capture(_op(backend), inputs)  # compiles off the capture
    # Other groups of the same total: emptied, grown, moved.
    other = [0, 90, 1, 28] if not masked else [80, 3, 0, 55]
    fresh = _inputs(other, 96, 200, dtype, masked, "graph-replay", rows=80 if masked else None)
    refill(inputs, fresh)
    graph.replay()
    torch.cuda.synchronize()
    _check(captured, inputs, dtype, f"{layout} graph replay")


@requires_gpu
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_no_host_synchronization(layout, backend):
    op = _op(backend)
    inputs = _inputs([40, 0, 70, 9], 96, 200, "float16", layout == "masked", "sync")
    op(**inputs)  # compiles first
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = op(**inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    _check(out, inputs, "float16", f"{layout} without synchronizing")


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", ["mixed", "decreasing", "gaps"])
def test_every_cuda_config(case, layout):
    """Each of the CUDA kernel's configs forced, on groups across its row tiles (empty ones,
    one of a row, one of several tiles), and on offsets out of order (overlapping groups,
    which the last holding a row writes) or with gaps (rows in no group, written 0); K and N
    that TMA reads in place and ones it cannot (packed first)."""
    if case != "mixed" and layout == "masked":
        pytest.skip("offsets belong to the contiguous layout")
    names = SPEC.config_names("cuda")
    for n, k in ((200, 136), (17, 33)):
        if case == "mixed":
            inputs = _inputs([70, 0, 130, 1, 300, 64], n, k, "bfloat16", layout == "masked", "configs")
        else:
            inputs = _inputs([10, 10, 10, 10], n, k, "bfloat16", False, "configs", case)
            inputs["group_offsets"] = torch.tensor(BAD_OFFSETS[case][0], dtype=torch.int32, device=DEVICE)
        for config, name in enumerate(names):
            out = _call(inputs, "cuda", config=config)
            _check(out, inputs, "bfloat16", f"{layout}/{case}, N {n}, K {k}, config {name}")


@requires_gpu
@pytest.mark.parametrize("layout", LAYOUTS)
def test_many_groups_take_a_roomier_cuda_config(layout):
    """The CUDA schedule keeps 16 bytes a group in shared memory: 2000 groups leave the
    heuristic's 64-row tiles no room, so it gives way to a config that has it; forcing that
    config is refused, naming G."""
    sizes = [(g * 7) % 5 for g in range(2000)]
    inputs = _inputs(sizes, 24, 40, "bfloat16", layout == "masked", "many", rows=8)
    out = _call(inputs, "cuda")
    _check(out, inputs, "bfloat16", f"{layout}, 2000 groups")
    small = SPEC.config_names("cuda").index("grouped_64x128x64_s7_pp")
    with pytest.raises(ValueError, match="G = 2000 groups need"):
        _call(inputs, "cuda", config=small)


@requires_gpu
def test_the_cuda_backend_refuses_gpus_before_sm_90():
    if not HAS_NATIVE or torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("for a GPU other than sm_90, with the library built")
    inputs = _inputs([3, 4], 24, 40, "float16", False, "arch")
    with pytest.raises(ValueError, match="the CUDA grouped GEMM needs a compute-capability 9.0 GPU"):
        SPEC.public("cuda")(**inputs)


@requires_gpu
@pytest.mark.xdist_group("large-memory")
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_groups_of_b_past_element_2_31(layout, backend):
    """b [33, 8192, 8192] (2.2 G elements, 4.4 GB): its last group starts at element 2^31,
    one past what a 32-bit offset holds."""
    groups, k, n = 33, 8192, 8192
    dtype = torch.bfloat16
    gen = torch.Generator(device="cuda").manual_seed(seed_for("grouped_gemm", "2^31"))
    b = torch.zeros((groups, k, n), dtype=dtype, device="cuda")
    for g in (0, groups - 1):
        b[g] = torch.randn((k, n), generator=gen, device="cuda").to(dtype)
    assert (groups - 1) * k * n >= 2**31
    if layout == "masked":
        counts = torch.zeros(groups, dtype=torch.int32, device="cuda")
        counts[0], counts[-1] = 3, 16
        inputs = {"a": torch.randn((groups, 16, k), generator=gen, device="cuda").to(dtype), "b": b,
                  "group_counts": counts}
    else:
        offsets = torch.full((groups + 1,), 8, dtype=torch.int32, device="cuda")
        offsets[0], offsets[-1] = 0, 64
        inputs = {"a": torch.randn((64, k), generator=gen, device="cuda").to(dtype), "b": b,
                  "group_offsets": offsets}
    out = _call(inputs, backend)
    torch.cuda.synchronize()
    _check(out, inputs, "bfloat16", f"{layout}, b past 2^31")
    del inputs, b, out
    torch.cuda.empty_cache()
