# SPDX-License-Identifier: Apache-2.0
# The script behind this run's figures (kept as run): the CUDA attention kernels against a
# float64 reference on the GPU, every config forced, then timings of issue 29's shapes.
import math
import sys
import time

import torch

from gks import cuda

torch.manual_seed(0)
dev = "cuda"
NAMES = {0: "mma.sync", 1: "wgmma", 2: "wgmma.ws"}


def ref(q, k, v, causal, window, softcap, scale):
    B, Hq, Sq, D = q.shape
    Hkv, Sk = k.shape[1], k.shape[2]
    g = Hq // Hkv
    qd, kd, vd = q.double(), k.double().repeat_interleave(g, 1), v.double().repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    i = torch.arange(Sq, device=q.device)[:, None]
    j = torch.arange(Sk, device=q.device)[None, :]
    left, right = window
    if causal:
        right = 0
    ok = torch.ones(Sq, Sk, dtype=torch.bool, device=q.device)
    if right >= 0:
        ok &= j <= i + Sk - Sq + right
    if left >= 0:
        ok &= j >= i + Sk - Sq - left
    s = s.masked_fill(~ok, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - lse[..., None])
    p = torch.nan_to_num(p, nan=0.0)
    o = p @ vd
    return o, lse


def run(q, k, v, causal, window, softcap, config):
    o = torch.full_like(q, float("nan"))
    lse = torch.full(q.shape[:-1], float("nan"), device=q.device, dtype=torch.float32)
    cuda.flash_attention_fwd_out(q, k, v, o, lse, causal, None, window, softcap, config)
    path = cuda.flash_attention_fwd_path(q, k, v, o, lse, causal, None, window, softcap, config)
    return o, lse, path


cases = []
for D in (64, 96, 128, 256):
    for (B, Hq, Hkv, Sq, Sk) in ((1, 2, 1, 1, 1), (2, 4, 2, 300, 300), (1, 2, 2, 77, 1000),
                                 (1, 4, 1, 513, 129), (1, 1, 1, 128, 256), (1, 2, 1, 1, 700)):
        for causal, window, softcap in ((False, (-1, -1), 0.0), (True, (-1, -1), 0.0),
                                        (False, (40, 7), 0.0), (True, (100, -1), 0.0),
                                        (False, (-1, 3), 0.0), (False, (-1, -1), 2.0)):
            cases.append((D, B, Hq, Hkv, Sq, Sk, causal, window, softcap))
fails = 0
t0 = time.time()
for dt in (torch.bfloat16, torch.float16):
    last_d = None
    for (D, B, Hq, Hkv, Sq, Sk, causal, window, softcap) in cases:
        if D != last_d:
            print(f"  {dt} D{D} ... ({fails} failures so far, {time.time() - t0:.0f} s)", flush=True)
            last_d = D
        q = torch.randn(B, Hq, Sq, D, device=dev, dtype=dt)
        k = torch.randn(B, Hkv, Sk, D, device=dev, dtype=dt)
        v = torch.randn(B, Hkv, Sk, D, device=dev, dtype=dt)
        # also a [B, S, H, D] view for the ws path
        ro, rl = ref(q, k, v, causal, window, softcap * 1.0, 1 / math.sqrt(D))
        for config in (0, 1, 2):
            o, lse, path = run(q, k, v, causal, window, softcap, config)
            torch.cuda.synchronize()
            fin = torch.isfinite(rl)
            eo = (o.double() - ro).abs().max().item() if o.numel() else 0.0
            el = (lse.double()[fin] - rl[fin]).abs().max().item() if fin.any() else 0.0
            inf_ok = bool((lse[~fin] == float("-inf")).all()) and bool((o.double()[~fin] == 0).all())
            tol = 2e-2 if dt == torch.bfloat16 else 4e-3
            bad = not (eo <= tol and el <= 1e-3 and inf_ok and not torch.isnan(o).any())
            if bad:
                fails += 1
                print(f"FAIL {dt} D{D} B{B} Hq{Hq} Hkv{Hkv} Sq{Sq} Sk{Sk} c{int(causal)} w{window} cap{softcap} "
                      f"cfg {NAMES[config]} path {path}: err_o {eo:.3g} err_lse {el:.3g} inf_ok {inf_ok}", flush=True)
print(f"correctness: {len(cases) * 6} runs, {fails} failures, {time.time() - t0:.0f} s", flush=True)

# a [B, S, H, D] transposed view through the ws path
q = torch.randn(2, 333, 8, 128, device=dev, dtype=torch.bfloat16).transpose(1, 2)
k = torch.randn(2, 500, 2, 128, device=dev, dtype=torch.bfloat16).transpose(1, 2)
v = torch.randn(2, 500, 2, 128, device=dev, dtype=torch.bfloat16).transpose(1, 2)
ro, rl = ref(q, k, v, True, (-1, -1), 0.0, 1 / math.sqrt(128))
o, lse, path = run(q, k, v, True, (-1, -1), 0.0, -1)
print("strided view", path, (o.double() - ro).abs().max().item(), (lse.double() - rl).abs().max().item(), flush=True)

if "--bench" not in sys.argv:
    sys.exit(1 if fails else 0)

def bench(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    st, en = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        st.record(); fn(); en.record(); torch.cuda.synchronize(); ts.append(st.elapsed_time(en))
    ts.sort()
    return ts[len(ts) // 2]

try:
    from flash_attn.cute import flash_attn_func as fa4
except Exception as e:  # noqa: BLE001
    print("no FA4:", e)
    fa4 = None
shapes = [(4, 16, 16, 8192, 8192, 128, True), (1, 32, 32, 16384, 16384, 128, False),
          (2, 32, 8, 8192, 8192, 128, True), (2, 16, 16, 8192, 8192, 64, False),
          (2, 8, 8, 8192, 8192, 256, True), (8, 16, 16, 4096, 4096, 128, False),
          (16, 16, 16, 1024, 1024, 128, True)]
for (B, Hq, Hkv, Sq, Sk, D, causal) in shapes:
    q = torch.randn(B, Hq, Sq, D, device=dev, dtype=torch.bfloat16)
    k = torch.randn(B, Hkv, Sk, D, device=dev, dtype=torch.bfloat16)
    v = torch.randn(B, Hkv, Sk, D, device=dev, dtype=torch.bfloat16)
    o = torch.empty_like(q)
    lse = torch.empty(q.shape[:-1], device=dev, dtype=torch.float32)
    flops = 4 * B * Hq * Sq * Sk * D * (0.5 if causal else 1.0)
    row = f"B{B} Hq{Hq} Hkv{Hkv} S{Sq} D{D} c{int(causal)}:"
    for config in (0, 1, 2):
        ms = bench(lambda: cuda.flash_attention_fwd_out(q, k, v, o, lse, causal, None, (-1, -1), 0.0, config))
        row += f" {NAMES[config]} {ms:.3f} ms ({flops / ms / 1e9:.0f} TF)"
    qt, kt, vt = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    ms = bench(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True))
    row += f" | sdpa {ms:.3f}"
    if fa4 is not None:
        try:
            ms = bench(lambda: fa4(qt, kt, vt, causal=causal))
            row += f" | FA4 {ms:.3f} ({flops / ms / 1e9:.0f} TF)"
        except Exception as e:  # noqa: BLE001
            row += f" | FA4 failed {type(e).__name__}: {str(e)[:80]}"
    print(row, flush=True)
sys.exit(1 if fails else 0)
