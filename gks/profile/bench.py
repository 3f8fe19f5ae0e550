# SPDX-License-Identifier: Apache-2.0
"""`python -m gks bench`: time every backend of an op (and its peers) over the spec's bench
shapes and dtypes; report median and spread, GB/s and TFLOP/s from the spec's formulas, the
fraction of the device copy bandwidth measured in the same run, the place on the roofline
(when `gks roofline --measure` has cached this device's ceilings), and ratios against each
peer. Without a GPU it says so and runs the interpreter correctness sweep instead.

JSON schema (``--json PATH``; :func:`bench_document` assembles it): one object. Each key is
listed as "name: type", an object's keys indented under it; "| null" marks a value that may
be null. tests/harness/test_bench_schema.py reads this list and holds the JSON to it.

  device: object
    name: str                     e.g. "NVIDIA H200"
    capability: str               e.g. "9.0"
    sms: int
    l2_bytes: int
    driver: str                   from nvidia-smi ("" or "unknown" without it)
    clocks_start: dict[str, str]  gks.profile.timing.gpu_clocks() before the first op
    clocks_end: dict[str, str]    the same after the last
  versions: object                a failed import reads "unavailable (<error type>)"
    gks: str
    python: str
    torch: str
    triton: str
    jax: str
    cuda: str                     torch.version.cuda
  copy_gbps: float                device copy bandwidth measured in this run (bytes read +
                                  written per second, 1e9)
  ceilings: object | null         the ceilings `gks roofline --measure` cached for this device
                                  (gks.profile.roofline), or null when none are cached
    source: str                   "measured"
    device: str                   the cache key: "<name>|sm_<cc>|<cuda>"
    copy_gbps: float
    fp32_tflops: float
    fp16_tflops: float
    bf16_tflops: float
    int8_tops: float
  rows: list[object]              one per op x variant x shape x dtype, in the order run
    op: str
    variant: str                  "gks.<backend>", "gks.cuda[<config name>]" (--configs) or
                                  the peer's name
    kind: str                     "gks" | "peer"
    shape: list[int]              in the order of the spec's shape_names
    dtype: str
    checked: str                  "ok" | "FAILED: <why>" (output wrong) | "n/a" (peers) |
                                  "FAILED to run: <why>" | "n/a: <why>" (a peer that does not
                                  cover the shape; these two without the keys below)
    Keys of a row whose variant ran (absent from a "FAILED to run" or "n/a" row):
    median_us: float
    p20_us: float
    p80_us: float
    gbps: float                   the spec's bytes_moved / median
    tflops: float                 the spec's flops / median (TOP/s for int8 GEMM)
    frac_copy_bw: float           gbps / copy_gbps
    vs_peers: dict[str, float]    peer name -> peer median / this median (> 1: this is
                                  faster); every peer of the op but the row itself
    intensity: float | null       flops / bytes_moved (FLOP/byte); null if no bytes move
    binding_ceiling: str | null   the ceiling that binds at that intensity: "copy_gbps", or
                                  the op's compute ceiling ("fp32_tflops", "fp16_tflops",
                                  "bf16_tflops", "int8_tops")
    bound: str | null             "memory" | "compute"
    roof_tflops: float | null     attainable rate at that intensity: min(compute ceiling,
                                  intensity x ceilings.copy_gbps / 1e3)
    frac_roof: float | null       tflops / roof_tflops
  The last four are null when `ceilings` is null or the intensity is (frac_roof also when
  roof_tflops is 0). gks.profile.roofline.place computes the five, as for `gks roofline
  --bench` and tools/roofline_plot.py, against the ceilings' copy bandwidth (not this run's
  copy_gbps). Without a GPU nothing is timed and no JSON is written.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import platform
import sys
from pathlib import Path
from typing import Any

from gks import registry

# ops -> timed only on these backends when --backends is not given
DEFAULT_BACKENDS = ("cuda", "triton", "pallas")


def _versions() -> dict[str, str]:
    out = {"gks": importlib.import_module("gks").__version__, "python": platform.python_version()}
    for name in ("torch", "triton", "jax"):
        try:
            out[name] = importlib.import_module(name).__version__
        except Exception as e:  # noqa: BLE001 - report any import failure as a version string
            out[name] = f"unavailable ({type(e).__name__})"
    try:
        import torch

        out["cuda"] = str(torch.version.cuda)
    except ImportError:
        pass
    return out


def _device_info() -> dict[str, Any]:
    import torch

    from gks.profile.timing import gpu_clocks

    p = torch.cuda.get_device_properties(0)
    info = {
        "name": p.name,
        "capability": f"{p.major}.{p.minor}",
        "sms": p.multi_processor_count,
        "l2_bytes": getattr(p, "L2_cache_size", 50 << 20),
        "clocks_start": gpu_clocks(),
    }
    try:
        import subprocess

        info["driver"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        ).stdout.strip()
    except OSError:
        info["driver"] = "unknown"
    return info


def _pallas_call(spec):
    """The Pallas op on JAX arrays (timed without the torch<->JAX bridge in the loop)."""
    import jax
    import torch

    fn = getattr(importlib.import_module("gks.pallas"), spec.name)

    def convert(inputs):
        return {k: jax.dlpack.from_dlpack(v.contiguous()) if isinstance(v, torch.Tensor) else v
                for k, v in inputs.items()}

    def to_torch(out):
        if isinstance(out, tuple):
            return tuple(torch.from_dlpack(o) for o in out)
        return torch.from_dlpack(out)

    return fn, convert, to_torch, jax.block_until_ready


def failed_row(spec, variant: str, kind: str, shape, dtype: str, why: str) -> dict:
    """The row of a variant that failed to run: no timing keys (see the schema above)."""
    return {"op": spec.name, "variant": variant, "kind": kind, "shape": list(shape), "dtype": dtype,
            "checked": why}


def timed_row(spec, v, kind: str, shape, dtype: str, checked: str, peer_medians_ms: dict) -> dict:
    """The row of a timed Variant `v`, before :func:`bench_document` adds what needs the whole
    run (frac_copy_bw, the roofline fields)."""
    t = v.median_ms * 1e-3
    return {
        "op": spec.name, "variant": v.name, "kind": kind, "shape": list(shape), "dtype": dtype,
        "checked": checked, "median_us": v.median_ms * 1e3, "p20_us": v.quantile_ms(0.2) * 1e3,
        "p80_us": v.quantile_ms(0.8) * 1e3,
        "gbps": spec.bytes_moved(shape, dtype) / t / 1e9, "tflops": spec.flops(shape) / t / 1e12,
        "vs_peers": {p: pt / v.median_ms for p, pt in peer_medians_ms.items() if p != v.name},
    }


def bench_document(rows: list[dict], *, device: dict, versions: dict, copy_gbps: float,
                   ceilings: dict | None) -> dict:
    """The --json document (schema above): each timed row gets its fraction of `copy_gbps`
    and its place on the roofline of `ceilings` (null fields when they are None). Pure: the
    rows given are not changed."""
    from gks.profile import roofline

    out = []
    for r in rows:
        if "median_us" in r:
            spec = registry.get(r["op"])
            r = {**r, "frac_copy_bw": r["gbps"] / copy_gbps,
                 **roofline.place(spec, tuple(r["shape"]), r["dtype"], r["tflops"], ceilings)}
        out.append(dict(r))
    return {"device": device, "versions": versions, "copy_gbps": copy_gbps, "ceilings": ceilings,
            "rows": out}


def bench_op(spec, *, backends, dtypes, shapes, with_references, reps, progress, configs=False) -> list[dict]:
    import torch

    from gks.profile.timing import Variant, cold_l2_input_sets, time_interleaved
    from gks.testing import check_output

    rows = []
    for shape in shapes:
        for dtype in dtypes:
            progress(f"{spec.name} {'x'.join(map(str, shape))} {dtype}")
            sets = cold_l2_input_sets(spec, shape, dtype)
            variants, kinds, checks = [], {}, {}
            for b in spec.backends:
                if b.name not in backends:
                    continue
                if b.name == "pallas":
                    fn, convert, to_torch, sync = _pallas_call(spec)
                    v = Variant(f"gks.{b.name}", fn, [convert(s) for s in sets], host_sync=sync)
                    checks[v.name] = to_torch
                else:
                    v = Variant(f"gks.{b.name}", b.load(), sets)
                    checks[v.name] = lambda o: o
                variants.append(v)
                kinds[v.name] = "gks"
                if configs and b.name == "cuda":
                    # Each compiled config on its own, beside the heuristic's pick.
                    for i, cfg in enumerate(spec.configs):
                        fn = functools.partial(b.load(), config=i)
                        cv = Variant(f"gks.cuda[{cfg.get('name', i)}]", fn, sets)
                        checks[cv.name] = lambda o: o
                        variants.append(cv)
                        kinds[cv.name] = "gks"
            failed = {}
            if with_references:
                from gks import upstream

                for peer in spec.peers:
                    kinds[peer.name] = "peer"
                    why = upstream.missing(peer.package) if peer.package else None
                    if why:  # enabled but not here: reported, never left out silently
                        failed[peer.name] = f"FAILED: upstream reference {why}"
                        continue
                    try:  # an import that fails (a broken install) is that peer's failure alone
                        variants.append(Variant(peer.name, peer.make(), sets))
                    except Exception as e:  # noqa: BLE001
                        failed[peer.name] = f"FAILED to load: {type(e).__name__}: {str(e)[:200]}"
            for v in list(variants):
                try:  # compile / first call outside the timing; a failure is reported, not fatal
                    v.fn(**v.input_sets[0])
                    torch.cuda.synchronize()
                except Exception as e:  # noqa: BLE001
                    # A peer that does not cover this shape (SDPA and a paged cache) raises
                    # NotImplementedError: "n/a", not a failure.
                    na = isinstance(e, NotImplementedError)
                    failed[v.name] = f"n/a: {str(e)[:200]}" if na else f"FAILED to run: {type(e).__name__}: {str(e)[:200]}"
                    variants.remove(v)
            time_interleaved(variants, reps=reps)
            peers = {v.name: v.median_ms for v in variants if kinds[v.name] == "peer"}
            for v in variants:
                checked = "n/a"
                if kinds[v.name] == "gks":
                    # Re-check the output of the last timed call against its input set.
                    try:
                        check_output(spec, checks[v.name](v.last_output), sets[v.last_set], dtype, v.name)
                        checked = "ok"
                    except AssertionError as e:
                        checked = f"FAILED: {str(e).splitlines()[0][:200]}"
                rows.append(timed_row(spec, v, kinds[v.name], shape, dtype, checked, peers))
            for name, why in failed.items():
                rows.append(failed_row(spec, name, kinds[name], shape, dtype, why))
            del sets, variants
            torch.cuda.empty_cache()
    return rows


def interpreter_sweep(specs, dtypes_filter, max_elements: int = 4096, backends=None,
                      shapes=None) -> tuple[int, int]:
    """Correctness of the interpreted backends (those of `backends`, default all) on small
    shapes, or on `shapes` where given (no GPU needed). Returns (cases run, failures)."""
    import os

    os.environ.setdefault("TRITON_INTERPRET", "1")
    import math

    from gks.testing import check_output

    ran = failures = 0
    print(f"{'op':<22}{'backend':<10}{'dtype':<10}{'shape':<16}result")
    for spec in specs:
        for b in spec.backends:
            if not b.interpreted or (backends and b.name not in backends):
                continue
            fn = b.load()
            for dtype in spec.dtypes:
                if dtypes_filter and dtype not in dtypes_filter:
                    continue
                for shape in shapes_for(spec, shapes) if shapes else spec.test_shapes:
                    if not shapes and math.prod(shape) > max_elements:
                        continue
                    inputs = spec.make_inputs(shape, dtype, "cpu", 1234)
                    ran += 1
                    try:
                        check_output(spec, fn(**inputs), inputs, dtype, f"{spec.name}/{b.name}")
                        result = "ok"
                    except AssertionError as e:
                        failures += 1
                        result = f"FAILED: {str(e).splitlines()[0][:100]}"
                    print(f"{spec.name:<22}{b.name:<10}{dtype:<10}{'x'.join(map(str, shape)):<16}{result}")
    return ran, failures


def print_table(rows: list[dict], copy_gbps: float | None) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table
    except ImportError:
        Console = None  # noqa: N806
    header = ["op", "variant", "shape", "dtype", "median µs", "p20-p80 µs", "GB/s", "TFLOP/s",
              "% copy BW", "% roof", "fastest peer ×", "check"]
    lines = []
    for r in rows:
        if "median_us" not in r:
            lines.append([r["op"], r["variant"], "x".join(map(str, r["shape"])), r["dtype"],
                          "-", "-", "-", "-", "-", "-", "-", r["checked"]])
            continue
        best_peer = max(r["vs_peers"].values()) if r["kind"] == "gks" and r["vs_peers"] else None
        lines.append([
            r["op"], r["variant"], "x".join(map(str, r["shape"])), r["dtype"],
            f"{r['median_us']:.1f}", f"{r['p20_us']:.1f}-{r['p80_us']:.1f}", f"{r['gbps']:.0f}",
            f"{r['tflops']:.2f}", f"{100 * r['frac_copy_bw']:.0f}%" if r.get("frac_copy_bw") else "-",
            f"{100 * r['frac_roof']:.0f}%" if r.get("frac_roof") is not None else "-",
            # ratio to the FASTEST peer: fastest peer time / ours = min over peers of ratio
            f"{min(r['vs_peers'].values()):.2f}" if best_peer is not None else "-",
            r["checked"],
        ])
    if Console is None:
        print(" | ".join(header))
        for line in lines:
            print(" | ".join(line))
        return
    table = Table(title=f"gks bench (device copy bandwidth {copy_gbps:.0f} GB/s)" if copy_gbps else "gks bench")
    for h in header:
        table.add_column(h, justify="right" if h not in ("op", "variant", "check") else "left")
    for line in lines:
        # Escaped, or rich takes a config's "[looped]" in "gks.cuda[looped]" for markup and drops it.
        table.add_row(*map(escape, line))
    Console(width=200).print(table)


def _parse_shapes(text: str | None) -> list[tuple[int, ...]] | None:
    if not text:
        return None
    out = []
    for s in text.split(","):
        try:
            shape = tuple(int(d) for d in s.split("x"))
        except ValueError:
            shape = ()
        if not shape or min(shape) < 0:
            raise ValueError(f"gks bench: --shapes: {s!r} is not a shape like 4096x4096")
        out.append(shape)
    return out


def shapes_for(spec, given: list[tuple[int, ...]] | None) -> list[tuple[int, ...]]:
    """The shapes to bench `spec` at: its bench shapes, or those of `given` with as many dims
    as its shapes may have (so one --shapes list can serve ops of different ranks)."""
    if given is None:
        return list(spec.bench_shapes)
    fit = [s for s in given if spec.fits_shape(s)]
    if not fit:
        example = "x".join(map(str, spec.bench_shapes[0]))
        dims = " or ".join(map(str, spec.shape_lengths()))
        raise ValueError(f"gks bench: no shape in --shapes fits {spec.name}, whose shapes have "
                         f"{dims} dims (e.g. {example})")
    return fit


def _check_choices(specs, backends, dtypes) -> None:
    """--backends and --dtypes name what exists, and each dtype asked for is one of at least
    one chosen op's (ValueError naming the argument otherwise)."""
    known = tuple(registry.BACKEND_MODULES)
    for b in backends:
        if b not in known:
            raise ValueError(f"gks bench: argument --backends: '{b}' is not a backend ({', '.join(known)})")
    if not any(b.name in backends for s in specs for b in s.backends):
        raise ValueError(f"gks bench: argument --backends: none of {', '.join(backends)} is a backend of "
                         f"{', '.join(s.name for s in specs)}")
    for dt in dtypes or ():
        if not any(dt in s.dtypes for s in specs):
            offered = sorted({d for s in specs for d in s.dtypes})
            raise ValueError(f"gks bench: argument --dtypes: '{dt}' is not a dtype of "
                             f"{', '.join(s.name for s in specs)} ({', '.join(offered)})")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", action="append", help="op to bench (repeatable); see `gks list`")
    p.add_argument("--all", action="store_true", help="every op in the registry")
    p.add_argument("--backends", help=f"comma list (default: {','.join(DEFAULT_BACKENDS)})")
    p.add_argument("--dtypes", help="comma list (default: the spec's dtypes)")
    p.add_argument("--shapes", help="comma list like 4096x4096,1024x8192 (default: the spec's bench "
                   "shapes); each op takes those with as many dims as its own shapes")
    p.add_argument("--with-references", action="store_true", help="also time the spec's peers")
    p.add_argument("--json", type=Path, help="write the results here (schema in gks.profile.bench)")
    p.add_argument("--configs", action="store_true",
                   help="also time every compiled config of the CUDA backend on its own")
    p.add_argument("--reps", type=int, default=15, help="timed repetitions per variant (default 15)")


