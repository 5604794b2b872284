"""The HTTP server's own bounds: connections, slow headers, concurrent large bodies.

uvicorn runs the API with no concurrency limit and no timeout for a client that opens
a connection and sends its headers one byte a minute (slowloris); a few thousand such
connections exhaust file descriptors. Here:

- :data:`MAX_CONNECTIONS` concurrent connections (uvicorn answers 503 beyond);
- :class:`BoundedH11Protocol`: a connection whose request headers are not complete
  :data:`HEADER_TIMEOUT_SECONDS` after it opened (or after its previous response) is
  closed; a request body that arrives slower than :data:`MIN_BODY_BYTES_PER_WINDOW` in
  a :data:`BODY_WINDOW_SECONDS` window (while the server is reading) is answered 408
  and its connection closed; one source address (an IPv6 /64) holds at most
  :data:`MAX_CONNECTIONS_PER_SOURCE` connections and all remote sources together
  :data:`MAX_REMOTE_CONNECTIONS`, so neither one address nor a crowd of them can take
  the slots loopback needs (a connection past either cap is answered 503 and closed);
- each request's scope carries a :class:`~skulk_daemon.system.chunked_body.ChunkedBodyWriter`
  (``extensions``), which a streamed response writes its body through once its head
  has been sent;
- :class:`LargeBodyLimiter`: at most :data:`MAX_CONCURRENT_LARGE_BODIES` requests with a
  body over :data:`LARGE_BODY_BYTES` in flight at once (each route still bounds its own
  size); one more is a 503 with ``Retry-After``, not another 40 MiB in memory.
"""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, Final

import h11
import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

from skulk_daemon.system.chunked_body import BODY_WRITER, ChunkedBodyWriter

MAX_CONNECTIONS: Final = 1024
HEADER_TIMEOUT_SECONDS: Final = 10.0
LARGE_BODY_BYTES: Final = 1024 * 1024
MAX_CONCURRENT_LARGE_BODIES: Final = 8
MAX_CONNECTIONS_PER_SOURCE: Final = 64
LOOPBACK_RESERVE: Final = 64
MAX_REMOTE_CONNECTIONS: Final = MAX_CONNECTIONS - LOOPBACK_RESERVE
BODY_WINDOW_SECONDS: Final = 10.0
MIN_BODY_BYTES_PER_WINDOW: Final = 10 * 1024
"""About 1 KiB/s: a body must keep coming at least this fast, measured per window, so
a 25 MiB upload may take up to ~7 hours at the floor but a trickle of one byte every few
seconds is cut after one or two windows."""
UVICORN_LIMITS: Final[dict[str, Any]] = {
    "limit_concurrency": MAX_CONNECTIONS,
    "timeout_keep_alive": 5,
    # The socket peer is the client: proxy headers never rewrite it (the authority policy
    # refuses forwarded requests for anything a direct peer would be trusted with).
    "proxy_headers": False,
    "server_header": False,
    # WebSocket messages a connection may have read ahead of its handler (uvicorn's
    # default is 32). A realtime session's audio frames are up to 1 MiB of PCM (about
    # 1.4 MB as JSON text, and zeros arrive deflated to almost nothing): a client that
    # sends faster than the session decodes is held back after a few frames, instead of
    # parking up to 45 MB of them in the daemon.
    "ws_max_queue": 4,
}


