"""The public model-store routes: ``/store/...`` on every node.

Thin handlers over :class:`~skulk_daemon.store.service.StoreService`, which reaches
the store host's internal transport wherever it runs; with no store host in the
cluster every route but ``/store/storage`` answers ``503 Store not configured``.
Reads are open; downloads and deletions admit loopback, trusted-fabric peers and the
operator gateway (as ``POST /download/start``).

``POST /store/purge-staging`` orders every node's staged copies dropped through the
event log (``PurgeStaging``), the path a store delete's eviction takes.
``/store/reconciliation`` (and its loopback-only ``/rescan``) answer from the store
host's reconciler, here or through the transport; ``/store/internal/exports`` lend
this node's cached copy to the store host (:mod:`skulk_daemon.store.exports`).

Model ids contain ``/`` and travel raw, so each method has one ``{rest:path}`` route
under ``/store/models/``: ``<id>/download/status`` (GET), ``<id>/download`` (POST,
DELETE) and ``<id>`` (DELETE) are told apart by their suffix.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import msgspec
from litestar import Controller, Request, delete, get, post
from litestar.response import Stream

from skulk_core.ids import ModelId, NodeId
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS
from skulk_core.store.paths import model_id_escapes
from skulk_core.store.reconcile import ManifestEntry, manifest_digest
from skulk_core.store.selection import DownloadSelection, bundle_conflict, selection_problem
from skulk_daemon.api.authority import declare
from skulk_daemon.api.disclosure import storage_for
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.authority.peers import PeerClass, classify_name, origin_host
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.hub.download import COMPLETED
from skulk_daemon.hub.manifest import read_manifest
from skulk_daemon.node.node import Node
from skulk_daemon.store.cache import is_staged, last_used
from skulk_daemon.store.exports import TARGET_HEADER
from skulk_daemon.store.host import LOCATION_NODE, LOCATION_STORE, store_root
from skulk_daemon.store.service import NOT_CONFIGURED, StoreService, StoreUnavailable

DOWNLOAD: Final = "/download"
STATUS: Final = "/download/status"
MAX_BODY_FIELD_CHARS: Final = 512
SHA256_HEX_CHARS: Final = 64
EXPORT_CHUNK_BYTES: Final = 4 * 1024 * 1024


class ExportBody(msgspec.Struct, frozen=True, kw_only=True):
    model_id: str
    manifest_sha256: str
    target_node_id: str


class PurgeStagingBody(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: str | None = None
    """Restrict the purge to this model's staged copies; omitted: every model's."""


def _model_id(value: str, suffix: str = "") -> str:
    model_id = value.removeprefix("/")
    if suffix:
        model_id = model_id.removesuffix(suffix)
    if not 1 <= len(model_id) <= MAX_MODEL_ID_CHARS:
        raise ApiError(
            400, f"model_id must be 1 to {MAX_MODEL_ID_CHARS} characters", code="invalid_model_id"
        )
    if model_id_escapes(model_id):
        raise ApiError(
            400,
            f"model id {model_id!r} escapes the model directory; give an owner/name id",
            code="invalid_model_id",
        )
    return model_id


def _answer(status: int, body: object) -> dict[str, Any]:
    """The store's JSON object on success; its refusal (status and message) as an error."""
    if status >= 400 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise ApiError(
            status if status >= 400 else 502,
            str(message or "the store answered an unexpected body"),
            code="store_error",
        )
    return body


async def _relay(store: StoreService, method: str, path: str, body: object = None) -> object:
    """The store's JSON answer to ``method path``, or its refusal as an ApiError."""
    try:
        status, answer = await store.relay(method, path, body)
    except StoreUnavailable as exc:
        raise _unreachable(exc) from None
    if status >= 400 or not isinstance(answer, (dict, list)):
        _answer(status, answer)
    return answer


def _unreachable(exc: StoreUnavailable) -> ApiError:
    return ApiError(502, f"the store host could not be reached: {exc}", code="store_unreachable")


