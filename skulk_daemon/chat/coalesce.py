"""One write per wake-up: a response body's pieces joined while more are at hand.

A generation's response takes every chunk the runner sent since its last wake-up
(:class:`~skulk_daemon.worker.generation_feed.GenerationFeed`), and each wire format shapes them one
by one into byte pieces. Written as they come, N tokens that arrived together cost
N trips through the HTTP server and N socket writes. :func:`coalesced` holds a piece
back while the turn's :class:`Backlog` says the next event is already at hand (no
wait for the runner), and writes what it holds as one piece once it is not. A token
that arrives alone (a single stream keeping up) is written at once, as before; only
a response that fell behind (many streams, a busy machine, a fast GPU) batches, and
it catches up with fewer writes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol


class _Queue(Protocol):
    def __len__(self) -> int: ...


class Backlog:
    """Whether a turn's next event is at hand: chunks its response has taken but
    not yet shaped, or chunks already queued behind them."""

    __slots__ = ("_queue", "ended", "untaken")

    def __init__(self) -> None:
        self.untaken = 0
        """Chunks of the current take not yet handed on (set by the reader)."""
        self.ended = False
        """The terminal chunk was handed on: what follows (the finish, usage, the
        stream's end) needs no wait, so it goes out as one piece with the body's end."""
        self._queue: _Queue | None = None

    def watch(self, queue: _Queue) -> None:
        """Count ``queue``'s queued items as at hand too."""
        self._queue = queue

    def ready(self) -> bool:
        return self.untaken > 0 or self.ended or (self._queue is not None and len(self._queue) > 0)


async def coalesced(body: AsyncIterator[bytes], backlog: Backlog) -> AsyncIterator[bytes]:
    """``body``'s bytes, unchanged and in order, in fewer pieces: joined while
    ``backlog`` has more at hand. Closing this closes ``body`` (a client that went
    away cancels the generation at once, as without it)."""
    held: list[bytes] = []
    try:
        async for piece in body:
            if backlog.ready():
                held.append(piece)
                continue
            if held:
                held.append(piece)
                yield b"".join(held)
                held.clear()
            else:
                yield piece
        if held:
            yield b"".join(held)
    finally:
        close = getattr(body, "aclose", None)
        if close is not None:
            await close()
