"""Pure views of what diagnostics shows: a local runner, the placements in State, and
a member's answer to a sweep decoded into its wire type (or why it cannot be)."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from skulk_core.diagnostics.bundle import PlacementRunner, PlacementView, RunnerView
from skulk_core.ids import NodeId
from skulk_core.state.shards import RunnerStatus, serving_node
from skulk_core.state.state import State
from skulk_daemon.diagnostics import facts
from skulk_daemon.node.fanout import PeerAnswer
from skulk_daemon.worker.runners import ManagedRunner

T = TypeVar("T")


def runner_view(
    runner: ManagedRunner, status: RunnerStatus | None, seconds_in_phase: float
) -> RunnerView:
    """One supervisor runner, with the status State holds for it."""
    return RunnerView(
        runner_id=runner.runner_id,
        instance_id=runner.instance_id,
        model_id=runner.model_id,
        status_kind=status_kind(status),
        phase=runner.reported,
        seconds_in_phase=round(seconds_in_phase, 3),
        phase_budget_seconds=facts.phase_budget(runner.reported),
        supervisor_phase=runner.phase.value,
        device_rank=runner.device_rank,
        world_size=runner.world_size,
        rpc_donor=runner.donor,
        active_tasks=runner.active_tasks,
        task_ids=sorted(runner.tasks),
        pid=None if runner.process is None else runner.process.pid,
        failure=runner.failure,
    )


def placements(state: State, master: NodeId | None) -> list[PlacementView]:
    """Every instance in State: where it runs, who serves it, its runners' status."""
    found = []
    for instance_id, instance in sorted(state.instances.items()):
        assignments = instance.shard_assignments
        nodes = sorted(assignments.node_to_runner)
        found.append(
            PlacementView(
                instance_id=instance_id,
                model_id=assignments.model_id,
                kind=type(instance).__name__,
                nodes=list(nodes),
                serving_node_id=serving_node(instance),
                master_node_id=master,
                master_in_placement=master in nodes,
                runners=[
                    PlacementRunner(
                        runner_id=runner_id,
                        node_id=node_id,
                        device_rank=assignments.runner_to_shard[runner_id].device_rank,
                        status_kind=status_kind(state.runners.get(runner_id)),
                    )
                    for node_id, runner_id in sorted(assignments.node_to_runner.items())
                    if runner_id in assignments.runner_to_shard
                ],
            )
        )
    return found


def decoded(answer: PeerAnswer, into: type[T]) -> T | str:
    """A member's 200 answer decoded ``into`` the wire type, or why there is none: its
    error, its refusal, or what is malformed in it."""
    if not answer.ok or not isinstance(answer.body, dict):
        return answer.error or error_text(answer.status, answer.body)
    try:
        return msgspec.convert(answer.body, into)
    except msgspec.ValidationError as exc:
        return f"a malformed answer: {exc}"


def status_kind(status: object) -> str | None:
    return None if status is None else type(status).__name__


def error_text(status: int | None, body: object) -> str:
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    return f"HTTP {status}: {message or 'no message'}"
