"""Generations whose runner lives on another node.

The API node that accepted a request owns its command. When the instance's runner
is elsewhere, the owner sends :class:`RunTask` to that node and reads the engine's
chunks back from the command's data stream, in order; the serving node runs the
generation through its own supervisor exactly as a local request would (task
bookkeeping included) and numbers each chunk; tokens that queue up while it is
busy travel merged, as one :class:`TokenRun` frame, and the owner yields them as
the same chunks. The request and the chunks travel as typed fabric values,
encoded once with the frame that carries them. When the owner stops reading
(the client went away, ``/v1/cancel``), it sends :class:`CancelTask`. A serving
node that goes silent mid-stream, or a stream that loses a frame, ends the turn
with an error chunk rather than a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from skulk_core.chat.generation import (
    EngineChunk,
    ErrorChunk,
    FinishChunk,
    GenerationRequest,
    TokenChunk,
)
from skulk_core.cluster.fabric import CancelTask, RunTask, TokenRun
from skulk_core.ids import CommandId, InstanceId, NodeId, TaskId
from skulk_daemon.fabric.data_plane import ChunkSender
from skulk_daemon.fabric.relay_frames import relay_error as _error
from skulk_daemon.fabric.remote_relay import FrameLost, cancel_all, next_frame

if TYPE_CHECKING:
    from skulk_daemon.fabric.link import FabricLink
    from skulk_daemon.worker.supervisor import Supervisor

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Serving:
    task: asyncio.Task[None]
    instance_id: InstanceId
    task_id: TaskId


class RemoteTasks:
    """Both ends of remote generation for one node."""

    def __init__(self, agent: FabricLink) -> None:
        self._agent = agent
        self._worker: Supervisor | None = None
        self._serving: dict[CommandId, _Serving] = {}

    def attach(self, worker: Supervisor) -> None:
        self._worker = worker

    # -- the owner's end ---------------------------------------------------------------

    async def generate(
        self,
        node: NodeId,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
    ) -> AsyncIterator[EngineChunk]:
        """The generation's chunks, served by ``node``; always ends with one terminal
        chunk (an error chunk when the node or the stream fails)."""
        task_id = TaskId(request.task_id)
        agent = self._agent
        stream = agent.data.open(command_id, sender=node)
        ended = False
        try:
            sent = agent.send_control(
                node,
                RunTask(command_id=command_id, instance_id=instance_id, request=request),
            )
            if not sent:
                ended = True
                yield _error(task_id, "instance_unavailable", f"node {node} cannot be reached")
                return
            since: float | None = time.monotonic()
            while True:
                try:
                    payload = await next_frame(agent, node, stream, since=since, what="tokens")
                except FrameLost as lost:
                    ended = True
                    yield _error(task_id, lost.code, lost.message)
                    return
                since = None
                match payload:
                    case TokenChunk():
                        yield payload
                    case TokenRun():
                        for chunk in payload.chunks():
                            yield chunk
                    case FinishChunk() | ErrorChunk():
                        ended = True
                        yield payload
                        return
                    case None:
                        ended = True
                        yield _error(task_id, "incomplete_generation", "the stream ended early")
                        return
                    case bytes():
                        # Not a generation's chunk: the stream cannot be trusted,
                        # and (not ``ended``) the serving node is told to stop.
                        yield _error(
                            task_id, "stream_broken", f"node {node} sent a non-chunk frame"
                        )
                        return
        finally:
            stream.close()
            if not ended:
                # The consumer stopped early (or the stream went wrong): the
                # serving node must stop too.
                agent.send_control(node, CancelTask(command_id=command_id))

    def cancel(self, node: NodeId, command_id: CommandId) -> None:
        self._agent.send_control(node, CancelTask(command_id=command_id))

    # -- the serving end ---------------------------------------------------------------

    def serve(self, owner: NodeId, message: RunTask) -> None:
        worker = self._worker
        request = message.request
        command_id = message.command_id
        if worker is None or command_id in self._serving:
            return
        task = asyncio.create_task(
            self._run(worker, owner, message.instance_id, request, command_id)
        )
        self._serving[command_id] = _Serving(task, message.instance_id, TaskId(request.task_id))
        task.add_done_callback(lambda _: self._serving.pop(command_id, None))

    async def _run(
        self,
        worker: Supervisor,
        owner: NodeId,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
    ) -> None:
        sender = ChunkSender(self._agent.data, owner, command_id)
        try:
            async with contextlib.aclosing(
                worker.generate(instance_id, request, command_id, origin=owner)
            ) as chunks:
                async for chunk in chunks:
                    if not sender.send(chunk):
                        # The owner is unreachable or not reading: nobody will see
                        # the rest, so stop the runner's work now.
                        log.warning(
                            "owner %s of %s stopped receiving; cancelling", owner, command_id
                        )
                        worker.cancel(instance_id, TaskId(request.task_id))
                        return
        except asyncio.CancelledError:
            worker.cancel(instance_id, TaskId(request.task_id))
            raise
        finally:
            sender.close()

    def stop(self, command_id: CommandId) -> None:
        """Cancel the generation in the runner. The serving loop keeps forwarding
        until the runner's own terminal chunk (``cancelled``), so an owner still
        listening (``/v1/cancel``) sees the turn end the way a local one does."""
        serving = self._serving.get(command_id)
        if serving is not None and self._worker is not None:
            self._worker.cancel(serving.instance_id, serving.task_id)

    async def close(self) -> None:
        await cancel_all([serving.task for serving in self._serving.values()])
