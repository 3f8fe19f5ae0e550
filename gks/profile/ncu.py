# SPDX-License-Identifier: Apache-2.0
"""`python -m gks profile`: one op under Nsight Compute, with the figures that matter.

    python -m gks profile --kernel rmsnorm --shape 8192x32768 [--dtype bfloat16] [--backend cuda]
                          [--report out/rmsnorm]     # raw report: out/rmsnorm.ncu-rep

Runs ``ncu --clock-control none`` (the clocks are left as they are) on a child process that
calls the op a few times, profiles the last call's kernels, and prints DRAM throughput,
achieved occupancy, shared-memory bank conflicts, L2 hit rate and global load efficiency.
Where ncu cannot run (not installed, no GPU, no access to the counters) it says why.
"""

from __future__ import annotations

import argparse
import csv
import io
import shutil
import subprocess
import sys
from pathlib import Path

METRICS = {
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput (% of peak)",
    "dram__bytes.sum.per_second": "DRAM bandwidth",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy (%)",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "shared-memory bank conflicts",
    "lts__t_sector_hit_rate.pct": "L2 hit rate (%)",
    "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct": "global load efficiency (%)",
    "gpu__time_duration.sum": "kernel time",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput (% of peak)",
}
WARMUP_CALLS = 3


def _workload(args: argparse.Namespace) -> int:
    """The child ncu profiles: WARMUP_CALLS + 1 calls of the op."""
    import torch

    from gks import registry

    spec = registry.get(args.kernel)
    shape = tuple(int(d) for d in args.shape.split("x"))
    inputs = spec.make_inputs(shape, args.dtype, "cuda", 0)
    fn = spec.backend(args.backend).load()
    for _ in range(WARMUP_CALLS + 1):
        fn(**inputs)
    torch.cuda.synchronize()
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", required=True)
    p.add_argument("--shape", required=True, help="e.g. 8192x32768 (the spec's shape_names order)")
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--backend", default="cuda")
    p.add_argument("--report", type=Path, help="where to save the raw .ncu-rep (default: ./gks-profile-<op>)")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    if args.workload:
        return _workload(args)
    ncu = shutil.which("ncu")
    if ncu is None:
        print("gks profile: Nsight Compute (ncu) is not on PATH; install it with the CUDA toolkit",
              file=sys.stderr)
        return 2
    report = args.report or Path(f"gks-profile-{args.kernel}")
    child = [sys.executable, "-m", "gks", "profile", "--workload", "--kernel", args.kernel,
             "--shape", args.shape, "--dtype", args.dtype, "--backend", args.backend]
    # Every kernel of the child is profiled (how many torch helper kernels precede the op's
    # is not known up front); the last call's share of the rows is what gets printed.
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all", "--metrics", ",".join(METRICS),
           "--csv", "--page", "raw", "-f", "-o", str(report)] + child
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"gks profile: ncu failed (exit {done.returncode}); its output:\n{done.stdout[-2000:]}\n"
              f"{done.stderr[-2000:]}", file=sys.stderr)
        return done.returncode
    table = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
                            "--metrics", ",".join(METRICS)], capture_output=True, text=True)
    rows = list(csv.DictReader(io.StringIO(table.stdout)))
    # The raw page's first row gives each metric's unit (ncu scales them: Tbyte/s, usecond).
    units = rows[0] if rows and not rows[0].get("Kernel Name") else {}
    rows = [r for r in rows if r.get("Kernel Name") and not r["Kernel Name"].startswith("void at::")]
    if not rows:
        print("gks profile: ncu recorded no gks kernel (see the raw report)", file=sys.stderr)
        return 1
    calls = len(rows) // (WARMUP_CALLS + 1) or 1
    for r in rows[-calls:]:
        print(f"kernel: {r['Kernel Name'][:120]}")
        for key, label in METRICS.items():
            unit = units.get(key, "")
            unit = "" if unit in ("", "%") else f" {unit}"
            print(f"  {label:<34} {r.get(key, 'n/a')}{unit}")
    print(f"raw report: {report}.ncu-rep")
    return 0
