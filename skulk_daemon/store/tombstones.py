"""The store host's tombstone file: ``<store path>/.tombstones.json``.

Written (temp file, fsync, rename, fsync the directory) before a deleted model's
bytes go, so a crash mid-delete leaves the alias tombstoned and the next start
finishes the removal. A damaged file is kept aside (``.corrupt``) and logged; the
store then starts with no tombstones rather than refusing to serve.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.store.tombstones import Tombstones, decode_tombstones, encode_tombstones
from skulk_host.fsutil import atomic_write

log = logging.getLogger(__name__)

TOMBSTONES_NAME: Final = ".tombstones.json"
TOMBSTONES_MODE: Final = 0o644


class TombstoneFile:
    def __init__(self, root: Path) -> None:
        self.path = root / TOMBSTONES_NAME
        self._lock = threading.Lock()
        self._current = self._load()

    def _load(self) -> Tombstones:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return Tombstones()
        try:
            return decode_tombstones(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            aside = self.path.with_name(self.path.name + ".corrupt")
            os.replace(self.path, aside)
            log.error("the store's tombstone file was damaged (%s); kept as %s", exc, aside)
            return Tombstones()

    @property
    def current(self) -> Tombstones:
        return self._current

    def deleted_at(self, model_id: str) -> float | None:
        return self._current.deleted_at(model_id)

    def add(self, model_id: str, at: float) -> None:
        """Durable before it returns (the caller deletes bytes only after)."""
        with self._lock:
            updated = self._current.with_alias(model_id, at)
            atomic_write(self.path, encode_tombstones(updated), mode=TOMBSTONES_MODE)
            self._current = updated

    def clear(self, model_id: str) -> None:
        with self._lock:
            if self._current.deleted_at(model_id) is None:
                return
            updated = self._current.without_alias(model_id)
            atomic_write(self.path, encode_tombstones(updated), mode=TOMBSTONES_MODE)
            self._current = updated
