# SPDX-License-Identifier: Apache-2.0
"""Pins a bench run as the baseline: results/baseline.json and results/baseline.md.

    python tools/make_baseline.py results/bench.json      # from `scripts/bench.sh` on the H200

For each op, shape, dtype and gks backend: our median (µs), the fastest peer measured in
the same run and its median, and ref/ours (> 1 means gks is faster).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def baseline_rows(doc: dict) -> list[dict]:
    timed = [r for r in doc["rows"] if "median_us" in r]
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


def markdown(doc: dict, rows: list[dict], source: str) -> str:
    d, v = doc["device"], doc["versions"]
    lines = [
        "# gks baseline",
        "",
        f"Pinned from `{source}`: {d['name']} (sm {d['capability']}, {d['sms']} SMs, driver "
        f"{d.get('driver', '?')}), torch {v.get('torch')}, triton {v.get('triton')}, jax {v.get('jax')}; "
        f"device copy bandwidth {doc['copy_gbps']:.0f} GB/s measured in the same run; clocks at start "
        f"{d['clocks_start'].get('sm_mhz', '?')} MHz SM, at end {d.get('clocks_end', {}).get('sm_mhz', '?')} MHz.",
        "",
        "Regenerate: `scripts/bench.sh` on the H200, then `python tools/make_baseline.py results/bench.json`.",
        "ref/ours > 1 means gks is faster than the fastest reference measured in the same run.",
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
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench_json", type=Path)
    p.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent.parent / "results")
    args = p.parse_args(argv)
    doc = json.loads(args.bench_json.read_text())
    rows = baseline_rows(doc)
    if not rows:
        print("make_baseline: the bench JSON has no timed gks rows", file=sys.stderr)
        return 1
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "baseline.json").write_text(json.dumps(
        {"device": doc["device"], "versions": doc["versions"], "copy_gbps": doc["copy_gbps"], "rows": rows},
        indent=1) + "\n")
    (args.out_dir / "baseline.md").write_text(markdown(doc, rows, args.bench_json.name))
    print(f"wrote {args.out_dir / 'baseline.md'} and baseline.json ({len(rows)} rows)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
