"""The terminal's side of the local manager's wire, in the CLI's own layer.

``skulk_cli`` never imports ``skulk_daemon``, so this module speaks the manager's
documented protocol itself: one JSON request per connection on the owner-only socket
``<manager root>/control.sock`` (16 KiB request, 256 KiB response), and the protected
connection record ``SKULK_CONFIG_HOME/managed-service/connection.json``
(``{"manager_root", "profile_id"}``, owner-only, no symbolic links) that the daemon
reads with the same checks (``skulk_host.plugin_manager.connection``).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import stat
from pathlib import Path
from typing import Any, Final

import msgspec

from skulk_core.plugins.errors import refuse
from skulk_host.files import atomic_write

SOCKET_NAME: Final = "control.sock"
CONNECTION_DIR: Final = "managed-service"
CONNECTION_FILE: Final = "connection.json"
MAX_REQUEST_BYTES: Final = 16 * 1024
MAX_RESPONSE_BYTES: Final = 256 * 1024
MAX_CONNECTION_BYTES: Final = 4096
CLIENT_TIMEOUT_SECONDS: Final = 35.0


class Connection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    manager_root: str
    profile_id: str


def private_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)


def write_connection(config_home: Path, connection: Connection) -> None:
    directory = config_home / CONNECTION_DIR
    private_dir(directory)
    atomic_write(directory / CONNECTION_FILE, msgspec.json.encode(connection))


def _protected(path: Path, kind: str) -> os.stat_result:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise refuse(
            "unreachable",
            "No local plugin manager is set up on this host: run skulk-plugin-service setup.",
        ) from None
    if stat.S_ISLNK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise refuse(
            "source_invalid",
            f"The manager connection {kind} must be an owner-only entry of this user, "
            "not a symbolic link.",
        )
    return info


def read_connection(config_home: Path) -> Connection:
    _protected(config_home / CONNECTION_DIR, "directory")
    path = config_home / CONNECTION_DIR / CONNECTION_FILE
    info = _protected(path, "file")
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONNECTION_BYTES:
        raise refuse("source_invalid", "The manager connection is not a small regular file.")
    try:
        connection = msgspec.json.decode(path.read_bytes(), type=Connection)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise refuse("malformed", "The manager connection record cannot be read.") from None
    if not Path(connection.manager_root).is_absolute():
        raise refuse("malformed", "The manager connection must name an absolute root.")
    return connection


def call_raw(
    manager_root: Path, payload: bytes, timeout: float = CLIENT_TIMEOUT_SECONDS
) -> dict[str, Any]:
    """Send one request to the manager under ``manager_root``; its decoded answer."""
    path = manager_root / SOCKET_NAME
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise refuse(
            "unreachable",
            "No plugin manager answers here: start it (skulk-plugin-service serve, or its "
            "service).",
        ) from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise refuse("source_invalid", "The manager socket is not an owner-only socket.")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(str(path))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                sock.sendall(payload.rstrip(b"\n") + b"\n")
                sock.shutdown(socket.SHUT_WR)
            body = bytearray()
            while chunk := sock.recv(65536):
                body += chunk
                if len(body) > MAX_RESPONSE_BYTES + 1:
                    raise refuse("too_large", "The manager's response is over its bound.")
        except TimeoutError:
            raise refuse("timeout", "The plugin manager did not answer in time.") from None
        except OSError:
            raise refuse("unreachable", "The plugin manager did not answer.") from None
    try:
        decoded: dict[str, Any] = json.loads(body)
    except ValueError:
        raise refuse("malformed", "The plugin manager's answer is not JSON.") from None
    return decoded
