# SPDX-License-Identifier: Apache-2.0
"""The norms family: RMSNorm, and softmax(rmsnorm(x) * weight) fused (a norm whose output
feeds softmax's row kernel: its kernels are softmax's with the norm folded in).

rmsnorm: RMSNorm: y = x / sqrt(mean(x^2, last dim) + eps) * weight. Every backend sums the
squares in fp32, as torch's F.rms_norm does: a row is exact while sum(x^2) < 3.4e38 (float32's
largest value), and past it the sum is inf and the row gives 0 (NaN where x is inf): the fp32
formula's answer, tests/contract/test_non_finite.py holds both sides of the line. gks.rmsnorm
(torch autograd), gks.triton.rmsnorm (a torch.autograd.Function), gks.jax.rmsnorm and
gks.pallas.rmsnorm (jax.custom_vjp) are differentiable in x and weight through rmsnorm_bwd.

rmsnorm_bwd: rmsnorm's gradients from dy, with rstd = 1 / sqrt(mean(x^2) + eps) recomputed
from x (the forward keeps only x and weight): xhat = x * rstd, g = dy * weight,
dx = (g - xhat * mean(g * xhat)) * rstd and dweight = the sum over the rows of dy * xhat, fp32
sums, dx in x's dtype and dweight in weight's. dweight is deterministic in every backend (no
atomics): per-program partial sums over the rows, then a second reduction in a fixed order.

fused_add_rmsnorm: the residual add before a transformer block's norm and the norm in one pass:
residual_out = x + residual (added in fp32, rounded to x's dtype), y = rmsnorm(residual_out) *
weight from that rounded sum, so it equals the two steps run one after the other. Its in-place
form (FlashInfer's, what a decoder layer calls) writes y over x and the sum over residual.

layernorm: y = (x - mean) / sqrt(var + eps) * weight (+ bias) over the last dim, the mean and
the biased variance in fp32 (F.layer_norm's meaning); bias optional.

softmax_rmsnorm: softmax(rmsnorm(x) * weight) over the last dim, fused: two reductions in one kernel and
no round trip of the normalized row through memory (it stays fp32, never rounded).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import Backend, BadInput, ELEM_BYTES, OpSpec, Peer, reference_peer, register
from gks.specs.softmax import TEST_SHAPES as SOFTMAX_TEST_SHAPES, softmax

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch


# ---- the reference: the op's meaning in plain PyTorch (gks.reference.<op>). torch is
# imported where it is used, so the registry loads without it.

__all__ = ["rmsnorm", "rmsnorm_bwd", "fused_add_rmsnorm", "layernorm", "softmax_rmsnorm", "rmsnorm_quant",
           "fused_add_rmsnorm_quant"]


def rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = x / sqrt(mean(x^2, last dim) + eps) * weight."""
    import torch

    compute = torch.float64 if precise else torch.float32
    xc = x.to(compute)
    inv_rms = torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps)
    y = xc * inv_rms * weight.to(compute)
    return y if precise else y.to(x.dtype)


def rmsnorm_bwd(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight): the gradients of rmsnorm(x, weight, eps) given dy, the gradient of its
    output. xhat = x * rstd, g = dy * weight, dx = (g - xhat * mean(g * xhat)) * rstd,
    dweight = the sum of dy * xhat over every row (x [..., N] taken as rows). fp32 math, dx
    in x's dtype and dweight in weight's; float64 throughout when precise."""
    import torch

    compute = torch.float64 if precise else torch.float32
    xc, dyc = x.to(compute), dy.to(compute)
    rstd = torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps)
    xhat = xc * rstd
    g = dyc * weight.to(compute)
    dx = (g - xhat * (g * xhat).mean(dim=-1, keepdim=True)) * rstd
    n = x.shape[-1]
    terms = dyc * xhat
    dweight = terms.reshape(-1, n).sum(dim=0) if terms.numel() else terms.new_zeros((n,))
    return (dx, dweight) if precise else (dx.to(x.dtype), dweight.to(weight.dtype))


def fused_add_rmsnorm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, residual_out): residual_out = x + residual, added in fp32 and rounded to x's dtype
    (in every mode: it is the op's stored output), and y = rmsnorm(residual_out, weight, eps)
    of that rounded sum (fp32 math, or float64 when precise)."""
    import torch

    residual_out = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    return rmsnorm(residual_out, weight, eps, precise=precise), residual_out


def layernorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, eps: float = 1e-5, *,
    precise: bool = False,
) -> torch.Tensor:
    """y = (x - mean) / sqrt(var + eps) * weight (+ bias), over the last dim; var is the
    biased variance (as in F.layer_norm). fp32 math, or float64 when precise."""
    import torch

    compute = torch.float64 if precise else torch.float32
    xc = x.to(compute)
    centered = xc - xc.mean(dim=-1, keepdim=True)
    y = centered * torch.rsqrt(centered.square().mean(dim=-1, keepdim=True) + eps) * weight.to(compute)
    if bias is not None:
        y = y + bias.to(compute)
    return y if precise else y.to(x.dtype)


