# SPDX-License-Identifier: Apache-2.0
"""`python -m gks profile`: one op under Nsight Compute, with the figures that matter.

    python -m gks profile --kernel rmsnorm --shape 8192x32768 [--dtype bfloat16] [--backend cuda]
                          [--report out/rmsnorm]     # raw report: out/rmsnorm.ncu-rep

Runs ``ncu --clock-control none`` (the clocks are left as they are) on a child process that
calls the op a few times, profiles the last call's kernels, and prints DRAM throughput,
achieved occupancy, shared-memory bank conflicts, L2 hit rate and global load efficiency.

The arguments are checked against the op's spec before ncu is looked for. Where ncu cannot
run (not installed, no access to the GPU's performance counters, no GPU) it says why.
Exit status: 0 profiled; 1 ncu ran but recorded nothing usable; 2 a bad argument, or no
usable profiler here (as ``gks bench`` and ``gks autotune`` use 2).
"""

from __future__ import annotations

import argparse
import csv
import io
import re
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
DEFAULT_BACKEND = "cuda"
# The dtype profiled when --dtype is not given, where the op takes it (the one the ops are
# tuned for and the one this command always defaulted to); other ops get their first dtype.
PREFERRED_DTYPE = "bfloat16"
# Where the CUDA toolkit puts ncu when its bin directory is not on PATH.
NCU_USUAL_PLACES = (Path("/usr/local/cuda/bin/ncu"), Path("/opt/nvidia/nsight-compute/ncu"))


class ArgumentProblem(ValueError):
    """A --kernel, --backend, --dtype or --shape the op cannot take; the message names it."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(f"argument {option}: {message}")


def default_dtype(spec) -> str:
    """The dtype profiled when --dtype is not given."""
    return PREFERRED_DTYPE if PREFERRED_DTYPE in spec.dtypes else spec.dtypes[0]


def _flag_dims(spec) -> set[int]:
    """Positions of a spec's shape that are 0/1 flags, not sizes (flash_attention_fwd's
    causal): those its own shapes set to 0, with no value but 0 and 1."""
    shapes = [*spec.test_shapes, *spec.bench_shapes]
    # A shape that leaves off an optional dim has no say on it.
    return {i for i in range(len(spec.shape_names))
            if any(len(s) > i and s[i] == 0 for s in shapes)
            and all(s[i] in (0, 1) for s in shapes if len(s) > i)}


def parse_shape(text: str, spec) -> tuple[int, ...]:
    """--shape ("8192x32768") as the op's shape tuple, or ArgumentProblem saying what the op
    expects: as many positive integers as its shape_names (less any optional ones it leaves
    off), "x" between them."""
    names = spec.shape_names
    example = "x".join(map(str, spec.bench_shapes[0]))
    counts = " or ".join(map(str, spec.shape_lengths()))
    expected = f"{counts} dims {spec.dims_text(' x ')}, e.g. {example}"
    try:
        shape = tuple(int(d) for d in text.strip().lower().split("x"))
    except ValueError:
        raise ArgumentProblem("--shape", f"'{text}' is not integers joined by 'x'; {spec.name} "
                              f"takes {expected}") from None
    if not spec.fits_shape(shape):
        raise ArgumentProblem("--shape", f"'{text}' has {len(shape)} dims; {spec.name} takes "
                              f"{expected}")
    flags = _flag_dims(spec)
    for i, (name, d) in enumerate(zip(names, shape)):
        if i in flags and d not in (0, 1):
            raise ArgumentProblem("--shape", f"{name} (dim {i + 1} of '{text}') is a flag, 0 or 1, "
                                  f"not {d}; {spec.name} takes {expected}")
        if i not in flags and d < 1:
            raise ArgumentProblem("--shape", f"{name} (dim {i + 1} of '{text}') must be positive, "
                                  f"not {d}; {spec.name} takes {expected}")
    return shape


def check_arguments(args: argparse.Namespace):
    """(spec, shape, dtype) of the command's arguments, or ArgumentProblem for the first that
    the registry's op cannot take; the dtype is default_dtype(spec) where --dtype is absent."""
    from gks import registry

    specs = {s.name: s for s in registry.ops()}
    spec = specs.get(args.kernel)
    if spec is None:
        raise ArgumentProblem("--kernel", f"unknown op '{args.kernel}' (choose from: "
                              f"{', '.join(specs)})")
    backends = [b.name for b in spec.backends]
    if args.backend not in backends:
        raise ArgumentProblem("--backend", f"{spec.name} has no backend '{args.backend}' (choose "
                              f"from: {', '.join(backends)})")
    dtype = args.dtype or default_dtype(spec)
    if dtype not in spec.dtypes:
        raise ArgumentProblem("--dtype", f"{spec.name} does not take '{dtype}' (choose from: "
                              f"{', '.join(spec.dtypes)})")
    return spec, parse_shape(args.shape, spec), dtype


