# SPDX-License-Identifier: Apache-2.0
"""gks.gemm beyond the generic sweep: every Hopper config on its own (on sm_90), shapes off
every tile size, persistent tile loops, strided and poisoned outputs, the WMMA fallback
(misaligned operands, other GPUs), bad input, streams and graphs.

The Hopper tests need an sm_90 GPU; the fallback and validation tests run on any GPU; the
config list and the CPU-tensor message are checked without one.
"""

from __future__ import annotations

import pytest
import torch

from conftest import HAS_GPU, requires_gpu, requires_native, seed_for
import gks
from gks import _native, registry
from gks.specs.gemm import gemm_check

SPEC = registry.get("gemm")
CONFIG_NAMES = [c["name"] for c in SPEC.configs]
IS_SM90 = HAS_GPU and torch.cuda.get_device_capability() == (9, 0)
requires_sm90 = pytest.mark.skipif(not IS_SM90, reason="needs an sm_90 (Hopper) GPU")
DTYPES = ["bfloat16", "float16"]


def _inputs(shape, dtype, seed, device="cuda"):
    return SPEC.make_inputs(tuple(shape), dtype, device, seed)


def _check(out, a, b, out_dtype: str, what: str) -> None:
    ref = SPEC.reference(a, b, precise=True)
    gemm_check(out, ref, a, b, out_dtype, "mma", what)


def _poisoned_out(m, n, dtype, pad_rows=1, pad_cols=8):
    """c [m, n] inside a NaN-filled buffer with guard rows and columns around it (its
    leading dimension is n + 2 * pad_cols), and the buffer."""
    buf = torch.full((m + 2 * pad_rows, n + 2 * pad_cols), float("nan"), dtype=dtype, device="cuda")
    return buf[pad_rows : pad_rows + m, pad_cols : pad_cols + n], buf


def _assert_guard_untouched(buf, m, n, pad_rows=1, pad_cols=8):
    guard = buf.clone()
    guard[pad_rows : pad_rows + m, pad_cols : pad_cols + n] = float("nan")
    assert torch.isnan(guard).all(), "the kernel wrote outside c"


# ---------------------------------------------------------------- no GPU needed


@requires_native
def test_heuristic_picks_a_valid_config():
    mod = _native.module()
    for m, n, k, *_ in SPEC.bench_shapes + SPEC.test_shapes:
        c = int(mod.gemm_heuristic(m, n, k, 132))
        assert 0 <= c < len(CONFIG_NAMES)
    assert CONFIG_NAMES[int(mod.gemm_heuristic(8192, 8192, 8192, 132))] == "128x256x64_s4_c1"


@requires_native
def test_the_out_entry_refuses_host_tensors_before_any_cuda_call():
    # gks.gemm's own refusal is a contract test (tests/contract/test_bad_inputs.py).
    a = torch.randn(4, 8).bfloat16()
    b = torch.randn(8, 3).bfloat16()
    with pytest.raises(ValueError, match="argument 'a' must be a CUDA tensor"):
        gks.cuda.gemm_out(a, b, torch.empty(4, 3, dtype=torch.bfloat16))


def test_out_dtype_and_rank_checked_in_python():
    a = torch.randn(4, 8).bfloat16()
    b = torch.randn(8, 3).bfloat16()
    with pytest.raises(TypeError, match="argument 'out_dtype' must be None, torch.float32 or the dtype of 'a'"):
        gks.gemm(a, b, torch.float16)
    with pytest.raises(ValueError, match="argument 'a' must be a 2-D matrix"):
        gks.gemm(a.reshape(-1), b)


def test_fake_kernel_shapes():
    a = torch.empty(5, 16, dtype=torch.float16, device="meta")
    b = torch.empty(16, 9, dtype=torch.float16, device="meta")
    assert gks.gemm(a, b).shape == (5, 9) and gks.gemm(a, b).dtype == torch.float16
    assert gks.gemm(a, b, torch.float32).dtype == torch.float32


# ---------------------------------------------------------------- Hopper kernel, each config

