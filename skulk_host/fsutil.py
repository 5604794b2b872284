"""Small file-system helpers: atomic owner-only writes and private directories."""

from __future__ import annotations

import os
from pathlib import Path

from skulk_host.files import OWNER_ONLY_FILE, fsync_dir
from skulk_host.files import atomic_write as _atomic_write

__all__ = ["OWNER_ONLY_DIR", "OWNER_ONLY_FILE", "atomic_write", "ensure_private_dir", "fsync_dir"]

OWNER_ONLY_DIR = 0o700


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only; refuse clearly when it cannot be written."""
    path.mkdir(parents=True, exist_ok=True, mode=OWNER_ONLY_DIR)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"{path} is not writable by this user")


def atomic_write(path: Path, data: bytes, mode: int = OWNER_ONLY_FILE) -> None:
    """Write ``data`` so that readers see the old file or the new one, never a mix
    (:func:`skulk_host.files.atomic_write`), creating the parent directories first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_write(path, data, mode)