def source_of(client: tuple[str, int] | None) -> str | None:
    """The key one source's connections are counted under (its address; an IPv6 /64,
    since one host holds a whole prefix), or None for a local peer (loopback or a Unix
    socket), which the caps leave alone."""
    if client is None:
        return None
    try:
        address = ipaddress.ip_address(client[0].split("%", 1)[0])
    except ValueError:
        return client[0]
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return None
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with deadlines for each request's headers and body and
    caps on the connections one source, and all remote sources, may hold."""

    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _received = 0
    _window_start = 0
    source: str | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.source = source_of(self.client)
        if self.source is not None and self._over_cap(self.source):
            _refuse(transport, 503, "too_many_connections", _TOO_MANY)
            return
        self._arm()

    def _over_cap(self, source: str) -> bool:
        # NOTE: uvicorn keeps every open connection (h11 and WebSocket protocols alike)
        # in one shared set; counting it here needs no bookkeeping of our own to drift.
        same = remote = 0
        for connection in self.connections:
            if connection is self:
                continue
            if isinstance(connection, BoundedH11Protocol):
                theirs = connection.source
            else:  # an upgraded WebSocket: uvicorn's own protocol, which knows its client
                theirs = source_of(getattr(connection, "client", None))
            if theirs is None:
                continue
            remote += 1
            same += theirs == source
        return same >= MAX_CONNECTIONS_PER_SOURCE or remote >= MAX_REMOTE_CONNECTIONS

    def data_received(self, data: bytes) -> None:
        self._received += len(data)
        super().data_received(data)
        if self._body_timer is None and self.conn.their_state is h11.SEND_BODY:
            self._watch_body()

    def _watch_body(self) -> None:
        self._window_start = self._received
        self._body_timer = self.loop.call_later(BODY_WINDOW_SECONDS, self._body_due)

    def _body_due(self) -> None:
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        if self not in self.connections:  # upgraded: the transport is another protocol's
            return
        # NOTE: while uvicorn has paused reading (the app is not taking the body yet),
        # a slow body is the server's doing, not the client's: that window is not judged.
        slow = self._received - self._window_start < MIN_BODY_BYTES_PER_WINDOW
        if slow and not self.flow.read_paused:
            answered = self.cycle is not None and self.cycle.response_started
            if answered:
                self.transport.close()
            else:
                _refuse(self.transport, 408, "request_timeout", _SLOW_BODY)
            return
        self._watch_body()

    def handle_events(self) -> None:
        super().handle_events()
        # NOTE: a request's cycle is made here and its app task only starts on the
        # loop's next turn, so the writer is in the scope before the app reads it.
        cycle = self.cycle
        if cycle is not None:
            extensions = cycle.scope.setdefault("extensions", {})
            if BODY_WRITER not in extensions:
                extensions[BODY_WRITER] = ChunkedBodyWriter(cycle)  # type: ignore[assignment]

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(HEADER_TIMEOUT_SECONDS, self._headers_due)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_due(self) -> None:
        self._header_timer = None
        waiting = self.cycle is None or self.cycle.response_complete
        # NOTE: IDLE is h11's state until a request's headers are complete; a request
        # being answered (or its body being read) is never cut off here.
        if waiting and self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


_TOO_MANY: Final = "too many connections from this address; retry shortly"
_SLOW_BODY: Final = "the request body arrived too slowly"
_REASONS: Final = {408: b"Request Timeout", 503: b"Service Unavailable"}


def _refuse(transport: asyncio.Transport, status: int, code: str, message: str) -> None:
    """Answer ``status`` in the OpenAI error envelope and close, below the ASGI app:
    the request (if any) is not read further."""
    kind = "timeout" if status == 408 else "service_unavailable"
    body = msgspec.json.encode({"error": {"message": message, "type": kind, "code": code}})
    head = (
        b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
        b"connection: close\r\n%s\r\n"
    ) % (status, _REASONS[status], len(body), b"retry-after: 1\r\n" if status == 503 else b"")
    # NOTE: no isinstance check on asyncio's transport classes: uvloop's transports do
    # not derive from them (such a check skipped the answer under uvloop).
    if not transport.is_closing():
        transport.write(head + body)
    transport.close()


def _length(scope: dict[str, Any]) -> int | None:
    for key, value in scope.get("headers", []):
        if key.lower() == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


class LargeBodyLimiter:
    """ASGI wrapper bounding how many large request bodies are in flight at once."""

    def __init__(self, app: Any, *, limit: int = MAX_CONCURRENT_LARGE_BODIES) -> None:
        self.app = app
        self._limit = limit
        self._in_flight = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = _length(scope) if scope["type"] == "http" else None
        chunked = scope["type"] == "http" and any(
            key.lower() == b"transfer-encoding" for key, _ in scope.get("headers", [])
        )
        large = chunked or (length is not None and length > LARGE_BODY_BYTES)
        if not large:
            await self.app(scope, receive, send)
            return
        if self._in_flight >= self._limit:
            await _busy(send)
            return
        self._in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self._in_flight -= 1


async def _busy(send: Any) -> None:
    body = msgspec.json.encode(
        {
            "error": {
                "message": "too many large requests are being received at once; retry shortly",
                "type": "service_unavailable",
                "code": "too_many_large_bodies",
            }
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 503,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"retry-after", b"1"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": False})
