# SPDX-License-Identifier: Apache-2.0
"""The tuned-config tables the ops read at call time: with config=-1 an op asks
:func:`resolve_config` (torch ops) or :func:`lookup_for` (JAX callers) for the config
``gks autotune`` measured fastest for this device, dtype and shape bucket, and runs its own
heuristic where there is none.

Two tables, each loaded once per process: the user's cache (``$GKS_CACHE_DIR/autotune.json``,
else ``~/.cache/gks/autotune.json``, written by ``gks autotune``), then the tables that ship
with gks (``gks/runtime/tuned/<gpu>.json``). A cache key holds everything that can change the
answer: GPU name, compute capability, driver version, gks version, kernel, dtype, shape
bucket (each dim rounded up to a power of two, but for the dims the op's spec keeps exact,
``OpSpec.bucket_exact``; an optional last dim that equals its default left off,
``OpSpec.canonical_shape``) and a hash of the kernel's config names. A shipped entry applies to
the same GPU model and compute capability, kernel, dtype, bucket and config list whatever
the driver and gks version. An entry made under any other value is never matched.

A table can never break an op: an unreadable file, or an entry that is not an object with an
integer config in the kernel's range, is ignored with one warning (RuntimeWarning) and the
op runs its heuristic. Tuning runs merge their entries into the user's cache under a file
lock (:func:`update_cache`), so that concurrent runs keep each other's work.

This module is the ops' side of autotuning; measuring lives in gks.profile.autotune, which
the ops never import.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import hashlib
import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1
# An entry's config when the op's own choice (config=-1, its heuristic) won: the op then
# keeps making that choice. Its name in the entry:
DEFAULT = -1
DEFAULT_NAME = "default"


def cache_kernel(backend: str, op: str) -> str:
    """The kernel field of a cache key: the op for CUDA (as before Triton was tunable),
    "BACKEND.OP" for the others ("triton.sgemm", "pallas.sgemm")."""
    return op if backend == "cuda" else f"{backend}.{op}"


def split_kernel(kernel: str) -> tuple[str, str]:
    """(backend, op) of a cache key's kernel field."""
    backend, _, op = kernel.rpartition(".")
    return backend or "cuda", op


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def shape_bucket(shape: Sequence[int], exact: Sequence[int] = ()) -> tuple[int, ...]:
    """Each dim rounded up to a power of two (0 and 1 stay 1), but for the dims at the
    indices in `exact`, which stay as they are (flags, and dims that pick another kernel)."""
    return tuple(int(d) if i in exact else next_pow2(max(int(d), 1)) for i, d in enumerate(shape))


@functools.cache
def _kernel_spec(kernel: str):
    from gks import registry

    return registry.get(split_kernel(kernel)[1])


@functools.cache
def bucket_exact_dims(kernel: str) -> tuple[int, ...]:
    """The indices of the shape dims that `kernel`'s op keeps exact in its bucket."""
    spec = _kernel_spec(kernel)
    return tuple(spec.shape_names.index(name) for name in spec.bucket_exact)


def kernel_bucket(kernel: str, shape: Sequence[int]) -> tuple[int, ...]:
    """The shape bucket of `kernel`'s cache keys, of the shape's canonical spelling (a
    flash_attention_fwd shape with Dv = D keys as the 7-dim one)."""
    return shape_bucket(_kernel_spec(kernel).canonical_shape(shape), bucket_exact_dims(kernel))


def config_hash(names: Sequence[str]) -> str:
    """Identifies a config list: renaming, adding or reordering configs changes it."""
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


def cache_key(identity: dict[str, str], kernel: str, dtype: str, bucket: Sequence[int],
              configs_hash: str) -> str:
    """The cache key: device identity, kernel, dtype, shape bucket, config-list hash."""
    parts = [
        identity["gpu"], f"cc{identity['cc']}", f"driver{identity['driver']}",
        f"gks{identity['gks']}", kernel, dtype, "x".join(str(int(b)) for b in bucket),
        f"cfg{configs_hash}",
    ]
    return "|".join(parts)


