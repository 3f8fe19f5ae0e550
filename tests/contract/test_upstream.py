# SPDX-License-Identifier: Apache-2.0
"""The pinned upstream references (reference-dependencies.json, gks.upstream):

- the lock file pins every package and need exactly, and it and the specs agree on which
  package stands beside which op;
- a package at another version than the pinned one counts as missing, and the reason names
  both;
- on the GPU, every gks backend of an op against each of its upstream references on the same
  inputs, both against the float64 reference: gks's error at most twice upstream's (plus the
  output's rounding). A reference not installed at its pinned version skips, saying which,
  before any GPU work;
- `gks bench --with-references` reports an enabled but missing reference as a failed row
  that names it.
"""

from __future__ import annotations

import re
from importlib import metadata

import pytest
import torch

from conftest import HAS_GPU, HAS_NATIVE, seed_for
from gks import registry, upstream

UPSTREAM = [(spec, peer) for spec in registry.ops() for peer in spec.peers if peer.package]
# Shapes every upstream reference of the op takes (FlashAttention: head dims 64 and 128).
SHAPES = {
    "rmsnorm": [(33, 1000), (256, 4096), (7, 8192)],
    "softmax": [(33, 1000), (256, 4096), (4, 32768)],
    "fused_add_rmsnorm": [(33, 1000), (256, 4096)],
    "layernorm": [(33, 1000), (256, 4096)],
    "act_and_mul": [(33, 2000), (64, 2 * 11008)],
    "cross_entropy": [(33, 1000), (256, 4096), (4, 32000)],
    "flash_attention_fwd": [(1, 4, 4, 256, 256, 64, 0), (2, 8, 2, 200, 333, 128, 1), (1, 2, 2, 1, 512, 128, 0)],
    "flash_attention_bwd": [(1, 4, 4, 256, 256, 64, 0), (2, 8, 2, 200, 333, 128, 1)],
    "flash_attention_varlen_fwd": [(4, 8, 2, 300, 700, 128, 1, 0), (3, 4, 4, 256, 256, 64, 0, 0),
                                   (4, 8, 2, 200, 700, 128, 1, 64)],
    "flash_attention_decode": [(3, 8, 2, 1, 700, 128, 0), (4, 32, 8, 1, 1000, 128, 16), (2, 8, 2, 4, 300, 64, 64)],
}
EXACT = re.compile(r"^[A-Za-z0-9._-]+==[A-Za-z0-9._+-]+$")


def test_the_lock_pins_every_package_and_need_exactly():
    for name, entry in upstream.lock().items():
        assert EXACT.match(f"{name}=={entry['version']}"), name
        for need in entry["needs"]:
            assert EXACT.match(need), f"{name}: need {need!r} is not pinned with =="
        assert entry["gpus"] and all(g.startswith("sm_") for g in entry["gpus"]), name
    for package in ("flash-attn-4", "flash-attn3-jax", "quack-kernels", "liger-kernel", "fla-core"):
        assert package in upstream.lock()


def test_the_lock_and_the_specs_agree():
    ops = {s.name for s in registry.ops()}
    for name, entry in upstream.lock().items():
        for op in entry["references"]:
            assert op in ops, f"{name} references unknown op {op}"
            assert any(p.package == name for p in registry.get(op).peers), f"{op}'s spec lacks {name}"
    for spec, peer in UPSTREAM:
        assert spec.name in upstream.lock()[peer.package]["references"], (spec.name, peer.package)
        assert spec.name in SHAPES, f"tests/contract/test_upstream.py: give {spec.name} its shapes"


def test_another_version_counts_as_missing(monkeypatch):
    def version(name):
        if name == "quack-kernels":
            return "0.0.1"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(upstream.metadata, "version", version)
    assert upstream.missing("quack-kernels") == (
        "quack-kernels 0.0.1 is installed, not the pinned 0.6.5 (" + upstream.INSTALL_HINT + ")")
    assert upstream.missing("liger-kernel").startswith("liger-kernel==0.8.5 is not installed")
    monkeypatch.setattr(upstream.metadata, "version", lambda name: upstream.pinned(name))
    assert upstream.missing("quack-kernels") is None
    with pytest.raises(KeyError, match="'nope' is not in reference-dependencies.json"):
        upstream.missing("nope")


