# SPDX-License-Identifier: Apache-2.0
"""GEMM-specific tests beyond the contract tests (tests/contract): every compiled
tile config on its own, padded and misaligned operands, output dtypes, poisoned outputs
through the raw *_out entry points, K = 0 / M = 0, the
int8 path from float inputs through quantization, and the error messages.

GPU-only tests carry @requires_gpu / @requires_native; the Triton and Pallas ports and the
argument checks that fail before any launch also run on a CPU-only machine.
"""

from __future__ import annotations

import pytest
import torch

from conftest import DEVICE, HAS_GPU, HAS_NATIVE, requires_gpu, requires_native, seed_for
from gks import registry

KERNELS = ("sgemm", "wmma_gemm", "int8_gemm")
# Shapes that cross every tile edge of every config (block M/N of 32..256, K of 8..128),
# plus M = 1, K = 1 and one larger K.
CONFIG_SHAPES = ((1, 1, 1), (1, 300, 257), (129, 135, 263), (257, 513, 96), (200, 70, 1),
                 (64, 256, 1100))


def _spec(kernel):
    return registry.get(kernel)


def _inputs(kernel, shape, dtype, *tag):
    return _spec(kernel).make_inputs(shape, dtype, DEVICE, seed_for(kernel, dtype, shape, *tag))


def _check(kernel, out, inputs, dtype):
    spec = _spec(kernel)
    spec.check(out, spec.reference(**inputs, precise=True), dtype, inputs)


def _gks_op(kernel):
    import gks

    return getattr(gks, kernel)


def _padded(t: torch.Tensor, extra_cols: int, offset: int = 0) -> torch.Tensor:
    """A view of t with a leading dimension of cols + extra_cols, starting `offset`
    elements into its buffer (offset 1 makes the rows misaligned for 16-byte access)."""
    rows, cols = t.shape
    ld = cols + extra_cols
    buf = torch.full((rows * ld + offset + ld,), 7, dtype=t.dtype, device=t.device)
    view = buf[offset: offset + rows * ld].view(rows, ld)[:, :cols]
    view.copy_(t)
    return view


# ---------------------------------------------------------------------------------------
# Every compiled config, on its own.
# ---------------------------------------------------------------------------------------


@requires_native
@pytest.mark.parametrize("kernel", (*KERNELS, "gemm"))
def test_configs_are_the_librarys_table(kernel):
    """The spec's configs are the C++ table as the library exports it (no Python copy):
    distinct names, a tile shape and a pipeline depth each."""
    from gks import _native, cuda

    table = _native.config_table(kernel)
    assert list(_spec(kernel).configs) == list(table)
    names = [c["name"] for c in table]
    assert cuda.gemm_config_names(kernel) == names and len(set(names)) == len(names) >= 2
    for c in table:
        assert len(c["block"]) == 3 and min(c["block"]) >= 8 and c["stages"] >= 2, c


