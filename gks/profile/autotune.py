# SPDX-License-Identifier: Apache-2.0
"""Autotuning of the kernels' configs: ``python -m gks autotune --kernel NAME`` for the CUDA
kernels (the GEMMs' tile configs; the row ops' kernel shapes; FlashAttention's mma.sync and
wgmma kernels), ``--backend triton`` for the Triton GEMMs and FlashAttention and ``--backend
pallas`` for the Pallas SGEMM and FlashAttention (their block shapes; the cache names them
``triton.NAME``, ``pallas.NAME``).
``--all`` tunes every tunable kernel of the backend. Every other op of the registry is
accepted too and answered with why it has nothing to tune (its kernel shape follows from
the input's; see UNTUNABLE).

For each dtype and shape it runs the op's untuned choice (config=-1 with the tables
ignored: its heuristic) and every compiled config of the kernel, checks each output against
the float64 reference (a config that fails may not win), times it, and stores the winner in
a JSON cache. The CUDA and Triton configs are timed the way ``gks bench`` times
an op (``--timing bench``, the default): back-to-back calls between CUDA events, rotating
over enough input sets that the L2 starts cold, the configs interleaved, the median of
``--reps`` batches. That is the time a call costs its caller, the host's share included
where the host is the slower side (a split-K config's workspace and second launch, say).
``--timing graph`` times the GPU alone instead (a CUDA graph of ``--iters`` calls, replayed),
what a caller that captures graphs sees. The Pallas configs are timed with CUDA events
around each launch. The
winner is the first, in a fixed order, within ``band`` (2%) of the fastest: the heuristic's
choice first (an entry of config -1, "default", keeps it), then the configs in list order. A
deterministic tie band: timing noise between near-equal configs does not flip choices, and
a table never overrides the heuristic for less than the band.

The cache (``$GKS_CACHE_DIR/autotune.json``, else ``~/.cache/gks/autotune.json``) is keyed on
everything that can change the answer: GPU name, compute capability, driver version, gks
version, kernel, dtype, shape bucket (each dim rounded up to a power of two, but for the
dims the op's spec keeps exact, ``OpSpec.bucket_exact``: FlashAttention's head dim and
causal flag) and a hash of the kernel's config names. An entry made under any other value
of these is simply never matched (``--prune`` deletes such entries for the current GPU).

Tables measured this way ship with gks in ``gks/profile/tuned/`` (``nvidia-h200.json``: the
H200, every tunable kernel of every backend at its bench shapes; regenerate with ``python -m
gks autotune --backend B --all --cache gks/profile/tuned/nvidia-h200.json`` for each backend
on that GPU). A shipped entry applies to the same GPU model and compute capability, kernel, dtype,
shape bucket and config list whatever the driver and gks version (the config-list hash still
guards against changed configs); an entry of the user's own cache takes precedence.

The torch custom ops call :func:`resolve_config` on every call with config=-1: one dict
lookup in the cache and the shipped tables, each loaded once per process; without a tuned
entry the C++ heuristic decides.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import functools
import hashlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

CACHE_FORMAT = 1
TIE_BAND = 0.02
# An entry's config when the op's own choice (config=-1, its heuristic) won: the op then
# keeps making that choice. Its name in the entry:
DEFAULT = -1
DEFAULT_NAME = "default"

# The tunable kernels per backend, each named by the registry op that describes it (inputs,
# reference, check, shapes): those whose backend compiles several configs and takes a
# `config` argument. The CUDA GEMMs list theirs in the library (gks.cuda.gemm_config_names);
# the other CUDA ops in their spec's `configs`.
GEMMS = ("sgemm", "wmma_gemm", "int8_gemm", "gemm")
BACKEND_KERNELS = {
    "cuda": GEMMS + ("rmsnorm", "softmax", "softmax_rmsnorm", "flash_attention_fwd"),
    "triton": ("sgemm", "wmma_gemm", "int8_gemm", "flash_attention_fwd"),
    "pallas": ("sgemm", "flash_attention_fwd"),
}
# Why the other (backend, op) pairs have nothing to tune: what picks their kernel shape.
UNTUNABLE = {
    "cuda": "its launch plan (chunks a thread, threads a row) follows from the row length",
    "triton": "its block size and warps follow from the input's shape (one compiled kernel a "
              "shape, no config list)",
    "pallas": "its block sizes follow from the input's shape (no config list)",
}


def untunable_reason(backend: str, op: str) -> str:
    """What gks autotune says for an op the backend cannot tune."""
    return (f"gks autotune: the {backend} backend has no configs of '{op}' to tune: "
            f"{UNTUNABLE[backend]}. Tunable with --backend {backend}: "
            f"{', '.join(BACKEND_KERNELS[backend])}")


def cache_kernel(backend: str, op: str) -> str:
    """The kernel field of a cache key: the op for CUDA (as before Triton was tunable),
    "BACKEND.OP" for the others ("triton.sgemm", "pallas.sgemm")."""
    return op if backend == "cuda" else f"{backend}.{op}"


def split_kernel(kernel: str) -> tuple[str, str]:
    """(backend, op) of a cache key's kernel field."""
    backend, _, op = kernel.rpartition(".")
    return backend or "cuda", op


