"""One generation as its reader takes it: every chunk that arrived since the last take.

A generation whose runner already serves on this node is read straight from the
runner's task stream (:class:`LocalGeneration`): the pipe's read callback queues a
chunk and the response's own task takes it, with no task in between (issue 43: that
hop was a wake-up a token). Anything else (a runner on another node, one still
loading, an instance that is not there) is an async iterator of chunks that
:class:`PumpedGeneration` moves through a task, so the reader still gets keep-alive
ticks while that iterator waits. Either way the last chunk taken is a finish or an
error, and ``aclose()`` before it cancels the generation.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator
from typing import Final, Protocol

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, TokenChunk
from skulk_core.ids import InstanceId, TaskId
from skulk_core.state.state import TaskStatus
from skulk_daemon.runner.inbound import RunnerGeneration
from skulk_daemon.system.handoff import Handoff
from skulk_daemon.worker.observers import GenerationObserver, GenerationWatch
from skulk_daemon.worker.tasks import Outcome, finish_status

PUMP_QUEUE_CHUNKS: Final = 1024
"""Chunks a pumped generation buffers for a slow reader before its pump waits."""


class GenerationFeed(Protocol):
    """What a generation's reader takes its chunks from."""

    @property
    def finished(self) -> bool:
        """The terminal chunk (a finish or an error) has been taken."""
        ...

    def __len__(self) -> int:
        """Chunks arrived and not yet taken."""
        ...

    async def take(self) -> list[Chunk] | None:
        """Every chunk that arrived (at least one), or ``None`` after the feed's
        keep-alive period without one."""
        ...

    async def aclose(self) -> None:
        """Done reading; before the terminal chunk, the generation is cancelled."""
        ...


class LocalGeneration:
    """A generation on this node's serving runner, its task open in ``/state`` until
    closed; the supervisor's watchers and the tracer see each chunk as it is taken."""

    __slots__ = (
        "_generation",
        "_instance_id",
        "_last",
        "_outcome",
        "_task",
        "_trace",
        "_watch",
        "finished",
    )

    def __init__(
        self,
        generation: RunnerGeneration,
        instance_id: InstanceId,
        *,
        watch: GenerationWatch,
        trace: GenerationObserver | None,
        task: contextlib.ExitStack,
        outcome: Outcome,
    ) -> None:
        self._generation = generation
        self._instance_id = instance_id
        self._watch = watch
        self._trace = trace
        self._task: contextlib.ExitStack | None = task
        """Holds the task open in ``/state`` (RunnerTasks.open) until :meth:`aclose`."""
        self._outcome = outcome
        self._last: Chunk | None = None
        self.finished = False

    def __len__(self) -> int:
        return len(self._generation)

    async def take(self) -> list[Chunk] | None:
        chunks = await self._generation.take()
        if chunks is None:
            return None
        trace = self._trace
        if trace is not None:
            for chunk in chunks:
                trace.chunk(chunk)
        last = self._last = chunks[-1]
        if self._generation.finished:
            self.finished = True
            # Only a terminal chunk ends a task or tells the watchers anything.
            self._watch.ended(self._instance_id, last, "local")
            ended = finish_status(last)
            if ended is not None:
                self._outcome.status = ended
            # NOTE: the task ends with its terminal chunk, not when the reader closes
            # the feed: a reader that stops at the finish and is collected late (an
            # async generator left unclosed) would keep it open in /state.
            self._end()
        return chunks

    async def aclose(self) -> None:
        if self._task is None:
            return
        if not self.finished:
            # NOTE: the reader went away (a client gone, a cancelled request): the
            # task was cancelled, not failed.
            self._outcome.status = TaskStatus.CANCELLED
        self._end()

    def _end(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        self._generation.close()
        task.close()
        if self._trace is not None:
            self._trace.finish(self._last)


class PumpedGeneration:
    """An async iterator's chunks, moved by a task into a bounded hand-off. It always
    ends with a terminal chunk: an iterator that raises ends with ``runner_failed``,
    one that stops without a finish with ``incomplete_generation``."""

    __slots__ = ("_handoff", "_pump", "finished")

    def __init__(
        self, chunks: AsyncGenerator[Chunk, None], task_id: TaskId, keepalive_s: float | None
    ) -> None:
        self._handoff: Handoff[Chunk] = Handoff(PUMP_QUEUE_CHUNKS, keepalive_s)
        self.finished = False
        self._pump = asyncio.create_task(self._run(chunks, task_id))

    def __len__(self) -> int:
        return len(self._handoff)

    async def _run(self, chunks: AsyncGenerator[Chunk, None], task_id: TaskId) -> None:
        last: Chunk | None = None
        try:
            # NOTE: aclosing, so a cancelled pump closes the generator at once (its
            # cleanup reports the task finished) instead of at GC time.
            async with contextlib.aclosing(chunks):
                async for last in chunks:
                    await self._handoff.put(last)
        except Exception as exc:  # the runner side failed; say so in the body
            last = ErrorChunk(task_id=task_id, code="runner_failed", message=str(exc))
            self._handoff.offer(last, force=True)
            return
        if last is None or type(last) is TokenChunk:
            self._handoff.offer(
                ErrorChunk(
                    task_id=task_id,
                    code="incomplete_generation",
                    message="generation ended without a finish reason",
                ),
                force=True,
            )

    async def take(self) -> list[Chunk] | None:
        chunks = await self._handoff.take()
        if chunks is not None and type(chunks[-1]) is not TokenChunk:
            self.finished = True
        return chunks

    async def aclose(self) -> None:
        self._handoff.release()
        if self.finished:
            # The terminal chunk was taken: let the iterator wind down normally.
            await self._pump
            return
        # NOTE: the reader went away (or stopped early): stop the iterator now, so the
        # runner's slot is free for the next request.
        self._pump.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._pump
