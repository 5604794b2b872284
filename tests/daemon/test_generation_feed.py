"""A generation that is not read straight from a local runner (another node's, one
still loading) is pumped by a task (issue 43): the reader still gets keep-alive ticks
while it waits, and every feed ends with a finish or an error, never silence."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationStats,
    TokenChunk,
)
from skulk_core.ids import InstanceId, TaskId
from skulk_core.state.state import State, TaskStatus
from skulk_daemon.runner.inbound import RunnerGeneration, TaskStream
from skulk_daemon.worker.generation_feed import LocalGeneration, PumpedGeneration
from skulk_daemon.worker.observers import GenerationWatch
from skulk_daemon.worker.tasks import Outcome

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


def test_a_local_generation_ends_its_task_with_the_terminal_chunk_not_at_close() -> None:
    """A reader that stops at the finish and is collected late (an async generator
    left unclosed) must not keep the task open in /state: the old feed closed it only
    in ``aclose``, and a cancelled request then waited on a task that never ended."""

    async def scenario() -> None:
        closed: list[bool] = []
        stream = TaskStream(16)
        generation = RunnerGeneration(stream, closed.append)
        task = contextlib.ExitStack()
        task_ended: list[str] = []
        task.callback(task_ended.append, "ended")
        outcome = Outcome()
        feed = LocalGeneration(
            generation,
            InstanceId("i-1"),
            watch=GenerationWatch(State),
            trace=None,
            task=task,
            outcome=outcome,
        )

        stream.push(TokenChunk(task_id=TASK, text="a", token_id=1))
        stream.close(
            FinishChunk(
                task_id=TASK,
                finish_reason="length",
                prompt_tokens=1,
                completion_tokens=1,
                stats=GenerationStats(
                    prompt_tps=1.0,
                    generation_tps=1.0,
                    prompt_tokens=1,
                    generation_tokens=1,
                    serving_batches=False,
                    in_flight_at_admission=1,
                    time_to_first_token_ms=1.0,
                ),
            )
        )
        assert await feed.take()
        assert feed.finished
        # No aclose yet: the task is over all the same, and as completed.
        assert task_ended == ["ended"]
        assert closed == [True]
        assert outcome.status is TaskStatus.COMPLETE
        await feed.aclose()  # and closing afterwards changes nothing
        assert task_ended == ["ended"]
        assert outcome.status is TaskStatus.COMPLETE

    asyncio.run(scenario())
