"""A generation that is not read straight from a local runner (another node's, one
still loading) is pumped by a task (issue 43): the reader still gets keep-alive ticks
while it waits, and every feed ends with a finish or an error, never silence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

from skulk_core.chat.generation import EngineChunk, ErrorChunk, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.worker.generation_feed import PumpedGeneration

TASK = TaskId("t-1")


async def _drain(feed: PumpedGeneration) -> list[object]:
    got: list[object] = []
    while not feed.finished:
        items = await feed.take()
        got.append("tick" if items is None else [type(c).__name__ for c in items])
        if items is not None:
            got.extend(c.code for c in items if isinstance(c, ErrorChunk))
    await feed.aclose()
    return got


def test_a_slow_iterator_gets_keep_alives_and_one_that_stops_short_an_error() -> None:
    async def chunks() -> AsyncGenerator[EngineChunk, None]:
        await asyncio.sleep(0.35)  # a runner still loading
        yield TokenChunk(task_id=TASK, text="a", token_id=1)

    async def scenario() -> list[object]:
        return await _drain(PumpedGeneration(chunks(), TASK, keepalive_s=0.1))

    got = asyncio.run(scenario())
    assert got[0] == "tick"
    # The token, then the error that says the generation ended without a finish.
    assert got[-2:] == [["TokenChunk", "ErrorChunk"], "incomplete_generation"]


def test_an_iterator_that_fails_ends_the_feed_with_runner_failed() -> None:
    async def chunks() -> AsyncGenerator[EngineChunk, None]:
        yield TokenChunk(task_id=TASK, text="a", token_id=1)
        raise RuntimeError("the node went away")

    async def scenario() -> list[object]:
        return await _drain(PumpedGeneration(chunks(), TASK, keepalive_s=None))

    assert asyncio.run(scenario())[-1] == "runner_failed"


def test_closing_before_the_finish_stops_the_iterator() -> None:
    stopped = asyncio.Event()

    async def chunks() -> AsyncGenerator[EngineChunk, None]:
        try:
            n = 0
            while True:
                n += 1
                yield TokenChunk(task_id=TASK, text="a", token_id=n)
                await asyncio.sleep(0.01)
        finally:
            stopped.set()

    async def scenario() -> bool:
        feed = PumpedGeneration(chunks(), TASK, keepalive_s=None)
        assert await feed.take()
        await feed.aclose()
        return stopped.is_set() and not feed.finished

    assert asyncio.run(scenario())