def softmax_rmsnorm(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, *, precise: bool = False
) -> torch.Tensor:
    """y = softmax(rmsnorm(x, weight, eps)) over the last dim.

    The normalized row is kept in the compute precision (fp32, or fp64 when precise): it is
    NOT rounded to x's dtype between the two steps, and only y is. That is what the fused
    kernels compute, and it differs (slightly, for fp16/bf16) from running the two ops one
    after the other, which rounds the intermediate.
    """
    import torch

    if precise:
        z = rmsnorm(x, weight, eps, precise=True)
    else:
        z = rmsnorm(x.to(torch.float32), weight.to(torch.float32), eps)
    y = softmax(z, precise=precise)
    return y if precise else y.to(x.dtype)


# Every norm: CUDA (its kernel shapes tunable), Triton and Pallas.
_BACKENDS = (
    Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
    Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
    Backend("pallas", archs=("sm_80", "sm_90"), interpreted=True),
)


def _rmsnorm_inputs(shape, dtype, device, seed, weight_spread=0.1):
    """x [M, N] ~ N(0, 1) and weight [N] ~ 1 + weight_spread * N(0, 1), in `dtype`."""
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    x = torch.randn((m, n), generator=gen, device=device, dtype=torch.float32).to(dt)
    weight = (1.0 + weight_spread * torch.randn((n,), generator=gen, device=device)).to(dt)
    return {"x": x, "weight": weight, "eps": 1e-6}


def _torch_rms_norm():
    import torch.nn.functional as F

    return lambda x, weight, eps: F.rms_norm(x, (x.shape[-1],), weight, eps)


def _quack_rmsnorm():
    from quack.rmsnorm import rmsnorm as quack_rmsnorm

    return lambda x, weight, eps: quack_rmsnorm(x, weight, eps=eps)


def _liger_rmsnorm():
    from liger_kernel.ops.rms_norm import LigerRMSNormFunction

    # "gemma" casting: everything in fp32, the output rounded once, as gks computes it.
    return lambda x, weight, eps: LigerRMSNormFunction.apply(x, weight, eps, 0.0, "gemma", False)


def _rmsnorm_bad_inputs(op: str, residual: bool = False, bias: bool = False, grad: bool = False
                        ) -> tuple[BadInput, ...]:
    """What the norms refuse alike: the weight's dtype, length, rank, stride and device, a
    strided last dim of x, an integer x, a negative or NaN eps, or one that float32 would
    flush to 0; with `residual`, fused_add_rmsnorm's too: a residual of another dtype or
    shape, or strided in its last dim; with `bias`, layernorm's: a bias of another dtype or
    length; with `grad`, rmsnorm_bwd's: a dy of another dtype or shape, or strided in its
    last dim."""

    def call(t, d, x=None, weight=None, eps=1e-6, res=None, b=None, dy=None):
        x = t.randn(4, 8, device=d) if x is None else x
        args = {"x": x}
        if grad:
            args = {"dy": t.randn(x.shape, device=d).to(x.dtype) if dy is None else dy, "x": x}
        if residual:
            args["residual"] = t.randn(x.shape, device=d).to(x.dtype) if res is None else res
        args["weight"] = t.ones(x.shape[-1], device=d) if weight is None else weight
        if bias:
            args["bias"] = t.zeros(args["weight"].shape, device=d).to(x.dtype) if b is None else b
        return {**args, "eps": eps}

    own = () if not bias else (
        BadInput("bias-dtype", lambda t, d: call(t, d, b=t.zeros(8, device=d).half()),
                 (TypeError, ValueError), "argument 'bias'"),
        BadInput("bias-length", lambda t, d: call(t, d, b=t.zeros(7, device=d)), ValueError,
                 "argument 'bias'"),
    )
    own += () if not grad else (
        BadInput("dy-dtype", lambda t, d: call(t, d, dy=t.randn(4, 8, device=d).half()), TypeError,
                 "argument 'dy' must have the dtype of 'x'"),
        BadInput("dy-shape", lambda t, d: call(t, d, dy=t.randn(4, 7, device=d)), ValueError,
                 "argument 'dy' must have the shape of 'x' [4, 8], got [4, 7]"),
        BadInput("dy-last-dim-strided", lambda t, d: call(t, d, dy=t.randn(8, 4, device=d).t()),
                 ValueError, "argument 'dy' must be contiguous in its last dim", jax=False),
    )
    own += () if not residual else (
        BadInput("residual-dtype", lambda t, d: call(t, d, res=t.randn(4, 8, device=d).half()),
                 (TypeError, ValueError), "argument 'residual'"),
        BadInput("residual-shape", lambda t, d: call(t, d, res=t.randn(4, 7, device=d)), ValueError,
                 "argument 'residual'"),
        BadInput("residual-last-dim-strided", lambda t, d: call(t, d, res=t.randn(8, 4, device=d).t()),
                 ValueError, "argument 'residual'", jax=False),
    )
    return own + (
        BadInput("weight-dtype", lambda t, d: call(t, d, weight=t.ones(8, device=d).half()),
                 (TypeError, ValueError), "argument 'weight'"),
        BadInput("weight-length", lambda t, d: call(t, d, weight=t.ones(7, device=d)), ValueError,
                 "argument 'weight'"),
        BadInput("weight-2d", lambda t, d: call(t, d, weight=t.ones(2, 8, device=d)), ValueError,
                 "argument 'weight'"),
        BadInput("x-last-dim-strided", lambda t, d: call(t, d, x=t.randn(8, 4, device=d).t(),
                                                         weight=t.ones(4, device=d),
                                                         res=t.randn(4, 8, device=d)),
                 ValueError, "argument 'x'", jax=False),
        BadInput("x-int", lambda t, d: call(t, d, x=t.ones(4, 8, device=d, dtype=t.int32)), TypeError,
                 "argument 'x'"),
        BadInput("eps-negative", lambda t, d: call(t, d, eps=-1.0), ValueError, "argument 'eps'"),
        BadInput("eps-nan", lambda t, d: call(t, d, eps=float("nan")), ValueError, "argument 'eps'"),
        BadInput("eps-underflows-float32", lambda t, d: call(t, d, eps=1e-50), ValueError,
                 "argument 'eps' must be 0 or of a magnitude float32 holds"),
        BadInput("weight-strided", lambda t, d: call(t, d, weight=t.ones(16, device=d)[::2]), ValueError,
                 "argument 'weight'", jax=False),
        BadInput("weight-on-cpu", lambda t, d: call(t, d, weight=t.ones(8)), ValueError,
                 "argument 'weight' must be on the device of 'x'", jax=False, gpu=True),
    )