def test_requirements_are_the_pinned_set_once():
    reqs = upstream.requirements()
    assert len(reqs) == len(set(reqs)) and "quack-kernels==0.6.5" in reqs and "nvidia-cutlass-dsl==4.8.1" in reqs


def _first(value):
    return value[0] if isinstance(value, tuple) else value


def _cases():
    for spec, peer in UPSTREAM:
        for backend in spec.backends:
            yield pytest.param(spec, peer, backend, id=f"{spec.name}-{backend.name}-vs-{peer.package}")


@pytest.mark.parametrize("spec,peer,backend", list(_cases()))
def test_gks_is_as_close_to_float64_as_upstream(spec, peer, backend):
    why = upstream.missing(peer.package)
    if why:
        pytest.skip(f"upstream reference {why}")
    if not HAS_GPU:
        pytest.skip("the upstream references run on a GPU")
    if backend.name == "cuda" and not HAS_NATIVE:
        pytest.skip("the gks CUDA library is not built")
    theirs_fn, ours_fn = peer.make(), backend.load()
    for dtype in ("float16", "bfloat16"):
        for shape in SHAPES[spec.name]:
            inputs = spec.make_inputs(shape, dtype, "cuda", seed_for(spec.name, peer.package, dtype, shape))
            ref = _first(spec.reference(**inputs, precise=True)).double()
            ours = _first(ours_fn(**inputs)).double()
            theirs = _first(theirs_fn(**inputs)).double()
            err_ours = (ours - ref).abs().max().item()
            err_theirs = (theirs - ref).abs().max().item()
            rounding = (ref.to(getattr(torch, dtype)).double() - ref).abs().max().item()
            assert err_ours <= 2 * err_theirs + rounding + 1e-7, (
                f"{spec.name}/{backend.name} {dtype} {shape}: error {err_ours:.3g} vs "
                f"{peer.name}'s {err_theirs:.3g} (+ rounding {rounding:.3g})")


@pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="times on a GPU")
def test_bench_reports_an_enabled_missing_reference(monkeypatch):
    from gks.profile import bench

    monkeypatch.setattr(upstream, "missing", lambda package: f"{package}==9 is not installed (test)")
    rows = bench.bench_op(registry.get("softmax"), backends=("cuda",), dtypes=["float16"], shapes=[(64, 256)],
                          with_references=True, reps=2, progress=lambda m: None)
    failed = {r["variant"]: r["checked"] for r in rows if "median_us" not in r}
    assert failed == {"QuACK": "FAILED: upstream reference quack-kernels==9 is not installed (test)",
                      "Liger": "FAILED: upstream reference liger-kernel==9 is not installed (test)"}


@pytest.mark.skipif(not (HAS_GPU and HAS_NATIVE), reason="times on a GPU")
def test_bench_reports_a_peer_that_does_not_cover_a_shape_as_n_a(monkeypatch):
    """A peer raising NotImplementedError (SDPA on a paged cache) gets an "n/a" row, untimed,
    and the other variants of the shape are still timed."""
    import dataclasses

    from gks.profile import bench
    from gks.registry import Peer

    def make():
        def run(**kwargs):
            raise NotImplementedError("not this shape (test)")
        return run

    spec = dataclasses.replace(registry.get("softmax"), peers=(Peer("uncovering", make),))
    rows = bench.bench_op(spec, backends=("cuda",), dtypes=["float16"], shapes=[(64, 256)], with_references=True,
                          reps=2, progress=lambda m: None)
    by_variant = {r["variant"]: r for r in rows}
    assert by_variant["uncovering"]["checked"] == "n/a: not this shape (test)"
    assert "median_us" not in by_variant["uncovering"]
    assert by_variant["gks.cuda"]["checked"] == "ok" and by_variant["gks.cuda"]["median_us"] > 0
