# SPDX-License-Identifier: Apache-2.0
"""The autotuner's pure parts (bucketing, cache keys and invalidation, the tie band, the
cache file) on any machine; tuning itself and the ops' use of the cache on a GPU."""

from __future__ import annotations

import json

import pytest

from conftest import requires_gpu, requires_native
from gks.profile import autotune
from gks.runtime import dims, tables

IDENTITY = {"gpu": "NVIDIA H200", "cc": "9.0", "driver": "580.159.03", "gks": "0.1.0"}


@pytest.fixture
def user_cache_only(tmp_path, monkeypatch):
    """The user's cache in tmp_path and no shipped tables, for IDENTITY's GPU and config-list
    hash "h1"; yields a stand-in for a CUDA tensor (what resolve_config reads of one)."""
    import types

    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tables, "SHIPPED_DIR", tmp_path / "no-shipped-tables")
    monkeypatch.setattr(autotune, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h1")
    tables._shipped.cache_clear()
    try:
        yield types.SimpleNamespace(is_cuda=True, get_device=lambda: 0, dtype="float32")
    finally:
        tables._entries.cache_clear()
        tables._shipped.cache_clear()


def test_shape_bucket_rounds_each_dim_up_to_a_power_of_two():
    assert tables.shape_bucket((4096, 4096, 4096)) == (4096, 4096, 4096)
    assert tables.shape_bucket((16, 14336, 4097)) == (16, 16384, 8192)
    assert tables.shape_bucket((1, 0, 3)) == (1, 1, 4)
    assert tables.shape_bucket((1000, 1024, 1025)) == (1024, 1024, 2048)
    assert tables.shape_bucket((65536, 1000)) == (65536, 1024)  # any number of dims
    # dims kept exact: flags (0 stays 0) and sizes that pick another kernel
    assert tables.shape_bucket((3, 96, 0), exact=(1, 2)) == (4, 96, 0)


def test_kernel_bucket_keeps_the_dims_the_spec_names_exact():
    from gks import registry

    assert registry.get("flash_attention_fwd").bucket_exact == ("D", "causal", "Dv")
    # B, Hq, Hkv, Sq, Sk round up; the head dims and the causal flag stay apart
    assert tables.kernel_bucket("flash_attention_fwd", (3, 12, 4, 1000, 1000, 96, 0)) == (
        4, 16, 4, 1024, 1024, 96, 0)
    # Dv, optional and last: a shape of D = Dv keeps its 7-dim bucket (the shipped keys)
    assert tables.kernel_bucket("flash_attention_fwd", (3, 12, 4, 1000, 1000, 192, 1, 128)) == (
        4, 16, 4, 1024, 1024, 192, 1, 128)
    # ... and an 8-dim spelling of D = Dv keys as the 7-dim shape does
    assert tables.kernel_bucket("flash_attention_fwd", (3, 12, 4, 1000, 1000, 96, 0, 96)) == (
        4, 16, 4, 1024, 1024, 96, 0)
    assert tables.kernel_bucket("flash_attention_fwd", (3, 12, 4, 1000, 1000, 96, 1))[-1] == 1
    assert tables.kernel_bucket("rmsnorm", (8000, 4000)) == (8192, 4096)
    assert tables.kernel_bucket("triton.sgemm", (100, 120, 129)) == (128, 128, 256)


def test_row_and_attention_dims_are_the_specs_dims():
    import torch

    assert dims.row_dims(torch.empty(4, 6, 10)) == (24, 10)
    assert dims.row_dims(torch.empty(0, 10)) == (0, 10)
    assert dims.row_dims(torch.empty(3, 0)) == (0, 0)
    q, k = torch.empty(2, 8, 100, 64), torch.empty(2, 2, 300, 64)
    assert dims.attention_dims(q, k, True) == (2, 8, 2, 100, 300, 64, 1)
    assert dims.attention_dims(q, k, False)[-1] == 0
    assert dims.attention_dims(q[0], k, False) is None  # the C++ API says what is wrong
    # v's head dim is appended only where it differs from q and k's (DeepSeek's 192 / 128)
    assert dims.attention_dims(q, k, True, k) == (2, 8, 2, 100, 300, 64, 1)
    q, k, v = torch.empty(2, 8, 100, 192), torch.empty(2, 2, 300, 192), torch.empty(2, 2, 300, 128)
    assert dims.attention_dims(q, k, False, v) == (2, 8, 2, 100, 300, 192, 0, 128)


def test_pick_winner_tie_band_prefers_the_first_config():
    assert autotune.pick_winner([1.0, 0.99, 0.5]) == 2
    # within 2% of the best: the earliest wins, whatever the noise ordering
    assert autotune.pick_winner([1.015, 1.0, 1.01]) == 0
    assert autotune.pick_winner([1.03, 1.0, 1.01]) == 1
    assert autotune.pick_winner([1.03, 1.0, 1.01], band=0.05) == 0
    # failed configs (None) never win, even "fast" ones
    assert autotune.pick_winner([None, 2.0, 1.0]) == 2
    with pytest.raises(ValueError, match="no config produced a correct result"):
        autotune.pick_winner([None, None])


def test_pick_winner_prefers_the_heuristic_within_the_band():
    # The op's own choice (config -1) comes first: a config must beat it by more than the band.
    assert autotune.pick_winner([1.0, 0.99], default_ms=1.005) == tables.DEFAULT == -1
    assert autotune.pick_winner([1.0, 0.97], default_ms=1.0) == 1
    assert autotune.pick_winner([None, None], default_ms=1.0) == -1  # only the default ran
    assert autotune.pick_winner([1.0, 2.0], default_ms=None) == 0  # the default failed


def test_a_default_entry_leaves_the_op_to_its_heuristic(user_cache_only):
    like = user_cache_only
    tuned = tables.cache_key(IDENTITY, "sgemm", "float32", (1024, 4096, 4096), "h1")
    default = tables.cache_key(IDENTITY, "sgemm", "float32", (64, 64, 64), "h1")
    tables.save_cache({tuned: {"config": 3}, default: {"config": -1, "name": "default"}})
    assert tables.lookup_for(IDENTITY, "sgemm", "float32", (64, 64, 64)) is None
    assert tables.resolve_config("sgemm", like, (64, 64, 64), -1) == -1
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == 3
    # What tune_one times as the default: the tables ignored, -1 passed on.
    with tables.untuned():
        assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == -1
        assert tables.lookup_for(IDENTITY, "sgemm", "float32", (1000, 4096, 4000)) is None
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == 3


def test_cache_key_changes_with_every_component():
    base = tables.cache_key(IDENTITY, "sgemm", "float32", (4096, 4096, 4096), "abc")
    variants = [
        tables.cache_key(dict(IDENTITY, gpu="NVIDIA H100 80GB HBM3"), "sgemm", "float32", (4096,) * 3, "abc"),
        tables.cache_key(dict(IDENTITY, cc="8.0"), "sgemm", "float32", (4096,) * 3, "abc"),
        tables.cache_key(dict(IDENTITY, driver="590.1"), "sgemm", "float32", (4096,) * 3, "abc"),
        tables.cache_key(dict(IDENTITY, gks="0.2.0"), "sgemm", "float32", (4096,) * 3, "abc"),
        tables.cache_key(IDENTITY, "wmma_gemm", "float32", (4096,) * 3, "abc"),
        tables.cache_key(IDENTITY, "sgemm", "float16", (4096,) * 3, "abc"),
        tables.cache_key(IDENTITY, "sgemm", "float32", (4096, 4096, 8192), "abc"),
        tables.cache_key(IDENTITY, "sgemm", "float32", (4096,) * 3, "abd"),
    ]
    assert len({base, *variants}) == len(variants) + 1
    assert base == tables.cache_key(IDENTITY, "sgemm", "float32", [4096] * 3, "abc")


def test_config_hash_tracks_names_and_order():
    h = tables.config_hash(["a", "b"])
    assert h == tables.config_hash(("a", "b"))
    assert h != tables.config_hash(["b", "a"])
    assert h != tables.config_hash(["a", "b", "c"])
    assert h != tables.config_hash(["a", "bb"])


def test_stale_keys_are_those_that_can_no_longer_match():
    cur = {"sgemm": "h1"}
    live = tables.cache_key(IDENTITY, "sgemm", "float32", (64, 64, 64), "h1")
    other_kernel = tables.cache_key(IDENTITY, "int8_gemm", "float16", (64, 64, 64), "zz")
    old_list = tables.cache_key(IDENTITY, "sgemm", "float32", (64, 64, 64), "h0")
    old_driver = tables.cache_key(dict(IDENTITY, driver="570.0"), "sgemm", "float32", (64,) * 3, "h1")
    old_gks = tables.cache_key(dict(IDENTITY, gks="0.0.9"), "sgemm", "float32", (64,) * 3, "h1")
    other_gpu = tables.cache_key(dict(IDENTITY, gpu="NVIDIA A100-SXM4-80GB", cc="8.0"),
                                   "sgemm", "float32", (64,) * 3, "h0")
    entries = {k: {"config": 0} for k in (live, other_kernel, old_list, old_driver, old_gks, other_gpu)}
    stale = set(autotune.stale_keys(entries, IDENTITY, cur))
    assert stale == {old_list, old_driver, old_gks}


def test_cache_round_trip_and_bad_files(tmp_path, monkeypatch):
    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    path = tables.cache_path()
    assert path == tmp_path / "autotune.json"
    assert tables.load_cache() == {}  # missing file
    entries = {"k": {"config": 2, "name": "x"}}
    tables.save_cache(entries)
    assert tables.load_cache() == entries
    assert json.loads(path.read_text())["format"] == tables.CACHE_FORMAT
    assert not list(tmp_path.glob(".*.tmp"))  # atomic write left no temporary behind
    monkeypatch.setattr(tables, "_WARNED", set())
    path.write_text("{not json")
    with pytest.warns(RuntimeWarning, match="cannot be read"):
        assert tables.load_cache() == {}
    path.write_text(json.dumps({"format": 999, "entries": entries}))
    monkeypatch.setattr(tables, "_WARNED", set())
    with pytest.warns(RuntimeWarning, match="not a gks cache of format"):
        assert tables.load_cache() == {}  # another format: ignored, rebuilt by the next run


def test_default_cache_path_is_under_home(monkeypatch, tmp_path):
    monkeypatch.delenv("GKS_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert tables.cache_path() == tmp_path / ".cache" / "gks" / "autotune.json"


def test_lookup_reads_the_cache_and_misses_on_any_mismatch(tmp_path, monkeypatch):
    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(autotune, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h1")
    key = tables.cache_key(IDENTITY, "sgemm", "float32", (1024, 4096, 4096), "h1")
    tables.save_cache({key: {"config": 3, "name": "cfg3"}})
    assert tables.lookup("sgemm", "float32", (1000, 4096, 4000), 0) == 3  # same bucket
    assert tables.lookup("sgemm", "float32", (1025, 4096, 4000), 0) is None  # next bucket
    assert tables.lookup("wmma_gemm", "float32", (1000, 4096, 4000), 0) is None
    monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h2")  # config list changed
    assert tables.lookup("sgemm", "float32", (1000, 4096, 4000), 0) is None
    tables._entries.cache_clear()


def test_resolve_config_follows_a_new_cache_at_once(user_cache_only):
    # resolve_config remembers its answers, per generation of the tables: saving the cache
    # starts a new one, so a fresh tuning applies to the very next call.
    like = user_cache_only
    key = tables.cache_key(IDENTITY, "sgemm", "float32", (1024, 4096, 4096), "h1")
    tables.save_cache({key: {"config": 3}})
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == 3
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == 3  # remembered
    tables.save_cache({key: {"config": 1}})
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == 1
    tables.save_cache({})
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), -1) == -1  # heuristic
    assert tables.resolve_config("sgemm", like, (1000, 4096, 4000), 2) == 2  # forced


def test_shipped_tables_apply_across_driver_and_version_after_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path / "user"))
    monkeypatch.setattr(tables, "SHIPPED_DIR", tmp_path / "shipped")
    monkeypatch.setattr(autotune, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "device_identity", lambda index: IDENTITY)
    monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h1")
    tables._entries.cache_clear()
    tables._shipped.cache_clear()
    try:
        made_under = {**IDENTITY, "driver": "1.0", "gks": "0.0.1"}
        shipped = {tables.cache_key(made_under, "sgemm", "float32", (1024, 4096, 4096), "h1"): {"config": 2},
                   tables.cache_key({**made_under, "gpu": "NVIDIA A100"}, "sgemm", "float32",
                                      (64, 64, 64), "h1"): {"config": 1}}
        tables.save_cache(shipped, tmp_path / "shipped" / "table.json")
        tables._shipped.cache_clear()
        assert tables.lookup("sgemm", "float32", (1000, 4096, 4000), 0) == 2  # other driver, version
        assert tables.lookup("sgemm", "float32", (64, 64, 64), 0) is None  # another GPU's entry
        monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h2")  # config list changed
        assert tables.lookup("sgemm", "float32", (1000, 4096, 4000), 0) is None
        monkeypatch.setattr(tables, "_kernel_hash", lambda kernel: "h1")
        own = tables.cache_key(IDENTITY, "sgemm", "float32", (1024, 4096, 4096), "h1")
        tables.save_cache({own: {"config": 3}})  # the user's own tuning wins
        assert tables.lookup("sgemm", "float32", (1000, 4096, 4000), 0) == 3
    finally:
        tables._entries.cache_clear()
        tables._shipped.cache_clear()