@requires_gpu
@requires_native
@pytest.mark.parametrize("shape", CONFIG_SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_config(kernel, shape):
    spec = _spec(kernel)
    op = _gks_op(kernel)
    for dtype in spec.dtypes:
        inputs = _inputs(kernel, shape, dtype)
        for index, cfg in enumerate(spec.configs):
            out = op(**inputs, config=index)
            torch.cuda.synchronize()
            try:
                _check(kernel, out, inputs, dtype)
            except AssertionError as e:
                raise AssertionError(f"config {index} ({cfg['name']}), {dtype}: {e}") from None


@requires_gpu
@requires_native
@pytest.mark.parametrize("kernel", KERNELS)
def test_every_config_unaligned_and_padded(kernel):
    """Leading dimensions with padding, and operands one element off 16-byte alignment
    (the element-wise copy paths), for every config."""
    spec = _spec(kernel)
    op = _gks_op(kernel)
    shape = (131, 77, 203)
    for dtype in spec.dtypes:
        inputs = _inputs(kernel, shape, dtype, "padded")
        names = ("a_q", "b_q") if kernel == "int8_gemm" else ("a", "b")
        for offset in (0, 1):
            strided = dict(inputs)
            for i, name in enumerate(names):
                strided[name] = _padded(inputs[name], extra_cols=5 + 3 * i, offset=offset)
            for index in range(len(spec.configs)):
                out = op(**strided, config=index)
                _check(kernel, out, inputs, dtype)


# ---------------------------------------------------------------------------------------
# Raw entry points: poisoned outputs, output strides, K = 0.
# ---------------------------------------------------------------------------------------


def _out_call(kernel, inputs, c, config=-1):
    from gks import cuda

    if kernel == "int8_gemm":
        cuda.int8_gemm_out(inputs["a_q"], inputs["b_q"], inputs["a_scale"], inputs["b_scale"], c, config)
    else:
        getattr(cuda, f"{kernel}_out")(inputs["a"], inputs["b"], c, config)


def _out_dtype(kernel, dtype):
    return torch.float32 if kernel != "int8_gemm" else getattr(torch, dtype)


@requires_gpu
@requires_native
@pytest.mark.parametrize("kernel", KERNELS)
def test_out_entry_point_writes_every_element_of_a_strided_output(kernel):
    spec = _spec(kernel)
    for dtype in spec.dtypes:
        m, n, k = 70, 203, 129
        inputs = _inputs(kernel, (m, n, k), dtype, "out")
        for offset in (0, 1):
            big = torch.full((m, n + 11 + offset), float("nan"), dtype=_out_dtype(kernel, dtype), device="cuda")
            c = big[:, offset: offset + n]
            for config in range(-1, len(spec.configs)):
                c.fill_(float("nan"))
                _out_call(kernel, inputs, c, config)
                _check(kernel, c, inputs, dtype)
            # the padding columns are never written
            assert torch.isnan(big[:, offset + n:]).all()
            if offset:
                assert torch.isnan(big[:, 0]).all()


@requires_gpu
@requires_native
@pytest.mark.parametrize("kernel", KERNELS)
def test_k_zero_gives_zeros_and_empty_outputs_are_fine(kernel):
    dtype = _spec(kernel).dtypes[0]
    inputs = _inputs(kernel, (5, 7, 0), dtype, "k0")
    c = torch.full((5, 7), float("nan"), dtype=_out_dtype(kernel, dtype), device="cuda")
    _out_call(kernel, inputs, c)
    assert (c == 0).all()
    for shape in ((0, 7, 3), (5, 0, 3)):
        out = _gks_op(kernel)(**_inputs(kernel, shape, dtype, "empty"))
        assert out.shape == shape[:2]


@requires_gpu
@requires_native
@pytest.mark.parametrize("out_dtype", [torch.float16, torch.bfloat16], ids=str)
def test_wmma_output_in_input_dtype(out_dtype):
    import gks

    inputs = _inputs("wmma_gemm", (150, 300, 520), str(out_dtype).removeprefix("torch."), "out")
    for config in range(-1, len(_spec("wmma_gemm").configs)):
        out = gks.wmma_gemm(inputs["a"], inputs["b"], out_dtype=out_dtype, config=config)
        assert out.dtype == out_dtype
        _check("wmma_gemm", out, dict(inputs, out_dtype=out_dtype), str(out_dtype).removeprefix("torch."))


@requires_gpu
@requires_native
def test_int8_accepts_1d_and_strided_scales():
    import gks

    inputs = _inputs("int8_gemm", (33, 65, 96), "float32", "scales")
    a_scale = inputs["a_scale"].reshape(-1)
    b_scale = torch.empty((2, 65), device="cuda")[0]  # stride 1 view of a bigger buffer
    b_scale.copy_(inputs["b_scale"].reshape(-1))
    b_col = torch.empty((65, 3), device="cuda")[:, 1]  # stride 3
    b_col.copy_(b_scale)
    for sb in (b_scale, b_col, b_col.reshape(1, 65)):
        out = gks.int8_gemm(inputs["a_q"], inputs["b_q"], a_scale, sb, out_dtype=torch.float32)
        _check("int8_gemm", out, inputs, "float32")


# ---------------------------------------------------------------------------------------
# Streams, graphs, torch.compile.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# INT8: the whole path from float inputs.
# ---------------------------------------------------------------------------------------


def _quantize_rows(x: torch.Tensor):
    """Per-row symmetric int8 quantization (scale = absmax / 127; an all-zero row gets
    scale 0 and q = 0): gks.quantize_int8 on the GPU when it is built, else its reference,
    else this local copy of the documented rule."""
    import gks

    if x.is_cuda and HAS_NATIVE and hasattr(gks.cuda, "quantize_int8_out"):
        return gks.quantize_int8(x)
    ref = getattr(gks.reference, "quantize_int8", None)
    if ref is not None:
        return ref(x)
    scale = x.abs().amax(dim=-1, keepdim=True).to(torch.float32) / 127.0
    q = torch.where(scale > 0, x / scale.clamp_min(1e-30), torch.zeros_like(x))
    return q.round().clamp(-127, 127).to(torch.int8), scale


def _int8_path(backend):
    gen = torch.Generator(device=DEVICE).manual_seed(seed_for("int8 path"))
    m, n, k = (96, 160, 512) if backend == "cuda" or HAS_GPU else (33, 40, 64)
    a = torch.randn((m, k), generator=gen, device=DEVICE)
    b = torch.randn((k, n), generator=gen, device=DEVICE)
    a_q, a_scale = _quantize_rows(a)
    q, s = _quantize_rows(b.t().contiguous())  # per column of b
    b_q, b_scale = q.t(), s.t()  # b_q K-major, as every int8_gemm backend accepts
    if backend == "cuda":
        import gks

        out = gks.int8_gemm(a_q, b_q, a_scale, b_scale, out_dtype=torch.float32)
    else:
        import gks.triton

        out = gks.triton.int8_gemm(a_q, b_q, a_scale, b_scale, out_dtype=torch.float32)
    exact = a.double() @ b.double()
    # Quantization error: each element of a and b is off by at most half a step (scale / 2),
    # so |error| <= sum_k (|a_ik| sb_j + |b_kj| sa_i + sa_i sb_j / 2) / 2.
    sa, sb = a_scale.double().reshape(m, 1), b_scale.double().reshape(1, n)
    bound = 0.5 * (a.double().abs() @ torch.ones_like(b.double()) * sb
                   + sa * (torch.ones_like(a.double()) @ b.double().abs())
                   + 0.5 * k * sa * sb) + 1e-4 * exact.abs()
    err = (out.double() - exact).abs()
    assert (err <= bound).all(), f"max err/bound {float((err / bound).max()):.3f}"
    # ... and it is a good approximation, not merely a bounded one.
    rel = float((out.double() - exact).norm() / exact.norm())
    assert rel < 0.02, rel


@requires_gpu
@requires_native
def test_int8_whole_path_from_float_inputs_cuda():
    _int8_path("cuda")


def test_int8_whole_path_from_float_inputs_triton():
    _int8_path("triton")


# ---------------------------------------------------------------------------------------
# Errors (these fail before any launch, so they run without a GPU when the library is built).
# ---------------------------------------------------------------------------------------


@requires_native
def test_errors_name_the_argument():
    import gks

    f32 = torch.randn(4, 6)
    with pytest.raises(ValueError, match="argument 'a' must be a CUDA tensor"):
        gks.sgemm(f32, torch.randn(6, 5))
    with pytest.raises(ValueError, match="argument 'a' must be a 2-D matrix"):
        gks.sgemm(torch.randn(2, 4, 6), torch.randn(6, 5))
    dev = DEVICE
    if HAS_GPU:
        with pytest.raises(ValueError, match=r"argument 'b' must have shape \[K, N\] with K = 6"):
            gks.sgemm(torch.randn(4, 6, device=dev), torch.randn(7, 5, device=dev))
        with pytest.raises(TypeError, match="argument 'b' must be float32, got float16"):
            gks.sgemm(torch.randn(4, 6, device=dev), torch.randn(6, 5, device=dev).half())
        with pytest.raises(ValueError, match="transposed views are not accepted"):
            gks.sgemm(torch.randn(4, 6, device=dev), torch.randn(5, 6, device=dev).t())
        with pytest.raises(ValueError, match="argument 'config' must be -1"):
            gks.sgemm(torch.randn(4, 6, device=dev), torch.randn(6, 5, device=dev), config=99)
        with pytest.raises(TypeError, match="argument 'a' must be float16 or bfloat16"):
            gks.wmma_gemm(torch.randn(4, 6, device=dev), torch.randn(6, 5, device=dev))
        h = torch.randn(4, 6, device=dev).half()
        with pytest.raises(TypeError, match="argument 'out_dtype' must be torch.float32 or the dtype"):
            gks.wmma_gemm(h, torch.randn(6, 5, device=dev).half(), out_dtype=torch.bfloat16)
        q = torch.zeros(4, 6, dtype=torch.int8, device=dev)
        bq = torch.zeros(6, 5, dtype=torch.int8, device=dev)
        with pytest.raises(ValueError, match=r"argument 'b_scale' must have shape \[1, N\]"):
            gks.int8_gemm(q, bq, torch.ones(4, 1, device=dev), torch.ones(5, 1, device=dev))
        # int8_gemm takes b_q K-major (a transposed view), but not one whose rows overlap.
        overlapping = torch.zeros(40, dtype=torch.int8, device=dev).as_strided((6, 5), (1, 4))
        with pytest.raises(ValueError, match=r"K-major view \(stride\(0\) == 1\), so its stride\(1\) must be at least its 6 rows"):
            gks.int8_gemm(q, overlapping, torch.ones(4, 1, device=dev), torch.ones(1, 5, device=dev))
        with pytest.raises(ValueError, match="argument 'b_q' must be row-major"):
            gks.int8_gemm(q, torch.zeros(6, 10, dtype=torch.int8, device=dev)[:, ::2],
                          torch.ones(4, 1, device=dev), torch.ones(1, 5, device=dev))


def test_triton_and_pallas_errors():
    import gks.triton

    dev = DEVICE
    with pytest.raises(TypeError, match="argument 'b' must be float32"):
        gks.triton.sgemm(torch.randn(4, 6, device=dev), torch.randn(6, 5, device=dev).half())
    with pytest.raises(ValueError, match=r"argument 'b' must have shape \[K, N\] with K = 6"):
        gks.triton.sgemm(torch.randn(4, 6, device=dev), torch.randn(7, 5, device=dev))
    with pytest.raises(ValueError, match=r"argument 'a_scale' must have shape \[4, 1\]"):
        gks.triton.int8_gemm(torch.zeros(4, 6, dtype=torch.int8, device=dev),
                             torch.zeros(6, 5, dtype=torch.int8, device=dev),
                             torch.ones(1, 4, device=dev), torch.ones(1, 5, device=dev))
    import jax.numpy as jnp

    import gks.pallas

    with pytest.raises(ValueError, match="argument 'b' must have shape"):
        gks.pallas.sgemm(jnp.ones((4, 6), jnp.float32), jnp.ones((5, 5), jnp.float32))


# ---------------------------------------------------------------------------------------
# The ports on larger odd shapes and on strided / transposed views (interpreters on CPU).
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", KERNELS)
def test_triton_port_on_strided_and_transposed_views(kernel):
    import gks.triton

    spec = _spec(kernel)
    shape = (45, 70, 90)
    for dtype in spec.dtypes:
        inputs = _inputs(kernel, shape, dtype, "triton-views")
        names = ("a_q", "b_q") if kernel == "int8_gemm" else ("a", "b")
        views = dict(inputs)
        views[names[0]] = _padded(inputs[names[0]], 3, offset=1)
        views[names[1]] = inputs[names[1]].t().contiguous().t()  # column-major b
        out = getattr(gks.triton, kernel)(**views)
        _check(kernel, out, inputs, dtype)


def test_triton_block_shapes_are_named_and_a_bad_config_is_refused():
    import gks.triton

    for kernel in ("sgemm", "wmma_gemm", "int8_gemm"):
        names = gks.triton.gemm_config_names(kernel)
        assert len(names) >= 4 and len(set(names)) == len(names), kernel
    count = len(gks.triton.gemm_config_names("sgemm"))
    with pytest.raises(ValueError, match=rf"argument 'config' must be -1 .* an index below {count}"):
        gks.triton.sgemm(torch.randn(4, 6, device=DEVICE), torch.randn(6, 5, device=DEVICE), config=count)
    with pytest.raises(ValueError, match="argument 'config'"):
        gks.triton.wmma_gemm(torch.randn(4, 6, device=DEVICE).half(), torch.randn(6, 5, device=DEVICE).half(),
                             config=-2)


@pytest.mark.parametrize("kernel", ("sgemm", "wmma_gemm"))
def test_triton_split_k_sums_every_k_tile_once(kernel):
    """The split-K block shapes: every k-tile is summed once whether K divides among the
    parts, leaves parts empty (fewer k-tiles than parts) or is shorter than one block, and a
    16-bit output goes through the fp32 scratch. On CPU the interpreter runs its one block
    shape with each config's split."""
    import gks.triton

    splits = [i for i, name in enumerate(gks.triton.gemm_config_names(kernel)) if "_k" in name]
    assert splits, "no split-K block shape"
    spec = _spec(kernel)
    for dtype in spec.dtypes:
        for shape in ((33, 40, 1), (33, 40, 100), (70, 45, 257)):
            inputs = _inputs(kernel, shape, dtype, "triton-split-k")
            outs = [inputs] if kernel == "sgemm" else [inputs, dict(inputs, out_dtype=getattr(torch, dtype))]
            for args in outs:
                for config in splits:
                    out = getattr(gks.triton, kernel)(**args, config=config)
                    assert out.dtype == args.get("out_dtype", torch.float32)
                    _check(kernel, out, args, dtype)


def test_triton_tma_blocks_load_by_tma_where_a_tensor_map_fits(monkeypatch):
    """The TMA block shapes of the fp16/bf16 GEMM run _gemm_tma_kernel when a tensor map can
    describe a and b (edges of every tile, K shorter than a block), and the same block by
    pointers otherwise (a row stride that is not a multiple of 16 bytes, a misaligned base,
    a transposed view), correct either way. On CPU the interpreter runs its one block shape
    with each config's TMA choice."""
    import gks.triton
    from gks.triton import gemm as _gemm

    if HAS_GPU and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("TMA needs sm_90 or later")
    tma = [i for i, name in enumerate(gks.triton.gemm_config_names("wmma_gemm")) if name.endswith("_tma")]
    assert tma, "no TMA block shape"
    by_tma = []
    launch_tma = _gemm._launch_tma
    monkeypatch.setattr(_gemm, "_launch_tma", lambda *args: by_tma.append(1) or launch_tma(*args))
    op = gks.triton.wmma_gemm
    for dtype in ("float16", "bfloat16"):
        for shape in ((33, 40, 8), (70, 136, 264)):  # rows of 16-byte multiples
            inputs = _inputs("wmma_gemm", shape, dtype, "triton-tma")
            ragged = _inputs("wmma_gemm", (shape[0], shape[1] + 1, shape[2]), dtype, "triton-tma")
            for config in tma:
                for args, expect_tma in ((inputs, True), (dict(inputs, out_dtype=getattr(torch, dtype)), True),
                                         (ragged, False),
                                         (dict(inputs, a=_padded(inputs["a"], 0, offset=1)), False),
                                         (dict(inputs, b=inputs["b"].t().contiguous().t()), False)):
                    if dtype == "bfloat16" and not HAS_GPU:
                        expect_tma = False  # the interpreter widens bf16 to fp32 (pointer path)
                    del by_tma[:]
                    _check("wmma_gemm", op(**args, config=config), args, dtype)
                    assert bool(by_tma) == expect_tma, (dtype, shape, config, expect_tma)


def test_triton_specializes_a_tensor_argument_on_its_dtype_and_16_byte_alignment_only():
    """gks.triton's GEMMs launch a kernel compiled for earlier arguments straight through its
    launcher, keyed on (among others) each tensor's dtype and 16-byte alignment: that is sound
    only while Triton specializes a tensor argument on nothing else (not its shape, strides,
    or a finer alignment)."""
    from triton._C.libtriton import native_specialize_impl
    from triton.backends.compiler import BaseBackend

    for dtype in (torch.float32, torch.float16, torch.int8):
        buf = torch.zeros(4096, dtype=dtype)
        seen = {}
        for offset in range(0, 64):
            for view in (buf[offset:offset + 1024], buf[offset:offset + 1024].view(32, 32).t()):
                spec = native_specialize_impl(BaseBackend, view, False, True, True)
                aligned = view.data_ptr() % 16 == 0
                assert seen.setdefault(aligned, spec) == spec, (dtype, offset)
        assert len(seen) == 2 and seen[True] != seen[False], seen


@requires_gpu
@pytest.mark.parametrize("kernel", ("sgemm", "wmma_gemm", "int8_gemm"))
def test_triton_relaunch_of_a_compiled_kernel_is_correct(kernel):
    """The second call with the same shapes, strides, dtypes and alignment launches the kernel
    compiled by the first directly (gks.triton.gemm._COMPILED): fresh data each call, a
    misaligned operand (another kernel), a split-K block shape, a side stream and a CUDA
    graph replayed on new data all give the reference's result."""
    import gks.triton
    from gks.triton import gemm as _gemm

    spec = _spec(kernel)
    op = getattr(gks.triton, kernel)
    first = "a_q" if kernel == "int8_gemm" else "a"
    splits = [i for i, name in enumerate(gks.triton.gemm_config_names(kernel)) if "_k" in name]
    for dtype in spec.dtypes:
        for config in [0] + splits[:1]:
            shape = (130, 200, 300 + config)  # a shape (so a key) of this config alone
            before = len(_gemm._COMPILED)
            for call in range(4):
                inputs = _inputs(kernel, shape, dtype, "relaunch", config, call)
                if call >= 2:  # a misaligned a: a kernel compiled without 16-byte alignment
                    inputs[first] = _padded(inputs[first], 0, offset=1)
                _check(kernel, op(**inputs, config=config), inputs, dtype)
            # Two kernels (aligned, misaligned), each compiled once and then relaunched; none
            # cached with a Triton the direct launch was not checked on.
            expected = before + 2 if _gemm._DIRECT_LAUNCH else before
            assert len(_gemm._COMPILED) == expected, "the relaunch cache missed or never filled"

            inputs = _inputs(kernel, shape, dtype, "relaunch-graph", config)
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                op(**inputs, config=config)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, stream=stream):
                    captured = op(**inputs, config=config)
            torch.cuda.current_stream().wait_stream(stream)
            fresh = _inputs(kernel, shape, dtype, "relaunch-graph-new", config)
            for name, value in fresh.items():
                if isinstance(value, torch.Tensor):
                    inputs[name].copy_(value)
            captured.fill_(float("nan"))
            graph.replay()
            torch.cuda.synchronize()
            _check(kernel, captured, fresh, dtype)


