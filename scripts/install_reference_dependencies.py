#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Installs the pinned upstream references (reference-dependencies.json), or packs them for a
GPU machine without a package index.

    python scripts/install_reference_dependencies.py                 # pip install the exact set here
    python scripts/install_reference_dependencies.py --only quack-kernels
    python scripts/install_reference_dependencies.py --pack DIR      # wheels for Python 3.12,
                                                                     # manylinux x86_64, in parts

--pack downloads every wheel of the set (no dependency resolution: the lock names them all)
and splits them into DIR/part-1, DIR/part-2, ... of at most --part-mib MiB each (a wheel
larger than that, such as the CuTe DSL library, travels in pieces). Each part holds the same
install.py: run it on the GPU machine once per part, in any order (each run stashes its part
in /tmp/gks-upstream-stage); the run that completes the set joins the pieces and installs
the wheels into /tmp/upstream-site (--target), then prints the PYTHONPATH to export.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "reference-dependencies.json"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
             "manylinux_2_17_x86_64", "manylinux2014_x86_64")

INSTALL_PY = r'''#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Stashes this part of the pinned upstream references; the run that completes the set
installs them (see scripts/install_reference_dependencies.py)."""
import hashlib, json, shutil, subprocess, sys
from pathlib import Path

here = Path(__file__).resolve().parent
stage = Path("/tmp/gks-upstream-stage")
target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/tmp/upstream-site")
stage.mkdir(parents=True, exist_ok=True)
manifest = json.loads((here / "manifest.json").read_text())
for f in here.iterdir():
    if f.name not in ("install.py", "manifest.json"):
        shutil.copy2(f, stage / f.name)
have = {p.name for p in stage.iterdir()}
lacking = [p for w in manifest["wheels"] for p in w["pieces"] if p not in have]
if lacking:
    print(f"upstream: part stashed; {len(lacking)} piece(s) still to come (run the other parts' install.py)")
    sys.exit(0)
wheels = []
for w in manifest["wheels"]:
    out = stage / w["name"]
    with open(out, "wb") as dst:
        for p in w["pieces"]:
            dst.write((stage / p).read_bytes())
    if hashlib.sha256(out.read_bytes()).hexdigest() != w["sha256"]:
        sys.exit(f"upstream: {w['name']} does not match its checksum; re-run the parts")
    wheels.append(str(out))
subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
                       "--no-compile", "--upgrade", "--target", str(target), *wheels])
dsl = target / "nvidia_cutlass_dsl" / "dsl_packages"
extra = f":{dsl}" if dsl.is_dir() else ""
print(f"upstream: installed; export PYTHONPATH={target}{extra}:$PYTHONPATH")
'''


def requirements(only: list[str] | None) -> list[str]:
    sys.path.insert(0, str(ROOT))
    from gks import upstream

    try:
        return upstream.requirements(only)
    except KeyError as e:
        sys.exit(f"install_reference_dependencies: {e.args[0]}")


def pack(reqs: list[str], out: Path, part_mib: int) -> None:
    limit = part_mib * 2**20
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
               "--python-version", "3.12", "--implementation", "cp", "-d", tmp]
        for p in PLATFORMS:
            cmd += ["--platform", p]
        subprocess.check_call(cmd + reqs)
        wheels = sorted(Path(tmp).glob("*.whl"), key=lambda w: -w.stat().st_size)
        # Pieces of at most `limit` bytes, packed into as few parts as fit (largest first).
        pieces: list[tuple[str, bytes]] = []
        manifest = {"wheels": []}
        for w in wheels:
            data = w.read_bytes()
            names = []
            for i in range(0, len(data), limit - 2**16):
                name = f"{w.name}.piece{len(names)}"
                pieces.append((name, data[i:i + limit - 2**16]))
                names.append(name)
            manifest["wheels"].append({"name": w.name, "sha256": hashlib.sha256(data).hexdigest(),
                                       "pieces": names})
        parts: list[list[tuple[str, bytes]]] = []
        for piece in pieces:
            for part in parts:
                if sum(len(d) for _, d in part) + len(piece[1]) <= limit - 2**16:
                    part.append(piece)
                    break
            else:
                parts.append([piece])
        if out.exists():
            shutil.rmtree(out)
        for i, part in enumerate(parts, 1):
            d = out / f"part-{i}"
            d.mkdir(parents=True)
            for name, data in part:
                (d / name).write_bytes(data)
            (d / "manifest.json").write_text(json.dumps(manifest, indent=1))
            (d / "install.py").write_text(INSTALL_PY)
            print(f"{d}: {sum(len(x) for _, x in part) / 2**20:.1f} MiB, {len(part)} piece(s)")
    print(f"{len(parts)} part(s) in {out}; on the GPU machine run each part's install.py, in any "
          "order (one device call each, within one lease)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", action="append", help="only this package of the lock (repeatable)")
    p.add_argument("--pack", type=Path, metavar="DIR", help="write the wheels for a GPU machine here")
    p.add_argument("--part-mib", type=int, default=60, help="the largest part (default 60 MiB)")
    args = p.parse_args()
    reqs = requirements(args.only)
    if args.pack:
        pack(reqs, args.pack, args.part_mib)
        return 0
    return subprocess.call([sys.executable, "-m", "pip", "install", *reqs])


if __name__ == "__main__":
    sys.exit(main())
