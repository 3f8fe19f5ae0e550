# SPDX-License-Identifier: Apache-2.0
"""gks.int8_gemm with b_q in each layout it accepts, beside torch._int_mm given the same
operands: K-major b_q (what the registry's bench uses; the Hopper kernel reads it in place)
and row-major b_q (transposed into a temporary for the Hopper kernel from M = 512, left to
the mma.sync kernel below). Timing as in `python -m gks bench`: cold L2, interleaved, median.

    python benchmarks/int8_gemm_layouts.py [--shapes 8192x8192x8192,...] [--reps 10]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

DEFAULT_SHAPES = "4096x4096x4096,8192x8192x8192,128x4096x4096,1024x4096x4096,1024x14336x4096,1024x4096x14336"


def main(argv=None) -> int:
    import torch

    import gks
    from gks import registry
    from gks.profile.timing import Variant, sets_for_cold_l2, time_interleaved

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="MxNxK,... (default: %(default)s)")
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    spec = registry.get("int8_gemm")
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    print(f"{'shape':>16} {'b_q':>9} {'path':>16} {'gks µs':>9} {'TOP/s':>7} {'_int_mm µs':>11} {'×':>6}")
    for text in args.shapes.split(","):
        shape = tuple(int(x) for x in text.split("x"))
        m, n, k = shape
        probe = spec.make_inputs(shape, "float16", "cuda", 0)
        n_sets = sets_for_cold_l2(m * k + n * k + 2 * m * n, l2)
        kmajor = [probe] + [spec.make_inputs(shape, "float16", "cuda", s) for s in range(1, n_sets)]
        rowmajor = [dict(s, b_q=s["b_q"].contiguous()) for s in kmajor]
        peer = spec.peers[0].make()
        for layout, sets in (("K-major", kmajor), ("row-major", rowmajor)):
            ours = Variant("gks", gks.int8_gemm, sets)
            theirs = Variant("_int_mm", peer, sets)
            time_interleaved([ours, theirs], reps=args.reps)
            out = gks.int8_gemm(**sets[0])
            spec.check(out, spec.reference(**sets[0], precise=True), "float16", sets[0])
            path = gks.cuda.int8_gemm_path(sets[0]["a_q"], sets[0]["b_q"], sets[0]["a_scale"],
                                           sets[0]["b_scale"], out)
            tops = 2 * m * n * k / (ours.median_ms * 1e-3) / 1e12
            print(f"{text:>16} {layout:>9} {path:>16} {ours.median_ms * 1e3:9.1f} {tops:7.0f} "
                  f"{theirs.median_ms * 1e3:11.1f} {theirs.median_ms / ours.median_ms:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
