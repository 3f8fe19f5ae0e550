# SPDX-License-Identifier: Apache-2.0
"""Loads the gks CUDA library (the apache-tvm-ffi module built from csrc/).

The module is found, in order: at $GKS_LIBRARY; in the lib/ folder of any directory of
this package's __path__ (a wheel or regular install has one; an editable install has two,
the source tree and the site-packages folder that holds the built library).
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

LIBRARY_NAME = "libgks_tvm_ffi.so"


class NativeLibraryUnavailable(RuntimeError):
    """The CUDA backend was not built (GKS_SKIP_CUDA_BUILD=1) or cannot be loaded."""


def library_path() -> Path | None:
    """Where the native library is, or None if it was not built."""
    env = os.environ.get("GKS_LIBRARY")
    if env:
        return Path(env)
    import gks

    candidates = [Path(p) / "lib" / LIBRARY_NAME for p in gks.__path__]
    return next((c for c in candidates if c.is_file()), None)


@functools.cache
def module():
    """The loaded tvm-ffi module; raises NativeLibraryUnavailable with the reason."""
    path = library_path()
    if path is None or not path.is_file():
        raise NativeLibraryUnavailable(
            "the gks CUDA backend is not built: install gks without GKS_SKIP_CUDA_BUILD "
            "(pip install -e .) or point GKS_LIBRARY at libgks_tvm_ffi.so"
        )
    import tvm_ffi

    return tvm_ffi.load_module(str(path))


def available() -> bool:
    """True when the native library can be loaded (a GPU is not needed for that)."""
    try:
        module()
    except (NativeLibraryUnavailable, OSError, RuntimeError):
        return False
    return True


@functools.cache
def config_table(op: str) -> tuple[dict, ...]:
    """The config table the library compiles for op's CUDA kernel, in index order (the
    `config` argument indexes it): one record per config with the C++ struct's fields
    (lists become tuples). The C++ table is the only copy; raises NativeLibraryUnavailable
    when the library is not built."""

    def freeze(record: dict) -> dict:
        return {k: tuple(v) if isinstance(v, list) else v for k, v in record.items()}

    try:
        export = getattr(module(), f"{op}_configs")
    except AttributeError:
        raise RuntimeError(
            f"gks: the library at {library_path()} exports no config table for '{op}' "
            f"({op}_configs): it was built from other sources than this package's; rebuild it "
            "(pip install -e ., or scripts/setup.sh)"
        ) from None
    return tuple(freeze(r) for r in json.loads(str(export())))
