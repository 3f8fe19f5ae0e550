# SPDX-License-Identifier: Apache-2.0
"""Draws a bench run on the roofline and prints the same as a table.

    python tools/roofline_plot.py results/bench.json -o roofline.png

Ceilings come from the bench JSON (`ceilings`, recorded when `gks roofline --measure` had
run on that machine) or, failing that, the vendor datasheet for the device named in it.
One point per kernel x backend x shape x dtype; x = arithmetic intensity (FLOP/byte, from
the spec's formulas), y = achieved TFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout
from gks.profile import roofline  # noqa: E402


# Marker per gks backend; a peer's points are crosses.
MARKERS = {"cuda": "o", "triton": "s", "pallas": "^"}


def variant_label(variant: str) -> tuple[str | None, str]:
    """(backend, label) of a bench row's variant: "gks.cuda" -> ("cuda", "cuda"),
    "gks.cuda[mma.sync]" -> ("cuda", "cuda[mma.sync]") (a config's name may hold dots, so the
    backend is what precedes the bracket, not the last dotted part), a peer's name such as
    "torch.compile" -> (None, "torch.compile")."""
    if not variant.startswith("gks."):
        return None, variant
    label = variant.removeprefix("gks.")
    return label.split("[", 1)[0], label


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, allow_abbrev=False,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("bench_json", type=Path)
    p.add_argument("-o", "--output", type=Path, default=Path("roofline.png"))
    p.add_argument("--all-variants", action="store_true", help="also plot the peers' points")
    args = p.parse_args(argv)
    doc = json.loads(args.bench_json.read_text())
    ceil = doc.get("ceilings") or roofline.ceilings(datasheet=True, device_name=doc["device"]["name"])
    rows = roofline.analyse(doc["rows"], ceil)
    if not args.all_variants:
        rows = [r for r in rows if r["kind"] == "gks"]
    if not rows:
        print("roofline_plot: no timed rows in the bench JSON", file=sys.stderr)
        return 1
    roofline.print_analysis(rows)

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(11, 7))
    ai = np.logspace(-2, 4, 400)
    bw = ceil["copy_gbps"] / 1e3
    for name, peak, style in (("FP32 (CUDA cores)", ceil["fp32_tflops"], ":"),
                              ("FP16/BF16 Tensor Cores", max(ceil["fp16_tflops"], ceil["bf16_tflops"]), "-"),
                              ("INT8 Tensor Cores (TOP/s)", ceil["int8_tops"], "--")):
        ax.loglog(ai, np.minimum(peak, ai * bw), style, color="gray", lw=1.2, label=f"{name}: {peak:.0f}")
    for r in rows:
        if r["intensity"] is None:  # a shape that moves no bytes has no place on the plot
            continue
        backend, label = variant_label(r["variant"])
        ax.loglog(r["intensity"], r["tflops"], MARKERS.get(backend, "x"), ms=6, alpha=0.8)
        ax.annotate(f"{r['op']} {label} {'x'.join(map(str, r['shape']))} {r['dtype'][:4]}",
                    (r["intensity"], r["tflops"]), fontsize=5, alpha=0.7, xytext=(3, 2),
                    textcoords="offset points")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s (TOP/s for INT8)")
    ax.set_title(f"gks on {doc['device']['name']} — copy {ceil['copy_gbps']:.0f} GB/s ({ceil.get('source', '?')} ceilings)")
    ax.grid(True, which="both", alpha=0.2)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.output, dpi=150)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
