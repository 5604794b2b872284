"""The file manifest kept beside downloaded or imported bytes: ``.skulk/files.json``.

One entry per file: its repo-relative path, size and SHA-256, recorded after the
bytes were verified (a download) or hashed (an import). Written atomically, before
the card sidecar, so a card record always stands beside a manifest of its bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from skulk_daemon.models.sidecar import SIDECAR_DIR
from skulk_host.fsutil import atomic_write

MANIFEST_NAME: Final = "files.json"
MANIFEST_VERSION: Final = 1
_HASH_CHUNK: Final = 4 * 1024 * 1024


class ManifestFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    size: int
    sha256: str
    linked_from: str | None = None
    """For an import: the file the bytes were hard-linked from."""


class FileManifest(msgspec.Struct, frozen=True, kw_only=True):
    version: int
    files: tuple[ManifestFile, ...]


def manifest_path(model_dir: Path) -> Path:
    return model_dir / SIDECAR_DIR / MANIFEST_NAME


def write_manifest(model_dir: Path, files: tuple[ManifestFile, ...]) -> None:
    data = msgspec.json.encode(FileManifest(version=MANIFEST_VERSION, files=files))
    atomic_write(manifest_path(model_dir), data, mode=0o644)


def read_manifest(model_dir: Path) -> FileManifest | None:
    try:
        return msgspec.json.decode(manifest_path(model_dir).read_bytes(), type=FileManifest)
    except (OSError, msgspec.DecodeError):
        return None


def file_digests(path: Path, progress: Callable[[int], None] | None = None) -> tuple[str, str]:
    """(SHA-256, git blob SHA-1) of a file, in one pass."""
    sha256 = hashlib.sha256()
    git = hashlib.sha1(b"blob %d\0" % path.stat().st_size, usedforsecurity=False)
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            sha256.update(chunk)
            git.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return sha256.hexdigest(), git.hexdigest()
