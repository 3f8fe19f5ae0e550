# SPDX-License-Identifier: Apache-2.0
"""Outputs that repeat an element or share memory with another argument (issue 34, class 2),
for every op's gks.cuda `_out` entry point, its outputs named by the spec (OpSpec.outputs):

- an expanded output (stride 0 over a dim of size > 1) is refused, naming it;
- an output that shares memory with an input or with another output is refused, naming
  both, whether it meets the other in full or in part;
- an output beside an input in one buffer (touching, not sharing) is taken and is right;
- the in-place forms a spec documents (OpSpec.in_place: y is x for the row ops) give the
  out-of-place answer under every config of the op's table.

The C++ API makes these checks (gks::check_outputs), so they run on a GPU with the library."""

from __future__ import annotations

import pytest
import torch

from checks import check_output
from conftest import HAS_GPU, HAS_NATIVE, seed_for
from gks import registry

pytestmark = pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE),
                                reason="the CUDA ops need a GPU and the built library")

OUT_SPECS = [s for s in registry.ops() if s.cuda_out is not None]


def _inputs(spec, salt):
    dtype = spec.dtypes[-1]
    return spec.make_inputs(spec.example_shape, dtype, "cuda", seed_for(spec.name, dtype, salt))


def _expected(spec, inputs):
    value = spec.reference(**inputs)
    return value if isinstance(value, tuple) else (value,)


def _call(spec, inputs, outs, **kw):
    import gks.cuda

    spec.cuda_out(gks.cuda, inputs, tuple(outs), **kw)
    torch.cuda.synchronize()


def _sharing(t: torch.Tensor, nbytes_after: int):
    """A byte buffer holding a copy of t at its start, and a function that views `nbytes`
    of it from byte `offset` as a tensor of the given shape and dtype."""
    buf = torch.empty(max(t.numel() * t.element_size(), nbytes_after), dtype=torch.uint8, device="cuda")
    copy = buf[: t.numel() * t.element_size()].view(t.dtype).view(t.shape)
    copy.copy_(t)

    def at(offset, like):
        n = like.numel() * like.element_size()
        return buf[offset : offset + n].view(like.dtype).view(like.shape)

    return copy, at


@pytest.mark.parametrize("spec", OUT_SPECS, ids=lambda s: s.name)
def test_every_op_names_its_outputs(spec):
    inputs = _inputs(spec, "names")
    assert len(spec.outputs) == len(_expected(spec, inputs)), spec.outputs
    for out, inp in spec.in_place.items():
        assert out in spec.outputs and isinstance(inputs.get(inp), torch.Tensor), (out, inp)


@pytest.mark.parametrize("spec", OUT_SPECS, ids=lambda s: s.name)
def test_an_expanded_output_is_refused(spec):
    inputs = _inputs(spec, "expanded")
    expected = _expected(spec, inputs)
    for k, name in enumerate(spec.outputs):
        like = expected[k]
        dim = next(d for d, n in enumerate(like.shape) if n > 1)
        one_row = list(like.shape)
        one_row[dim] = 1
        outs = [torch.empty_like(e) for e in expected]
        outs[k] = torch.empty(one_row, dtype=like.dtype, device="cuda").expand(like.shape)
        # The GEMMs refuse it as a leading dimension below the row length, the rest as a
        # repeated element: both name the output.
        with pytest.raises(ValueError, match=rf"argument '{name}' must (hold each of its elements once, "
                                             rf"got stride 0 over dim {dim}|have a leading dimension)"):
            _call(spec, inputs, outs)


def _others(spec, inputs):
    """(name, tensor) of every tensor argument: the inputs, then the outputs."""
    return [(n, v) for n, v in inputs.items() if isinstance(v, torch.Tensor) and v.numel() > 0]


