# SPDX-License-Identifier: Apache-2.0
"""The one path every gks.jax.<op> takes into the CUDA library: an XLA FFI custom call.

An op's family module (gks/jax/<family>.py) knows what the registry cannot: the public
signature, the outputs' shapes and dtypes, and any work around the kernel. It hands
:func:`call` the op's inputs (the spec's input names, as its ``cuda_out`` reads them) and
the outputs' ``jax.ShapeDtypeStruct`` s. Everything else comes from what already exists:

* which binding the op calls, and where its inputs, outputs and scalars go in that call, is
  read off the spec's ``cuda_out`` (or the family's own entry), run once per call against a
  recording stand-in for the library: gks.cuda's ``_out`` entry points themselves run, their
  ``_native.module()`` answering with a recorder. No argument order is written down twice.
* the checks are the library's: the same ``_out`` entry point runs against the real library
  in validate-only mode (gks::ValidateOnly, as the torch fake kernels do), each abstract
  value described as a DLPack tensor at a made-up address (no memory, no torch). A bad
  input raises at trace time with the CUDA op's own message.
* the binding is registered, once per (binding, argument layout), as an XLA FFI target
  through jax-tvm-ffi, which hands it the buffers as DLPack tensors and sets tvm-ffi's
  environment stream to XLA's stream (what the bindings' ``stream_for`` reads).
"""

from __future__ import annotations

import dataclasses
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np

from gks import _native, registry
from gks.runtime.dlpack import DL_CUDA, Described, dl_dtype

# The library launches on XLA's stream and, for these ops, neither synchronizes the host nor
# allocates: XLA may record them into its command buffers (CUDA graphs). The exceptions, by
# spec name, say why: a stream-ordered temporary (gks::detail::StreamBuffer) becomes a graph
# memory node under capture, and CUDA refuses a graph with memory nodes as the child graph XLA
# nests a traced custom call in.
NO_CUDA_GRAPH: dict[str, str] = {
    "int8_gemm": "transposes b_q into a stream-ordered temporary on some paths",
    "gemm": "split-K and stream-K tiles, and the WMMA fallback's epilogue, use a stream-ordered workspace",
    "quantize_fp8": "granularity 'tensor' reduces through a stream-ordered temporary",
    "flash_attention_decode": "the split partials come from the stream-ordered pool",
    "rmsnorm_bwd": "dweight's per-block partial sums come from the stream-ordered pool",
    "flash_attention_bwd": "delta (and the wgmma kernel's fp32 dq) come from the stream-ordered pool",
    "flash_attention_varlen_bwd": "delta comes from the stream-ordered pool",
}


class JaxFfiUnavailable(RuntimeError):
    """jax-tvm-ffi (the bridge that registers tvm-ffi functions as XLA FFI targets) is missing."""


def _jax_tvm_ffi():
    try:
        import jax_tvm_ffi
    except ImportError as e:
        raise JaxFfiUnavailable(
            "gks.jax needs the jax-tvm-ffi package to register the CUDA kernels with XLA: "
            "pip install 'jax-tvm-ffi>=0.1.3' (or pip install -e '.[jax-cuda]')") from e
    return jax_tvm_ffi


def is_array(value) -> bool:
    """Whether an input is an array (a jax.Array, a tracer, a NumPy array) rather than a
    scalar argument."""
    return isinstance(value, (jax.Array, np.ndarray, jax.core.Tracer))


def _described(value, slot: int) -> Described:
    """An abstract value as XLA will hand it to the kernel: dense row-major (XLA's default
    layout, what jax-tvm-ffi passes), on CUDA device 0, in a slot of its own."""
    dtype = np.dtype(value.dtype)
    return Described(value.shape, None, dl_dtype(dtype.name, dtype.itemsize), (DL_CUDA, 0), slot << 40)


def _validate(entry: Callable, inputs: Mapping[str, Any], outputs: Sequence, kw: Mapping[str, Any]) -> None:
    import tvm_ffi

    import gks.cuda

    slots: dict[int, int] = {}
    described = {}
    for name, value in inputs.items():
        if is_array(value):
            # The same array passed twice is one buffer (inputs may share: XLA passes it twice).
            slot = slots.setdefault(id(value), len(slots) + 1)
            value = tvm_ffi.from_dlpack(_described(value, slot))
        described[name] = value
    outs = tuple(tvm_ffi.from_dlpack(_described(o, len(slots) + 1 + i))
                 for i, o in enumerate(outputs))
    module = _native.module()
    # Validate-only is per thread in the library: XLA's threads running kernels meanwhile
    # (JAX dispatches asynchronously) are not affected.
    module.validate_only(True)
    try:
        entry(gks.cuda, described, outs, **kw)
    finally:
        module.validate_only(False)


