"""What the daemon reads from a runner: its stdout cut into messages as the bytes
arrive, and each generation's bounded queue of chunks."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from skulk_core.chat.generation import EngineChunk, ErrorChunk, FinishChunk, TokenChunk
from skulk_daemon.runner.protocol import (
    FrameSplitter,
    ProtocolError,
    RunnerMessage,
    decode_runner_message,
)
from skulk_daemon.system.handoff import Handoff


class TaskStream(Handoff[EngineChunk]):
    """One generation's chunks, bounded; the terminal chunk always fits. Its reader
    takes all that arrived since its last take (:meth:`take`: the terminal chunk is
    the last; ``None`` after ``keepalive_s`` without one), straight from the pipe's
    read callback that pushed them: no task sits in between."""

    __slots__ = ("closed",)

    def __init__(self, limit: int, keepalive_s: float | None = None) -> None:
        super().__init__(limit, keepalive_s)
        self.closed = False

    def push(self, chunk: TokenChunk) -> bool:
        """Queue a token; ``False`` (and nothing queued) if the reader is too far behind."""
        return self.offer(chunk)

    def close(self, chunk: FinishChunk | ErrorChunk) -> None:
        if not self.closed:
            self.closed = True
            self.offer(chunk, force=True)


class RunnerGeneration:
    """One generation on a runner, read a take at a time: the chunks that arrived
    since the last take, the terminal one last (then :attr:`finished`)."""

    __slots__ = ("_close", "_stream", "finished")

    def __init__(self, stream: TaskStream, close: Callable[[bool], None]) -> None:
        self._stream = stream
        self._close: Callable[[bool], None] | None = close
        self.finished = False
        """The terminal chunk (a finish or an error) has been taken."""

    def __len__(self) -> int:
        """Chunks arrived and not yet taken."""
        return len(self._stream)

    async def take(self) -> list[EngineChunk] | None:
        chunks = await self._stream.take()
        if chunks is not None and type(chunks[-1]) is not TokenChunk:
            self.finished = True
        return chunks

    def close(self) -> None:
        """Done reading; before the terminal chunk, that cancels the generation."""
        close, self._close = self._close, None
        if close is not None:
            close(self.finished)

    async def aclose(self) -> None:
        self.close()


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