# What ncu or the profiled process prints when the profiler cannot work on this machine,
# and what that means for the user; the first that matches explains the failure.
NCU_PROBLEMS = (
    (re.compile(r"ERR_NVGPUCTRPERM|permission to access NVIDIA GPU Performance Counters", re.I),
     "ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM): the NVIDIA driver "
     "lets only administrators profile (NVreg_RestrictProfilingToAdminUsers=1), or this "
     "container lacks the capability. Run the command as root (sudo -E env PATH=$PATH ...), have "
     "an administrator set 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' in "
     "/etc/modprobe.d/ and reload the driver (or reboot), or start the container with "
     "--cap-add=SYS_ADMIN; a hosted machine whose host does not allow it cannot profile. "
     "See https://developer.nvidia.com/ERR_NVGPUCTRPERM"),
    (re.compile(r"no CUDA-capable device is detected|No CUDA GPUs are available|"
                r"Found no NVIDIA driver|CUDA driver initialization failed|"
                r"Torch not compiled with CUDA enabled|CUDA_ERROR_NO_DEVICE|cudaErrorNoDevice|"
                r"^==ERROR==.*\bno\b.*\bdevices?\b", re.I | re.M),
     "no CUDA GPU is usable (no NVIDIA GPU or driver on this machine, CUDA_VISIBLE_DEVICES "
     "hides them, or torch is a CPU-only build), so there is nothing to profile. Run on a "
     "machine with an NVIDIA GPU; `nvidia-smi` and `python -c \"import torch; "
     "print(torch.cuda.is_available())\"` should both see it."),
    (re.compile(r"driver (version )?is insufficient for CUDA runtime|"
                r"NVIDIA driver on your system is too old|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", re.I),
     "the NVIDIA driver is older than the CUDA version torch (or ncu) was built for. Update "
     "the driver, or install a torch build for an older CUDA."),
    (re.compile(r"^==ERROR==.*\bnot supported\b", re.I | re.M),
     "this Nsight Compute does not support profiling this GPU or this set-up (a GPU newer than "
     "the ncu release, or a virtual GPU / WSL without profiling enabled). Install a newer "
     "Nsight Compute, or profile on a bare-metal GPU it supports."),
)


def diagnose_ncu_output(text: str) -> str | None:
    """Why ncu could not profile, from what it and the profiled process printed; None when
    the output shows none of the known reasons the profiler is unusable here."""
    for pattern, why in NCU_PROBLEMS:
        if pattern.search(text):
            return why
    return None


def ncu_missing_message() -> str:
    found = [str(p) for p in NCU_USUAL_PLACES if p.is_file()]
    where = (f"; it is at {found[0]}: add {Path(found[0]).parent} to PATH" if found else
             "; install Nsight Compute (it comes with the CUDA toolkit) and put its ncu on PATH")
    return f"gks profile: Nsight Compute (ncu) is not on PATH{where}"


def parse_raw_page(text: str) -> tuple[dict[str, str], list[dict[str, str]]]:
    """(units, kernel rows) of ncu's raw page as CSV (``ncu --import R --csv --page raw``):
    the first row after the header gives each metric's unit (ncu scales them: Tbyte/s, us),
    then one row per profiled kernel."""
    rows = list(csv.DictReader(io.StringIO(text)))
    units = rows[0] if rows and not rows[0].get("Kernel Name") else {}
    return units, [r for r in rows if r.get("Kernel Name")]


