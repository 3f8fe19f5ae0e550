# SPDX-License-Identifier: Apache-2.0
"""The op registry: one OpSpec per op says everything about it, once.

Tests, benchmarks, the CLI, the README table and the roofline all read these specs. A spec
lives in ``gks/specs/<op>.py`` and registers itself with :func:`register`.

Shapes are tuples whose meaning the spec's ``shape_names`` gives (e.g. ``("M", "N")`` for a
row-wise op over an ``[M, N]`` input). Every callable that takes inputs takes the dict that
``make_inputs`` returns, as keyword arguments.
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


@dataclasses.dataclass(frozen=True)
class Backend:
    """One implementation of an op.

    ``entry`` is "module:function": the function takes torch tensors (the harness's common
    currency) with the op's meaning. ``archs`` lists the GPU architectures it is built or
    tuned for; ``interpreted`` says whether it also runs on a CPU machine (Triton's
    interpreter, Pallas interpret mode).
    """

    name: str
    entry: str
    archs: tuple[str, ...]
    interpreted: bool = False

    def load(self) -> Callable[..., Any]:
        module_name, _, attr = self.entry.partition(":")
        return getattr(importlib.import_module(module_name), attr)


@dataclasses.dataclass(frozen=True)
class Peer:
    """A reference implementation a benchmark compares against (e.g. torch eager)."""

    name: str
    make: Callable[[], Callable[..., Any]]  # builds the callable (may compile lazily)


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

        return torch.compile(fn, dynamic=False)

    return Peer("torch.compile" if compiled else "torch eager", make)


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
    # kernel shapes of a row op (NativeConfigs: read from the library, which declares them).
    # gks autotune chooses among them (gks.profile.autotune).
    configs: Sequence[Mapping[str, Any]] = ()
    # Shape dims the autotuner's shape bucket keeps exact instead of rounding them up to a
    # power of two: flags, and dims that pick another kernel.
    bucket_exact: tuple[str, ...] = ()
    # The unit the FLOPs run on, for the roofline: "fp32" (CUDA cores), "tensor" (FP16/BF16
    # Tensor Cores), "int8" (INT8 Tensor Cores).
    compute: str = "fp32"
    # Compares an output with the reference; default is allclose with `tolerance`.
    check: Callable[..., None] | None = None

    def backend(self, name: str) -> Backend:
        for b in self.backends:
            if b.name == name:
                return b
        known = ", ".join(b.name for b in self.backends)
        raise KeyError(f"op '{self.name}' has no backend '{name}' (it has: {known})")

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
        "summary": spec.summary,
        "signature": spec.signature,
        "shape_names": list(spec.shape_names),
        "dtypes": list(spec.dtypes),
        "backends": [
            {"name": b.name, "archs": list(b.archs), "interpreted": b.interpreted}
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
