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
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Final, TypeVar

import msgspec
from litestar import Controller, delete, get, post
from litestar.response import Stream

from skulk_core.ids import ModelId
from skulk_core.models.requirements import MAX_MODEL_ID_CHARS
from skulk_core.store.answers import (
    CancelledDownload,
    DownloadState,
    ModelDeleted,
    NodeStorage,
    PurgeOrdered,
    ReconciliationStatus,
    StoreDisk,
    StoreDownload,
    StoreHealth,
    StoreListing,
    StoreRegistry,
)
from skulk_core.store.optimize import OptimizeStarted, OptimizeStatus
from skulk_core.store.paths import model_id_escapes
from skulk_core.store.selection import DownloadSelection, bundle_conflict, selection_problem
from skulk_daemon.api.authority import declare
from skulk_daemon.api.connection import HttpRequest
from skulk_daemon.api.disclosure import storage_for
from skulk_daemon.api.openapi import OPENAI, errors
from skulk_daemon.api.store_optimize import (
    OPTIMIZE,
    OPTIMIZE_STATUS,
    decode_request,
    optimization_status,
    start_optimization,
)
from skulk_daemon.authority.peers import PeerClass, classify_name, origin_host
from skulk_daemon.authority.policy import Requirement
from skulk_daemon.errors import ApiError
from skulk_daemon.node.node import Node
from skulk_daemon.store.copies import enrich, inventory
from skulk_daemon.store.exports import TARGET_HEADER
from skulk_daemon.store.service import NOT_CONFIGURED, StoreService, StoreUnavailable
from skulk_daemon.store.storage import storage_report

DOWNLOAD: Final = "/download"
STATUS: Final = "/download/status"
MAX_BODY_FIELD_CHARS: Final = 512
SHA256_HEX_CHARS: Final = 64
EXPORT_CHUNK_BYTES: Final = 4 * 1024 * 1024
T = TypeVar("T")


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


def _answer(status: int, body: object, into: type[T]) -> T:
    """The store's JSON object on success, decoded ``into`` its wire type; its refusal
    (status and message) as an error, and a malformed answer as a 502."""
    if status >= 400 or not isinstance(body, (dict, list)):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise ApiError(
            status if status >= 400 else 502,
            str(message or "the store answered an unexpected body"),
            code="store_error",
        )
    try:
        return msgspec.convert(body, into)
    except msgspec.ValidationError as exc:
        raise ApiError(
            502, f"the store answered a malformed body: {exc}", code="store_error"
        ) from None