# ---- the binding's call, recorded


@dataclasses.dataclass(frozen=True)
class _Slot:
    kind: str  # "in" or "out"
    key: Any  # the input's name or the output's index


class _Recorder:
    """Stands in for the loaded library: records the one binding call an entry point makes."""

    def __init__(self):
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args: self.calls.append((name, args))


class _RecordingCuda:
    """gks.cuda with each entry point's globals pointing `_native` at a recorder: the entry
    point's own code (argument conversion, defaults, None for an absent bias) runs as is."""

    def __init__(self, recorder: _Recorder):
        self._native = types.SimpleNamespace(module=lambda: recorder)

    def __getattr__(self, name: str):
        import gks.cuda

        f = getattr(gks.cuda, name)
        if not isinstance(f, types.FunctionType):
            return f
        g = types.FunctionType(f.__code__, {**f.__globals__, "_native": self._native}, f.__name__,
                               f.__defaults__, f.__closure__)
        g.__kwdefaults__ = f.__kwdefaults__
        return g


# jax-tvm-ffi 0.1.3 decodes a string attribute into a tvm-ffi String that it does not keep
# alive through the call (its scalar and array attributes it keeps): a string short enough
# for tvm-ffi's inline small-string form (up to 7 bytes) survives, a longer one reaches the
# binding freed ('gelu_tanh' crashed gemm's jitted test with "Cannot find type info for
# type_index=..."). Such strings are bound into the registered target (the adapter's
# layout), not passed as XLA attributes.
_INLINE_STRING_BYTES = 7


def _bound_string(value) -> bool:
    return isinstance(value, str) and len(value.encode()) > _INLINE_STRING_BYTES