@pytest.mark.parametrize("spec", OUT_SPECS, ids=lambda s: s.name)
@pytest.mark.parametrize("offset", [0, 16], ids=["at-its-start", "16-bytes-in"])
def test_an_output_sharing_memory_is_refused(spec, offset):
    expected = _expected(spec, _inputs(spec, "shared"))
    for k, name in enumerate(spec.outputs):
        others = _others(spec, _inputs(spec, "shared"))
        others += [(n, e) for j, (n, e) in enumerate(zip(spec.outputs, expected)) if j != k]
        for other, _ in others:
            inputs = _inputs(spec, "shared")
            outs = [torch.empty_like(e) for e in expected]
            like = expected[k]
            held = inputs[other] if other in inputs else outs[spec.outputs.index(other)]
            held_bytes = held.numel() * held.element_size()
            # Inside the other tensor's bytes: 16 in, or halfway into one smaller than that.
            start = offset if offset < held_bytes else held_bytes // 2 // like.element_size() * like.element_size()
            nbytes = start + like.numel() * like.element_size()
            if other in inputs:
                inputs[other], at = _sharing(inputs[other], nbytes)
            else:
                j = spec.outputs.index(other)
                outs[j], at = _sharing(outs[j], nbytes)
            outs[k] = at(start, like)
            exact = start == 0 and spec.in_place.get(name) == other
            if exact:
                continue  # the documented in-place form: test_the_in_place_form_is_right
            first, second = (other, name) if other in spec.outputs and spec.outputs.index(other) > k else (name, other)
            with pytest.raises(ValueError, match=rf"argument '{first}' must not share memory with "
                                                 rf"argument '{second}'"):
                _call(spec, inputs, outs)


@pytest.mark.parametrize("spec", OUT_SPECS, ids=lambda s: s.name)
def test_an_output_beside_an_input_in_one_buffer_is_taken(spec):
    """Byte ranges that touch but do not meet are not shared memory: the first output right
    after the first tensor input, in one buffer."""
    inputs = _inputs(spec, "beside")
    expected = _expected(spec, inputs)
    name, first = _others(spec, inputs)[0]
    start = -(-first.numel() * first.element_size() // 16) * 16  # keep 16-byte alignment
    like = expected[0]
    inputs[name], at = _sharing(first, start + like.numel() * like.element_size())
    outs = [torch.full_like(e, -1) for e in expected]
    outs[0] = at(start, like)
    outs[0].fill_(-1)
    _call(spec, inputs, outs)
    check_output(spec, tuple(outs) if len(outs) > 1 else outs[0], inputs, spec.dtypes[-1],
                 f"{spec.name}: output beside '{name}'")


def _in_place_cases():
    for spec in OUT_SPECS:
        configs = range(len(spec.configs)) if spec.configs else [None]
        for out, inp in spec.in_place.items():
            for dtype in spec.dtypes:
                for config in configs:
                    yield pytest.param(spec, out, inp, dtype, config,
                                       id=f"{spec.name}-{out}-is-{inp}-{dtype}-config{config}")


@pytest.mark.parametrize("spec,out,inp,dtype,config", list(_in_place_cases()))
def test_the_in_place_form_is_right(spec, out, inp, dtype, config):
    """Every config: the row kernels read a row before they write it, in each of their shells
    (registers, looped, cluster, staged), so y may be x."""
    for shape in dict.fromkeys((spec.example_shape, *spec.test_shapes)):
        inputs = spec.make_inputs(shape, dtype, "cuda", seed_for(spec.name, dtype, shape, "in-place"))
        before = {n: (v.clone() if isinstance(v, torch.Tensor) else v) for n, v in inputs.items()}
        outs = [torch.empty_like(e) for e in _expected(spec, before)]
        outs[spec.outputs.index(out)] = inputs[inp]
        _call(spec, inputs, outs, **({} if config is None else {"config": config}))
        check_output(spec, tuple(outs) if len(outs) > 1 else outs[0], before, dtype,
                     f"{spec.name} in place, config {config}, shape {shape}")
