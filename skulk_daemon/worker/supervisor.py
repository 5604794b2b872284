"""The supervisor: the effectful half of the worker.

It runs :func:`skulk_core.cluster.worker_plan.plan` whenever State changes and performs the
actions: starting runner subprocesses for shards assigned here, stopping those no
longer assigned, and reporting every phase through the event log. It also hands
generation and embedding requests to the right local runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, assert_never

from skulk_core.chat.generation import EngineChunk as Chunk
from skulk_core.chat.generation import ErrorChunk, FinishChunk, GenerationRequest
from skulk_core.cluster.prefixes import prompt_fingerprint
from skulk_core.cluster.worker_plan import (
    LocalRunnerPhase,
    StartRunner,
    StopRunner,
    assigned_runners,
    plan,
)
from skulk_core.ids import (
    CommandId,
    InstanceId,
    ModelId,
    NodeId,
    RunnerId,
    TaskId,
    new_command_id,
)
from skulk_core.models.cards import ModelTask
from skulk_core.placement.rpc_pool import RPC_DONOR_LOST
from skulk_core.state.commands import (
    FinishTask,
    ReportInstanceFailure,
    ReportRunnerStatus,
    StartTask,
)
from skulk_core.state.shards import (
    Instance,
    RpcDonorShardMetadata,
    RunnerFailed,
    RunnerLoaded,
    RunnerLoading,
    RunnerReady,
    RunnerRunning,
    RunnerStatus,
    RunnerWarmingUp,
    ShardMetadata,
    serving_node,
)
from skulk_core.state.state import Task, TaskStatus
from skulk_daemon.engines.base import DEFAULT_SLOTS
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import Answer, PartSink, RunnerProcess
from skulk_daemon.runner.protocol import ERROR_CANCELLED, Embedded, RunnerSpeechTask
from skulk_daemon.worker.flight import FlightRecorder
from skulk_daemon.worker.launch import Launcher, LaunchRefused
from skulk_daemon.worker.observers import GenerationObserver, TraceOpener

log = logging.getLogger(__name__)

# How long a request admitted to a still-loading instance waits for it to be ready.
READY_WAIT_SECONDS = 300.0
STOP_TIMEOUT_SECONDS = 10.0

_PHASE_STATUS: dict[str, RunnerStatus] = {
    "loading": RunnerLoading(),
    "loaded": RunnerLoaded(),
    "warming_up": RunnerWarmingUp(),
    "ready": RunnerReady(),
}


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


@dataclass
class ManagedRunner:
    runner_id: RunnerId
    instance_id: InstanceId
    model_id: ModelId
    phase: LocalRunnerPhase = LocalRunnerPhase.STARTING
    process: RunnerProcess | None = None
    active_tasks: int = 0
    failure: str | None = None
    # Lends memory to an RPC pool rather than serving the model itself.
    donor: bool = False
    device_rank: int = 0
    world_size: int = 1
    # What the runner last reported (loading ... ready, running), and since when
    # (monotonic): what diagnostics show and the doctor times.
    reported: str = "starting"
    reported_since: float = field(default_factory=time.monotonic)
    tasks: set[TaskId] = field(default_factory=set)
    # Resolved once: True when the runner serves, False when it failed to.
    settled: asyncio.Future[bool] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Supervisor:
    def __init__(self, node: Node, *, slots: int = DEFAULT_SLOTS) -> None:
        self._node = node
        self._runners: dict[RunnerId, ManagedRunner] = {}
        self._wakeup = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._remote: RemoteGenerate | None = None
        self._remote_tasks: dict[TaskId, Callable[[], None]] = {}
        self._launcher = Launcher(node, slots)
        self.flight = FlightRecorder()
        self.tracer: TraceOpener | None = None
        """Records traced generations (``PUT /v1/tracing``); see diagnostics/tracing.py."""
        self.generation_listeners: list[Callable[[ModelId, Chunk, str], None]] = []
        """Each is called with every generation's last chunk (finish or error) and
        whether it was served ``"local"``ly or by a ``"remote"`` node (metrics,
        performance envelopes); a listener that raises is ignored."""

    def attach_remote(self, remote: RemoteGenerate) -> None:
        """Serve instances whose runner is on another node through ``remote``."""
        self._remote = remote

    def attach_rpc_pool(self, gate_key: bytes) -> None:
        """Take part in llama.cpp RPC pools, admitting peers by ``gate_key`` (a secret
        derived from the cluster key)."""
        self._launcher.rpc_gate_key = gate_key

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
        try:
            while not stop.is_set():
                waking = asyncio.create_task(self._wakeup.wait())
                await asyncio.wait({waking, stopping}, return_when=asyncio.FIRST_COMPLETED)
                waking.cancel()
                if stop.is_set():
                    break
                self._wakeup.clear()
                self._reconcile()
        finally:
            stopping.cancel()

    def _reconcile(self) -> None:
        assigned = assigned_runners(self._node.state, self._node.node_id)
        for runner_id, runner in list(self._runners.items()):
            # A failed runner is kept until State stops assigning it, so the plan
            # cannot restart it before its failure is recorded.
            if runner.phase is LocalRunnerPhase.EXITED and runner_id not in assigned:
                del self._runners[runner_id]
        local = {rid: r.phase for rid, r in self._runners.items()}
        for action in plan(self._node.state, self._node.node_id, local):
            match action:
                case StartRunner(runner_id=runner_id, instance=instance, shard=shard):
                    runner = ManagedRunner(
                        runner_id=runner_id,
                        instance_id=instance.instance_id,
                        model_id=instance.shard_assignments.model_id,
                        donor=isinstance(shard, RpcDonorShardMetadata),
                        device_rank=shard.device_rank,
                        world_size=shard.world_size,
                    )
                    self._runners[runner_id] = runner
                    self._mark(runner, "start", "starting", instance.instance_id)
                    self._spawn_task(self._start(runner, instance, shard))
                case StopRunner(runner_id=runner_id):
                    self._runners[runner_id].phase = LocalRunnerPhase.STOPPING
                    self._mark(self._runners[runner_id], "stop", "stopping")
                    self._spawn_task(self._stop(runner_id))
                case _:
                    assert_never(action)

    def _spawn_task(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- runner lifecycle -----------------------------------------------------------

    def _mark(
        self,
        runner: ManagedRunner,
        event: str,
        reported: str,
        detail: str = "",
        task_id: TaskId | None = None,
    ) -> None:
        """Record ``event`` in the flight recorder; ``reported`` is the runner's phase
        from now on (its clock restarts only when the phase changes)."""
        if reported != runner.reported:
            runner.reported = reported
            runner.reported_since = time.monotonic()
        self.flight.record(runner.runner_id, event, reported, detail, task_id)

    def _report(self, runner_id: RunnerId, status: RunnerStatus) -> None:
        self._node.report(
            ReportRunnerStatus(command_id=new_command_id(), runner_id=runner_id, status=status)
        )

    async def _start(self, runner: ManagedRunner, instance: Instance, shard: ShardMetadata) -> None:
        self._report(runner.runner_id, RunnerLoading())
        self._mark(runner, "phase", "loading")
        try:
            load = await self._launcher.load_for(
                instance, shard, lambda: runner.phase is LocalRunnerPhase.STOPPING
            )
        except LaunchRefused as exc:
            self._fail(runner, exc.code, exc.message)
            return
        if load is None:  # stopped while waiting for its donors
            self._runners.pop(runner.runner_id, None)
            return
        try:
            process = await RunnerProcess.start(
                load,
                on_phase=lambda phase: self._on_phase(runner, phase),
                on_exit=lambda ended: self._on_exit(runner, ended.message, ended.code),
            )
        except Exception as exc:
            if runner.phase is LocalRunnerPhase.STOPPING:
                self._runners.pop(runner.runner_id, None)
                return
            code = getattr(exc, "code", "") or "runner_load_failed"
            what = Path(load.model_path).name or "its RPC server"
            self._fail(runner, code, f"runner failed to load {what}: {exc}")
            return
        runner.process = process
        if runner.phase is LocalRunnerPhase.STOPPING:
            # Deleted while loading: _stop found no process to stop, so stop it here.
            await self._shut_down(runner)
            return
        runner.phase = LocalRunnerPhase.SERVING
        if not runner.settled.done():
            runner.settled.set_result(True)

    def _on_phase(self, runner: ManagedRunner, phase: str) -> None:
        status = _PHASE_STATUS.get(phase)
        self._mark(runner, "phase", phase)
        if status is not None and runner.phase is not LocalRunnerPhase.STOPPING:
            self._report(runner.runner_id, status)

    def _on_exit(self, runner: ManagedRunner, message: str, code: str = "") -> None:
        if runner.phase in (LocalRunnerPhase.STOPPING, LocalRunnerPhase.EXITED):
            return
        if runner.donor and not code:
            node_id = self._node.node_id
            code = f"{RPC_DONOR_LOST}:{node_id}"
            message = f"the RPC donor on node {node_id} stopped serving its share: {message}"
        self._fail(runner, code or "runner_crashed", message)

    def _fail(self, runner: ManagedRunner, code: str, message: str) -> None:
        log.error("runner %s failed: %s", runner.runner_id, message)
        runner.failure = message
        self._mark(runner, "failed", "failed", f"{code}: {message}")
        runner.phase = LocalRunnerPhase.EXITED
        if not runner.settled.done():
            runner.settled.set_result(False)
        self._report(runner.runner_id, RunnerFailed(error_message=message))
        self._node.report(
            ReportInstanceFailure(
                command_id=new_command_id(),
                instance_id=runner.instance_id,
                error_code=code,
                error_message=message,
                node_id=self._node.node_id,
                observed_at=datetime.now(UTC),
            )
        )

    async def _stop(self, runner_id: RunnerId) -> None:
        runner = self._runners[runner_id]
        runner.phase = LocalRunnerPhase.STOPPING
        if not runner.settled.done():
            runner.settled.set_result(False)
        if runner.process is None and runner.failure is None:
            # Still starting: _start sees STOPPING once the process exists and stops it.
            return
        await self._shut_down(runner)

    async def _shut_down(self, runner: ManagedRunner) -> None:
        if runner.process is not None:
            await runner.process.shutdown(STOP_TIMEOUT_SECONDS)
        runner.phase = LocalRunnerPhase.EXITED
        self._mark(runner, "exited", "exited")
        self._runners.pop(runner.runner_id, None)

    async def shutdown(self) -> None:
        """Stop every runner (daemon shutdown)."""
        for runner in self._runners.values():
            runner.phase = LocalRunnerPhase.STOPPING
        await asyncio.gather(
            *(self._stop(rid) for rid in list(self._runners)), return_exceptions=True
        )
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        # NOTE: awaited, not just cancelled: a runner still loading is killed and
        # reaped by its cancelled start, which needs the loop to run; a shutdown that
        # returned first would leave that process (and its pipes) to outlive the loop.
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- diagnostics ----------------------------------------------------------------

    def runners(self) -> list[ManagedRunner]:
        """This node's runners (a copy of the list; the runners themselves are live)."""
        return list(self._runners.values())

    def runner_pids(self) -> dict[int, RunnerId]:
        return {
            r.process.pid: r.runner_id
            for r in self._runners.values()
            if r.process is not None and r.process.pid is not None
        }

    def cancel_runner_task(self, runner_id: RunnerId, task_id: TaskId | None) -> TaskId | None:
        """Ask ``runner_id`` to cancel ``task_id`` (or its only task); the task asked,
        or None when the runner does not know it."""
        runner = self._runners.get(runner_id)
        if runner is None:
            return None
        if task_id is None:
            if len(runner.tasks) != 1:
                return None
            task_id = next(iter(runner.tasks))
        if task_id not in runner.tasks or runner.process is None:
            return None
        self._mark(runner, "cancel_requested", runner.reported, "diagnostics", task_id)
        with contextlib.suppress(Exception):
            runner.process.cancel(task_id)
        return task_id

    # -- serving --------------------------------------------------------------------

    def _runner_for(self, instance_id: InstanceId) -> ManagedRunner | None:
        for runner in self._runners.values():
            if runner.instance_id == instance_id and runner.phase in (
                LocalRunnerPhase.STARTING,
                LocalRunnerPhase.SERVING,
            ):
                return runner
        return None

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
            trace = self._trace(task_id, instance_id, origin is None, None, host)
            last: Chunk | None = None
            try:
                async for chunk in remote.generate(host, instance_id, request, command_id):
                    self._ended(instance_id, chunk, "remote")
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
            self._ended(instance_id, runner, "local")
            yield runner
            return
        assert runner.process is not None
        lane = f"runner rank {runner.device_rank}"
        trace = self._trace(task_id, instance_id, origin is None, lane, None)
        last = None
        try:
            with self._task(runner, task_id, command_id, ModelTask.TEXT_GENERATION) as outcome:
                async for chunk in runner.process.generate(request):
                    self._ended(instance_id, chunk, "local")
                    if trace is not None:
                        trace.chunk(chunk)
                    last = chunk
                    if isinstance(chunk, FinishChunk):
                        outcome.status = (
                            TaskStatus.CANCELLED
                            if chunk.finish_reason == "cancelled"
                            else TaskStatus.COMPLETE
                        )
                    yield chunk
        finally:
            if trace is not None:
                trace.finish(last)

    def _trace(
        self,
        task_id: TaskId,
        instance_id: InstanceId,
        api: bool,
        lane: str | None,
        host: NodeId | None,
    ) -> GenerationObserver | None:
        """A recorder for this generation when tracing is on (cluster-wide, in State)."""
        if self.tracer is None or not self._node.state.tracing_enabled:
            return None
        instance = self._node.state.instances.get(instance_id)
        model = instance.shard_assignments.model_id if instance is not None else ModelId("")
        return self.tracer.open(task_id, model, api=api, serving_lane=lane, host=host)

    def _ended(self, instance_id: InstanceId, chunk: Chunk, served: str) -> None:
        if not self.generation_listeners or not isinstance(chunk, FinishChunk | ErrorChunk):
            return
        instance = self._node.state.instances.get(instance_id)
        model = instance.shard_assignments.model_id if instance is not None else ModelId("")
        for listener in self.generation_listeners:
            with contextlib.suppress(Exception):  # observers never break a generation
                listener(model, chunk, served)

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
        with self._task(runner, task_id, command_id, ModelTask.TEXT_EMBEDDING) as outcome:
            result = await runner.process.embed(task_id, inputs)
            if isinstance(result, Embedded):
                outcome.status = TaskStatus.COMPLETE
            elif result.code == ERROR_CANCELLED:
                outcome.status = TaskStatus.CANCELLED
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
        with self._task(runner, task.task_id, command_id, task.KIND) as outcome:
            result = await runner.process.speech(task, parts)
            if not isinstance(result, ErrorChunk):
                outcome.status = TaskStatus.COMPLETE
            elif result.code == ERROR_CANCELLED:
                outcome.status = TaskStatus.CANCELLED
            return result

    def cancel(self, instance_id: InstanceId, task_id: TaskId) -> None:
        remote = self._remote_tasks.get(task_id)
        if remote is not None:
            remote()
            return
        runner = self._runner_for(instance_id)
        if runner is not None and runner.process is not None:
            with contextlib.suppress(Exception):
                runner.process.cancel(task_id)

    async def _serving_runner(
        self, instance_id: InstanceId, task_id: TaskId
    ) -> ManagedRunner | ErrorChunk:
        """The instance's local runner once it serves (with a process), else the
        ``instance_unavailable`` error that answers ``task_id``."""
        runner = self._runner_for(instance_id)
        if runner is None:
            # The reconcile loop may not have seen the instance yet.
            self._reconcile()
            runner = self._runner_for(instance_id)
        if runner is None:
            return _unavailable(task_id, "the instance is not running")
        # NOTE: asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a
        # cancellation that lands while the awaited future is already done.
        try:
            async with asyncio.timeout(READY_WAIT_SECONDS):
                serving = await asyncio.shield(runner.settled)
        except TimeoutError:
            serving = False
        if not serving or runner.process is None:
            return _unavailable(
                task_id, runner.failure or "the instance stopped before it was ready"
            )
        return runner

    @contextlib.contextmanager
    def _task(
        self, runner: ManagedRunner, task_id: TaskId, command_id: CommandId, kind: ModelTask
    ) -> Iterator[_Outcome]:
        """One task on ``runner``, as ``/state`` shows it: started now, finished with
        the status the body sets (failed unless it says otherwise; cancelled when the
        caller is cancelled or stops reading), the runner running while it has any."""
        self._node.report(
            StartTask(
                command_id=new_command_id(),
                task=Task(
                    task_id=task_id,
                    command_id=command_id,
                    instance_id=runner.instance_id,
                    kind=kind.value,
                    task_status=TaskStatus.RUNNING,
                ),
            )
        )
        runner.active_tasks += 1
        runner.tasks.add(task_id)
        self._mark(runner, "task_started", "running", kind.value, task_id)
        if runner.active_tasks == 1:
            self._report(runner.runner_id, RunnerRunning(active_tasks=1))
        outcome = _Outcome()
        try:
            yield outcome
        except (GeneratorExit, asyncio.CancelledError):
            # NOTE: GeneratorExit reaches here when a generation's reader closes it
            # early (a client gone): the task was cancelled, not failed.
            outcome.status = TaskStatus.CANCELLED
            raise
        finally:
            runner.active_tasks -= 1
            runner.tasks.discard(task_id)
            idle = runner.active_tasks == 0 and runner.phase is LocalRunnerPhase.SERVING
            self._mark(
                runner,
                "task_finished",
                "ready" if idle else runner.reported,
                outcome.status.value,
                task_id,
            )
            if idle:
                self._report(runner.runner_id, RunnerReady())
            self._node.report(
                FinishTask(command_id=new_command_id(), task_id=task_id, task_status=outcome.status)
            )


@dataclass(slots=True)
class _Outcome:
    """How a task ended, as its body found out."""

    status: TaskStatus = TaskStatus.FAILED


def _unavailable(task_id: TaskId, message: str) -> ErrorChunk:
    return ErrorChunk(task_id=task_id, code="instance_unavailable", message=message)
