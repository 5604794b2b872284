"""Events: facts in the past tense, ordered and indexed by the master only."""

from __future__ import annotations

from datetime import datetime

import msgspec

from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId, TaskId
from skulk_core.models.cards import ModelCard
from skulk_core.state.proposals import ProposalStatus, StewardProposal
from skulk_core.state.shards import Instance, RunnerStatus
from skulk_core.state.state import (
    ClusterSettings,
    Connection,
    DownloadProgress,
    InstanceFailure,
    PlacementIntent,
    StoreHost,
    Task,
    TaskStatus,
)


class _Event(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag=True):
    pass


class NodeJoined(_Event, frozen=True, kw_only=True):
    node_id: NodeId


class NodeLeft(_Event, frozen=True, kw_only=True):
    node_id: NodeId


class MasterElected(_Event, frozen=True, kw_only=True):
    """The first event a new master indexes: who rules, since which term."""

    master_node_id: NodeId
    term: int


class ConnectionsReported(_Event, frozen=True, kw_only=True):
    """``node_id``'s live fabric connections, replacing what it reported before."""

    node_id: NodeId
    connections: tuple[Connection, ...]


class InstanceCreated(_Event, frozen=True, kw_only=True):
    instance: Instance
    intent: PlacementIntent | None = None
    card: ModelCard | None = None
    """The card the instance was placed with (``None`` in logs written before cards
    were pinned: such an instance serves with the catalog's card)."""


class InstanceDeleted(_Event, frozen=True, kw_only=True):
    instance_id: InstanceId


class KeepAliveSet(_Event, frozen=True, kw_only=True):
    """An on-demand instance's keep-alive changed (``None``: kept until removed)."""

    instance_id: InstanceId
    keep_alive_seconds: float | None


class InstanceFailed(_Event, frozen=True, kw_only=True):
    """Recorded before the instance is removed, so operators see why it vanished."""

    failure: InstanceFailure


class RunnerStatusUpdated(_Event, frozen=True, kw_only=True):
    runner_id: RunnerId
    status: RunnerStatus


class TaskCreated(_Event, frozen=True, kw_only=True):
    task: Task


class TaskStatusUpdated(_Event, frozen=True, kw_only=True):
    task_id: TaskId
    task_status: TaskStatus


class TaskDeleted(_Event, frozen=True, kw_only=True):
    task_id: TaskId


class DownloadProgressUpdated(_Event, frozen=True, kw_only=True):
    node_id: NodeId
    progress: DownloadProgress


class CustomModelCardAdded(_Event, frozen=True, kw_only=True):
    card: ModelCard


class TracingSet(_Event, frozen=True, kw_only=True):
    """Requests admitted from now on are traced on every node (or no longer are)."""

    enabled: bool


class ClusterSettingsSet(_Event, frozen=True, kw_only=True):
    settings: ClusterSettings


class CustomModelCardRemoved(_Event, frozen=True, kw_only=True):
    model_id: ModelId


class StoreHostAnnounced(_Event, frozen=True, kw_only=True):
    node_id: NodeId
    store: StoreHost | None


class StoreModelEvicted(_Event, frozen=True, kw_only=True):
    model_id: ModelId
    evicted_at: datetime


class StagingPurged(_Event, frozen=True, kw_only=True):
    model_id: ModelId | None
    """None: every model's staged copies."""
    purged_at: datetime


class ProposalCreated(_Event, frozen=True, kw_only=True):
    proposal: StewardProposal


class ProposalChanged(_Event, frozen=True, kw_only=True):
    """A proposal moved on (decided, dispatched, failed, expired, reissued)."""

    proposal_id: str
    status: ProposalStatus
    at: datetime
    decided_by: str | None = None
    outcome: str | None = None
    dispatch_command_id: CommandId | None = None
    reissued: bool = False


Event = (
    NodeJoined
    | NodeLeft
    | MasterElected
    | ConnectionsReported
    | InstanceCreated
    | InstanceDeleted
    | KeepAliveSet
    | InstanceFailed
    | RunnerStatusUpdated
    | TaskCreated
    | TaskStatusUpdated
    | TaskDeleted
    | DownloadProgressUpdated
    | CustomModelCardAdded
    | CustomModelCardRemoved
    | TracingSet
    | ClusterSettingsSet
    | StoreHostAnnounced
    | StoreModelEvicted
    | StagingPurged
    | ProposalCreated
    | ProposalChanged
)


class IndexedEvent(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """An event with its place in the cluster's one total order."""

    idx: int
    event: Event
    origin: NodeId
    recorded_at: datetime
    command_id: CommandId | None = None
    term: int = 0
    """The election term of the master that indexed it (log freshness, failover)."""
    indexed_by: NodeId | None = None
    """The master that indexed it. With ``term`` it identifies a history: two masters
    can claim one term across a partition, never one node twice."""
