"""Drive one admitted generation and shape its chunks for the wire.

The response's own task reads the generation's feed
(:meth:`~skulk_daemon.worker.supervisor.Supervisor.open_generation`): every chunk that
arrived since its last wake-up, or a keep-alive tick after :data:`KEEPALIVE_SECONDS`
without any, so a request still waiting for a slot sends keep-alives, and so a client
that disconnects is noticed (the response generator is closed, which cancels the
runner task at once).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, FinishChunk
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.coalesce import Backlog
from skulk_daemon.worker.supervisor import Supervisor

KEEPALIVE_SECONDS = 10.0

CANCELLED_MESSAGE = "generation was cancelled before completing"


@dataclass(frozen=True, slots=True)
class KeepAlive:
    pass


async def generation_events(
    worker: Supervisor,
    commands: ActiveCommands,
    admitted: Admitted,
    backlog: Backlog | None = None,
) -> AsyncGenerator[Chunk | KeepAlive, None]:
    """Every chunk of the generation, with KeepAlive ticks while nothing arrives.

    Always ends with exactly one FinishChunk or ErrorChunk: a cancelled task or a
    stream that stops without a finish reason becomes an ErrorChunk, never silence.
    ``backlog`` (optional) is kept telling whether the next chunk is already here.
    """
    task_id = admitted.task_id
    commands.register(admitted.command_id, lambda: worker.cancel(admitted.instance_id, task_id))
    finished = False
    try:
        feed = await worker.open_generation(
            admitted.instance_id,
            admitted.generation,
            admitted.command_id,
            keepalive_s=KEEPALIVE_SECONDS,
        )
    except BaseException:
        commands.finish(admitted.command_id)
        raise
    if backlog is not None:
        backlog.watch(feed)
    try:
        while not finished:
            # Every chunk that arrived since the last wake-up, in order; the feed's
            # last chunk is always a finish or an error.
            items = await feed.take()
            if items is None:
                yield KeepAlive()
                continue
            left = len(items)
            for item in items:
                left -= 1
                if backlog is not None:
                    backlog.untaken = left
                if isinstance(item, FinishChunk) and item.finish_reason == "cancelled":
                    yield ErrorChunk(task_id=task_id, code="cancelled", message=CANCELLED_MESSAGE)
                    finished = True
                    break
                if isinstance(item, FinishChunk | ErrorChunk):
                    if backlog is not None:
                        backlog.ended = True
                    finished = True
                yield item
                if finished:
                    break
    finally:
        commands.finish(admitted.command_id)
        if not finished:
            # NOTE: the client went away (or we stopped early): stop the runner's work
            # now so the slot is free for the next request.
            worker.cancel(admitted.instance_id, task_id)
        await feed.aclose()
