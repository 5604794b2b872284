"""A bounded hand-off from a producer to one reader that takes all that arrived at once.

It runs once a token on every stream, so it is built for that (issue 43): the reader
takes everything queued in one wake-up (several tokens when they arrived together),
and the keep-alive deadline costs one timer per quiet period rather than one per wait
(``asyncio.Queue`` with ``asyncio.timeout`` made a future, a timer and a timeout
context each token). The producer is either a task (:meth:`Handoff.put`, which waits
while the hand-off is full) or an event-loop callback such as a pipe's read callback
(:meth:`Handoff.offer`, which never waits: it says when the hand-off is full), so the
runner's frames reach the response that reads them with no task in between.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class Handoff(Generic[T]):
    """Items from one producer to one reader, at most ``limit`` queued.

    :meth:`take` returns every queued item, or ``None`` once ``keepalive_s`` have
    passed in one wait with nothing arriving (the caller sends a keep-alive and takes
    again; with ``keepalive_s=None`` a wait lasts until an item comes). Call
    :meth:`release` when done (it drops the keep-alive timer)."""

    __slots__ = (
        "_items",
        "_keepalive_s",
        "_limit",
        "_loop",
        "_since",
        "_space",
        "_timer",
        "_waiter",
    )

    def __init__(self, limit: int, keepalive_s: float | None) -> None:
        self._items: deque[T] = deque()
        self._limit = limit
        self._keepalive_s = keepalive_s
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        """The reader, while it waits for an item."""
        self._space: asyncio.Future[None] | None = None
        """The producer, while the hand-off is full."""
        self._timer: asyncio.TimerHandle | None = None
        self._since = 0.0
        """When the reader's current wait began."""

    def __len__(self) -> int:
        """Items queued and not yet taken."""
        return len(self._items)

    def offer(self, item: T, *, force: bool = False) -> bool:
        """Queue ``item`` now, from any code on the loop (a callback included);
        ``False`` (and nothing queued) when ``limit`` items are queued, unless
        ``force`` (a last item that must always fit)."""
        if not force and len(self._items) >= self._limit:
            return False
        self._items.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    async def put(self, item: T) -> None:
        """Queue ``item``; waits while ``limit`` items are queued (a slow reader)."""
        while len(self._items) >= self._limit:
            self._space = self._loop.create_future()
            await self._space
        self.offer(item, force=True)

    async def take(self) -> list[T] | None:
        """Every queued item (at least one), or ``None`` after ``keepalive_s`` without one."""
        if not self._items:
            self._since = self._loop.time()
            waiter = self._waiter = self._loop.create_future()
            if self._timer is None and self._keepalive_s is not None:
                self._timer = self._loop.call_at(self._since + self._keepalive_s, self._tick)
            try:
                await waiter
            finally:
                self._waiter = None
            if not self._items:
                return None
        items = list(self._items)
        self._items.clear()
        space = self._space
        if space is not None and not space.done():
            space.set_result(None)
        return items

    def release(self) -> None:
        """The reader is done: drop the keep-alive timer."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _tick(self) -> None:
        # NOTE: one timer serves every wait: when it fires during a wait that began
        # less than keepalive_s ago, it re-arms for that wait's deadline instead.
        self._timer = None
        waiter = self._waiter
        if waiter is None or waiter.done() or self._keepalive_s is None:
            return
        due = self._since + self._keepalive_s
        if self._loop.time() >= due:
            waiter.set_result(None)
        else:
            self._timer = self._loop.call_at(due, self._tick)
