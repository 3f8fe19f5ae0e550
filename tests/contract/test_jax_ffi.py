# SPDX-License-Identifier: Apache-2.0
"""gks.jax.<op>, the CUDA kernels as XLA FFI custom calls (issue 36, item 2): one for every op
with a CUDA backend. Without a GPU: shapes, dtypes and the library's own checks at trace
time (jax.eval_shape, vmap, a lowering for CUDA), without torch too, and what XLA and
jax-tvm-ffi hand a binding (a stand-in on the CPU). On a GPU: jitted results within the
spec's tolerance of the float64 reference and of gks.pallas.<op>, the same bits as gks.<op>,
cross_entropy's gradient, and a chain of ops inside XLA's command buffers (CUDA graphs)."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

from conftest import DEVICE, HAS_GPU, requires_native, seed_for  # noqa: E402
from gks import _native, registry  # noqa: E402

import gks.jax as gj  # noqa: E402
from gks.jax import _ffi  # noqa: E402

CUDA_SPECS = [s for s in registry.ops() if s.has_backend("cuda")]
ROOT = Path(__file__).resolve().parents[2]

try:
    import jax_tvm_ffi  # noqa: F401

    HAS_JAX_TVM_FFI = True
except ImportError:
    HAS_JAX_TVM_FFI = False
requires_jax_tvm_ffi = pytest.mark.skipif(
    not HAS_JAX_TVM_FFI, reason="jax-tvm-ffi is not installed (pip install jax-tvm-ffi)")
# The GPU tests run the kernels through JAX, which must see the GPU (jax[cuda12] or the like).
JAX_HAS_GPU = HAS_GPU and any(d.platform == "gpu" for d in jax.devices())
requires_jax_gpu = pytest.mark.skipif(not JAX_HAS_GPU, reason="needs a CUDA GPU that JAX sees (jax[cuda])")


def _trace(spec, fn):
    """fn(), skipped where the built library lacks the op's entry point (a library built
    from older sources than the package: the lead's machine rebuilds it)."""
    try:
        return fn()
    except _ffi.MissingEntryPoint as e:
        pytest.skip(str(e))


def _jax_value(value):
    """A make_inputs value for gks.jax: tensors as JAX arrays (by DLPack), torch dtypes as
    JAX dtypes, the rest as is."""
    if isinstance(value, torch.Tensor):
        from gks.pallas._bridge import _to_jax

        if value.dtype == torch.int64 and not jax.config.jax_enable_x64:
            value = value.to(torch.int32)  # positions, targets: the kernels take int32 too
        return _to_jax(value)
    if isinstance(value, torch.dtype):
        return jnp.dtype(str(value).removeprefix("torch."))
    return value


def _abstract(value):
    if isinstance(value, torch.Tensor):
        dtype = jnp.dtype(str(value.dtype).removeprefix("torch."))
        if dtype == jnp.int64 and not jax.config.jax_enable_x64:
            dtype = jnp.dtype(jnp.int32)  # as _jax_value hands it over
        return jax.ShapeDtypeStruct(tuple(value.shape), dtype)
    return _jax_value(value)


def _split(inputs, convert):
    converted = {k: convert(v) for k, v in inputs.items()}
    arrays = {k: v for k, v in converted.items() if isinstance(v, (jax.Array, jax.ShapeDtypeStruct))}
    static = {k: v for k, v in converted.items() if k not in arrays}
    return arrays, static


def _leaves(value):
    return value if isinstance(value, tuple) else (value,)


def _x64(spec):
    """top_k's int64 indices need 64-bit types in JAX; every other op runs without."""
    return spec.name == "top_k"


@pytest.fixture
def x64_for(request):
    def enable(spec, inputs=None):
        wide = inputs is not None and any(isinstance(v, torch.Tensor) and v.dtype in (torch.int64, torch.float64)
                                          for v in inputs.values())
        if (_x64(spec) or wide) and not jax.config.jax_enable_x64:
            jax.config.update("jax_enable_x64", True)
            request.addfinalizer(lambda: jax.config.update("jax_enable_x64", False))
    return enable


# ---- here (no GPU needed)


