# SPDX-License-Identifier: Apache-2.0
"""Pins a bench run as the baseline: results/baseline.json and results/baseline.md.

    python tools/make_baseline.py results/bench.json      # from `scripts/bench.sh` on the H200
    python tools/make_baseline.py out/bench-*.json        # one run split per op (gpu_check.sh
                                                          # with GKS_BENCH_EACH), same machine

For each op, shape, dtype and gks backend: our median (µs), the fastest peer measured in
the same run and its median, and ref/ours (> 1 means gks is faster). Several files are
merged only when they come from the same device and versions; each row keeps the file it
came from, and the peers it is compared with are always from that same file. A row that
several files measure (op, backend, shape, dtype) comes from the last of them on the
command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout


def baseline_rows(doc: dict) -> list[dict]:
    # A shape a run timed twice (bench lists that repeated one) counts once, its first timing,
    # so that ours and its peers come from the same one.
    first = {}
    for r in doc["rows"]:
        if "median_us" in r:
            first.setdefault((r["op"], r["variant"], tuple(r["shape"]), r["dtype"]), r)
    timed = list(first.values())
    out = []
    for r in timed:
        if r["kind"] != "gks":
            continue
        peers = [p for p in timed if p["kind"] == "peer" and p["op"] == r["op"] and p["shape"] == r["shape"]
                 and p["dtype"] == r["dtype"]]
        best = min(peers, key=lambda p: p["median_us"]) if peers else None
        out.append({
            "op": r["op"], "backend": r["variant"].removeprefix("gks."), "shape": r["shape"], "dtype": r["dtype"],
            "ours_us": round(r["median_us"], 2), "gbps": round(r["gbps"]), "tflops": round(r["tflops"], 2),
            "fastest_ref": best["variant"] if best else None,
            "ref_us": round(best["median_us"], 2) if best else None,
            "ref_over_ours": round(best["median_us"] / r["median_us"], 3) if best else None,
            "checked": r["checked"],
        })
    return out


def check_same_setup(docs: dict[str, dict]) -> None:
    """Raises ValueError unless every file comes from the same device and versions."""
    def setup(doc):
        d = doc["device"]
        return (d.get("name"), d.get("capability"), d.get("driver")), doc["versions"]
    (first_name, first), *rest = docs.items()
    for name, doc in rest:
        if setup(doc) != setup(first):
            raise ValueError(f"make_baseline: {name} is from {setup(doc)}, {first_name} from "
                             f"{setup(first)}; a baseline merges runs of one machine and one set of versions")


def not_covered(rows: list[dict]) -> list[str]:
    """The registry's op x backend pairs that no row covers ("op (backend, ...)")."""
    from gks import registry

    have = {(r["op"], r["backend"]) for r in rows}
    out = []
    for spec in registry.ops():
        missing = [b.name for b in spec.backends if (spec.name, b.name) not in have]
        if missing:
            out.append(f"{spec.name} ({', '.join(missing)})")
    return out


def markdown(docs: dict[str, dict], rows: list[dict]) -> str:
    name, doc = next(iter(docs.items()))
    d, v = doc["device"], doc["versions"]
    runs = "; ".join(
        f"`{n}`: copy bandwidth {x['copy_gbps']:.0f} GB/s, SM clock {x['device']['clocks_start'].get('sm_mhz', '?')}"
        f" MHz at start, {x['device'].get('clocks_end', {}).get('sm_mhz', '?')} MHz at end"
        for n, x in docs.items())
    lines = [
        "# gks baseline",
        "",
        f"Pinned from {len(docs)} run{'s' if len(docs) > 1 else ''} on {d['name']} (sm {d['capability']}, "
        f"{d['sms']} SMs, driver {d.get('driver', '?')}), torch {v.get('torch')}, triton {v.get('triton')}, "
        f"jax {v.get('jax')}. Measured in each run: {runs}.",
        "",
        "Regenerate: `scripts/bench.sh` on the H200, then `python tools/make_baseline.py results/bench.json` "
        "(or, split per op, `GKS_BENCH_EACH=\"op ...\" scripts/gpu_check.sh OUT` and "
        "`python tools/make_baseline.py OUT/bench-*.json`).",
        "ref/ours > 1 means gks is faster than the fastest reference measured in the same run.",
        "",
        "Not in these runs: " + ("; ".join(not_covered(rows)) or "nothing, every op and backend is here") + ".",
        "",
        "| op | backend | shape | dtype | ours (µs) | GB/s | TFLOP/s | fastest reference | ref (µs) | ref/ours | check |",
        "|---|---|---|---|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['op']} | {r['backend']} | {'x'.join(map(str, r['shape']))} | {r['dtype']} | {r['ours_us']:.1f} | "
            f"{r['gbps']} | {r['tflops']:.2f} | {r['fastest_ref'] or '—'} | "
            f"{r['ref_us'] if r['ref_us'] is not None else '—'} | "
            f"{r['ref_over_ours'] if r['ref_over_ours'] is not None else '—'} | {r['checked']} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench_json", type=Path, nargs="+")
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "results")
    args = p.parse_args(argv)
    docs = {path.name: json.loads(path.read_text()) for path in args.bench_json}
    if len(docs) != len(args.bench_json):
        print("make_baseline: two of the files share a name; pass each run once", file=sys.stderr)
        return 2
    for name, doc in docs.items():
        missing = [k for k in ("device", "versions", "copy_gbps", "rows") if k not in doc]
        if missing:
            print(f"make_baseline: {name} is not a `gks bench --json` file (no {', '.join(missing)})",
                  file=sys.stderr)
            return 2
    try:
        check_same_setup(docs)
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    # A row measured in several files (op, backend, shape, dtype) is taken from the last one
    # given: a later run of one backend supersedes the earlier runs' rows.
    def key(r):
        return r["op"], r["backend"], tuple(r["shape"]), r["dtype"]

    rows: list[dict] = []
    for name, doc in docs.items():
        new = [dict(r, run=name) for r in baseline_rows(doc)]
        superseded = {key(r) for r in new}
        rows = [r for r in rows if key(r) not in superseded] + new
    if not rows:
        print("make_baseline: the bench JSON has no timed gks rows", file=sys.stderr)
        return 1
    first = next(iter(docs.values()))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "baseline.json").write_text(json.dumps(
        {"device": first["device"], "versions": first["versions"],
         "runs": {name: {"copy_gbps": doc["copy_gbps"], "device": doc["device"]} for name, doc in docs.items()},
         "rows": rows}, indent=1) + "\n")
    (args.out_dir / "baseline.md").write_text(markdown(docs, rows))
    print(f"wrote {args.out_dir / 'baseline.md'} and baseline.json ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
