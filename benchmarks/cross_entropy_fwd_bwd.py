# SPDX-License-Identifier: Apache-2.0
"""gks.cross_entropy forward + backward (what a training step pays: the loss, then the
gradient of the logits through autograd) beside the peers of its spec (QuACK, Liger,
torch.compile and eager F.cross_entropy), bf16 by default, reduction 'mean'. `gks bench`
times the forward alone; this times both, each variant on its own copy of the logits (Liger
writes its gradient into them), and reports each one's peak memory beyond its inputs
(the gradient is one [T, V] tensor in the logits' dtype: anything past that is a buffer
the variant kept). Timing as in `python -m gks bench`: interleaved variants, medians.

    python benchmarks/cross_entropy_fwd_bwd.py [--shapes 16384x131072,4096x32000] [--dtype bfloat16]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout

DEFAULT_SHAPES = "16384x131072,4096x32000,8192x151936"


def _step(fn):
    import torch

    def run(logits, target):
        loss = fn(logits, target, ignore_index=-100, reduction="mean")
        (grad,) = torch.autograd.grad(loss, logits)
        return loss, grad

    return run


def _peak_extra_bytes(run, logits, target) -> int:
    import torch

    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    out = run(logits, target)
    torch.cuda.synchronize()
    del out
    return torch.cuda.max_memory_allocated() - base


def main(argv=None) -> int:
    import torch

    import gks
    import gks.triton
    from gks import registry, upstream
    from gks.profile.timing import Variant, time_interleaved

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help="TxV,... (default: %(default)s)")
    p.add_argument("--dtype", default="bfloat16", choices=["float32", "float16", "bfloat16"])
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--no-triton", action="store_true", help="leave out gks.triton")
    args = p.parse_args(argv)
    spec = registry.get("cross_entropy")

    candidates = [("gks", lambda: gks.cross_entropy)]
    if not args.no_triton:
        candidates.append(("gks.triton", lambda: gks.triton.cross_entropy))
    for peer in spec.peers:
        why = upstream.missing(peer.package) if peer.package else None
        if why:
            print(f"skipping {peer.name}: {why}")
            continue
        candidates.append((peer.name, peer.make))

    print(f"{'shape':>14} {'variant':>22} {'fwd+bwd ms':>11} {'TB/s (3 passes)':>16} {'extra GB':>9} "
          f"{'/ gks':>6}")
    for text in args.shapes.split(","):
        rows, cols = (int(x) for x in text.split("x"))
        inputs = spec.make_inputs((rows, cols), args.dtype, "cuda", 0)
        target = inputs["target"]
        variants, extras = [], {}
        for name, make in candidates:
            try:
                run = _step(make())
                logits = inputs["logits"].clone().requires_grad_()
                extras[name] = _peak_extra_bytes(run, logits, target)
                variants.append(Variant(name, run, [{"logits": logits, "target": target}]))
            except Exception as e:  # a peer that cannot take the shape or dtype
                print(f"{text:>14} {name:>22} failed: {type(e).__name__}: {e}")
        # The gks step is right before it is timed: the loss against the fp32 reference, and
        # the gradient of a few rows against float64.
        loss, grad = _step(gks.cross_entropy)(inputs["logits"].clone().requires_grad_(), target)
        want = spec.reference(inputs["logits"], target, -100, "mean")
        torch.testing.assert_close(loss.float(), want.float(), atol=1e-3, rtol=1e-2)
        pick = torch.arange(0, rows, max(1, rows // 8), device="cuda")
        from gks.specs.loss import cross_entropy_grad

        dloss = torch.full((pick.numel(),), 1.0 / (target != -100).sum().item(), dtype=torch.float64, device="cuda")
        g64 = cross_entropy_grad(inputs["logits"][pick], target[pick], dloss, precise=True)
        torch.testing.assert_close(grad[pick].double(), g64, atol=1e-7, rtol=2e-2)
        del loss, grad
        time_interleaved(variants, reps=args.reps)
        ours = next((v for v in variants if v.name == "gks"), None)
        nbytes = 3 * rows * cols * inputs["logits"].element_size()
        for v in variants:
            ratio = v.median_ms / ours.median_ms if ours else float("nan")
            print(f"{text:>14} {v.name:>22} {v.median_ms:11.3f} {nbytes / (v.median_ms * 1e-3) / 1e12:16.2f} "
                  f"{extras[v.name] / 2**30:9.2f} {ratio:6.2f}")
        del variants, inputs
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
