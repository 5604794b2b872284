"""Store tombstones, decided without I/O: aliases deleted from the store.

``DELETE /store/models/{model_id}`` records the alias here (durably, before any byte
goes); automatic reconciliation never recreates a tombstoned alias from a node's
cache. Only a later explicit store download of the alias that completes clears it.
"""

from __future__ import annotations

from typing import Final

import msgspec

TOMBSTONES_VERSION: Final = 1
MAX_TOMBSTONES: Final = 4096
"""Kept in the file (the oldest dropped beyond it)."""


class Tombstone(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    deleted_at: float
    """Unix seconds: a store copy installed after this is not the deleted one."""


class Tombstones(msgspec.Struct, frozen=True, kw_only=True):
    version: int = TOMBSTONES_VERSION
    entries: tuple[Tombstone, ...] = ()

    def deleted_at(self, model_id: str) -> float | None:
        for entry in self.entries:
            if entry.model_id == model_id:
                return entry.deleted_at
        return None

    def with_alias(self, model_id: str, at: float) -> Tombstones:
        kept = tuple(e for e in self.entries if e.model_id != model_id)
        added = (*kept, Tombstone(model_id=model_id, deleted_at=at))
        return Tombstones(entries=added[-MAX_TOMBSTONES:])

    def without_alias(self, model_id: str) -> Tombstones:
        return Tombstones(entries=tuple(e for e in self.entries if e.model_id != model_id))

    def aliases(self) -> list[str]:
        return sorted(e.model_id for e in self.entries)


def decode_tombstones(data: bytes) -> Tombstones:
    """Raises ``msgspec.DecodeError``/``ValidationError`` on a damaged file."""
    return msgspec.json.decode(data, type=Tombstones)


def encode_tombstones(tombstones: Tombstones) -> bytes:
    return msgspec.json.encode(tombstones)
