"""One write per wake-up (issue 43): a streamed chat body's tokens that reached the
daemon together leave it as one piece; a token that arrived alone leaves at once;
the bytes a client reads are the same either way."""

from __future__ import annotations

import asyncio
from typing import Any

from skulk_core.chat.generation import (
    FinishChunk,
    GenerationRequest,
    GenerationStats,
    SamplingParams,
    TokenChunk,
)
from skulk_core.chat.tools import NO_TOOLS
from skulk_core.ids import CommandId, InstanceId, ModelId, TaskId
from skulk_core.models.cards import Memory, ModelCard
from skulk_daemon.chat.admission import Admitted
from skulk_daemon.chat.cancellation import ActiveCommands
from skulk_daemon.chat.coalesce import Backlog, coalesced
from skulk_daemon.chat.generation import generation_events
from skulk_daemon.chat.openai_wire import sse_stream
from skulk_daemon.chat.turn import turn_events
from skulk_daemon.runner.inbound import RunnerGeneration, TaskStream

TASK = TaskId("t-1")
STATS = GenerationStats(
    prompt_tps=1.0,
    generation_tps=1.0,
    prompt_tokens=3,
    generation_tokens=6,
    serving_batches=False,
    in_flight_at_admission=1,
    time_to_first_token_ms=1.0,
)


class _Worker:
    """A runner's task stream, fed by the test as the runner's frames would be."""

    def __init__(self) -> None:
        self.stream = TaskStream(64)
        self.cancelled = False
        self.closed_early = False

    async def open_generation(self, *_: Any, **__: Any) -> RunnerGeneration:
        return RunnerGeneration(self.stream, self._closed)

    def _closed(self, finished: bool) -> None:
        self.closed_early = not finished

    def cancel(self, *_: Any) -> None:
        self.cancelled = True


def _admitted() -> Admitted:
    return Admitted(
        command_id=CommandId("c-1"),
        task_id=TASK,
        model="m",
        instance_id=InstanceId("i"),
        card=ModelCard(model_id=ModelId("m"), storage_size=Memory(in_bytes=1), n_layers=1),
        generation=GenerationRequest(
            task_id=TASK, prompt="p", sampling=SamplingParams(max_tokens=6)
        ),
        offer=NO_TOOLS,
        starts_in_reasoning=False,
        include_usage=True,
        created=0,
    )


def _token(n: int) -> TokenChunk:
    return TokenChunk(task_id=TASK, text=f" w{n}", token_id=n)


def _finish() -> FinishChunk:
    return FinishChunk(
        task_id=TASK, finish_reason="length", prompt_tokens=3, completion_tokens=6, stats=STATS
    )


async def _pieces(batches: list[list[Any]], *, coalesce: bool) -> list[bytes]:
    """The body's pieces when the runner's chunks arrive in ``batches`` (each batch
    in one wake-up, the next once the body has written what it could)."""
    worker = _Worker()
    admitted = _admitted()
    backlog = Backlog() if coalesce else None
    events = generation_events(worker, ActiveCommands(), admitted, backlog)  # type: ignore[arg-type]
    body = sse_stream(admitted, turn_events(admitted, events))
    if backlog is not None:
        body = coalesced(body, backlog)
    pending = iter(batches)
    loop = asyncio.get_running_loop()

    def arrive() -> None:
        for chunk in next(pending, []):
            if isinstance(chunk, TokenChunk):
                worker.stream.push(chunk)
            else:
                worker.stream.close(chunk)

    pieces: list[bytes] = []
    async for piece in body:
        pieces.append(piece)
        if piece.startswith(b": command_id") or b'" w' in piece:
            loop.call_soon(arrive)
    return pieces


BURSTS = [[_token(1)], [_token(2), _token(3), _token(4)], [_token(5), _token(6), _finish()]]


def test_tokens_that_arrived_together_leave_as_one_piece() -> None:
    plain = asyncio.run(_pieces(BURSTS, coalesce=False))
    joined = asyncio.run(_pieces(BURSTS, coalesce=True))
    assert b"".join(joined) == b"".join(plain)
    # The comment; the first token alone; three tokens; the last two tokens with the
    # finish, usage, stats and [DONE] (nothing after the finish waits on the runner).
    assert len(joined) == 4
    assert joined[2].count(b"data: ") == 3
    assert joined[-1].endswith(b"data: [DONE]\n\n")
    assert len(plain) > len(joined)


def test_a_token_that_arrived_alone_leaves_at_once() -> None:
    alone = [[_token(n)] for n in range(1, 7)] + [[_finish()]]
    plain = asyncio.run(_pieces(alone, coalesce=False))
    joined = asyncio.run(_pieces(alone, coalesce=True))
    assert b"".join(joined) == b"".join(plain)
    assert [p for p in joined if b'" w' in p] == [p for p in plain if b'" w' in p]


def test_closing_the_body_cancels_the_generation() -> None:
    async def scenario() -> bool:
        worker = _Worker()
        admitted = _admitted()
        backlog = Backlog()
        # NOTE: no reference kept to the inner generators, as in the service: closing
        # the body lets them go, and asyncio closes them (the generation's cleanup).
        body = coalesced(
            sse_stream(
                admitted,
                turn_events(
                    admitted,
                    generation_events(worker, ActiveCommands(), admitted, backlog),  # type: ignore[arg-type]
                ),
            ),
            backlog,
        )
        worker.stream.push(_token(1))
        assert (await anext(body)).startswith(b": command_id")
        assert b" w1" in await anext(body)
        await body.aclose()  # type: ignore[attr-defined]
        for _ in range(10):  # the inner generators close on the loop's next turns
            await asyncio.sleep(0)
        return worker.cancelled and worker.closed_early

    assert asyncio.run(scenario())
