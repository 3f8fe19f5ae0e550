# SPDX-License-Identifier: Apache-2.0
"""Runs every CUDA-backend op of the registry on its small test shapes, plus a misaligned
and a strided copy of each float input, and checks the results: the workload the GPU check
runs under compute-sanitizer (memcheck), where a stray read or write is reported.

usage: compute-sanitizer --tool memcheck python scripts/sanitize_cases.py [--max-elements N]
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from gks import registry
from gks.testing import check_output


def _shifted(t: torch.Tensor, shift: int) -> torch.Tensor:
    """The same values, starting `shift` elements into a fresh buffer (misaligned)."""
    buf = torch.empty(t.numel() + shift, dtype=t.dtype, device=t.device)
    out = buf[shift:].view(t.shape)
    out.copy_(t)
    return out


def _row_strided(t: torch.Tensor) -> torch.Tensor:
    """The same values in rows padded by 8 elements (a strided row view)."""
    if t.dim() < 2:
        return t
    buf = torch.empty(*t.shape[:-1], t.shape[-1] + 8, dtype=t.dtype, device=t.device)
    out = buf[..., : t.shape[-1]]
    out.copy_(t)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--max-elements", type=int, default=1 << 16)
    p.add_argument("--kernel", action="append")
    p.add_argument("--each-config", action="store_true",
                   help="also run every config of the spec (CUDA config=i) on its own, not only the heuristic's")
    p.add_argument("--list", action="store_true", help="print the ops it would run (those with a CUDA backend) and exit")
    p.add_argument("--shard", default="0/1", metavar="I/N",
                   help="run only every N-th case from the I-th (0-based): N processes under a slow tool "
                        "(racecheck) share one op's sweep")
    args = p.parse_args()
    try:
        shard, shards = (int(v) for v in args.shard.split("/"))
    except ValueError:
        p.error(f"--shard must be I/N, got {args.shard!r}")
    if not 0 <= shard < shards:
        p.error(f"--shard I/N needs 0 <= I < N, got {args.shard!r}")
    specs = [registry.get(k) for k in args.kernel] if args.kernel else registry.ops()
    specs = [s for s in specs if "cuda" in [b.name for b in s.backends]]
    if args.list:
        print(*(s.name for s in specs))
        return 0
    failures = runs = case = 0
    for spec in specs:
        fn = spec.backend("cuda").load()
        for dtype in spec.dtypes:
            for shape in spec.test_shapes:
                if math.prod(shape) > args.max_elements:
                    continue
                base = spec.make_inputs(shape, dtype, "cuda", 7)
                for layout, transform in (("dense", lambda t: t), ("misaligned", lambda t: _shifted(t, 1)),
                                          ("strided", _row_strided)):
                    inputs = {k: transform(v) if isinstance(v, torch.Tensor) and v.is_floating_point()
                              and not (layout == "strided" and k in spec.contiguous_inputs) else v
                              for k, v in base.items()}
                    configs = [None] + (list(range(len(spec.configs))) if args.each_config else [])
                    for config in configs:
                        case += 1
                        if (case - 1) % shards != shard:
                            continue
                        what = f"{spec.name} {dtype} {shape} {layout}" + (f" config {config}" if config is not None else "")
                        runs += 1
                        try:
                            out = fn(**inputs) if config is None else fn(**inputs, config=config)
                            torch.cuda.synchronize()
                            check_output(spec, out, inputs, dtype, what)
                        except Exception as e:  # noqa: BLE001 - report every failure, keep going
                            failures += 1
                            print(f"FAILED {what}: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    print(f"sanitize cases: {runs - failures} passed, {failures} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