class StoreController(Controller):
    tags = ("Model store",)
    opt = declare(Requirement.OPEN)

    @get(
        "/store/health",
        summary="Whether the model store is configured and reachable",
        responses=errors(OPENAI, 502, 503),
    )
    async def health(self, store: StoreService, node: Node) -> dict[str, Any]:
        hosts = sorted(node.state.store_hosts)
        try:
            status, body = await store.relay("GET", "/health")
        except StoreUnavailable as exc:
            return {"configured": True, "reachable": False, "store_nodes": hosts, "error": str(exc)}
        return {
            "configured": True,
            "reachable": True,
            "store_nodes": hosts,
            **_answer(status, body),
        }

    @get(
        "/store/registry",
        summary="The models the store holds, and where copies are",
        responses=errors(OPENAI, 502, 503),
    )
    async def registry(self, store: StoreService, node: Node) -> dict[str, Any]:
        body = await _relay(store, "GET", "/registry")
        entries = body.get("entries") if isinstance(body, dict) else None
        listed = entries if isinstance(entries, list) else []
        return {
            "entries": [_enrich(node, e) for e in listed],
            "cache_inventory": _inventory(node),
        }

    @get(
        "/store/downloads",
        summary="Pending, active and failed store downloads",
        responses=errors(OPENAI, 502, 503),
    )
    async def downloads(self, store: StoreService) -> list[dict[str, Any]]:
        body = await _relay(store, "GET", "/downloads")
        return [item for item in body if isinstance(item, dict)] if isinstance(body, list) else []

    @get("/store/storage", summary="This node's model storage, installed artifacts and free disk")
    async def storage(self, node: Node, request: Request[Any, Any, Any]) -> dict[str, Any]:
        return storage_for(request, _storage(node))

    @get(
        "/store/models/{rest:path}",
        summary="A store download's status (<model_id>/download/status)",
        responses=errors(OPENAI, 400, 404, 503),
    )
    async def download_status(self, store: StoreService, rest: str) -> dict[str, Any]:
        if not rest.endswith(STATUS):
            raise ApiError(404, f"no store route GET /store/models{rest}", code="not_found")
        model_id = _model_id(rest, STATUS)
        try:
            status, body = await store.relay("GET", store.model_path(model_id, STATUS))
        except StoreUnavailable as exc:
            return {"status": "error", "error": f"the store host could not be reached: {exc}"}
        if status == 404:
            return {"status": "not_found"}
        return _answer(status, body)

    @post(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Ask the store host to fetch a model (<model_id>/download)",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def start_download(
        self, store: StoreService, node: Node, rest: str, data: DownloadSelection | None = None
    ) -> dict[str, Any]:
        if not rest.endswith(DOWNLOAD):
            raise ApiError(404, f"no store route POST /store/models{rest}", code="not_found")
        model_id = _model_id(rest, DOWNLOAD)
        selection = data if data is not None else DownloadSelection()
        problem = selection_problem(selection)
        if problem is not None:
            raise ApiError(400, problem, code="invalid_selection")
        if selection.artifact_bundle_id is not None:
            _check_bundle(node, model_id, selection)
        body = msgspec.to_builtins(selection)
        path = store.model_path(model_id, DOWNLOAD)
        return _answer(200, await _relay(store, "POST", path, body))

    @delete(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Cancel a store download (<model_id>/download) or delete a stored model",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def remove(self, store: StoreService, rest: str) -> dict[str, Any]:
        if rest.endswith(DOWNLOAD):
            path = store.model_path(_model_id(rest, DOWNLOAD), DOWNLOAD)
        else:
            path = store.model_path(_model_id(rest))
        return _answer(200, await _relay(store, "DELETE", path))

    @post(
        "/store/purge-staging",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Drop staged copies on every node (never the store's own copy)",
        responses=errors(OPENAI, 400, 503),
    )
    async def purge_staging(
        self, store: StoreService, data: PurgeStagingBody | None = None
    ) -> dict[str, Any]:
        if not store.configured():
            raise ApiError(503, NOT_CONFIGURED, code="store_not_configured")
        model_id = None if data is None or data.model_id is None else _model_id(data.model_id)
        command_id = await store.purge_staging(None if model_id is None else ModelId(model_id))
        which = (
            "every model's staged copies" if model_id is None else f"staged copies of {model_id}"
        )
        return {
            "commandId": command_id,
            "message": f"every node was told to drop {which}; the store's copy stays",
        }

    @get(
        "/store/reconciliation",
        summary="What the store's reconciliation scanned, imported and refused",
        responses=errors(OPENAI, 502, 503),
    )
    async def reconciliation(self, store: StoreService) -> dict[str, Any]:
        if store.reconciler is not None:
            return store.reconciler.status()
        return _answer(200, await _relay(store, "GET", "/reconciliation"))

    @post(
        "/store/reconciliation/rescan",
        opt=declare(Requirement.DIRECT_LOOPBACK),
        status_code=200,
        summary="Run one store reconciliation pass now (from this machine only)",
        responses=errors(OPENAI, 403, 502, 503),
    )
    async def rescan(self, store: StoreService, request: Request[Any, Any, Any]) -> dict[str, Any]:
        origin = request.headers.get("origin")
        if origin is not None and classify_name(origin_host(origin)) != PeerClass.LOOPBACK:
            raise ApiError(
                403, "a rescan is accepted from a page served by this machine only", code="origin"
            )
        if store.reconciler is not None:
            return await store.reconciler.rescan()
        return _answer(200, await _relay(store, "POST", "/reconciliation/rescan"))

    @post(
        "/store/internal/exports",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Lend this node's cached copy to the store host (internal reconciliation)",
        responses=errors(OPENAI, 400, 403, 404),
        include_in_schema=False,
    )
    async def grant_export(
        self, store: StoreService, data: ExportBody, request: Request[Any, Any, Any]
    ) -> dict[str, Any]:
        if len(data.manifest_sha256) != SHA256_HEX_CHARS:
            raise ApiError(400, "manifest_sha256 must be 64 hex characters", code="invalid")
        model_id = _model_id(data.model_id)
        peer = request.client.host if request.client else None
        return store.exports.grant(model_id, data.manifest_sha256, data.target_node_id, peer)

    @get(
        "/store/internal/exports/{token:str}/{relative:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        summary="Read a lent file (internal reconciliation transport)",
        responses=errors(OPENAI, 400, 403, 404, 409, 416),
        include_in_schema=False,
    )
    async def read_export(
        self, store: StoreService, token: str, relative: str, request: Request[Any, Any, Any]
    ) -> Stream:
        lent = store.exports.read(
            token,
            relative.removeprefix("/"),
            target_node_id=request.headers.get(TARGET_HEADER),
            peer=request.client.host if request.client else None,
            range_header=request.headers.get("range"),
        )
        headers = {"accept-ranges": "bytes", "content-length": str(max(lent.span.length, 0))}
        if lent.partial:
            headers["content-range"] = lent.span.content_range(lent.size)
        return Stream(
            _file_chunks(lent.path, lent.span.start, lent.span.length),
            media_type="application/octet-stream",
            status_code=206 if lent.partial else 200,
            headers=headers,
        )


def _check_bundle(node: Node, model_id: str, selection: DownloadSelection) -> None:
    """This API node must resolve the same bundle as the store (409 when it does not)."""
    entry = node.catalog().get(model_id)
    card = None
    if entry is not None:
        card = entry.registry_card if selection.registry_card_id is not None else entry.card
    conflict = bundle_conflict(model_id, card, str(selection.artifact_bundle_id))
    if conflict is not None:
        raise ApiError(409, f"this node: {conflict.message}", code="selection_conflict")


async def _file_chunks(path: Path, start: int, length: int) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(start)
        left = length
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(EXPORT_CHUNK_BYTES, left))
            if not chunk:
                return
            left -= len(chunk)
            yield chunk


def _cached_on(node: Node, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """Where the model's bytes are: the store host's canonical copy (``store_local``,
    with its exact installed identity) and every node reporting a complete copy through
    ``ReportDownloadProgress`` (``node_cache``). ``in_use`` is a placed instance on that
    node; ``last_used_at`` is known for this node's own staged copy (its last-use
    marker) and null elsewhere."""
    model_id = str(entry.get("model_id"))
    stores = node.state.store_hosts
    busy = {
        (node_id, i.shard_assignments.model_id)
        for i in node.state.instances.values()
        for node_id in i.shard_assignments.node_to_runner
    }
    found: dict[str, dict[str, Any]] = {}
    digest = entry.get("manifest_sha256")
    for store_node in sorted(stores):
        found[store_node] = {
            "node_id": store_node,
            "identity": f"{model_id}@{digest}" if isinstance(digest, str) else None,
            "complete": True,
            "bytes": entry.get("total_bytes"),
            "last_used_at": None,
            "in_use": (store_node, model_id) in busy,
            "location_kind": LOCATION_STORE,
        }
    own = _own_copy(node, model_id)
    for node_id, reports in sorted(node.state.downloads.items()):
        for progress in reports:
            if progress.model_id != model_id or progress.status != COMPLETED:
                continue
            if node_id in found:
                continue
            mine = node_id == node.node_id and own is not None
            found[node_id] = {
                "node_id": node_id,
                "identity": own[0] if mine and own is not None else None,
                "complete": True,
                "bytes": progress.total_bytes,
                "last_used_at": own[1] if mine and own is not None else None,
                "in_use": (node_id, model_id) in busy,
                "location_kind": LOCATION_NODE,
            }
    return list(found.values())


def _own_copy(node: Node, model_id: str) -> tuple[str | None, float | None] | None:
    """This node's node-cache copy of ``model_id``: (installed identity, last use)."""
    root = node.models_dir.resolve()
    for model in node.installed_models:
        location = Path(model.location)
        if model.card.model_id != model_id or location.resolve().parent != root:
            continue
        manifest = read_manifest(location)
        if manifest is None:
            return None
        digest = manifest_digest(
            ManifestEntry(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files
        )
        used = last_used(location, float(model.installed_at)) if is_staged(location) else None
        return f"{model_id}@{digest}", used
    return None


def _enrich(node: Node, entry: object) -> object:
    if not isinstance(entry, dict):
        return entry
    # The store lists only generations whose every file was verified before its
    # manifest was written; anything else is unresolved and never imported or served.
    whole = entry.get("manifest_complete") is True and entry.get("verification_state") == (
        "verified"
    )
    reconciliation = "verified" if whole else "unresolved"
    return {
        **entry,
        "cached_on_nodes": _cached_on(node, entry),
        "reconciliation_state": reconciliation,
    }


def _inventory(node: Node) -> dict[str, Any]:
    view = node.view()
    members = list(view.state.topology.nodes)
    observed = [n for n in members if n in view.telemetry]
    coverage = (
        "unavailable"
        if not observed
        else ("current" if len(observed) == len(members) else "syncing")
    )
    return {
        "observed_nodes": len(observed),
        "expected_nodes": len(members),
        "coverage": coverage,
        "store_nodes": sorted(NodeId(n) for n in view.state.store_hosts),
    }


def _storage(node: Node) -> dict[str, Any]:
    """Every installed artifact on this node, its size and use, and the free disk."""
    in_use = {i.shard_assignments.model_id for i in node.state.instances.values()}
    store = store_root(node).resolve() if node.config.model_store.store_host else None
    artifacts: list[dict[str, Any]] = []
    for model in node.installed_models:
        location = Path(model.location)
        manifest = read_manifest(location)
        size = (
            sum(f.size for f in manifest.files)
            if manifest is not None
            else model.card.storage_size.in_bytes
        )
        inside_store = store is not None and location.resolve().is_relative_to(store)
        digest = (
            None
            if manifest is None
            else manifest_digest(
                ManifestEntry(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files
            )
        )
        artifacts.append(
            {
                "model_id": model.card.model_id,
                "path": str(location),
                "size_bytes": size,
                "installed_at": model.installed_at,
                "in_use": model.card.model_id in in_use,
                "locationKind": LOCATION_STORE if inside_store else LOCATION_NODE,
                "manifestComplete": manifest is not None,
                "manifestSha256": digest,
                "installedIdentity": None if digest is None else f"{model.card.model_id}@{digest}",
                "verificationState": "verified" if manifest is not None else "unresolved",
            }
        )
    node.models_dir.mkdir(parents=True, exist_ok=True)
    usage = shutil.disk_usage(node.models_dir)
    return {
        "node_id": node.node_id,
        "artifacts": artifacts,
        "models_dir": str(node.models_dir),
        "free_bytes": usage.free,
        "total_bytes": usage.total,
    }