def test_every_cuda_op_has_a_jax_op():
    missing = [s.name for s in CUDA_SPECS if s.name not in gj.__all__]
    assert not missing, (f"gks.jax lacks {missing}: add each to gks/jax/<family>.py (its outputs' shapes "
                         "and a call to gks.jax._ffi.call; see CONTRIBUTING.md)")
    extra = set(gj.__all__) - {s.name for s in CUDA_SPECS} - {"JaxFfiUnavailable"}
    assert not extra, f"gks.jax exports {sorted(extra)}, which are no ops with a CUDA backend"


@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec", CUDA_SPECS, ids=lambda s: s.name)
def test_abstract_eval_gives_the_reference_shapes_and_dtypes(spec, x64_for):
    """jax.eval_shape of gks.jax.<op> (which runs the library's checks on the abstract
    values) gives the shapes and dtypes of the reference's outputs, for each of the spec's
    dtypes."""
    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name} (test_every_cuda_op_has_a_jax_op says so)")
    x64_for(spec)
    op = getattr(gj, spec.name)
    for dtype in spec.dtypes:
        inputs = spec.make_inputs(spec.example_shape, dtype, "cpu", seed_for(spec.name, "eval_shape"))
        ref = _leaves(spec.reference(**inputs))
        arrays, static = _split(inputs, _abstract)
        out = _leaves(_trace(spec, lambda: jax.eval_shape(functools.partial(op, **static), **arrays)))
        assert [o.shape for o in out] == [tuple(r.shape) for r in ref], f"{spec.name}/{dtype}"
        assert [str(o.dtype) for o in out] == [str(r.dtype).removeprefix("torch.") for r in ref], f"{spec.name}/{dtype}"


@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec", CUDA_SPECS, ids=lambda s: s.name)
def test_jit_lowers_to_the_ffi_target_for_cuda(spec, x64_for):
    """Under jax.jit the op is one custom call per kernel into a gks FFI target, lowered for
    CUDA (on this machine too: lowering needs no GPU)."""
    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name}")
    x64_for(spec)
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[0], "cpu", seed_for(spec.name, "lower"))
    arrays, static = _split(inputs, _abstract)
    text = _trace(spec, lambda: jax.jit(functools.partial(getattr(gj, spec.name), **static)).trace(
        **arrays).lower(lowering_platforms=("cuda",)).as_text())
    assert "stablehlo.custom_call @gks." in text, text


def _bad_cases():
    for spec in CUDA_SPECS:
        for bad in spec.bad_inputs:
            if bad.jax and not bad.gpu:
                yield pytest.param(spec, bad, id=f"{spec.name}-{bad.id}")


@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec,bad", list(_bad_cases()))
def test_bad_inputs_raise_at_trace_time(spec, bad, x64_for):
    """Each bad call the spec lists (those JAX can express) raises while tracing, with the
    error the CUDA op gives, naming the argument."""
    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name}")
    inputs = bad.make(torch, "cpu")
    # A 64-bit input reaches the op only under jax_enable_x64 (JAX narrows it otherwise,
    # which would make the case another, valid call): traced with it on.
    x64_for(spec, inputs)
    if any(isinstance(v, torch.Tensor) and not v.is_contiguous() for v in inputs.values()):
        pytest.skip("a strided view: a JAX array is dense, so the case is another (valid) call in JAX")
    arrays, static = _split(inputs, _abstract)
    try:
        jax.eval_shape(functools.partial(getattr(gj, spec.name), **static), **arrays)
    except _ffi.MissingEntryPoint as e:
        pytest.skip(str(e))
    except bad.error as e:
        assert bad.message in str(e), f"{spec.name}/{bad.id}: {e}"
        return
    pytest.fail(f"{spec.name}/{bad.id}: traced without an error (expected {bad.error}: {bad.message})")


@requires_native
@requires_jax_tvm_ffi
def test_layernorm_without_bias_passes_weight_twice_and_no_bias_flag():
    """The binding call is read off gks.cuda's entry point: layernorm without a bias hands the
    binding weight in bias's place and has_bias = false (attribute a03)."""
    x = jax.ShapeDtypeStruct((4, 256), jnp.float32)
    w = jax.ShapeDtypeStruct((256,), jnp.float32)
    text = jax.jit(gj.layernorm).trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
    assert "(%arg0, %arg1, %arg1)" in text and "a03 = false" in text, text
    text = jax.jit(gj.layernorm).trace(x, w, w).lower(lowering_platforms=("cuda",)).as_text()
    assert "(%arg0, %arg1, %arg2)" in text and "a03 = true" in text, text


