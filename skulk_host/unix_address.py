"""Unix socket addresses that fit the kernel's ``sun_path``.

A socket's path may be longer than the kernel accepts in an address (108 bytes on Linux,
104 on macOS): a manager root in a deep home directory, or a plugin's installation under
it, easily passes that, and ``bind``/``connect`` then fail with "AF_UNIX path too long".
:func:`addressable` gives a name for the same file that fits: the path itself when it is
short enough, otherwise (Linux) the socket's name under ``/proc/self/fd/<n>``, ``n`` a
descriptor of its directory held open while the caller binds or connects. The file is
the same one, so its owner-only mode and the checks made on the long path still hold."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final

SUN_PATH_BYTES: Final = 104 if sys.platform == "darwin" else 108
"""The size of ``sockaddr_un.sun_path``, its terminating NUL included."""


@contextlib.contextmanager
def addressable(path: Path) -> Iterator[str]:
    """A name for ``path`` that ``bind`` and ``connect`` accept, valid inside the block."""
    if len(os.fsencode(path)) < SUN_PATH_BYTES:
        yield str(path)
        return
    if not sys.platform.startswith("linux"):
        raise OSError(
            f"the socket path {path} is longer than this platform's {SUN_PATH_BYTES - 1}"
            " bytes: choose a shorter root"
        )
    directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


async def owner_only_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    path: Path,
    *,
    limit: int | None = None,
) -> asyncio.Server:
    """Listen on ``path``, a socket only its owner may open (0600). The umask makes it
    owner-only from the moment it exists; the chmod after bind is belt and braces for
    platforms that ignore the umask on sockets."""
    previous = os.umask(0o177)
    try:
        with addressable(path) as address:
            if limit is None:
                server = await asyncio.start_unix_server(handle, path=address)
            else:
                server = await asyncio.start_unix_server(handle, path=address, limit=limit)
    finally:
        os.umask(previous)
    os.chmod(path, 0o600)
    return server
