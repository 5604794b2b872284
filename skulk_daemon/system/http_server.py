"""The HTTP server's own bounds: connections, slow headers, concurrent large bodies.

uvicorn runs the API with no concurrency limit and no timeout for a client that opens
a connection and sends its headers one byte a minute (slowloris); a few thousand such
connections exhaust file descriptors. Here:

- :data:`MAX_CONNECTIONS` concurrent connections (uvicorn answers 503 beyond);
- :class:`BoundedH11Protocol`: a connection whose request headers are not complete
  :data:`HEADER_TIMEOUT_SECONDS` after it opened (or after its previous response) is
  closed;
- :class:`LargeBodyLimiter`: at most :data:`MAX_CONCURRENT_LARGE_BODIES` requests with a
  body over :data:`LARGE_BODY_BYTES` in flight at once (each route still bounds its own
  size); one more is a 503 with ``Retry-After``, not another 40 MiB in memory.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import h11
import msgspec
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_CONNECTIONS: Final = 1024
HEADER_TIMEOUT_SECONDS: Final = 10.0
LARGE_BODY_BYTES: Final = 1024 * 1024
MAX_CONCURRENT_LARGE_BODIES: Final = 8
UVICORN_LIMITS: Final[dict[str, Any]] = {
    "limit_concurrency": MAX_CONNECTIONS,
    "timeout_keep_alive": 5,
    # The socket peer is the client: proxy headers never rewrite it (the authority policy
    # refuses forwarded requests for anything a direct peer would be trusted with).
    "proxy_headers": False,
    "server_header": False,
}


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for each request's headers."""

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
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