@requires_native
@requires_jax_tvm_ffi
def test_vmap_runs_the_kernel_per_batch_element():
    """Under jax.vmap each element is checked and run at its own shape (a loop of custom
    calls), so a shared weight stays [N]."""
    x = jax.ShapeDtypeStruct((3, 5, 256), jnp.float16)
    w = jax.ShapeDtypeStruct((256,), jnp.float16)
    f = jax.vmap(gj.rmsnorm, in_axes=(0, None))
    assert jax.eval_shape(f, x, w) == jax.ShapeDtypeStruct((3, 5, 256), jnp.float16)
    text = jax.jit(f).trace(x, w).lower(lowering_platforms=("cuda",)).as_text()
    assert "stablehlo.while" in text and "tensor<5x256xf16>" in text, text
    with pytest.raises(ValueError, match="argument 'weight'"):
        jax.eval_shape(jax.vmap(gj.rmsnorm), x, jax.ShapeDtypeStruct((3, 255), jnp.float16))


@pytest.mark.parametrize("paged", [False, True])
def test_an_adapter_calls_a_binding_in_its_own_order(paged):
    """flash_attention_decode's binding takes page_table (or None) after its outputs, which
    jax-tvm-ffi cannot express: the plan hands (inputs, outputs, attributes) to an adapter
    that calls the binding with each argument where the gks.cuda entry point put it."""
    import tvm_ffi

    q = jnp.zeros((2, 4, 1, 64), jnp.float16)
    inputs = {"q": q, "k_cache": q, "v_cache": q, "cache_seqlens": jnp.zeros((2,), jnp.int32),
              "page_table": jnp.zeros((2, 3), jnp.int32) if paged else None, "causal": True,
              "softmax_scale": None, "window_size": (-1, -1), "softcap": 0.0, "num_splits": 0}
    entry = registry.get("flash_attention_decode").cuda_out
    plan = _ffi._plan("flash_attention_decode", entry, inputs, 2, {})
    assert plan.layout and plan.arg_spec[:2] == ("args", "rets")
    recorder = _ffi._Recorder()
    slots = {k: (_ffi._Slot("in", k) if _ffi.is_array(v) else v) for k, v in inputs.items()}
    entry(_ffi._RecordingCuda(recorder), slots, (_ffi._Slot("out", 0), _ffi._Slot("out", 1)))
    ((_, expected),) = recorder.calls
    # Markers: input i is 100 + i, output j (in the plan's order) 200 + j, attributes as they are.
    mark = {("in", k): 100 + i for i, k in enumerate(plan.operands)}
    mark.update({("out", k): 200 + j for j, k in enumerate(plan.rets)})
    expected = [mark[(a.kind, a.key)] if isinstance(a, _ffi._Slot) else a for a in expected]
    seen = []
    adapter = _ffi._adapter(tvm_ffi.convert(lambda *a: seen.append(list(a))), plan.layout, len(plan.operands),
                            len(plan.rets), tuple(plan.attrs))
    adapter(*(100 + i for i in range(len(plan.operands))), *(200 + j for j in range(len(plan.rets))),
            *plan.attrs.values())
    assert seen == [expected]
    assert expected[4:7] == [200 + plan.rets.index(0), 200 + plan.rets.index(1), 104 if paged else None]


_CPU_TARGETS: dict[str, int] = {}


def _run_on_cpu_stand_in(op, entry, inputs, outputs, kw=None):
    """Runs `op`'s plan under jax.jit on the CPU, through jax-tvm-ffi, against a stand-in
    binding (a Python tvm-ffi function) that records what it is handed and writes 7 into
    each output: what XLA and jax-tvm-ffi give the real binding, checked without a GPU."""
    import jax_tvm_ffi
    import tvm_ffi

    kw = kw or {}
    plan = _ffi._plan(op, entry, inputs, len(outputs), kw)
    recorder = _ffi._Recorder()
    slots = {k: (_ffi._Slot("in", k) if _ffi.is_array(v) else v) for k, v in inputs.items()}
    entry(_ffi._RecordingCuda(recorder), slots, tuple(_ffi._Slot("out", i) for i in range(len(outputs))), **kw)
    ((_, recorded),) = recorder.calls
    seen = []

    def binding(*args):
        # Copies only: XLA's buffers must not outlive the call (jax-tvm-ffi checks).
        got = []
        for a, r in zip(args, recorded):
            if isinstance(r, _ffi._Slot):
                view = np.from_dlpack(a)
                got.append(view.copy())
                if r.kind == "out":
                    view[...] = 7
                del view
            else:
                got.append(a)
        seen.append(got)

    function = tvm_ffi.convert(binding)
    if plan.layout:
        function = _ffi._adapter(function, plan.layout, len(plan.operands), len(plan.rets), tuple(plan.attrs))
    name = f"gks_test.{op}.{len(_CPU_TARGETS)}"
    _CPU_TARGETS[name] = 1
    jax_tvm_ffi.register_ffi_target(name, function, list(plan.arg_spec), platform="cpu", pass_owned_tensor=True)
    # The target is the CPU's: run there also on a machine whose default device is a GPU.
    cpu = jax.devices("cpu")[0]
    arrays = {k: jax.device_put(v, cpu) for k, v in inputs.items() if _ffi.is_array(v)}
    static = {k: v for k, v in inputs.items() if k not in arrays}
    with jax.default_device(cpu):
        out = jax.jit(lambda arrays: _ffi._invoke(name, plan, {**arrays, **static}, outputs))(arrays)
    return out, recorded, seen


