"""What a node reports about itself (runner phases, task bookkeeping): commands
submitted in the order they were made, off the caller's path, so a runner's token
stream never waits on fsync. A refused report is logged, never raised."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from skulk_core.state.commands import Command

log = logging.getLogger("skulk_daemon.node.node")


class Reports:
    def __init__(
        self,
        submit: Callable[[Command], Awaitable[object]],
        refused: type[Exception],
    ) -> None:
        """``refused`` is the exception ``submit`` raises for a refusal (logged at
        debug: a report State no longer needs)."""
        self._submit = submit
        self._refused = refused
        self._queue: asyncio.Queue[Command] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._drain())

    def put(self, command: Command) -> None:
        """Submit ``command`` in the background, after every earlier report."""
        self._queue.put_nowait(command)

    async def _drain(self) -> None:
        while True:
            command = await self._queue.get()
            try:
                await self._submit(command)
            except self._refused as exc:
                log.debug("report %s refused: %s", type(command).__name__, exc)
            except Exception:
                log.exception("could not submit %s", type(command).__name__)
            finally:
                self._queue.task_done()

    async def flush(self) -> None:
        """Wait until every report made so far is applied."""
        if self._task is not None and not self._task.done():
            await self._queue.join()

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
