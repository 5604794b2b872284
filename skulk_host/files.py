"""Writing a file so that readers see the old content or the new, never a mix, and
holding a lock file that other processes honour.

The one implementation the daemon, the CLI and the plugin service share (the CLI
may not import the daemon, so it lives here).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Final

OWNER_ONLY_FILE: Final = 0o600
LOCK_POLL_SECONDS: Final = 0.05


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


@contextlib.contextmanager
def file_lock(path: Path, wait: float | None) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path`` (created owner-only, never through a link);
    yields whether it is held: ``wait`` seconds at most (0: one try), or until it is
    free when ``None``. An flock, so other processes honour it and it dies with its
    holder."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, OWNER_ONLY_FILE)
    try:
        if wait is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        else:
            deadline = time.monotonic() + wait
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(LOCK_POLL_SECONDS)
        yield True
    finally:
        os.close(fd)
