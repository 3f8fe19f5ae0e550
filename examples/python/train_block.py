# SPDX-License-Identifier: Apache-2.0
"""Training through gks: two transformer blocks whose attention and RMSNorms are gks ops,
forward and backward, trained beside the same model in plain PyTorch, step for step.

    python examples/python/train_block.py [--steps 20] [--tokens 1024] [--dim 1024] [--heads 8]

Each block (pre-norm, Llama-style, without rotary embeddings):
    h = x + W_o · attention(rmsnorm(x) · W_qkv)       gks.rmsnorm, gks.flash_attention (causal)
    y = h + W_down · silu(rmsnorm(h) · W_up)           gks.rmsnorm
The gradients of gks.flash_attention are gks.flash_attention_bwd's, those of gks.rmsnorm
gks.rmsnorm_bwd's (torch autograd); the matmuls are torch's. Both models start from the same
bf16 weights and take the same AdamW steps on the same batches (a regression onto a fixed
random target); the script prints both losses each step and fails if they part by more than
--tolerance (relative). Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.nn.functional as F

import gks


def block(x, p, heads, ops):
    """One block; ops: (rmsnorm(x, w), attention(q, k, v)) of gks or of torch."""
    rmsnorm, attention = ops
    t, d = x.shape
    qkv = rmsnorm(x, p["norm1"]) @ p["w_qkv"]
    q, k, v = (qkv[:, i * d:(i + 1) * d].view(1, t, heads, d // heads).transpose(1, 2) for i in range(3))
    h = x + attention(q, k, v).transpose(1, 2).reshape(t, d) @ p["w_o"]
    return h + F.silu(rmsnorm(h, p["norm2"]) @ p["w_up"]) @ p["w_down"]


GKS_OPS = (lambda x, w: gks.rmsnorm(x, w, 1e-6), lambda q, k, v: gks.flash_attention(q, k, v, causal=True))
TORCH_OPS = (lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-6),
             lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))


def make_params(d: int, layers: int, gen: torch.Generator) -> list[dict[str, torch.Tensor]]:
    bf = dict(device="cuda", dtype=torch.bfloat16)

    def rand(*shape, scale):
        return (torch.randn(*shape, generator=gen, device="cuda") * scale).to(torch.bfloat16)

    return [{
        "norm1": torch.ones(d, **bf), "norm2": torch.ones(d, **bf),
        "w_qkv": rand(d, 3 * d, scale=d**-0.5), "w_o": rand(d, d, scale=d**-0.5),
        "w_up": rand(d, 4 * d, scale=d**-0.5), "w_down": rand(4 * d, d, scale=(4 * d) ** -0.5),
    } for _ in range(layers)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--tolerance", type=float, default=0.02, help="largest relative loss difference allowed")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("train_block: needs a CUDA GPU; none here", file=sys.stderr)
        return 2
    gen = torch.Generator(device="cuda").manual_seed(0)
    init = make_params(args.dim, args.layers, gen)
    models = {name: [{k: v.clone().requires_grad_() for k, v in layer.items()} for layer in init]
              for name in ("gks", "torch")}
    optims = {name: torch.optim.AdamW([t for layer in m for t in layer.values()], lr=1e-3)
              for name, m in models.items()}
    target = torch.randn(args.tokens, args.dim, generator=gen, device="cuda").to(torch.bfloat16)
    worst = 0.0
    for step in range(args.steps):
        x = torch.randn(args.tokens, args.dim, generator=gen, device="cuda").to(torch.bfloat16)
        losses = {}
        for name, ops in (("gks", GKS_OPS), ("torch", TORCH_OPS)):
            h = x
            for layer in models[name]:
                h = block(h, layer, args.heads, ops)
            loss = F.mse_loss(h.float(), target.float())
            optims[name].zero_grad(set_to_none=True)
            loss.backward()
            optims[name].step()
            losses[name] = loss.item()
        diff = abs(losses["gks"] - losses["torch"]) / abs(losses["torch"])
        worst = max(worst, diff)
        print(f"step {step:3d}  loss gks {losses['gks']:.6f}  torch {losses['torch']:.6f}  rel diff {diff:.2e}")
    ok = worst <= args.tolerance
    print(f"largest relative loss difference {worst:.2e} over {args.steps} steps: "
          + ("OK" if ok else f"MISMATCH (tolerance {args.tolerance})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
