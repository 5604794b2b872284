"""The manager's durable state under its root, every write atomic (temp, fsync, rename).

::

    <root>/                              owner-only (0700)
      control.sock                       the owner-only socket (0600)
      installations/<plugin_id>/
        installation.json                registration
        runtime-selection.json           the published Selection (revision, digest, ...)
        operations/<operation_id>.json   the lifecycle journal, one record per operation
        fence.lock                       the installer fence (flock)
        generations/...                  staged runtimes (``staging.py``)
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Final

import msgspec

from skulk_core.plugins.errors import refuse
from skulk_host.files import file_lock
from skulk_host.fsutil import atomic_write, ensure_private_dir
from skulk_host.plugin_manager.protocol import (
    PLUGIN_ID_PATTERN,
    LifecycleOperation,
    Selection,
)

if TYPE_CHECKING:
    from skulk_host.plugin_release.staging import Stager

FENCE_WAIT_SECONDS: Final = 30.0
"""How long an accepted operation waits for the installer fence."""
_PLUGIN_ID: Final = re.compile(PLUGIN_ID_PATTERN)


class Registration(msgspec.Struct, frozen=True, kw_only=True):
    plugin_id: str
    registered_at: int


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.installations = root / "installations"

    def open(self) -> None:
        """Create (or check) the owner-only root; a symlinked or shared root is refused."""
        if self.root.is_symlink():
            raise refuse("source_invalid", "The manager root must not be a symbolic link.")
        ensure_private_dir(self.root)
        info = self.root.stat()
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise refuse("source_invalid", "The manager root must be owner-only (0700).")
        ensure_private_dir(self.installations)

    def directory(self, plugin_id: str) -> Path:
        if not _PLUGIN_ID.match(plugin_id):
            raise refuse("malformed", "A managed plugin id is managed.<name>.")
        return self.installations / plugin_id

    def ids(self) -> list[str]:
        return sorted(
            path.name
            for path in self.installations.iterdir()
            if _PLUGIN_ID.match(path.name) and (path / "installation.json").is_file()
        )

    def exists(self, plugin_id: str) -> bool:
        return (self.directory(plugin_id) / "installation.json").is_file()

    def register(self, plugin_id: str) -> None:
        directory = self.directory(plugin_id)
        ensure_private_dir(directory / "operations")
        atomic_write(
            directory / "installation.json",
            msgspec.json.encode(Registration(plugin_id=plugin_id, registered_at=int(time.time()))),
        )

    def purge(self, plugin_id: str) -> None:
        """Take the installation out of the inventory at once (one rename), then delete
        it. A crash between the two leaves a hidden ``.purged-*`` directory, never a
        half-deleted installation in the inventory."""
        directory = self.directory(plugin_id)
        doomed = self.installations / f".purged-{plugin_id}-{secrets.token_hex(4)}"
        directory.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)

    def selection(self, plugin_id: str) -> Selection:
        path = self.directory(plugin_id) / "runtime-selection.json"
        if not path.is_file():
            return Selection()
        return msgspec.json.decode(path.read_bytes(), type=Selection)

    def publish(self, plugin_id: str, selection: Selection) -> None:
        atomic_write(
            self.directory(plugin_id) / "runtime-selection.json", msgspec.json.encode(selection)
        )

    def operations(self, plugin_id: str) -> list[LifecycleOperation]:
        directory = self.directory(plugin_id) / "operations"
        records = [
            msgspec.json.decode(path.read_bytes(), type=LifecycleOperation)
            for path in directory.glob("*.json")
        ]
        return sorted(records, key=lambda op: (op.accepted_at, op.operation_id))

    def operation(self, plugin_id: str, operation_id: str) -> LifecycleOperation | None:
        path = self.directory(plugin_id) / "operations" / f"{operation_id}.json"
        if not path.is_file():
            return None
        return msgspec.json.decode(path.read_bytes(), type=LifecycleOperation)

    def record(self, operation: LifecycleOperation) -> None:
        path = self.directory(operation.plugin_id) / "operations" / f"{operation.operation_id}.json"
        atomic_write(path, msgspec.json.encode(operation))

    def stager(self, plugin_id: str) -> Stager:
        # NOTE: release staging (``packaging``) loads where a release is staged, not
        # with every reader of the store (a node's start: issue 43).
        from skulk_host.plugin_release.staging import Stager  # noqa: PLC0415

        return Stager(self.directory(plugin_id))

    @contextlib.contextmanager
    def fence(self, plugin_id: str, wait: float = FENCE_WAIT_SECONDS) -> Iterator[bool]:
        """Hold the installation's installer fence; yields ``False`` if it stayed busy.

        NOTE: an flock, not a lock in this process: staging and local setup run as
        other processes and take the same fence, and it dies with its holder.
        """
        with file_lock(self.directory(plugin_id) / "fence.lock", wait) as held:
            yield held
