# SPDX-License-Identifier: Apache-2.0
"""Summarises the CUDA kernels in the built gks library from their SASS: per kernel and
architecture, registers, shared memory, stack and local memory (spills), and counts of the
instructions that matter (HMMA/HGMMA/IMMA/IGMMA, LDGSTS, UTMALDG/UTMASTG (TMA loads and
stores), LDSM/STSM, LDS/STS and LDG/STG by width, SHFL). GMMA_BATCHED counts the wgmmas
(HGMMA/IGMMA) issued without a scoreboard of their own, i.e. straight after one another;
a kernel with wgmmas but none batched has had them serialized by ptxas (every one waits for
the last: ptxas info C7520 or C7515), which costs the Hopper GEMM about a tenth of its
speed, and is reported last.

    python tools/dump_sass.py [--lib build/libgks_tvm_ffi.so] [--kernel rmsnorm] [--sass-out DIR]

Runs without a GPU (cuobjdump from the CUDA toolkit, or the one Triton ships).
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
from pathlib import Path

COUNTED = ("HGMMA", "IGMMA", "HMMA", "IMMA", "LDGSTS", "UTMALDG", "UTMASTG", "LDSM", "STSM", "SHFL", "BAR",
           "FFMA", "MUFU")
WIDTHS = ("LDS", "STS", "LDG", "STG")


def find_cuobjdump() -> str:
    found = shutil.which("cuobjdump") or (Path("/usr/local/cuda/bin/cuobjdump").is_file() and "/usr/local/cuda/bin/cuobjdump")
    if found:
        return str(found)
    try:
        import triton

        p = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        if p.is_file():
            return str(p)
    except ImportError:
        pass
    sys.exit("dump_sass: cuobjdump not found (install the CUDA toolkit, or triton)")


def find_library() -> Path:
    for candidate in [Path("build/libgks_tvm_ffi.so"), Path("build-gpu/libgks_tvm_ffi.so"), Path("build/libgks.a")]:
        if candidate.is_file():
            return candidate
    from gks import _native

    path = _native.library_path()
    if path is None:
        sys.exit("dump_sass: no built gks library found; pass --lib")
    return path


def demangle(names: list[str]) -> dict[str, str]:
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, out))


def parse_sass(text: str) -> dict[tuple[str, str], collections.Counter]:
    """(arch, mangled function) -> instruction counts."""
    counts: dict[tuple[str, str], collections.Counter] = {}
    arch, func = "?", None
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function : (\S+)", line)
        if m:
            func = m.group(1)
            counts[(arch, func)] = collections.Counter()
            continue
        m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?", line)
        if m and func:
            op, mods = m.group(1), m.group(2) or ""
            c = counts[(arch, func)]
            if op in COUNTED:
                c[op] += 1
            if op in ("HGMMA", "IGMMA") and "gsb0" not in line:
                c["GMMA_BATCHED"] += 1
            if op in WIDTHS:
                width = next((w for w in ("128", "64", "U16", "16", "U8", "8") if f".{w}" in mods), "32")
                c[f"{op}.{width}"] += 1
    return counts


def serialized_wgmma(counts: collections.Counter) -> bool:
    """True when a kernel has wgmmas and ptxas made each wait for the one before."""
    return counts["HGMMA"] + counts["IGMMA"] > 0 and counts["GMMA_BATCHED"] == 0


def parse_resources(text: str) -> dict[tuple[str, str], dict[str, int]]:
    """(arch, mangled function) -> REG/STACK/SHARED/LOCAL, from `cuobjdump --dump-resource-usage`
    (the figures follow the function's name, on the same line or the next)."""
    res, arch, func = {}, "?", None
    for line in text.splitlines():
        m = re.search(r"arch = (sm_\w+)", line)
        if m:
            arch = m.group(1)
        m = re.match(r"\s*Function (\S+?):?\s*$", line) or re.match(r"\s*Function (\S+?):\s*(.*)", line)
        if m:
            func = m.group(1)
        fields = dict(re.findall(r"\b(REG|STACK|SHARED|LOCAL):(\d+)", line))
        if fields and func:
            res[(arch, func)] = {k: int(v) for k, v in fields.items()}
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--lib", type=Path, help="library or object to read (default: the built gks library)")
    p.add_argument("--kernel", help="only kernels whose demangled name contains this (e.g. rmsnorm)")
    p.add_argument("--arch", help="only this architecture, e.g. sm_90a")
    p.add_argument("--sass-out", type=Path, help="also write the full SASS here")
    args = p.parse_args(argv)
    lib = args.lib or find_library()
    tool = find_cuobjdump()
    sass = subprocess.run([tool, "--dump-sass", str(lib)], capture_output=True, text=True)
    if sass.returncode != 0:
        sys.exit(f"dump_sass: cuobjdump failed on {lib}: {sass.stderr.strip()}")
    resources = parse_resources(
        subprocess.run([tool, "--dump-resource-usage", str(lib)], capture_output=True, text=True).stdout)
    if args.sass_out:
        args.sass_out.mkdir(parents=True, exist_ok=True)
        (args.sass_out / (lib.name + ".sass")).write_text(sass.stdout)
    counts = parse_sass(sass.stdout)
    names = demangle(sorted({f for _, f in counts}))
    rows, serialized = [], []
    for (arch, func), c in sorted(counts.items(), key=lambda kv: (names[kv[0][1]], kv[0][0])):
        name = names[func]
        if args.kernel and args.kernel not in name:
            continue
        if args.arch and arch != args.arch:
            continue
        r = resources.get((arch, func), {})
        short = re.sub(r"\(.*", "", name).replace("void ", "").replace("gks::kernels::", "")
        instr = " ".join(f"{k}={v}" for k, v in sorted(c.items()))
        if serialized_wgmma(c):
            serialized.append(short)
        rows.append(f"{arch:<8} REG={r.get('REG', '?'):<4} SMEM={r.get('SHARED', '?'):<6} "
                    f"STACK={r.get('STACK', '?'):<4} LOCAL={r.get('LOCAL', '?'):<4} {short}\n          {instr}")
    print("\n".join(rows) if rows else "dump_sass: no kernels matched")
    spills = [row for row in rows if "LOCAL=0 " not in row and "LOCAL=? " not in row]
    if spills:
        print(f"\n{len(spills)} kernel(s) use local memory (spills or local arrays): see LOCAL= above")
    if serialized:
        print(f"\n{len(serialized)} kernel(s) with serialized wgmmas (none issued back to back; "
              "ptxas -v says why, C7520/C7515):\n  " + "\n  ".join(serialized))
    return 0


if __name__ == "__main__":
    sys.exit(main())
