# SPDX-License-Identifier: Apache-2.0
"""Loads the gks CUDA library (the apache-tvm-ffi module built from csrc/).

The module is found, in order: at $GKS_LIBRARY; in this package's lib/ folder (a wheel or
a regular install); in gks/lib/ under any sys.path entry (an editable install puts the
built library in site-packages while the Python files stay in the source tree).
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

LIBRARY_NAME = "libgks_tvm_ffi.so"


class NativeLibraryUnavailable(RuntimeError):
    """The CUDA backend was not built (GKS_SKIP_CUDA_BUILD=1) or cannot be loaded."""


def library_path() -> Path | None:
    """Where the native library is, or None if it was not built."""
    env = os.environ.get("GKS_LIBRARY")
    if env:
        return Path(env)
    candidates = [Path(__file__).parent / "lib" / LIBRARY_NAME]
    candidates += [Path(p) / "gks" / "lib" / LIBRARY_NAME for p in sys.path if p]
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
