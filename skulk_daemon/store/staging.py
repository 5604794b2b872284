"""Staging: a node copies a model's bytes from the store before a runner may use them.

Called from the launch path (:mod:`skulk_daemon.worker.launch`) when this node must
run a model it has no file for. The store's SHA-256 manifest (``GET /models/{id}/files``)
says what to fetch; each file goes to ``<file>.incomplete`` beside its target,
resumed with a ``Range`` request when a partial is already there, then hashed: a
digest (or size) that differs from the manifest deletes the partial and fails the
staging with nothing published. Only when every file verified are the manifest and
the card record written (temp + rename) and the model added to this node's
installed models: until then the node has no model, and its launch waits here with
its progress in State (``/state`` ``downloads``).

Transfers on one node run one at a time. Before each, idle staged copies are evicted
least recently used first (:mod:`skulk_daemon.store.cache`, planned by
:func:`skulk_core.store.eviction.plan_staging`) until the model fits
``model_store.staging_budget_gb`` and the models volume keeps its reserve; a copy a
running instance uses is never evicted, and a model that still does not fit is
refused before any byte moves.

:meth:`Staging.tidy` runs when an instance on this node shuts down, and once at
start (sparing copies used in the last :data:`START_SPARES_SECONDS`, as a crash may
have left them mid-use): with ``model_store.staging.cleanup_on_deactivate`` on, the
idle copies beyond the ``staging_keep_recent_gb`` grace budget, newest kept first,
are evicted (:func:`skulk_core.store.eviction.plan_tidy`).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote

import msgspec

from skulk_core.ids import ModelId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.hub_cards import is_safe_repo_path
from skulk_core.state.commands import ReportDownloadProgress
from skulk_core.state.state import DownloadProgress
from skulk_core.store.eviction import (
    GIB,
    EvictionPlan,
    EvictionRefused,
    StagedCopy,
    plan_staging,
    plan_tidy,
)
from skulk_daemon.hub.download import (
    COMPLETED,
    FAILED,
    IN_PROGRESS,
    INCOMPLETE_SUFFIX,
    reserve_bytes,
)
from skulk_daemon.hub.manifest import FileManifest, ManifestFile, write_manifest
from skulk_daemon.models.sidecar import model_dir_name, write_sidecar
from skulk_daemon.node.node import Node
from skulk_daemon.store.cache import (
    evict_copy,
    in_use,
    mark_staged,
    now,
    staged_copies,
    staged_models,
)
from skulk_daemon.store.locate import store_urls

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

CHUNK_BYTES: Final = 4 * 1024 * 1024
REPORT_EVERY_SECONDS: Final = 0.25
CONNECT_SECONDS: Final = 5.0
READ_SECONDS: Final = 60.0
START_SPARES_SECONDS: Final = 30 * 60.0
"""At start, a staged copy used this recently is kept even beyond the grace budget."""


class StagingFailed(Exception):
    """The store has the model but this node could not stage a verified copy."""


class _Manifest(msgspec.Struct, frozen=True, kw_only=True):
    files: tuple[ManifestFile, ...]


@dataclass
class _Progress:
    model_id: ModelId
    total: int
    done: int = 0
    last_report: float = 0.0


def stage_dir(node: Node, model_id: ModelId) -> Path:
    root = node.models_dir.resolve()
    name = model_dir_name(model_id)
    target = (root / name).resolve()
    if name in ("", ".", "..") or target.parent != root:
        raise StagingFailed(f"model id {model_id!r} does not name a safe directory")
    return target


class Staging:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._locks: dict[ModelId, asyncio.Lock] = {}
        self._transfers = asyncio.Lock()

    async def stage(self, card: ModelCard) -> bool:
        """Stage ``card``'s bytes here from the store. False: no store has them.

        Raises :class:`StagingFailed` when the store has them and staging failed."""
        lock = self._locks.setdefault(card.model_id, asyncio.Lock())
        async with lock:
            if self._installed(card.model_id):
                return True
            for base in store_urls(self._node):
                manifest = await self._manifest(base, card.model_id)
                if manifest is None:
                    continue
                async with self._transfers:
                    await self._fetch(base, card, manifest)
                return True
            return False

    async def tidy(self, *, spare_recent_s: float = 0.0) -> tuple[ModelId, ...]:
        """Evict the idle staged copies beyond the grace budget (see the module);
        the ids evicted. Nothing when ``cleanup_on_deactivate`` is off."""
        staging_config = self._node.config.model_store.staging
        if not staging_config.cleanup_on_deactivate:
            return ()
        node = self._node
        async with self._transfers:  # never while a transfer plans its own room
            # State and the installed models are read here, on the loop; the disk in a thread.
            models, busy = list(node.installed_models), in_use(node)
            staged = await asyncio.to_thread(staged_models, node.models_dir, models)
            copies = await asyncio.to_thread(staged_copies, staged, busy)
            evict = plan_tidy(
                copies,
                keep_bytes=int(staging_config.staging_keep_recent_gb * GIB),
                now=now(),
                spare_recent_s=spare_recent_s,
            )
            for model in staged:
                if model.card.model_id in evict:
                    log.info(
                        "evicting the idle staged copy of %s (beyond the %.1f GiB kept)",
                        model.card.model_id,
                        staging_config.staging_keep_recent_gb,
                    )
                    await evict_copy(node, model)
        return tuple(ModelId(model_id) for model_id in evict)

    def _installed(self, model_id: ModelId) -> bool:
        entry = self._node.catalog().get(model_id)
        return entry is not None and entry.installed and entry.location is not None

    async def _manifest(self, base: str, model_id: ModelId) -> FileManifest | None:
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        url = f"{base}/models/{quote(model_id, safe='')}/files"
        try:
            async with httpx.AsyncClient(timeout=CONNECT_SECONDS) as client:
                answer = await client.get(url)
        except httpx.HTTPError as exc:
            log.info("store at %s unreachable: %s", base, type(exc).__name__)
            return None
        if answer.status_code != 200:
            return None
        try:
            files = msgspec.json.decode(answer.content, type=_Manifest).files
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StagingFailed(f"the store's manifest of {model_id} is malformed: {exc}") from None
        for item in files:
            if not is_safe_repo_path(item.path) or item.size < 0 or len(item.sha256) != 64:
                raise StagingFailed(
                    f"the store's manifest of {model_id} names an unsafe entry {item.path!r}"
                )
        return FileManifest(version=1, files=files)

    async def _fetch(self, base: str, card: ModelCard, manifest: FileManifest) -> None:
        import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

        model_id = card.model_id
        target = stage_dir(self._node, model_id)
        progress = _Progress(model_id=model_id, total=sum(f.size for f in manifest.files))
        loop = asyncio.get_running_loop()
        cancel = threading.Event()

        def tick(count: int) -> None:
            progress.done += count
            now = time.monotonic()
            if now - progress.last_report >= REPORT_EVERY_SECONDS:
                progress.last_report = now
                snapshot = self._progress(progress, IN_PROGRESS)
                loop.call_soon_threadsafe(self._publish, snapshot)

        refused = await self._make_room(target, card.model_id, manifest)
        if refused is not None:
            self._publish(self._progress(progress, FAILED, refused))
            raise StagingFailed(refused)
        self._publish(self._progress(progress, IN_PROGRESS))
        try:
            transfer = _Transfer(base, card.model_id, target, tick, cancel)
            await asyncio.to_thread(_fetch_all, transfer, manifest)
        except asyncio.CancelledError:
            cancel.set()
            raise
        except StagingFailed as exc:
            self._publish(self._progress(progress, FAILED, str(exc)))
            raise
        except (OSError, httpx.HTTPError) as exc:
            message = f"staging {model_id} from the store failed: {type(exc).__name__}: {exc}"
            self._publish(self._progress(progress, FAILED, message))
            raise StagingFailed(message) from None
        installed_at = int(time.time())
        await asyncio.to_thread(write_manifest, target, manifest.files)
        await asyncio.to_thread(mark_staged, target, time.time())
        await asyncio.to_thread(write_sidecar, target, card, installed_at)
        self._node.installed_models.insert(
            0, InstalledModel(card=card, location=str(target), installed_at=installed_at)
        )
        progress.done = progress.total
        self._publish(self._progress(progress, COMPLETED))
        log.info("staged %s from the store into %s", model_id, target)

    async def _make_room(
        self, target: Path, model_id: ModelId, manifest: FileManifest
    ) -> str | None:
        """Evict idle staged copies (least recently used first) until the model fits
        the staging budget and the disk; why it cannot fit, or None."""
        node = self._node
        # State and the installed models are read here, on the loop; the disk in a thread.
        models, busy = list(node.installed_models), in_use(node)
        staged = await asyncio.to_thread(staged_models, node.models_dir, models)
        copies = await asyncio.to_thread(staged_copies, staged, busy)
        plan = await asyncio.to_thread(_plan, node, copies, target, model_id, manifest)
        if isinstance(plan, EvictionRefused):
            return plan.message
        for model in staged:
            if model.card.model_id in plan.evict and Path(model.location) != target:
                log.info(
                    "evicting the staged copy of %s to stage %s", model.card.model_id, model_id
                )
                await evict_copy(node, model)
        return None

    def _progress(
        self, progress: _Progress, status: str, error: str | None = None
    ) -> DownloadProgress:
        return DownloadProgress(
            model_id=progress.model_id,
            status=status,
            downloaded_bytes=min(progress.done, progress.total),
            total_bytes=progress.total,
            error_message=error,
        )

    def _publish(self, progress: DownloadProgress) -> None:
        self._node.report(
            ReportDownloadProgress(
                command_id=new_command_id(), node_id=self._node.node_id, progress=progress
            )
        )


def _plan(
    node: Node, copies: list[StagedCopy], target: Path, model_id: ModelId, manifest: FileManifest
) -> EvictionPlan | EvictionRefused:
    """The eviction the transfer needs, checked before any byte moves (resumable
    partials count as present; the reserve stays free on the models volume)."""
    present = 0
    for item in manifest.files:
        final = target / item.path
        partial = final.with_name(final.name + INCOMPLETE_SUFFIX)
        if final.is_file() and final.stat().st_size == item.size:
            present += item.size
        elif partial.is_file():
            present += min(partial.stat().st_size, item.size)
    total = sum(item.size for item in manifest.files)
    node.models_dir.mkdir(parents=True, exist_ok=True)
    budget_gb = node.config.model_store.staging_budget_gb
    return plan_staging(
        copies,
        incoming=model_id,
        incoming_bytes=total,
        missing_bytes=max(total - present, 0),
        budget_bytes=None if budget_gb is None else int(budget_gb * GIB),
        free_bytes=shutil.disk_usage(node.models_dir).free,
        reserve_bytes=reserve_bytes(),
    )


@dataclass(frozen=True)
class _Transfer:
    base: str
    model_id: str
    target: Path
    tick: Callable[[int], None]
    cancel: threading.Event


def _fetch_all(transfer: _Transfer, manifest: FileManifest) -> None:
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
    with httpx.Client(timeout=timeout) as client:
        for item in manifest.files:
            _fetch_one(client, transfer, item)


def _fetch_one(client: httpx.Client, transfer: _Transfer, item: ManifestFile) -> None:
    model_id, target = transfer.model_id, transfer.target
    final = target / item.path
    if not final.resolve().is_relative_to(target):
        raise StagingFailed(f"{item.path!r} escapes the model directory")
    final.parent.mkdir(parents=True, exist_ok=True)
    partial = final.with_name(final.name + INCOMPLETE_SUFFIX)
    partial.touch()
    digest = hashlib.sha256()
    resume = partial.stat().st_size
    if resume > item.size:
        partial.unlink()
        partial.touch()
        resume = 0
    if resume:
        with partial.open("rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                digest.update(chunk)
        transfer.tick(resume)
    if resume < item.size:
        url = f"{transfer.base}/models/{quote(model_id, safe='')}/{quote(item.path)}"
        headers = {"range": f"bytes={resume}-"} if resume else {}
        with client.stream("GET", url, headers=headers) as answer:
            expected = 206 if resume else 200
            if answer.status_code != expected:
                raise StagingFailed(
                    f"the store answered {answer.status_code} for {item.path} of {model_id}"
                )
            with partial.open("ab") as handle:
                # As received: what arrived before the store went away stays for a resume.
                for chunk in answer.iter_bytes():
                    if transfer.cancel.is_set():
                        raise StagingFailed(f"staging {model_id} was stopped")
                    handle.write(chunk)
                    digest.update(chunk)
                    transfer.tick(len(chunk))
                handle.flush()
                os.fsync(handle.fileno())
    size = partial.stat().st_size
    if size != item.size or digest.hexdigest() != item.sha256:
        partial.unlink(missing_ok=True)
        raise StagingFailed(
            f"{item.path} of {model_id}: the bytes staged from the store do not match its "
            f"manifest ({size} of {item.size} bytes, or a SHA-256 mismatch); nothing was "
            "installed"
        )
    os.replace(partial, final)
