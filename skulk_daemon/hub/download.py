"""Node-local downloads of added Hugging Face models: resumable, verified, visible.

One job per model. The bytes come through ``huggingface-hub``: its file metadata
(the resolve endpoint's size, ETag and commit) and its ``http_get``, which resumes a
partial file with a ``Range`` request. (``hf_hub_download`` itself discards partial
files on failure in this release, so it cannot resume a cancelled transfer; the job
keeps its own ``<file>.incomplete`` beside the target instead.)

Before any byte moves, the job checks the disk: the bytes still missing plus a
reserve (``SKULK_DOWNLOAD_RESERVE_BYTES``, default 1 GiB, the level at which node
health calls the models volume full) must fit, or the download fails at once.

A file counts only once verified: its size, and its SHA-256 against the Hub's LFS
object id (the resolve ETag) or, for a small git file, its git blob id. Then it is
renamed into place; when every file is in, the manifest and the card sidecar are
written and the model joins this node's catalog as installed. A cancelled job keeps
its ``.incomplete`` files, so starting it again resumes. A digest mismatch deletes
the partial (it cannot be resumed into a good file) and fails the job.

Progress goes to State as ``ReportDownloadProgress`` (``/state`` ``downloads``), at
most every :data:`REPORT_EVERY_SECONDS` while bytes flow.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from skulk_core.cluster.health import MODELS_DISK_FULL_BYTES
from skulk_core.ids import ModelId, new_command_id
from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.hub_cards import HubCardError, RepoFile, check_listing, gguf_quants
from skulk_core.state.commands import ReportDownloadProgress
from skulk_core.state.state import DownloadProgress
from skulk_daemon.hub.client import HubClient, HubRefused
from skulk_daemon.hub.manifest import ManifestFile, file_digests, write_manifest
from skulk_daemon.models.demos import is_installed_demo, remove_demo
from skulk_daemon.models.sidecar import model_dir_name, write_sidecar
from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)

TRANSFER_CHUNK_BYTES: Final = 1024 * 1024
# NOTE: http_get reads the response in DOWNLOAD_CHUNK_SIZE pieces (10 MiB by default)
# and calls the progress class once per piece, which is also when a cancel is seen.
# 1 MiB pieces make progress and cancellation prompt on slow links; this process is
# the only user of huggingface-hub in the daemon. Set by :func:`_http_get`, which
# imports huggingface-hub when a download first needs it, not at start-up.


def _http_get() -> Any:
    from huggingface_hub import constants as hf_constants  # noqa: PLC0415
    from huggingface_hub.file_download import http_get  # noqa: PLC0415

    hf_constants.DOWNLOAD_CHUNK_SIZE = TRANSFER_CHUNK_BYTES
    return http_get


PENDING: Final = "pending"
IN_PROGRESS: Final = "in_progress"
COMPLETED: Final = "completed"
FAILED: Final = "failed"
CANCELLED: Final = "cancelled"
DELETED: Final = "deleted"

INCOMPLETE_SUFFIX: Final = ".incomplete"
RESERVE_ENV: Final = "SKULK_DOWNLOAD_RESERVE_BYTES"
REPORT_EVERY_SECONDS: Final = 0.25
# Beside the weights, the files a safetensors model needs to load.
_SAFETENSORS_COMPANIONS: Final = (".json", ".safetensors", ".model", ".tiktoken", ".txt", ".jinja")


class DownloadRefused(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


class _Cancelled(Exception):
    pass


class _Overflow(ValueError):
    """The Hub sent more bytes of a file than its listing says the file has."""


@dataclass
class _Job:
    card: ModelCard
    model_dir: Path
    files: list[RepoFile]
    total_bytes: int
    done_bytes: int = 0
    current_bytes: int = 0
    status: str = PENDING
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    task: asyncio.Task[None] | None = None
    last_report: float = 0.0
    attempt_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    """A fresh identity per job: a retry (a new start) is a new attempt."""

    @property
    def model_id(self) -> ModelId:
        return self.card.model_id

    def progress(self) -> DownloadProgress:
        return DownloadProgress(
            model_id=self.model_id,
            status=self.status,
            downloaded_bytes=min(self.done_bytes + self.current_bytes, self.total_bytes),
            total_bytes=self.total_bytes,
            error_message=self.error,
            attempt_id=self.attempt_id,
        )


def reserve_bytes() -> int:
    raw = os.environ.get(RESERVE_ENV, "").strip()
    try:
        return max(0, int(raw)) if raw else MODELS_DISK_FULL_BYTES
    except ValueError:
        return MODELS_DISK_FULL_BYTES


def files_to_fetch(card: ModelCard, listing: list[RepoFile]) -> list[RepoFile]:
    """The files of ``listing`` that ``card`` needs: its GGUF shard group, or the
    safetensors weights and their configuration."""
    check_listing(listing)
    by_path = {item.path: item for item in listing}
    if card.gguf_file is not None:
        for quant in gguf_quants(listing):
            if quant.gguf_file == card.gguf_file:
                return [by_path[path] for path in quant.files]
        if card.gguf_file in by_path:
            return [by_path[card.gguf_file]]
        raise HubCardError(
            f"the card's gguf_file {card.gguf_file!r} is not in revision "
            f"{card.source_revision} of {card.source_repository}"
        )
    wanted = [item for item in listing if item.path.endswith(_SAFETENSORS_COMPANIONS)]
    if not any(item.path.endswith(".safetensors") for item in wanted):
        raise HubCardError(f"{card.source_repository} has no weights Skulk can load")
    return wanted


class Downloads:
    """This node's download jobs."""

    def __init__(self, node: Node, client: Callable[[], HubClient]) -> None:
        self._node = node
        self._client = client
        self._jobs: dict[ModelId, _Job] = {}
        self._lock = asyncio.Lock()

    def progress(self, model_id: str) -> DownloadProgress | None:
        job = self._jobs.get(ModelId(model_id))
        return None if job is None else job.progress()

    def model_dir(self, model_id: str) -> Path:
        root = self._node.models_dir.resolve()
        name = model_dir_name(ModelId(model_id))
        target = (root / name).resolve()
        if name in ("", ".", "..") or target.parent != root:
            raise DownloadRefused(
                400, "invalid_model_id", f"model id {model_id!r} does not name a safe directory"
            )
        return target

    async def start(self, card: ModelCard) -> DownloadProgress:
        """Start (or observe) the download of ``card``'s bytes to this node."""
        async with self._lock:
            job = self._jobs.get(card.model_id)
            if job is not None and job.status in (PENDING, IN_PROGRESS):
                return job.progress()
            entry = self._node.catalog().get(card.model_id)
            if entry is not None and entry.installed:
                done = DownloadProgress(
                    model_id=card.model_id,
                    status=COMPLETED,
                    downloaded_bytes=card.storage_size.in_bytes,
                    total_bytes=card.storage_size.in_bytes,
                )
                self._publish(done)
                return done
            if card.source_repository is None or card.source_revision is None:
                raise DownloadRefused(
                    409,
                    "not_downloadable",
                    f"{card.model_id} names no pinned Hugging Face repository to download from",
                )
            model_dir = self.model_dir(card.model_id)
            client = self._client()
            repo, revision = card.source_repository, card.source_revision
            listing = await asyncio.to_thread(client.list_files, repo, revision)
            try:
                files = self._files(card, listing)
            except HubCardError as exc:
                raise DownloadRefused(409, "artifact_mismatch", str(exc)) from None
            job = _Job(
                card=card,
                model_dir=model_dir,
                files=files,
                total_bytes=sum(item.size for item in files),
            )
            self._admit(job)
            job.status = IN_PROGRESS
            self._jobs[card.model_id] = job
            self._publish(job.progress())
            job.task = asyncio.create_task(self._run(job, client))
            return job.progress()

    def _files(self, card: ModelCard, listing: list[RepoFile]) -> list[RepoFile]:
        """What a download of ``card`` fetches (the store host's downloader adds its
        selection's extra files and v2 bundles); :class:`HubCardError` when it cannot."""
        return files_to_fetch(card, listing)

    def _admit(self, job: _Job) -> None:
        """Refuse before transfer when the missing bytes and the reserve do not fit."""
        present = 0
        for item in job.files:
            target = job.model_dir / item.path
            partial = target.with_name(target.name + INCOMPLETE_SUFFIX)
            if target.is_file() and target.stat().st_size == item.size:
                present += item.size
            elif partial.is_file():
                present += min(partial.stat().st_size, item.size)
        missing = max(job.total_bytes - present, 0)
        self._node.models_dir.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(self._node.models_dir).free
        reserve = reserve_bytes()
        if missing + reserve > free:
            message = (
                f"not enough disk for {job.model_id}: {missing} more bytes plus a {reserve}-byte "
                f"reserve are needed and the models volume has {free} free; free space (or "
                "delete unused models) and start the download again"
            )
            self._publish(
                DownloadProgress(
                    model_id=job.model_id,
                    status=FAILED,
                    total_bytes=job.total_bytes,
                    error_message=message,
                    attempt_id=job.attempt_id,
                )
            )
            raise DownloadRefused(507, "insufficient_storage", message)

    async def wait(self, model_id: str, seconds: float) -> DownloadProgress | None:
        """The job's progress once it ended, or after ``seconds``; None if
        this node has no job for ``model_id``. Waiting never cancels the transfer."""
        job = self._jobs.get(ModelId(model_id))
        if job is None:
            return None
        if job.task is not None:
            await asyncio.wait({job.task}, timeout=seconds)
        return job.progress()

    async def cancel(self, model_id: str, attempt_id: str | None = None) -> DownloadProgress | None:
        """Stop an active download, keeping its partial files; None if none is active
        (or, with ``attempt_id``, if the active one is another attempt)."""
        job = self._jobs.get(ModelId(model_id))
        if job is None or job.status not in (PENDING, IN_PROGRESS):
            return None
        if attempt_id is not None and job.attempt_id != attempt_id:
            return None
        job.cancel.set()
        if job.task is not None:
            await asyncio.shield(job.task)
        return job.progress()

    async def delete(self, model_id: str) -> DownloadProgress:
        """Remove the bytes a finished download, an import or a demo left on this node.

        A placed model is refused (409 ``model_in_use``, naming its instances): its
        runners read those files. A removed demo stays removed across restarts.
        """
        alias = ModelId(model_id)
        placed = sorted(
            str(instance.instance_id)
            for instance in self._node.state.instances.values()
            if instance.shard_assignments.model_id == alias
        )
        if placed:
            raise DownloadRefused(
                409,
                "model_in_use",
                f"{alias} is placed as instance {', '.join(placed)}; delete the instance "
                "first (DELETE /instance/{instance_id})",
            )
        model_dir = self.model_dir(alias)
        from skulk_daemon.hub.manifest import manifest_path  # noqa: PLC0415

        models_dir = self._node.models_dir
        if await asyncio.to_thread(is_installed_demo, models_dir, alias):
            await asyncio.to_thread(remove_demo, models_dir, alias)
        elif manifest_path(model_dir).is_file():
            await asyncio.to_thread(shutil.rmtree, model_dir)
        else:
            raise DownloadRefused(
                404, "not_found", f"no download or import of {alias} on node {self._node.node_id}"
            )
        self._node.installed_models[:] = [
            model for model in self._node.installed_models if model.card.model_id != alias
        ]
        self._jobs.pop(alias, None)
        gone = DownloadProgress(model_id=alias, status=DELETED)
        self._publish(gone)
        return gone

    # -- the transfer -----------------------------------------------------------------

    async def _run(self, job: _Job, client: HubClient) -> None:
        loop = asyncio.get_running_loop()
        try:
            manifest = await _in_daemon_thread(lambda: self._fetch_all(job, client, loop))
            await asyncio.to_thread(self._finish, job, manifest)
            self._node.installed_models.insert(
                0,
                InstalledModel(
                    card=job.card, location=str(job.model_dir), installed_at=int(time.time())
                ),
            )
            job.status = COMPLETED
            log.info("downloaded %s into %s", job.model_id, job.model_dir)
        except asyncio.CancelledError:
            job.cancel.set()  # the node is stopping: the partial stays for a resume
            raise
        except _Cancelled:
            job.status = CANCELLED
            log.info("download of %s cancelled; partial files kept", job.model_id)
        except HubRefused as exc:
            job.status, job.error = FAILED, exc.message
        except (OSError, ValueError) as exc:
            job.status, job.error = FAILED, str(exc) or type(exc).__name__
        except Exception as exc:
            job.status, job.error = FAILED, f"{type(exc).__name__}: {exc}"
        if job.status == FAILED:
            log.warning("download of %s failed: %s", job.model_id, job.error)
        self._publish(job.progress())

    def _fetch_all(
        self, job: _Job, client: HubClient, loop: asyncio.AbstractEventLoop
    ) -> tuple[ManifestFile, ...]:
        recorded: list[ManifestFile] = []
        for item in job.files:
            recorded.append(self._fetch_one(job, client, item, loop))
            job.done_bytes += item.size
            job.current_bytes = 0
        return tuple(recorded)

    def _fetch_one(
        self, job: _Job, client: HubClient, item: RepoFile, loop: asyncio.AbstractEventLoop
    ) -> ManifestFile:
        repo = cast(str, job.card.source_repository)
        revision = cast(str, job.card.source_revision)
        target = job.model_dir / item.path
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(target.name + INCOMPLETE_SUFFIX)
        if target.is_file() and target.stat().st_size == item.size:
            # Renamed into place only after verification (an earlier run of this job).
            sha256, _ = file_digests(target)
            return ManifestFile(path=item.path, size=item.size, sha256=sha256)
        meta = client.file_metadata(repo, revision, item.path)
        if meta.size is not None and meta.size != item.size:
            raise ValueError(
                f"{item.path}: the Hub reports {meta.size} bytes but lists {item.size}"
            )
        expected_sha256 = item.sha256 or (meta.etag if _is_sha256(meta.etag) else None)
        resume = partial.stat().st_size if partial.is_file() else 0
        if resume > item.size:
            partial.unlink()
            resume = 0
        job.current_bytes = resume
        headers = client.headers_for(meta.location)  # a CDN: the token stays with the Hub
        progress = _progress_class(self, job, loop, item)
        http_get = _http_get()
        self._check_cancel(job)
        try:
            with partial.open("ab") as handle:
                client.call(
                    repo,
                    lambda: http_get(
                        meta.location,
                        handle,
                        resume_size=resume,
                        headers=headers,
                        expected_size=item.size,
                        displayed_filename=item.path,
                        tqdm_class=cast(Any, progress),
                    ),
                )
                handle.flush()
                os.fsync(handle.fileno())
        except _Overflow:
            partial.unlink(missing_ok=True)  # no resume can make these bytes the file
            raise
        size = partial.stat().st_size
        if size != item.size:
            raise ValueError(f"{item.path}: received {size} bytes, expected {item.size}")
        sha256, git_sha1 = file_digests(partial)
        if (expected_sha256 is not None and sha256 != expected_sha256) or (
            expected_sha256 is None and item.blob_id is not None and git_sha1 != item.blob_id
        ):
            partial.unlink()
            raise ValueError(
                f"{item.path}: digest mismatch (the bytes received are not the ones the Hub "
                "lists); the partial file was removed, start the download again"
            )
        os.replace(partial, target)
        return ManifestFile(path=item.path, size=item.size, sha256=sha256)

    def _finish(self, job: _Job, manifest: tuple[ManifestFile, ...]) -> None:
        write_manifest(job.model_dir, manifest)
        write_sidecar(job.model_dir, job.card, int(time.time()))

    def _check_cancel(self, job: _Job) -> None:
        if job.cancel.is_set():
            raise _Cancelled

    def _publish(self, progress: DownloadProgress) -> None:
        self._node.report(
            ReportDownloadProgress(
                command_id=new_command_id(), node_id=self._node.node_id, progress=progress
            )
        )

    def _tick(self, job: _Job, loop: asyncio.AbstractEventLoop, item: RepoFile, count: int) -> None:
        """From the transfer thread: count bytes, stop a body longer than the file's
        listed size, honour a cancel, report now and then."""
        job.current_bytes += count
        if job.current_bytes > item.size:
            # NOTE: ``http_get`` writes whatever the body holds and checks the size only
            # at its end, so an endless (chunked) body would fill the disk; this bound
            # stops it at most one transfer chunk past the listed size.
            raise _Overflow(
                f"{item.path}: the Hub sent more than the {item.size} bytes it lists; the "
                "partial file was removed, start the download again"
            )
        self._check_cancel(job)
        now = time.monotonic()
        if now - job.last_report >= REPORT_EVERY_SECONDS:
            job.last_report = now
            try:
                loop.call_soon_threadsafe(self._publish, job.progress())
            except RuntimeError:  # the loop is closed: the node stopped
                raise _Cancelled from None