# M, N, K off every tile size; the second has more tiles than SMs (the persistent loop
# runs several tiles per CTA, and the ring's phases carry over between tiles), an odd
# number of tile rows for every BM (the cluster configs then have an idle CTA half), and a
# partial last k-block.
CONFIG_SHAPES = [(600, 712, 1000), (2000, 2056, 520), (1, 8, 8), (129, 136, 72)]


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("config", range(len(CONFIG_NAMES)), ids=CONFIG_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("out_f32", [False, True], ids=["out_in_dtype", "out_f32"])
@pytest.mark.parametrize("shape", CONFIG_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_each_config(config, dtype, out_f32, shape):
    m, n, k = shape
    inputs = _inputs(shape, dtype, seed_for("hopper-config", config, dtype, shape))
    a, b = inputs["a"], inputs["b"]
    out_dtype = torch.float32 if out_f32 else a.dtype
    c, buf = _poisoned_out(m, n, out_dtype)
    assert gks.cuda.gemm_path(a, b, c) == "hopper"
    gks.cuda.gemm_out(a, b, c, config)
    torch.cuda.synchronize()
    _check(c, a, b, str(out_dtype).removeprefix("torch."), f"{CONFIG_NAMES[config]} {shape}")
    _assert_guard_untouched(buf, m, n)


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("config", range(len(CONFIG_NAMES)), ids=CONFIG_NAMES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_config_tma_store_epilogue(config, dtype):
    # Enough tiles that no config splits K on a 132-SM GPU, so a 16-bit c aligned to 16
    # bytes goes out through TMA stores (where the config has room for their buffers):
    # several tiles a CTA reuse the buffers, and the last tile column ends 24 columns into
    # a sub-tile, the last row 76 rows into a tile. Guard rows and columns around c.
    m, n, k = 1100, 2008, 136
    inputs = _inputs((m, n, k), dtype, seed_for("hopper-tma-store", config, dtype))
    a, b = inputs["a"], inputs["b"]
    c, buf = _poisoned_out(m, n, a.dtype, pad_rows=2, pad_cols=16)
    gks.cuda.gemm_out(a, b, c, config)
    torch.cuda.synchronize()
    _check(c, a, b, dtype, f"{CONFIG_NAMES[config]} TMA store")
    _assert_guard_untouched(buf, m, n, pad_rows=2, pad_cols=16)


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("config", range(len(CONFIG_NAMES)), ids=CONFIG_NAMES)
def test_each_config_long_k(config):
    # Many laps of the ring within one tile, K not a multiple of 64.
    shape = (257, 264, 4104)
    inputs = _inputs(shape, "bfloat16", seed_for("hopper-long-k", config))
    out = gks.gemm(inputs["a"], inputs["b"], config=config)
    _check(out, inputs["a"], inputs["b"], "bfloat16", f"{CONFIG_NAMES[config]} long K")


STREAM_K = [i for i, c in enumerate(SPEC.configs) if c.get("stream_k")]


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("config", STREAM_K, ids=[CONFIG_NAMES[i] for i in STREAM_K])
@pytest.mark.parametrize("out_f32", [False, True], ids=["out_in_dtype", "out_f32"])
@pytest.mark.parametrize("shape", [
    (128, 1032, 8200),   # 9 tiles of 128 x 128 over up to 132 CTAs: a tile in ~15 pieces
    (200, 14336, 520),   # 224 tiles: all stream-K, ranges across tile edges, partial last k-block
    (3000, 3904, 136),   # 744 (384) tiles: whole waves data-parallel, the rest stream-K
], ids=lambda s: "x".join(map(str, s)))
def test_stream_k_pieces_add_up_in_a_fixed_order(config, out_f32, shape):
    # Every piece of a tile is added by the CTA that ends it; the order is fixed, so two
    # calls give the same bits, and nothing is written outside c.
    m, n, k = shape
    inputs = _inputs(shape, "bfloat16", seed_for("hopper-stream-k", config, shape))
    a, b = inputs["a"], inputs["b"]
    out_dtype = torch.float32 if out_f32 else a.dtype
    outs = []
    for _ in range(2):
        c, buf = _poisoned_out(m, n, out_dtype)
        assert gks.cuda.gemm_path(a, b, c) == "hopper"  # rows TMA can load: no fallback
        gks.cuda.gemm_out(a, b, c, config)
        torch.cuda.synchronize()
        _assert_guard_untouched(buf, m, n)
        outs.append(c)
    _check(outs[0], a, b, str(out_dtype).removeprefix("torch."), f"{CONFIG_NAMES[config]} {shape}")
    assert torch.equal(outs[0], outs[1]), "stream-K results differ between two calls"


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_heuristic_path_on_bench_like_shapes(dtype):
    for shape in [(128, 4096, 1024), (1024, 1032, 1024), (513, 14336, 256)]:
        inputs = _inputs(shape, dtype, seed_for("hopper-heuristic", dtype, shape))
        out = gks.gemm(inputs["a"], inputs["b"])
        _check(out, inputs["a"], inputs["b"], dtype, f"heuristic {shape}")


@requires_gpu
@requires_sm90
@requires_native
def test_strided_operands_stay_on_the_hopper_path():
    # Leading dimensions padded to a multiple of 8 elements (16 bytes): TMA can load them.
    # c has an odd leading dimension: the epilogue's scalar stores.
    m, n, k = 300, 264, 200
    a = torch.randn(m, k + 24, device="cuda").bfloat16()[:, :k]
    b = torch.randn(k, n + 8, device="cuda").bfloat16()[:, :n]
    c_buf = torch.full((m, n + 3), float("nan"), dtype=torch.bfloat16, device="cuda")
    c = c_buf[:, :n]
    assert gks.cuda.gemm_path(a, b, c) == "hopper"
    for config in range(len(CONFIG_NAMES)):
        c.fill_(float("nan"))
        gks.cuda.gemm_out(a, b, c, config)
        torch.cuda.synchronize()
        _check(c, a, b, "bfloat16", f"strided {CONFIG_NAMES[config]}")
        assert torch.isnan(c_buf[:, n:]).all(), "the kernel wrote past c's columns"


@requires_gpu
@requires_sm90
@requires_native
def test_unaligned_output_base_pointer():
    # c starts 2 bytes into its buffer: 16-byte stores are off, every element still lands.
    m, n, k = 130, 72, 64
    a = torch.randn(m, k, device="cuda").half()
    b = torch.randn(k, n, device="cuda").half()
    flat = torch.full((m * n + 1,), float("nan"), dtype=torch.half, device="cuda")
    c = flat[1:].view(m, n)
    assert gks.cuda.gemm_path(a, b, c) == "hopper"
    gks.cuda.gemm_out(a, b, c)
    torch.cuda.synchronize()
    _check(c, a, b, "float16", "unaligned c")
    assert torch.isnan(flat[0])


# ---------------------------------------------------------------- the WMMA fallback


@requires_gpu
@requires_native
@pytest.mark.parametrize("which", ["a", "b"])
def test_misaligned_leading_dim_falls_back_to_wmma(which):
    # A leading dimension of K + 1 (or N + 1) elements is not a multiple of 16 bytes: TMA
    # cannot describe it, so the WMMA kernel runs, and the result is still right.
    m, n, k = 200, 136, 264
    a = torch.randn(m, k + (1 if which == "a" else 0), device="cuda").bfloat16()[:, :k]
    b = torch.randn(k, n + (1 if which == "b" else 0), device="cuda").bfloat16()[:, :n]
    c, buf = _poisoned_out(m, n, torch.bfloat16)
    assert gks.cuda.gemm_path(a, b, c) == "wmma"
    gks.cuda.gemm_out(a, b, c, 0)  # a forced Hopper config is ignored by the fallback
    torch.cuda.synchronize()
    _check(c, a, b, "bfloat16", f"fallback ({which} leading dim)")
    _assert_guard_untouched(buf, m, n)


@requires_gpu
@requires_native
def test_misaligned_base_pointer_falls_back_to_wmma():
    m, n, k = 64, 72, 80
    flat = torch.randn(m * k + 1, device="cuda").half()
    a = flat[1:].view(m, k)  # 2 bytes past a 16-byte boundary
    b = torch.randn(k, n, device="cuda").half()
    out = torch.empty(m, n, device="cuda", dtype=torch.float32)
    assert gks.cuda.gemm_path(a, b, out) == "wmma"
    gks.cuda.gemm_out(a, b, out)
    torch.cuda.synchronize()
    _check(out, a, b, "float32", "fallback (base pointer)")


@requires_gpu
@requires_native
def test_path_matches_the_gpu():
    a = torch.randn(64, 64, device="cuda").bfloat16()
    c = torch.empty(64, 64, device="cuda").bfloat16()
    expected = "hopper" if IS_SM90 else "wmma"
    assert gks.cuda.gemm_path(a, a, c) == expected


@requires_gpu
@requires_native
@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_shapes_on_any_gpu(dtype):
    # Whichever kernel runs (K = 1 and odd K always take WMMA; the rest Hopper on sm_90).
    for shape in [(1, 1, 1), (17, 33, 1), (127, 257, 511), (1, 264, 136), (513, 128, 8)]:
        inputs = _inputs(shape, dtype, seed_for("odd", dtype, shape))
        out = gks.gemm(inputs["a"], inputs["b"], torch.float32)
        _check(out, inputs["a"], inputs["b"], "float32", f"odd {shape}")


@requires_gpu
@requires_native
def test_empty_and_zero_k():
    a = torch.randn(0, 16, device="cuda").half()
    b = torch.randn(16, 8, device="cuda").half()
    assert gks.gemm(a, b).shape == (0, 8)
    a = torch.randn(5, 0, device="cuda").half()
    b = torch.randn(0, 8, device="cuda").half()
    c, buf = _poisoned_out(5, 8, torch.float32)
    gks.cuda.gemm_out(a, b, c)
    torch.cuda.synchronize()
    assert (c == 0).all()
    _assert_guard_untouched(buf, 5, 8)


# ---------------------------------------------------------------- bad input on a GPU

# (argument named, builder of (a, b, c) on cuda, exception, message fragment)
BAD_INPUTS = [
    ("a", lambda: (torch.randn(4, 8, device="cuda"), torch.randn(8, 3, device="cuda"), None),
     TypeError, "argument 'a' must be float16 or bfloat16, got float32"),
    ("b", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(8, 3, device="cuda").bfloat16(), None),
     TypeError, "argument 'b' must have the dtype of 'a'"),
    ("b", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(9, 3, device="cuda").half(), None),
     ValueError, r"argument 'b' must have shape \[K, N\] with K = 8"),
    ("b", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(3, 8, device="cuda").half().t(), None),
     ValueError, "argument 'b' must be row-major"),
    ("c", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(8, 3, device="cuda").half(),
                   torch.empty(4, 3, device="cuda", dtype=torch.bfloat16)),
     TypeError, "argument 'c' must be float32 or the dtype of 'a'"),
    ("c", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(8, 3, device="cuda").half(),
                   torch.empty(4, 4, device="cuda", dtype=torch.half)),
     ValueError, r"argument 'c' must have shape \[4, 3\]"),
    ("b", lambda: (torch.randn(4, 8, device="cuda").half(), torch.randn(8, 3).half(), None),
     ValueError, "argument 'b' must be on the device of 'a'"),
]
BAD_IDS = ["a-float32", "b-dtype", "b-inner-dim", "b-transposed", "c-dtype", "c-shape", "b-on-cpu"]