RMSNORM = register(
    OpSpec(
        name="rmsnorm",
        family="norms",
        summary="RMSNorm over the last dim with a fused affine weight",
        signature="rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_rmsnorm_inputs,
        reference=rmsnorm,
        # Against the fp64 result; the bound is a few ulps of the output dtype.
        tolerance={"float32": (1e-5, 1e-5), "float16": (1e-3, 2e-3), "bfloat16": (8e-3, 1.6e-2)},
        # square, sum, scale by inv_rms, scale by weight: about 4 flops per element.
        flops=lambda s: 4.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=_BACKENDS,
        test_shapes=(
            (1, 1), (1, 4096), (3, 7), (5, 129), (2, 4097), (7, 1), (33, 1000),
            (4, 8192), (2, 32768), (1, 262144), (0, 64), (3, 0),
        ),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm", _torch_rms_norm), reference_peer("rmsnorm", compiled=True),
               Peer("QuACK", _quack_rmsnorm, package="quack-kernels"),
               Peer("Liger", _liger_rmsnorm, package="liger-kernel")),
        example_shape=(33, 1000),
        bad_inputs=_rmsnorm_bad_inputs("rmsnorm"),
        cuda_out=lambda cuda, i, o, **kw: cuda.rmsnorm_out(i["x"], i["weight"], o[0], i["eps"], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormRow<[^<>]*, false>",),
    )
)


def _rmsnorm_bwd_inputs(shape, dtype, device, seed):
    """rmsnorm's x and weight and dy ~ N(0, 1) of x's shape and dtype. x comes first: the
    tensor the others are checked against (as in every backend's checks)."""
    import torch

    inputs = _rmsnorm_inputs(shape, dtype, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    dy = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(inputs["x"].dtype)
    return {"x": inputs["x"], "dy": dy, "weight": inputs["weight"], "eps": inputs["eps"]}


def _rmsnorm_bwd_check(out, ref, dtype, inputs) -> None:
    """dx within the spec's tolerance of float64; dweight too, plus 2^-16 of its column's
    sum of |dy * xhat| (a sum over every row in fp32, in a backend's own order); NaN and
    +-inf where the reference has them."""
    import torch

    from gks.testing import assert_matches

    x = inputs["x"]
    what = f"rmsnorm_bwd/{dtype}/{tuple(x.shape)}"
    assert isinstance(out, tuple) and len(out) == 2, f"{what}: returned {type(out)}"
    (dx, dweight), (ref_dx, ref_dweight) = out, ref
    assert_matches(dx, ref_dx, dtype, RMSNORM_BWD.tolerance, f"{what}: dx")
    assert dweight.dtype == inputs["weight"].dtype and dweight.shape == ref_dweight.shape, (
        f"{what}: dweight {dweight.dtype} {tuple(dweight.shape)}")
    n = x.shape[-1]
    xc, dyc = x.cpu().double(), inputs["dy"].cpu().double()
    terms = (dyc * xc * torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + inputs["eps"])).abs()
    scale = terms.reshape(-1, n).sum(dim=0) if terms.numel() else terms.new_zeros((n,))
    atol, rtol = RMSNORM_BWD.tolerance[dtype]
    got, want = dweight.cpu().double(), ref_dweight.cpu().double()
    close = (got - want).abs() <= atol + rtol * want.abs() + 2.0**-16 * scale
    ok = (torch.isfinite(want) & close) | (got == want) | (got.isnan() & want.isnan())
    if not bool(ok.all()):
        i = int((~ok).nonzero()[0])
        raise AssertionError(f"{what}: dweight differs in {int((~ok).sum())} of {n} columns; first at {i}: "
                             f"{got[i].item()!r} != {want[i].item()!r} (column |sum| {scale[i].item():.3g})")