def _attr(op: str, position: int, value):
    """A scalar argument as an XLA attribute of the binding's type; None stays None (no XLA
    attribute holds it: the plan passes it through an adapter)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        return np.bool_(value)
    if isinstance(value, (int, np.integer)):
        return np.int64(value)
    if isinstance(value, (float, np.floating)):
        return np.float64(value)
    if isinstance(value, str):
        return value
    raise TypeError(f"gks.jax.{op}: the binding's argument {position} is {value!r}, which XLA cannot pass "
                    "as an attribute")


@dataclasses.dataclass(frozen=True)
class _Plan:
    binding: str  # the library function
    operands: tuple[str, ...]  # input names, in the binding's order (one may repeat)
    rets: tuple[int, ...]  # output indices, in the binding's order
    arg_spec: tuple[str, ...]  # jax-tvm-ffi's: "args", "rets", "attrs.<key>"
    attrs: dict[str, Any]
    # The binding's arguments, where jax-tvm-ffi cannot hand them over as they come (inputs
    # after outputs, a None, a string it would free): ("in" | "out" | "attr", index or key),
    # ("none", None) or ("const", the string) per position, for an adapter that puts them in
    # order. () when the call is direct.
    layout: tuple[tuple[str, Any], ...] = ()


def _plan(op: str, entry: Callable, inputs: Mapping[str, Any], n_out: int, kw: Mapping[str, Any]) -> _Plan:
    recorder = _Recorder()
    slots = {k: (_Slot("in", k) if is_array(v) else v) for k, v in inputs.items()}
    entry(_RecordingCuda(recorder), slots, tuple(_Slot("out", i) for i in range(n_out)), **kw)
    if len(recorder.calls) != 1:
        raise RuntimeError(f"gks.jax.{op}: its entry point made {len(recorder.calls)} library calls, not one")
    binding, args = recorder.calls[0]
    kinds = ["in" if isinstance(a, _Slot) and a.kind == "in" else "out" if isinstance(a, _Slot)
             else "none" if a is None else "const" if _bound_string(a) else "attr" for a in args]
    operands = tuple(a.key for a, k in zip(args, kinds) if k == "in")
    rets = tuple(a.key for a, k in zip(args, kinds) if k == "out")
    if sorted(rets) != list(range(n_out)):
        raise RuntimeError(f"gks.jax.{op}: the binding '{binding}' takes outputs {rets}, not each of {n_out} once")
    attrs = {f"a{pos:02d}": _attr(op, pos, a) for pos, (k, a) in enumerate(zip(kinds, args)) if k == "attr"}
    # XLA sorts attributes by name; jax-tvm-ffi puts them back where arg_spec says.
    arg_spec = []
    for pos, kind in enumerate(kinds):
        if kind == "attr":
            arg_spec.append(f"attrs.a{pos:02d}")
        elif kind in ("in", "out") and (pos == 0 or kinds[pos - 1] != kind):
            arg_spec.append("args" if kind == "in" else "rets")
    if arg_spec.count("args") <= 1 and arg_spec.count("rets") <= 1 and "none" not in kinds and "const" not in kinds:
        return _Plan(binding, operands, rets, tuple(arg_spec), attrs)
    # jax-tvm-ffi places all inputs at one position and all outputs at one, and no XLA
    # attribute is None: an adapter takes (inputs, outputs, attributes) and calls the binding
    # in its own order, with the bound strings in their places.
    n_in, layout = 0, []
    for pos, (kind, a) in enumerate(zip(kinds, args)):
        if kind == "in":
            layout.append(("in", n_in))
            n_in += 1
        elif kind == "out":
            layout.append(("out", rets.index(a.key)))
        elif kind == "const":
            layout.append(("const", a))
        else:
            layout.append((kind, f"a{pos:02d}" if kind == "attr" else None))
    spec = ("args", "rets", *(f"attrs.{k}" for k in attrs))
    return _Plan(binding, operands, rets, spec, attrs, tuple(layout))


def _adapter(function, layout: tuple, n_in: int, n_out: int, attr_keys: tuple[str, ...]):
    """A tvm-ffi function taking (*inputs, *outputs, *attributes) that calls `function` with
    its arguments in the binding's order (a Python hop per call: for bindings whose order
    jax-tvm-ffi cannot express)."""
    import tvm_ffi

    def adapted(*a):
        ins, outs = a[:n_in], a[n_in:n_in + n_out]
        named = dict(zip(attr_keys, a[n_in + n_out:]))
        function(*(ins[i] if kind == "in" else outs[i] if kind == "out" else named[i] if kind == "attr"
                   else i if kind == "const" else None for kind, i in layout))

    return tvm_ffi.convert(adapted)


_REGISTERED: dict[tuple, str] = {}
_REGISTER_LOCK = threading.Lock()


def _target(op: str, plan: _Plan) -> str:
    """The XLA FFI target for the plan's binding and argument layout, registered once."""
    key = (plan.binding, plan.arg_spec, plan.layout)
    with _REGISTER_LOCK:
        name = _REGISTERED.get(key)
        if name is None:
            jtf = _jax_tvm_ffi()
            function = getattr(_native.module(), plan.binding)
            if plan.layout:
                function = _adapter(function, plan.layout, len(plan.operands), len(plan.rets), tuple(plan.attrs))
            name = f"gks.{plan.binding}.{len(_REGISTERED)}"
            jtf.register_ffi_target(name, function, list(plan.arg_spec), platform="gpu",
                                    allow_cuda_graph=op not in NO_CUDA_GRAPH, pass_owned_tensor=bool(plan.layout))
            _REGISTERED[key] = name
    return name


class MissingEntryPoint(_native.NativeLibraryUnavailable):
    """The built library lacks the binding an op calls: it was built from older sources."""


def _check_binding(op: str, binding: str) -> None:
    module = _native.module()  # NativeLibraryUnavailable says how to build it
    if not module.implements_function(binding):
        raise MissingEntryPoint(
            f"gks.jax.{op}: the gks library at {_native.library_path()} has no '{binding}' entry point: it "
            "was built from older sources than this package; rebuild it (pip install -e ., or "
            "scripts/setup.sh)")


