"""The data plane: node-addressed frames of a command's stream (tokens, media).

The node that owns a command (the API node a client talks to) opens a
:class:`DataStream` for it; other nodes send that command's frames to the owner,
numbered from 0. A payload is a typed :data:`~skulk_core.cluster.fabric.DataPayload`
(a generation's chunk, or opaque bytes), handed to the reader as it was decoded
with its frame. Each stream's queue is bounded: a consumer that falls behind, or
a gap in the numbering, breaks the stream loudly instead of growing memory or
reordering silently. Frames never enter State or the event log.

A serving node sends a generation's chunks through a :class:`ChunkSender`: one
frame per chunk while it keeps up, so a token is never held back waiting for
another; the tokens that queue up while it is busy (several arrive in one turn of
its event loop, the sign that it lags) go out as one :class:`TokenRun` frame at the
next turn, before any later chunk. The owner reads the run back as the same chunks.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Final

from skulk_core.chat.generation import EngineChunk, TokenChunk
from skulk_core.cluster.fabric import (
    MAX_DATA_PAYLOAD_BYTES,
    MAX_RUN_TOKENS,
    DataFrame,
    DataPayload,
    TokenRun,
)
from skulk_core.ids import CommandId, NodeId

DEFAULT_STREAM_FRAMES: Final = 1024


class StreamBroken(RuntimeError):
    """The stream lost frames (a gap, an overflow); its data cannot be trusted."""


@dataclass(slots=True)
class DataStats:
    delivered: int = 0
    unknown_stream: int = 0
    gaps: int = 0
    overflows: int = 0
    foreign: int = 0
    """Frames for a known stream from a node other than the one it was opened for."""


class _End:
    """The end-of-stream marker in a stream's queue."""


_END: Final = _End()


class DataStream:
    def __init__(self, command_id: CommandId, limit: int, on_close: Callable[[], None]) -> None:
        self.command_id = command_id
        self._queue: asyncio.Queue[DataPayload | _End] = asyncio.Queue(maxsize=limit)
        self._expected = 0
        self._broken: str | None = None
        self._on_close = on_close

    def push(self, frame: DataFrame, stats: DataStats) -> None:
        if self._broken is not None:
            return
        if frame.seq != self._expected:
            stats.gaps += 1
            self._break(f"frame {frame.seq} arrived when {self._expected} was expected")
            return
        self._expected += 1
        try:
            self._queue.put_nowait(frame.payload)
            if frame.final:
                self._queue.put_nowait(_END)
        except asyncio.QueueFull:
            stats.overflows += 1
            self._break("the consumer fell too far behind")
            return
        stats.delivered += 1

    def _break(self, reason: str) -> None:
        self._broken = reason
        # Make room for the wake-up, dropping what can no longer be used.
        while not self._queue.empty():
            self._queue.get_nowait()
        self._queue.put_nowait(_END)

    def ready(self) -> bool:
        """Whether :meth:`next` answers without waiting (a reader that keeps up arms
        its timeout only when it has to wait)."""
        return not self._queue.empty()

    async def next(self) -> DataPayload | None:
        """The next payload; ``None`` after the final frame. Raises
        :class:`StreamBroken` on a lost frame (wrap it in ``asyncio.timeout``)."""
        return self._take(await self._queue.get())

    def _take(self, item: DataPayload | _End) -> DataPayload | None:
        if isinstance(item, _End):
            # Keep the end visible to any later call.
            self._queue.put_nowait(_END)
            if self._broken is not None:
                raise StreamBroken(self._broken)
            return None
        return item

    async def frames(self) -> AsyncIterator[DataPayload]:
        """Payloads in order until the final frame; raises :class:`StreamBroken`."""
        try:
            while True:
                item = await self._queue.get()
                if isinstance(item, _End):
                    if self._broken is not None:
                        raise StreamBroken(self._broken)
                    return
                yield item
        finally:
            self.close()

    def close(self) -> None:
        self._on_close()


Send = Callable[[NodeId, DataFrame], bool]


