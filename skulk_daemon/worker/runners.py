"""This node's runners: their table, and each one's life from start to exit.

:class:`RunnerLifecycle` runs :func:`skulk_core.cluster.worker_plan.plan` against the
runners it holds and performs the actions: it starts a runner subprocess for each
shard assigned here, stops those no longer assigned, and reports every phase through
the event log and the flight recorder. What the runners serve is the supervisor's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Collection, Coroutine, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import assert_never

from skulk_core.cluster.worker_plan import (
    LocalRunnerPhase,
    StartRunner,
    StopRunner,
    assigned_runners,
    plan,
)
from skulk_core.ids import InstanceId, ModelId, NodeId, RunnerId, TaskId, new_command_id
from skulk_core.placement.rpc_pool import RPC_DONOR_LOST
from skulk_core.state.commands import ReportInstanceFailure, ReportRunnerStatus
from skulk_core.state.shards import (
    Instance,
    RpcDonorShardMetadata,
    RunnerFailed,
    RunnerLoaded,
    RunnerLoading,
    RunnerReady,
    RunnerStatus,
    RunnerWarmingUp,
    ShardMetadata,
)
from skulk_daemon.node.node import Node
from skulk_daemon.runner.client import RunnerProcess
from skulk_daemon.worker.flight import FlightRecorder
from skulk_daemon.worker.launch import Launcher, LaunchRefused

log = logging.getLogger(__name__)

STOP_TIMEOUT_SECONDS = 10.0

_PHASE_STATUS: dict[str, RunnerStatus] = {
    "loading": RunnerLoading(),
    "loaded": RunnerLoaded(),
    "warming_up": RunnerWarmingUp(),
    "ready": RunnerReady(),
}


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

    @property
    def serves_now(self) -> bool:
        """Settled as serving, with a process: a generation can start on it at once."""
        settled = self.settled
        return (
            self.process is not None
            and settled.done()
            and not settled.cancelled()
            and settled.result()
        )


def forgotten(
    phases: Mapping[RunnerId, LocalRunnerPhase], assigned: Collection[RunnerId]
) -> list[RunnerId]:
    """The runners to drop from the table: exited and no longer assigned. A failed
    runner is kept until State stops assigning it, so the plan cannot restart it
    before its failure is recorded."""
    return [
        runner_id
        for runner_id, phase in phases.items()
        if phase is LocalRunnerPhase.EXITED and runner_id not in assigned
    ]


def exit_failure(code: str, message: str, *, donor: bool, node_id: NodeId) -> tuple[str, str]:
    """The failure code and message an unexpected runner exit is reported with: a
    donor that ends without saying why lost its share of an RPC pool."""
    if donor and not code:
        return (
            f"{RPC_DONOR_LOST}:{node_id}",
            f"the RPC donor on node {node_id} stopped serving its share: {message}",
        )
    return code or "runner_crashed", message


class RunnerLifecycle:
    """Starts, watches and stops this node's runners as State assigns them."""

    def __init__(self, node: Node, launcher: Launcher, flight: FlightRecorder) -> None:
        self._node = node
        self._launcher = launcher
        self._flight = flight
        self._runners: dict[RunnerId, ManagedRunner] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    # -- the table ------------------------------------------------------------------

    def runners(self) -> list[ManagedRunner]:
        """This node's runners (a copy of the list; the runners themselves are live)."""
        return list(self._runners.values())

    def get(self, runner_id: RunnerId) -> ManagedRunner | None:
        return self._runners.get(runner_id)

    def runner_pids(self) -> dict[int, RunnerId]:
        return {
            r.process.pid: r.runner_id
            for r in self._runners.values()
            if r.process is not None and r.process.pid is not None
        }

    def runner_for(self, instance_id: InstanceId) -> ManagedRunner | None:
        """The instance's runner that serves or is starting to."""
        for runner in self._runners.values():
            if runner.instance_id == instance_id and runner.phase in (
                LocalRunnerPhase.STARTING,
                LocalRunnerPhase.SERVING,
            ):
                return runner
        return None

    # -- reconciliation -------------------------------------------------------------

    def reconcile(self) -> None:
        assigned = assigned_runners(self._node.state, self._node.node_id)
        phases = {rid: r.phase for rid, r in self._runners.items()}
        for runner_id in forgotten(phases, assigned):
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
                    self.mark(runner, "start", "starting", instance.instance_id)
                    self._spawn_task(self._start(runner, instance, shard))
                case StopRunner(runner_id=runner_id):
                    self._runners[runner_id].phase = LocalRunnerPhase.STOPPING
                    self.mark(self._runners[runner_id], "stop", "stopping")
                    self._spawn_task(self._deactivate(runner_id))
                case _:
                    assert_never(action)

    def _spawn_task(self, coro: Coroutine[object, object, None]) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- what a runner went through -------------------------------------------------

    def mark(
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
        self._flight.record(runner.runner_id, event, reported, detail, task_id)

    def report(self, runner_id: RunnerId, status: RunnerStatus) -> None:
        self._node.report(
            ReportRunnerStatus(command_id=new_command_id(), runner_id=runner_id, status=status)
        )

    # -- start and stop -------------------------------------------------------------

    async def _start(self, runner: ManagedRunner, instance: Instance, shard: ShardMetadata) -> None:
        self.report(runner.runner_id, RunnerLoading())
        self.mark(runner, "phase", "loading")
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
        self.mark(runner, "phase", phase)
        if status is not None and runner.phase is not LocalRunnerPhase.STOPPING:
            self.report(runner.runner_id, status)

    def _on_exit(self, runner: ManagedRunner, message: str, code: str = "") -> None:
        if runner.phase in (LocalRunnerPhase.STOPPING, LocalRunnerPhase.EXITED):
            return
        code, message = exit_failure(code, message, donor=runner.donor, node_id=self._node.node_id)
        self._fail(runner, code, message)

    def _fail(self, runner: ManagedRunner, code: str, message: str) -> None:
        log.error("runner %s failed: %s", runner.runner_id, message)
        runner.failure = message
        self.mark(runner, "failed", "failed", f"{code}: {message}")
        runner.phase = LocalRunnerPhase.EXITED
        if not runner.settled.done():
            runner.settled.set_result(False)
        self.report(runner.runner_id, RunnerFailed(error_message=message))
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

    async def _deactivate(self, runner_id: RunnerId) -> None:
        """Its instance left this node: stop the runner, then tidy the staged copies
        (the model may now be an idle copy beyond the grace budget)."""
        await self._stop(runner_id)
        try:
            await self._launcher.staging.tidy()
        except OSError as exc:
            log.warning("tidying the staged copies failed: %s", exc)

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
        self.mark(runner, "exited", "exited")
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