def call(op: str, inputs: Mapping[str, Any], outputs: Sequence[jax.ShapeDtypeStruct], *,
         config: int | None = None, entry: Callable | None = None) -> tuple[jax.Array, ...]:
    """Runs op's CUDA kernel as an XLA custom call: inputs by the spec's input names (arrays
    and the scalar arguments the entry point reads), outputs as ShapeDtypeStructs in the
    spec's order; config passed on where given (a tunable op). entry: (gks.cuda, inputs,
    outputs, **kw) -> None, the binding call; default the spec's cuda_out. Validates at
    trace time (the library's own checks, raising its errors); returns the outputs."""
    spec = registry.get(op)
    entry = entry or spec.cuda_out
    kw = {} if config is None else {"config": int(config)}
    inputs = {k: (jax.numpy.asarray(v) if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    outputs = tuple(jax.ShapeDtypeStruct(tuple(o.shape), o.dtype) for o in outputs)
    for name, value in inputs.items():
        # Eagerly, a concrete array says where the call runs; under jit XLA refuses a target
        # with no handler for the platform ("No FFI handler registered for gks.<binding>").
        if isinstance(value, jax.Array) and not isinstance(value, jax.core.Tracer) and all(
                d.platform != "gpu" for d in value.devices()):
            raise RuntimeError(f"gks.jax.{op}: argument '{name}' is on {sorted(d.platform for d in value.devices())}"
                               ": the CUDA kernels run on NVIDIA GPUs only (gks.pallas.<op> runs anywhere)")
    plan = _plan(op, entry, inputs, len(outputs), kw)
    _check_binding(op, plan.binding)
    _validate(entry, inputs, outputs, kw)
    return _invoke(_target(op, plan), plan, inputs, outputs)


def _invoke(target: str, plan: _Plan, inputs: Mapping[str, Any], outputs: Sequence) -> tuple[jax.Array, ...]:
    """The custom call of `target` as the plan lays it out; the outputs in the spec's order."""
    # Under jax.vmap the kernel runs once per batch element, a loop: always right, where
    # broadcasting the batch into the operands would hand a row op a batched weight.
    results = jax.ffi.ffi_call(target, tuple(outputs[i] for i in plan.rets), vmap_method="sequential")(
        *(inputs[name] for name in plan.operands), **plan.attrs)
    by_index = dict(zip(plan.rets, results))
    return tuple(by_index[i] for i in range(len(outputs)))


def tuned(op: str, config: int, dtype, dims: Sequence[int] | None) -> int:
    """config; for -1, what gks.<op> runs too: the tuned table's entry (the user's cache,
    then the shipped table) for JAX's default GPU, this dtype and these spec dims, else -1
    (the library's heuristic). dims: the op's shape in its spec's shape_names order, or None
    where the inputs have no such shape (the library then refuses them)."""
    config = int(config)
    if config != -1 or dims is None:
        return config
    try:
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        gpus = []
    if not gpus:  # tracing for a GPU from a host without one: the heuristic
        return -1
    from gks.runtime.tables import lookup_for, make_identity

    identity = make_identity(gpus[0].device_kind, str(getattr(gpus[0], "compute_capability", "")))
    found = lookup_for(identity, op, np.dtype(dtype).name, tuple(int(d) for d in dims))
    return -1 if found is None else found


def row_dims(x) -> tuple[int, int]:
    """(M, N) of x [..., N] taken as M rows: the row ops' spec dims."""
    n = x.shape[-1] if x.ndim else 1
    return (int(np.prod(x.shape)) // n if n else 0), n


def like(x, dtype=None, shape=None) -> jax.ShapeDtypeStruct:
    """An output shaped like x (or `shape`), of x's dtype (or `dtype`)."""
    return jax.ShapeDtypeStruct(tuple(x.shape if shape is None else shape), x.dtype if dtype is None else dtype)


def dtype_of(value, op: str, arg: str):
    """A dtype argument (a NumPy/JAX dtype, a type such as jnp.float16, its name, or a torch
    dtype, which the harness passes) as a NumPy dtype; raises TypeError naming the argument."""
    for candidate in (value, str(value).removeprefix("torch.")):  # a torch dtype by its name
        try:
            return np.dtype(jax.numpy.dtype(candidate))
        except TypeError:
            pass
    raise TypeError(f"gks.{op}: argument '{arg}' must be a dtype, got {value!r}")


def ops() -> tuple[str, ...]:
    """The ops gks.jax must have: every registered op with a CUDA backend."""
    return registry.ops_with("cuda")
