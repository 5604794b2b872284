"""Tokens merged into fewer data-plane frames while the serving node lags.

The serving end sends a generation's chunks through the real :class:`ChunkSender`
and :class:`DataPlane`; every frame goes through the real fabric encoder and
decoder, as between two nodes. A token is sent the moment it arrives while the
sender keeps up; the tokens that queue up behind a slow send leave as one
:class:`TokenRun` frame, and the owner's real :class:`RemoteTasks` yields exactly
the chunks the runner produced, in order, every field kept.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Coroutine
from typing import Any

import msgspec
import pytest

from skulk_core.chat.generation import EngineChunk, FinishChunk, GenerationStats, TokenChunk
from skulk_core.cluster.fabric import (
    MAX_RUN_TOKENS,
    PLANE_OF,
    DataFrame,
    FrameError,
    RunTask,
    TokenRun,
    decode_body,
    encode,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import ChunkSender, DataPlane, StreamBroken
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.remote_tasks import RemoteTasks
from tests.core.fabric_samples import generation_request, header

OWNER = NodeId("12D3KooWowner")
SERVER = NodeId("12D3KooWserver")
CMD = CommandId("cmd-runs")
INSTANCE = InstanceId("i1")
TASK = TaskId("t1")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def wire(frame: DataFrame) -> DataFrame:
    """What the owner decodes from ``frame``'s fabric message."""
    body = decode_body(encode(header(plane=PLANE_OF[DataFrame]), frame))
    assert isinstance(body, DataFrame)
    return body


def token(i: int) -> TokenChunk:
    """Varied tokens: empty text (held back), multi-byte text, some with logprobs."""
    text = ["", "é", f" w{i}", "🦊"][i % 4]
    if i % 3 == 0:
        return TokenChunk(task_id=TASK, text=text, token_id=i)
    top = [(text, -0.1 * i), ("x", -2.0)] if i % 2 == 0 else None
    return TokenChunk(task_id=TASK, text=text, token_id=i, logprob=-0.1 * i, top_logprobs=top)


def finish(tokens: int) -> FinishChunk:
    return FinishChunk(
        task_id=TASK,
        finish_reason="length",
        prompt_tokens=5,
        completion_tokens=tokens,
        stats=GenerationStats(
            prompt_tps=100.0,
            generation_tps=50.0,
            prompt_tokens=5,
            generation_tokens=tokens,
            serving_batches=False,
            in_flight_at_admission=1,
            time_to_first_token_ms=3.0,
        ),
    )


def unpacked(frames: list[DataFrame]) -> list[EngineChunk]:
    chunks: list[EngineChunk] = []
    for frame in frames:
        match frame.payload:
            case TokenRun() as tokens:
                chunks.extend(tokens.chunks())
            case TokenChunk() | FinishChunk() as chunk:
                chunks.append(chunk)
            case other:
                raise AssertionError(f"unexpected payload {other!r}")
    return chunks


class Wire:
    """The serving node's data plane, its frames decoded as the owner would;
    ``lag`` seconds of blocking per send (a loaded core encrypting, a full socket)."""

    def __init__(self, lag: float = 0.0, refuse: frozenset[int] = frozenset()) -> None:
        self.frames: list[DataFrame] = []
        self.lag = lag
        self.refuse = refuse
        """Which send attempts (from 0) are refused, once each (a full queue)."""
        self.attempts = 0
        self.plane = DataPlane(SERVER, self._send)

    def _send(self, owner: NodeId, frame: DataFrame) -> bool:
        assert owner == OWNER
        self.attempts += 1
        if self.attempts - 1 in self.refuse:
            return False
        if self.lag:
            time.sleep(self.lag)
        self.frames.append(wire(frame))
        return True


def test_a_token_leaves_at_once_while_the_sender_keeps_up() -> None:
    async def main() -> None:
        out = Wire()
        sender = ChunkSender(out.plane, OWNER, CMD)
        tokens = [token(i) for i in range(6)]
        for i, chunk in enumerate(tokens):
            assert sender.send(chunk)
            # Sent inside send(): the first token (and each one after an idle
            # turn) is never held back.
            assert len(out.frames) == i + 1 and out.frames[-1].payload == chunk
            await asyncio.sleep(0)
        assert sender.send(finish(6))
        assert [f.seq for f in out.frames] == list(range(7))
        assert [f.final for f in out.frames] == [False] * 6 + [True]
        assert unpacked(out.frames) == [*tokens, finish(6)]
        sender.close()

    run(main())


