"""Pure views of what diagnostics shows: a local runner, the placements in State, and
one member's entry in a cluster sweep."""

from __future__ import annotations

from typing import Any

from skulk_core.ids import NodeId
from skulk_core.state.shards import RunnerStatus, serving_node
from skulk_core.state.state import State
from skulk_core.version import SKULK_VERSION
from skulk_daemon.diagnostics import facts, fanout
from skulk_daemon.worker.runners import ManagedRunner


def runner_view(
    runner: ManagedRunner, status: RunnerStatus | None, seconds_in_phase: float
) -> dict[str, Any]:
    """One supervisor runner, with the status State holds for it."""
    return {
        "runnerId": runner.runner_id,
        "instanceId": runner.instance_id,
        "modelId": runner.model_id,
        "statusKind": None if status is None else type(status).__name__,
        "phase": runner.reported,
        "secondsInPhase": round(seconds_in_phase, 3),
        "phaseBudgetSeconds": facts.phase_budget(runner.reported),
        "supervisorPhase": runner.phase.value,
        "deviceRank": runner.device_rank,
        "worldSize": runner.world_size,
        "rpcDonor": runner.donor,
        "activeTasks": runner.active_tasks,
        "taskIds": sorted(runner.tasks),
        "pid": None if runner.process is None else runner.process.pid,
        "failure": runner.failure,
    }


def placements(state: State, master: NodeId | None) -> list[dict[str, Any]]:
    """Every instance in State: where it runs, who serves it, its runners' status."""
    found = []
    for instance_id, instance in sorted(state.instances.items()):
        assignments = instance.shard_assignments
        nodes = sorted(assignments.node_to_runner)
        found.append(
            {
                "instanceId": instance_id,
                "modelId": assignments.model_id,
                "kind": type(instance).__name__,
                "nodes": nodes,
                "servingNodeId": serving_node(instance),
                "masterNodeId": master,
                "masterInPlacement": master in nodes,
                "runners": [
                    {
                        "runnerId": runner_id,
                        "nodeId": node_id,
                        "deviceRank": assignments.runner_to_shard[runner_id].device_rank,
                        "statusKind": status_kind(state.runners.get(runner_id)),
                    }
                    for node_id, runner_id in sorted(assignments.node_to_runner.items())
                    if runner_id in assignments.runner_to_shard
                ],
            }
        )
    return found


def member_entry(node_id: NodeId, got: Any, telemetry_version: str | None) -> dict[str, Any]:
    """One member in a cluster sweep: its bundle (``got`` is this node's own, or a
    peer's answer), or why it is missing (``telemetry_version``: what its telemetry
    last said it runs)."""
    if isinstance(got, fanout.PeerAnswer):
        if got.ok and isinstance(got.body, dict):
            return {
                "nodeId": node_id,
                "ok": True,
                "url": got.url,
                "skulkVersion": got.body.get("skulkVersion"),
                "bundle": got.body,
            }
        return {
            "nodeId": node_id,
            "ok": False,
            "skulkVersion": telemetry_version,
            "error": got.error or error_text(got.status, got.body),
        }
    return {"nodeId": node_id, "ok": True, "skulkVersion": SKULK_VERSION, "bundle": got}


def status_kind(status: object) -> str | None:
    return None if status is None else type(status).__name__


def error_text(status: int | None, body: Any) -> str:
    message = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message")
    return f"HTTP {status}: {message or 'no message'}"
