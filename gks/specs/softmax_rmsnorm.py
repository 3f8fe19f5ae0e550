# SPDX-License-Identifier: Apache-2.0
"""softmax(rmsnorm(x) * weight) over the last dim, fused: two reductions in one kernel and
no round trip of the normalized row through memory (it stays fp32, never rounded)."""

from __future__ import annotations

from gks.registry import Backend, ELEM_BYTES, NativeConfigs, OpSpec, Peer, reference_peer, register
from gks.specs.rmsnorm import make_inputs as rmsnorm_inputs
from gks.specs.softmax import TEST_SHAPES


def make_inputs(shape, dtype, device, seed):
    # A spread-out weight makes the normalized logits span a few units, like real ones.
    return rmsnorm_inputs(shape, dtype, device, seed, weight_spread=0.5)


def _reference(x, weight, eps=1e-6, *, precise=False):
    from gks.reference import softmax_rmsnorm

    return softmax_rmsnorm(x, weight, eps, precise=precise)


def _torch_two_step():
    # Eager PyTorch as a user would write it: two kernels, the intermediate rounded to x's
    # dtype and written to memory in between.
    import torch
    import torch.nn.functional as F

    return lambda x, weight, eps: torch.softmax(F.rms_norm(x, (x.shape[-1],), weight, eps), -1)



SPEC = register(
    OpSpec(
        name="softmax_rmsnorm",
        summary="softmax(rmsnorm(x) * weight) over the last dim in one kernel",
        signature="softmax_rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=make_inputs,
        reference=_reference,
        # Against the fp64 result; as softmax's (the normalized logits are O(1), so their
        # fp32 rounding adds little).
        tolerance={"float32": (1e-12, 2e-5), "float16": (6e-8, 1e-3), "bfloat16": (1e-12, 8e-3)},
        # square and add (sum of squares), two multiplies (inv_rms, weight), then softmax's
        # 5 (max, subtract, exp, add, scale): 9 flops per element.
        flops=lambda s: 9.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=(
            Backend("cuda", "gks._torch_ops:softmax_rmsnorm", archs=("sm_80", "sm_90a")),
            Backend("triton", "gks.triton:softmax_rmsnorm", archs=("sm_80", "sm_90"), interpreted=True),
            Backend("pallas", "gks.pallas._bridge:softmax_rmsnorm", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Beyond softmax's: rows the cluster config splits over 2 and 4 CTAs (in 16-bit, the
        # last of the 4 holds only columns past the row's end).
        test_shapes=TEST_SHAPES + ((2, 8192), (3, 12288)),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm+torch.softmax", _torch_two_step), reference_peer("softmax_rmsnorm", compiled=True)),
        # SoftmaxRmsNormArgs::config indexes these (kSoftmaxRmsNormConfigs in
        # csrc/include/gks/norms.h).
        configs=NativeConfigs("softmax_rmsnorm"),
    )
)
