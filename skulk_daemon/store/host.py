"""The store host's own half: the canonical bytes under ``model_store.store_path``.

Downloads reuse the node downloader (:mod:`skulk_daemon.hub.download`: resumable,
verified, disk-admitted, progress in State) rooted at the store path instead of the
node's models dir. A finished store download also joins this node's installed
models (its ``location_kind`` is ``store_local``), so the store host can run what it
stores without a second copy. What the store holds is what has a manifest and a
card record under the store path; nothing else is listed or served.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.hub_cards import is_safe_repo_path
from skulk_core.state.state import DownloadProgress
from skulk_daemon.hub.client import HubClient
from skulk_daemon.hub.download import (
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    PENDING,
    DownloadRefused,
    Downloads,
)
from skulk_daemon.hub.manifest import FileManifest, read_manifest
from skulk_daemon.models.installed import scan_installed_models
from skulk_daemon.models.sidecar import SIDECAR_DIR, model_dir_name
from skulk_daemon.node.node import Node

STORE_DIR_NAME: Final = "store"
LOCATION_STORE: Final = "store_local"
LOCATION_NODE: Final = "node_cache"


def _remove(target: Path) -> None:
    # The records first: the model leaves every listing before its bytes go.
    shutil.rmtree(target / SIDECAR_DIR, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)


class StoreEntry(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    source_repository: str | None
    source_revision: str | None
    gguf_file: str | None
    total_bytes: int
    file_count: int
    installed_at: int
    location_kind: str = LOCATION_STORE
    verification_state: str = "verified"
    """Every file was verified (size and SHA-256) before its manifest was written."""
    manifest_complete: bool = True


def store_root(node: Node) -> Path:
    configured = node.config.model_store.store_path
    if configured:
        return Path(configured).expanduser()
    return node.settings.data_dir / STORE_DIR_NAME


class _StoreDownloads(Downloads):
    """The node downloader, writing under the store path."""

    def __init__(self, node: Node, client: Callable[[], HubClient], root: Path) -> None:
        super().__init__(node, client)
        self._root = root

    def model_dir(self, model_id: str) -> Path:
        self._root.mkdir(parents=True, exist_ok=True)
        root = self._root.resolve()
        name = model_dir_name(ModelId(model_id))
        target = (root / name).resolve()
        if name in ("", ".", "..") or target.parent != root:
            raise DownloadRefused(
                400, "invalid_model_id", f"model id {model_id!r} does not name a safe directory"
            )
        return target

    def forget(self, model_id: str) -> None:
        """Drop a finished job (its model was deleted): its status no longer applies."""
        self._jobs.pop(ModelId(model_id), None)

    def listing(self) -> list[DownloadProgress]:
        """Pending, active and failed store downloads (cancelled ones are not listed)."""
        shown = (PENDING, IN_PROGRESS, FAILED)
        return [job.progress() for job in self._jobs.values() if job.status in shown]


class StoreHostService:
    """What a store host holds and fetches."""

    def __init__(self, node: Node, client: Callable[[], HubClient]) -> None:
        self._node = node
        self.root = store_root(node)
        self.downloads = _StoreDownloads(node, client, self.root)

    def adopt_existing(self) -> None:
        """At start: what the store already holds joins this node's installed models."""
        self.root.mkdir(parents=True, exist_ok=True)
        known = {Path(m.location).resolve() for m in self._node.installed_models}
        for model in scan_installed_models(self.root):
            if Path(model.location).resolve() not in known and self.manifest(model.card.model_id):
                self._node.installed_models.append(model)

    def catalog_card(self, model_id: str) -> ModelCard | None:
        entry = self._node.catalog().get(model_id)
        return None if entry is None else entry.card

    def _model(self, model_id: str) -> InstalledModel | None:
        try:
            target = self.downloads.model_dir(model_id)
        except DownloadRefused:
            return None
        for model in self._node.installed_models:
            if model.card.model_id == model_id and Path(model.location).resolve() == target:
                return model
        return None

    def manifest(self, model_id: str) -> FileManifest | None:
        try:
            target = self.downloads.model_dir(model_id)
        except DownloadRefused:
            return None
        return read_manifest(target)

    def entries(self) -> list[StoreEntry]:
        found: list[StoreEntry] = []
        for model in scan_installed_models(self.root):
            manifest = read_manifest(Path(model.location))
            if manifest is None:
                continue
            card = model.card
            found.append(
                StoreEntry(
                    model_id=card.model_id,
                    source_repository=card.source_repository,
                    source_revision=card.source_revision,
                    gguf_file=card.gguf_file,
                    total_bytes=sum(item.size for item in manifest.files),
                    file_count=len(manifest.files),
                    installed_at=model.installed_at,
                )
            )
        return found

    def model_ids(self) -> list[str]:
        return [entry.model_id for entry in self.entries()]

    def file_path(self, model_id: str, relative: str) -> Path | str:
        """The served file, or why not: ``"unsafe"`` (400) or ``"missing"`` (404).

        Only files the manifest lists are served: never a partial, never the store's
        own records, never a path outside the model directory."""
        if not is_safe_repo_path(relative):
            return "unsafe"
        manifest = self.manifest(model_id)
        if manifest is None:
            return "missing"
        if relative not in {item.path for item in manifest.files}:
            return "missing"
        model_dir = self.downloads.model_dir(model_id)
        path = (model_dir / relative).resolve()
        if not path.is_relative_to(model_dir) or not path.is_file():
            return "unsafe" if not path.is_relative_to(model_dir) else "missing"
        return path

    async def start(self, model_id: str) -> DownloadProgress:
        entry = self._node.catalog().get(model_id)
        if entry is None:
            raise DownloadRefused(
                404,
                "model_not_found",
                f"model {model_id!r} is not in the catalog; add it first (POST /models/add)",
            )
        if self.manifest(model_id) is not None and self._model(model_id) is not None:
            total = entry.card.storage_size.in_bytes
            return DownloadProgress(
                model_id=entry.model_id,
                status=COMPLETED,
                downloaded_bytes=total,
                total_bytes=total,
            )
        return await self.downloads.start(entry.card)

    async def delete(self, model_id: str) -> None:
        """Remove the store's copy (registry and disk); 404 when it holds none."""
        if self.manifest(model_id) is None:
            raise DownloadRefused(404, "not_found", f"the store holds no model {model_id}")
        for instance in self._node.state.instances.values():
            if instance.shard_assignments.model_id == model_id:
                raise DownloadRefused(
                    409,
                    "model_in_use",
                    f"{model_id} is in use by instance {instance.instance_id}; delete it first",
                )
        await self.downloads.cancel(model_id)
        self.downloads.forget(model_id)
        target = self.downloads.model_dir(model_id)
        self._node.installed_models[:] = [
            m
            for m in self._node.installed_models
            if not (m.card.model_id == model_id and m.location == str(target))
        ]
        await asyncio.to_thread(_remove, target)

    def disk(self) -> dict[str, object]:
        self.root.mkdir(parents=True, exist_ok=True)
        usage = shutil.disk_usage(self.root)
        return {
            "store_path": str(self.root),
            "free_bytes": usage.free,
            "total_bytes": usage.total,
            "used_bytes": usage.used,
            "checked_at": int(time.time()),
        }
