"""The master's pure half: what events a command produces against the current State.

The master agent (daemon) orders commands one at a time, calls :func:`decide`, and
indexes the result. A refusal is a value, not an exception, so the caller can answer
the client that sent the command.
"""

from __future__ import annotations

from datetime import datetime
from typing import assert_never

import msgspec

from skulk_core.ids import InstanceId, ModelId, NodeId, stable_reference
from skulk_core.state.commands import (
    AddCustomCard,
    AnnounceStoreHost,
    ChangeProposal,
    Command,
    CreateInstance,
    CreateProposal,
    DeleteInstance,
    EvictStoreModel,
    FinishTask,
    PurgeStaging,
    RecordMasterElected,
    RegisterNode,
    RemoveCustomCard,
    RemoveNode,
    ReportConnections,
    ReportDownloadProgress,
    ReportInstanceFailure,
    ReportRunnerStatus,
    SetClusterSettings,
    SetKeepAlive,
    SetTracing,
    StartTask,
)
from skulk_core.state.events import (
    ClusterSettingsSet,
    ConnectionsReported,
    CustomModelCardAdded,
    CustomModelCardRemoved,
    DownloadProgressUpdated,
    Event,
    InstanceCreated,
    InstanceDeleted,
    InstanceFailed,
    KeepAliveSet,
    MasterElected,
    NodeJoined,
    NodeLeft,
    RunnerStatusUpdated,
    StagingPurged,
    StoreHostAnnounced,
    StoreModelEvicted,
    TaskCreated,
    TaskDeleted,
    TracingSet,
)
from skulk_core.state.proposal_rules import ProposalRefusal, decide_proposal
from skulk_core.state.shards import RunnerIdle
from skulk_core.state.state import (
    MAX_FAILURE_AFFECTED_NODES,
    InstanceFailure,
    State,
)

# Failure messages are operator-facing and replicated: keep them bounded.
MAX_FAILURE_MESSAGE_CHARS = 1000
CARD_CONFLICT = "card_conflict"
"""The refusal of a custom-card removal whose expected card no longer owns the alias."""


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    """The master will not order this command. ``code`` is stable, ``message`` is for people."""

    code: str
    message: str