_R = TypeVar("_R")


async def _in_daemon_thread(work: Callable[[], _R]) -> _R:
    """``work()`` on a daemon thread of its own.

    A transfer can outlast the node's shutdown; ``asyncio.to_thread`` would make the
    loop's executor shutdown wait for it. A daemon thread does not hold the process,
    and what it leaves is the resumable ``.incomplete`` file.
    """
    loop = asyncio.get_running_loop()
    done: asyncio.Future[_R] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not done.done():
            outcome()

    def run() -> None:
        try:
            result = work()
        except BaseException as exc:
            failure = exc
            with contextlib.suppress(RuntimeError):  # the loop is gone
                loop.call_soon_threadsafe(settle, lambda: done.set_exception(failure))
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, lambda: done.set_result(result))

    threading.Thread(target=run, name="skulk-download", daemon=True).start()
    return await done


def _is_sha256(value: str | None) -> bool:
    return value is not None and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _progress_class(
    downloads: Downloads, job: _Job, loop: asyncio.AbstractEventLoop, item: RepoFile
) -> type[object]:
    """A ``tqdm_class`` for ``http_get``: it counts bytes into the job instead of drawing."""

    class _Progress:
        def __init__(self, **_: object) -> None:
            pass

        def __enter__(self) -> _Progress:
            return self

        def __exit__(
            self,
            kind: type[BaseException] | None,
            value: BaseException | None,
            traceback: TracebackType | None,
        ) -> None:
            return None

        def update(self, count: int) -> None:
            downloads._tick(job, loop, item, count)

    return _Progress
