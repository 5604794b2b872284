"""Streamed answers whose body parts go straight to the connection.

:class:`BodyStream` is Litestar's :class:`~litestar.response.Stream` (same head, same
bytes), except that once the head has been sent each body part is written by the
HTTP server's :class:`~skulk_daemon.system.chunked_body.ChunkedBodyWriter` rather
than passed down the ASGI ``send`` chain: a generation's tokens are most of what this
daemon writes, one part each (issue 43). Where the server offers no writer (the
in-process test client) or frames the body otherwise, it is Litestar's path.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterable, Iterable, Mapping
from typing import TYPE_CHECKING

from litestar.enums import MediaType
from litestar.response import Stream
from litestar.response.base import ASGIResponse
from litestar.response.streaming import ASGIStreamingResponse
from litestar.utils.helpers import get_enum_string_value

from skulk_daemon.system.chunked_body import BODY_WRITER, ChunkedBodyWriter

if TYPE_CHECKING:
    from litestar import Litestar, Request
    from litestar.background_tasks import BackgroundTask, BackgroundTasks
    from litestar.datastructures.cookie import Cookie
    from litestar.datastructures.state import State
    from litestar.types import (
        HTTPResponseBodyEvent,
        Receive,
        Scope,
        Send,
        TypeEncodersMap,
    )


class _DirectStreamingResponse(ASGIStreamingResponse):
    __slots__ = ("_writer",)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        # ASGI: the server's extensions, a plain mapping; only our body writer is read.
        extensions: Mapping[str, object] = scope.get("extensions") or {}
        writer = extensions.get(BODY_WRITER)
        self._writer = writer if isinstance(writer, ChunkedBodyWriter) else None
        await super().__call__(scope, receive, send)

    async def _stream(self, send: Send) -> None:
        writer = self._writer
        if writer is None or not writer.ready():
            await super()._stream(send)
            return
        encoding = self.encoding
        async for chunk in self.iterator:
            if writer.paused():
                await writer.drain()
            writer.write(chunk if isinstance(chunk, bytes) else chunk.encode(encoding))
        end: HTTPResponseBodyEvent = {"type": "http.response.body", "body": b"", "more_body": False}
        await send(end)


class BodyStream(Stream):
    """A streamed answer (SSE, NDJSON, a JSON document) written straight to the
    connection once its head is out; see the module's docstring."""

    def to_asgi_response(
        self,
        app: Litestar | None,
        request: Request[object, object, State],
        *,
        background: BackgroundTask | BackgroundTasks | None = None,
        cookies: Iterable[Cookie] | None = None,
        encoded_headers: Iterable[tuple[bytes, bytes]] | None = None,
        headers: dict[str, str] | None = None,
        is_head_response: bool = False,
        media_type: MediaType | str | None = None,
        status_code: int | None = None,
        type_encoders: TypeEncodersMap | None = None,
    ) -> ASGIResponse:
        # As Litestar's Stream.to_asgi_response (2.x), with the direct response class.
        headers = {**headers, **self.headers} if headers is not None else self.headers
        cookies = self.cookies if cookies is None else itertools.chain(self.cookies, cookies)
        iterator = self.iterator
        if not isinstance(iterator, Iterable | AsyncIterable) and callable(iterator):
            iterator = iterator()
        return _DirectStreamingResponse(
            background=self.background or background,
            content_length=0,
            cookies=cookies,
            encoded_headers=encoded_headers,
            encoding=self.encoding,
            headers=headers,
            is_head_response=is_head_response,
            iterator=iterator,
            media_type=get_enum_string_value(media_type or self.media_type or MediaType.JSON),
            status_code=self.status_code or status_code,
        )