def _autograd_peer(compiled: bool):
    """torch's own backward of F.rms_norm, eager or as torch.compile makes it (the backward
    graph AOTAutograd compiles with the forward): the forward runs once per input set, on its
    first call, keeping its graph; every call then runs torch.autograd.grad of that y with
    the set's dy. Returns (dx, dweight)."""

    def make():
        import torch
        import torch.nn.functional as F

        def forward(x, weight, eps):
            return F.rms_norm(x, (x.shape[-1],), weight, eps)

        if compiled:
            torch.compiler.reset()  # a fresh cache each workload (see reference_peer)
            forward = torch.compile(forward, dynamic=False)
        graphs = {}

        def run(dy, x, weight, eps=1e-6):
            key = (id(x), id(weight), float(eps))
            entry = graphs.get(key)
            if entry is None or entry[0] is not x or entry[1] is not weight:
                leaves = (x.detach().requires_grad_(), weight.detach().requires_grad_())
                with torch.enable_grad():
                    y = forward(*leaves, eps)
                entry = graphs[key] = (x, weight, leaves, y)
            return torch.autograd.grad(entry[3], entry[2], dy, retain_graph=True)

        return run

    return make


RMSNORM_BWD = register(
    OpSpec(
        name="rmsnorm_bwd",
        family="norms",
        summary="RMSNorm's backward: dx and dweight from dy, rstd recomputed from x; dweight deterministic",
        signature=("rmsnorm_bwd(dy[..., N], x[..., N], weight[N], eps=1e-6) -> (dx[..., N] (x's dtype), "
                   "dweight[N] (weight's dtype))"),
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_rmsnorm_bwd_inputs,
        reference=rmsnorm_bwd,
        # dx against the fp64 result: O(1) values, a few ulps of the output dtype (the row's
        # two fp32 sums add little). dweight: see _rmsnorm_bwd_check.
        tolerance={"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        check=_rmsnorm_bwd_check,
        # the sums of x^2 and dy * w * x (5), xhat, dx (4) and dy * xhat added up (2): about 11
        # flops an element.
        flops=lambda s: 11.0 * s[0] * s[1],
        # read dy and x, write dx; the weight and dweight are N elements each.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (3.0 * s[0] * s[1] + 2.0 * s[1]),
        backends=_BACKENDS,
        # rmsnorm's, and rows enough that every block of the CUDA kernels' persistent grids
        # walks several (warp rows of 64, block rows of 1024) and the interpreted ports'
        # programs too (300 x 96).
        test_shapes=RMSNORM.test_shapes[:-2] + ((300, 96), (20000, 64), (4100, 1024)) + RMSNORM.test_shapes[-2:],
        bench_shapes=((32768, 4096), (16384, 8192), (65536, 1024)),
        peers=(Peer("F.rms_norm autograd", _autograd_peer(compiled=False)),
               Peer("torch.compile autograd", _autograd_peer(compiled=True))),
        example_shape=(33, 1000),
        bad_inputs=_rmsnorm_bad_inputs("rmsnorm_bwd", grad=True),
        cuda_out=lambda cuda, i, o, **kw: cuda.rmsnorm_bwd_out(i["dy"], i["x"], i["weight"], o[0], o[1], i["eps"],
                                                               **kw),
        outputs=("dx", "dweight"),
        in_place={"dx": "x"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormBwdRow<", r"rows::rmsnorm_bwd_dweight_kernel<"),
    )
)


def _fused_add_rmsnorm_inputs(shape, dtype, device, seed):
    """rmsnorm's inputs and a residual ~ N(0, 1) of x's shape and dtype."""
    import torch

    inputs = _rmsnorm_inputs(shape, dtype, device, seed)
    gen = torch.Generator(device=device).manual_seed(seed + 1)
    residual = torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(inputs["x"].dtype)
    return {"x": inputs["x"], "residual": residual, "weight": inputs["weight"], "eps": inputs["eps"]}


def _fused_add_rmsnorm_check(out, ref, dtype, inputs) -> None:
    """y within rmsnorm's tolerance of the float64 norm of the rounded sum; residual_out
    equal to the fp32 sum rounded to x's dtype, bit for bit (NaN where it is NaN)."""
    from gks.testing import assert_matches

    what = f"fused_add_rmsnorm/{dtype}/{tuple(inputs['x'].shape)}"
    assert isinstance(out, tuple) and len(out) == 2, f"{what}: returned {type(out)}"
    (y, residual_out), (ref_y, ref_residual) = out, ref
    assert_matches(y, ref_y, dtype, RMSNORM.tolerance, f"{what}: y")
    assert residual_out.dtype == ref_residual.dtype and residual_out.shape == ref_residual.shape, (
        f"{what}: residual_out {residual_out.dtype} {tuple(residual_out.shape)}")
    got, want = residual_out.cpu(), ref_residual.cpu()
    same = (got == want) | (got.isnan() & want.isnan())
    if not bool(same.all()):
        i = tuple(int(k) for k in (~same).nonzero()[0])
        raise AssertionError(f"{what}: residual_out differs in {int((~same).sum())} elements; first at "
                             f"{i}: {got[i].item()!r} != {want[i].item()!r}")


def _liger_fused_add_rmsnorm():
    from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

    # "gemma" casting (fp32 throughout, each output rounded once), as for rmsnorm's Liger peer.
    return lambda x, residual, weight, eps: LigerFusedAddRMSNormFunction.apply(
        x, residual, weight, eps, 0.0, "gemma", False)


def _torch_add_rms_norm():
    # Eager PyTorch as a user would write it: the add, then F.rms_norm of the sum.
    import torch.nn.functional as F

    def run(x, residual, weight, eps):
        r = x + residual
        return F.rms_norm(r, (r.shape[-1],), weight, eps), r

    return run


FUSED_ADD_RMSNORM = register(
    OpSpec(
        name="fused_add_rmsnorm",
        family="norms",
        summary="residual add and RMSNorm in one pass: the sum stored, its norm returned",
        signature=("fused_add_rmsnorm(x[..., N], residual[..., N], weight[N], eps=1e-6) -> "
                   "(y[..., N], residual_out[..., N]) (x's dtype; in place: y is x, residual_out is residual)"),
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_fused_add_rmsnorm_inputs,
        reference=fused_add_rmsnorm,
        tolerance=RMSNORM.tolerance,
        check=_fused_add_rmsnorm_check,
        # the add, then rmsnorm's 4 flops per element.
        flops=lambda s: 5.0 * s[0] * s[1],
        # read x and residual, write y and residual_out; the weight counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (4.0 * s[0] * s[1] + s[1]),
        backends=_BACKENDS,
        test_shapes=RMSNORM.test_shapes,
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("add+F.rms_norm", _torch_add_rms_norm), reference_peer("fused_add_rmsnorm", compiled=True),
               Peer("Liger", _liger_fused_add_rmsnorm, package="liger-kernel")),
        example_shape=(33, 1000),
        bad_inputs=_rmsnorm_bad_inputs("fused_add_rmsnorm", residual=True),
        cuda_out=lambda cuda, i, o, **kw: cuda.fused_add_rmsnorm_out(
            i["x"], i["residual"], i["weight"], o[0], o[1], i["eps"], **kw),
        outputs=("y", "residual_out"),
        in_place={"y": "x", "residual_out": "residual"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormRow<[^<>]*, true>",),
    )
)


def _layernorm_inputs(shape, dtype, device, seed):
    """x ~ 3 + N(0, 1) (a mean the variance must not cancel against), weight ~ 1 + 0.1 N(0,
    1) and bias ~ 0.1 N(0, 1), in `dtype`."""
    import torch

    m, n = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    dt = getattr(torch, dtype)
    x = (3.0 + torch.randn((m, n), generator=gen, device=device)).to(dt)
    weight = (1.0 + 0.1 * torch.randn((n,), generator=gen, device=device)).to(dt)
    bias = (0.1 * torch.randn((n,), generator=gen, device=device)).to(dt)
    return {"x": x, "weight": weight, "bias": bias, "eps": 1e-5}


def _liger_layernorm():
    from liger_kernel.ops.layer_norm import LigerLayerNormFunction

    return lambda x, weight, bias, eps: LigerLayerNormFunction.apply(x, weight, bias, eps)


def _torch_layer_norm():
    import torch.nn.functional as F

    return lambda x, weight, bias, eps: F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


LAYERNORM = register(
    OpSpec(
        name="layernorm",
        family="norms",
        summary="LayerNorm over the last dim (fp32 mean and variance), optional bias",
        signature="layernorm(x[..., N], weight[N], bias[N] | None = None, eps=1e-5) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_layernorm_inputs,
        reference=layernorm,
        # Against the fp64 result: the output is O(1) as rmsnorm's, its bound a few ulps.
        tolerance={"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)},
        # sum, subtract, square and add, scale twice, add the bias: about 7 flops an element.
        flops=lambda s: 7.0 * s[0] * s[1],
        # read x and write y once; the weight and bias are N elements each.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + 2.0 * s[1]),
        backends=_BACKENDS,
        test_shapes=RMSNORM.test_shapes,
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.layer_norm", _torch_layer_norm), reference_peer("layernorm", compiled=True),
               Peer("Liger", _liger_layernorm, package="liger-kernel")),
        example_shape=(33, 1000),
        bad_inputs=_rmsnorm_bad_inputs("layernorm", bias=True),
        cuda_out=lambda cuda, i, o, **kw: cuda.layernorm_out(i["x"], i["weight"], i["bias"], o[0], i["eps"], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::LayerNormRow<",),
    )
)


def _softmax_rmsnorm_inputs(shape, dtype, device, seed):
    # A spread-out weight makes the normalized logits span a few units, like real ones.
    return _rmsnorm_inputs(shape, dtype, device, seed, weight_spread=0.5)


def _torch_two_step():
    # Eager PyTorch as a user would write it: two kernels, the intermediate rounded to x's
    # dtype and written to memory in between.
    import torch
    import torch.nn.functional as F

    return lambda x, weight, eps: torch.softmax(F.rms_norm(x, (x.shape[-1],), weight, eps), -1)


SOFTMAX_RMSNORM = register(
    OpSpec(
        name="softmax_rmsnorm",
        family="norms",
        summary="softmax(rmsnorm(x) * weight) over the last dim in one kernel",
        signature="softmax_rmsnorm(x[..., N], weight[N], eps=1e-6) -> y[..., N] (x's dtype)",
        shape_names=("M", "N"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_softmax_rmsnorm_inputs,
        reference=softmax_rmsnorm,
        # Against the fp64 result; as softmax's (the normalized logits are O(1), so their
        # fp32 rounding adds little).
        tolerance={"float32": (1e-12, 2e-5), "float16": (6e-8, 1e-3), "bfloat16": (1e-12, 8e-3)},
        # square and add (sum of squares), two multiplies (inv_rms, weight), then softmax's
        # 5 (max, subtract, exp, add, scale): 9 flops per element.
        flops=lambda s: 9.0 * s[0] * s[1],
        # read x and write y once; the weight is N elements, counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (2.0 * s[0] * s[1] + s[1]),
        backends=_BACKENDS,
        # Beyond softmax's: rows the cluster config splits over 2 and 4 CTAs (in 16-bit, the
        # last of the 4 holds only columns past the row's end).
        test_shapes=SOFTMAX_TEST_SHAPES + ((2, 8192), (3, 12288)),
        bench_shapes=((32768, 4096), (8192, 32768), (65536, 1024)),
        peers=(Peer("F.rms_norm+torch.softmax", _torch_two_step), reference_peer("softmax_rmsnorm", compiled=True)),
        example_shape=(3, 1000),
        bad_inputs=_rmsnorm_bad_inputs("softmax_rmsnorm"),
        cuda_out=lambda cuda, i, o, **kw: cuda.softmax_rmsnorm_out(i["x"], i["weight"], o[0], i["eps"], **kw),
        outputs=("y",),
        in_place={"y": "x"},
        sass_kernels=(
            r"rows::\w+_kernel<gks::kernels::rows::SoftmaxRmsNormRow<",
            r"rows::softmax_rmsnorm_staged_kernel<",
        ),
    )
)


# ---- rmsnorm / fused_add_rmsnorm with a quantized output (issue 33 item 4) ----
#
# y = x * rsqrt(mean(x^2) + eps) * weight in fp32, never rounded to x's dtype, then quantized:
# quant_dtype int8 per token (quantize_int8's contract on y), or float8_e4m3fn per token or
# per 1 x 128 group (quantize_fp8's, the last dim a multiple of 128 for groups). The kernels'
# y differs from the fp32 formula's in its last bits (their rsqrt is approximate, their sums
# run in another order), so q and the scales are held to a bound, not to bits (see
# _norm_quant_check).


def norm_quant_check_args(x_shape, quant_dtype, granularity, op: str) -> tuple[int, ...]:
    """The checks every backend makes of the quantized output's options; returns the scale's
    shape."""
    import torch

    if quant_dtype not in (torch.int8, torch.float8_e4m3fn):
        raise TypeError(f"{op}: argument 'quant_dtype' must be torch.int8 or torch.float8_e4m3fn, got {quant_dtype}")
    if granularity not in ("token", "group"):
        raise ValueError(f"{op}: argument 'granularity' must be 'token' or 'group', got '{granularity}'")
    if granularity == "group" and quant_dtype == torch.int8:
        raise ValueError(f"{op}: argument 'granularity' must be 'token' for int8 output, got 'group'")
    if len(x_shape) < 1:
        raise ValueError(f"{op}: argument 'x' must have 1 to 8 dims, got 0")
    n = int(x_shape[-1])
    if granularity == "group" and n % 128 != 0:
        raise ValueError(f"{op}: argument 'x' must have a last dim that is a multiple of 128 for granularity "
                         f"'group', got {list(x_shape)}")
    return (*x_shape[:-1], 1 if granularity == "token" else n // 128)


def _quantize_y(y32: torch.Tensor, quant_dtype, granularity: str, scale_ue8m0: bool, precise: bool):
    import torch

    from gks.specs.quantize import quantize_fp8, quantize_int8

    if quant_dtype == torch.int8:
        return quantize_int8(y32, precise=precise)
    return quantize_fp8(y32, granularity, 128, scale_ue8m0, precise=precise)


def rmsnorm_quant(
    x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6, quant_dtype: torch.dtype | None = None,
    granularity: str = "token", scale_ue8m0: bool = False, *, precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(q, scale): y = rmsnorm(x, weight, eps) in fp32 (float64 rounded once to fp32 when
    precise), quantized per token (int8 or float8_e4m3fn, scale [..., 1]) or per 1 x 128
    group (float8_e4m3fn, scale [..., N / 128]). quant_dtype: float8_e4m3fn when None."""
    import torch

    quant_dtype = torch.float8_e4m3fn if quant_dtype is None else quant_dtype
    norm_quant_check_args(x.shape, quant_dtype, granularity, "gks.reference.rmsnorm_quant")
    y = rmsnorm(x, weight, eps, precise=True).float() if precise else _rmsnorm_fp32(x, weight, eps)
    return _quantize_y(y, quant_dtype, granularity, scale_ue8m0, precise)


def _rmsnorm_fp32(x, weight, eps):
    import torch

    xc = x.to(torch.float32)
    return xc * torch.rsqrt(xc.square().mean(dim=-1, keepdim=True) + eps) * weight.to(torch.float32)


def fused_add_rmsnorm_quant(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
    quant_dtype: torch.dtype | None = None, granularity: str = "token", scale_ue8m0: bool = False, *,
    precise: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, scale, residual_out): residual_out = x + residual (fp32 add, rounded to x's dtype),
    then rmsnorm_quant of it."""
    import torch

    residual_out = (x.to(torch.float32) + residual.to(torch.float32)).to(x.dtype)
    q, scale = rmsnorm_quant(residual_out, weight, eps, quant_dtype, granularity, scale_ue8m0, precise=precise)
    return q, scale, residual_out


# Shapes (M, N, format): format 0 int8 per token, 1 e4m3 per token, 2 e4m3 per 1 x 128 group,
# 3 e4m3 per group with UE8M0 scales. Groups need N % 128 == 0.
NORM_QUANT_FORMATS = ((0, "token", False), (1, "token", False), (1, "group", False), (1, "group", True))
_NQ_TOKEN = ((1, 1), (3, 7), (5, 129), (2, 4097), (33, 1000), (4, 8192), (0, 64), (3, 0))
_NQ_GROUP = ((1, 128), (5, 384), (2, 4096), (33, 1024), (3, 7168), (0, 128), (3, 0))
NORM_QUANT_TEST_SHAPES = (tuple((m, n, f) for f in (0, 1) for m, n in _NQ_TOKEN)
                          + tuple((m, n, f) for f in (2, 3) for m, n in _NQ_GROUP))
NORM_QUANT_BENCH_SHAPES = tuple((m, n, f) for f in (0, 1, 2) for m in (1, 16, 256, 4096, 16384) for n in (4096, 7168))


def _norm_quant_options(fmt: int) -> dict:
    import torch

    dt, granularity, ue8m0 = NORM_QUANT_FORMATS[fmt]
    return {"quant_dtype": (torch.int8, torch.float8_e4m3fn)[dt], "granularity": granularity, "scale_ue8m0": ue8m0}


def _rmsnorm_quant_inputs(shape, dtype, device, seed):
    m, n, fmt = shape
    return {**_rmsnorm_inputs((m, n), dtype, device, seed), **_norm_quant_options(fmt)}


def _fused_add_rmsnorm_quant_inputs(shape, dtype, device, seed):
    m, n, fmt = shape
    return {**_fused_add_rmsnorm_inputs((m, n), dtype, device, seed), **_norm_quant_options(fmt)}


def _norm_quant_check(out, ref, dtype, inputs) -> None:
    """The scales within 2^-18 (relative) of the reference's (quantizing float64 y rounded to
    fp32), NaN where it has NaN; q NaN (fp8) where the reference's is; and the dequantized
    q * scale within half a step of float64 y, with 2^-10 of it to spare: for int8
    scale * (0.5 + 2^-10); for e4m3 2^-4 |y| (1 + 2^-10) + 2^-10 scale. With the fused add,
    residual_out equal to the fp32 sum rounded to x's dtype."""
    import torch

    from gks.specs.quantize import check_quantized_close

    x, quant_dtype, granularity = inputs["x"], inputs["quant_dtype"], inputs["granularity"]
    fused = "residual" in inputs
    what = f"{'fused_add_' if fused else ''}rmsnorm_quant/{quant_dtype}/{granularity}/{dtype}/{tuple(x.shape)}"
    assert isinstance(out, tuple) and len(out) == len(ref), f"{what}: returned {type(out)}"
    q, scale = out[0], out[1]
    ref_q, ref_scale = ref[0], ref[1]
    assert q.dtype == quant_dtype and q.shape == x.shape, f"{what}: q {q.dtype} {tuple(q.shape)}"
    if fused:
        got, want = out[2].cpu(), ref[2].cpu()
        assert bool(((got == want) | (got.isnan() & want.isnan())).all()), f"{what}: residual_out differs"
        src = want
    else:
        src = x.cpu()
    y = rmsnorm(src, inputs["weight"].cpu(), inputs["eps"], precise=True)
    check_quantized_close(what, q, scale, ref_q, ref_scale, y, quant_dtype,
                          "token" if quant_dtype == torch.int8 else granularity)


def _norm_quant_bad_inputs(op: str, residual: bool):
    def call(t, d, **change):
        args = {"x": t.ones(4, 256, device=d), "weight": t.ones(256, device=d), "eps": 1e-6,
                "quant_dtype": t.float8_e4m3fn, "granularity": "group"}
        if residual:
            args["residual"] = t.ones(4, 256, device=d)
        args.update(change)
        if residual:  # the call's order: x, residual, weight, ...
            args = {"x": args.pop("x"), "residual": args.pop("residual"), **args}
        return args

    return (
        BadInput("x-int", lambda t, d: call(t, d, x=t.ones(4, 256, device=d, dtype=t.int32)), TypeError,
                 "argument 'x' must be float32, float16 or bfloat16, got"),
        BadInput("weight-length", lambda t, d: call(t, d, weight=t.ones(128, device=d)), ValueError,
                 "argument 'weight'"),
        BadInput("quant-dtype-float16", lambda t, d: call(t, d, quant_dtype=t.float16), TypeError,
                 "argument 'quant_dtype' must be torch.int8 or torch.float8_e4m3fn"),
        BadInput("granularity-block", lambda t, d: call(t, d, granularity="block"), ValueError,
                 "argument 'granularity' must be 'token' or 'group'"),
        BadInput("int8-group", lambda t, d: call(t, d, quant_dtype=t.int8), ValueError,
                 "argument 'granularity' must be 'token' for int8 output"),
        BadInput("group-width", lambda t, d: call(t, d, x=t.ones(4, 200, device=d), weight=t.ones(200, device=d),
                                                  **({"residual": t.ones(4, 200, device=d)} if residual else {})),
                 ValueError, "argument 'x' must have a last dim that is a multiple of 128 for granularity 'group'"),
        BadInput("eps-negative", lambda t, d: call(t, d, eps=-1.0), ValueError, "argument 'eps'"),
    )


_NORM_QUANT_BACKENDS = (
    Backend("cuda", archs=("sm_80", "sm_90a")),
    Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
)


def _norm_quant_out_bytes(s) -> float:
    m, n, fmt = s
    return 1.0 * m * n + 4.0 * m * (1 if fmt < 2 else max(n // 128, 1))


RMSNORM_QUANT = register(
    OpSpec(
        name="rmsnorm_quant",
        family="norms",
        summary="RMSNorm with an int8 or fp8 e4m3 output and its scales (per token or 1x128 group) in one pass",
        signature=("rmsnorm_quant(x[..., N], weight[N], eps=1e-6, quant_dtype=float8_e4m3fn, granularity='token', "
                   "scale_ue8m0=False) -> (q[..., N], scale[..., 1 | N/128] fp32)"),
        shape_names=("M", "N", "format"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_rmsnorm_quant_inputs,
        reference=rmsnorm_quant,
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},  # see the check
        check=_norm_quant_check,
        flops=lambda s: 6.0 * s[0] * s[1],
        # read x once, write q (a byte an element) and the scales; the weight counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (1.0 * s[0] * s[1] + s[1]) + _norm_quant_out_bytes(s),
        backends=_NORM_QUANT_BACKENDS,
        test_shapes=NORM_QUANT_TEST_SHAPES,
        bench_shapes=NORM_QUANT_BENCH_SHAPES,
        peers=(reference_peer("rmsnorm_quant", compiled=False), reference_peer("rmsnorm_quant", compiled=True)),
        example_shape=(33, 1024, 2),
        bucket_exact=("format",),
        bad_inputs=_norm_quant_bad_inputs("rmsnorm_quant", residual=False),
        cuda_out=lambda cuda, i, o: cuda.rmsnorm_quant_out(i["x"], i["weight"], o[0], o[1], i["eps"],
                                                           i["granularity"], i["scale_ue8m0"]),
        outputs=("q", "scale"),
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormQuantRow<[^<>]*, false,",),
    )
)

FUSED_ADD_RMSNORM_QUANT = register(
    OpSpec(
        name="fused_add_rmsnorm_quant",
        family="norms",
        summary="residual add and RMSNorm with an int8 or fp8 e4m3 output and its scales in one pass",
        signature=("fused_add_rmsnorm_quant(x[..., N], residual[..., N], weight[N], eps=1e-6, "
                   "quant_dtype=float8_e4m3fn, granularity='token', scale_ue8m0=False) -> "
                   "(q[..., N], scale[..., 1 | N/128] fp32, residual_out[..., N] (x's dtype))"),
        shape_names=("M", "N", "format"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_fused_add_rmsnorm_quant_inputs,
        reference=fused_add_rmsnorm_quant,
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},  # see the check
        check=_norm_quant_check,
        flops=lambda s: 7.0 * s[0] * s[1],
        # read x and residual, write residual_out, q and the scales; the weight counted once.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * (3.0 * s[0] * s[1] + s[1]) + _norm_quant_out_bytes(s),
        backends=_NORM_QUANT_BACKENDS,
        test_shapes=NORM_QUANT_TEST_SHAPES,
        bench_shapes=NORM_QUANT_BENCH_SHAPES,
        peers=(reference_peer("fused_add_rmsnorm_quant", compiled=False),
               reference_peer("fused_add_rmsnorm_quant", compiled=True)),
        example_shape=(33, 1024, 2),
        bucket_exact=("format",),
        bad_inputs=_norm_quant_bad_inputs("fused_add_rmsnorm_quant", residual=True),
        cuda_out=lambda cuda, i, o: cuda.fused_add_rmsnorm_quant_out(
            i["x"], i["residual"], i["weight"], o[0], o[1], o[2], i["eps"], i["granularity"], i["scale_ue8m0"]),
        outputs=("q", "scale", "residual_out"),
        in_place={"residual_out": "residual"},
        sass_kernels=(r"rows::\w+_kernel<gks::kernels::rows::RmsNormQuantRow<[^<>]*, true,",),
    )
)
