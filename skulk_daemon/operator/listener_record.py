"""Which port the running node's operator listener uses, for the host tool on the same host.

The daemon knows its operator port (``--operator-api-port``, ``SKULK_OPERATOR_API_PORT``,
the port ``configure-relay`` stored, the default, or the kernel's choice for 0); the
host tool that ``skulk operator pair`` runs is another process and knows none of the
first two. So the daemon publishes the port in ``<data_dir>/operator/listener.json``
(owner-only, written atomically, removed when the listener closes), the way
jupyter_client's connection files tell a client where the kernel listens, and the
pairing package names that port.
"""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Final

import msgspec

from skulk_host.fsutil import OWNER_ONLY_FILE, atomic_write, ensure_private_dir

RECORD_NAME: Final = "listener.json"
# How long ``pair`` waits for a running node on port 0 to bind (it polls the store once a
# second after ``pair`` initializes it; see listener.POLL_SECONDS).
BIND_WAIT_SECONDS: Final = 8.0
_POLL_SECONDS: Final = 0.1


class ListenerRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A running daemon's operator port; ``port`` is ``None`` until a port-0 bind."""

    pid: int
    port: int | None


class ListenerNotBound(Exception):
    """The running node chose port 0 and has not bound its operator listener yet."""


_DECODER = msgspec.json.Decoder(ListenerRecord)


def record_path(directory: Path) -> Path:
    return directory / RECORD_NAME


def publish(directory: Path, port: int | None) -> None:
    """Record this process's operator port (``None``: not known until it binds)."""
    ensure_private_dir(directory)
    record = ListenerRecord(pid=os.getpid(), port=port)
    atomic_write(record_path(directory), msgspec.json.encode(record), OWNER_ONLY_FILE)


def withdraw(directory: Path) -> None:
    """Remove this process's record (another process's record is left alone)."""
    current = read(directory)
    if current is not None and current.pid == os.getpid():
        with contextlib.suppress(FileNotFoundError):
            record_path(directory).unlink()


def read(directory: Path) -> ListenerRecord | None:
    """The record of a daemon that is still running, else ``None`` (none, stale, damaged)."""
    try:
        record = _DECODER.decode(record_path(directory).read_bytes())
    except (OSError, msgspec.DecodeError):
        return None
    return record if _alive(record.pid) else None


def running_port(directory: Path, *, wait_s: float = BIND_WAIT_SECONDS) -> int | None:
    """The running daemon's operator port, or ``None`` when no daemon is running.

    A daemon on port 0 that is about to bind (it just became a gateway) is waited for up
    to ``wait_s``; still unbound after that raises :class:`ListenerNotBound`.
    """
    deadline = time.monotonic() + wait_s
    while True:
        record = read(directory)
        if record is None:
            return None
        if record.port is not None:
            return record.port
        if time.monotonic() >= deadline:
            raise ListenerNotBound(
                "the running node's operator listener (port 0) has not bound yet; "
                "see the node's log, then run `skulk operator pair` again"
            )
        time.sleep(_POLL_SECONDS)


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, but not ours to signal
        return True
    return True
