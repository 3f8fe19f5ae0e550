# SPDX-License-Identifier: Apache-2.0
"""The pinned upstream implementations (reference-dependencies.json, at the checkout's root):
which package and exact version stands beside which gks op, and whether it is here.

A package counts as installed only at its pinned version: another version is missing, so
neither the tests nor the benchmark compare against something other than what is pinned.
The specs name their upstream references as peers with a ``package`` (registry.Peer).
"""

from __future__ import annotations

import functools
import json
from importlib import metadata
from pathlib import Path
from typing import Any

LOCK_FILE = Path(__file__).resolve().parent.parent / "reference-dependencies.json"
INSTALL_HINT = "scripts/install_reference_dependencies.py installs the pinned set"


@functools.cache
def lock() -> dict[str, dict[str, Any]]:
    """package -> {version, module, gpus, references, needs}."""
    return json.loads(LOCK_FILE.read_text())["packages"]


def pinned(package: str) -> str:
    try:
        return lock()[package]["version"]
    except KeyError:
        raise KeyError(f"'{package}' is not in {LOCK_FILE.name} (known: {', '.join(lock())})") from None


def missing(package: str) -> str | None:
    """None when `package` is installed at its pinned version; else why not, in words."""
    want = pinned(package)
    try:
        have = metadata.version(package)
    except metadata.PackageNotFoundError:
        return f"{package}=={want} is not installed ({INSTALL_HINT})"
    if have != want:
        return f"{package} {have} is installed, not the pinned {want} ({INSTALL_HINT})"
    return None


def requirements(packages: list[str] | None = None) -> list[str]:
    """The exact pip requirements of the pinned set (or of some of its packages)."""
    chosen = packages or list(lock())
    out: list[str] = []
    for name in chosen:
        entry = lock()[name]
        for req in (f"{name}=={entry['version']}", *entry["needs"]):
            if req not in out:
                out.append(req)
    return out