# ---------------------------------------------------------------------------------------
# Pure parts (no GPU): bucketing, keys, the tie band, the cache file.
# ---------------------------------------------------------------------------------------


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def shape_bucket(shape: Sequence[int], exact: Sequence[int] = ()) -> tuple[int, ...]:
    """Each dim rounded up to a power of two (0 and 1 stay 1), but for the dims at the
    indices in `exact`, which stay as they are (flags, and dims that pick another kernel)."""
    return tuple(int(d) if i in exact else next_pow2(max(int(d), 1)) for i, d in enumerate(shape))


@functools.cache
def bucket_exact_dims(kernel: str) -> tuple[int, ...]:
    """The indices of the shape dims that `kernel`'s op keeps exact in its bucket."""
    from gks import registry

    spec = registry.get(split_kernel(kernel)[1])
    return tuple(spec.shape_names.index(name) for name in spec.bucket_exact)


def kernel_bucket(kernel: str, shape: Sequence[int]) -> tuple[int, ...]:
    """The shape bucket of `kernel`'s cache keys."""
    return shape_bucket(shape, bucket_exact_dims(kernel))


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


def pick_winner(times_ms: Sequence[float | None], band: float = TIE_BAND,
                default_ms: float | None = None) -> int:
    """Index of the first config (in config order) whose time is within `band` of the best,
    or DEFAULT (-1) if `default_ms`, the op's untuned choice (its heuristic), is: the default
    comes first in the order, so a tuned entry only overrides the heuristic when a config
    beats it by more than the band. None marks a config that failed its check or did not
    run; it never wins."""
    valid = [t for t in (default_ms, *times_ms) if t is not None]
    if not valid:
        raise ValueError("pick_winner: no config produced a correct result")
    best = min(valid)
    if default_ms is not None and default_ms <= best * (1.0 + band):
        return DEFAULT
    return next(i for i, t in enumerate(times_ms) if t is not None and t <= best * (1.0 + band))


def cache_path() -> Path:
    root = os.environ.get("GKS_CACHE_DIR")
    base = Path(root) if root else Path.home() / ".cache" / "gks"
    return base / "autotune.json"


def load_cache(path: Path | None = None) -> dict[str, Any]:
    """The cache's entries ({key: entry}); {} when the file is missing, unreadable or of
    another format (it is then rebuilt by the next tuning run)."""
    path = path or cache_path()
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != CACHE_FORMAT:
        return {}
    entries = doc.get("entries")
    return entries if isinstance(entries, dict) else {}


def save_cache(entries: dict[str, Any], path: Path | None = None) -> None:
    """Writes the cache atomically (a temporary file, then a rename)."""
    path = path or cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1, sort_keys=True))
    os.replace(tmp, path)
    _entries.cache_clear()


def stale_keys(entries: dict[str, Any], identity: dict[str, str],
               current_hashes: dict[str, str]) -> list[str]:
    """Keys of entries for this GPU model that can never match again: made under another
    driver or gks version, or for a config list that has since changed (kernels named in
    current_hashes)."""
    gpu = f"{identity['gpu']}|cc{identity['cc']}|"
    live = "|".join([identity["gpu"], f"cc{identity['cc']}", f"driver{identity['driver']}",
                     f"gks{identity['gks']}"])
    out = []
    for key in entries:
        if not key.startswith(gpu):
            continue  # another GPU model: not ours to judge
        parts = key.split("|")
        if len(parts) != 8 or "|".join(parts[:4]) != live:
            out.append(key)
        elif parts[4] in current_hashes and parts[7] != f"cfg{current_hashes[parts[4]]}":
            out.append(key)
    return out


