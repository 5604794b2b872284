"""Owner-only files the CLI creates: pairing credentials and QR code images."""

from __future__ import annotations

import os
from pathlib import Path

PRIVATE_FILE_MODE = 0o600


def write_new_private(path: Path, content: bytes) -> None:
    """Create ``path`` owner-only (0600), write ``content`` and fsync it.

    The file is created with ``O_EXCL``: anything already there, a symlink included,
    raises :class:`FileExistsError` and is left alone. A write that fails half-way
    removes the file it created.
    """
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE)
    try:
        # The mode given to open() is masked by the umask, which can only remove
        # bits; set it exactly in case the umask was unusual.
        os.fchmod(fd, PRIVATE_FILE_MODE)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise
    os.close(fd)