@requires_gpu
@requires_native
@pytest.mark.parametrize("arg,make,exc,message", BAD_INPUTS, ids=BAD_IDS)
def test_bad_input_names_the_argument(arg, make, exc, message):
    a, b, c = make()
    if c is None:
        c = torch.empty(a.shape[0], b.shape[1], dtype=a.dtype, device="cuda")
    with pytest.raises(exc, match=message):
        gks.cuda.gemm_out(a, b, c)
        torch.cuda.synchronize()
    assert f"argument '{arg}'" in message


@requires_gpu
@requires_native
@pytest.mark.parametrize("config", [-2, len(CONFIG_NAMES)])
def test_bad_config(config):
    a = torch.randn(4, 8, device="cuda").half()
    with pytest.raises(ValueError, match="argument 'config' must be -1"):
        gks.gemm(a, a.t().contiguous(), config=config)


# ---------------------------------------------------------------- streams, graphs, torch


@requires_gpu
@requires_native
def test_side_stream_and_cuda_graph():
    a = torch.randn(384, 512, device="cuda").bfloat16()
    b = torch.randn(512, 392, device="cuda").bfloat16()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        c = gks.gemm(a, b)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            c_graph = gks.gemm(a, b)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    _check(c, a, b, "bfloat16", "side stream")
    a.copy_(torch.randn(384, 512, device="cuda").bfloat16())
    graph.replay()
    torch.cuda.synchronize()
    _check(c_graph, a, b, "bfloat16", "graph replay")


