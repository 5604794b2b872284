"""The replicated cluster state. Changed only by :func:`skulk_core.state.apply.apply`."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

import msgspec

from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId, TaskId
from skulk_core.models.cards import ModelCard
from skulk_core.state.proposals import StewardProposal
from skulk_core.state.shards import Instance, InstanceMeta, RunnerStatus, Sharding

MAX_INSTANCE_FAILURES = 64
MAX_STORE_EVICTIONS = 256
"""Store evictions kept in State (oldest dropped)."""
MAX_FAILURE_AFFECTED_NODES = 64


class TaskStatus(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    COMPLETE = "Complete"
    FAILED = "Failed"
    CANCELLED = "Cancelled"


class Task(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    task_id: TaskId
    command_id: CommandId
    instance_id: InstanceId
    kind: str
    task_status: TaskStatus


class InstanceFailure(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    instance_id: InstanceId
    model_id: ModelId
    error_code: str
    error_message: str
    affected_node_ids: tuple[NodeId, ...]
    recorded_at: datetime
    system_role: str | None = None


class DownloadProgress(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: ModelId
    status: str
    downloaded_bytes: int = 0
    total_bytes: int = 0
    error_message: str | None = None
    attempt_id: str | None = None
    """This transfer attempt's identity: a fresh one for every start or retry (``None``
    for a record no transfer made, such as an already-installed model)."""


class Connection(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A directed edge: ``local_node_id`` reaches ``send_back_node_id`` at ``sink_multiaddr``.

    ``session`` marks a live authenticated fabric connection (proof of connectivity,
    never a dial target) as opposed to a probe-verified advertised address.
    """

    local_node_id: NodeId
    send_back_node_id: NodeId
    sink_multiaddr: str
    session: bool = False


class PlacementIntent(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """What a placement was asked for, kept beside its instance so a failed instance
    can be placed again the same way (its repair intent): the same shape, the same
    exclusions and the same context window. ``repair_attempt`` counts the
    re-placements that led to this instance; a re-placement keeps ``on_demand`` and
    the keep-alive."""

    sharding: Sharding = Sharding.PIPELINE
    instance_meta: InstanceMeta = InstanceMeta.MLX_RING
    min_nodes: int = 1
    excluded_node_ids: tuple[NodeId, ...] = ()
    context_tokens: int | None = None
    repair_attempt: int = 0
    on_demand: bool = False
    """Placed by a request for an unplaced model (``inference.load_on_demand``), not
    by an operator: the master unloads it once idle for ``keep_alive_seconds``."""
    keep_alive_seconds: float | None = None
    """How long an on-demand instance stays once idle; ``None`` keeps it until removed.
    Ignored for explicit placements, which stay."""
    system_role: str | None = None
    """``"steward"`` for the intelligent fabric's hidden resident brain (placed and
    removed by the master alone); ``None`` for every ordinary instance."""


class StoreHost(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A node serving the cluster's model store: its internal transport listens on
    ``port`` at the node's advertised API addresses (see ``skulk_daemon/store``)."""

    port: int


class Topology(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    nodes: tuple[NodeId, ...] = ()
    connections: tuple[Connection, ...] = ()


MAX_REIGNS = 64
"""Reigns kept in State (oldest dropped): enough to tell a partition's histories apart."""


class Reign(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One master's rule: the term it was elected in, and the index it began at.
    (term, master) identifies a history; the same term can be claimed on both sides of
    a partition, never by one node twice."""

    term: int
    master_node_id: NodeId
    first_idx: int


class FabricMode(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The ``intelligent_fabric`` config section as State carries it, cluster-wide."""

    enabled: bool
    brain_model: str
    max_tool_calls: int


class ClusterSettings(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The cluster-wide keys of ``PUT /config`` every node applies to its own config.

    Secrets never enter State: a changed ``hf_token`` is recorded here only as a fresh
    random ``hf_token_revision``; the token itself travels over the encrypted fabric.
    ``None`` is a key never set cluster-wide (each node keeps its own value)."""

    log_level: str | None = None
    event_log: bool | None = None
    hf_token_revision: str | None = None
    intelligent_fabric: FabricMode | None = None
    """Intelligent-fabric mode for the whole cluster: put through ``PUT /config`` on any
    node, or published by the master from its own config when State has none yet."""


class State(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Everything ordered through the event log. Telemetry lives beside it, not in it."""

    instances: dict[InstanceId, Instance] = {}
    runners: dict[RunnerId, RunnerStatus] = {}
    tasks: dict[TaskId, Task] = {}
    downloads: dict[NodeId, tuple[DownloadProgress, ...]] = {}
    last_seen: dict[NodeId, datetime] = {}
    topology: Topology = Topology()
    instance_failures: tuple[InstanceFailure, ...] = ()
    placement_intents: dict[InstanceId, PlacementIntent] = {}
    custom_model_cards: dict[ModelId, ModelCard] = {}
    instance_cards: dict[InstanceId, ModelCard] = {}
    """The card each instance was placed with. A custom card added later for the same
    model id changes the catalog and new placements, never a running instance (its
    chat template, tasks and files)."""
    tracing_enabled: bool = False
    """Whether new requests are traced (``PUT /v1/tracing``), on every node."""
    cluster_settings: ClusterSettings | None = None
    """The cluster-wide settings last put through ``PUT /config`` on any node."""
    store_hosts: dict[NodeId, StoreHost] = {}
    """The nodes that announced the model-store role (``model_store.store_host``)."""
    store_evictions: dict[ModelId, datetime] = {}
    """Models deleted from the store, and when: every node drops a staged copy of one
    made before that time (``DELETE /store/models/{model_id}``)."""
    staging_purges: dict[ModelId, datetime] = {}
    """Staged copies purged, and when (``POST /store/purge-staging`` with a
    ``modelId``): every node drops its copy of one staged before that time."""
    staging_purged_all_at: datetime | None = None
    """The latest general purge: every node drops every copy staged before it."""
    master_node_id: NodeId | None = None
    """The master that indexed the latest ``MasterElected`` (``None`` before the first)."""
    election_term: int = 0
    reigns: tuple[Reign, ...] = ()
    """The latest :data:`MAX_REIGNS` reigns of this history, oldest first."""
    steward_proposals: tuple[StewardProposal, ...] = ()
    """The steward's action proposals, oldest first (see ``state/proposals.py``)."""
    last_event_applied_idx: int = -1
