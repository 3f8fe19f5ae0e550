# SPDX-License-Identifier: Apache-2.0
"""Every gks.pallas op under jax.jit gives what it gives eagerly, and the row ops under
jax.vmap over a batch of inputs give each input's result (issue 36, item 1). Interpret mode
on a machine without a GPU (chosen from the backend, never from a traced value), compiled on
the GPU."""

from __future__ import annotations

import functools

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from conftest import DEVICE, seed_for  # noqa: E402
from gks import pallas, registry  # noqa: E402
from gks.pallas._bridge import _to_jax  # noqa: E402

PALLAS_SPECS = [s for s in registry.ops() if s.has_backend("pallas")]


def _split(spec, salt, shape=None):
    inputs = spec.make_inputs(shape or spec.example_shape, spec.dtypes[-1], DEVICE, seed_for(spec.name, salt))
    converted = {k: _to_jax(v) for k, v in inputs.items()}
    arrays = {k: v for k, v in converted.items() if isinstance(v, jax.Array)}
    static = {k: v for k, v in converted.items() if k not in arrays}
    return arrays, static


def _leaves(value):
    return [np.asarray(v) for v in jax.tree_util.tree_leaves(value)]


@pytest.mark.parametrize("spec", PALLAS_SPECS, ids=lambda s: s.name)
def test_jit_gives_the_eager_result(spec):
    op = getattr(pallas, spec.name)
    arrays, static = _split(spec, "jit")
    eager = op(**arrays, **static)
    jitted = jax.jit(functools.partial(op, **static))(**arrays)
    for a, b in zip(_leaves(eager), _leaves(jitted), strict=True):
        np.testing.assert_array_equal(a, b)


ROW_SPECS = [s for s in PALLAS_SPECS if s.shape_names == ("M", "N")]


@pytest.mark.parametrize("spec", ROW_SPECS, ids=lambda s: s.name)
def test_vmap_over_a_batch_gives_each_inputs_result(spec):
    op = getattr(pallas, spec.name)
    batch = [_split(spec, ("vmap", i), (5, 96)) for i in range(3)]
    static = batch[0][1]
    names = list(batch[0][0])
    # The first array (x or q) is batched; the rest (a weight, a scale) too where they have
    # a row per input row, else shared.
    mapped = [n for n in names if batch[0][0][n].shape[:1] == (5,)]
    stacked = {n: (jax.numpy.stack([b[0][n] for b in batch]) if n in mapped else batch[0][0][n]) for n in names}
    in_axes = {n: (0 if n in mapped else None) for n in names}
    vmapped = jax.vmap(lambda kw: op(**kw, **static), in_axes=(in_axes,))(stacked)
    for i, (arrays, _) in enumerate(batch):
        one = op(**{n: (arrays[n] if n in mapped else stacked[n]) for n in names}, **static)
        for a, b in zip(_leaves(one), _leaves(jax.tree_util.tree_map(lambda v: v[i], vmapped)), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
@pytest.mark.parametrize("spec", PALLAS_SPECS, ids=lambda s: s.name)
def test_donated_and_single_device_sharded_arrays(spec):
    """Donated inputs (on a CPU, where XLA cannot reuse them, it says so and goes on), and
    inputs placed with a sharding over a one-device mesh, give the eager result."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    op = getattr(pallas, spec.name)
    arrays, static = _split(spec, "donate")
    expected = _leaves(op(**arrays, **static))
    mesh = Mesh(np.array(jax.devices()[:1]), ("d",))
    sharded = {k: jax.device_put(v, NamedSharding(mesh, PartitionSpec())) for k, v in arrays.items()}
    for a, b in zip(expected, _leaves(op(**sharded, **static)), strict=True):
        np.testing.assert_array_equal(a, b)
    copies = {k: v.copy() for k, v in arrays.items()}
    donated = jax.jit(functools.partial(op, **static), donate_argnames=tuple(copies))(**copies)
    for a, b in zip(expected, _leaves(donated), strict=True):
        np.testing.assert_array_equal(a, b)
