"""The caller side of a stream: the frames iterator and the input sink.

:class:`CallerStream` receives one call's provider frames, from this node's own
provider (awaited, so a slow reader slows the provider) or from a peer over the
data plane (reordered within a window; a gap, a foreign frame or a full queue
breaks the stream). Its iterator yields frames in order and stops after exactly one
terminal. When the provider cannot deliver one (frames lost, the node gone, the
deadline passed), the iterator synthesizes a ``failed`` terminal itself. Closing
the iterator before a terminal cancels the call on the provider.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Final

from skulk_core.extensions.capabilities import (
    CapabilityError,
    CapabilityErrorCode,
    CapabilityStreamFrame,
    InlineMediaAttachment,
    JsonObject,
)
from skulk_core.extensions.ordering import FrameOrder, SequenceGap
from skulk_daemon.capabilities.frames import media_problem, payload_problem

MAX_OUTPUT_FRAMES: Final = 256
"""Provider frames buffered for one caller; a caller further behind breaks the stream."""
DEADLINE_GRACE_SECONDS: Final = 2.0
"""How long past the deadline a caller waits for the provider's own terminal."""
LIVENESS_CHECK_SECONDS: Final = 1.0

Cancel = Callable[[str | None], Awaitable[bool]]


class _Broken:
    def __init__(self, error: CapabilityError) -> None:
        self.error = error


class CallerStream:
    def __init__(
        self,
        call_id: str,
        target: str,
        *,
        deadline: float,
        cancel: Cancel,
        alive: Callable[[], bool] | None = None,
        on_done: Callable[[], None] = lambda: None,
        limit: int = MAX_OUTPUT_FRAMES,
    ) -> None:
        self.call_id = call_id
        self.target = target
        self._deadline = deadline
        self._cancel = cancel
        self._alive = alive
        self._on_done = on_done
        self._queue: asyncio.Queue[CapabilityStreamFrame | _Broken] = asyncio.Queue(limit + 1)
        self._limit = limit
        self._order: FrameOrder[CapabilityStreamFrame] = FrameOrder()
        self._broken = False
        self._room = asyncio.Event()
        """Set when the reader took a frame (or left): a local provider may go on."""
        self.closed = False

    # -- receiving ---------------------------------------------------------------------

    def push(self, item: CapabilityStreamFrame) -> None:
        """A frame from the data plane; never blocks."""
        if self._broken or self.closed:
            return
        if item.call_id != self.call_id or item.direction != "provider_to_caller":
            self.fail("unreachable", "a frame of another stream arrived on this one")
            return
        try:
            released = self._order.accept(item.sequence, item)
        except SequenceGap as exc:
            self.fail("unreachable", f"frames from {self.target} were lost: {exc}")
            return
        for ready in released:
            if self._queue.qsize() >= self._limit:
                self.fail("overloaded", "the caller fell too far behind the provider")
                return
            self._queue.put_nowait(ready)
            self._after(ready)

    async def put(self, item: CapabilityStreamFrame) -> bool:
        """A frame from this node's own provider: waits while the reader is behind."""
        if self.closed or self._broken:
            return False
        while self._queue.qsize() >= self._limit:
            self._room.clear()
            await self._room.wait()
            if self.closed or self._broken:
                return False
        self._queue.put_nowait(item)
        self._after(item)
        return not self.closed

    def _after(self, item: CapabilityStreamFrame) -> None:
        if item.terminal:
            # Nothing more will arrive: stop routing to this stream now, even if its
            # reader never comes back for the frames.
            self._on_done()

    def fail(self, code: CapabilityErrorCode, message: str) -> None:
        """End the stream here with a synthetic ``failed`` terminal, after the frames
        already received."""
        if self._broken or self.closed:
            return
        self._broken = True
        # NOTE: frames already queued are in order and were checked: the reader still
        # gets them, then this failure. Nothing is queued after it, and the queue
        # always keeps one place for it.
        with contextlib.suppress(asyncio.QueueFull):
            self._queue.put_nowait(_Broken(CapabilityError(code=code, message=message)))
        self._room.set()

    # -- the iterator --------------------------------------------------------------------

    async def frames(self) -> AsyncIterator[CapabilityStreamFrame]:
        last = -1
        ended = False
        try:
            while True:
                item = await self._next()
                if isinstance(item, _Broken):
                    yield CapabilityStreamFrame(
                        call_id=self.call_id,
                        direction="provider_to_caller",
                        sequence=last + 1,
                        kind="failed",
                        error=item.error,
                    )
                    return
                last = item.sequence
                if item.terminal:
                    ended = True
                yield item
                if ended:
                    return
        finally:
            self.closed = True
            while not self._queue.empty():
                self._queue.get_nowait()
            self._room.set()
            self._on_done()
            if not ended:
                # NOTE: the provider is still working for a caller that stopped
                # listening (closed early, or the stream broke): stop it.
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._cancel("the caller closed the stream"), 5.0)

    async def _next(self) -> CapabilityStreamFrame | _Broken:
        loop = asyncio.get_running_loop()
        while True:
            remaining = self._deadline + DEADLINE_GRACE_SECONDS - loop.time()
            if remaining <= 0:
                self.fail("timeout", "the stream ran past its deadline")
                remaining = 1.0
            try:
                async with asyncio.timeout(min(LIVENESS_CHECK_SECONDS, remaining)):
                    item = await self._queue.get()
                self._room.set()
                return item
            except TimeoutError:
                if self._alive is not None and not self._alive():
                    self.fail("unreachable", f"node {self.target} serving this stream went away")


def _oversized(
    payload: JsonObject | None, media: InlineMediaAttachment | None
) -> CapabilityError | None:
    return media_problem(media, "invalid_payload") or payload_problem(payload, "invalid_payload")


async def no_frames() -> AsyncIterator[CapabilityStreamFrame]:
    """The frames of a stream that was never admitted."""
    return
    yield


class InputSink:
    """:class:`~skulk_core.extensions.capabilities.CapabilityStreamInput` for one call."""

    def __init__(
        self,
        call_id: str,
        send: Callable[[CapabilityStreamFrame], Awaitable[bool]],
        cancel: Cancel,
        refuse: Callable[[CapabilityError], Awaitable[None]],
    ) -> None:
        self._call_id = call_id
        self._send = send
        self._cancel = cancel
        self._refuse = refuse
        self._sequence = 1
        self._closed = False

    async def send_chunk(
        self, payload: JsonObject | None = None, media: InlineMediaAttachment | None = None
    ) -> bool:
        if self._closed:
            return False
        # NOTE: the bounds are checked before the frame leaves this node (a huge frame
        # must not occupy the link); the provider checks them again.
        problem = _oversized(payload, media)
        if problem is not None:
            self._closed = True
            await self._refuse(problem)
            return False
        return await self._frame("chunk", payload, media)

    async def complete(self) -> bool:
        """Half-close caller input; provider output continues until its terminal."""
        if self._closed:
            return False
        self._closed = True
        return await self._frame("completed", None, None)

    async def cancel(self, message: str | None = None) -> bool:
        """End the whole call (the provider emits a ``cancelled`` terminal)."""
        self._closed = True
        return await self._cancel(message)

    async def _frame(
        self,
        kind: str,
        payload: JsonObject | None,
        media: InlineMediaAttachment | None,
    ) -> bool:
        item = CapabilityStreamFrame(
            call_id=self._call_id,
            direction="caller_to_provider",
            sequence=self._sequence,
            kind="chunk" if kind == "chunk" else "completed",
            payload=payload,
            media=media,
        )
        self._sequence += 1
        return await self._send(item)