def decide(state: State, command: Command) -> list[Event] | Refused:
    match command:
        case RegisterNode(node_id=node_id):
            return [NodeJoined(node_id=node_id)]
        case RecordMasterElected(master_node_id=master, term=term):
            return [MasterElected(master_node_id=master, term=term)]
        case ReportConnections(node_id=node_id, connections=connections):
            if node_id not in state.topology.nodes:
                return []
            members = set(state.topology.nodes)
            connections = tuple(c for c in connections if c.send_back_node_id in members)
            current = tuple(c for c in state.topology.connections if c.local_node_id == node_id)
            if set(current) == set(connections):
                return []
            return [ConnectionsReported(node_id=node_id, connections=connections)]
        case RemoveNode(node_id=node_id, reason=reason, observed_at=observed_at):
            return _remove_node(state, node_id, reason, observed_at)
        case CreateInstance(instance=instance, intent=intent, card=card):
            if instance.instance_id in state.instances:
                return Refused(
                    code="instance_exists",
                    message=f"instance {instance.instance_id} already exists",
                )
            runners: list[Event] = [
                RunnerStatusUpdated(runner_id=runner_id, status=RunnerIdle())
                for runner_id in instance.shard_assignments.runner_to_shard
            ]
            return [InstanceCreated(instance=instance, intent=intent, card=card), *runners]
        case DeleteInstance(instance_id=instance_id):
            if instance_id not in state.instances:
                return Refused(code="not_found", message=f"instance {instance_id} not found")
            return [InstanceDeleted(instance_id=instance_id)]
        case SetKeepAlive(instance_id=instance_id, keep_alive_seconds=seconds):
            if instance_id not in state.instances:
                return Refused(code="not_found", message=f"instance {instance_id} not found")
            intent = state.placement_intents.get(instance_id)
            # An explicit placement stays whatever a request asks; an unchanged
            # keep-alive orders nothing (every Ollama request may carry one).
            if intent is None or not intent.on_demand or intent.keep_alive_seconds == seconds:
                return []
            return [KeepAliveSet(instance_id=instance_id, keep_alive_seconds=seconds)]
        case ReportRunnerStatus(runner_id=runner_id, status=status):
            owned = any(
                runner_id in i.shard_assignments.runner_to_shard for i in state.instances.values()
            )
            if not owned:
                # A runner whose instance is gone reports late; its status has no home.
                return []
            return [RunnerStatusUpdated(runner_id=runner_id, status=status)]
        case ReportDownloadProgress(node_id=node_id, progress=progress):
            return [DownloadProgressUpdated(node_id=node_id, progress=progress)]
        case ReportInstanceFailure(
            instance_id=instance_id,
            error_code=error_code,
            error_message=error_message,
            observed_at=observed_at,
        ):
            failed = state.instances.get(instance_id)
            if failed is None:
                return []
            nodes = tuple(failed.shard_assignments.node_to_runner)[:MAX_FAILURE_AFFECTED_NODES]
            failure = InstanceFailure(
                instance_id=InstanceId(stable_reference(instance_id)),
                model_id=ModelId(stable_reference(failed.shard_assignments.model_id)),
                error_code=error_code,
                error_message=error_message[:MAX_FAILURE_MESSAGE_CHARS],
                affected_node_ids=tuple(NodeId(stable_reference(n)) for n in nodes),
                recorded_at=observed_at,
            )
            return [InstanceFailed(failure=failure)]
        case StartTask(task=task):
            if task.instance_id not in state.instances:
                return Refused(code="not_found", message=f"instance {task.instance_id} not found")
            return [TaskCreated(task=task)]
        case FinishTask(task_id=task_id):
            if task_id not in state.tasks:
                return []
            return [TaskDeleted(task_id=task_id)]
        case AddCustomCard(card=card):
            return [CustomModelCardAdded(card=card)]
        case RemoveCustomCard(model_id=model_id, expected_card=expected):
            owner = state.custom_model_cards.get(model_id)
            if owner is None:
                return Refused(code="not_found", message=f"no custom card for {model_id}")
            if expected is not None and owner != expected:
                return Refused(
                    code=CARD_CONFLICT,
                    message=f"another card now owns {model_id}; it was not removed",
                )
            return [CustomModelCardRemoved(model_id=model_id)]
        case SetClusterSettings(settings=settings):
            if settings == state.cluster_settings:
                return []
            return [ClusterSettingsSet(settings=settings)]
        case SetTracing(enabled=enabled):
            if enabled == state.tracing_enabled:
                return []
            return [TracingSet(enabled=enabled)]
        case AnnounceStoreHost(node_id=node_id, store=store):
            if state.store_hosts.get(node_id) == store:
                return []
            return [StoreHostAnnounced(node_id=node_id, store=store)]
        case EvictStoreModel(model_id=model_id, evicted_at=evicted_at):
            return [StoreModelEvicted(model_id=model_id, evicted_at=evicted_at)]
        case PurgeStaging(model_id=model_id, purged_at=purged_at):
            return [StagingPurged(model_id=model_id, purged_at=purged_at)]
        case CreateProposal() | ChangeProposal():
            decided = decide_proposal(state, command)
            if isinstance(decided, ProposalRefusal):
                return Refused(code=decided.code, message=decided.message)
            return decided
        case _:
            assert_never(command)


def lost_node_error_code(node_id: NodeId) -> str:
    """The ``errorCode`` of an instance lost with a node: it names the node."""
    return f"node_lost:{node_id}"


def _remove_node(state: State, node_id: NodeId, reason: str, observed_at: datetime) -> list[Event]:
    if node_id not in state.topology.nodes:
        return []
    events: list[Event] = []
    for instance_id, instance in state.instances.items():
        if node_id not in instance.shard_assignments.node_to_runner:
            continue
        nodes = tuple(instance.shard_assignments.node_to_runner)[:MAX_FAILURE_AFFECTED_NODES]
        message = f"node {node_id} left the cluster: {reason}"
        events.append(
            InstanceFailed(
                failure=InstanceFailure(
                    instance_id=InstanceId(stable_reference(instance_id)),
                    model_id=ModelId(stable_reference(instance.shard_assignments.model_id)),
                    error_code=lost_node_error_code(node_id),
                    error_message=message[:MAX_FAILURE_MESSAGE_CHARS],
                    affected_node_ids=tuple(NodeId(stable_reference(n)) for n in nodes),
                    recorded_at=observed_at,
                )
            )
        )
    events.append(NodeLeft(node_id=node_id))
    return events