@requires_native
def test_shipped_tables_match_the_compiled_config_lists():
    """A shipped table made for an older config list would never match: regenerate it."""
    paths = sorted(tables.SHIPPED_DIR.glob("*.json"))
    assert paths, "gks ships at least the H200 table"
    for path in paths:
        entries = tables.load_cache(path)
        assert entries, f"{path.name}: no entries (or not in cache format {tables.CACHE_FORMAT})"
        for key, entry in entries.items():
            gpu, cc, driver, version, kernel, dtype, bucket, chash = key.split("|")
            backend, op = tables.split_kernel(kernel)
            assert op in autotune.tunable_ops(backend), key
            assert chash == f"cfg{tables._kernel_hash(kernel)}", f"{path.name}: {key} is stale"
            names = tables.kernel_config_names(kernel)
            if entry["config"] == tables.DEFAULT:
                assert entry["name"] == tables.DEFAULT_NAME, key
            else:
                assert 0 <= entry["config"] < len(names) and entry["name"] == names[entry["config"]], key
            assert tables.kernel_bucket(kernel, entry["shape"]) == tuple(int(x) for x in bucket.split("x")), key


def test_resolve_config_passes_explicit_configs_through():
    import torch

    t = torch.zeros(2, 2)
    assert tables.resolve_config("sgemm", t, (2, 2, 2), 3) == 3
    assert tables.resolve_config("sgemm", t, (2, 2, 2), -1) == -1  # CPU tensor: no lookup