def last_call_rows(rows: list[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of the op's last call. The child launches torch's kernels (making the inputs)
    and then the op WARMUP_CALLS + 1 times; the first call may launch more (autotuning, JIT),
    the later ones repeat the same launches, so the shortest run of kernel names that the
    last WARMUP_CALLS calls repeat is one call."""
    names = [r["Kernel Name"] for r in rows]
    repeats = WARMUP_CALLS
    for per_call in range(1, len(names) // repeats + 1):
        tail = names[len(names) - per_call * repeats:]
        if all(name == tail[i % per_call] for i, name in enumerate(tail)):
            return rows[-per_call:]
    # No repeating tail: leave out torch's own kernels (as older ncu names them) and take an
    # equal share of the rest.
    rows = [r for r in rows if not r["Kernel Name"].startswith("void at::")]
    calls = len(rows) // (WARMUP_CALLS + 1) or 1
    return rows[-calls:]


def format_rows(rows: list[dict[str, str]], units: dict[str, str]) -> list[str]:
    lines = []
    for r in rows:
        lines.append(f"kernel: {r['Kernel Name'][:120]}")
        for key, label in METRICS.items():
            unit = units.get(key, "")
            unit = "" if unit in ("", "%") else f" {unit}"
            lines.append(f"  {label:<34} {r.get(key, 'n/a')}{unit}")
    return lines


def _workload(spec, shape: tuple[int, ...], dtype: str, backend: str) -> int:
    """The child ncu profiles: WARMUP_CALLS + 1 calls of the op."""
    import torch

    inputs = spec.make_inputs(shape, dtype, "cuda", 0)
    fn = spec.backend(backend).load()
    for _ in range(WARMUP_CALLS + 1):
        fn(**inputs)
    torch.cuda.synchronize()
    return 0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kernel", required=True, help="the op to profile (see `gks list`)")
    p.add_argument("--shape", required=True,
                   help="e.g. 8192x32768: one integer per entry of the op's shape_names, in "
                        "their order (`gks list --format json`)")
    p.add_argument("--dtype", default=None,
                   help=f"one of the op's dtypes (default: {PREFERRED_DTYPE} where the op takes "
                        "it, else its first dtype, e.g. float32 for sgemm)")
    p.add_argument("--backend", default=DEFAULT_BACKEND,
                   help=f"one of the op's backends (default: {DEFAULT_BACKEND})")
    p.add_argument("--report", type=Path,
                   help="where to save the raw .ncu-rep (default: ./gks-profile-<op>)")
    p.add_argument("--workload", action="store_true", help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    # The arguments first: a bad one must be named even where ncu is missing, and must not
    # surface as a traceback of the child under ncu.
    try:
        spec, shape, dtype = check_arguments(args)
    except ArgumentProblem as e:
        print(f"gks profile: error: {e}", file=sys.stderr)
        return 2
    if args.workload:
        return _workload(spec, shape, dtype, args.backend)
    ncu = shutil.which("ncu")
    if ncu is None:
        print(ncu_missing_message(), file=sys.stderr)
        return 2
    report = args.report or Path(f"gks-profile-{spec.name}")
    if report.suffix == ".ncu-rep":  # ncu adds the suffix itself
        report = report.with_suffix("")
    report.parent.mkdir(parents=True, exist_ok=True)
    child = [sys.executable, "-m", "gks", "profile", "--workload", "--kernel", spec.name,
             "--shape", "x".join(map(str, shape)), "--dtype", dtype, "--backend", args.backend]
    # Every kernel of the child is profiled (how many torch helper kernels precede the op's
    # is not known up front); the last call's rows are what gets printed (last_call_rows).
    cmd = [ncu, "--clock-control", "none", "--target-processes", "all",
           "--metrics", ",".join(METRICS), "--csv", "--page", "raw", "-f", "-o", str(report),
           *child]
    done = subprocess.run(cmd, capture_output=True, text=True)
    output = f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    # ncu may exit 0 although it could not read a counter (the profiled process succeeded).
    why = diagnose_ncu_output(done.stdout + done.stderr)
    if why is not None:
        print(f"gks profile: ncu cannot profile on this machine: {why}\n"
              f"(ncu exit {done.returncode}; the end of its output:)\n{output}", file=sys.stderr)
        return 2
    if done.returncode != 0:
        print(f"gks profile: ncu failed (exit {done.returncode}); its output:\n{output}",
              file=sys.stderr)
        return done.returncode
    table = subprocess.run([ncu, "--import", f"{report}.ncu-rep", "--csv", "--page", "raw",
                            "--metrics", ",".join(METRICS)], capture_output=True, text=True)
    units, rows = parse_raw_page(table.stdout)
    if not rows:
        print(f"gks profile: ncu recorded no kernel (see the raw report, and ncu's output:)\n"
              f"{output}\n{table.stderr[-2000:]}", file=sys.stderr)
        return 1
    for line in format_rows(last_call_rows(rows), units):
        print(line)
    print(f"raw report: {report}.ncu-rep")
    return 0
