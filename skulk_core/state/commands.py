"""Commands: imperatives sent to the master, which alone turns them into events."""

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
    PlacementIntent,
    StoreHost,
    Task,
    TaskStatus,
)


class _Command(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag=True):
    command_id: CommandId


class RegisterNode(_Command, frozen=True, kw_only=True):
    node_id: NodeId


class RecordMasterElected(_Command, frozen=True, kw_only=True):
    """Issued by a new master to itself: the first thing it indexes."""

    master_node_id: NodeId
    term: int


class RemoveNode(_Command, frozen=True, kw_only=True):
    """A node unseen past the membership timeout: fail its instances, then drop it."""

    node_id: NodeId
    reason: str
    observed_at: datetime


class ReportConnections(_Command, frozen=True, kw_only=True):
    node_id: NodeId
    connections: tuple[Connection, ...]


class CreateInstance(_Command, frozen=True, kw_only=True):
    """Commit an already-planned instance (the API dry-runs placement first, the
    master checks it again against every placement ordered before it). ``intent``
    is what was asked for, kept so a failed instance can be placed again."""

    instance: Instance
    intent: PlacementIntent | None = None
    card: ModelCard | None = None
    """The card the placement was planned against: the instance serves with it for its
    whole life, whatever later happens to the catalog's card of the same id."""


class DeleteInstance(_Command, frozen=True, kw_only=True):
    instance_id: InstanceId


class SetKeepAlive(_Command, frozen=True, kw_only=True):
    """How long an instance placed on demand stays once idle (an Ollama request's
    ``keep_alive``); ``None`` keeps it until removed."""

    instance_id: InstanceId
    keep_alive_seconds: float | None


class ReportRunnerStatus(_Command, frozen=True, kw_only=True):
    runner_id: RunnerId
    status: RunnerStatus


class ReportDownloadProgress(_Command, frozen=True, kw_only=True):
    node_id: NodeId
    progress: DownloadProgress


class ReportInstanceFailure(_Command, frozen=True, kw_only=True):
    """A runner of the instance failed for good: record why, then remove the instance."""

    instance_id: InstanceId
    error_code: str
    error_message: str
    node_id: NodeId
    observed_at: datetime


class StartTask(_Command, frozen=True, kw_only=True):
    task: Task


class FinishTask(_Command, frozen=True, kw_only=True):
    """A task ended (any way). Finished tasks leave State; their outcome went to the client."""

    task_id: TaskId
    task_status: TaskStatus


class AddCustomCard(_Command, frozen=True, kw_only=True):
    card: ModelCard


class RemoveCustomCard(_Command, frozen=True, kw_only=True):
    model_id: ModelId
    expected_card: ModelCard | None = None
    """Remove only while exactly this card owns the alias: the master refuses
    (``card_conflict``) when another card replaced it before the removal was ordered."""


class SetClusterSettings(_Command, frozen=True, kw_only=True):
    """Every node applies these cluster-wide ``PUT /config`` keys to its own config."""

    settings: ClusterSettings


class SetTracing(_Command, frozen=True, kw_only=True):
    """Trace new requests cluster-wide (or stop tracing them)."""

    enabled: bool


class AnnounceStoreHost(_Command, frozen=True, kw_only=True):
    """``node_id`` serves the model store (``store`` set) or no longer does (None)."""

    node_id: NodeId
    store: StoreHost | None


class EvictStoreModel(_Command, frozen=True, kw_only=True):
    """The store deleted ``model_id``: every node drops its staged copy."""

    model_id: ModelId
    evicted_at: datetime


class PurgeStaging(_Command, frozen=True, kw_only=True):
    """Every node drops its copies staged from the store (of ``model_id``, or of every
    model when None) made before ``purged_at``; the store's own copy stays."""

    model_id: ModelId | None
    purged_at: datetime


class CreateProposal(_Command, frozen=True, kw_only=True):
    """Record an inert steward proposal (refused when expired, too long-lived, or past
    the pending bound)."""

    proposal: StewardProposal
    observed_at: datetime


class ChangeProposal(_Command, frozen=True, kw_only=True):
    """Move a proposal on: an operator's decision (from ``pending`` only, single use),
    or the master's dispatch outcome, expiry or reissue."""

    proposal_id: str
    status: ProposalStatus
    observed_at: datetime
    decided_by: str | None = None
    outcome: str | None = None
    dispatch_command_id: CommandId | None = None
    reissued: bool = False


Command = (
    RegisterNode
    | RecordMasterElected
    | RemoveNode
    | ReportConnections
    | CreateInstance
    | DeleteInstance
    | SetKeepAlive
    | ReportRunnerStatus
    | ReportDownloadProgress
    | ReportInstanceFailure
    | StartTask
    | FinishTask
    | AddCustomCard
    | RemoveCustomCard
    | SetTracing
    | SetClusterSettings
    | AnnounceStoreHost
    | EvictStoreModel
    | PurgeStaging
    | CreateProposal
    | ChangeProposal
)