def test_cli_without_gpu_or_with_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "no_such_gemm"])
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "sgemm", "--shapes", "4096x4096"])


def test_cli_timing_is_bench_or_graph(capsys):
    assert autotune.build_parser().parse_args(["--kernel", "sgemm"]).timing == "bench"
    assert autotune.build_parser().parse_args(["--kernel", "sgemm", "--timing", "graph"]).timing == "graph"
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "sgemm", "--timing", "wallclock"])
    assert "invalid choice: 'wallclock'" in capsys.readouterr().err


def test_cli_show_prints_entries(tmp_path, capsys):
    path = tmp_path / "c.json"
    tables.save_cache({"gpu|cc9.0|driverX|gks0.1.0|sgemm|float32|64x64x64|cfgh": {"config": 1, "name": "n1"}},
                        path)
    assert autotune.main(["--kernel", "sgemm", "--show", "--cache", str(path)]) == 0
    assert "n1 (config 1)" in capsys.readouterr().out


def test_gks_command_hands_its_options_to_autotune(tmp_path, capsys):
    """`python -m gks autotune --kernel X ...`, the documented form, reaches autotune's parser."""
    from gks.__main__ import main as gks_main

    path = tmp_path / "c.json"
    tables.save_cache({"gpu|cc9.0|driverX|gks0.1.0|sgemm|float32|64x64x64|cfgh": {"config": 2, "name": "n2"}},
                        path)
    assert gks_main(["autotune", "--kernel", "sgemm", "--show", "--cache", str(path)]) == 0
    assert "n2 (config 2)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        gks_main(["autotune", "--kernel", "no_such_gemm"])
    assert "invalid choice: 'no_such_gemm'" in capsys.readouterr().err