# ---------------------------------------------------------------------------------------
# Call-time lookup (what the torch ops use).
# ---------------------------------------------------------------------------------------


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
    backend, op = split_kernel(kernel)
    if backend == "triton":
        if op == "flash_attention_fwd":
            from gks.triton import flash_attention_fwd_config_names

            return tuple(flash_attention_fwd_config_names())
        from gks.triton._gemm import config_names

        return tuple(config_names(op))
    if backend == "pallas":
        from gks import pallas

        return tuple(getattr(pallas, f"{op}_config_names")())
    if op in GEMMS:
        from gks import cuda

        return tuple(cuda.gemm_config_names(op))
    from gks import registry

    return tuple(c["name"] for c in registry.get(op).configs)


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
    entry = entries.get(key) or shipped.get(shipped_key(key))
    return int(entry["config"]) if entry and int(entry["config"]) != DEFAULT else None


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
# repeated question costs a dict lookup instead of a key build (about 5 µs).
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


def check_matrix(t, op: str, arg: str) -> None:
    """Raises unless t is a 2-D torch tensor (the C++ API validates everything else and
    names the argument)."""
    import torch

    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: argument '{arg}' must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != 2:
        raise ValueError(f"{op}: argument '{arg}' must be a 2-D matrix, got {t.dim()} dims "
                         f"(shape {list(t.shape)})")


def gemm_dims(op: str, a, b, a_name: str = "a", b_name: str = "b") -> tuple[int, int, int]:
    """(M, N, K) of a [M, K] @ b [K, N]: the one check the torch ops need before allocating
    the output, that both are 2-D torch tensors (check_matrix's errors otherwise). One read
    of each shape: every .shape builds a torch.Size, which a per-call path notices."""
    import torch

    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        sa, sb = a.shape, b.shape
        if len(sa) == 2 and len(sb) == 2:
            return sa[0], sb[1], sa[1]
    check_matrix(a, op, a_name)
    check_matrix(b, op, b_name)
    raise AssertionError("unreachable: check_matrix raised")


def row_dims(x) -> tuple[int, int]:
    """(M, N) of x [..., N] taken as M rows: the row ops' spec dims, their tables' key."""
    shape = x.shape
    n = shape[-1] if len(shape) else 1
    return (x.numel() // n if n else 0), n


def attention_dims(q, k, causal) -> tuple[int, ...] | None:
    """(B, Hq, Hkv, Sq, Sk, D, causal) of q [B, Hq, Sq, D] and k [B, Hkv, Sk, D], the
    attention spec's dims; None unless both are 4-D (the C++ API then says what is wrong)."""
    qs, ks = q.shape, k.shape
    if len(qs) != 4 or len(ks) != 4:
        return None
    return qs[0], qs[1], ks[1], qs[2], ks[2], qs[3], int(bool(causal))


# ---------------------------------------------------------------------------------------
# Measuring (GPU only).
# ---------------------------------------------------------------------------------------


def time_config(fn: Callable[[], Any], warmup: int = 3, iters: int = 20, graph: bool = False) -> float:
    """Median ms of `iters` launches of fn(), each between its own CUDA events; with
    `graph`, the GPU time alone: `iters` calls captured in one CUDA graph, the median of 5
    replays over `iters`. Per-launch events also count the host's time to launch, which
    for small problems is most of it (and would make the winner a matter of noise)."""
    import torch

    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm up off the capture, as torch asks
            for _ in range(warmup):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(iters):
                fn()
        g.replay()
        times = []
        for _ in range(5):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            g.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / iters)
        del g
        return statistics.median(times)
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _op(kernel: str):
    import importlib

    backend, op = split_kernel(kernel)
    # Pallas ops take JAX arrays; their torch adapters take the spec's inputs.
    module = {"cuda": "gks", "pallas": "gks.pallas._bridge"}.get(backend, f"gks.{backend}")
    return getattr(importlib.import_module(module), op)


TIMINGS = ("bench", "graph")


def _compile_errors() -> tuple[type, ...]:
    """What a Triton config that cannot compile for this GPU raises (too much shared memory,
    say): such a config is rejected like one whose output is wrong."""
    try:
        from triton.errors import TritonError
    except ImportError:
        return ()
    return (TritonError,)


