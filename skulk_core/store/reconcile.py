"""Reconciliation, decided without I/O: which node-cache copies the store imports,
and what an export capability lets its holder read.

The store host scans every live node's ``GET /store/storage``; a complete, verified
``node_cache`` copy of a model the store does not hold is imported (pulled through a
capability the source node grants, every size and SHA-256 verified, then published
atomically), unless the alias is tombstoned. A copy is identified by its model id and
the digest of its canonical manifest (:func:`manifest_digest`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Final

import msgspec

from skulk_core.store.ranges import ByteRange

EXPORT_SECONDS: Final = 15 * 60
"""How long an export capability lives."""
MAX_FAILURES_KEPT: Final = 32


class ManifestEntry(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    size: int
    sha256: str


def manifest_digest(files: Iterable[ManifestEntry]) -> str:
    """SHA-256 of the manifest's canonical form: entries sorted by path, JSON."""
    ordered = sorted(files, key=lambda f: f.path)
    canonical = msgspec.json.encode([[f.path, f.size, f.sha256] for f in ordered])
    return hashlib.sha256(canonical).hexdigest()


class CacheCopy(msgspec.Struct, frozen=True, kw_only=True):
    """One node's complete, verified copy, as its ``/store/storage`` reports it."""

    node_id: str
    model_id: str
    manifest_sha256: str
    size_bytes: int


class ImportPlan(msgspec.Struct, frozen=True, kw_only=True):
    discovered: int
    """Copies seen of models the store does not hold."""
    imports: tuple[CacheCopy, ...]
    """One source per model: the first node (by id) reporting it."""
    tombstoned: tuple[str, ...]
    """Aliases seen in a node cache that the store deleted: never recreated."""


def plan_imports(copies: Iterable[CacheCopy], held: set[str], tombstoned: set[str]) -> ImportPlan:
    missing = [c for c in copies if c.model_id not in held]
    graves = sorted({c.model_id for c in missing if c.model_id in tombstoned})
    chosen: dict[str, CacheCopy] = {}
    for copy in sorted(missing, key=lambda c: (c.model_id, c.node_id)):
        if copy.model_id not in tombstoned:
            chosen.setdefault(copy.model_id, copy)
    return ImportPlan(
        discovered=len(missing), imports=tuple(chosen.values()), tombstoned=tuple(graves)
    )


class ExportGrant(msgspec.Struct, frozen=True, kw_only=True):
    """What one capability token lets the store node read from this node."""

    model_id: str
    manifest_sha256: str
    target_node_id: str
    max_bytes: int
    expires_at: float
    files: tuple[ManifestEntry, ...]
    stamps: tuple[tuple[str, int, int], ...]
    """(path, size, mtime_ns) of each file when the capability was issued."""


class ExportRefused(msgspec.Struct, frozen=True, kw_only=True):
    status: int
    message: str


def check_export_read(
    grant: ExportGrant | None,
    *,
    now: float,
    target_node_id: str | None,
    path: str,
    stamp: tuple[int, int] | None,
    span: ByteRange,
    served_bytes: int,
) -> ExportRefused | None:
    """Why this read is refused, or None. ``stamp`` is the file's (size, mtime_ns) now."""
    if grant is None or now >= grant.expires_at:
        return ExportRefused(status=403, message="the export capability is invalid or expired")
    if target_node_id != grant.target_node_id:
        return ExportRefused(
            status=403, message="the export capability is bound to another store node"
        )
    issued = {p: (size, mtime) for p, size, mtime in grant.stamps}
    if path not in issued:
        return ExportRefused(status=404, message=f"{path!r} is not in the granted manifest")
    if stamp != issued[path]:
        return ExportRefused(
            status=409, message=f"{path!r} changed after the capability was issued"
        )
    if served_bytes + span.length > grant.max_bytes:
        return ExportRefused(
            status=403,
            message=f"the export capability's byte ceiling ({grant.max_bytes}) is spent",
        )
    return None