@requires_jax_tvm_ffi
@pytest.mark.parametrize("case", ["layernorm-bias", "layernorm-none", "flash_attention_fwd", "decode-paged",
                                  "decode-dense", "gemm-silu", "gemm-gelu_tanh"])
def test_xla_hands_the_binding_its_arguments_in_order(case):
    """On the CPU, through XLA and jax-tvm-ffi, a stand-in binding gets each array where the
    gks.cuda entry point put it (the same buffer contents), each scalar with its value and
    type (bool, int, float, str, None), and its outputs come back as the op's outputs. A
    string longer than 7 bytes ('gelu_tanh') arrives intact: jax-tvm-ffi frees such string
    attributes before the call, so the plan binds them into the target instead."""
    rng = np.random.default_rng(0)

    def arr(shape, dtype=np.float32):
        return jnp.asarray(rng.standard_normal(shape).astype(dtype))

    if case.startswith("layernorm"):
        op, entry, kw = "layernorm", registry.get("layernorm").cuda_out, {"config": 3}
        x, w = arr((4, 16)), arr((16,))
        inputs = {"x": x, "weight": w, "bias": arr((16,)) if case.endswith("bias") else None, "eps": 1e-5}
        outputs = (jax.ShapeDtypeStruct((4, 16), jnp.float32),)
    elif case == "flash_attention_fwd":
        op, entry, kw = case, registry.get(case).cuda_out, {"config": -1}
        q = arr((1, 2, 3, 32))
        inputs = {"q": q, "k": arr((1, 1, 5, 32)), "v": arr((1, 1, 5, 32)), "causal": True, "softmax_scale": 0.25,
                  "window_size": (4, 0), "softcap": 30.0}
        outputs = (jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((1, 2, 3), jnp.float32))
    elif case.startswith("gemm"):
        op, entry, kw = "gemm", registry.get("gemm").cuda_out, {"config": -1}
        inputs = {"a": arr((4, 32), np.float16), "b": arr((32, 16), np.float16), "bias": arr((16,)),
                  "gated": case.removeprefix("gemm-")}
        outputs = (jax.ShapeDtypeStruct((4, 8), jnp.float16),)
    else:
        op, entry, kw = "flash_attention_decode", registry.get("flash_attention_decode").cuda_out, {}
        q = arr((2, 2, 1, 64))
        inputs = {"q": q, "k_cache": arr((4, 16, 1, 64)), "v_cache": arr((4, 16, 1, 64)),
                  "cache_seqlens": jnp.asarray([3, 20], jnp.int32),
                  "page_table": jnp.asarray([[0, 1], [2, 3]], jnp.int32) if case == "decode-paged" else None,
                  "causal": True, "softmax_scale": None, "window_size": (-1, -1), "softcap": 0.0, "num_splits": 2}
        outputs = (jax.ShapeDtypeStruct(q.shape, jnp.float32), jax.ShapeDtypeStruct((2, 2, 1), jnp.float32))
    out, recorded, seen = _run_on_cpu_stand_in(op, entry, inputs, outputs, kw)
    assert len(seen) == 1 and len(seen[0]) == len(recorded)
    for got, want in zip(seen[0], recorded):
        if isinstance(want, _ffi._Slot) and want.kind == "in":
            np.testing.assert_array_equal(got, np.asarray(inputs[want.key]))
        elif isinstance(want, _ffi._Slot):
            assert got.shape == outputs[want.key].shape
        elif isinstance(want, str):  # tvm-ffi hands a str over as its String (a str)
            assert isinstance(got, str) and str(got) == want, (got, want)
        else:
            assert type(got) is type(want) and got == want, (got, want)
    if case == "gemm-gelu_tanh":
        plan = _ffi._plan(op, entry, inputs, len(outputs), kw)
        assert ("const", "gelu_tanh") in plan.layout and "gelu_tanh" not in plan.attrs.values()
    for o, spec_out in zip(out, outputs, strict=True):
        assert o.shape == spec_out.shape and bool((o == 7).all())


