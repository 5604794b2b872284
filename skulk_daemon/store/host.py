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
import logging
import shutil
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from skulk_core.ids import ModelId
from skulk_core.models.cards import ArtifactRole, Memory, ModelCard
from skulk_core.models.catalog import InstalledModel, same_artifact
from skulk_core.models.hub_cards import HubCardError, RepoFile, is_safe_repo_path
from skulk_core.state.state import DownloadProgress
from skulk_core.store.answers import InstalledCard, StoreDisk, StoreEntry
from skulk_core.store.reconcile import ManifestEntry, manifest_digest
from skulk_core.store.selection import Conflict, DownloadSelection, Plan, Verification, resolve
from skulk_daemon.hub.client import HubClient, HubRefused
from skulk_daemon.hub.download import (
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    PENDING,
    DownloadRefused,
    Downloads,
    _Job,
)
from skulk_daemon.hub.manifest import FileManifest, ManifestFile, manifest_path, read_manifest
from skulk_daemon.hub.service import build_card
from skulk_daemon.models.installed import scan_installed_models
from skulk_daemon.models.sidecar import SIDECAR_DIR, model_dir_name, write_sidecar
from skulk_daemon.node.node import Node
from skulk_daemon.store.records import read_record, record_of, write_record
from skulk_daemon.store.tombstones import TombstoneFile

log = logging.getLogger(__name__)

STORE_DIR_NAME: Final = "store"
SELECTION_CONFLICT: Final = "selection_conflict"
_NONE: Final = DownloadSelection()


def _remove(target: Path) -> None:
    # The records first: the model leaves every listing before its bytes go.
    shutil.rmtree(target / SIDECAR_DIR, ignore_errors=True)
    shutil.rmtree(target, ignore_errors=True)


def store_root(node: Node) -> Path:
    configured = node.config.model_store.store_path
    if configured:
        return Path(configured).expanduser()
    return node.settings.data_dir / STORE_DIR_NAME


