"""A streamed response body written straight to its connection, in HTTP/1.1 chunks.

A streamed token used to pass from the response, through every ASGI ``send`` wrapper
(the metrics middleware, Litestar's exception scope) and uvicorn's ``send``, to h11,
which framed it as a chunk: several calls and a message dict a token for a body part
that none of them changes. Once the response's head has gone out through that path
(so status, headers, CORS and metrics are what they were), :class:`ChunkedBodyWriter`
writes each body part as the same chunk h11 would (``<size hex>\\r\\n<bytes>\\r\\n``)
onto the transport, with uvicorn's own flow control: it waits while the transport is
paused (a slow client), and writes nothing once the client has gone. The body's end
still goes through ``send``, so h11 and uvicorn finish the response (the last chunk,
keep-alive) as before.

The HTTP server (:class:`~skulk_daemon.system.http_server.BoundedH11Protocol`) puts one
into each request's scope under :data:`BODY_WRITER`; a server without it (a test
client) leaves the response on the ASGI path.
"""

from __future__ import annotations

import asyncio
from typing import Final, Protocol

import h11

BODY_WRITER: Final = "skulk.chunked_body"
"""The key of the writer in a request scope's ``extensions``."""


class _Flow(Protocol):
    @property
    def write_paused(self) -> bool: ...

    async def drain(self) -> None: ...


class _Cycle(Protocol):
    """What the writer reads of uvicorn's h11 request-response cycle."""

    @property
    def conn(self) -> h11.Connection: ...

    @property
    def transport(self) -> asyncio.Transport: ...

    @property
    def flow(self) -> _Flow: ...

    @property
    def disconnected(self) -> bool: ...

    @property
    def response_started(self) -> bool: ...

    @property
    def response_complete(self) -> bool: ...


def _chunked(conn: h11.Connection) -> bool:
    # NOTE: h11 frames a body in chunks only for an HTTP/1.1 peer and a response
    # without a Content-Length (and not for HEAD); which framing it chose is its
    # writer. Anything else (or an h11 that no longer names it so) keeps h11's path.
    writer = getattr(conn, "_writer", None)
    return type(writer).__name__ == "ChunkedWriter"


class ChunkedBodyWriter:
    """Writes one response's body parts as HTTP/1.1 chunks onto its transport."""

    __slots__ = ("_cycle",)

    def __init__(self, cycle: _Cycle) -> None:
        self._cycle = cycle

    def ready(self) -> bool:
        """Whether the head has gone out and h11 frames this body in chunks (only
        then may :meth:`write` be used, until the body's end is sent)."""
        cycle = self._cycle
        return (
            cycle.response_started
            and not cycle.response_complete
            and cycle.conn.our_state is h11.SEND_BODY
            and _chunked(cycle.conn)
        )

    def paused(self) -> bool:
        """The client is not reading fast enough: :meth:`drain` before writing more."""
        cycle = self._cycle
        return cycle.flow.write_paused and not cycle.disconnected

    async def drain(self) -> None:
        await self._cycle.flow.drain()

    def write(self, data: bytes) -> None:
        """One body part as one chunk (nothing for empty bytes or a client gone)."""
        cycle = self._cycle
        if data and not cycle.disconnected:
            cycle.transport.write(b"%x\r\n%b\r\n" % (len(data), data))