def tune_one(kernel: str, dtype: str, shape: Sequence[int], *, warmup: int, iters: int,
             band: float, progress: Callable[[str], None], timing: str = "bench",
             reps: int = 5) -> dict[str, Any]:
    """Measures the op's untuned choice (config=-1, its heuristic, with the tables ignored)
    and every config on one (dtype, shape); returns the cache entry (see pick_winner).
    `timing` as the module docstring says (the Pallas configs are always timed per launch:
    JAX's runtime is neither capturable by torch nor on torch's stream)."""
    import torch

    from gks import registry
    from gks.testing import check_output

    spec = registry.get(split_kernel(kernel)[1])
    names = kernel_config_names(kernel)
    inputs = spec.make_inputs(tuple(shape), dtype, "cuda", 0)
    ref = spec.reference(**inputs, precise=True)
    op = _op(kernel)
    on_torch_stream = split_kernel(kernel)[0] in ("cuda", "triton")
    candidates = [DEFAULT, *range(len(names))]
    label = {DEFAULT: f"{DEFAULT_NAME} (heuristic)", **dict(enumerate(names))}
    times: dict[int, float | None] = dict.fromkeys(candidates)
    checked = []
    with untuned():
        for i in candidates:
            try:
                out = op(**inputs, config=i)
                torch.cuda.synchronize()
                check_output(spec, out, inputs, dtype, f"{kernel}[{label[i]}]", ref=ref)
                del out
                if not (on_torch_stream and timing == "bench"):
                    times[i] = time_config(lambda: op(**inputs, config=i), warmup, iters,
                                           graph=on_torch_stream)
            except (AssertionError, RuntimeError, ValueError, *_compile_errors()) as e:
                progress(f"    {label[i]:<26} REJECTED: {type(e).__name__}: "
                         f"{str(e).splitlines()[0][:120]}")
                continue
            checked.append(i)
        if on_torch_stream and timing == "bench" and checked:
            for i, t in zip(checked, time_like_bench(spec, op, shape, dtype, inputs, checked, reps)):
                times[i] = t
    flops, moved = spec.flops(tuple(shape)), spec.bytes_moved(tuple(shape), dtype)
    for i in checked:
        progress(f"    {label[i]:<26} {times[i] * 1e3:10.1f} us  {flops / times[i] / 1e9:8.1f} TFLOP/s"
                 f"  {moved / times[i] / 1e6:8.1f} GB/s")
    config_times = [times[i] for i in range(len(names))]
    winner = pick_winner(config_times, band, default_ms=times[DEFAULT])
    progress(f"  -> {label[winner]}")
    return {"config": winner, "name": names[winner] if winner != DEFAULT else DEFAULT_NAME,
            "shape": list(shape), "timing": timing, "times_ms": config_times,
            "default_ms": times[DEFAULT], "when": time.strftime("%Y-%m-%dT%H:%M:%S")}


def time_like_bench(spec, op, shape: Sequence[int], dtype: str, inputs: dict,
                    configs: Sequence[int], reps: int) -> list[float]:
    """Median ms a call of each config, timed as gks bench times an op (see
    gks.profile.timing): back-to-back calls between CUDA events, input sets rotated so the
    L2 starts cold, the configs interleaved."""
    from gks.profile.timing import Variant, cold_l2_input_sets, time_interleaved

    sets = cold_l2_input_sets(spec, tuple(shape), dtype, first=inputs)
    variants = [Variant(str(i), functools.partial(op, config=i), sets) for i in configs]
    time_interleaved(variants, reps=reps)
    return [v.median_ms for v in variants]


def _parse_shapes(text: str) -> list[tuple[int, ...]]:
    """AxBx...[,AxB...]: non-negative ints (main checks the count against the op's dims)."""
    shapes = []
    for item in text.split(","):
        try:
            dims = tuple(int(x) for x in item.lower().split("x"))
        except ValueError:
            dims = ()
        if not dims or min(dims) < 0:
            raise argparse.ArgumentTypeError(f"shape '{item}' is not like 4096x4096x4096 "
                                             f"(non-negative integers joined by 'x')")
        shapes.append(dims)
    return shapes