async def _relay(
    store: StoreService, method: str, path: str, into: type[T], body: object = None
) -> T:
    """The store's JSON answer to ``method path`` decoded ``into`` its wire type, or its
    refusal as an ApiError."""
    try:
        status, answer = await store.relay(method, path, body)
    except StoreUnavailable as exc:
        raise _unreachable(exc) from None
    return _answer(status, answer, into)


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
    async def health(self, store: StoreService, node: Node) -> StoreHealth:
        hosts: list[str] = sorted(node.state.store_hosts)
        try:
            status, body = await store.relay("GET", "/health")
        except StoreUnavailable as exc:
            return StoreHealth(configured=True, reachable=False, store_nodes=hosts, error=str(exc))
        disk = _answer(status, body, StoreDisk)
        return StoreHealth(
            configured=True,
            reachable=True,
            store_nodes=hosts,
            store_path=disk.store_path,
            free_bytes=disk.free_bytes,
            total_bytes=disk.total_bytes,
            used_bytes=disk.used_bytes,
            checked_at=disk.checked_at,
        )

    @get(
        "/store/registry",
        summary="The models the store holds, and where copies are",
        responses=errors(OPENAI, 502, 503),
    )
    async def registry(self, store: StoreService, node: Node) -> StoreRegistry:
        listing = await _relay(store, "GET", "/registry", StoreListing)
        return StoreRegistry(
            entries=[enrich(node, e) for e in listing.entries],
            cache_inventory=inventory(node),
        )

    @get(
        "/store/downloads",
        summary="Pending, active and failed store downloads",
        responses=errors(OPENAI, 502, 503),
    )
    async def downloads(self, store: StoreService) -> list[StoreDownload]:
        return await _relay(store, "GET", "/downloads", list[StoreDownload])

    @get("/store/storage", summary="This node's model storage, installed artifacts and free disk")
    async def storage(self, node: Node, request: HttpRequest) -> NodeStorage:
        return storage_for(request, storage_report(node))

    @get(
        "/store/models/{rest:path}",
        summary="A store download's (<model_id>/download/status) or optimization's "
        "(<model_id>/optimize/status) status",
        responses=errors(OPENAI, 400, 404, 502, 503),
    )
    async def download_status(
        self, store: StoreService, rest: str
    ) -> StoreDownload | DownloadState | OptimizeStatus:
        if rest.endswith(OPTIMIZE_STATUS):
            return await optimization_status(store, _model_id(rest, OPTIMIZE_STATUS))
        if not rest.endswith(STATUS):
            raise ApiError(404, f"no store route GET /store/models{rest}", code="not_found")
        model_id = _model_id(rest, STATUS)
        try:
            status, body = await store.relay("GET", store.model_path(model_id, STATUS))
        except StoreUnavailable as exc:
            return DownloadState(
                status="error", error=f"the store host could not be reached: {exc}"
            )
        if status == 404:
            return DownloadState(status="not_found")
        return _answer(status, body, StoreDownload)

    @post(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Ask the store host to fetch a model (<model_id>/download) or to optimize "
        "one (<model_id>/optimize: optional target_bpw and candidate_bits)",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def start_download(
        self,
        store: StoreService,
        node: Node,
        rest: str,
        request: HttpRequest,
        data: DownloadSelection | None = None,
    ) -> StoreDownload | OptimizeStarted:
        if rest.endswith(OPTIMIZE):
            model_id = _model_id(rest, OPTIMIZE)
            return await start_optimization(store, model_id, decode_request(await request.body()))
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
        return await _relay(store, "POST", path, StoreDownload, body)

    @delete(
        "/store/models/{rest:path}",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Cancel a store download (<model_id>/download) or delete a stored model",
        responses=errors(OPENAI, 400, 404, 409, 502, 503),
    )
    async def remove(self, store: StoreService, rest: str) -> CancelledDownload | ModelDeleted:
        if rest.endswith(DOWNLOAD):
            path = store.model_path(_model_id(rest, DOWNLOAD), DOWNLOAD)
            return await _relay(store, "DELETE", path, CancelledDownload)
        path = store.model_path(_model_id(rest))
        return await _relay(store, "DELETE", path, ModelDeleted)

    @post(
        "/store/purge-staging",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Drop staged copies on every node (never the store's own copy)",
        responses=errors(OPENAI, 400, 503),
    )
    async def purge_staging(
        self, store: StoreService, data: PurgeStagingBody | None = None
    ) -> PurgeOrdered:
        if not store.configured():
            raise ApiError(503, NOT_CONFIGURED, code="store_not_configured")
        model_id = None if data is None or data.model_id is None else _model_id(data.model_id)
        command_id = await store.purge_staging(None if model_id is None else ModelId(model_id))
        which = (
            "every model's staged copies" if model_id is None else f"staged copies of {model_id}"
        )
        return PurgeOrdered(
            command_id=command_id,
            message=f"every node was told to drop {which}; the store's copy stays",
        )

    @get(
        "/store/reconciliation",
        summary="What the store's reconciliation scanned, imported and refused",
        responses=errors(OPENAI, 502, 503),
    )
    async def reconciliation(self, store: StoreService) -> ReconciliationStatus:
        if store.reconciler is not None:
            return store.reconciler.status()
        return await _relay(store, "GET", "/reconciliation", ReconciliationStatus)

    @post(
        "/store/reconciliation/rescan",
        opt=declare(Requirement.DIRECT_LOOPBACK),
        status_code=200,
        summary="Run one store reconciliation pass now (from this machine only)",
        responses=errors(OPENAI, 403, 502, 503),
    )
    async def rescan(self, store: StoreService, request: HttpRequest) -> ReconciliationStatus:
        origin = request.headers.get("origin")
        if origin is not None and classify_name(origin_host(origin)) != PeerClass.LOOPBACK:
            raise ApiError(
                403, "a rescan is accepted from a page served by this machine only", code="origin"
            )
        if store.reconciler is not None:
            return await store.reconciler.rescan()
        return await _relay(store, "POST", "/reconciliation/rescan", ReconciliationStatus)

    @post(
        "/store/internal/exports",
        opt=declare(Requirement.TRUSTED_FABRIC),
        status_code=200,
        summary="Lend this node's cached copy to the store host (internal reconciliation)",
        responses=errors(OPENAI, 400, 403, 404),
        include_in_schema=False,
    )
    async def grant_export(
        self, store: StoreService, data: ExportBody, request: HttpRequest
    ) -> dict[str, object]:
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
        self, store: StoreService, token: str, relative: str, request: HttpRequest
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