def test_triton_kernels_are_keyed_apart_from_the_cuda_ones():
    import gks.triton

    assert tables.cache_kernel("cuda", "sgemm") == "sgemm"  # the shipped CUDA keys stay valid
    assert tables.cache_kernel("triton", "sgemm") == "triton.sgemm"
    assert tables.split_kernel("triton.int8_gemm") == ("triton", "int8_gemm")
    assert tables.split_kernel("gemm") == ("cuda", "gemm")
    assert tables.kernel_config_names("triton.wmma_gemm") == tuple(gks.triton.gemm_config_names("wmma_gemm"))
    assert autotune._op("triton.sgemm") is gks.triton.sgemm


def test_pallas_sgemm_is_tunable_and_looked_up_by_a_jax_made_identity(tmp_path, monkeypatch):
    import gks.pallas
    from gks.pallas import _bridge

    assert tables.kernel_config_names("pallas.sgemm") == tuple(gks.pallas.sgemm_config_names())
    assert autotune._op("pallas.sgemm") is _bridge.sgemm  # torch in, torch out, as tune_one needs
    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    tables._entries.cache_clear()
    try:
        chash = tables._kernel_hash("pallas.sgemm")
        tables.save_cache({tables.cache_key(IDENTITY, "pallas.sgemm", "float32", (128, 128, 128), chash):
                             {"config": 2}})
        assert tables.lookup_for(IDENTITY, "pallas.sgemm", "float32", (100, 120, 128)) == 2
        assert tables.lookup_for(IDENTITY, "pallas.sgemm", "float32", (100, 120, 129)) is None
        assert tables.lookup_for(IDENTITY, "triton.sgemm", "float32", (100, 120, 128)) is None
    finally:
        tables._entries.cache_clear()


