"""Drive one admitted generation and shape its chunks for the wire.

A pump task moves engine chunks into a :class:`~skulk_daemon.chat.handoff.Handoff`;
the response takes all that arrived at each wake-up, or a keep-alive tick after
:data:`KEEPALIVE_SECONDS` without any, so a request still waiting for a slot sends
keep-alives, and so a client that disconnects is noticed (the response generator is
closed, which cancels the runner task at once).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, FinishChunk, TokenChunk
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.coalesce import Backlog
from skulk_daemon.chat.handoff import Handoff
from skulk_daemon.worker.supervisor import Supervisor

KEEPALIVE_SECONDS = 10.0
# Tokens buffered between the runner and a slow client before the pump waits.
PUMP_QUEUE_CHUNKS = 1024

CANCELLED_MESSAGE = "generation was cancelled before completing"


@dataclass(frozen=True, slots=True)
class KeepAlive:
    pass


_END = object()


async def generation_events(
    worker: Supervisor,
    commands: ActiveCommands,
    admitted: Admitted,
    backlog: Backlog | None = None,
) -> AsyncIterator[Chunk | KeepAlive]:
    """Every chunk of the generation, with KeepAlive ticks while nothing arrives.

    Always ends with exactly one FinishChunk or ErrorChunk: a cancelled task or a
    stream that stops without a finish reason becomes an ErrorChunk, never silence.
    ``backlog`` (optional) is kept telling whether the next chunk is already here.
    """
    handoff: Handoff[object] = Handoff(PUMP_QUEUE_CHUNKS, KEEPALIVE_SECONDS)
    task_id = admitted.task_id
    if backlog is not None:
        backlog.watch(handoff)

    async def pump() -> None:
        try:
            # NOTE: aclosing, so a cancelled pump closes the worker's generator at
            # once (its cleanup reports the task finished) instead of at GC time.
            async with contextlib.aclosing(
                worker.generate(admitted.instance_id, admitted.generation, admitted.command_id)
            ) as chunks:
                async for chunk in chunks:
                    await handoff.put(chunk)
        except Exception as exc:  # the runner side failed; say so in the body
            await handoff.put(ErrorChunk(task_id=task_id, code="runner_failed", message=str(exc)))
        finally:
            await handoff.put(_END)

    pumping = asyncio.create_task(pump())
    commands.register(admitted.command_id, lambda: worker.cancel(admitted.instance_id, task_id))
    finished = ended = False
    try:
        while not (finished or ended):
            # Every chunk that arrived since the last wake-up, in order.
            items = await handoff.take()
            if items is None:
                yield KeepAlive()
                continue
            left = len(items)
            for item in items:
                left -= 1
                if backlog is not None:
                    backlog.untaken = left
                if item is _END:
                    ended = True
                    break
                assert isinstance(item, TokenChunk | FinishChunk | ErrorChunk)
                if isinstance(item, FinishChunk) and item.finish_reason == "cancelled":
                    yield ErrorChunk(task_id=task_id, code="cancelled", message=CANCELLED_MESSAGE)
                    finished = True
                    break
                if backlog is not None and isinstance(item, FinishChunk | ErrorChunk):
                    backlog.ended = True
                yield item
                if isinstance(item, FinishChunk | ErrorChunk):
                    finished = True
                    break
        if not finished:
            yield ErrorChunk(
                task_id=task_id,
                code="incomplete_generation",
                message="generation ended without a finish reason",
            )
    finally:
        handoff.close()
        commands.finish(admitted.command_id)
        if finished:
            # The runner sent its terminal chunk: let the pump wind down normally.
            await pumping
        elif not pumping.done():
            # NOTE: the client went away (or we stopped early): stop the runner's work
            # now so the slot is free for the next request, then drop the pump.
            worker.cancel(admitted.instance_id, task_id)
            pumping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pumping