def _op_names() -> tuple[str, ...]:
    from gks import registry

    return tuple(spec.name for spec in registry.ops())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gks autotune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_mutually_exclusive_group()
    target.add_argument("--kernel", choices=_op_names(), metavar="OP",
                        help="the op to tune (any registry op: %(choices)s; those the backend "
                             "cannot tune are answered with why)")
    target.add_argument("--all", action="store_true",
                        help="every kernel the backend can tune, one after the other")
    p.add_argument("--show", action="store_true", help="print the cache's entries and exit")
    p.add_argument("--backend", choices=tuple(BACKEND_KERNELS), default="cuda",
                   help="whose configs: " + "; ".join(
                       f"{b}: {', '.join(ops)}" for b, ops in BACKEND_KERNELS.items()))
    p.add_argument("--dtype", action="append",
                   help="dtype(s) to tune (repeat or comma-separate); default: all of the spec's")
    p.add_argument("--shapes", type=_parse_shapes,
                   help="shapes in the op's dims (e.g. MxNxK for a GEMM, MxN for a row op), "
                        "comma-separated; default: the spec's bench shapes")
    p.add_argument("--timing", choices=TIMINGS, default="bench",
                   help="bench: per call as gks bench times it (host included, cold L2); "
                        "graph: GPU time alone, by CUDA-graph replay (CUDA and Triton configs)")
    p.add_argument("--reps", type=int, default=5, help="--timing bench: batches per config (median)")
    p.add_argument("--iters", type=int, default=20,
                   help="--timing graph: calls per graph; Pallas: timed launches (median)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--band", type=float, default=TIE_BAND,
                   help="tie band: the first config within this fraction of the best wins")
    p.add_argument("--cache", type=Path, help="cache file (default: %(default)s)",
                   default=None)
    p.add_argument("--prune", action="store_true",
                   help="also delete this GPU's entries that can no longer match")
    return p


def _plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[tuple[str, list[str], list]]:
    """(op, dtypes, shapes) for each op to tune, after every argument check (no GPU needed):
    argument errors exit with status 2 and say what was expected."""
    from gks import registry

    if not (args.kernel or args.all):
        parser.error("one of the arguments --kernel, --all or --show is required")
    if args.all and args.shapes:
        parser.error("argument --shapes: needs one --kernel (each op has its own dims)")
    wanted = [d for item in (args.dtype or []) for d in item.split(",") if d]
    plan = []
    for op in (BACKEND_KERNELS[args.backend] if args.all else (args.kernel,)):
        spec = registry.get(op)
        for d in wanted:
            if d not in spec.dtypes and not args.all:
                parser.error(f"argument --dtype: {op} has no dtype '{d}' "
                             f"(it has {', '.join(spec.dtypes)})")
        dtypes = [d for d in wanted if d in spec.dtypes] if wanted else list(spec.dtypes)
        for shape in args.shapes or ():
            if len(shape) != len(spec.shape_names):
                parser.error(f"argument --shapes: '{'x'.join(map(str, shape))}' is not a shape of "
                             f"{op}, whose dims are {'x'.join(spec.shape_names)}")
        shapes = list(args.shapes or (tuple(s) for s in spec.bench_shapes))
        if dtypes:
            plan.append((op, dtypes, shapes))
    if not plan:
        parser.error(f"argument --dtype: no tunable op of the {args.backend} backend has "
                     f"dtype(s) {', '.join(wanted)}")
    return plan


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    path = args.cache or cache_path()
    if args.show:
        for key, entry in sorted(load_cache(path).items()):
            print(f"{key}  ->  {entry.get('name')} (config {entry.get('config')})")
        return 0
    if args.kernel and args.kernel not in BACKEND_KERNELS[args.backend]:
        print(untunable_reason(args.backend, args.kernel), file=sys.stderr)
        return 2
    plan = _plan(args, parser)
    import torch

    if not torch.cuda.is_available():
        print("gks autotune: needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    device = torch.cuda.current_device()
    identity = device_identity(device)
    entries = load_cache(path)

    def progress(msg: str) -> None:
        print(msg, flush=True)

    for op, dtypes, shapes in plan:
        kernel = cache_kernel(args.backend, op)
        chash = config_hash(kernel_config_names(kernel))
        if args.prune:
            for key in stale_keys(entries, identity, {kernel: chash}):
                del entries[key]
        progress(f"gks autotune {kernel} on {identity['gpu']} (cc {identity['cc']}, driver "
                 f"{identity['driver']}); {len(kernel_config_names(kernel))} configs; cache {path}")
        for dtype in dtypes:
            for shape in shapes:
                bucket = kernel_bucket(kernel, shape)
                progress(f"  {dtype} {'x'.join(map(str, shape))} (bucket {'x'.join(map(str, bucket))})")
                try:
                    entry = tune_one(kernel, dtype, shape, warmup=args.warmup, iters=args.iters,
                                     band=args.band, progress=progress, timing=args.timing,
                                     reps=args.reps)
                except ValueError as e:
                    progress(f"  skipped: {e}")
                    continue
                entries[cache_key(identity, kernel, dtype, bucket, chash)] = entry
                save_cache(entries, path)  # after every shape: an interrupted run keeps its work
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
