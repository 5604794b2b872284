"""The store host pulls one artifact from a node's cache: ``POST /imports``.

The body (:class:`ImportRequest`) carries the copy's record (its full card and
canonical manifest), the source node's export URL, the capability it granted and
this store node's id. Before any byte moves: the record's card must be the store
host's own catalog card for the alias, every manifest path safe, the alias not
tombstoned nor already held, and the missing bytes plus the reserve must fit the
store's volume. Files go to ``<store>/.importing/<dir>/`` (resumed with ``Range``,
each size and SHA-256 verified); only when every file verified are the manifest and
card record written there and the directory renamed into place, so the store lists
the model whole or not at all. Any refusal leaves the active store untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import quote, urlsplit

import msgspec

from skulk_core.models.cards import ModelCard
from skulk_core.models.catalog import InstalledModel
from skulk_core.models.hub_cards import is_safe_repo_path
from skulk_core.store.answers import StoreEntry
from skulk_core.store.paths import model_id_escapes
from skulk_core.store.reconcile import ManifestEntry
from skulk_daemon.hub.download import INCOMPLETE_SUFFIX, DownloadRefused, reserve_bytes
from skulk_daemon.hub.manifest import ManifestFile, write_manifest
from skulk_daemon.models.sidecar import write_sidecar
from skulk_daemon.store.exports import TARGET_HEADER
from skulk_daemon.store.host import StoreHostService
from skulk_host.fsutil import fsync_dir

if TYPE_CHECKING:
    import httpx

log = logging.getLogger(__name__)

IMPORTING_DIR: Final = ".importing"
CHUNK_BYTES: Final = 1024 * 1024
ATTEMPTS_PER_FILE: Final = 3
CONNECT_SECONDS: Final = 5.0
READ_SECONDS: Final = 60.0


class ImportRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    version: int
    card: ModelCard
    installed_at: int
    files: tuple[ManifestEntry, ...]


class ImportRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    record: ImportRecord
    source_base_url: str
    capability_token: str
    target_node_id: str


class ImportFailed(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def decode_request(body: bytes) -> ImportRequest:
    try:
        return msgspec.json.decode(body, type=ImportRequest)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise ImportFailed(400, f"malformed import request: {exc}") from None


async def run_import(store: StoreHostService, request: ImportRequest) -> StoreEntry:
    """Pull, verify and publish; the resulting store entry. Raises ImportFailed."""
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    record = request.record
    model_id = record.card.model_id
    node = store.node
    _check(store, request)
    final = store.downloads.model_dir(model_id)
    work = store.root / IMPORTING_DIR / final.name
    total = sum(f.size for f in record.files)
    await asyncio.to_thread(_admit, store.root, work, record.files, total)
    try:
        await asyncio.to_thread(_pull_all, request, work)
    except httpx.HTTPError as exc:
        raise ImportFailed(
            502, f"the source node was lost mid-import: {type(exc).__name__}"
        ) from None
    installed_at = int(time.time())
    manifest = tuple(ManifestFile(path=f.path, size=f.size, sha256=f.sha256) for f in record.files)
    await asyncio.to_thread(_publish, work, final, record.card, manifest, installed_at)
    node.installed_models.append(
        InstalledModel(card=record.card, location=str(final), installed_at=installed_at)
    )
    log.info("imported %s into the store from a node cache", model_id)
    for entry in store.entries():
        if entry.model_id == model_id:
            return entry
    raise ImportFailed(500, f"{model_id} was published but the store does not list it")


def _check(store: StoreHostService, request: ImportRequest) -> None:
    record = request.record
    model_id = record.card.model_id
    if request.target_node_id != store.node.node_id:
        raise ImportFailed(400, "target_node_id does not name this store node")
    source = urlsplit(request.source_base_url)
    if source.scheme not in ("http", "https") or not source.hostname:
        raise ImportFailed(400, "source_base_url must be an http(s) URL")
    if not request.capability_token or not record.files:
        raise ImportFailed(400, "the capability token and the manifest must not be empty")
    if model_id_escapes(model_id):
        raise ImportFailed(400, f"the model id {model_id!r} escapes the model directory")
    for item in record.files:
        if not is_safe_repo_path(item.path) or item.size < 0 or len(item.sha256) != 64:
            raise ImportFailed(400, f"the manifest names an unsafe entry {item.path!r}")
    if store.tombstones.deleted_at(model_id) is not None:
        raise ImportFailed(
            409, f"{model_id} was deleted from the store; only an explicit download restores it"
        )
    if store.manifest(model_id) is not None:
        raise ImportFailed(409, f"the store already holds {model_id}")
    trusted = store.catalog_card(model_id)
    if trusted is None or trusted != record.card:
        raise ImportFailed(
            409, f"the record's card for {model_id} is not the store host's catalog card"
        )
    try:
        store.downloads.model_dir(model_id)
    except DownloadRefused as exc:
        raise ImportFailed(exc.status, exc.message) from None


def _admit(root: Path, work: Path, files: tuple[ManifestEntry, ...], total: int) -> None:
    present = 0
    for item in files:
        partial = work / (item.path + INCOMPLETE_SUFFIX)
        done = work / item.path
        if done.is_file() and done.stat().st_size == item.size:
            present += item.size
        elif partial.is_file():
            present += min(partial.stat().st_size, item.size)
    missing = max(total - present, 0)
    free = shutil.disk_usage(root).free
    reserve = reserve_bytes()
    if missing + reserve > free:
        raise ImportFailed(
            507,
            f"not enough disk in the store for the import: {missing} more bytes plus a "
            f"{reserve}-byte reserve are needed and {free} are free",
        )


def _pull_all(request: ImportRequest, work: Path) -> None:
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    timeout = httpx.Timeout(READ_SECONDS, connect=CONNECT_SECONDS)
    headers = {TARGET_HEADER: request.target_node_id}
    with httpx.Client(timeout=timeout, headers=headers) as client:
        for item in request.record.files:
            _pull_one(client, request, work, item)


def _pull_one(
    client: httpx.Client, request: ImportRequest, work: Path, item: ManifestEntry
) -> None:
    import httpx  # noqa: PLC0415 (httpx loads where a request is made: issue 43)

    done = work / item.path
    if not done.resolve().is_relative_to(work.resolve()):
        raise ImportFailed(400, f"{item.path!r} escapes the model directory")
    if done.is_file() and done.stat().st_size == item.size and _sha256(done) == item.sha256:
        return
    done.parent.mkdir(parents=True, exist_ok=True)
    partial = done.with_name(done.name + INCOMPLETE_SUFFIX)
    partial.touch()
    url = (
        f"{request.source_base_url.rstrip('/')}/{quote(request.capability_token, safe='')}"
        f"/{quote(item.path)}"
    )
    for attempt in range(ATTEMPTS_PER_FILE):
        resume = partial.stat().st_size
        if resume > item.size:
            partial.write_bytes(b"")
            resume = 0
        if resume == item.size:
            break
        try:
            headers = {"range": f"bytes={resume}-"} if resume else {}
            with client.stream("GET", url, headers=headers) as answer:
                if answer.status_code != (206 if resume else 200):
                    answer.read()
                    raise ImportFailed(
                        502 if answer.status_code >= 500 else 409,
                        f"the source refused {item.path}: {answer.status_code} {_message(answer)}",
                    )
                with partial.open("ab") as handle:
                    for chunk in answer.iter_bytes():
                        handle.write(chunk)
                    handle.flush()
                    os.fsync(handle.fileno())
        except httpx.TransportError:
            if attempt == ATTEMPTS_PER_FILE - 1:
                raise
    size = partial.stat().st_size
    if size != item.size or _sha256(partial) != item.sha256:
        partial.unlink(missing_ok=True)
        raise ImportFailed(
            409,
            f"{item.path}: the bytes received do not match the record's manifest ({size} of "
            f"{item.size} bytes, or a SHA-256 mismatch); nothing was published",
        )
    os.replace(partial, done)


def _publish(
    work: Path,
    final: Path,
    card: ModelCard,
    manifest: tuple[ManifestFile, ...],
    installed_at: int,
) -> None:
    if final.exists():
        raise ImportFailed(409, f"{final.name} appeared in the store meanwhile")
    write_manifest(work, manifest)
    write_sidecar(work, card, installed_at)
    os.rename(work, final)
    fsync_dir(final.parent)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _message(answer: httpx.Response) -> str:
    try:
        body = answer.json()
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message", "")) if isinstance(error, dict) else ""
