"""The store host's internal transport: plain HTTP on ``model_store.store_port``.

A small Litestar application of its own (not the API's app: these paths are not in the
API's OpenAPI document), under the same authority policy as the API port
(:mod:`skulk_daemon.authority.policy`), read the same way
(:mod:`skulk_daemon.authority.facts`): a ``Host`` that does not name this node is 421
(DNS rebinding), a body that is not JSON 415, any ``Origin`` 403 (no browser has
business here). Every route takes :attr:`Requirement.STORE_PEER` (this machine or a
trusted-fabric peer, no proxy headers); ``POST /imports`` takes
:attr:`Requirement.STORE_LOOPBACK`.

The model id is one URL component (``org%2Fmodel``): :func:`_one_segment_per_id`
rebuilds the routed path from the raw one so that an encoded ``/`` stays inside its
segment, and the handlers decode it.

``GET /models/{id}/{path}`` serves only files the model's SHA-256 manifest lists,
whole (200) or one ``Range`` (206); a malformed range is 400, one past the end 416, a
path escaping the model directory 400. HEAD answers as GET without the body.

``POST /imports`` pulls one node-cache copy into the store
(:mod:`skulk_daemon.store.imports`); ``GET /reconciliation`` and ``POST
/reconciliation/rescan`` are the reconciler's status and its immediate pass, for the
public ``/store/reconciliation`` routes of any node. ``POST /models/{id}/optimize``
and ``GET /models/{id}/optimize/status`` are the store host's optimizer
(:mod:`skulk_daemon.store.optimizer`) for the public optimize routes of other nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Final, TypeAlias
from urllib.parse import quote, unquote

import msgspec
from litestar import Controller, Litestar, Request, Response, delete, post, route
from litestar.connection import ASGIConnection
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.enums import MediaType
from litestar.exceptions import HTTPException
from litestar.handlers.base import BaseRouteHandler
from litestar.params import FromPath, FromQuery
from litestar.response import Stream
from litestar.types import ASGIApp, Receive, Scope, Send

from skulk_core.config import SkulkConfig
from skulk_core.models.custom_cards import SOURCE_REVISION_PATTERN
from skulk_core.state.state import DownloadProgress
from skulk_core.store.answers import ReconciliationStatus, StoreDisk, StoreEntry
from skulk_core.store.optimize import (
    OptimizeRequest,
    OptimizeStarted,
    OptimizeStatus,
    request_problem,
)
from skulk_core.store.paths import model_id_escapes
from skulk_core.store.ranges import ByteRange, RangeRefused, parse_range
from skulk_core.store.selection import DownloadSelection, selection_problem
from skulk_daemon.authority.facts import request_facts
from skulk_daemon.authority.hosts import OwnNames
from skulk_daemon.authority.policy import Refusal, Requirement, RouteAuthority, decide
from skulk_daemon.hub.download import DownloadRefused
from skulk_daemon.store.host import SELECTION_CONFLICT, StoreHostService
from skulk_daemon.store.imports import ImportFailed, decode_request, run_import
from skulk_daemon.store.optimizer import Optimizer, OptimizeRefused
from skulk_daemon.store.reconcile import Reconciler
from skulk_daemon.store.recovery import recover_installed_cards as recover
from skulk_daemon.store.wire import StoreDownload, download_body

log = logging.getLogger(__name__)

CHUNK_BYTES: Final = 4 * 1024 * 1024
MAX_BODY_BYTES: Final = 64 * 1024
MAX_IMPORT_BODY_BYTES: Final = 8 * 1024 * 1024
# The handlers' dependencies, by name (the app provides each once).
Store: TypeAlias = NamedDependency[StoreHostService]
Evict: TypeAlias = NamedDependency[Callable[[str], Awaitable[None]]]
MaybeReconciler: TypeAlias = NamedDependency[Reconciler | None]
MaybeOptimizer: TypeAlias = NamedDependency[Optimizer | None]
# NOTE: the store port has no auth middleware and no custom user, so a request's user
# and auth are None and its state is the app's plain State.
StoreRequest: TypeAlias = Request[None, None, State]
STORE_AUTHORITY: Final = "store_authority"
"""The ``opt`` key a store route declares its :class:`RouteAuthority` under."""


# -- wire ----------------------------------------------------------------------------


class StoreErrorDetail(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    message: str
    status: int
    code: str | None = None


class StoreError(msgspec.Struct, frozen=True, kw_only=True):
    error: StoreErrorDetail


class Registry(msgspec.Struct, frozen=True, kw_only=True):
    entries: list[StoreEntry]


class StoreFile(msgspec.Struct, frozen=True, kw_only=True):
    path: str
    size: int
    sha256: str


class ModelFiles(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Path, size and digest only: where an import linked from stays local."""

    model_id: str
    version: int
    files: list[StoreFile]


