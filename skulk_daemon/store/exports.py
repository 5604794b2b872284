"""Internal cache exports: a node lends one verified copy to the store host.

``POST /store/internal/exports`` (on the API port, trusted fabric) issues a random
short-lived capability bound to one installed identity (model id and manifest
digest), the claimed store node, a byte ceiling and an expiry. The caller's socket
address must be one the claimed store node advertises (its telemetry ``api_urls``; a
node claiming itself: loopback), and that node must hold the store role in State: a
node id in the body is never identity on its own. ``GET /store/internal/exports/
{token}/{path}`` serves only manifest paths, to that node (its ``x-skulk-target-node``
header and socket address), one ``Range`` at a time, refusing a file that changed
after issuance and reads past the ceiling (:func:`check_export_read`). Tokens live
in memory only and are never logged.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from skulk_core.ids import NodeId
from skulk_core.store.ranges import ByteRange, RangeRefused, parse_range
from skulk_core.store.reconcile import (
    EXPORT_SECONDS,
    ExportGrant,
    ManifestEntry,
    check_export_read,
    manifest_digest,
)
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.models.sidecar import SIDECAR_VERSION
from skulk_daemon.node.node import Node

TARGET_HEADER: Final = "x-skulk-target-node"
MAX_GRANTS: Final = 64
CEILING_FACTOR: Final = 2
"""A grant's byte ceiling: the manifest's bytes twice over (one full retry)."""
_LOOPBACK: Final = frozenset({"127.0.0.1", "::1"})


@dataclass
class _Lent:
    grant: ExportGrant
    root: Path
    served: int = 0


@dataclass(frozen=True)
class ExportRead:
    path: Path
    span: ByteRange
    size: int
    partial: bool


def advertised_hosts(node: Node, node_id: str) -> set[str]:
    """The socket addresses ``node_id`` may call from: its advertised API hosts."""
    view = node.view()
    reading = view.telemetry.get(NodeId(node_id))
    hosts = {
        host
        for url in (() if reading is None else reading.resources.api_urls)
        if (host := urlsplit(url).hostname)
    }
    if node_id == node.node_id:
        hosts |= _LOOPBACK
    return hosts


class Exports:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._lent: dict[str, _Lent] = {}
        self._lock = threading.Lock()

    def _check_store_peer(self, target_node_id: str, peer: str | None) -> None:
        if target_node_id not in self._node.state.store_hosts:
            raise ApiError(
                403, f"{target_node_id} is not the cluster's store host", code="not_store_host"
            )
        if peer is None or peer not in advertised_hosts(self._node, target_node_id):
            raise ApiError(
                403,
                "the caller's address is not one the claimed store node advertises",
                code="peer_mismatch",
            )

    def grant(
        self, model_id: str, manifest_sha256: str, target_node_id: str, peer: str | None
    ) -> dict[str, object]:
        """A capability for this node's copy of ``model_id``, and its record."""
        self._check_store_peer(target_node_id, peer)
        root = self._node.models_dir.resolve()
        for model in self._node.installed_models:
            location = Path(model.location).resolve()
            if model.card.model_id != model_id or location.parent != root:
                continue
            manifest = read_manifest(location)
            if manifest is None:
                continue
            files = tuple(
                ManifestEntry(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files
            )
            if manifest_digest(files) != manifest_sha256:
                continue
            stamps = []
            for item in files:
                stat = (location / item.path).stat()
                stamps.append((item.path, stat.st_size, stat.st_mtime_ns))
            total = sum(f.size for f in files)
            grant = ExportGrant(
                model_id=model_id,
                manifest_sha256=manifest_sha256,
                target_node_id=target_node_id,
                max_bytes=total * CEILING_FACTOR,
                expires_at=time.time() + EXPORT_SECONDS,
                files=files,
                stamps=tuple(stamps),
            )
            token = secrets.token_urlsafe(32)
            with self._lock:
                self._prune()
                self._lent[token] = _Lent(grant=grant, root=location)
            return {
                "capability_token": token,
                "expires_at": int(grant.expires_at),
                "max_bytes": grant.max_bytes,
                "manifest_sha256": manifest_sha256,
                "record": {
                    "version": SIDECAR_VERSION,
                    "card": model.card,
                    "installedAt": model.installed_at,
                    "files": files,
                },
            }
        raise ApiError(
            404,
            f"this node holds no copy of {model_id} with manifest {manifest_sha256}",
            code="not_found",
        )

    def _prune(self) -> None:
        now = time.time()
        for token in [t for t, lent in self._lent.items() if lent.grant.expires_at <= now]:
            del self._lent[token]
        while len(self._lent) >= MAX_GRANTS:
            self._lent.pop(next(iter(self._lent)))

    def read(
        self,
        token: str,
        relative: str,
        *,
        target_node_id: str | None,
        peer: str | None,
        range_header: str | None,
    ) -> ExportRead:
        """The span to serve (counted against the ceiling), or an ApiError."""
        with self._lock:
            lent = self._lent.get(token)
        if lent is not None:
            self._check_store_peer(lent.grant.target_node_id, peer)
        path = None if lent is None else (lent.root / relative)
        stamp = None
        if lent is not None and path is not None and path.resolve().is_relative_to(lent.root):
            try:
                stat = path.stat()
                stamp = (stat.st_size, stat.st_mtime_ns)
            except OSError:
                stamp = None
        size = 0 if stamp is None else stamp[0]
        wanted = parse_range(range_header, size) if stamp is not None else None
        if isinstance(wanted, RangeRefused):
            raise ApiError(wanted.status, wanted.message, code="range_refused")
        span = wanted if wanted is not None else ByteRange(start=0, end=size - 1)
        with self._lock:
            refused = check_export_read(
                None if lent is None else lent.grant,
                now=time.time(),
                target_node_id=target_node_id,
                path=relative,
                stamp=stamp,
                span=span,
                served_bytes=0 if lent is None else lent.served,
            )
            if refused is not None:
                raise ApiError(refused.status, refused.message, code="export_refused")
            assert lent is not None and path is not None
            lent.served += max(span.length, 0)
        return ExportRead(path=path, span=span, size=size, partial=wanted is not None)
