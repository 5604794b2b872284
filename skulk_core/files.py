"""Writing a file so that readers see the old content or the new, never a mix.

The one implementation the daemon, the CLI and the plugin service share (the CLI
may not import the daemon, so it lives here).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Final

OWNER_ONLY_FILE: Final = 0o600


def atomic_write(path: Path, data: bytes, mode: int = OWNER_ONLY_FILE) -> None:
    """``data`` to ``path`` with permissions ``mode``: a temp file beside it, fsync,
    rename, then fsync the directory so the rename survives a crash."""
    directory = path.parent if str(path.parent) else Path()
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(directory)


def fsync_dir(path: Path) -> None:
    """Make a directory's entries (a rename into it) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
