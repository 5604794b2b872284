"""What the daemon reads from a runner: its stdout cut into messages as the bytes
arrive, and each generation's bounded queue of chunks."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk, TokenChunk
from skulk_daemon.runner.protocol import (
    FrameSplitter,
    ProtocolError,
    RunnerMessage,
    decode_runner_message,
)


class TaskStream:
    """One generation's chunks, bounded; the terminal chunk always fits."""

    __slots__ = ("_chunks", "_limit", "_ready", "closed")

    def __init__(self, limit: int) -> None:
        self._chunks: deque[EngineChunk] = deque()
        self._ready = asyncio.Event()
        self._limit = limit
        self.closed = False

    def push(self, chunk: TokenChunk) -> bool:
        """Queue a token; ``False`` (and nothing queued) if the consumer is too far behind."""
        if len(self._chunks) >= self._limit:
            return False
        self._chunks.append(chunk)
        self._ready.set()
        return True

    def close(self, chunk: FinishChunk | ErrorChunk) -> None:
        if not self.closed:
            self.closed = True
            self._chunks.append(chunk)
            self._ready.set()

    async def get(self) -> EngineChunk:
        while not self._chunks:
            self._ready.clear()
            await self._ready.wait()
        return self._chunks.popleft()


class StdoutReader(asyncio.Protocol):
    """The runner's stdout: each frame is decoded and handed to ``on_message`` as
    its last byte arrives, in the event loop's read callback (no task wakes per
    frame, which at one frame a token is most of what reading costs). ``ended``
    resolves when reading stops: ``None`` at the end of the pipe, else the error
    that stopped it (a garbled frame, or ``on_message`` raising)."""

    def __init__(self, on_message: Callable[[RunnerMessage], None]) -> None:
        self._on_message = on_message
        self._frames = FrameSplitter()
        self._transport: asyncio.BaseTransport | None = None
        self.ended: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            for body in self._frames.feed(data):
                self._on_message(decode_runner_message(body))
        except Exception as exc:
            self._stop(exc)

    def eof_received(self) -> None:
        try:
            self._frames.end()
        except ProtocolError as exc:
            self._stop(exc)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop(exc)

    def _stop(self, error: Exception | None) -> None:
        if not self.ended.done():
            self.ended.set_result(error)
        if self._transport is not None:
            self._transport.close()