def test_config_minus_one_asks_the_tuned_table_for_jaxs_gpu(monkeypatch):
    import gks.runtime.tables as tables

    class FakeGpu:
        platform, device_kind, compute_capability = "gpu", "NVIDIA H200", "9.0"

    monkeypatch.setattr(jax, "devices", lambda *a: [FakeGpu()])
    asked = []
    monkeypatch.setattr(tables, "lookup_for", lambda identity, kernel, dtype, shape: asked.append(
        (identity["gpu"], identity["cc"], kernel, dtype, shape)) or 2)
    assert _ffi.tuned("rmsnorm", -1, jnp.bfloat16, (33, 1000)) == 2
    assert _ffi.tuned("rmsnorm", 1, jnp.bfloat16, (33, 1000)) == 1  # a forced config stays
    assert _ffi.tuned("sgemm", -1, jnp.float32, None) == -1  # no spec dims: the heuristic
    assert asked == [("NVIDIA H200", "9.0", "rmsnorm", "bfloat16", (33, 1000))]
    monkeypatch.setattr(jax, "devices", lambda *a: [])
    assert _ffi.tuned("rmsnorm", -1, jnp.bfloat16, (33, 1000)) == -1 and len(asked) == 1


def test_missing_jax_tvm_ffi_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "jax_tvm_ffi", None)
    with pytest.raises(gj.JaxFfiUnavailable, match="pip install 'jax-tvm-ffi"):
        _ffi._jax_tvm_ffi()


@requires_native
def test_an_entry_point_the_library_lacks_says_rebuild():
    with pytest.raises(_native.NativeLibraryUnavailable, match="no 'no_such_binding' entry point.*rebuild"):
        _ffi._check_binding("rmsnorm", "no_such_binding")


def test_without_the_library_the_error_says_how_to_build_it(monkeypatch, tmp_path):
    monkeypatch.setenv("GKS_LIBRARY", str(tmp_path / "absent.so"))
    _native.module.cache_clear()
    try:
        with pytest.raises(_native.NativeLibraryUnavailable, match="not built"):
            jax.eval_shape(gj.softmax, jax.ShapeDtypeStruct((2, 8), jnp.float32))
    finally:
        monkeypatch.delenv("GKS_LIBRARY")
        _native.module.cache_clear()


@requires_native
@requires_jax_tvm_ffi
def test_gks_jax_traces_and_validates_without_torch():
    """gks.jax needs no torch: the abstract values are described to the library by ctypes
    DLPack structs of their own."""
    script = textwrap.dedent("""
        import sys
        class NoTorch:
            def find_spec(self, name, path, target=None):
                if name.split(".")[0] == "torch":
                    raise ImportError("torch is blocked")
        sys.meta_path.insert(0, NoTorch())
        import jax, jax.numpy as jnp, gks.jax as gj
        x, w = jax.ShapeDtypeStruct((3, 64), jnp.float16), jax.ShapeDtypeStruct((64,), jnp.float16)
        assert jax.eval_shape(gj.rmsnorm, x, w) == x
        try:
            jax.eval_shape(gj.rmsnorm, x, jax.ShapeDtypeStruct((63,), jnp.float16))
            raise SystemExit("no error")
        except ValueError as e:
            assert "argument 'weight'" in str(e), e
        assert "torch" not in sys.modules
    """)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    run = subprocess.run([sys.executable, "-c", script], env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]


@pytest.mark.skipif(JAX_HAS_GPU, reason="checks the refusal of host arrays, on a machine where JAX has no GPU")
def test_an_eager_call_on_host_arrays_says_the_kernels_need_a_gpu():
    with pytest.raises(RuntimeError, match=r"argument 'x' is on \[.cpu.\]: the CUDA kernels run on NVIDIA GPUs only"):
        gj.rmsnorm(jnp.ones((4, 8)), jnp.ones(8))


