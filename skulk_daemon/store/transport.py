"""The store host's internal transport: plain HTTP on ``model_store.store_port``.

A small ASGI application of its own (not the API's Litestar app: these paths are not
in the API's OpenAPI document). Only trusted-fabric peers (loopback, private LAN,
CGNAT socket addresses, :mod:`skulk_daemon.authority.peers`) with no proxy-forwarding
headers are served; anyone else gets 403. The model id is one URL component
(``org%2Fmodel``), so routing reads the raw path, never the decoded one.

``GET /models/{id}/{path}`` serves only files the model's SHA-256 manifest lists,
whole (200) or one ``Range`` (206); a malformed range is 400, one past the end 416, a
path escaping the model directory 400. HEAD answers as GET without the body.

``POST /imports`` (a direct loopback peer only) pulls one node-cache copy into the
store (:mod:`skulk_daemon.store.imports`); ``GET /reconciliation`` and ``POST
/reconciliation/rescan`` are the reconciler's status and its immediate pass, for the
public ``/store/reconciliation`` routes of any node.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote

import msgspec

from skulk_core.state.state import DownloadProgress
from skulk_core.store.paths import model_id_escapes
from skulk_core.store.ranges import ByteRange, RangeRefused, parse_range
from skulk_core.store.selection import DownloadSelection, selection_problem
from skulk_daemon.authority.peers import PeerClass, classify, forwarding_header
from skulk_daemon.hub.download import DownloadRefused
from skulk_daemon.store.host import SELECTION_CONFLICT, StoreHostService
from skulk_daemon.store.imports import ImportFailed, decode_request, run_import
from skulk_daemon.store.reconcile import Reconciler
from skulk_daemon.store.wire import StoreDownload, download_body

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

CHUNK_BYTES: Final = 4 * 1024 * 1024
MAX_BODY_BYTES: Final = 64 * 1024
MAX_IMPORT_BODY_BYTES: Final = 8 * 1024 * 1024


class _Reply(Exception):
    def __init__(self, status: int, body: object) -> None:
        self.status = status
        self.body = body


def _error(status: int, message: str) -> _Reply:
    return _Reply(status, {"error": {"message": message, "status": status}})


class StoreTransport:
    """The ASGI app; ``evict`` is called after a model is deleted from the store."""

    def __init__(
        self,
        store: StoreHostService,
        evict: Callable[[str], Awaitable[None]],
        reconciler: Reconciler | None = None,
    ) -> None:
        self._store = store
        self._evict = evict
        self._reconciler = reconciler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        method = str(scope["method"]).upper()
        try:
            self._admit(scope)
            await self._route(scope, receive, send, method)
        except _Reply as reply:
            await _send_json(send, reply.status, reply.body, head=method == "HEAD")
        except DownloadRefused as exc:
            await _send_json(
                send,
                exc.status,
                {"error": {"message": exc.message, "code": exc.code, "status": exc.status}},
                head=method == "HEAD",
            )

    def _admit(self, scope: Scope) -> None:
        client = scope.get("client")
        peer = classify(client[0] if client else None)
        names = [bytes(name).decode("latin-1").lower() for name, _ in scope.get("headers", [])]
        if not peer.trusted_fabric or forwarding_header(names) is not None:
            raise _error(403, "the store transport serves trusted cluster peers only")

    async def _route(self, scope: Scope, receive: Receive, send: Send, method: str) -> None:
        raw = bytes(scope.get("raw_path") or str(scope["path"]).encode())
        raw_path = raw.split(b"?", 1)[0].decode("latin-1")
        parts = [unquote(part) for part in raw_path.strip("/").split("/")] if raw_path else []
        read = method in ("GET", "HEAD")
        head = method == "HEAD"
        store = self._store
        if parts == ["health"] and read:
            await _send_json(send, 200, store.disk(), head=head)
            return
        if parts == ["registry"] and read:
            body = {"entries": msgspec.to_builtins(store.entries())}
            await _send_json(send, 200, body, head=head)
            return
        if parts == ["models"] and read:
            await _send_json(send, 200, store.model_ids(), head=head)
            return
        if parts == ["downloads"] and read:
            listing = [self._body(p) for p in store.downloads.listing()]
            await _send_json(send, 200, msgspec.to_builtins(listing), head=head)
            return
        if parts == ["imports"] and method == "POST":
            await self._import(scope, receive, send)
            return
        if parts == ["reconciliation"] and read and self._reconciler is not None:
            await _send_json(send, 200, self._reconciler.status(), head=head)
            return
        if parts == ["reconciliation", "rescan"] and method == "POST" and self._reconciler:
            await _send_json(send, 200, await self._reconciler.rescan())
            return
        if len(parts) < 2 or parts[0] != "models" or not parts[1]:
            raise _error(404, f"no such store path {raw_path!r}")
        model_id, rest = parts[1], parts[2:]
        if model_id_escapes(model_id):
            raise _error(400, f"the model id {model_id!r} escapes the model directory")
        if not rest and method == "DELETE":
            await store.delete(model_id)
            await self._evict(model_id)
            await _send_json(send, 200, {"modelId": model_id, "deleted": True})
            return
        if rest == ["files"] and read:
            manifest = store.manifest(model_id)
            if manifest is None:
                raise _error(404, f"the store holds no complete model {model_id}")
            # Path, size and digest only: where an import linked from stays local.
            files = [{"path": f.path, "size": f.size, "sha256": f.sha256} for f in manifest.files]
            body = {"modelId": model_id, "version": manifest.version, "files": files}
            await _send_json(send, 200, body, head=head)
            return
        if rest == ["download"] and method == "POST":
            request = await _read_json(receive, DownloadSelection)
            problem = selection_problem(request)
            if problem is not None:
                raise _error(400, problem)
            await _send_json(send, 200, await self._download(model_id, request))
            return
        if rest == ["download"] and method == "DELETE":
            progress = await store.downloads.cancel(model_id)
            if progress is None:
                raise _error(409, f"no cancellable store download of {model_id}")
            body = msgspec.to_builtins(self._body(progress))
            await _send_json(send, 200, {**body, "cancelled": True})
            return
        if rest == ["download", "status"] and read:
            found = store.downloads.progress(model_id)
            if found is None and store.manifest(model_id) is not None:
                found = await store.start(model_id)  # complete: answers without a transfer
            if found is None:
                raise _error(404, f"no store download of {model_id}")
            await _send_json(send, 200, msgspec.to_builtins(self._body(found)), head=head)
            return
        if rest and read:
            await self._file(scope, send, model_id, "/".join(rest), head)
            return
        raise _error(405 if rest else 404, f"{method} is not served at {raw_path}")

    async def _import(self, scope: Scope, receive: Receive, send: Send) -> None:
        """``POST /imports``: a direct loopback peer only (forwarding headers are
        already refused for every route)."""
        client = scope.get("client")
        if classify(client[0] if client else None) != PeerClass.LOOPBACK:
            raise _error(403, "imports are accepted from this machine (loopback) only")
        body = await _read_body(receive, MAX_IMPORT_BODY_BYTES)
        try:
            entry = await run_import(self._store, decode_request(body))
        except ImportFailed as exc:
            raise _error(exc.status, exc.message) from None
        except DownloadRefused as exc:
            raise _error(exc.status, exc.message) from None
        await _send_json(send, 200, msgspec.to_builtins(entry))

    def _body(self, progress: DownloadProgress) -> StoreDownload:
        card = self._store.catalog_card(progress.model_id)
        return download_body(progress, None if card is None else card.source_revision)

    async def _download(self, model_id: str, request: DownloadSelection) -> object:
        entry = self._store.catalog_card(model_id)
        try:
            progress = await self._store.start(model_id, request)
        except DownloadRefused as exc:
            if exc.status in (400, 404) or exc.code == SELECTION_CONFLICT:
                raise  # a malformed, unknown or unverifiable selection: its own status
            failed = StoreDownload(
                model_id=model_id,
                source_revision=None if entry is None else entry.source_revision,
                status="error",
                progress=0.0,
                error=exc.message,
            )
            return msgspec.to_builtins(failed)
        return msgspec.to_builtins(self._body(progress))

    async def _file(
        self, scope: Scope, send: Send, model_id: str, relative: str, head: bool
    ) -> None:
        found = self._store.file_path(model_id, relative)
        if found == "unsafe":
            raise _error(400, f"the path {relative!r} escapes the model directory")
        if not isinstance(found, Path):
            raise _error(404, f"the store has no file {relative!r} of {model_id}")
        size = found.stat().st_size
        header = _header(scope, b"range")
        wanted = parse_range(header, size)
        if isinstance(wanted, RangeRefused):
            raise _Reply(
                wanted.status,
                {"error": {"message": wanted.message, "status": wanted.status}},
            )
        span = wanted if wanted is not None else ByteRange(start=0, end=size - 1)
        headers = [
            (b"content-type", b"application/octet-stream"),
            (b"accept-ranges", b"bytes"),
            (b"content-length", str(max(span.length, 0)).encode()),
        ]
        if wanted is not None:
            headers.append((b"content-range", wanted.content_range(size).encode()))
        status = 206 if wanted is not None else 200
        await send({"type": "http.response.start", "status": status, "headers": headers})
        if head or size == 0:
            await send({"type": "http.response.body", "body": b""})
            return
        with found.open("rb") as handle:
            handle.seek(span.start)
            left = span.length
            while left > 0:
                chunk = await asyncio.to_thread(handle.read, min(CHUNK_BYTES, left))
                if not chunk:
                    break  # the file shrank under us; the client sees a short body
                left -= len(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": left > 0})
        if left > 0:
            await send({"type": "http.response.body", "body": b""})


def _header(scope: Scope, name: bytes) -> str | None:
    values = [bytes(v) for k, v in scope.get("headers", []) if bytes(k).lower() == name]
    if not values:
        return None
    if len(values) > 1:
        return "repeated"  # not a single range: refused as malformed
    return values[0].decode("latin-1")


async def _read_body(receive: Receive, limit: int) -> bytes:
    body = b""
    while True:
        message = await receive()
        body += bytes(message.get("body", b""))
        if len(body) > limit:
            raise _error(413, f"the request body exceeds {limit} bytes")
        if not message.get("more_body"):
            return body


async def _read_json(receive: Receive, kind: type[DownloadSelection]) -> DownloadSelection:
    body = await _read_body(receive, MAX_BODY_BYTES)
    if not body.strip():
        return kind()
    try:
        return msgspec.json.decode(body, type=kind)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _error(400, f"invalid request body: {exc}") from None


async def _send_json(send: Send, status: int, body: object, *, head: bool = False) -> None:
    data = msgspec.json.encode(body)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(data)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else data})
