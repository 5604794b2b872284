"""The supervisor: the worker's face to the rest of the daemon.

It composes what the worker owns (this node's runners and their lifecycle,
:class:`~skulk_daemon.worker.runners.RunnerLifecycle`; the tasks they run,
:class:`~skulk_daemon.worker.tasks.RunnerTasks`; who watches generations,
:class:`~skulk_daemon.worker.observers.GenerationWatch`) and hands generation,
embedding and speech requests to the right runner: the local one, or the node that
serves the instance through the fabric.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Protocol

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, GenerationRequest
from skulk_core.cluster.prefixes import prompt_fingerprint
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId, TaskId
from skulk_core.models.cards import ModelTask
from skulk_core.state.shards import serving_node
from skulk_core.state.state import TaskStatus
from skulk_daemon.hub.download import Downloads
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer, PartSink, PreviewSink
from skulk_daemon.runner.protocol import (
    Embedded,
    MediaRendered,
    MediaTask,
    RenderImages,
    RunnerSpeechTask,
)
from skulk_daemon.runner.routing import ProgressSink
from skulk_daemon.store.staging import START_SPARES_SECONDS
from skulk_daemon.worker.flight import FlightRecorder
from skulk_daemon.worker.generation_feed import GenerationFeed, LocalGeneration, PumpedGeneration
from skulk_daemon.worker.launch import Launcher
from skulk_daemon.worker.observers import GenerationWatch, TraceOpener
from skulk_daemon.worker.runners import ManagedRunner, RunnerLifecycle
from skulk_daemon.worker.tasks import RunnerTasks, answer_status

log = logging.getLogger(__name__)

__all__ = ["ManagedRunner", "RemoteGenerate", "RunnerUnavailable", "Supervisor"]

# How long a request admitted to a still-loading instance waits for it to be ready.
READY_WAIT_SECONDS = 300.0


class RemoteGenerate(Protocol):
    """Generation on another node's runner (the fabric's remote tasks)."""

    def generate(
        self,
        node: NodeId,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
    ) -> AsyncIterator[Chunk]: ...

    def cancel(self, node: NodeId, command_id: CommandId) -> None: ...


class RunnerUnavailable(Exception):
    """The instance has no serving runner on this node."""


class Supervisor:
    def __init__(self, node: Node) -> None:
        self._node = node
        self._wakeup = asyncio.Event()
        self._remote: RemoteGenerate | None = None
        self._remote_tasks: dict[TaskId, Callable[[], None]] = {}
        self._launcher = Launcher(node)
        self.flight = FlightRecorder()
        self._runners = RunnerLifecycle(node, self._launcher, self.flight)
        self._tasks = RunnerTasks(node, self._runners)
        self._watch = GenerationWatch(lambda: node.state)

    @property
    def tracer(self) -> TraceOpener | None:
        """Records traced generations (``PUT /v1/tracing``); see diagnostics/tracing.py."""
        return self._watch.tracer

    @tracer.setter
    def tracer(self, tracer: TraceOpener | None) -> None:
        self._watch.tracer = tracer

    @property
    def generation_listeners(self) -> list[Callable[[ModelId, Chunk, str], None]]:
        """Each is called with every generation's last chunk (finish or error) and
        whether it was served ``"local"``ly or by a ``"remote"`` node (metrics,
        performance envelopes); a listener that raises is ignored."""
        return self._watch.listeners

    def attach_remote(self, remote: RemoteGenerate) -> None:
        """Serve instances whose runner is on another node through ``remote``."""
        self._remote = remote

    def attach_rpc_pool(self, gate_key: bytes) -> None:
        """Take part in llama.cpp RPC pools, admitting peers by ``gate_key`` (a secret
        derived from the cluster key)."""
        self._launcher.rpc_gate_key = gate_key

    def attach_downloads(self, downloads: Downloads) -> None:
        """Download a placed model's missing bytes to this node with ``downloads``
        when no store has them (see :mod:`skulk_daemon.worker.fetch`)."""
        self._launcher.fetch.downloads = downloads

    def _remote_host(self, instance_id: InstanceId) -> NodeId | None:
        """The node serving ``instance_id`` (the driver of a pool, rank 0 of a ring)
        when that is not this node."""
        instance = self._node.state.instances.get(instance_id)
        if instance is None:
            return None
        host = serving_node(instance)
        return None if host is None or host == self._node.node_id else host

    # -- reconciliation -------------------------------------------------------------

    def wake(self) -> None:
        self._wakeup.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._wakeup.set()
        stopping = asyncio.create_task(stop.wait())
        tidying = asyncio.create_task(self._tidy_at_start(), name="staging-tidy")
        try:
            while not stop.is_set():
                waking = asyncio.create_task(self._wakeup.wait())
                await asyncio.wait({waking, stopping}, return_when=asyncio.FIRST_COMPLETED)
                waking.cancel()
                if stop.is_set():
                    break
                self._wakeup.clear()
                self._runners.reconcile()
        finally:
            stopping.cancel()
            tidying.cancel()

    async def _tidy_at_start(self) -> None:
        """Once this node's place in State is known (so the instances placed here are
        too), tidy the staged copies a previous run left."""
        await self._node.registration.done()
        try:
            await self._launcher.staging.tidy(spare_recent_s=START_SPARES_SECONDS)
        except OSError as exc:
            log.warning("tidying the staged copies at start failed: %s", exc)

    async def shutdown(self) -> None:
        """Stop every runner (daemon shutdown)."""
        await self._runners.shutdown()

    # -- diagnostics ----------------------------------------------------------------

    def runners(self) -> list[ManagedRunner]:
        """This node's runners (a copy of the list; the runners themselves are live)."""
        return self._runners.runners()

    def runner_pids(self) -> dict[int, RunnerId]:
        return self._runners.runner_pids()

    def cancel_runner_task(self, runner_id: RunnerId, task_id: TaskId | None) -> TaskId | None:
        """Ask ``runner_id`` to cancel ``task_id`` (or its only task); the task asked,
        or None when the runner does not know it."""
        return self._tasks.cancel(runner_id, task_id)

    # -- serving --------------------------------------------------------------------

    async def generate(
        self,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
        *,
        origin: NodeId | None = None,
    ) -> AsyncGenerator[Chunk, None]:
        """Run ``request`` on this node's runner for the instance; ``command_id`` is the
        client-facing command the task serves (what ``/state`` shows on the task).
        ``origin`` is the API node that asked over the fabric (None: this one)."""
        task_id = TaskId(request.task_id)
        # Where this prompt went is what replica routing prefers for its next turn.
        self._node.routed_prompts.record(instance_id, prompt_fingerprint(request.prompt))
        host = self._remote_host(instance_id)
        if host is not None and self._remote is not None:
            remote = self._remote
            self._remote_tasks[task_id] = lambda: remote.cancel(host, command_id)
            trace = self._watch.trace(task_id, instance_id, origin is None, None, host)
            last: Chunk | None = None
            try:
                async for chunk in remote.generate(host, instance_id, request, command_id):
                    self._watch.ended(instance_id, chunk, "remote")
                    if trace is not None:
                        trace.chunk(chunk)
                    last = chunk
                    yield chunk
            finally:
                self._remote_tasks.pop(task_id, None)
                if trace is not None:
                    trace.finish(last)
            return
        runner = await self._serving_runner(instance_id, task_id)
        if isinstance(runner, ErrorChunk):
            self._watch.ended(instance_id, runner, "local")
            yield runner
            return
        feed = await self._open_local(
            runner, instance_id, request, command_id, origin=origin, keepalive_s=None
        )
        try:
            while not feed.finished:
                for chunk in await feed.take() or ():
                    yield chunk
        finally:
            await feed.aclose()

    async def open_generation(
        self,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
        *,
        keepalive_s: float | None = None,
    ) -> GenerationFeed:
        """:meth:`generate`, read a take at a time: all chunks that arrived since the
        last take, or ``None`` after ``keepalive_s`` without one. When the instance's
        runner already serves here, the chunks come straight from its pipe's read
        callback; otherwise (another node, a runner still loading) a task moves
        :meth:`generate`'s chunks. ``aclose()`` the feed when done."""
        runner = self._runners.runner_for(instance_id)
        remote = self._remote is not None and self._remote_host(instance_id) is not None
        if runner is None or not runner.serves_now or remote:
            chunks = self.generate(instance_id, request, command_id)
            return PumpedGeneration(chunks, TaskId(request.task_id), keepalive_s)
        self._node.routed_prompts.record(instance_id, prompt_fingerprint(request.prompt))
        return await self._open_local(
            runner, instance_id, request, command_id, origin=None, keepalive_s=keepalive_s
        )

    async def _open_local(
        self,
        runner: ManagedRunner,
        instance_id: InstanceId,
        request: GenerationRequest,
        command_id: CommandId,
        *,
        origin: NodeId | None,
        keepalive_s: float | None,
    ) -> LocalGeneration:
        """Start ``request`` on ``runner`` (serving, with a process), its task open in
        ``/state`` until the feed's terminal chunk is taken or the feed is closed."""
        assert runner.process is not None
        task_id = TaskId(request.task_id)
        lane = f"runner rank {runner.device_rank}"
        trace = self._watch.trace(task_id, instance_id, origin is None, lane, None)
        task = contextlib.ExitStack()
        outcome = task.enter_context(
            self._tasks.open(runner, task_id, command_id, ModelTask.TEXT_GENERATION)
        )
        try:
            generation = await runner.process.open_generation(request, keepalive_s)
        except BaseException:
            outcome.status = TaskStatus.CANCELLED
            task.close()
            if trace is not None:
                trace.finish(None)
            raise
        return LocalGeneration(
            generation, instance_id, watch=self._watch, trace=trace, task=task, outcome=outcome
        )

    async def embed(
        self,
        instance_id: InstanceId,
        task_id: TaskId,
        inputs: Sequence[str],
        command_id: CommandId,
    ) -> Embedded | ErrorChunk:
        """Embed ``inputs`` on this node's runner for the instance, as one task in
        ``/state`` (kind ``TextEmbedding``) serving the client's ``command_id``.
        Cancelling the caller cancels the task on the runner."""
        runner = await self._serving_runner(instance_id, task_id)
        if isinstance(runner, ErrorChunk):
            return runner
        assert runner.process is not None
        with self._tasks.open(runner, task_id, command_id, ModelTask.TEXT_EMBEDDING) as outcome:
            result = await runner.process.embed(task_id, inputs)
            outcome.status = answer_status(result)
            return result

    async def speech(
        self,
        instance_id: InstanceId,
        task: RunnerSpeechTask,
        command_id: CommandId,
        parts: PartSink = None,
    ) -> Answer:
        """Run a speech task on this node's runner for the instance, as one task in ``/state``
        (never its audio or text); ``parts`` gets a streamed task's parts. Cancellable."""
        runner = await self._serving_runner(instance_id, task.task_id)
        if isinstance(runner, ErrorChunk):
            return runner
        assert runner.process is not None
        with self._tasks.open(runner, task.task_id, command_id, task.KIND) as outcome:
            result = await runner.process.speech(task, parts)
            outcome.status = answer_status(result)
            return result

    async def media(
        self,
        instance_id: InstanceId,
        task: MediaTask,
        command_id: CommandId,
        progress: ProgressSink = None,
    ) -> MediaRendered | ErrorChunk:
        """Run a media job on this node's runner for the instance, as one task in
        ``/state`` (never its prompt or content); ``progress`` gets its reports.
        Cancellable."""
        runner = await self._serving_runner(instance_id, task.task_id)
        if isinstance(runner, ErrorChunk):
            return runner
        assert runner.process is not None
        with self._tasks.open(runner, task.task_id, command_id, task.KIND) as outcome:
            result = await runner.process.media(task, progress)
            outcome.status = answer_status(result)
            return result

    async def render(
        self,
        instance_id: InstanceId,
        task: RenderImages,
        command_id: CommandId,
        previews: PreviewSink = None,
    ) -> Answer:
        """Render images on this node's runner for the instance, as one task in
        ``/state`` (never its prompt or pictures); ``previews`` gets its previews."""
        runner = await self._serving_runner(instance_id, task.task_id)
        if isinstance(runner, ErrorChunk):
            return runner
        assert runner.process is not None
        with self._tasks.open(runner, task.task_id, command_id, task.KIND) as outcome:
            result = await runner.process.render(task, previews)
            outcome.status = answer_status(result)
            return result

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        remote = self._remote_tasks.get(task_id)
        if remote is not None:
            remote()
            return
        runner = self._runners.runner_for(instance_id)
        if runner is not None and runner.process is not None:
            with contextlib.suppress(Exception):
                runner.process.cancel(task_id)

    async def _serving_runner(
        self, instance_id: InstanceId, task_id: TaskId
    ) -> ManagedRunner | ErrorChunk:
        """The instance's local runner once it serves (with a process), else the
        ``instance_unavailable`` error that answers ``task_id``."""
        runner = self._runners.runner_for(instance_id)
        if runner is None:
            # The reconcile loop may not have seen the instance yet.
            self._runners.reconcile()
            runner = self._runners.runner_for(instance_id)
        if runner is None:
            return _unavailable(task_id, "the instance is not running")
        # NOTE: asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
        # cancellation that lands while the awaited future is already done.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(READY_WAIT_SECONDS):
                await asyncio.shield(runner.settled)
        if not runner.serves_now:
            return _unavailable(
                task_id, runner.failure or "the instance stopped before it was ready"
            )
        return runner


def _unavailable(task_id: TaskId, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code="instance_unavailable", message=message)