def test_tokens_that_queue_up_in_one_turn_leave_as_one_run_in_order() -> None:
    async def main() -> None:
        out = Wire()
        sender = ChunkSender(out.plane, OWNER, CMD)
        tokens = [token(i) for i in range(9)]
        for chunk in tokens:  # a burst: nine tokens arrived in one turn
            assert sender.send(chunk)
        assert [f.payload for f in out.frames] == [tokens[0]]  # the first went at once
        await asyncio.sleep(0)
        assert len(out.frames) == 2
        run_ = out.frames[1].payload
        assert isinstance(run_, TokenRun)
        assert run_.token_ids == list(range(1, 9))
        assert run_.texts == [t.text for t in tokens[1:]]
        assert run_.logprobs == [t.logprob for t in tokens[1:]]
        assert run_.top_logprobs == [t.top_logprobs for t in tokens[1:]]
        assert "".join(run_.texts) == "".join(t.text for t in tokens[1:])
        assert unpacked(out.frames) == tokens
        # The channel turned idle: the next token leaves alone, at once.
        await asyncio.sleep(0)
        assert sender.send(token(9)) and out.frames[-1].payload == token(9)
        sender.close()

    run(main())


def test_a_terminal_chunk_sends_the_waiting_tokens_first() -> None:
    async def main() -> None:
        out = Wire()
        sender = ChunkSender(out.plane, OWNER, CMD)
        tokens = [token(i) for i in range(4)]
        for chunk in tokens:
            sender.send(chunk)
        assert sender.send(finish(4))  # in the same turn
        assert [type(f.payload) for f in out.frames] == [TokenChunk, TokenRun, FinishChunk]
        assert [f.seq for f in out.frames] == [0, 1, 2]
        assert [f.final for f in out.frames] == [False, False, True]
        assert unpacked(out.frames) == [*tokens, finish(4)]
        await asyncio.sleep(0)
        assert len(out.frames) == 3  # nothing left behind to send later

    run(main())


def test_a_run_never_exceeds_its_bound() -> None:
    async def main() -> None:
        out = Wire()
        sender = ChunkSender(out.plane, OWNER, CMD)
        tokens = [token(i) for i in range(2 * MAX_RUN_TOKENS + 10)]
        for chunk in tokens:
            sender.send(chunk)
        sender.send(finish(len(tokens)))
        runs = [f.payload for f in out.frames if isinstance(f.payload, TokenRun)]
        assert [len(r.token_ids) for r in runs] == [MAX_RUN_TOKENS, MAX_RUN_TOKENS, 9]
        assert unpacked(out.frames) == [*tokens, finish(len(tokens))]

    run(main())


def test_a_run_that_could_not_be_sent_fails_the_next_send() -> None:
    async def main() -> None:
        out = Wire(refuse=frozenset({1}))  # the run's frame is refused, once
        sender = ChunkSender(out.plane, OWNER, CMD)
        assert sender.send(token(0))
        assert sender.send(token(1))  # waits for the next turn
        await asyncio.sleep(0)  # ... where its frame is refused
        assert not sender.send(token(2))
        assert not sender.send(finish(3))
        assert [f.payload for f in out.frames] == [token(0)] and out.attempts == 2

    run(main())


def test_no_final_frame_follows_a_run_that_was_lost() -> None:
    async def main() -> None:
        out = Wire(refuse=frozenset({1}))
        sender = ChunkSender(out.plane, OWNER, CMD)
        for i in range(3):
            sender.send(token(i))
        # The waiting run is refused; the finish would have taken its number and
        # the owner would have missed two tokens without a gap to notice.
        assert not sender.send(finish(3))
        assert [f.payload for f in out.frames] == [token(0)] and out.attempts == 2

    run(main())


@pytest.mark.parametrize(
    "fields",
    [
        {"texts": [], "token_ids": []},
        {"texts": ["a"], "token_ids": [1, 2]},
        {"texts": ["a", "b"], "token_ids": [1, 2], "logprobs": [-1.0]},
        {"texts": ["a"], "token_ids": [1], "top_logprobs": [None, None]},
        {"texts": ["a"] * (MAX_RUN_TOKENS + 1), "token_ids": [1] * (MAX_RUN_TOKENS + 1)},
    ],
)
def test_a_run_whose_lists_disagree_is_malformed(fields: dict[str, object]) -> None:
    raw = msgspec.msgpack.encode(
        {
            "type": "data",
            "command_id": CMD,
            "seq": 0,
            "payload": {"type": "tokens", "task_id": TASK, **fields},
        }
    )
    good = encode(header(plane="data"), DataFrame(command_id=CMD, seq=0, payload=token(1)))
    with pytest.raises(FrameError) as caught:
        decode_body([good[0], raw])
    assert caught.value.reason == "malformed"


