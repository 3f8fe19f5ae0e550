# SPDX-License-Identifier: Apache-2.0
"""A tuning table can never break an op: for every tunable op of every backend, an entry for
the call's own shape that is out of range, not an integer or not an object is ignored with
one warning (the op's heuristic runs), a bad file likewise, and tuning runs that write the
cache at once keep each other's entries. Runs without a GPU (lookup_for takes the device
identity as an argument)."""

from __future__ import annotations

import multiprocessing
import warnings

import pytest

from gks import registry
from gks.runtime import tables

IDENTITY = {"gpu": "NVIDIA H200", "cc": "9.0", "driver": "580.159.04", "gks": "0.1.0"}


def _tunable():
    for backend in registry.BACKEND_MODULES:
        for op in registry.ops_with(backend, tunable=True):
            spec = registry.get(op)
            yield pytest.param(tables.cache_kernel(backend, op), spec.bench_shapes[0], spec.dtypes[-1],
                               id=f"{backend}-{op}")


@pytest.fixture
def user_cache(tmp_path, monkeypatch):
    """The user's cache in tmp_path, no shipped tables, fresh memories."""
    monkeypatch.setenv("GKS_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(tables, "SHIPPED_DIR", tmp_path / "none")
    monkeypatch.setattr(tables, "_WARNED", set())
    tables._entries.cache_clear()
    tables._shipped.cache_clear()
    yield tmp_path
    tables._entries.cache_clear()
    tables._shipped.cache_clear()


def _key(kernel, dtype, shape):
    return tables.cache_key(IDENTITY, kernel, dtype, tables.kernel_bucket(kernel, shape),
                            tables.config_hash(tables.kernel_config_names(kernel)))


BAD_ENTRIES = {
    "past-the-end": lambda count: {"config": count},
    "below-default": lambda count: {"config": -2},
    "huge": lambda count: {"config": 2**32},
    "float": lambda count: {"config": 1.0},
    "string": lambda count: {"config": "1"},
    "bool": lambda count: {"config": True},
    "missing": lambda count: {"name": "x"},
    "not-an-object": lambda count: [1],
    "null": lambda count: None,
}


@pytest.mark.parametrize("bad", sorted(BAD_ENTRIES))
@pytest.mark.parametrize("kernel,shape,dtype", list(_tunable()))
def test_a_bad_entry_is_ignored_with_one_warning(user_cache, kernel, shape, dtype, bad):
    count = len(tables.kernel_config_names(kernel))
    tables.save_cache({_key(kernel, dtype, shape): BAD_ENTRIES[bad](count)})
    with pytest.warns(RuntimeWarning, match="ignoring the tuned entry .* the ops run their own heuristic"):
        assert tables.lookup_for(IDENTITY, kernel, dtype, shape) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once, not on every call
        assert tables.lookup_for(IDENTITY, kernel, dtype, shape) is None


@pytest.mark.parametrize("kernel,shape,dtype", list(_tunable()))
def test_a_good_entry_is_used(user_cache, kernel, shape, dtype):
    last = len(tables.kernel_config_names(kernel)) - 1
    tables.save_cache({_key(kernel, dtype, shape): {"config": last}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tables.lookup_for(IDENTITY, kernel, dtype, shape) == last


@pytest.mark.parametrize("text", ["{not json", '{"format": 1, "entries": [1]}', '{"format": 99}', "[]"])
def test_a_bad_file_is_ignored_with_one_warning(user_cache, text):
    tables.cache_path().write_text(text)
    kernel, shape, dtype = next(iter(_tunable())).values
    with pytest.warns(RuntimeWarning, match="ignoring the tuning table"):
        assert tables.lookup_for(IDENTITY, kernel, dtype, shape) is None


def _writer(path, worker, count):
    for i in range(count):
        tables.update_cache({f"key-{worker}-{i}": {"config": i}}, path)


def test_concurrent_writers_keep_each_others_entries(tmp_path):
    path = tmp_path / "autotune.json"
    tables.save_cache({"old": {"config": 0}}, path)
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(path, w, 25)) for w in range(4)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(60)
        assert p.exitcode == 0
    entries = tables.load_cache(path)
    assert set(entries) == {"old"} | {f"key-{w}-{i}" for w in range(4) for i in range(25)}
    assert not list(tmp_path.glob(".autotune.json.*.tmp"))  # every temporary file renamed
    assert tables.update_cache({}, path, remove=["old"]).keys() == entries.keys() - {"old"}