def test_cuda_graph_exceptions_name_real_ops():
    assert set(_ffi.NO_CUDA_GRAPH) <= {s.name for s in CUDA_SPECS}


# ---- on a GPU


def _to_torch(array) -> torch.Tensor:
    try:
        return torch.from_dlpack(array)
    except (BufferError, RuntimeError, TypeError):  # a dtype DLPack does not carry across (fp8)
        host = np.asarray(array)
        dtype = getattr(torch, host.dtype.name)
        return torch.from_numpy(host.view(np.uint8).copy()).view(dtype).to(DEVICE)


def _run_jitted(spec, inputs):
    op = getattr(gj, spec.name)
    arrays, static = _split(inputs, _jax_value)
    out = jax.jit(functools.partial(op, **static))(**arrays)
    return tuple(_to_torch(o) for o in _leaves(out))


def _torch_out(out):
    return out[0] if len(out) == 1 else out


@requires_jax_gpu
@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec", CUDA_SPECS, ids=lambda s: s.name)
def test_jitted_matches_the_reference(spec, x64_for):
    """For each test shape and dtype, jax.jit(gks.jax.<op>) is within the spec's tolerance of
    the float64 reference (spec.check where the spec has one)."""
    from gks.testing import check_output

    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name}")
    x64_for(spec)
    for shape in spec.test_shapes:
        for dtype in spec.dtypes:
            inputs = spec.make_inputs(shape, dtype, DEVICE, seed_for(spec.name, "jax", shape, dtype))
            out = _torch_out(_trace(spec, lambda: _run_jitted(spec, inputs)))
            check_output(spec, out, inputs, dtype, what=f"gks.jax.{spec.name}/{dtype}/{shape}")


@requires_jax_gpu
@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec", CUDA_SPECS, ids=lambda s: s.name)
def test_jitted_gives_gks_ops_bits(spec, x64_for):
    """gks.jax.<op> under jit and gks.<op> (torch) run the same kernel, with the same config
    (both ask the tuned table for -1) and, for attention, the same default softmax scale:
    the same bits."""
    import gks

    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name}")
    x64_for(spec)
    for dtype in spec.dtypes:
        inputs = spec.make_inputs(spec.example_shape, dtype, DEVICE, seed_for(spec.name, "jax-bits", dtype))
        ours = _trace(spec, lambda: _run_jitted(spec, inputs))
        theirs = getattr(gks, spec.name)(**inputs)
        theirs = theirs if isinstance(theirs, tuple) else (theirs,)
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype, f"{spec.name}/{dtype}"
            same = (a.view(torch.uint8) == b.contiguous().view(torch.uint8)) if a.numel() else torch.tensor(True)
            assert bool(same.all()), f"{spec.name}/{dtype}: gks.jax and gks differ"


@requires_jax_gpu
def test_jax_and_torch_name_the_gpu_alike():
    """The tuned tables are keyed by the GPU's name and compute capability as torch reports
    them; gks.jax asks with JAX's, which must be the same strings."""
    from gks.runtime.tables import device_identity, make_identity

    gpu = [d for d in jax.devices() if d.platform == "gpu"][0]
    assert make_identity(gpu.device_kind, str(gpu.compute_capability)) == device_identity(0)


@requires_jax_gpu
@requires_native
@requires_jax_tvm_ffi
@pytest.mark.parametrize("spec", [s for s in CUDA_SPECS if s.has_backend("pallas")], ids=lambda s: s.name)
def test_jitted_matches_pallas(spec):
    """gks.jax.<op> and gks.pallas.<op> agree: each within the spec's tolerance of the
    reference, so within twice it of each other."""
    from gks import pallas

    if spec.name not in gj.__all__:
        pytest.skip(f"gks.jax has no {spec.name}")
    for dtype in spec.dtypes:
        inputs = spec.make_inputs(spec.example_shape, dtype, DEVICE, seed_for(spec.name, "jax-pallas", dtype))
        arrays, static = _split(inputs, _jax_value)
        ours = _leaves(_trace(spec, lambda: jax.jit(functools.partial(getattr(gj, spec.name), **static))(**arrays)))
        theirs = _leaves(jax.jit(functools.partial(getattr(pallas, spec.name), **static))(**arrays))
        atol, rtol = spec.tolerance.get(dtype, (0.0, 0.0))
        for a, b in zip(ours, theirs, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            if jnp.issubdtype(a.dtype, jnp.floating):
                np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                           atol=2 * atol, rtol=2 * rtol, err_msg=f"{spec.name}/{dtype}")
            else:  # int8 codes: a value at a rounding tie may land one step apart
                diff = np.abs(np.asarray(a).astype(np.int64) - np.asarray(b).astype(np.int64))
                assert diff.max(initial=0) <= 1, f"{spec.name}/{dtype}: integer outputs differ by {diff.max()}"