class _StoreDownloads(Downloads):
    """The node downloader, writing under the store path."""

    def __init__(
        self, node: Node, client: Callable[[], HubClient], root: Path, graves: TombstoneFile
    ) -> None:
        super().__init__(node, client)
        self._root = root
        self._graves = graves
        self.plans: dict[ModelId, Plan] = {}
        """The selection each running store download was started for."""

    def model_dir(self, model_id: str) -> Path:
        self._root.mkdir(parents=True, exist_ok=True)
        root = self._root.resolve()
        name = model_dir_name(ModelId(model_id))
        target = (root / name).resolve()
        if name in ("", ".", "..") or name.startswith(".") or target.parent != root:
            raise DownloadRefused(
                400, "invalid_model_id", f"model id {model_id!r} does not name a safe directory"
            )
        return target

    def _files(self, card: ModelCard, listing: list[RepoFile]) -> list[RepoFile]:
        """A v2 card's bundle files exactly (each declared size checked), otherwise the
        card's files; plus the selection's ``extra_gguf_files``."""
        bundle = card.artifact_bundle
        if bundle is not None:
            by_path = {item.path: item for item in listing}
            files: list[RepoFile] = []
            for declared in bundle.files:
                path = f"{bundle.root}/{declared.path}" if bundle.root else declared.path
                found = by_path.get(path)
                if found is None or found.size != declared.size:
                    raise HubCardError(
                        f"bundle {bundle.bundle_id} declares {path!r} ({declared.size} bytes) "
                        f"but revision {card.source_revision} of {card.source_repository} "
                        + ("lacks it" if found is None else f"has {found.size} bytes")
                    )
                files.append(found)
        else:
            files = super()._files(card, listing)
        plan = self.plans.get(card.model_id)
        extras = () if plan is None else plan.extra_gguf_files
        chosen = {item.path for item in files}
        by_path = {item.path: item for item in listing}
        for extra in extras:
            if extra in chosen:
                continue
            if extra not in by_path:
                raise HubCardError(
                    f"extra_gguf_files names {extra!r}, which is not in revision "
                    f"{card.source_revision} of {card.source_repository}"
                )
            files.append(by_path[extra])
            chosen.add(extra)
        return files

    def _finish(self, job: _Job, manifest: tuple[ManifestFile, ...]) -> None:
        # Verified and published: an explicit download of a deleted alias revives it.
        super()._finish(job, manifest)
        plan = self.plans.pop(job.model_id, None)
        if plan is not None:
            write_record(job.model_dir, record_of(plan, job.card))
        self._graves.clear(job.model_id)

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
        self.root.mkdir(parents=True, exist_ok=True)
        self.tombstones = TombstoneFile(self.root)
        self._client = client
        self.downloads = _StoreDownloads(node, client, self.root, self.tombstones)

    @property
    def node(self) -> Node:
        return self._node

    def adopt_existing(self) -> None:
        """At start: what the store already holds joins this node's installed models.

        A tombstoned model still on disk (installed before its tombstone) is a delete
        that stopped part way: its removal is finished here instead."""
        self.root.mkdir(parents=True, exist_ok=True)
        known = {Path(m.location).resolve() for m in self._node.installed_models}
        for model in scan_installed_models(self.root):
            deleted_at = self.tombstones.deleted_at(model.card.model_id)
            if deleted_at is not None and model.installed_at <= deleted_at:
                log.info("finishing the interrupted delete of %s", model.card.model_id)
                _remove(Path(model.location))
                continue
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

    def revision_problem(self, model_id: str, source_revision: str | None) -> str | None:
        """Why the store's copy of ``model_id`` is not at ``source_revision`` (a 404 on
        the transport), or None when it is or no revision was asked for."""
        if source_revision is None:
            return None
        held = self._model(model_id)
        if held is None:
            return f"the store holds no {model_id} with a card recording its revision"
        if held.card.source_revision != source_revision:
            return (
                f"the store holds {model_id} at revision {held.card.source_revision}, "
                f"not {source_revision}"
            )
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
            record = read_record(Path(model.location), card)
            found.append(
                StoreEntry(
                    model_id=card.model_id,
                    source_repository=card.source_repository,
                    source_revision=card.source_revision,
                    gguf_file=card.gguf_file,
                    total_bytes=sum(item.size for item in manifest.files),
                    file_count=len(manifest.files),
                    installed_at=model.installed_at,
                    installed_verification=record.verification.value,
                    registry_card_id=record.registry_card_id,
                    artifact_bundle_id=record.artifact_bundle_id,
                    artifact_role=record.artifact_role.value,
                    owner_model_id=record.owner_model_id,
                    owner_registry_card_id=record.owner_registry_card_id,
                    last_verified_at=_verified_at(Path(model.location), model.installed_at),
                    manifest_sha256=manifest_digest(
                        ManifestEntry(path=f.path, size=f.size, sha256=f.sha256)
                        for f in manifest.files
                    ),
                    installed_card=InstalledCard(
                        card=card, captured_at=datetime.fromtimestamp(model.installed_at, UTC)
                    ),
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

    def plan(self, model_id: str, selection: DownloadSelection) -> Plan:
        """Bind ``selection`` to this store host's verified catalog (409 when it cannot:
        :func:`skulk_core.store.selection.resolve`)."""
        catalog = self._node.catalog()
        owner = None if selection.owner_model_id is None else selection.owner_model_id
        found = resolve(
            model_id,
            selection,
            catalog.get(model_id),
            None if owner is None else catalog.get(owner),
        )
        match found:
            case Conflict(message=message):
                raise DownloadRefused(409, SELECTION_CONFLICT, message)
            case Plan():
                return found

    async def start(
        self, model_id: str, selection: DownloadSelection | None = None
    ) -> DownloadProgress:
        """Start (or observe) the store's fetch of ``selection`` for ``model_id``; with
        no selection, what it holds answers complete as it is."""
        held, manifest = self._model(model_id), self.manifest(model_id)
        plan = None if selection is None and held else self.plan(model_id, selection or _NONE)
        if manifest is not None and held is not None:
            if plan is not None and plan.card is not None and plan.card.registry_card_id:
                await asyncio.to_thread(self._adopt, held, plan)
            total = sum(item.size for item in manifest.files)
            return DownloadProgress(
                model_id=ModelId(model_id),
                status=COMPLETED,
                downloaded_bytes=total,
                total_bytes=total,
            )
        if plan is None:
            plan = self.plan(model_id, _NONE)
        card = plan.card if plan.card is not None else await self._build(plan)
        self.downloads.plans[card.model_id] = plan
        try:
            return await self.downloads.start(card)
        except BaseException:
            if self.downloads.progress(model_id) is None:
                self.downloads.plans.pop(card.model_id, None)
            raise

    def _adopt(self, held: InstalledModel, plan: Plan) -> None:
        """The signed generation of bytes the store already holds: its card and record
        are rewritten without a transfer. Different bytes are refused, never mixed."""
        card = plan.card
        assert card is not None
        if held.card.registry_card_id == card.registry_card_id:
            return
        if not same_artifact(held.card, card):
            raise DownloadRefused(
                409,
                "generation_conflict",
                f"the store holds other bytes for {plan.model_id} than signed card "
                f"{card.registry_card_id} names; delete the store's copy "
                f"(DELETE /store/models/{plan.model_id}) and download again",
            )
        location = Path(held.location)
        now = int(time.time())
        write_sidecar(location, card, now)
        write_record(location, record_of(plan, card))
        adopted = InstalledModel(card=card, location=held.location, installed_at=now)
        self._node.installed_models[:] = [
            adopted if m is held else m for m in self._node.installed_models
        ]
        log.info("adopted signed card %s for the stored %s", card.registry_card_id, plan.model_id)

    async def _build(self, plan: Plan) -> ModelCard:
        """The card of a companion or an unverified fetch, read from its repository."""
        client = self._client()
        build = build_card if plan.artifact_role is ArtifactRole.BASE else _companion_card
        try:
            card = await asyncio.to_thread(
                build, client, plan.source_repository, plan.gguf_file, plan.source_revision
            )
        except HubRefused as exc:
            if plan.verification is Verification.UNVERIFIED:
                raise DownloadRefused(
                    404,
                    "model_not_found",
                    f"model {plan.model_id!r} is not in the catalog (POST /models/add adds it) "
                    f"and fetching it by name failed: {exc.message}",
                ) from None
            raise DownloadRefused(exc.status, exc.code, exc.message) from None
        except HubCardError as exc:
            raise DownloadRefused(409, "artifact_mismatch", str(exc)) from None
        return msgspec.structs.replace(card, model_id=ModelId(plan.model_id))

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
        # Durable before any byte goes: reconciliation may never bring it back, and a
        # crash from here on is finished at the next start (adopt_existing).
        await asyncio.to_thread(self.tombstones.add, model_id, time.time())
        await self.downloads.cancel(model_id)
        self.downloads.forget(model_id)
        target = self.downloads.model_dir(model_id)
        self._node.installed_models[:] = [
            m
            for m in self._node.installed_models
            if not (m.card.model_id == model_id and m.location == str(target))
        ]
        await asyncio.to_thread(_remove, target)

    def disk(self) -> StoreDisk:
        self.root.mkdir(parents=True, exist_ok=True)
        usage = shutil.disk_usage(self.root)
        return StoreDisk(
            store_path=str(self.root),
            free_bytes=usage.free,
            total_bytes=usage.total,
            used_bytes=usage.used,
            checked_at=int(time.time()),
        )


def _verified_at(model_dir: Path, fallback: int) -> int:
    """When the manifest (written only after every file verified) was last written."""
    try:
        return int(manifest_path(model_dir).stat().st_mtime)
    except OSError:
        return fallback


def _companion_card(
    client: HubClient, repo: str, gguf_file: str | None, source_revision: str | None
) -> ModelCard:
    """A companion's record card: its exact file at its immutable commit. A companion
    (vision weights, a draft) is loaded beside its owner, never placed on its own, so
    it carries no geometry of its own (``n_layers`` 1 is the schema's minimum)."""
    commit = client.resolve_commit(repo, source_revision)
    listing = client.list_files(repo, commit)
    found = next((item for item in listing if item.path == gguf_file), None)
    if gguf_file is None or found is None:
        raise HubCardError(f"the companion file {gguf_file!r} is not in {repo} at {commit}")
    return ModelCard(
        model_id=ModelId(repo),
        storage_size=Memory(in_bytes=found.size),
        n_layers=1,
        source_repository=repo,
        source_revision=commit,
        gguf_file=gguf_file,
    )