@requires_native
def test_alloc_entry_points_check_rank_and_need_a_lending_framework():
    a, b = torch.randn(4, 8).bfloat16(), torch.randn(8, 3).bfloat16()
    with pytest.raises(ValueError, match="gks.gemm: argument 'b' must be a 2-D matrix, got 1 dims"):
        gks.cuda.gemm_alloc(a, b[0], torch.bfloat16)
    with pytest.raises(ValueError, match="gks.int8_gemm: argument 'a_q' must be a 2-D matrix"):
        gks.cuda.int8_gemm_alloc(a[0], b, a, b, torch.float16)
    np = pytest.importorskip("numpy")
    with pytest.raises(ValueError, match="lends no allocator.*_out entry point"):
        gks.cuda.gemm_alloc(np.zeros((4, 8), np.float16), np.zeros((8, 3), np.float16), "float16")


@requires_gpu
@requires_native
@pytest.mark.parametrize("op", ["gemm", "int8_gemm"])
def test_native_and_python_allocation_give_the_same_output(op, monkeypatch):
    """The torch ops allocate c in the library (through PyTorch's allocator) where tvm-ffi
    lends it one, else in Python; both give the same tensor."""
    import importlib

    module = importlib.import_module("gks._torch_ops.gemm")  # the family module of both ops
    assert module.native_allocates()  # the PyTorch of the test machines lends it
    m, n, k = 129, 136, 200
    if op == "gemm":
        a = torch.randn(m, k, device="cuda").bfloat16()
        b = torch.randn(k, n, device="cuda").bfloat16()
        calls = [lambda: gks.gemm(a, b), lambda: gks.gemm(a, b, torch.float32)]
    else:
        inputs = _int8_inputs((m, n, k), "float16", seed_for("int8-alloc", m))
        inputs.pop("out_dtype", None)  # each call below asks for its own
        calls = [lambda d=d: gks.int8_gemm(**inputs, out_dtype=d)
                 for d in (torch.float16, torch.bfloat16, torch.float32)]
    native = [call() for call in calls]
    monkeypatch.setattr(module, "native_allocates", lambda: False)
    python = [call() for call in calls]
    for x, y in zip(native, python):
        assert type(x) is torch.Tensor and x.is_contiguous() and x.device == y.device
        assert x.dtype == y.dtype and x.shape == (m, n) and torch.equal(x, y)


