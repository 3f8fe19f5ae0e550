# SPDX-License-Identifier: Apache-2.0
"""The registry is the one list of ops: every backend an op declares is where the family
layout says, every backend package exports exactly the registry's ops, and each spec carries
what the contract tests need. Runs without a GPU."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

from conftest import HAS_NATIVE
from gks import registry

SPECS = registry.ops()
PACKAGES = {"cuda": "gks._torch_ops", "triton": "gks.triton", "pallas": "gks.pallas", "reference": "gks.reference"}


def _backends():
    for spec in SPECS:
        for backend in spec.backends:
            yield pytest.param(spec, backend, id=f"{spec.name}-{backend.name}")


@pytest.mark.parametrize("spec,backend", list(_backends()))
def test_every_declared_backend_is_in_its_family_module(spec, backend):
    module = importlib.import_module(f"{registry.BACKEND_MODULES[backend.name]}.{spec.family}")
    assert spec.name in module.__all__, f"{module.__name__}.__all__ lacks {spec.name}"
    public = getattr(module, spec.name)
    assert callable(public) and spec.public(backend.name) is public
    assert callable(backend.load())


@pytest.mark.parametrize("backend", sorted(PACKAGES))
def test_each_package_exports_exactly_the_registry_ops(backend):
    package = importlib.import_module(PACKAGES[backend])
    names = {spec.name for spec in SPECS}
    exported = set(package.__all__) & names
    declared = {s.name for s in SPECS} if backend == "reference" else set(registry.ops_with(backend))
    assert exported == declared, (f"{PACKAGES[backend]} exports {sorted(exported - declared)} "
                                  f"undeclared, lacks {sorted(declared - exported)}")
    home = "gks.specs" if backend == "reference" else PACKAGES[backend]  # references sit by their specs
    for name in declared:
        assert getattr(package, name) is getattr(
            importlib.import_module(f"{home}.{registry.get(name).family}"), name)
        if backend == "reference":
            assert registry.get(name).reference is getattr(package, name)


def test_gks_op_is_the_cuda_torch_op():
    import gks
    import gks._torch_ops

    for name in registry.ops_with("cuda"):
        assert getattr(gks, name) is getattr(gks._torch_ops, name)
    assert set(registry.ops_with("cuda")) <= set(dir(gks))


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.name)
def test_spec_carries_what_the_contract_tests_need(spec):
    assert spec.family in registry.families()
    assert spec.example_shape in spec.test_shapes
    assert spec.bad_inputs and len({b.id for b in spec.bad_inputs}) == len(spec.bad_inputs)
    for bad in spec.bad_inputs:
        assert "argument '" in bad.message or "must" in bad.message, bad.id
    if spec.has_backend("cuda"):
        assert spec.cuda_out is not None and spec.sass_kernels
    else:
        assert not spec.sass_kernels


def _tunable():
    for spec in SPECS:
        for backend in spec.backends:
            if backend.tunable:
                yield pytest.param(spec, backend.name, id=f"{spec.name}-{backend.name}")


@pytest.mark.parametrize("spec,backend", list(_tunable()))
def test_tunable_backends_name_their_configs(spec, backend):
    if backend == "cuda" and not HAS_NATIVE:
        pytest.skip("the CUDA configs come from the library, which is not built")
    names = spec.config_names(backend)
    assert len(names) >= 2 and len(set(names)) == len(names), names


@pytest.mark.skipif(not HAS_NATIVE, reason="the CUDA configs come from the library, which is not built")
@pytest.mark.parametrize("spec", [s for s in SPECS if s.has_backend("cuda")], ids=lambda s: s.name)
def test_cuda_configs_are_the_librarys_table(spec):
    from gks import _native

    if spec.backend("cuda").tunable:
        assert list(spec.configs) == list(_native.config_table(spec.name))
    else:
        assert not spec.configs


def test_the_ops_do_not_import_the_harness():
    """gks.<op>, every backend and the call-time lookup load without gks.profile."""
    code = ("import sys, gks, gks.reference, gks.cuda, gks.runtime.tables, gks._torch_ops, gks.triton, gks.pallas;"
            "print(sorted(m for m in sys.modules if m.startswith('gks.profile')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_framework_free_layers_load_without_torch():
    """torch is optional (pyproject): the registry with its specs and references, gks.cuda
    (DLPack entry points) and gks.pallas load with torch unimportable."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "from gks import registry\n"
            "assert registry.ops() and registry.families()\n"
            "import gks.cuda, gks.pallas, gks.specs.attention\n"
            "print(len(gks.cuda.__all__), len(gks.pallas.__all__))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
