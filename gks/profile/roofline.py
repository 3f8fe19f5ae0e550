# SPDX-License-Identifier: Apache-2.0
"""Roofline ceilings and analysis (`python -m gks roofline`).

Ceilings are measured on the device (``--measure``) and cached per device; datasheet
values are used only when asked (``--datasheet``). Every bench row then gets its
arithmetic intensity (the spec's FLOP over byte formulas) and its fraction of the binding
ceiling: min(compute peak, intensity x copy bandwidth).

Ceilings (all per second, 1e9 / 1e12 units):
  copy_gbps       device-to-device copy, bytes read + written
  fp32_tflops     cuBLAS FP32 GEMM with TF32 off, 8192^3 (the CUDA-core FMA rate)
  fp16_tflops     cuBLAS FP16 GEMM, 8192^3 (Tensor Cores)
  bf16_tflops     cuBLAS BF16 GEMM, 8192^3
  int8_tops       torch._int_mm, 8192^3 (what cuBLAS gives for INT8 through torch)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

# Vendor datasheet figures (dense), used only with --datasheet.
DATASHEET = {
    "NVIDIA H200": {"copy_gbps": 4800, "fp32_tflops": 67, "fp16_tflops": 989, "bf16_tflops": 989, "int8_tops": 1979},
    "NVIDIA H100 80GB HBM3": {"copy_gbps": 3350, "fp32_tflops": 67, "fp16_tflops": 989, "bf16_tflops": 989,
                              "int8_tops": 1979},
    "NVIDIA A100-SXM4-80GB": {"copy_gbps": 2039, "fp32_tflops": 19.5, "fp16_tflops": 312, "bf16_tflops": 312,
                              "int8_tops": 624},
}

# Which compute ceiling binds an op, by the unit its FLOPs run on (OpSpec.compute).
COMPUTE_CEILING = {"fp32": "fp32_tflops", "tensor": None, "int8": "int8_tops"}


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
        b = torch.randint(-127, 128, (n, n), dtype=torch.int8, device="cuda")
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


def compute_peak(ceil: dict, compute: str, dtype: str) -> float:
    """Peak FLOP/s (1e12 units) of the unit an op runs on."""
    if compute == "tensor":
        return ceil["bf16_tflops"] if dtype == "bfloat16" else ceil["fp16_tflops"]
    return ceil[COMPUTE_CEILING[compute]]


def attainable_tflops(intensity: float, peak_tflops: float, copy_gbps: float) -> float:
    """The roofline: min(peak, intensity x bandwidth), in TFLOP/s."""
    return min(peak_tflops, intensity * copy_gbps / 1e3)


def analyse(rows: list[dict], ceil: dict) -> list[dict]:
    """Adds intensity, binding ceiling and fraction of it to each timed bench row."""
    from gks import registry

    out = []
    for r in rows:
        if "median_us" not in r:
            continue
        spec = registry.get(r["op"])
        shape, dtype = tuple(r["shape"]), r["dtype"]
        ai = spec.arithmetic_intensity(shape, dtype)
        peak = compute_peak(ceil, spec.compute, dtype)
        roof = attainable_tflops(ai, peak, ceil["copy_gbps"])
        bound = "memory" if ai * ceil["copy_gbps"] / 1e3 < peak else "compute"
        out.append({**r, "intensity": ai, "roof_tflops": roof, "bound": bound,
                    "frac_roof": r["tflops"] / roof if roof > 0 else math.nan})
    return out


def print_analysis(rows: list[dict]) -> None:
    print(f"{'op':<20}{'variant':<22}{'shape':<20}{'dtype':<10}{'FLOP/B':>9}{'TFLOP/s':>10}"
          f"{'roof':>9}{'bound':>9}{'% roof':>8}")
    for r in rows:
        print(f"{r['op']:<20}{r['variant']:<22}{'x'.join(map(str, r['shape'])):<20}{r['dtype']:<10}"
              f"{r['intensity']:>9.2f}{r['tflops']:>10.2f}{r['roof_tflops']:>9.1f}{r['bound']:>9}"
              f"{100 * r['frac_roof']:>7.0f}%")


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
