# SPDX-License-Identifier: Apache-2.0
"""Project hygiene: licence tags, README in step with the registry, CLI, registry schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gks import registry

ROOT = Path(__file__).resolve().parent.parent
SOURCE_SUFFIXES = {".py", ".cu", ".cuh", ".h", ".hpp", ".cc", ".cpp"}
SKIP_DIRS = {".git", ".venv", "build", ".gtest", ".whl", "__pycache__"}


def _tracked_sources():
    try:
        files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout.split()
        paths = [ROOT / f for f in files]
    except (OSError, subprocess.CalledProcessError):
        paths = [p for p in ROOT.rglob("*") if not SKIP_DIRS & set(p.relative_to(ROOT).parts)]
    return [p for p in paths if p.suffix in SOURCE_SUFFIXES and p.is_file()]


def test_every_source_file_has_an_spdx_tag():
    missing = [str(p.relative_to(ROOT)) for p in _tracked_sources()
               if "SPDX-License-Identifier:" not in "".join(p.read_text(errors="replace").splitlines(True)[:5])]
    assert not missing, f"files without an SPDX tag in their first 5 lines: {missing}"


def test_licence_is_apache2():
    assert "Apache License" in (ROOT / "LICENSE").read_text()


def test_readme_kernel_table_matches_registry():
    readme = (ROOT / "README.md").read_text()
    start = readme.index("<!-- kernels:start")
    start = readme.index("\n", start) + 1
    end = readme.index("<!-- kernels:end -->")
    assert readme[start:end].strip() == registry.markdown_table(), (
        "README's kernel table is stale: regenerate it with `python -m gks list --format markdown`")


def _gks(*args):
    return subprocess.run([sys.executable, "-m", "gks", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def test_cli_list_table_names_every_op_and_backend():
    out = _gks("list")
    assert out.returncode == 0, out.stderr
    for spec in registry.ops():
        line = next(l for l in out.stdout.splitlines() if l.startswith(spec.name + " "))
        for b in spec.backends:
            assert ", ".join(b.archs) in line


def test_cli_list_json_schema():
    out = _gks("list", "--format", "json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert set(doc) == {"gks_version", "ops"}
    names = [op["name"] for op in doc["ops"]]
    assert names == [s.name for s in registry.ops()]
    for op in doc["ops"]:
        assert set(op) == {"name", "family", "summary", "signature", "shape_names", "optional_dims", "dtypes",
                           "backends", "tolerance", "bench_shapes", "peers", "configs", "compute"}
        optional = list(op["optional_dims"])
        assert op["shape_names"][len(op["shape_names"]) - len(optional):] == optional
        assert all(isinstance(d, int) or d in op["shape_names"] for d in op["optional_dims"].values())
        assert op["family"] in registry.families()
        for b in op["backends"]:
            assert set(b) == {"name", "archs", "interpreted", "tunable"}
            assert all(a in registry.ARCH_NAMES for a in b["archs"])
        for dtype, tol in op["tolerance"].items():
            assert dtype in op["dtypes"] and len(tol) == 2


def test_cli_rejects_unknown_kernel():
    out = _gks("bench", "--kernel", "no_such_op")
    assert out.returncode == 2
    assert "unknown op 'no_such_op'" in out.stderr


def test_cli_bench_needs_a_kernel():
    out = _gks("bench")
    assert out.returncode == 2 and "--kernel" in out.stderr


def test_cli_bench_shapes_go_to_the_ops_of_their_rank():
    from gks.profile import bench

    sgemm, softmax = registry.get("sgemm"), registry.get("softmax")
    given = bench._parse_shapes("4096x4096x4096,32768x4096,8x8")
    assert bench.shapes_for(sgemm, given) == [(4096, 4096, 4096)]
    assert bench.shapes_for(softmax, given) == [(32768, 4096), (8, 8)]
    assert bench.shapes_for(softmax, None) == list(softmax.bench_shapes)
    out = _gks("bench", "--kernel", "sgemm", "--shapes", "32768x4096")
    assert out.returncode == 2
    assert "no shape in --shapes fits sgemm, whose shapes have 3 dims (e.g. 4096x4096x4096)" in out.stderr
    out = _gks("bench", "--kernel", "softmax", "--shapes", "4096xa")
    assert out.returncode == 2 and "'4096xa' is not a shape like 4096x4096" in out.stderr


def test_registry_get_unknown_names_known_ops():
    with pytest.raises(KeyError, match="known ops: .*rmsnorm"):
        registry.get("nope")


def test_every_spec_is_complete():
    for s in registry.ops():
        assert s.backends and s.test_shapes and s.bench_shapes and s.dtypes
        assert set(s.tolerance) >= set(s.dtypes), s.name
        assert all(s.fits_shape(shape) for shape in (*s.bench_shapes, *s.test_shapes)), s.name
        assert len(s.bench_shapes[0]) == len(s.shape_names) - len(s.optional_dims), s.name
        assert len(set(s.bench_shapes)) == len(s.bench_shapes), f"{s.name}: a bench shape listed twice"
        for shape in s.bench_shapes:
            for dt in s.dtypes:
                assert s.flops(shape) >= 0 and s.bytes_moved(shape, dt) > 0, (s.name, shape, dt)


def test_optional_shape_dims():
    """flash_attention_fwd's Dv: an 8th dim a shape may leave off (then D's value); one
    canonical spelling, the one the tuned tables key on."""
    import dataclasses

    s = registry.get("flash_attention_fwd")
    assert s.shape_lengths() == (7, 8) and s.fits_shape((1,) * 8) and not s.fits_shape((1,) * 6)
    assert s.canonical_shape((1, 2, 2, 3, 4, 64, 0, 64)) == (1, 2, 2, 3, 4, 64, 0)
    assert s.canonical_shape((1, 2, 2, 3, 4, 192, 0, 128)) == (1, 2, 2, 3, 4, 192, 0, 128)
    assert s.canonical_shape((1, 2, 2, 3, 4, 64, 0)) == (1, 2, 2, 3, 4, 64, 0)
    assert s.dims_text() == "BxHqxHkvxSqxSkxDxcausal[xDv]"
    assert registry.get("rmsnorm").shape_lengths() == (2,)
    with pytest.raises(ValueError, match="optional_dims"):
        dataclasses.replace(s, optional_dims={"D": "Sk"})  # not the last name
    with pytest.raises(ValueError, match="optional_dims"):
        dataclasses.replace(s, optional_dims={"Dv": "E"})  # no such dim


def test_rmsnorm_formulas():
    spec = registry.get("rmsnorm")
    assert spec.bytes_moved((32768, 4096), "bfloat16") == 2 * (2 * 32768 * 4096 + 4096)
    assert spec.flops((2, 3)) == 24
    assert spec.arithmetic_intensity((32768, 4096), "float32") == pytest.approx(0.5, rel=1e-3)


def test_timing_cold_l2_rotation():
    from gks.profile.timing import sets_for_cold_l2

    assert sets_for_cold_l2(1 << 30, 60 << 20) == 1
    assert sets_for_cold_l2(20 << 20, 60 << 20) == 9
    assert sets_for_cold_l2(1, 60 << 20) == 32  # capped


def test_pure_python_install_imports_and_explains_missing_cuda(tmp_path):
    """GKS_SKIP_CUDA_BUILD=1 builds no native code; gks imports and the CUDA ops say why
    they cannot run."""
    import os

    pytest.importorskip("scikit_build_core")
    target = tmp_path / "site"
    env = {**os.environ, "GKS_SKIP_CUDA_BUILD": "1"}
    env.pop("GKS_LIBRARY", None)
    build = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                            "-t", str(target), str(ROOT)], capture_output=True, text=True, env=env, timeout=900)
    assert build.returncode == 0, build.stderr[-2000:]
    assert not list(target.rglob("libgks_tvm_ffi.so"))
    probe = ("import gks, torch\n"
             "try:\n    gks.rmsnorm(torch.randn(2, 8), torch.ones(8))\n"
             "except gks._native.NativeLibraryUnavailable as e:\n    print('unavailable:', e)\n")
    # -S skips site's .pth files, so an editable install of gks cannot shadow the one under
    # test; site-packages is put back by hand for torch.
    import sysconfig

    env["PYTHONPATH"] = os.pathsep.join([str(target), sysconfig.get_paths()["purelib"]])
    probe = f"import gks; assert gks.__file__.startswith({str(target)!r}), gks.__file__\n" + probe
    run = subprocess.run([sys.executable, "-S", "-c", probe], capture_output=True, text=True, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "unavailable: the gks CUDA backend is not built" in run.stdout