class DataPlane:
    def __init__(self, own_id: NodeId, send: Send) -> None:
        self._own_id = own_id
        self._send = send
        self._streams: dict[CommandId, DataStream] = {}
        self._senders: dict[CommandId, NodeId] = {}
        self.stats = DataStats()

    def open(
        self,
        command_id: CommandId,
        limit: int = DEFAULT_STREAM_FRAMES,
        *,
        sender: NodeId | None = None,
    ) -> DataStream:
        """Receive ``command_id``'s frames on this node; with ``sender``, only
        frames that node sent (any other node's are dropped and counted)."""

        def forget() -> None:
            self._streams.pop(command_id, None)
            self._senders.pop(command_id, None)

        stream = DataStream(command_id, limit, forget)
        self._streams[command_id] = stream
        if sender is not None:
            self._senders[command_id] = sender
        return stream

    def send(
        self,
        owner: NodeId,
        command_id: CommandId,
        seq: int,
        payload: DataPayload,
        *,
        final: bool = False,
    ) -> bool:
        """Send one frame to ``owner`` (short-circuited when that is this node)."""
        if isinstance(payload, bytes) and len(payload) > MAX_DATA_PAYLOAD_BYTES:
            raise ValueError(f"a data frame carries at most {MAX_DATA_PAYLOAD_BYTES} bytes")
        frame = DataFrame(command_id=command_id, seq=seq, payload=payload, final=final)
        if owner == self._own_id:
            self.deliver(frame)
            return True
        return self._send(owner, frame)

    def deliver(self, frame: DataFrame, sender: NodeId | None = None) -> None:
        """A frame from ``sender``, the origin its envelope names (``None``: from
        this process, the short-circuit of :meth:`send`). A stream opened for one
        sender takes no other node's frames, so a peer that misroutes (or guesses)
        a command id cannot write into another node's answer."""
        stream = self._streams.get(frame.command_id)
        if stream is None:
            self.stats.unknown_stream += 1
            return
        expected = self._senders.get(frame.command_id)
        if expected is not None and sender is not None and sender != expected:
            self.stats.foreign += 1
            return
        stream.push(frame, self.stats)


class ChunkSender:
    """Numbers and sends one generation's chunks to the node that owns it.

    A :class:`TokenChunk` goes out at once when nothing is waiting; one that
    arrives in the same event-loop turn as an earlier send waits, with any others,
    for the next turn and they leave as one :class:`TokenRun` frame (at most
    :data:`MAX_RUN_TOKENS` tokens; a full run leaves at once). A terminal chunk
    first sends what is waiting, then itself as the final frame, so order is kept.
    :meth:`send` answers False once a frame could not be sent (the owner is
    unreachable or not reading), including a deferred run that failed.
    """

    def __init__(self, plane: DataPlane, owner: NodeId, command_id: CommandId) -> None:
        self._plane = plane
        self._owner = owner
        self._command_id = command_id
        self._loop = asyncio.get_running_loop()
        self._seq = 0
        self._waiting: list[TokenChunk] = []
        self._turn: asyncio.Handle | None = None
        self._failed = False
        self.frames = 0
        """Frames sent (fewer than chunks when tokens were merged)."""

    def send(self, chunk: EngineChunk) -> bool:
        if self._failed:
            return False
        if isinstance(chunk, TokenChunk):
            if self._turn is None:
                self._turn = self._loop.call_soon(self._next_turn)
                return self._emit(chunk, final=False)
            self._waiting.append(chunk)
            if len(self._waiting) >= MAX_RUN_TOKENS:
                self._flush()
            return not self._failed
        self.close()
        self._flush()
        # NOTE: never a final frame after a lost run: the owner would take its
        # number for the run's and miss the tokens without noticing.
        return not self._failed and self._emit(chunk, final=True)

    def close(self) -> None:
        """Stop the pending turn (what still waits is dropped: call on the way out)."""
        if self._turn is not None:
            self._turn.cancel()
            self._turn = None

    def _next_turn(self) -> None:
        self._turn = None
        if self._waiting and not self._failed:
            # The run goes out now; chunks arriving in this turn wait for the next.
            self._turn = self._loop.call_soon(self._next_turn)
            self._flush()

    def _flush(self) -> None:
        waiting = self._waiting
        if not waiting or self._failed:
            return
        self._waiting = []
        payload: DataPayload = waiting[0] if len(waiting) == 1 else TokenRun.of(waiting)
        self._emit(payload, final=False)

    def _emit(self, payload: DataPayload, *, final: bool) -> bool:
        sent = self._plane.send(self._owner, self._command_id, self._seq, payload, final=final)
        if not sent:
            self._failed = True
            self._waiting = []
            return False
        self._seq += 1
        self.frames += 1
        return True