# ---------------------------------------------------------------- int8 on the Hopper kernel

INT8_SPEC = registry.get("int8_gemm")
INT8_HOPPER = [i for i, c in enumerate(INT8_SPEC.configs) if c["kernel"] == "hopper"]
# As CONFIG_SHAPES, plus a long K (many laps of the ring within a tile).
INT8_SHAPES = [(600, 712, 1000), (2000, 2056, 520), (1, 8, 8), (129, 136, 72), (257, 264, 4104)]
B_LAYOUTS = ["k_major", "row_major", "row_major_unaligned"]


def _pad16(x: int) -> int:
    return (x + 15) // 16 * 16


def _int8_inputs(shape, out_dtype, seed, b_layout="k_major"):
    """The spec's inputs with a_q in a buffer whose rows are padded to a multiple of 16
    bytes (so TMA can load it whatever K is), and b_q laid out as asked: 'k_major' (a
    transposed view of [N, K] storage with padded rows), 'row_major' (contiguous [K, N]) or
    'row_major_unaligned' (rows of N + 3 bytes: the transpose's byte-wise reads)."""
    m, n, k = shape
    inputs = INT8_SPEC.make_inputs(shape, out_dtype, "cuda", seed)
    a_buf = torch.zeros((m, _pad16(k) + 16), dtype=torch.int8, device="cuda")
    a_buf[:, :k] = inputs["a_q"]
    inputs["a_q"] = a_buf[:, :k]
    b = inputs["b_q"]
    if b_layout == "k_major":
        b_buf = torch.zeros((n, _pad16(k) + 16), dtype=torch.int8, device="cuda")
        b_buf[:, :k] = b.t()
        inputs["b_q"] = b_buf[:, :k].t()
    elif b_layout == "row_major":
        inputs["b_q"] = b.contiguous()
    else:
        b_buf = torch.zeros((k, n + 3), dtype=torch.int8, device="cuda")
        b_buf[:, :n] = b
        inputs["b_q"] = b_buf[:, :n]
    return inputs


