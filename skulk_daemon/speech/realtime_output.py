"""What a realtime session sends: its events, its errors and its close, on one socket.

Events go out one at a time (a turn's reader and the session loop both emit); once
the socket fails or closes nothing more is sent. Closing from a turn's reader also
ends the session loop's wait for the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets

from skulk_core.audio.realtime_events import (
    CLOSE_INTERNAL,
    ErrorBody,
    ErrorEvent,
    ServerEvent,
    encode_server_event,
)
from skulk_daemon.speech.realtime_wire import Connection, close_name


class SessionClose(Exception):
    """Close the session's socket with ``code`` and ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def new_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(10)}"


class SessionOutput:
    def __init__(self, connection: Connection) -> None:
        self._conn = connection
        self._send_lock = asyncio.Lock()
        self.closed = False
        self.main: asyncio.Task[None] | None = None
        """The session loop, cancelled when a turn's reader closes the socket."""

    async def emit(self, event: ServerEvent) -> None:
        if self.closed:
            return
        text = encode_server_event(event)
        # NOTE: one send at a time: the loop and a turn's reader both emit.
        async with self._send_lock:
            try:
                await self._conn.send(text)
            except Exception:
                self.closed = True

    async def error(
        self, code: str, message: str, *, param: str | None = None, event_id: str | None = None
    ) -> None:
        await self.emit(
            ErrorEvent(
                event_id=new_id("event"),
                error=ErrorBody(
                    type="invalid_request_error",
                    code=code,
                    message=message,
                    param=param,
                    event_id=event_id,
                ),
            )
        )

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        if code != CLOSE_INTERNAL:
            await self.error(close_name(code), reason)
        self.closed = True
        with contextlib.suppress(Exception):
            await self._conn.close(code, reason[:120])
        if self.main is not None and self.main is not asyncio.current_task():
            self.main.cancel()