def test_cli_refuses_a_kernel_the_backend_cannot_tune(capsys):
    assert autotune.main(["--backend", "triton", "--kernel", "gemm"]) == 2
    err = capsys.readouterr().err
    assert "the triton backend has no configs of 'gemm' to tune" in err
    assert "Tunable with --backend triton: flash_attention_fwd, gemm_fp8, int8_gemm, sgemm, wmma_gemm" in err
    # every registry op is accepted and answered: tuned, or told why not
    assert autotune.main(["--kernel", "quantize_int8"]) == 2
    assert "no configs of 'quantize_int8' to tune: its launch plan" in capsys.readouterr().err


def test_every_registry_op_is_tunable_or_has_a_reason():
    from gks import registry

    for spec in registry.ops():
        for backend in spec.backends:
            if spec.name in autotune.tunable_ops(backend.name):
                continue
            assert spec.name in autotune.untunable_reason(backend.name, spec.name)


def test_cuda_row_ops_and_attention_tune_their_specs_configs():
    from gks import registry

    for op in ("rmsnorm", "softmax", "softmax_rmsnorm", "flash_attention_fwd"):
        assert op in autotune.tunable_ops("cuda")
        names = tables.kernel_config_names(op)
        assert names == tuple(c["name"] for c in registry.get(op).configs) and len(names) >= 2


def test_triton_attention_tunes_its_tile_configs():
    import gks.triton

    names = tables.kernel_config_names("triton.flash_attention_fwd")
    assert names == tuple(gks.triton.flash_attention_fwd_config_names()) and len(names) >= 2
    assert autotune._op("triton.flash_attention_fwd") is gks.triton.flash_attention_fwd
    assert tables.kernel_bucket("triton.flash_attention_fwd", (2, 16, 16, 4000, 4000, 128, 1)) == (
        2, 16, 16, 4096, 4096, 128, 1)


