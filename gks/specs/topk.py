# SPDX-License-Identifier: Apache-2.0
"""The topk family: selection of the largest values of each row.

top_k: the k largest values of each row of x [..., N] (the last dim) and their int64
indices, k from 0 to min(N, 2048). The order is torch.topk's (largest=True): every NaN is
larger than +inf and NaNs equal one another; -0.0 equals 0.0 (torch compares them equal),
so the two tie and, as any tie, go by index. Ties are broken by the lower index: of equal
values, the lower indices are taken, and listed first. sorted=True lists the k in
descending order (ties by ascending index); sorted=False lists those above the k-th largest
value in index order, then those equal to it in index order (torch.topk's unsorted order is
unspecified; this one is the same in every gks backend). Values are x's own elements, bit
for bit (a NaN's payload, a zero's sign). Top-k is a selection: the results are exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gks.registry import ELEM_BYTES, Backend, BadInput, OpSpec, Peer, register

if TYPE_CHECKING:  # annotations only: the module loads without torch
    import torch

__all__ = ["top_k"]

MAX_K = 2048


def top_k(x: torch.Tensor, k: int, sorted: bool = True, *, precise: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """(values [..., k] in x's dtype, indices [..., k] int64): a stable descending sort of
    each row (NaN first, -0.0 == 0.0, ties in index order), its first k. Exact, so
    `precise` changes nothing; `sorted` neither (the unsorted order is checked as a set)."""
    import torch

    del precise, sorted
    # A stable sort keeps equal values in index order; torch.sort on the CPU puts NaN (of
    # either sign) above +inf in a descending sort and compares -0.0 equal to 0.0. Its CUDA
    # path (a radix sort) promises neither for those special rows, so the order is found
    # on the CPU wherever x lives (a meta x, shapes only, sorts where it is).
    host = x.float() if x.is_meta else x.float().cpu()
    order = torch.sort(host, dim=-1, descending=True, stable=True).indices[..., :k].to(x.device)
    # Gathered as integers: a float gather may canonicalize a NaN's bits (bf16 on the CPU).
    return _bits(x).gather(-1, order).view(x.dtype), order


def _inputs(shape, dtype, device, seed):
    """x [M, N] ~ N(0, 1) in dtype (16-bit rows of thousands hold many ties); k = K; sorted."""
    import torch

    rows, cols, k = shape
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn((rows, cols), generator=gen, device=device).to(getattr(torch, dtype))
    return {"x": x, "k": k, "sorted": True}


def _bits(t):
    """t's elements as integers of their width, bit for bit (any strides)."""
    import torch

    return t.view({4: torch.int32, 2: torch.int16}[t.element_size()])


def check_top_k(out, ref, x, k: int, sorted: bool, what: str) -> None:
    """out (values, indices) of top_k(x, k, sorted) against the reference's: the same
    indices (as a set per row when unsorted, in order when sorted) and each value x's
    element at its index, bit for bit."""
    import torch

    assert isinstance(out, tuple) and len(out) == 2, f"{what}: returned {type(out)}"
    values, indices = out
    shape = (*x.shape[:-1], k)
    assert tuple(values.shape) == shape and tuple(indices.shape) == shape, \
        f"{what}: shapes {tuple(values.shape)}, {tuple(indices.shape)}, expected {shape}"
    assert values.dtype == x.dtype and indices.dtype == torch.int64, f"{what}: dtypes {values.dtype}, {indices.dtype}"
    ref_indices = ref[1].to(indices.device)
    got = indices if sorted else indices.sort(dim=-1).values
    want = ref_indices if sorted else ref_indices.sort(dim=-1).values
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: indices differ from the reference's at {bad} (of {tuple(got.shape)})")
    if k == 0 or values.numel() == 0:
        return
    assert int(indices.min()) >= 0 and int(indices.max()) < x.shape[-1], f"{what}: an index out of range"
    picked = _bits(x).gather(-1, indices)
    if not torch.equal(_bits(values), picked):
        bad = (_bits(values) != picked).nonzero()[:4].tolist()
        raise AssertionError(f"{what}: values are not x's elements at the indices, at {bad}")


def _check(out, ref, dtype, inputs) -> None:
    x = inputs["x"]
    check_top_k(out, ref, x, inputs["k"], inputs.get("sorted", True), f"top_k/{dtype}/{tuple(x.shape)}/k={inputs['k']}")


def _torch_topk():
    import torch

    return lambda x, k, sorted=True: torch.topk(x, k, dim=-1, largest=True, sorted=sorted)


def _bad_inputs() -> tuple[BadInput, ...]:
    k_msg = f"argument 'k' must be from 0 to min(N, {MAX_K})"

    def call(t, d, *, x=None, k=4, sorted=True):
        return {"x": t.randn(4, 16, device=d) if x is None else x, "k": k, "sorted": sorted}

    return (
        BadInput("k-past-n", lambda t, d: call(t, d, k=17), ValueError,
                 f"{k_msg} = 16 (N = 16, x's last dim), got 17"),
        BadInput("k-negative", lambda t, d: call(t, d, k=-1), ValueError, f"{k_msg} = 16 (N = 16, x's last dim), got -1"),
        BadInput("k-past-2048", lambda t, d: call(t, d, x=t.randn(2, 4096, device=d), k=2049), ValueError,
                 f"{k_msg} = 2048 (N = 4096, x's last dim), got 2049"),
        BadInput("k-of-an-empty-row", lambda t, d: call(t, d, x=t.randn(3, 0, device=d), k=1), ValueError,
                 f"{k_msg} = 0 (N = 0, x's last dim), got 1"),
        BadInput("x-int32", lambda t, d: call(t, d, x=t.ones(4, 16, dtype=t.int32, device=d)), TypeError,
                 "argument 'x' must be float32, float16 or bfloat16"),
        BadInput("x-float64", lambda t, d: call(t, d, x=t.ones(4, 16, dtype=t.float64, device=d)), TypeError,
                 "argument 'x' must be float32, float16 or bfloat16", jax=False),
        BadInput("x-scalar", lambda t, d: call(t, d, x=t.ones((), device=d), k=0), ValueError,
                 "argument 'x' must have 1 to 8 dims, got 0"),
        BadInput("x-last-dim-strided", lambda t, d: call(t, d, x=t.randn(16, 4, device=d).t()), ValueError,
                 "argument 'x' must be contiguous in its last dim (stride 1), got stride 4", jax=False),
    )


TOP_K = register(
    OpSpec(
        name="top_k",
        family="topk",
        summary="the k largest values of each row and their int64 indices, torch.topk's order, ties by lower index",
        signature="top_k(x[..., N], k, sorted=True) -> (values[..., k] (x's dtype), indices[..., k] (int64))",
        shape_names=("M", "N", "K"),
        dtypes=("float32", "float16", "bfloat16"),
        make_inputs=_inputs,
        reference=top_k,
        tolerance={"float32": (0.0, 0.0), "float16": (0.0, 0.0), "bfloat16": (0.0, 0.0)},
        check=_check,
        # No arithmetic: one comparison an element counted, for the roofline's sake.
        flops=lambda s: float(s[0] * s[1]),
        # read x once; write the values and the int64 indices.
        bytes_moved=lambda s, dt: ELEM_BYTES[dt] * float(s[0] * s[1]) + (ELEM_BYTES[dt] + 8.0) * s[0] * s[2],
        backends=(
            Backend("cuda", archs=("sm_80", "sm_90a"), tunable=True),
            Backend("triton", archs=("sm_80", "sm_90"), interpreted=True),
        ),
        # Odd widths (1, 7, 129, 4097, 151936), k = N, k = 0, k past 256 and at 2048, no rows;
        # the interpreter takes those of at most 2^18 elements (M * N * K).
        test_shapes=((1, 1, 1), (3, 7, 7), (4, 129, 5), (2, 4097, 16), (6, 1000, 0), (0, 16, 4), (2, 300, 257),
                     (1, 151936, 1), (3, 4097, 2048), (2, 151936, 50), (5, 131072, 1024), (2, 262144, 2048)),
        bench_shapes=((64, 131072, 50), (64, 131072, 1024), (64, 131072, 2048), (4096, 256, 16), (4096, 1024, 64),
                      (4096, 8192, 50), (256, 151936, 50)),
        peers=(Peer("torch.topk", _torch_topk),),
        example_shape=(4, 129, 5),
        bad_inputs=_bad_inputs(),
        cuda_out=lambda cuda, i, o, **kw: cuda.top_k_out(i["x"], o[0], o[1], i["k"], i.get("sorted", True), **kw),
        outputs=("values", "indices"),
        sass_kernels=(r"rows::topk_kernel<",),
        bucket_exact=("K",),
    )
)
