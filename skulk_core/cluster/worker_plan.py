"""The worker's pure half: which runners this node should start or stop.

``plan`` compares what State assigns to this node with the runners the supervisor
actually has, and returns the actions that close the gap. The supervisor performs
them; running ``plan`` again after they land returns nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum

import msgspec

from skulk_core.ids import NodeId, RunnerId
from skulk_core.state.shards import Instance, RunnerFailed, ShardMetadata
from skulk_core.state.state import State


class LocalRunnerPhase(StrEnum):
    STARTING = "starting"
    SERVING = "serving"
    STOPPING = "stopping"
    EXITED = "exited"


class StartRunner(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    runner_id: RunnerId
    instance: Instance
    shard: ShardMetadata


class StopRunner(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    runner_id: RunnerId


Action = StartRunner | StopRunner


def assigned_runners(
    state: State, node_id: NodeId
) -> dict[RunnerId, tuple[Instance, ShardMetadata]]:
    """Every runner State places on ``node_id``, with its instance and shard."""
    assigned: dict[RunnerId, tuple[Instance, ShardMetadata]] = {}
    for instance in state.instances.values():
        runner_id = instance.shard_assignments.node_to_runner.get(node_id)
        if runner_id is None:
            continue
        shard = instance.shard_assignments.runner_to_shard.get(runner_id)
        if shard is not None:
            assigned[runner_id] = (instance, shard)
    return assigned


def plan(state: State, node_id: NodeId, local: Mapping[RunnerId, LocalRunnerPhase]) -> list[Action]:
    """Start what is assigned and absent; stop what is present and no longer assigned.

    A runner that failed is not restarted here: its failure is recorded and the
    instance removed (or re-placed), which is what ends its assignment.
    """
    assigned = assigned_runners(state, node_id)
    actions: list[Action] = []
    for runner_id, (instance, shard) in sorted(assigned.items()):
        if runner_id in local:
            continue
        if isinstance(state.runners.get(runner_id), RunnerFailed):
            continue
        actions.append(StartRunner(runner_id=runner_id, instance=instance, shard=shard))
    for runner_id, phase in sorted(local.items()):
        if runner_id not in assigned and phase not in (
            LocalRunnerPhase.STOPPING,
            LocalRunnerPhase.EXITED,
        ):
            actions.append(StopRunner(runner_id=runner_id))
    return actions
