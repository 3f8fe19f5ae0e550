# SPDX-License-Identifier: Apache-2.0
"""The op registry: one OpSpec per op says everything about it, once. It is the one list
of ops: ``gks.<op>``, the backends' namespaces, the tests, the benchmarks, the autotuner,
the CLI, the README table and the SASS/IR tools all find ops here.

Ops come in kernel families (norms, softmax, quantize, gemm, attention), and a family is one
module in every layer: its specs and references in ``gks/specs/<family>.py`` (each spec
registers itself with :func:`register`; gks.reference exports the references), and its op
functions in ``gks/_torch_ops/<family>.py`` (the CUDA backend as torch ops), ``gks/cuda/<family>.py`` (the
DLPack entry points), ``gks/triton/<family>.py`` and ``gks/pallas/<family>.py``. A backend a
spec declares is found at ``BACKEND_MODULES[backend].<family>:<op>``, and each backend package
exports what its family modules list in ``__all__`` (:func:`export_families`): no other list
says where an op lives.

Shapes are tuples whose meaning the spec's ``shape_names`` gives (e.g. ``("M", "N")`` for a
row-wise op over an ``[M, N]`` input); a spec may let its shapes leave off trailing names
that then take another dim's value or a constant (``optional_dims``: flash_attention_fwd's
Dv, D unless given; gemm's epilogue, 0 unless given). Every callable that takes inputs takes the dict that ``make_inputs`` returns, as
keyword arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

# Bytes per element of the dtypes the specs name (for their bytes_moved formulas).
ELEM_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "int32": 4}

# Compute-capability names used in `Backend.archs`.
ARCH_NAMES = {"sm_80": (8, 0), "sm_90": (9, 0), "sm_90a": (9, 0)}


# Where each backend's public ops live: the op `name` of family `f` is
# f"{BACKEND_MODULES[backend]}.{f}:{name}" (gks.<name> re-exports the CUDA one).
BACKEND_MODULES = {"cuda": "gks._torch_ops", "triton": "gks.triton", "pallas": "gks.pallas"}
# The harness calls every backend with torch tensors; Pallas's ops take JAX arrays, so its
# entry is the torch-in, torch-out bridge over gks.pallas.<name>.
_HARNESS_MODULES = {"pallas": "gks.pallas._bridge"}


@dataclasses.dataclass(frozen=True)
class Backend:
    """One implementation of an op.

    ``archs`` lists the GPU architectures it is built or tuned for; ``interpreted`` says
    whether it also runs on a CPU machine (Triton's interpreter, Pallas interpret mode);
    ``tunable`` whether it compiles several configs and takes a `config` argument that
    ``gks autotune`` chooses (the CUDA kernel's configs are the library's table for the op,
    OpSpec.configs; another backend's names come from ``<module>.<family>.<op>_config_names()``).
    ``entry`` ("module:function", filled in by the registry from the op's family) takes torch
    tensors, the harness's common currency, with the op's meaning.
    """

    name: str
    archs: tuple[str, ...]
    interpreted: bool = False
    tunable: bool = False
    entry: str = ""

    def load(self) -> Callable[..., Any]:
        module_name, _, attr = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), attr)


@dataclasses.dataclass(frozen=True)
class Peer:
    """A reference implementation a benchmark compares against (e.g. torch eager). An upstream
    one names its ``package`` (pinned in reference-dependencies.json, gks.upstream): the tests
    compare gks's error with its error, and a run that enables it while the pinned version is
    missing reports it failed, naming the package."""

    name: str
    make: Callable[[], Callable[..., Any]]  # builds the callable (may compile lazily)
    package: str = ""


def shape_seed(shape) -> int:
    """A seed that depends on the shape alone: for sizes that must be the same in every input
    set of a shape (packed sequences, contiguous groups), so that a CUDA graph captured on
    one set replays on another."""
    import hashlib

    return int.from_bytes(hashlib.sha256(repr(tuple(shape)).encode()).digest()[:4], "little")


def mixed_sizes(count: int, largest: int, gen) -> list[int]:
    """Sizes of `count` parts (sequences, groups) up to `largest`, mixed as the specs' test
    inputs want them: the first full, the second empty (with three or more), the others
    uniform in [0, largest] from `gen` (a CPU torch.Generator)."""
    import torch

    sizes = torch.randint(0, largest + 1, (count,), generator=gen).tolist()
    if count:
        sizes[0] = largest
    if count >= 3:
        sizes[1] = 0
    return sizes


def reference_peer(op: str, *, compiled: bool) -> Peer:
    """gks.reference.<op> itself ("torch eager") or under torch.compile ("torch.compile"):
    the fused code PyTorch makes of the op's plain definition, the peer the memory-bound
    ops are held to."""

    def make() -> Callable[..., Any]:
        from gks import reference

        fn = getattr(reference, op)
        if not compiled:
            return fn
        import torch

        # Dynamo keeps one cache per function, and past its recompile limit (8 shape x dtype
        # workloads) it silently runs the function eagerly; a fresh cache each workload keeps
        # every row compiled.
        torch.compiler.reset()
        return torch.compile(fn, dynamic=False)

    return Peer("torch.compile" if compiled else "torch eager", make)


@dataclasses.dataclass(frozen=True)
class BadInput:
    """One bad call that every backend of the op must refuse alike (tests/contract runs it on
    each): ``make(torch, device)`` builds the call's keyword arguments; the call must raise
    ``error`` (a type or a tuple of types) with ``message`` in its text, which names the
    argument and what was expected. ``jax``: whether the case can be handed to the Pallas
    backend at all (JAX arrays have no strides and, by default, no float64). ``gpu``: the
    case mixes the GPU with the host (an argument made on the CPU whatever `device` is), so
    it runs only where `device` is a GPU."""

    id: str
    make: Callable[[Any, str], dict[str, Any]]
    error: type | tuple[type, ...]
    message: str
    jax: bool = True
    gpu: bool = False


class NativeConfigs(Sequence):
    """An op's CUDA config table, read from the library when first used
    (gks._native.config_table): the C++ table is its one declaration. Empty where the
    library is not built (the CUDA backend cannot run there either)."""

    def __init__(self, op: str):
        self.op = op

    @functools.cached_property
    def _table(self) -> tuple[Mapping[str, Any], ...]:
        from gks import _native

        try:
            return _native.config_table(self.op)
        except _native.NativeLibraryUnavailable:
            return ()

    def __getitem__(self, index):
        return self._table[index]

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"NativeConfigs({self.op!r})"


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """Everything about one op."""

    name: str
    family: str  # the kernel family (the module name in every layer): norms, gemm, ...
    summary: str
    signature: str
    shape_names: tuple[str, ...]
    dtypes: tuple[str, ...]  # torch dtype names: "float32", "float16", "bfloat16", ...
    make_inputs: Callable[..., dict[str, Any]]  # (shape, dtype, device, seed) -> inputs
    reference: Callable[..., Any]  # fp32 (or better) math, output in the op's dtype
    tolerance: Mapping[str, tuple[float, float]]  # dtype -> (atol, rtol) vs reference
    flops: Callable[[tuple[int, ...]], float]
    bytes_moved: Callable[[tuple[int, ...], str], float]  # fewest bytes: inputs + outputs
    backends: tuple[Backend, ...]
    test_shapes: tuple[tuple[int, ...], ...]
    bench_shapes: tuple[tuple[int, ...], ...]
    peers: tuple[Peer, ...] = ()
    # The CUDA kernel's configs (its `config` argument), in index order: tile configs, or the
    # kernel shapes of a row op. Filled in for a tunable CUDA backend: NativeConfigs, the
    # library's own table. gks autotune chooses among them (gks.profile.autotune).
    configs: Sequence[Mapping[str, Any]] = ()
    # The CUDA kernels this op launches: regular expressions (re.search) over their demangled
    # names. tools/dump_sass.py selects an op's kernels with them; a test checks that every
    # kernel in the library belongs to exactly one op.
    sass_kernels: tuple[str, ...] = ()
    # A small shape (a test shape) for the contract tests of tests/contract: opcheck,
    # torch.compile, CUDA graphs, the caller's stream, the _out entry point.
    example_shape: tuple[int, ...] = ()
    # The bad calls every backend must refuse alike (BadInput).
    bad_inputs: tuple[BadInput, ...] = ()
    # Calls the op's gks.cuda `_out` entry point: (gks.cuda, inputs, outputs, **kw), the
    # outputs a tuple shaped like the reference's result; kw passes `config` on to a tunable
    # op's entry point.
    cuda_out: Callable[..., None] | None = None
    # The names of those outputs (the `_out` entry point's arguments), and the in-place forms
    # it documents: output name -> the input it may be exactly (the same view). Any other
    # output that repeats an element or shares memory with an argument is refused.
    outputs: tuple[str, ...] = ()
    in_place: Mapping[str, str] = dataclasses.field(default_factory=dict)
    # Inputs the op documents as dense only (refused as strided views, in every backend):
    # scripts/sanitize_cases.py's strided layout leaves them dense.
    contiguous_inputs: tuple[str, ...] = ()
    # Shape dims the autotuner's shape bucket keeps exact instead of rounding them up to a
    # power of two: flags, and dims that pick another kernel.
    bucket_exact: tuple[str, ...] = ()
    # The last names of shape_names that a shape may leave off, each mapped to the dim whose
    # value it then takes (flash_attention_fwd: {"Dv": "D"}) or to a constant (gemm:
    # {"epilogue": 0}): a dim added to an op after its shapes, tuned tables and bench records
    # were made, which keep their meaning and keys. The spec's functions take either form;
    # canonical_shape() leaves off what equals its default, the form the tuned tables key on.
    optional_dims: Mapping[str, str | int] = dataclasses.field(default_factory=dict)
    # The unit the FLOPs run on, for the roofline: "fp32" (CUDA cores), "tensor" (FP16/BF16
    # Tensor Cores), "int8" (INT8 Tensor Cores), "fp8" (FP8 Tensor Cores).
    compute: str = "fp32"
    # Compares an output with the reference; default is allclose with `tolerance`.
    check: Callable[..., None] | None = None

    def __post_init__(self) -> None:
        required = len(self.shape_names) - len(self.optional_dims)
        if self.optional_dims and (self.shape_names[required:] != tuple(self.optional_dims) or any(
                not isinstance(d, int) and d not in self.shape_names[:required]
                for d in self.optional_dims.values())):
            raise ValueError(f"op '{self.name}': optional_dims {dict(self.optional_dims)} must map the "
                             f"last of shape_names {self.shape_names} to dims before them or to constants")
        bound = []
        for b in self.backends:
            if b.name not in BACKEND_MODULES:
                raise ValueError(f"op '{self.name}': unknown backend '{b.name}' "
                                 f"(known: {', '.join(BACKEND_MODULES)})")
            module = _HARNESS_MODULES.get(b.name) or f"{BACKEND_MODULES[b.name]}.{self.family}"
            bound.append(b if b.entry else dataclasses.replace(b, entry=f"{module}:{self.name}"))
        object.__setattr__(self, "backends", tuple(bound))
        cuda = next((b for b in bound if b.name == "cuda"), None)
        if cuda is not None and cuda.tunable and not self.configs:
            object.__setattr__(self, "configs", NativeConfigs(self.name))

    def backend(self, name: str) -> Backend:
        for b in self.backends:
            if b.name == name:
                return b
        known = ", ".join(b.name for b in self.backends)
        raise KeyError(f"op '{self.name}' has no backend '{name}' (it has: {known})")

    def shape_lengths(self) -> tuple[int, ...]:
        """How many dims a shape of this op may have, fewest first."""
        full = len(self.shape_names)
        return tuple(range(full - len(self.optional_dims), full + 1))

    def fits_shape(self, shape: Sequence[int]) -> bool:
        """Whether `shape` has as many dims as a shape of this op may."""
        return len(shape) in self.shape_lengths()

    def canonical_shape(self, shape: Sequence[int]) -> tuple[int, ...]:
        """`shape` without the optional dims at its end that equal their defaults: one
        spelling per shape (e.g. D = Dv = 64 is the 7-dim attention shape)."""
        shape = tuple(shape)
        names = self.shape_names
        while len(shape) > len(names) - len(self.optional_dims):
            default = self.optional_dims[names[len(shape) - 1]]
            if shape[-1] != (default if isinstance(default, int) else shape[names.index(default)]):
                break
            shape = shape[:-1]
        return shape

    def dims_text(self, sep: str = "x") -> str:
        """shape_names joined by sep, the optional ones in brackets: "BxHqx...xcausal[xDv]"."""
        required = len(self.shape_names) - len(self.optional_dims)
        text = sep.join(self.shape_names[:required])
        return text + "".join(f"[{sep}{n}]" for n in self.optional_dims)

    def has_backend(self, name: str) -> bool:
        return any(b.name == name for b in self.backends)

    def public(self, backend: str) -> Callable[..., Any]:
        """The op as users call it: gks.<backend>.<op> (gks._torch_ops for "cuda": gks.<op>),
        or gks.reference.<op>."""
        package = "gks.reference" if backend == "reference" else BACKEND_MODULES[backend]
        return getattr(importlib.import_module(package), self.name)

    def config_names(self, backend: str = "cuda") -> tuple[str, ...]:
        """The names of the configs `backend` compiles for this op, in index order (its
        `config` argument indexes them); () where it has none to choose from."""
        b = self.backend(backend)
        if not b.tunable:
            return ()
        if backend == "cuda":
            return tuple(c["name"] for c in self.configs)
        module = importlib.import_module(f"{BACKEND_MODULES[backend]}.{self.family}")
        return tuple(getattr(module, f"{self.name}_config_names")())

    def arithmetic_intensity(self, shape: tuple[int, ...], dtype: str) -> float:
        return self.flops(shape) / self.bytes_moved(shape, dtype)


_REGISTRY: dict[str, OpSpec] = {}


def register(spec: OpSpec) -> OpSpec:
    if _REGISTRY.get(spec.name, spec) is not spec:
        raise ValueError(f"op '{spec.name}' is registered twice")
    _REGISTRY[spec.name] = spec
    return spec


def _load_specs() -> None:
    """Imports every module in gks/specs/ (each registers its op once)."""
    import pkgutil

    import gks.specs

    for info in pkgutil.iter_modules(gks.specs.__path__):
        importlib.import_module(f"gks.specs.{info.name}")


def ops() -> Sequence[OpSpec]:
    """All registered ops, in name order."""
    _load_specs()
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def families() -> tuple[str, ...]:
    """The kernel families, in name order."""
    return tuple(sorted({s.family for s in ops()}))


def ops_with(backend: str, *, tunable: bool = False) -> tuple[str, ...]:
    """The names of the ops that have `backend` (and, with tunable, can tune it)."""
    return tuple(s.name for s in ops() if s.has_backend(backend)
                 and (not tunable or s.backend(backend).tunable))


def export_families(package: str, namespace: dict[str, Any]) -> list[str]:
    """Fills a backend package's namespace (gks.triton, gks.cuda, ...: packages whose modules
    are the families) with its families' public names, each module's __all__: the ops and
    their helpers. Every module is imported before any name is bound, so an op named like its
    family's module (softmax, gemm) is the op, not the module. Returns the names bound."""
    modules = []
    for family in families():
        try:
            modules.append(importlib.import_module(f"{package}.{family}"))
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{family}":
                raise
            # The package has no module for this family (gks.cuda has one for every family;
            # a backend without any op of a family has none).
    names = []
    for module in modules:
        for name in getattr(module, "__all__", ()):
            namespace[name] = getattr(module, name)
            names.append(name)
    return sorted(names)


def get(name: str) -> OpSpec:
    _load_specs()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise KeyError(f"unknown op '{name}' (known ops: {known})") from None


def describe(spec: OpSpec) -> dict[str, Any]:
    """A JSON-ready description of a spec (the `gks list --format json` record)."""
    return {
        "name": spec.name,
        "family": spec.family,
        "summary": spec.summary,
        "signature": spec.signature,
        "shape_names": list(spec.shape_names),
        "optional_dims": dict(spec.optional_dims),
        "dtypes": list(spec.dtypes),
        "backends": [
            {"name": b.name, "archs": list(b.archs), "interpreted": b.interpreted, "tunable": b.tunable}
            for b in spec.backends
        ],
        "tolerance": {k: list(v) for k, v in spec.tolerance.items()},
        "bench_shapes": [list(s) for s in spec.bench_shapes],
        "peers": [p.name for p in spec.peers],
        "configs": [dict(c) for c in spec.configs],
        "compute": spec.compute,
    }


def markdown_table() -> str:
    """The README's kernel x backend table (a test keeps README.md equal to this)."""
    specs = ops()
    names = ["cuda", "triton", "pallas"]
    lines = ["| op | " + " | ".join(names) + " | dtypes | what it computes |",
             "|---|" + "---|" * len(names) + "---|---|"]
    for s in specs:
        have = {b.name: ", ".join(b.archs) for b in s.backends}
        cells = [have.get(n, "—") for n in names]
        lines.append(f"| `{s.name}` | " + " | ".join(cells) + f" | {', '.join(s.dtypes)} | {s.summary} |")
    return "\n".join(lines)
