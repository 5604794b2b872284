"""Calling the manager: one request per connection, the response read to its end."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any, Final

from skulk_core.plugins.errors import refuse
from skulk_daemon.plugins.manager.protocol import MAX_RESPONSE_BYTES, REQUEST_DEADLINE_SECONDS
from skulk_daemon.plugins.manager.server import socket_path

CLIENT_TIMEOUT_SECONDS: Final = REQUEST_DEADLINE_SECONDS + 5.0


def call_raw(root: Path, payload: bytes, timeout: float = CLIENT_TIMEOUT_SECONDS) -> dict[str, Any]:
    """Send ``payload`` (one JSON request) and return the decoded response."""
    path = socket_path(root)
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise refuse("unreachable", "No manager answers on this root (run its serve).") from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise refuse(
            "source_invalid", "The manager socket is not an owner-only socket of this user."
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            # NOTE: a manager that refuses at once (busy) may close before reading the
            # request; its answer is still there to read, so a failed send is not fatal.
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(payload.rstrip(b"\n") + b"\n")
                sock.shutdown(socket.SHUT_WR)
            body = bytearray()
            while chunk := sock.recv(65536):
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES + 1:
                    raise refuse("too_large", "The manager's response is over its bound.")
        except TimeoutError:
            raise refuse("timeout", "The manager did not answer in time.") from None
        except OSError:
            raise refuse("unreachable", "The manager did not answer.") from None
    decoded: dict[str, Any] = json.loads(body)
    return decoded


def call(
    root: Path, request: dict[str, Any], timeout: float = CLIENT_TIMEOUT_SECONDS
) -> dict[str, Any]:
    return call_raw(root, json.dumps(request).encode(), timeout)
