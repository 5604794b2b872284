"""An httpx transport that hands each request to an ASGI app on a running loop.

Litestar's ``TestClient`` owns the app's lifespan and the event loop (a blocking
portal in a thread); its own transport buffers every response until the handler has
returned. This one streams instead: the body arrives chunk by chunk as the app sends
it, and closing a response before its end delivers ``http.disconnect`` to the app,
as uvicorn does when a client goes away. So a test can read the first delta of a
stream, cancel it, or walk away from it, in-process.

A request sent with ``extensions={LEAVE: event}`` is abandoned when ``event`` is set
before its answer starts: the app hears ``http.disconnect`` and the call raises
:class:`ClientLeft`, as when a client hangs up on a slow non-streaming answer.

Requests come from a loopback peer (``127.0.0.1``), as on the daemon's own host.
:class:`AppTransport` serves ``httpx`` clients (``openai``, ``ollama``, tests);
:class:`AppTransport2` the same app to ``httpx2`` ones (``anthropic``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Final

import anyio
import httpx
import httpx2
from anyio.from_thread import BlockingPortal
from litestar.types import ASGIApp, Message

PEER: Final = ("127.0.0.1", 50000)
"""The socket peer every request comes from."""
MESSAGE_TIMEOUT_SECONDS: Final = 300.0
"""How long a response may go without sending anything before the test fails."""
DISCONNECT_GRACE_SECONDS: Final = 30.0
"""How long a handler gets to wind down after its client went away."""
LEAVE: Final = "skulk.tests.leave"
"""Request extension: a ``threading.Event`` whose setting makes the client hang up."""
LEAVE_POLL_SECONDS: Final = 0.05


class ClientLeft(Exception):
    """The client hung up (its ``LEAVE`` event was set) before the answer started."""


def _scope(request: httpx.Request | httpx2.Request) -> dict[str, Any]:
    url = request.url
    port = url.port or (443 if url.scheme == "https" else 80)
    headers = [(key.lower(), value) for key, value in request.headers.raw]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": request.method,
        "scheme": url.scheme,
        "path": url.path,
        "raw_path": url.raw_path.split(b"?", 1)[0],
        "root_path": "",
        "query_string": url.query,
        "headers": headers,
        "client": PEER,
        "server": (url.host, port),
    }


class _Body(httpx.SyncByteStream, httpx2.SyncByteStream):
    def __init__(
        self,
        messages: queue.Queue[Message | BaseException],
        done: Future[Any],
        disconnect: anyio.Event,
        portal: BlockingPortal,
    ) -> None:
        self._messages = messages
        self._done = done
        self._disconnect = disconnect
        self._portal = portal
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        while not self._ended:
            message = _next(self._messages)
            if message["type"] != "http.response.body":
                continue
            self._ended = not message.get("more_body", False)
            body: bytes = message.get("body", b"")
            if body:
                yield body

    def close(self) -> None:
        if not self._ended:
            self._ended = True
            self._portal.call(self._disconnect.set)
        self._done.result(timeout=DISCONNECT_GRACE_SECONDS)


def _next(messages: queue.Queue[Message | BaseException]) -> Message:
    try:
        message = messages.get(timeout=MESSAGE_TIMEOUT_SECONDS)
    except queue.Empty:
        raise AssertionError(f"the app sent nothing for {MESSAGE_TIMEOUT_SECONDS:.0f} s") from None
    if isinstance(message, BaseException):
        raise message
    return message


class _Exchanges:
    """Runs one request at a time through ``app`` on ``portal``'s loop."""

    def __init__(self, app: ASGIApp, portal: BlockingPortal) -> None:
        self._app = app
        self._portal = portal

    def open(self, request: httpx.Request | httpx2.Request) -> tuple[Message, _Body]:
        """The answer's ``http.response.start`` message, and its body as it comes."""
        body = request.read()
        messages: queue.Queue[Message | BaseException] = queue.Queue()
        disconnect: anyio.Event = self._portal.call(anyio.Event)
        sent_body = False

        async def receive() -> dict[str, Any]:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": body, "more_body": False}
            await disconnect.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            messages.put(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                # As uvicorn does: once the answer is sent, the request is over, and a
                # handler still listening for the client's departure hears it now.
                disconnect.set()

        async def serve() -> None:
            try:
                await self._app(_scope(request), receive, send)  # type: ignore[arg-type]
            except BaseException as exc:
                messages.put(exc)
                raise

        done = self._portal.start_task_soon(serve)
        leave: threading.Event | None = request.extensions.get(LEAVE)
        while leave is not None and messages.empty():
            if leave.wait(LEAVE_POLL_SECONDS):
                self._portal.call(disconnect.set)
                done.result(timeout=DISCONNECT_GRACE_SECONDS)
                raise ClientLeft(f"{request.method} {request.url.path}")
        start = _next(messages)
        assert start["type"] == "http.response.start", start
        return start, _Body(messages, done, disconnect, self._portal)


class AppTransport(httpx.BaseTransport):
    """Send ``httpx`` requests to ``app`` on ``portal``'s loop, streaming the answers."""

    def __init__(self, app: ASGIApp, portal: BlockingPortal) -> None:
        self._exchanges = _Exchanges(app, portal)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        start, body = self._exchanges.open(request)
        headers = list(start.get("headers", []))
        return httpx.Response(start["status"], headers=headers, stream=body, request=request)


class AppTransport2(httpx2.BaseTransport):
    """:class:`AppTransport` for ``httpx2`` clients."""

    def __init__(self, app: ASGIApp, portal: BlockingPortal) -> None:
        self._exchanges = _Exchanges(app, portal)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        start, body = self._exchanges.open(request)
        headers = list(start.get("headers", []))
        return httpx2.Response(start["status"], headers=headers, stream=body, request=request)