def cache_path() -> Path:
    root = os.environ.get("GKS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "gks"
    return base / "autotune.json"


# What has been warned about (a file, or a key of a file): each bad thing is said once.
_WARNED: set[str] = set()


def _warn_once(what: str, message: str) -> None:
    if what not in _WARNED:
        _WARNED.add(what)
        warnings.warn(f"gks: {message}; the ops run their own heuristic instead", RuntimeWarning,
                      stacklevel=3)


def load_cache(path: Path | None = None) -> dict[str, Any]:
    """The cache's entries ({key: entry}); {} when the file is missing, and {} with one
    warning when it is unreadable or of another format (the next tuning run rebuilds it)."""
    path = path or cache_path()
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        _warn_once(str(path), f"ignoring the tuning table {path}, which cannot be read ({e})")
        return {}
    entries = doc.get("entries") if isinstance(doc, dict) else None
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT or not isinstance(entries, dict):
        _warn_once(str(path), f"ignoring the tuning table {path}: not a gks cache of format {CACHE_FORMAT}")
        return {}
    return entries


def save_cache(entries: dict[str, Any], path: Path | None = None) -> None:
    """Writes the cache atomically (a temporary file named for this process, then a rename)."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    _entries.cache_clear()


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive lock on `path`'s lock file (beside it) for the duration."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def update_cache(changes: dict[str, Any], path: Path | None = None, remove: Sequence[str] = ()) -> dict[str, Any]:
    """Merges `changes` into the cache file and drops the keys in `remove`, reading and
    writing under a file lock: two tuning runs at once keep each other's entries. Returns
    the entries written."""
    path = path or cache_path()
    with _locked(path):
        entries = load_cache(path)
        for key in remove:
            entries.pop(key, None)
        entries.update(changes)
        save_cache(entries, path)
    return entries


# Bumped each time a table is (re)loaded, i.e. after a cache_clear(): what resolve_config's
# memory is keyed on. (Not id() of the tables: a new dict may reuse a freed one's address.)
_generation = 0


@functools.cache
def _entries() -> dict[str, Any]:
    global _generation
    _generation += 1
    return load_cache()


SHIPPED_DIR = Path(__file__).with_name("tuned")


def shipped_key(key: str) -> str:
    """A cache key without its driver and gks version: what a shipped entry is matched on."""
    parts = key.split("|")
    return "|".join(parts[:2] + parts[4:])


@functools.cache
def _shipped() -> dict[str, Any]:
    """The entries of the tables that ship with gks, under shipped_key."""
    global _generation
    _generation += 1
    out: dict[str, Any] = {}
    for path in sorted(SHIPPED_DIR.glob("*.json")):
        for key, entry in load_cache(path).items():
            out[shipped_key(key)] = entry
    return out


@functools.cache
def driver_version() -> str:
    """The NVIDIA driver version (NVML), else the CUDA driver API version, else 'unknown'."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        if nvml.nvmlInit_v2() == 0:
            buf = ctypes.create_string_buffer(96)
            if nvml.nvmlSystemGetDriverVersion(buf, 96) == 0:
                return buf.value.decode()
    except (OSError, AttributeError):
        pass
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        v = ctypes.c_int()
        if cuda.cuDriverGetVersion(ctypes.byref(v)) == 0:
            return f"cuda{v.value}"
    except (OSError, AttributeError):
        pass
    return "unknown"


def make_identity(gpu: str, cc: str) -> dict[str, str]:
    """The device identity a cache key starts with: GPU model and compute capability as the
    caller's framework reports them, with this machine's driver and gks version."""
    from gks import __version__

    return {"gpu": gpu, "cc": cc, "driver": driver_version(), "gks": __version__}


@functools.cache
def device_identity(device_index: int) -> dict[str, str]:
    import torch

    p = torch.cuda.get_device_properties(device_index)
    return make_identity(p.name, f"{p.major}.{p.minor}")


@functools.cache
def kernel_config_names(kernel: str) -> tuple[str, ...]:
    """The config names of a cache key's kernel ("gemm", "triton.sgemm", ...): what its
    config-list hash is made of."""
    from gks import registry

    backend, op = split_kernel(kernel)
    return registry.get(op).config_names(backend)


@functools.cache
def _kernel_hash(kernel: str) -> str:
    return config_hash(kernel_config_names(kernel))


def lookup(kernel: str, dtype: str, shape: Sequence[int], device_index: int) -> int | None:
    """The tuned config for CUDA device `device_index` (as torch numbers it), this dtype and
    shape's bucket (the user's cache first, then the shipped tables), or None."""
    return lookup_for(device_identity(device_index), kernel, dtype, shape)


def lookup_for(identity: dict[str, str], kernel: str, dtype: str, shape: Sequence[int]) -> int | None:
    """lookup() for a device identity the caller made (JAX callers, without torch). None
    also where the entry says the op's own heuristic won (DEFAULT), and inside untuned()."""
    entries, shipped = _entries(), _shipped()
    if _UNTUNED or (not entries and not shipped):
        return None
    key = cache_key(identity, kernel, dtype, kernel_bucket(kernel, shape), _kernel_hash(kernel))
    if key in entries:
        entry = entries[key]
    elif shipped_key(key) in shipped:
        entry = shipped[shipped_key(key)]
    else:
        return None
    config = _entry_config(kernel, key, entry)
    return None if config is None or config == DEFAULT else config


def _entry_config(kernel: str, key: str, entry: Any) -> int | None:
    """The entry's config, or None (with one warning) when the entry is not an object whose
    config is an integer in [DEFAULT, the kernel's config count)."""
    config = entry.get("config") if isinstance(entry, dict) else None
    count = len(kernel_config_names(kernel))
    if type(config) is int and DEFAULT <= config < count:
        return config
    what = f"config {config!r}" if isinstance(entry, dict) else f"a {type(entry).__name__}"
    _warn_once(key, f"ignoring the tuned entry {key}: {what}, where an object with a config in "
                    f"[{DEFAULT}, {count}) is expected")
    return None


# Set inside untuned(): every lookup misses, so config=-1 runs the op's own heuristic.
_UNTUNED = False


@contextlib.contextmanager
def untuned():
    """Within it the ops ignore the tuned tables (what tune_one times as the default)."""
    global _UNTUNED
    was, _UNTUNED = _UNTUNED, True
    try:
        yield
    finally:
        _UNTUNED = was


def _dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def table_generation() -> int:
    """A number that changes whenever the tables resolve_config reads are reloaded (after
    save_cache or cache_clear): what caches of its answers are keyed on."""
    _entries(), _shipped()
    return _generation


# resolve_config's answers, per table generation (_generation): every op call asks, so a
# repeated question costs a dict lookup instead of a key build (host time on every call;
# docs/perf/README.md).
_RESOLVED: dict[tuple, int] = {}


def resolve_config(kernel: str, like, shape: tuple[int, ...], config: int, dtype=None) -> int:
    """config if >= 0 (or < -1: the C++ API rejects it with a clear message); for -1 the
    tuned entry for this shape (in the op's spec's shape_names order, e.g. (M, N, K)) if
    any, else -1 (the C++ heuristic). `like` gives the device and, unless `dtype` is given,
    the dtype of the key."""
    # is_cuda and get_device(), not like.device: each .device builds a torch.device object.
    if config != -1 or not like.is_cuda or _UNTUNED:
        return config
    index = like.get_device()
    key = (kernel, dtype or like.dtype, shape, index, table_generation())
    found = _RESOLVED.get(key)
    if found is None:
        tuned = lookup(kernel, _dtype_name(dtype or like.dtype), shape, index)
        found = -1 if tuned is None else tuned
        if len(_RESOLVED) >= 4096:
            _RESOLVED.clear()
        _RESOLVED[key] = found
    return found
