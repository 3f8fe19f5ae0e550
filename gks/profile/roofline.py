# SPDX-License-Identifier: Apache-2.0
"""Roofline ceilings and analysis (`python -m gks roofline`).

Ceilings are measured on the device (``--measure``) and cached per device; datasheet
values are used only when asked (``--datasheet``). Every timed bench row then gets its
arithmetic intensity (the spec's FLOP over byte formulas) and its fraction of the binding
ceiling: min(compute peak, intensity x copy bandwidth). :func:`place` computes these, for
the bench JSON's rows (against the cached ceilings) and for :func:`analyse` alike.

Ceilings (all per second, 1e9 / 1e12 units):
  copy_gbps       device-to-device copy, bytes read + written
  fp32_tflops     cuBLAS FP32 GEMM with TF32 off, 8192^3 (the CUDA-core FMA rate)
  fp16_tflops     cuBLAS FP16 GEMM, 8192^3 (Tensor Cores)
  bf16_tflops     cuBLAS BF16 GEMM, 8192^3
  int8_tops       torch._int_mm, 8192^3, b K-major (what cuBLAS gives for INT8 through torch)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

# Vendor datasheet figures (dense), used only with --datasheet.
DATASHEET = {
    "NVIDIA H200": {"copy_gbps": 4800, "fp32_tflops": 67, "fp16_tflops": 989, "bf16_tflops": 989, "int8_tops": 1979},
    "NVIDIA H100 80GB HBM3": {"copy_gbps": 3350, "fp32_tflops": 67, "fp16_tflops": 989, "bf16_tflops": 989,
                              "int8_tops": 1979},
    "NVIDIA A100-SXM4-80GB": {"copy_gbps": 2039, "fp32_tflops": 19.5, "fp16_tflops": 312, "bf16_tflops": 312,
                              "int8_tops": 624},
}

# Which compute ceiling binds an op, by the unit its FLOPs run on (OpSpec.compute). FP8
# Tensor Cores run at the INT8 rate on Hopper and Ada (1979 dense on the H100 / H200): the fp8
# GEMMs are placed under the INT8 ceiling until an fp8 one is measured.
COMPUTE_CEILING = {"fp32": "fp32_tflops", "tensor": None, "int8": "int8_tops", "fp8": "int8_tops"}


def cache_path() -> Path:
    base = Path(os.environ.get("GKS_CACHE_DIR", Path.home() / ".cache" / "gks"))
    return base / "roofline.json"


def device_key() -> str:
    import torch

    p = torch.cuda.get_device_properties(0)
    return f"{p.name}|sm_{p.major}{p.minor}|{torch.version.cuda}"


def _gemm_rate(dtype, n: int = 8192, reps: int = 10) -> float:
    """Ops per second of an n^3 GEMM through torch (cuBLAS), random inputs."""
    import torch

    from gks.profile.timing import Variant, time_interleaved

    if dtype == torch.int8:
        a = torch.randint(-127, 128, (n, n), dtype=torch.int8, device="cuda")
        # b K-major (a transposed view of [N, K]): cuBLASLt's fast int8 layout. On a
        # row-major b cuBLASLt is several times slower, which would make the ceiling that
        # layout's rather than the Tensor Cores' (docs/perf/README.md).
        b = torch.randint(-127, 128, (n, n), dtype=torch.int8, device="cuda").t()
        fn = lambda: torch._int_mm(a, b)  # noqa: E731
    else:
        a = torch.randn(n, n, device="cuda", dtype=dtype)
        b = torch.randn(n, n, device="cuda", dtype=dtype)
        fn = lambda: a @ b  # noqa: E731
    v = Variant(str(dtype), fn, [{}])
    time_interleaved([v], reps=reps, target_batch_ms=50.0)
    return 2.0 * n**3 / (v.median_ms * 1e-3)


def measure() -> dict[str, float]:
    import torch

    from gks.profile.timing import copy_bandwidth_gbps

    previous = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        fp32 = _gemm_rate(torch.float32) / 1e12
    finally:
        torch.backends.cuda.matmul.allow_tf32 = previous
    return {
        "copy_gbps": copy_bandwidth_gbps(),
        "fp32_tflops": fp32,
        "fp16_tflops": _gemm_rate(torch.float16) / 1e12,
        "bf16_tflops": _gemm_rate(torch.bfloat16) / 1e12,
        "int8_tops": _gemm_rate(torch.int8) / 1e12,
    }


def ceilings(*, remeasure: bool = False, datasheet: bool = False, device_name: str | None = None) -> dict:
    """The ceilings for this device: cached measurements (measured now if absent or asked)."""
    if datasheet:
        name = device_name
        if name is None:
            import torch

            name = torch.cuda.get_device_properties(0).name
        if name not in DATASHEET:
            raise KeyError(f"no datasheet figures for '{name}' (known: {', '.join(DATASHEET)})")
        return {"source": "datasheet", "device": name, **DATASHEET[name]}
    path = cache_path()
    cache = json.loads(path.read_text()) if path.is_file() else {}
    key = device_key()
    if remeasure or key not in cache:
        cache[key] = {"source": "measured", "device": key, **measure()}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1))
    return cache[key]


def cached_ceilings() -> dict | None:
    """This device's cached measured ceilings, or None if `--measure` never ran here (never
    measures: the bench records what is there)."""
    path = cache_path()
    return json.loads(path.read_text()).get(device_key()) if path.is_file() else None


def compute_ceiling(compute: str, dtype: str) -> str:
    """The ceiling key of the unit an op's FLOPs run on (OpSpec.compute), e.g. "bf16_tflops"."""
    if compute == "tensor":
        return "bf16_tflops" if dtype == "bfloat16" else "fp16_tflops"
    return COMPUTE_CEILING[compute]