@requires_gpu
@pytest.mark.parametrize("kernel", ("sgemm", "wmma_gemm", "int8_gemm"))
def test_triton_repeated_call_repeats_its_plan(kernel, monkeypatch):
    """A call like an earlier one (gks.triton.gemm.plan_key) repeats that call's launch
    without its checks or config lookup (run_plan): correct on fresh data, for a split-K
    block shape into a 16-bit output and a TMA block shape too; a call that differs in the
    key (shape, alignment, deterministic mode, a reloaded tuned table) takes the full path
    again."""
    import importlib

    import gks.triton
    from gks.runtime import tables
    from gks.triton import gemm as _gemm

    if not _gemm._DIRECT_LAUNCH:
        pytest.skip(f"no direct launch with triton {_gemm.triton.__version__}")
    spec = _spec(kernel)
    op = getattr(gks.triton, kernel)
    module = importlib.import_module("gks.triton.gemm")
    first = "a_q" if kernel == "int8_gemm" else "a"
    dtype = spec.dtypes[-1]
    out = {"out_dtype": torch.bfloat16} if kernel == "wmma_gemm" else {}
    names = gks.triton.gemm_config_names(kernel)
    splits = [i for i, name in enumerate(names) if "_k" in name]
    tma = [i for i, name in enumerate(names) if name.endswith("_tma")]

    def full_path(*args, **kwargs):
        raise AssertionError("full path")

    for config in [0] + splits[:1] + tma[:1]:
        shape = (96, 136, 200 + 8 * config)  # a key of this config alone; rows of 16 bytes x n
        inputs = _inputs(kernel, shape, dtype, "plan", config) | out
        before = len(_gemm._PLANS)
        _check(kernel, op(**inputs, config=config), inputs, dtype)
        assert len(_gemm._PLANS) == before + 1, "the first call left no plan"
        with monkeypatch.context() as patch:
            patch.setattr(module, "check_operand", full_path)
            for call in range(2):  # fresh data, the same plan
                fresh = _inputs(kernel, shape, dtype, "plan", config, call) | out
                got = op(**fresh, config=config)
                got_again = op(**fresh, config=config)  # a fresh output each call
                assert got.data_ptr() != got_again.data_ptr()
                _check(kernel, got, fresh, dtype)
            other = _inputs(kernel, (shape[0] + 1, *shape[1:]), dtype, "plan", config) | out
            with pytest.raises(AssertionError, match="full path"):
                op(**other, config=config)
            misaligned = dict(inputs, **{first: _padded(inputs[first], 0, offset=1)})
            with pytest.raises(AssertionError, match="full path"):
                op(**misaligned, config=config)
            deterministic = torch.are_deterministic_algorithms_enabled()
            torch.use_deterministic_algorithms(not deterministic)
            try:
                with pytest.raises(AssertionError, match="full path"):
                    op(**inputs, config=config)
            finally:
                torch.use_deterministic_algorithms(deterministic)
            tables._entries.cache_clear()  # as after save_cache: the tables may have changed
            with pytest.raises(AssertionError, match="full path"):
                op(**inputs, config=config)
        _check(kernel, op(**inputs, config=config), inputs, dtype)


