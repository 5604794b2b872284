"""A generation's chunks as its reader takes them straight from the runner's read
callback (issue 43): all that arrived at once in one take, and a reader that falls
too far behind has its generation cancelled instead of its queue growing."""

from __future__ import annotations

import asyncio

from skulk_core.chat.generation import ErrorChunk, FinishChunk, GenerationStats, TokenChunk
from skulk_core.ids import TaskId
from skulk_daemon.runner.client import ERROR_CONSUMER_TOO_SLOW
from skulk_daemon.runner.inbound import RunnerGeneration
from skulk_daemon.runner.routing import TaskRouter

TASK = TaskId("t-1")
STATS = GenerationStats(
    prompt_tps=1.0,
    generation_tps=1.0,
    prompt_tokens=1,
    generation_tokens=2,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=1.0,
)


def _token(n: int) -> TokenChunk:
    return TokenChunk(task_id=TASK, text=f" w{n}", token_id=n)


def test_a_take_returns_every_chunk_that_arrived_and_the_finish_ends_it() -> None:
    async def scenario() -> tuple[list[list[str]], bool, list[TaskId]]:
        cancelled: list[TaskId] = []
        router = TaskRouter(8, cancelled.append, lambda: True)
        stream = router.open_stream(TASK)
        generation = RunnerGeneration(
            stream, lambda finished: router.close_stream(TASK, stream, finished=finished)
        )
        loop = asyncio.get_running_loop()
        loop.call_soon(lambda: [router.deliver(_token(n)) for n in (1, 2, 3)])
        first = await generation.take()
        finish = FinishChunk(
            task_id=TASK, finish_reason="stop", prompt_tokens=1, completion_tokens=4, stats=STATS
        )
        loop.call_soon(lambda: (router.deliver(_token(4)), router.deliver(finish)))
        second = await generation.take()
        await generation.aclose()
        taken = [[type(c).__name__ for c in batch] for batch in (first or [], second or [])]
        return taken, generation.finished, cancelled

    taken, finished, cancelled = asyncio.run(scenario())
    assert taken == [["TokenChunk"] * 3, ["TokenChunk", "FinishChunk"]]
    assert finished
    assert cancelled == []  # a finished generation is not cancelled on close


def test_a_reader_too_far_behind_gets_an_error_and_the_runner_a_cancel() -> None:
    async def scenario() -> tuple[list[object], list[TaskId]]:
        cancelled: list[TaskId] = []
        router = TaskRouter(2, cancelled.append, lambda: True)
        stream = router.open_stream(TASK)
        generation = RunnerGeneration(
            stream, lambda finished: router.close_stream(TASK, stream, finished=finished)
        )
        for n in range(1, 6):  # the reader takes nothing meanwhile
            router.deliver(_token(n))
        taken = await generation.take()
        await generation.aclose()
        return list(taken or []), cancelled

    taken, cancelled = asyncio.run(scenario())
    assert taken[:2] == [_token(1), _token(2)]
    assert len(taken) == 3
    error = taken[2]
    assert isinstance(error, ErrorChunk)
    assert error.code == ERROR_CONSUMER_TOO_SLOW
    assert cancelled == [TASK]


def test_closing_before_the_finish_cancels_the_generation_on_the_runner() -> None:
    async def scenario() -> list[TaskId]:
        cancelled: list[TaskId] = []
        router = TaskRouter(8, cancelled.append, lambda: True)
        stream = router.open_stream(TASK, keepalive_s=0.05)
        generation = RunnerGeneration(
            stream, lambda finished: router.close_stream(TASK, stream, finished=finished)
        )
        assert await generation.take() is None  # a keep-alive tick: nothing yet
        router.deliver(_token(1))
        assert await generation.take() == [_token(1)]
        await generation.aclose()
        router.deliver(_token(2))  # dropped: nobody reads the task any more
        return cancelled

    assert asyncio.run(scenario()) == [TASK]
