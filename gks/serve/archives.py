# SPDX-License-Identifier: Apache-2.0
"""Uploaded source archives (a .tar.gz of a checkout), kept by content: their name is their
SHA-256, so an archive uploaded twice is stored once and a job names exactly what it runs.
An archive is checked when it arrives (a gzip tar whose members are files and directories
inside it: no absolute paths, no '..', no links or devices) and extracted with tarfile's
'data' filter when a job runs."""

from __future__ import annotations

import hashlib
import io
import re
import tarfile
from pathlib import Path

NAME = re.compile(r"^[0-9a-f]{64}$")


class BadArchive(ValueError):
    pass


class Archives:
    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)

    def add(self, data: bytes) -> str:
        try:
            with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
                members = tar.getmembers()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise BadArchive(f"not a gzip tar archive ({type(e).__name__}: {e})") from None
        for m in members:
            parts = Path(m.name).parts
            if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                raise BadArchive(f"member '{m.name}' is not a plain file or folder inside the archive")
        name = hashlib.sha256(data).hexdigest()
        path = self.folder / f"{name}.tar.gz"
        if not path.exists():
            tmp = path.with_suffix(f".tmp{id(data)}")
            tmp.write_bytes(data)
            tmp.replace(path)
        return name

    def path(self, name: str) -> Path | None:
        if not NAME.match(name or ""):
            return None
        p = self.folder / f"{name}.tar.gz"
        return p if p.is_file() else None

    def extract(self, name: str, into: Path) -> None:
        path = self.path(name)
        if path is None:
            raise BadArchive(f"no archive {name}")
        with tarfile.open(path, mode="r:gz") as tar:
            tar.extractall(into, filter="data")