def test_triton_plan_key_of_a_non_tensor_is_none():
    """An argument that is not a tensor has no plan; the full path's checks then name it."""
    from gks.triton import gemm as _gemm

    a = torch.zeros(4, 4)
    assert _gemm.plan_key("sgemm", a, [[1.0]], None, -1) is None
    assert _gemm.plan_key("int8_gemm", a, a, torch.float16, -1, a, None) is None
    assert _gemm.run_plan(None, a, a) is None


@requires_gpu
@pytest.mark.parametrize("kernel", ("sgemm", "wmma_gemm", "int8_gemm"))
def test_triton_each_block_shape_on_its_own(kernel):
    """Every block shape the autotuner may pick is correct on its own (edges included)."""
    import gks.triton

    spec = _spec(kernel)
    for dtype in spec.dtypes:
        inputs = _inputs(kernel, (127, 257, 511), dtype, "triton-configs")
        for config in range(len(gks.triton.gemm_config_names(kernel))):
            _check(kernel, getattr(gks.triton, kernel)(**inputs, config=config), inputs, dtype)


def test_pallas_sgemm_block_shapes_each_correct_and_a_bad_config_refused():
    import jax.numpy as jnp

    import gks.pallas
    from gks.pallas._bridge import sgemm

    names = gks.pallas.sgemm_config_names()
    assert len(set(names)) == len(names) >= 4
    inputs = _inputs("sgemm", (37, 45, 70), "float32", "pallas-configs")
    for config in range(len(names)):  # interpret mode on a CPU, the Triton lowering on a GPU
        _check("sgemm", sgemm(**inputs, config=config), inputs, "float32")
    with pytest.raises(ValueError, match=rf"argument 'config' must be -1 .* below {len(names)}"):
        gks.pallas.sgemm(jnp.ones((4, 6), jnp.float32), jnp.ones((6, 5), jnp.float32), config=len(names))


def test_pallas_sgemm_on_an_odd_shape():
    from gks.pallas._bridge import sgemm

    inputs = _inputs("sgemm", (70, 45, 100), "float32", "pallas")
    _check("sgemm", sgemm(**inputs), inputs, "float32")