def test_pallas_attention_tunes_its_block_shapes():
    import gks.pallas
    from gks.pallas import _bridge

    names = tables.kernel_config_names("pallas.flash_attention_fwd")
    assert names == tuple(gks.pallas.flash_attention_fwd_config_names()) and len(names) >= 2
    assert autotune._op("pallas.flash_attention_fwd") is _bridge.flash_attention_fwd


def test_cli_argument_errors_come_before_any_gpu_check(capsys):
    with pytest.raises(SystemExit) as e:
        autotune.main(["--kernel", "rmsnorm", "--shapes", "4096x4096x4096"])
    assert e.value.code == 2
    assert "argument --shapes: '4096x4096x4096' is not a shape of rmsnorm, whose dims are MxN" in (
        capsys.readouterr().err)
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "rmsnorm", "--shapes", "4096xN"])
    assert "not like 4096x4096x4096" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "sgemm", "--dtype", "float16"])
    assert "argument --dtype: sgemm has no dtype 'float16' (it has float32)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        autotune.main(["--all", "--shapes", "64x64"])
    assert "needs one --kernel" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        autotune.main([])
    assert "one of the arguments --kernel, --all or --show is required" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        autotune.main(["--kernel", "gemm", "--all"])
    assert "not allowed with argument" in capsys.readouterr().err


@requires_gpu
def test_tune_triton_writes_an_entry_its_launch_then_uses(tmp_path, monkeypatch):
    import torch

    import gks.triton
    from gks.triton import gemm as _gemm

    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    tables._entries.cache_clear()
    try:
        assert autotune.main(["--backend", "triton", "--kernel", "sgemm", "--shapes", "200x300x400",
                              "--iters", "3", "--reps", "2"]) == 0
        (key, entry), = tables.load_cache().items()
        assert "|triton.sgemm|float32|256x512x512|" in key
        if entry["config"] == tables.DEFAULT:
            pytest.skip("the heuristic's own choice won: nothing tuned for the launch to take")
        assert tables.lookup("triton.sgemm", "float32", (200, 300, 400), torch.cuda.current_device()) == entry["config"]
        a = torch.randn(200, 400, device="cuda")
        b = torch.randn(400, 300, device="cuda")
        # The launch takes the tuned block shape and split (a split-K config's result may
        # differ in the last bits from run to run, so the launch itself is the witness).
        launched = []
        real_launch = _gemm._launch_split
        monkeypatch.setattr(_gemm, "_launch_split",
                            lambda *args: launched.append(args[6:8]) or real_launch(*args))
        out = gks.triton.sgemm(a, b)
        spec = _gemm.CONFIGS["ieee"][entry["config"]]
        assert launched == [(_gemm._block(spec), spec.split)]
        torch.testing.assert_close(out, gks.triton.sgemm(a, b, config=entry["config"]))
    finally:
        tables._entries.cache_clear()


def test_triton_split_k_entry_gives_way_under_deterministic_algorithms(monkeypatch):
    import torch

    from gks.runtime import tables
    from gks.triton import gemm as _gemm

    split = next(i for i, name in enumerate(_gemm.config_names("sgemm")) if "_k" in name)
    whole = next(i for i, name in enumerate(_gemm.config_names("sgemm")) if "_k" not in name)
    a, c = torch.zeros(4, 8), torch.zeros(4, 5)
    was = torch.are_deterministic_algorithms_enabled()
    try:
        for tuned in (split, whole):
            monkeypatch.setattr(tables, "resolve_config", lambda *args, **kw: tuned)
            torch.use_deterministic_algorithms(False)
            assert _gemm.tuned_config("sgemm", a, c, 4, 5, 8) == tuned
            torch.use_deterministic_algorithms(True)
            assert _gemm.tuned_config("sgemm", a, c, 4, 5, 8) == (-1 if tuned == split else tuned)
    finally:
        torch.use_deterministic_algorithms(was)


