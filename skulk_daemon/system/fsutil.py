"""Small file-system helpers: atomic owner-only writes and private directories."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

OWNER_ONLY_FILE = 0o600
OWNER_ONLY_DIR = 0o700


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) owner-only; refuse clearly when it cannot be written."""
    path.mkdir(parents=True, exist_ok=True, mode=OWNER_ONLY_DIR)
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"{path} is not writable by this user")


def atomic_write(path: Path, data: bytes, mode: int = OWNER_ONLY_FILE) -> None:
    """Write ``data`` so that readers see the old file or the new one, never a mix.

    Temp file in the same directory, fsync, rename, fsync the directory.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    dir_fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
