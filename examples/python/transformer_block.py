# SPDX-License-Identifier: Apache-2.0
"""A transformer block's forward pass built from gks ops, checked against plain PyTorch.

    python examples/python/transformer_block.py [--tokens 2048] [--dim 2048] [--heads 16]

pre-norm attention + MLP (Llama-style, without rotary embeddings):
    h = x + W_o · attention(rmsnorm(x) · W_qkv)        gks.rmsnorm, gks.gemm, gks.flash_attention_fwd
    y = h + W_down · silu(rmsnorm(h) · W_up)            gks.rmsnorm, gks.gemm
(gks.gemm: the Hopper kernel on sm_90, WMMA elsewhere.)
Needs a CUDA GPU. Prints the relative error of gks's result against PyTorch's (same
weights, bf16, the same math through torch.nn.functional) and both times.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import gks


def block_gks(x, p, heads):
    t, d = x.shape
    hd = d // heads
    mm = gks.gemm  # bf16 in, fp32 accumulation, bf16 out
    qkv = mm(gks.rmsnorm(x, p["norm1"], 1e-6), p["w_qkv"])
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(1, t, heads, hd).transpose(1, 2) for i in range(3))
    o, _lse = gks.flash_attention_fwd(q, k, v, causal=True)
    h = x + mm(o.transpose(1, 2).reshape(t, d), p["w_o"])
    up = mm(gks.rmsnorm(h, p["norm2"], 1e-6), p["w_up"])
    return h + mm(F.silu(up), p["w_down"])


def block_torch(x, p, heads):
    t, d = x.shape
    hd = d // heads
    qkv = F.rms_norm(x, (d,), p["norm1"], 1e-6) @ p["w_qkv"]
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(1, t, heads, hd).transpose(1, 2) for i in range(3))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    h = x + o.transpose(1, 2).reshape(t, d) @ p["w_o"]
    return h + F.silu(F.rms_norm(h, (d,), p["norm2"], 1e-6) @ p["w_up"]) @ p["w_down"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokens", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("transformer_block: needs a CUDA GPU; none here", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    d, bf = args.dim, dict(device="cuda", dtype=torch.bfloat16)
    p = {
        "norm1": 1 + 0.1 * torch.randn(d, **bf), "norm2": 1 + 0.1 * torch.randn(d, **bf),
        "w_qkv": torch.randn(d, 3 * d, **bf) / d**0.5, "w_o": torch.randn(d, d, **bf) / d**0.5,
        "w_up": torch.randn(d, 4 * d, **bf) / d**0.5, "w_down": torch.randn(4 * d, d, **bf) / (4 * d) ** 0.5,
    }
    x = torch.randn(args.tokens, d, **bf)
    ours, ref = block_gks(x, p, args.heads), block_torch(x, p, args.heads)
    exact = block_torch(x.double(), {k: v.double() for k, v in p.items()}, args.heads)
    err = lambda y: ((y.double() - exact).norm() / exact.norm()).item()  # noqa: E731
    times = {}
    for name, fn in (("gks", block_gks), ("torch", block_torch)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        fn(x, p, args.heads)
        start.record()
        for _ in range(20):
            fn(x, p, args.heads)
        end.record()
        end.synchronize()
        times[name] = start.elapsed_time(end) / 20
    print(f"transformer block {args.tokens} tokens x {d} (bf16): relative error vs fp64 — "
          f"gks {err(ours):.2e}, torch {err(ref):.2e}; time gks {times['gks']:.3f} ms, torch {times['torch']:.3f} ms")
    ok = err(ours) <= 2 * err(ref) + 1e-3
    print("OK" if ok else "MISMATCH: gks's error is more than twice torch's")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