class Deleted(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: str
    deleted: bool = True


class CancelledDownload(StoreDownload, frozen=True, kw_only=True, rename="camel"):
    cancelled: bool = True


class StoreRefused(Exception):
    """A refusal in the store's envelope ``{"error": {"message", "status"[, "code"]}}``."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code


def _answer(status: int, message: str, code: str | None = None) -> Response[StoreError]:
    detail = StoreErrorDetail(message=message, status=status, code=code)
    return Response(StoreError(error=detail), status_code=status, media_type=MediaType.JSON)


# -- authority -----------------------------------------------------------------------


def _declare(requirement: Requirement) -> dict[str, RouteAuthority]:
    return {STORE_AUTHORITY: RouteAuthority(requirement)}


class StoreGuard:
    """The API port's policy, applied to the store port's callers."""

    def __init__(self, config: Callable[[], SkulkConfig], names: OwnNames | None = None) -> None:
        self._config = config
        self._names = names or OwnNames()

    def __call__(
        self,
        connection: ASGIConnection[BaseRouteHandler, None, None, State],
        handler: BaseRouteHandler,
    ) -> None:
        declared = handler.opt.get(STORE_AUTHORITY)
        route = declared if isinstance(declared, RouteAuthority) else None
        if route is None:
            raise StoreRefused(403, "this store route declares no authority", "undeclared_route")
        facts = request_facts(connection.scope, config=self._config(), names=self._names)
        outcome = decide(facts, route)
        if isinstance(outcome, Refusal):
            raise StoreRefused(outcome.status, outcome.message, outcome.code)


# -- routes --------------------------------------------------------------------------


def _model(segment: str) -> str:
    model_id = unquote(segment)
    if model_id_escapes(model_id):
        raise StoreRefused(400, f"the model id {model_id!r} escapes the model directory")
    return model_id


async def _json_body(request: StoreRequest) -> DownloadSelection:
    body = await request.body()
    if not body.strip():
        return DownloadSelection()
    try:
        return msgspec.json.decode(body, type=DownloadSelection)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise StoreRefused(400, f"invalid request body: {exc}") from None


def _download_body(store: StoreHostService, progress: DownloadProgress) -> StoreDownload:
    card = store.catalog_card(progress.model_id)
    return download_body(progress, None if card is None else card.source_revision)


class StoreController(Controller):
    opt = _declare(Requirement.STORE_PEER)

    @route("/health", http_method=["GET", "HEAD"])
    async def health(self, store: Store) -> StoreDisk:
        return store.disk()

    @route("/registry", http_method=["GET", "HEAD"])
    async def registry(
        self, store: Store, recover_installed_cards: FromQuery[bool] = False
    ) -> Registry:
        # NOTE: recovery writes sidecars and appends to the node's installed models; it
        # runs on the loop's thread (as every other change to that list does), and it
        # reads only manifests and card records, never model bytes.
        if recover_installed_cards:
            recover(store)
        return Registry(entries=store.entries())

    @route("/models", http_method=["GET", "HEAD"])
    async def models(self, store: Store) -> list[str]:
        return store.model_ids()

    @route("/downloads", http_method=["GET", "HEAD"])
    async def downloads(self, store: Store) -> list[StoreDownload]:
        return [_download_body(store, p) for p in store.downloads.listing()]

    @post(
        "/imports",
        status_code=200,
        opt=_declare(Requirement.STORE_LOOPBACK),
        request_max_body_size=MAX_IMPORT_BODY_BYTES,
    )
    async def imports(self, store: Store, request: StoreRequest) -> StoreEntry:
        try:
            return await run_import(store, decode_request(await request.body()))
        except ImportFailed as exc:
            raise StoreRefused(exc.status, exc.message) from None
        except DownloadRefused as exc:
            raise StoreRefused(exc.status, exc.message) from None

    @route("/reconciliation", http_method=["GET", "HEAD"])
    async def reconciliation(self, reconciler: MaybeReconciler) -> ReconciliationStatus:
        if reconciler is None:
            raise StoreRefused(404, "no such store path '/reconciliation'")
        return reconciler.status()

    @post("/reconciliation/rescan", status_code=200)
    async def rescan(self, reconciler: MaybeReconciler) -> ReconciliationStatus:
        if reconciler is None:
            raise StoreRefused(404, "no such store path '/reconciliation/rescan'")
        return await reconciler.rescan()

    @delete("/models/{model:str}", status_code=200)
    async def delete_model(self, store: Store, evict: Evict, model: FromPath[str]) -> Deleted:
        model_id = _model(model)
        await store.delete(model_id)
        await evict(model_id)
        return Deleted(model_id=model_id)

    @route("/models/{model:str}/files", http_method=["GET", "HEAD"])
    async def files(
        self, store: Store, model: FromPath[str], source_revision: FromQuery[str | None] = None
    ) -> ModelFiles:
        model_id = _model(model)
        _at_revision(store, model_id, source_revision)
        manifest = store.manifest(model_id)
        if manifest is None:
            raise StoreRefused(404, f"the store holds no complete model {model_id}")
        files = [StoreFile(path=f.path, size=f.size, sha256=f.sha256) for f in manifest.files]
        return ModelFiles(model_id=model_id, version=manifest.version, files=files)

    @post("/models/{model:str}/download", status_code=200, request_max_body_size=MAX_BODY_BYTES)
    async def download(
        self, store: Store, model: FromPath[str], request: StoreRequest
    ) -> StoreDownload:
        model_id = _model(model)
        selection = await _json_body(request)
        problem = selection_problem(selection)
        if problem is not None:
            raise StoreRefused(400, problem)
        entry = store.catalog_card(model_id)
        try:
            progress = await store.start(model_id, selection)
        except DownloadRefused as exc:
            if exc.status in (400, 404) or exc.code == SELECTION_CONFLICT:
                raise  # a malformed, unknown or unverifiable selection: its own status
            return StoreDownload(
                model_id=model_id,
                source_revision=None if entry is None else entry.source_revision,
                status="error",
                progress=0.0,
                error=exc.message,
            )
        return _download_body(store, progress)

    @delete("/models/{model:str}/download", status_code=200)
    async def cancel(self, store: Store, model: FromPath[str]) -> CancelledDownload:
        model_id = _model(model)
        progress = await store.downloads.cancel(model_id)
        if progress is None:
            raise StoreRefused(409, f"no cancellable store download of {model_id}")
        body = _download_body(store, progress)
        return CancelledDownload(**msgspec.structs.asdict(body))

    @route("/models/{model:str}/download/status", http_method=["GET", "HEAD"])
    async def download_status(self, store: Store, model: FromPath[str]) -> StoreDownload:
        model_id = _model(model)
        found = store.downloads.progress(model_id)
        if found is None and store.manifest(model_id) is not None:
            found = await store.start(model_id)  # complete: answers without a transfer
        if found is None:
            raise StoreRefused(404, f"no store download of {model_id}")
        return _download_body(store, found)

    @post("/models/{model:str}/optimize", status_code=200, request_max_body_size=MAX_BODY_BYTES)
    async def optimize(
        self, optimizer: MaybeOptimizer, model: FromPath[str], request: StoreRequest
    ) -> OptimizeStarted:
        """The API's ``POST /store/models/{id}/optimize`` from a node that is not the
        store host (the body was checked there; it is checked again here)."""
        model_id = _model(model)
        try:
            body = msgspec.json.decode(await request.body() or b"{}", type=OptimizeRequest)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise StoreRefused(400, f"invalid optimize body: {exc}", "invalid_request") from None
        problem = request_problem(body)
        if problem is not None:
            raise StoreRefused(400, problem, "invalid_request")
        if optimizer is None:
            raise StoreRefused(503, "this store has no optimizer", "optimizer_unavailable")
        try:
            return await optimizer.start(model_id, body)
        except OptimizeRefused as exc:
            raise StoreRefused(exc.status, exc.message, exc.code) from None

    @route("/models/{model:str}/optimize/status", http_method=["GET", "HEAD"])
    async def optimize_status(
        self, optimizer: MaybeOptimizer, model: FromPath[str]
    ) -> OptimizeStatus:
        model_id = _model(model)
        problem = "this store has no optimizer" if optimizer is None else optimizer.available()
        if optimizer is None or problem is not None:
            raise StoreRefused(503, problem or "no optimizer", "optimizer_unavailable")
        try:
            return optimizer.status(model_id)
        except OptimizeRefused as exc:
            raise StoreRefused(exc.status, exc.message, exc.code) from None

    @route("/models/{model:str}/{relative:path}", http_method=["GET", "HEAD"])
    async def file(
        self,
        store: Store,
        model: FromPath[str],
        relative: FromPath[Path],
        request: StoreRequest,
        source_revision: FromQuery[str | None] = None,
    ) -> Stream:
        model_id = _model(model)
        _at_revision(store, model_id, source_revision)
        parts = relative.as_posix().strip("/").split("/")
        wanted_path = "/".join(unquote(part) for part in parts)
        return _file(store, model_id, wanted_path, request)


def _at_revision(store: StoreHostService, model_id: str, source_revision: str | None) -> None:
    """A malformed ``source_revision`` is 400; a copy at another revision is 404."""
    if source_revision is not None and SOURCE_REVISION_PATTERN.fullmatch(source_revision) is None:
        raise StoreRefused(
            400, "source_revision must be a full 40-character lowercase hexadecimal commit id"
        )
    problem = store.revision_problem(model_id, source_revision)
    if problem is not None:
        raise StoreRefused(404, problem)


def _file(store: StoreHostService, model_id: str, relative: str, request: StoreRequest) -> Stream:
    found = store.file_path(model_id, relative)
    if found == "unsafe":
        raise StoreRefused(400, f"the path {relative!r} escapes the model directory")
    if not isinstance(found, Path):
        raise StoreRefused(404, f"the store has no file {relative!r} of {model_id}")
    size = found.stat().st_size
    ranges = request.headers.getall("range", [])
    # More than one Range header is not a single range: refused as malformed.
    wanted = parse_range(ranges[0] if len(ranges) == 1 else "repeated" if ranges else None, size)
    if isinstance(wanted, RangeRefused):
        raise StoreRefused(wanted.status, wanted.message)
    span = wanted if wanted is not None else ByteRange(start=0, end=size - 1)
    headers = {"accept-ranges": "bytes", "content-length": str(max(span.length, 0))}
    if wanted is not None:
        headers["content-range"] = wanted.content_range(size)
    empty = request.method == "HEAD" or size == 0
    return Stream(
        _nothing() if empty else _read(found, span),
        status_code=206 if wanted is not None else 200,
        media_type="application/octet-stream",
        headers=headers,
    )


async def _nothing() -> AsyncIterator[bytes]:
    return
    yield b""  # an async generator that yields nothing


async def _read(path: Path, span: ByteRange) -> AsyncIterator[bytes]:
    with path.open("rb") as handle:
        handle.seek(span.start)
        left = span.length
        while left > 0:
            chunk = await asyncio.to_thread(handle.read, min(CHUNK_BYTES, left))
            if not chunk:
                return  # the file shrank under us; the client sees a short body
            left -= len(chunk)
            yield chunk


# -- errors --------------------------------------------------------------------------


def _on_refused(_: StoreRequest, exc: StoreRefused) -> Response[StoreError]:
    return _answer(exc.status, exc.message, exc.code)


def _on_download(_: StoreRequest, exc: DownloadRefused) -> Response[StoreError]:
    return _answer(exc.status, exc.message, exc.code)


def _on_http(request: StoreRequest, exc: HTTPException) -> Response[StoreError]:
    if exc.status_code == 404:
        return _answer(404, f"no such store path {request.url.path!r}")
    if exc.status_code == 405:
        return _answer(405, f"{request.method} is not served at {request.url.path}")
    return _answer(exc.status_code, exc.detail)


def _on_unexpected(_: StoreRequest, exc: Exception) -> Response[StoreError]:
    log.exception("unhandled error on the store transport", exc_info=exc)
    return _answer(500, "internal error; see the store host's log")


# -- the app -------------------------------------------------------------------------


def _one_segment_per_id(app: ASGIApp) -> ASGIApp:
    """Routes on the raw path, each segment decoded but an encoded ``/`` (or ``%``)
    kept encoded, so ``/models/org%2Fmodel/files`` has the model id as one segment."""

    async def routed(scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path")
        if str(scope["type"]) == "http" and raw:
            path = bytes(raw).split(b"?", 1)[0].decode("latin-1")
            segments = [quote(unquote(part), safe="") for part in path.split("/")]
            mutable: MutableMapping[str, Any] = scope  # type: ignore[assignment]
            mutable["path"] = "/".join(segments)
        await app(scope, receive, send)

    return routed


def store_app(
    store: Store,
    evict: Callable[[str], Awaitable[None]],
    reconciler: Reconciler | None,
    config: Callable[[], SkulkConfig],
    optimizer: Optimizer | None = None,
) -> ASGIApp:
    """The transport; ``evict`` is called after a model is deleted from the store;
    ``optimizer`` answers the optimize routes (503 without one)."""

    def constant(value: object) -> Provide:
        return Provide(lambda: value, use_cache=True, sync_to_thread=False)

    app = Litestar(
        route_handlers=[StoreController],
        guards=[StoreGuard(config)],
        dependencies={
            "store": constant(store),
            "evict": constant(evict),
            "reconciler": constant(reconciler),
            "optimizer": constant(optimizer),
        },
        exception_handlers={
            StoreRefused: _on_refused,
            DownloadRefused: _on_download,
            HTTPException: _on_http,
            Exception: _on_unexpected,
        },
        openapi_config=None,
        logging_config=None,
    )
    return _one_segment_per_id(app)