@requires_jax_gpu
@requires_native
@requires_jax_tvm_ffi
def test_cross_entropy_grad_is_softmax_minus_onehot():
    key = jax.random.PRNGKey(0)
    logits = jax.random.normal(key, (37, 1000), jnp.float32)
    target = jax.random.randint(jax.random.PRNGKey(1), (37,), 0, 1000).at[3].set(-100)
    for reduction in ("mean", "sum"):
        grad = _trace(None, lambda: jax.jit(jax.grad(lambda x: gj.cross_entropy(x, target, reduction=reduction)))(
            logits))

        def plain(x):
            keep = target != -100
            lse = jax.nn.logsumexp(x, axis=-1)
            picked = jnp.take_along_axis(x, jnp.where(keep, target, 0)[:, None], axis=-1)[:, 0]
            loss = jnp.where(keep, lse - picked, 0.0)
            return loss.sum() / (keep.sum() if reduction == "mean" else 1)

        np.testing.assert_allclose(np.asarray(grad), np.asarray(jax.grad(plain)(logits)), atol=1e-6, rtol=1e-5)


_GRAPH_SCRIPT = textwrap.dedent(r"""
    import jax, jax.numpy as jnp, numpy as np
    import gks.jax as gj

    def step(x, w, a, b):
        y = gj.rmsnorm(x, w)
        y = gj.softmax(y)
        y, r = gj.fused_add_rmsnorm(y, x, w)
        return gj.sgemm(a, b) + 1.0, y, r

    k = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(k[0], (64, 512), jnp.float32)
    w = 1 + 0.1 * jax.random.normal(k[1], (512,), jnp.float32)
    a = jax.random.normal(k[2], (96, 64), jnp.float32)
    b = jax.random.normal(k[3], (64, 80), jnp.float32)
    f = jax.jit(step)
    first = f(x, w, a, b)
    for _ in range(3):
        again = f(x, w, a, b)
    hlo = f.lower(x, w, a, b).compile().as_text()
    # The computations XLA outlined into command buffers, and the gks calls inside them.
    blocks = [b for b in hlo.split("\n\n") if b.lstrip().startswith(("%command_buffer", "command_buffer"))]
    captured = sum(b.count('custom_call_target="gks.') for b in blocks)
    print("CAPTURED", captured, "OF", hlo.count('custom_call_target="gks.'))
    for p, q in zip(first, again):
        np.testing.assert_array_equal(np.asarray(p), np.asarray(q))
    np.savez("{out}", *[np.asarray(v) for v in again])
""")


@requires_jax_gpu
@requires_native
@requires_jax_tvm_ffi
def test_ops_run_inside_xla_command_buffers(tmp_path):
    """With XLA's command buffers on for custom calls (CUDA graphs), a jitted chain of gks
    ops is captured into one and gives what it gives without them."""
    outs = {}
    for name, flags in (("graphs", "--xla_gpu_enable_command_buffer=FUSION,CUSTOM_CALL "
                                   "--xla_gpu_graph_min_graph_size=1"),
                        ("plain", "--xla_gpu_enable_command_buffer=")):
        out = tmp_path / f"{name}.npz"
        env = {**os.environ, "XLA_FLAGS": flags}
        run = subprocess.run([sys.executable, "-c", _GRAPH_SCRIPT.format(out=out)], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stderr[-4000:]
        if name == "graphs":
            words = run.stdout.split()
            captured, total = int(words[words.index("CAPTURED") + 1]), int(words[words.index("OF") + 1])
            assert total == 4 and captured == total, f"{captured} of {total} gks calls in command buffers: {run.stdout}"
        outs[name] = np.load(out)
    for key in outs["plain"].files:
        np.testing.assert_array_equal(outs["graphs"][key], outs["plain"][key])