def run(args: argparse.Namespace) -> int:
    if not args.all and not args.kernel:
        print("gks bench: give --kernel NAME (repeatable) or --all", file=sys.stderr)
        return 2
    try:
        specs = registry.ops() if args.all else [registry.get(k) for k in args.kernel]
    except KeyError as e:
        print(f"gks bench: {e.args[0]}", file=sys.stderr)
        return 2
    dtypes = args.dtypes.split(",") if args.dtypes else None
    backends = tuple(args.backends.split(",")) if args.backends else DEFAULT_BACKENDS
    try:
        _check_choices(specs, backends, dtypes)
        given = _parse_shapes(args.shapes)
        jobs = [(s, sh, dt) for s in specs for sh in shapes_for(s, given)
                for dt in (dtypes or s.dtypes) if dt in s.dtypes]
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    import torch

    if not torch.cuda.is_available():
        print("gks bench: no CUDA GPU on this machine, so nothing can be timed. Running the "
              "interpreter correctness sweep (Triton interpreter, Pallas interpret mode) on "
              + ("the shapes given" if given else "small shapes") + " instead.")
        if args.json:
            print(f"gks bench: nothing timed, so no {args.json} written")
        ran, failures = interpreter_sweep(specs, dtypes, backends=backends if args.backends else None,
                                          shapes=given)
        if not ran:
            print("gks bench: the interpreter sweep ran nothing: no backend of the ops chosen runs "
                  f"in an interpreter among --backends {','.join(backends)}", file=sys.stderr)
            return 2
        print(f"interpreter sweep: {ran} cases, " + ("all ok" if not failures else f"{failures} FAILED"))
        return 1 if failures else 0
    from gks.profile.timing import copy_bandwidth_gbps, gpu_clocks

    device = _device_info()
    copy_gbps = copy_bandwidth_gbps()
    rows = []
    try:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc="bench", file=sys.stderr)
    except ImportError:
        bar = None
    for spec, shape, dtype in jobs:
        def progress(msg):
            if bar is not None:
                bar.set_postfix_str(msg)
        rows += bench_op(spec, backends=backends, dtypes=[dtype], shapes=[shape],
                         with_references=args.with_references, reps=args.reps, progress=progress,
                         configs=args.configs)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    device["clocks_end"] = gpu_clocks()
    from gks.profile import roofline

    doc = bench_document(rows, device=device, versions=_versions(), copy_gbps=copy_gbps,
                         ceilings=roofline.cached_ceilings())
    print_table(doc["rows"], copy_gbps)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"wrote {args.json}")
    bad = [r for r in rows if r["kind"] == "gks" and r["checked"] != "ok"]
    missing = sorted({r["variant"] for r in rows if "upstream reference" in str(r.get("checked", ""))})
    if missing:
        print(f"gks bench: upstream references missing: {', '.join(missing)} (see the rows above)",
              file=sys.stderr)
    return 1 if bad or missing else 0