class Runner:
    """A runner on its own thread, a token every ``interval`` seconds, handed to the
    serving node's event loop the way the runner client's reader does."""

    def __init__(self, tokens: list[TokenChunk], interval: float) -> None:
        self.tokens = tokens
        self.interval = interval
        self.cancelled: list[TaskId] = []

    async def generate(
        self,
        instance_id: InstanceId,
        request: object,
        command_id: CommandId,
        *,
        origin: NodeId | None = None,
    ) -> AsyncIterator[EngineChunk]:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TokenChunk] = asyncio.Queue()

        def produce() -> None:
            for chunk in self.tokens:
                time.sleep(self.interval)
                loop.call_soon_threadsafe(queue.put_nowait, chunk)

        thread = threading.Thread(target=produce, daemon=True)
        thread.start()
        for _ in self.tokens:
            yield await queue.get()
        thread.join()
        yield finish(len(self.tokens))

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        self.cancelled.append(task_id)


class Link:
    """One node's side of the fabric for remote tasks."""

    def __init__(self, own: NodeId, data: DataPlane) -> None:
        self.data = data
        self.counters = LinkCounters()
        self.control: list[object] = []

    def send_control(self, node_id: NodeId, body: object) -> bool:
        self.control.append(body)
        return True

    def send_capability(self, node_id: NodeId, body: object) -> bool:
        raise AssertionError("no capability traffic here")

    def is_live(self, node_id: NodeId) -> bool:
        return True


async def _serve_and_read(
    tokens: list[TokenChunk], interval: float, lag: float
) -> tuple[list[EngineChunk], list[DataFrame], Runner]:
    """The real owner and serving ends of remote tasks, their data planes joined by a
    wire that blocks the serving node ``lag`` seconds per frame."""
    owner_plane = DataPlane(OWNER, lambda node, frame: True)
    frames: list[DataFrame] = []

    def carry(node: NodeId, frame: DataFrame) -> bool:
        time.sleep(lag)
        frames.append(wire(frame))
        owner_plane.deliver(frames[-1])
        return True

    owner = RemoteTasks(Link(OWNER, owner_plane))
    server = RemoteTasks(Link(SERVER, DataPlane(SERVER, carry)))
    runner = Runner(tokens, interval)
    server.attach(runner)  # type: ignore[arg-type]
    request = generation_request()

    async def read() -> list[EngineChunk]:
        return [chunk async for chunk in owner.generate(SERVER, INSTANCE, request, CMD)]

    reading = asyncio.create_task(read())
    await asyncio.sleep(0)  # the owner opened its stream and asked
    server.serve(OWNER, RunTask(command_id=CMD, instance_id=INSTANCE, request=request))
    got = await asyncio.wait_for(reading, 30)
    await server.close()
    return got, frames, runner


def test_a_lagging_wire_gets_fewer_frames_with_every_token_in_order() -> None:
    tokens = [token(i) for i in range(60)]
    got, frames, runner = asyncio.run(_serve_and_read(tokens, interval=0.001, lag=0.02))
    assert got == [*tokens, finish(60)]
    assert len(frames) < len(tokens) // 2  # merged while each send took 20 ms
    assert any(isinstance(f.payload, TokenRun) for f in frames)
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert frames[0].payload == tokens[0]  # the first token travelled alone, at once
    assert runner.cancelled == []


def test_the_owners_frame_bound_still_breaks_a_stream_it_cannot_hold() -> None:
    async def main() -> None:
        owner_plane = DataPlane(OWNER, lambda node, frame: True)
        stream = owner_plane.open(CMD, limit=2)
        for seq in range(3):  # three frames, the reader never ran
            owner_plane.deliver(
                wire(DataFrame(command_id=CMD, seq=seq, payload=TokenRun.of([token(1), token(2)])))
            )
        assert owner_plane.stats.overflows == 1
        with pytest.raises(StreamBroken):
            await stream.next()

    run(main())