@requires_gpu
@requires_native
def test_tune_writes_an_entry_the_op_then_uses(tmp_path, monkeypatch):
    import torch

    import gks

    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    tables._entries.cache_clear()
    assert autotune.main(["--kernel", "sgemm", "--shapes", "200x300x400", "--iters", "3", "--reps", "2"]) == 0
    entries = tables.load_cache()
    assert len(entries) == 1
    (key, entry), = entries.items()
    assert "|sgemm|float32|256x512x512|" in key
    expected = None if entry["config"] == tables.DEFAULT else entry["config"]
    assert tables.lookup("sgemm", "float32", (200, 300, 400), torch.cuda.current_device()) == expected
    a = torch.randn(200, 400, device="cuda")
    b = torch.randn(400, 300, device="cuda")
    torch.testing.assert_close(gks.sgemm(a, b), gks.sgemm(a, b, config=entry["config"]), rtol=0, atol=0)
    tables._entries.cache_clear()


@requires_gpu
@requires_native
@pytest.mark.parametrize("timing", autotune.TIMINGS)
def test_each_timing_times_every_config_and_records_itself(tmp_path, timing):
    path = tmp_path / "c.json"
    assert autotune.main(["--kernel", "wmma_gemm", "--dtype", "float16", "--shapes", "100x130x70",
                          "--timing", timing, "--reps", "2", "--iters", "3", "--cache", str(path)]) == 0
    (entry,) = tables.load_cache(path).values()
    assert entry["timing"] == timing
    assert len(entry["times_ms"]) == len(tables.kernel_config_names("wmma_gemm"))
    assert all(t is not None and t > 0 for t in (*entry["times_ms"], entry["default_ms"]))
    assert entry["config"] == autotune.pick_winner(entry["times_ms"], default_ms=entry["default_ms"])


def test_gemm_dims_reads_m_n_k_and_names_a_bad_operand():
    import torch

    a, b = torch.empty(5, 7), torch.empty(7, 3)
    assert dims.gemm_dims("gks.gemm", a, b) == (5, 3, 7)
    assert dims.gemm_dims("gks.gemm", a.t(), b.t()) == (7, 7, 5)  # layout is the C++ API's business
    with pytest.raises(ValueError, match=r"gks.gemm: argument 'a' must be a 2-D matrix, got 1 dims \(shape \[7\]\)"):
        dims.gemm_dims("gks.gemm", a[0], b)
    with pytest.raises(ValueError, match=r"argument 'b_q' must be a 2-D matrix, got 3 dims"):
        dims.gemm_dims("gks.int8_gemm", a, b[None], "a_q", "b_q")
    with pytest.raises(TypeError, match=r"gks.sgemm: argument 'b' must be a torch.Tensor, got list"):
        dims.gemm_dims("gks.sgemm", a, [[1.0]])


@requires_gpu
@requires_native
@pytest.mark.parametrize("op, shape, launcher", [
    ("rmsnorm", "300x1000", "rmsnorm_out"),
    ("softmax", "300x1000", "softmax_out"),
    ("softmax_rmsnorm", "300x1000", "softmax_rmsnorm_out"),
    ("flash_attention_fwd", "1x2x2x128x128x64x1", "flash_attention_fwd_out"),
])
def test_tune_a_row_op_or_attention_writes_an_entry_the_op_then_uses(tmp_path, monkeypatch, op, shape,
                                                                     launcher):
    import torch

    import gks
    from gks import registry

    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    tables._entries.cache_clear()
    try:
        spec = registry.get(op)
        dtype = spec.dtypes[-1]
        assert autotune.main(["--kernel", op, "--dtype", dtype, "--shapes", shape, "--reps", "2",
                              "--iters", "3"]) == 0
        (key, entry), = tables.load_cache().items()
        dims = tuple(int(d) for d in shape.split("x"))
        bucket = "x".join(map(str, tables.kernel_bucket(op, dims)))
        assert f"|{op}|{dtype}|{bucket}|" in key
        assert entry["default_ms"] is not None and sum(t is not None for t in entry["times_ms"]) >= 1
        # The op's call with config=-1 hands the tuned config to the library (-1 where the
        # heuristic's own choice won).
        seen = []
        real = getattr(gks.cuda, launcher)
        monkeypatch.setattr(gks.cuda, launcher, lambda *args: seen.append(args[-1]) or real(*args))
        getattr(gks, op)(**spec.make_inputs(dims, dtype, "cuda", 1))
        torch.cuda.synchronize()
        assert seen == [entry["config"]]
    finally:
        tables._entries.cache_clear()
