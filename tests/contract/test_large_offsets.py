# SPDX-License-Identifier: Apache-2.0
"""Offsets past 2^31 elements (issue 34, class 1), on the GPU (each case takes a few GB):

- every backend of every row op on an input of more than 2^31 elements, the rows on both
  sides of element 2^31 checked against the float64 reference (an op with an output summed
  over the rows checks it in its own tests);
- the CUDA and Triton row ops on views whose row stride is 2^31 + 64 elements;
- the CUDA and Triton attention forwards on K/V views whose sequence stride is 2^25 + 64
  elements (a KV-cache view: one tile of 64 keys then spans more than 2^31 elements), of
  head dims 64 and DeepSeek's 192 / 128;
- the attention forwards with K/V of more than 2^31 elements, and of D = 256 below it.

A kernel that computes such an offset in 32 bits reads the wrong rows (or faults), and the
comparison fails. The cases run one after another on one pytest-xdist worker (run the
suite with --dist loadgroup), so that their memory does not add up across workers."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import HAS_GPU, seed_for
from gks import registry

pytestmark = [pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU with tens of GB"),
              pytest.mark.xdist_group("large-memory")]

ROW_SPECS = [s for s in registry.ops() if s.shape_names == ("M", "N")]


def _outputs_per_row(spec) -> bool:
    """Whether each output of the op has a row for each row of its input, so that the rows
    picked from the inputs give the same rows of the outputs (rmsnorm_bwd's dweight sums
    over every row: tests/norms/test_rmsnorm_bwd.py checks it past element 2^31)."""
    inputs = spec.make_inputs(spec.example_shape, spec.dtypes[0], "cpu", 0)
    out = spec.reference(**inputs)
    outs = out if isinstance(out, tuple) else (out,)
    return all(o.dim() >= 1 and o.shape[0] == spec.example_shape[0] for o in outs)
N = 4096
M = 2**31 // N + 3  # rows M - 3 .. M - 1 start at or past element 2^31
PICK = [0, 1, 2**31 // N - 1, 2**31 // N, M - 1]
BIG_STRIDE = 2**31 + 64


def _dtype(spec):
    return "float16" if "float16" in spec.dtypes else spec.dtypes[0]


def _rows(value, rows):
    """The picked rows of every [M, ...] tensor in value (a dict, tuple or tensor)."""
    index = torch.tensor(rows, device="cuda")
    if isinstance(value, dict):
        return {k: _rows(v, rows) for k, v in value.items()}
    if isinstance(value, tuple):
        return tuple(_rows(v, rows) for v in value)
    if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == M:
        return value.index_select(0, index)
    return value


def _free():
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("spec,backend", [pytest.param(s, b, id=f"{s.name}-{b.name}")
                                          for s in ROW_SPECS if _outputs_per_row(s) for b in s.backends])
def test_rows_past_element_2_31(spec, backend):
    dtype = _dtype(spec)
    inputs = spec.make_inputs((M, N), dtype, "cuda", seed_for(spec.name, "large"))
    if backend.name == "pallas" and spec.family == "quantize":
        # JAX's lowering would index the int8 array with 32-bit offsets: refused, saying so.
        with pytest.raises(ValueError, match="32-bit offsets that wrap past 2\\^31"):
            backend.load()(**inputs)
        return
    out = backend.load()(**inputs)
    torch.cuda.synchronize()
    picked = _rows(inputs, PICK)
    check_output(spec, _rows(out, PICK), picked, dtype, f"{spec.name} {backend.name} rows {PICK}")
    del inputs, out
    _free()


def _spread(t: torch.Tensor) -> torch.Tensor:
    """t [2, N] as a view whose rows are BIG_STRIDE elements apart."""
    buf = torch.empty(BIG_STRIDE + t.shape[1], dtype=t.dtype, device="cuda")
    view = buf.as_strided(t.shape, (BIG_STRIDE, 1))
    view.copy_(t)
    return view


@pytest.mark.parametrize("spec,backend", [pytest.param(s, b, id=f"{s.name}-{b.name}")
                                          for s in ROW_SPECS for b in s.backends if b.name != "pallas"])
def test_rows_2_31_elements_apart(spec, backend):
    dtype = _dtype(spec)
    inputs = spec.make_inputs((2, N), dtype, "cuda", seed_for(spec.name, "apart"))
    spread = {k: (_spread(v) if isinstance(v, torch.Tensor) and v.dim() == 2 and v.shape[0] == 2
                  and v.shape[1] == N else v) for k, v in inputs.items()}
    out = backend.load()(**spread)
    torch.cuda.synchronize()
    check_output(spec, out, inputs, dtype, f"{spec.name} {backend.name} rows {BIG_STRIDE} apart")
    del spread, out
    _free()


ATTENTION = registry.get("flash_attention_fwd")


@pytest.mark.parametrize("backend", [b for b in ATTENTION.backends if b.name != "pallas"], ids=lambda b: b.name)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dims", [(64, 64), (192, 128)], ids=lambda d: f"D{d[0]}-Dv{d[1]}")
def test_attention_kv_rows_2_25_elements_apart(backend, causal, head_dims):
    """K/V [1, 1, 200, D] / [1, 1, 200, Dv] whose keys sit 2^25 + 64 elements apart in one
    buffer (k and v side by side in it): 64 keys span 2^31 elements; D = 192 with Dv = 128
    walks v with its own column range."""
    seq_stride = 2**25 + 64
    head_dim, head_dim_v = head_dims
    inputs = ATTENTION.make_inputs((1, 1, 1, 64, 200, head_dim, int(causal), head_dim_v), "float16",
                                   "cuda", seed_for("attention-kv", causal, head_dims))
    buf = torch.empty(200 * seq_stride, dtype=torch.float16, device="cuda")
    strided = dict(inputs)
    for offset, name in ((0, "k"), (head_dim, "v")):
        t = inputs[name]
        view = buf[offset:].as_strided(t.shape, (200 * seq_stride, 200 * seq_stride, seq_stride, 1))
        view.copy_(t)
        strided[name] = view
    out = backend.load()(**strided)
    torch.cuda.synchronize()
    check_output(ATTENTION, out, inputs, "float16", f"attention {backend.name} kv stride {seq_stride}")
    del buf, strided, out
    _free()


@pytest.mark.parametrize("backend", [b for b in ATTENTION.backends], ids=lambda b: b.name)
def test_attention_kv_past_element_2_31(backend):
    """K/V [1, 1, 2^23 + 64, 256]: more than 2^31 elements each, 64 queries against them."""
    sk = 2**23 + 64
    inputs = ATTENTION.make_inputs((1, 1, 1, 64, sk, 256, 0), "float16", "cuda",
                                   seed_for("attention-large"))
    out = backend.load()(**inputs)
    torch.cuda.synchronize()
    check_output(ATTENTION, out, inputs, "float16", f"attention {backend.name} Sk {sk}")
    del inputs, out
    _free()


@pytest.mark.parametrize("backend", [b for b in ATTENTION.backends if b.name != "pallas"], ids=lambda b: b.name)
@pytest.mark.parametrize("sk", [2**21, 2**22, 2**23 - 64])
def test_attention_long_kv_below_element_2_31(backend, sk):
    """The same 64 queries against K/V of D = 256 just below 2^31 elements and shorter: tells
    an offset fault at 2^31 (these pass, the case above fails) from an error that grows with
    the number of keys (these fail too)."""
    inputs = ATTENTION.make_inputs((1, 1, 1, 64, sk, 256, 0), "float16", "cuda", seed_for("attention-long", sk))
    out = backend.load()(**inputs)
    torch.cuda.synchronize()
    check_output(ATTENTION, out, inputs, "float16", f"attention {backend.name} Sk {sk}")
    del inputs, out
    _free()
