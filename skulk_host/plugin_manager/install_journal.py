"""The install journal: one ``install-operations/<id>.json`` per release install of an
installation, rewritten atomically at every state change. Work a previous manager left
live is marked ``recovery_required`` (``installation_interrupted``) on start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import msgspec

from skulk_host.fsutil import atomic_write
from skulk_host.plugin_manager.protocol import InstallOperation
from skulk_host.plugin_manager.store import Store

LIVE_INSTALL_STATES: Final = frozenset({"accepted", "downloading", "staging"})


class InstallJournal:
    def __init__(self, store: Store) -> None:
        self._store = store

    def _directory(self, plugin_id: str) -> Path:
        return self._store.directory(plugin_id) / "install-operations"

    def operations(self, plugin_id: str) -> list[InstallOperation]:
        """``plugin_id``'s installs, oldest first."""
        directory = self._directory(plugin_id)
        if not directory.is_dir():
            return []
        records = [
            msgspec.json.decode(p.read_bytes(), type=InstallOperation)
            for p in directory.glob("*.json")
        ]
        return sorted(records, key=lambda op: (op.accepted_at, op.operation_id))

    def live(self, plugin_id: str) -> bool:
        """Whether a download or staging for ``plugin_id`` is under way."""
        return any(op.state in LIVE_INSTALL_STATES for op in self.operations(plugin_id))

    def record(self, operation: InstallOperation, **fields: Any) -> InstallOperation:
        """``operation`` with ``fields`` changed, written through."""
        updated = msgspec.structs.replace(operation, updated_at=int(time.time()), **fields)
        path = self._directory(updated.plugin_id) / f"{updated.operation_id}.json"
        atomic_write(path, msgspec.json.encode(updated))
        return updated

    def interrupt_live(self) -> None:
        """At start: what a previous manager left live needs an explicit recovery."""
        for plugin_id in self._store.ids():
            for operation in self.operations(plugin_id):
                if operation.state in LIVE_INSTALL_STATES:
                    self.record(
                        operation, state="recovery_required", error_code="installation_interrupted"
                    )
