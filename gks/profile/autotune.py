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

The cache (``$GKS_CACHE_DIR/autotune.json``, else ``~/.cache/gks/autotune.json``) and its
keys are gks.runtime.tables', the ops' side of tuning, which says what a key holds and how
an op finds its entry at call time (``--prune`` deletes the entries for the current GPU
that can no longer match). Tables measured this way ship with gks in
``gks/runtime/tuned/`` (``nvidia-h200.json``: the H200, every tunable kernel of every backend
at its bench shapes; regenerate with ``python -m gks autotune --backend B --all --cache
gks/runtime/tuned/nvidia-h200.json`` for each backend on that GPU).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gks import registry
from gks.runtime.tables import (
    DEFAULT,
    DEFAULT_NAME,
    cache_kernel,
    cache_key,
    cache_path,
    config_hash,
    device_identity,
    kernel_bucket,
    kernel_config_names,
    load_cache,
    update_cache,
    split_kernel,
    untuned,
)

TIE_BAND = 0.02
BACKENDS = tuple(registry.BACKEND_MODULES)


def tunable_ops(backend: str) -> tuple[str, ...]:
    """The ops whose `backend` compiles several configs and takes a `config` argument (the
    registry's Backend.tunable), each tuned on its spec's inputs, reference and shapes."""
    return registry.ops_with(backend, tunable=True)


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
            f"{', '.join(tunable_ops(backend))}")


# ---------------------------------------------------------------------------------------
# Pure parts (no GPU): the tie band, stale entries. (Keys, buckets and the cache file are
# gks.runtime.tables', which the ops read at call time.)
# ---------------------------------------------------------------------------------------


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
    """The backend's op with torch tensors in and out (Pallas's through its bridge)."""
    backend, op = split_kernel(kernel)
    return registry.get(op).backend(backend).load()


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
    return tuple(spec.name for spec in registry.ops())


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gks autotune", description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    target = p.add_mutually_exclusive_group()
    target.add_argument("--kernel", choices=_op_names(), metavar="OP",
                        help="the op to tune (any registry op: %(choices)s; those the backend "
                             "cannot tune are answered with why)")
    target.add_argument("--all", action="store_true",
                        help="every kernel the backend can tune, one after the other")
    p.add_argument("--show", action="store_true", help="print the cache's entries and exit")
    p.add_argument("--backend", choices=BACKENDS, default="cuda",
                   help="whose configs: " + "; ".join(
                       f"{b}: {', '.join(tunable_ops(b))}" for b in BACKENDS))
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
    if not (args.kernel or args.all):
        parser.error("one of the arguments --kernel, --all or --show is required")
    if args.all and args.shapes:
        parser.error("argument --shapes: needs one --kernel (each op has its own dims)")
    wanted = [d for item in (args.dtype or []) for d in item.split(",") if d]
    plan = []
    for op in (tunable_ops(args.backend) if args.all else (args.kernel,)):
        spec = registry.get(op)
        for d in wanted:
            if d not in spec.dtypes and not args.all:
                parser.error(f"argument --dtype: {op} has no dtype '{d}' "
                             f"(it has {', '.join(spec.dtypes)})")
        dtypes = [d for d in wanted if d in spec.dtypes] if wanted else list(spec.dtypes)
        for shape in args.shapes or ():
            if not spec.fits_shape(shape):
                parser.error(f"argument --shapes: '{'x'.join(map(str, shape))}' is not a shape of "
                             f"{op}, whose dims are {spec.dims_text()}")
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
    if args.kernel and args.kernel not in tunable_ops(args.backend):
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
            stale = stale_keys(entries, identity, {kernel: chash})
            entries = update_cache({}, path, remove=stale)
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
                # After every shape, merged into the file as it is now: an interrupted run
                # keeps its work, and a concurrent run's entries are kept too.
                entries = update_cache({cache_key(identity, kernel, dtype, bucket, chash): entry}, path)
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