def compute_peak(ceil: dict, compute: str, dtype: str) -> float:
    """Peak FLOP/s (1e12 units) of the unit an op runs on."""
    return ceil[compute_ceiling(compute, dtype)]


def attainable_tflops(intensity: float, peak_tflops: float, copy_gbps: float) -> float:
    """The roofline: min(peak, intensity x bandwidth), in TFLOP/s."""
    return min(peak_tflops, intensity * copy_gbps / 1e3)


# The fields `place` gives a timed row (the bench JSON's schema documents them).
PLACE_FIELDS = ("intensity", "binding_ceiling", "bound", "roof_tflops", "frac_roof")


def place(spec, shape: tuple[int, ...], dtype: str, tflops: float, ceil: dict | None) -> dict:
    """Where a row timed at `tflops` sits on the roofline of `ceil`: its arithmetic intensity
    (FLOP/byte), the ceiling that binds there (``copy_gbps`` or a compute ceiling's key),
    "memory" or "compute" bound, the attainable TFLOP/s and the fraction of it achieved.
    Without ceilings (None) all but the intensity are None; a shape that moves no bytes has
    no intensity either, so all are None."""
    nbytes = spec.bytes_moved(shape, dtype)
    ai = spec.flops(shape) / nbytes if nbytes > 0 else None
    out = dict.fromkeys(PLACE_FIELDS)
    out["intensity"] = ai
    if ceil is None or ai is None:
        return out
    peak_name = compute_ceiling(spec.compute, dtype)
    peak = ceil[peak_name]
    roof = attainable_tflops(ai, peak, ceil["copy_gbps"])
    memory_bound = ai * ceil["copy_gbps"] / 1e3 < peak
    out.update(binding_ceiling="copy_gbps" if memory_bound else peak_name,
               bound="memory" if memory_bound else "compute", roof_tflops=roof,
               # None rather than NaN: JSON has no NaN
               frac_roof=tflops / roof if roof > 0 else None)
    return out


def analyse(rows: list[dict], ceil: dict) -> list[dict]:
    """Each timed bench row with its place on the roofline of `ceil` (see :func:`place`)."""
    from gks import registry

    return [{**r, **place(registry.get(r["op"]), tuple(r["shape"]), r["dtype"], r["tflops"], ceil)}
            for r in rows if "median_us" in r]


def format_table(header: list[str], lines: list[list[str]], left: set[str]) -> list[str]:
    """Columns as wide as their widest cell (a 7-dim attention shape, a config's variant name
    included), two spaces apart; the `left` columns left-aligned, the rest right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines)]
    return ["  ".join(cell.ljust(w) if h in left else cell.rjust(w)
                      for h, cell, w in zip(header, line, widths)).rstrip()
            for line in [header, *lines]]


def analysis_lines(rows: list[dict]) -> list[str]:
    """The table print_analysis prints, one string per line (header first)."""
    header = ["op", "variant", "shape", "dtype", "FLOP/B", "TFLOP/s", "roof", "bound", "% roof"]

    def number(x, fmt):
        return "-" if x is None else format(x, fmt)

    lines = [[r["op"], r["variant"], "x".join(map(str, r["shape"])), r["dtype"],
              number(r["intensity"], ".2f"), f"{r['tflops']:.2f}", number(r["roof_tflops"], ".1f"),
              r["bound"] or "-", number(r["frac_roof"], ".0%")]
             for r in rows]
    return format_table(header, lines, left={"op", "variant", "shape", "dtype"})


def print_analysis(rows: list[dict]) -> None:
    print("\n".join(analysis_lines(rows)))


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--measure", action="store_true", help="measure the ceilings now (and cache them)")
    p.add_argument("--datasheet", action="store_true", help="use the vendor's figures instead")
    p.add_argument("--device-name", help="with --datasheet: the GPU name (default: this GPU's)")
    p.add_argument("--bench", type=Path, help="a bench JSON to place on the roofline")


def run(args: argparse.Namespace) -> int:
    if not args.datasheet:
        import torch

        if not torch.cuda.is_available():
            print("gks roofline: no CUDA GPU here to measure ceilings on; use --datasheet "
                  "(with --device-name) for the vendor's figures", file=sys.stderr)
            return 2
    try:
        ceil = ceilings(remeasure=args.measure, datasheet=args.datasheet, device_name=args.device_name)
    except KeyError as e:
        print(f"gks roofline: {e.args[0]}", file=sys.stderr)
        return 2
    print(json.dumps(ceil, indent=1))
    if args.bench:
        print_analysis(analyse(json.loads(args.bench.read_text())["rows"], ceil))
    return 0
