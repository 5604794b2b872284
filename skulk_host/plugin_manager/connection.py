"""The protected connection record a host finds its local manager through.

Local setup writes ``SKULK_CONFIG_HOME/managed-service/connection.json`` naming the
manager's absolute root (and the local profile id); the host reads it, never an HTTP
caller. The record is refused when it, or its directory, is a symbolic link, is not
owned by this user, or is readable or writable by anyone else; or when it does not
parse or names a relative root. A refused record reads as "no manager", with the
reason, never as a manager somewhere else.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Annotated, Final

import msgspec

from skulk_core.plugins.errors import refuse
from skulk_host.fsutil import atomic_write, ensure_private_dir

CONNECTION_DIR: Final = "managed-service"
CONNECTION_FILE: Final = "connection.json"
MAX_CONNECTION_BYTES: Final = 4096
NO_CONNECTION: Final = "No local plugin manager is set up on this host."
"""The refusal when no record exists, as the host's API caller reads it."""


class ManagerConnection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    manager_root: Annotated[str, msgspec.Meta(min_length=1, max_length=1024)]
    profile_id: Annotated[str, msgspec.Meta(pattern="^[0-9a-f]{32}$")]

    @property
    def root(self) -> Path:
        return Path(self.manager_root)


def connection_path(config_home: Path) -> Path:
    return config_home / CONNECTION_DIR / CONNECTION_FILE


def write_connection(config_home: Path, connection: ManagerConnection) -> None:
    """What local setup does: the record, owner-only, written atomically."""
    directory = config_home / CONNECTION_DIR
    ensure_private_dir(directory)
    directory.chmod(0o700)
    atomic_write(connection_path(config_home), msgspec.json.encode(connection))


def _protected(path: Path, kind: str, missing: str) -> os.stat_result:
    try:
        info = path.lstat()
    except FileNotFoundError:
        raise refuse("unreachable", missing) from None
    if stat.S_ISLNK(info.st_mode):
        raise refuse("source_invalid", f"The manager connection {kind} is a symbolic link.")
    if info.st_uid != os.getuid():
        raise refuse("source_invalid", f"The manager connection {kind} belongs to another user.")
    if info.st_mode & 0o077:
        raise refuse(
            "source_invalid",
            f"The manager connection {kind} is open to other users; it must be owner-only.",
        )
    return info


def read_connection(config_home: Path, *, missing: str = NO_CONNECTION) -> ManagerConnection:
    """The connection record, checked; refuses an unsafe or malformed one (``missing``
    is the refusal's message when there is none)."""
    _protected(config_home / CONNECTION_DIR, "directory", missing)
    path = connection_path(config_home)
    info = _protected(path, "file", missing)
    if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_CONNECTION_BYTES:
        raise refuse("source_invalid", "The manager connection is not a small regular file.")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_CONNECTION_BYTES + 1)
    try:
        connection = msgspec.json.decode(raw, type=ManagerConnection)
    except (msgspec.ValidationError, msgspec.DecodeError):
        raise refuse("malformed", "The manager connection record cannot be read.") from None
    if not connection.root.is_absolute():
        raise refuse("malformed", "The manager connection must name an absolute root.")
    return connection