def _int8_out_call(inputs, c, config):
    gks.cuda.int8_gemm_out(inputs["a_q"], inputs["b_q"], inputs["a_scale"], inputs["b_scale"], c, config)


def _int8_path(inputs, c, config=-1):
    return gks.cuda.int8_gemm_path(inputs["a_q"], inputs["b_q"], inputs["a_scale"], inputs["b_scale"], c, config)


def _int8_check(out, inputs, out_dtype):
    INT8_SPEC.check(out, INT8_SPEC.reference(**inputs, precise=True), out_dtype, inputs)


@requires_native
def test_int8_configs_list_the_mma_kernel_then_the_hopper_kernel():
    kernels = [c["kernel"] for c in INT8_SPEC.configs]
    first_hopper = kernels.index("hopper")
    assert first_hopper > 0 and set(kernels[:first_hopper]) == {"mma"}
    assert INT8_HOPPER == list(range(first_hopper, len(kernels)))
    assert all(c["name"].startswith("hopper_") == (c["kernel"] == "hopper") for c in INT8_SPEC.configs)


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("config", INT8_HOPPER, ids=[INT8_SPEC.configs[i]["name"] for i in INT8_HOPPER])
@pytest.mark.parametrize("out_dtype", ["float16", "bfloat16", "float32"])
@pytest.mark.parametrize("b_layout", B_LAYOUTS)
@pytest.mark.parametrize("shape", INT8_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_int8_each_hopper_config(config, out_dtype, b_layout, shape):
    m, n, k = shape
    inputs = _int8_inputs(shape, out_dtype, seed_for("int8-hopper", config, out_dtype, shape), b_layout)
    c, buf = _poisoned_out(m, n, getattr(torch, out_dtype))
    assert _int8_path(inputs, c, config) == ("hopper" if b_layout == "k_major" else "hopper+transpose")
    _int8_out_call(inputs, c, config)
    torch.cuda.synchronize()
    _int8_check(c, inputs, out_dtype)
    _assert_guard_untouched(buf, m, n)
    # The mma.sync kernel computes the same int32 sums and applies the scales in the same
    # order: the two agree bit for bit.
    mma = torch.empty_like(c)
    _int8_out_call(inputs, mma, 0)
    torch.cuda.synchronize()
    what = f"{INT8_SPEC.configs[config]['name']} {shape} {out_dtype} {b_layout}"
    assert torch.equal(c, mma), f"{what}: differs from the mma.sync kernel"


@requires_gpu
@requires_sm90
@requires_native
def test_int8_heuristic_paths_and_strided_scales():
    # K-major b_q: the Hopper kernel at any M. Row-major b_q: transposed for the Hopper
    # kernel from M = 512 on, the mma.sync kernel below.
    for (m, n, k), b_layout, path in [((1024, 1032, 1024), "k_major", "hopper"),
                                      ((16, 1032, 1024), "k_major", "hopper"),
                                      ((512, 264, 1024), "row_major", "hopper+transpose"),
                                      ((511, 264, 1024), "row_major", "mma")]:
        inputs = _int8_inputs((m, n, k), "float16", seed_for("int8-hopper-heuristic", m, b_layout), b_layout)
        sa = torch.rand(m, 2, device="cuda")[:, 1] * 0.02 + 0.01  # 1-D, stride 2
        sb = torch.rand(3, n, device="cuda")[1:2] * 0.02 + 0.01   # [1, N], a row of a bigger tensor
        inputs["a_scale"], inputs["b_scale"] = sa, sb
        out = gks.int8_gemm(**inputs)
        _int8_check(out, inputs, "float16")
        assert _int8_path(inputs, torch.empty_like(out)) == path, (m, b_layout)


@requires_gpu
@requires_native
@pytest.mark.parametrize("b_layout", ["k_major", "row_major"])
def test_int8_misaligned_a_falls_back_to_mma_even_for_a_hopper_config(b_layout):
    # a_q's leading dimension K + 1 is not a multiple of 16 bytes: TMA cannot describe it,
    # so the mma.sync kernel runs (a forced Hopper config gives way to its heuristic); a
    # K-major b_q is transposed for it.
    m, n, k = 200, 136, 264
    inputs = _int8_inputs((m, n, k), "bfloat16", seed_for("int8-fallback", b_layout), b_layout)
    a_buf = torch.zeros((m, k + 1), dtype=torch.int8, device="cuda")
    a_buf[:, :k] = inputs["a_q"]
    inputs["a_q"] = a_buf[:, :k]
    c, buf = _poisoned_out(m, n, torch.bfloat16)
    assert _int8_path(inputs, c, INT8_HOPPER[0]) == ("mma+transpose" if b_layout == "k_major" else "mma")
    _int8_out_call(inputs, c, INT8_HOPPER[0])
    torch.cuda.synchronize()
    _int8_check(c, inputs, "bfloat16")
    _assert_guard_untouched(buf, m, n)


@requires_gpu
@requires_native
def test_int8_k_major_b_whose_rows_tma_cannot_load_goes_through_mma():
    # K-major storage with rows of K = 72 bytes (not a multiple of 16).
    m, n, k = 640, 136, 72
    inputs = INT8_SPEC.make_inputs((m, n, k), "float16", "cuda", seed_for("int8-kmajor-odd"))
    a_buf = torch.zeros((m, 96), dtype=torch.int8, device="cuda")
    a_buf[:, :k] = inputs["a_q"]
    inputs["a_q"] = a_buf[:, :k]
    assert inputs["b_q"].stride() == (1, k)
    c, buf = _poisoned_out(m, n, torch.float16)
    assert _int8_path(inputs, c) == "mma+transpose"
    _int8_out_call(inputs, c, -1)
    torch.cuda.synchronize()
    _int8_check(c, inputs, "float16")
    _assert_guard_untouched(buf, m, n)


@requires_gpu
@requires_sm90
@requires_native
@pytest.mark.parametrize("b_layout,config,path", [("row_major", -1, "hopper+transpose"),
                                                  ("k_major", 0, "mma+transpose"),
                                                  ("k_major", -1, "hopper")])
def test_int8_paths_on_a_side_stream_and_in_a_cuda_graph(b_layout, config, path):
    # Temporaries are allocated and freed in stream order on the caller's stream (from gks's
    # pool, or as graph allocation nodes while a graph is captured).
    m, n, k = 512, 264, 512
    inputs = _int8_inputs((m, n, k), "float16", seed_for("int8-graph", b_layout, config), b_layout)
    ref = INT8_SPEC.reference(**inputs, precise=True)
    c = torch.full((m, n), float("nan"), dtype=torch.float16, device="cuda")
    assert _int8_path(inputs, c, config) == path
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        out = gks.int8_gemm(**inputs, config=config)
    stream.synchronize()
    INT8_SPEC.check(out, ref, "float16", inputs)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _int8_out_call(inputs, c, config)
    for _ in range(2):
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        INT8_SPEC.check(c, ref, "float16", inputs)
