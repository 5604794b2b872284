"""Calling the manager: one request per connection, the response read to its end.

The one client of the manager's socket: the daemon's adapter (``skulk_daemon.plugins.
access``) and the terminal (``skulk_cli.plugin_service``) both call it; each names, in
``missing``, what its reader does when no manager answers.
:func:`check_build` is the host's side of ``manager_build_differs``: a ``list`` answer
naming a staged manager build other than the host's live one is refused.
:func:`call_with_peer` also returns the answering process's id (the socket's peer
credentials), so the host can stop exactly the manager that answered."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
import struct
import sys
from pathlib import Path
from typing import Any, Final

from skulk_core.plugins.errors import refuse
from skulk_host.plugin_manager.protocol import (
    MAX_RESPONSE_BYTES,
    REQUEST_DEADLINE_SECONDS,
    socket_path,
)
from skulk_host.plugin_service.runtime import ManagerBuildDiffers
from skulk_host.unix_address import addressable

CLIENT_TIMEOUT_SECONDS: Final = REQUEST_DEADLINE_SECONDS + 5.0
NO_MANAGER: Final = "No manager answers on this root (run its serve)."
"""The refusal when nothing listens on the root, as the host's API caller reads it."""
_SOL_LOCAL: Final = 0
_LOCAL_PEERPID: Final = 0x002
"""macOS ``<sys/un.h>``: the peer's process id on a connected Unix socket."""


def _peer_pid(sock: socket.socket) -> int | None:
    """The process that listens on the socket ``sock`` is connected to, when this
    platform says (and, on Linux, only when it is this user's)."""
    if sys.platform.startswith("linux"):
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _ = struct.unpack("3i", raw)
        return pid if uid == os.getuid() and pid > 0 else None
    if sys.platform == "darwin":
        pid = sock.getsockopt(_SOL_LOCAL, _LOCAL_PEERPID)
        return pid if pid > 0 else None
    return None


def call_raw(
    root: Path,
    payload: bytes,
    timeout: float = CLIENT_TIMEOUT_SECONDS,
    *,
    missing: str = NO_MANAGER,
) -> dict[str, Any]:
    """Send ``payload`` (one JSON request) and return the decoded response; ``missing``
    is the refusal's message when no manager listens on ``root``."""
    return _exchange(root, payload, timeout, missing)[0]


def call_with_peer(
    root: Path, request: dict[str, Any], timeout: float = CLIENT_TIMEOUT_SECONDS
) -> tuple[dict[str, Any], int | None]:
    """The manager's answer to ``request`` and the id of the process that answered."""
    return _exchange(root, json.dumps(request).encode(), timeout, NO_MANAGER)


def _exchange(
    root: Path, payload: bytes, timeout: float, missing: str
) -> tuple[dict[str, Any], int | None]:
    path = socket_path(root)
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise refuse("unreachable", missing) from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise refuse(
            "source_invalid", "The manager socket is not an owner-only socket of this user."
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            with addressable(path) as address:
                sock.connect(address)
            pid = _peer_pid(sock)
            # NOTE: a manager that refuses at once (busy) may close before reading the
            # request; its answer is still there to read, so a failed send is not fatal.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(payload.rstrip(b"\n") + b"\n")
                sock.shutdown(socket.SHUT_WR)
            body = _read_answer(sock)
        except TimeoutError:
            raise refuse("timeout", "The manager did not answer in time.") from None
        except OSError:
            raise refuse("unreachable", "The manager did not answer.") from None
    try:
        decoded = json.loads(body)
    except ValueError:
        raise refuse("malformed", "The manager's answer is not JSON.") from None
    if not isinstance(decoded, dict):
        raise refuse("malformed", "The manager's answer is not a JSON object.")
    return decoded, pid


def _read_answer(sock: socket.socket) -> bytearray:
    """The manager's one-line answer. A manager that refused a request it did not read to
    its end (an oversized one) closes with that request unread, and the kernel then
    resets this side after the answer: a whole line already read is still the answer."""
    body = bytearray()
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            if body.endswith(b"\n"):
                return body
            raise
        if not chunk:
            return body
        body += chunk
        if len(body) > MAX_RESPONSE_BYTES + 1:
            raise refuse("too_large", "The manager's response is over its bound.")


def call(
    root: Path, request: dict[str, Any], timeout: float = CLIENT_TIMEOUT_SECONDS
) -> dict[str, Any]:
    return call_raw(root, json.dumps(request).encode(), timeout)


def check_build(answer: dict[str, Any], host_build: str) -> None:
    """Refuse (:class:`ManagerBuildDiffers`) a manager whose ``list`` answer names a build
    other than ``host_build``. A manager running from a live environment names none."""
    built = manager_build(answer)
    if built is not None and built != host_build:
        raise ManagerBuildDiffers(host_build, built)


def manager_build(answer: dict[str, Any]) -> str | None:
    """The Skulk build a ``list`` answer names (``None`` from a live environment)."""
    result = answer.get("result") if answer.get("ok") else None
    built = result.get("build_sha256") if isinstance(result, dict) else None
    return built if isinstance(built, str) else None
