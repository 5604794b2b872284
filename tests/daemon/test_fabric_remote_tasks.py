"""Remote generation over the fabric: the request and each chunk travel as typed
values, encoded once with their frame, and a stream that goes wrong ends the turn
with an error chunk and stops the serving node.

Both ends run the real :class:`RemoteTasks` and :class:`DataPlane`; the link is the
agent's protocol (:class:`FabricLink`), and every frame it carries goes through the
real fabric encoder and decoder, as between two nodes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from typing import Any

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    TokenChunk,
)
from skulk_core.cluster.fabric import (
    PLANE_OF,
    Body,
    CancelTask,
    DataFrame,
    RunTask,
    decode_body,
    encode,
)
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import DataPlane
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.remote_tasks import RemoteTasks
from tests.core.fabric_samples import generation_chunks, generation_request, header

OWNER = NodeId("12D3KooWowner")
SERVER = NodeId("12D3KooWserver")
CMD = CommandId("cmd-1")
INSTANCE = InstanceId("i1")


def run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


def over_the_wire(body: Body) -> Body:
    """What the receiving agent decodes from ``body``'s frames."""
    return decode_body(encode(header(plane=PLANE_OF[type(body)]), body))


class Link:
    """One node's side of the fabric: what it sent, by node."""

    def __init__(self, own: NodeId) -> None:
        self.sent: list[tuple[NodeId, Body]] = []
        self.data = DataPlane(own, self._send_data)
        self.counters = LinkCounters()

    def _send_data(self, node_id: NodeId, frame: DataFrame) -> bool:
        self.sent.append((node_id, over_the_wire(frame)))
        return True

    def send_control(self, node_id: NodeId, body: RunTask | CancelTask) -> bool:
        self.sent.append((node_id, over_the_wire(body)))
        return True

    def send_capability(self, node_id: NodeId, body: object) -> bool:
        raise AssertionError("no capability traffic here")

    def is_live(self, node_id: NodeId) -> bool:
        return True


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def collect(remote: RemoteTasks, request: GenerationRequest) -> list[EngineChunk]:
    return [chunk async for chunk in remote.generate(SERVER, INSTANCE, request, CMD)]


def test_the_owner_sends_the_typed_request_and_yields_the_chunks_as_sent() -> None:
    async def main() -> None:
        link = Link(OWNER)
        remote = RemoteTasks(link)
        request = generation_request()
        reading = asyncio.create_task(collect(remote, request))
        await settle()
        assert link.sent == [
            (SERVER, RunTask(command_id=CMD, instance_id=INSTANCE, request=request))
        ]
        chunks = generation_chunks()
        sent = [chunks[0], chunks[1], chunks[2]]  # two tokens, then the finish
        for seq, chunk in enumerate(sent):
            frame = DataFrame(command_id=CMD, seq=seq, payload=chunk, final=seq == 2)
            link.data.deliver(frame)
        got = await reading
        assert got == sent
        assert [type(c) for c in got] == [TokenChunk, TokenChunk, FinishChunk]
        # The turn ended with the server's own terminal: nothing to cancel.
        assert [body for _, body in link.sent if isinstance(body, CancelTask)] == []

    run(main())


def test_a_frame_that_is_not_a_chunk_breaks_the_turn_and_stops_the_server() -> None:
    async def main() -> None:
        link = Link(OWNER)
        remote = RemoteTasks(link)
        reading = asyncio.create_task(collect(remote, generation_request()))
        await settle()
        link.data.deliver(DataFrame(command_id=CMD, seq=0, payload=generation_chunks()[1]))
        link.data.deliver(DataFrame(command_id=CMD, seq=1, payload=b"\x00media"))
        got = await reading
        assert got[0] == generation_chunks()[1]
        assert isinstance(got[1], ErrorChunk) and got[1].code == "stream_broken"
        assert got[1].task_id == TaskId("t1") and len(got) == 2
        assert link.sent[-1] == (SERVER, CancelTask(command_id=CMD))

    run(main())


class Worker:
    """The serving node's supervisor as remote tasks use it: the chunks a runner
    would produce, and the cancels it was asked for."""

    def __init__(self, chunks: list[EngineChunk]) -> None:
        self.chunks = chunks
        self.requests: list[GenerationRequest] = []
        self.origins: list[NodeId | None] = []
        self.cancelled: list[TaskId] = []

    async def generate(
        self,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
        *,
        origin: NodeId | None = None,
    ) -> AsyncIterator[EngineChunk]:
        self.origins.append(origin)
        self.requests.append(request)
        for chunk in self.chunks:
            yield chunk

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        self.cancelled.append(task_id)


def test_the_server_runs_the_typed_request_and_numbers_typed_chunks() -> None:
    async def main() -> None:
        link = Link(SERVER)
        remote = RemoteTasks(link)
        chunks = generation_chunks()[:3]
        worker = Worker(chunks)
        remote.attach(worker)  # type: ignore[arg-type]
        request = generation_request()
        task = over_the_wire(RunTask(command_id=CMD, instance_id=INSTANCE, request=request))
        assert isinstance(task, RunTask)
        remote.serve(OWNER, task)
        await settle()
        assert worker.requests == [request]
        assert worker.origins == [OWNER]  # the API node that asked, for tracing
        assert link.sent == [
            (OWNER, DataFrame(command_id=CMD, seq=seq, payload=chunk, final=seq == 2))
            for seq, chunk in enumerate(chunks)
        ]
        assert worker.cancelled == []
        await remote.close()

    run(main())
