"""The diagnostics bundle (``GET /v1/diagnostics/node``) as wire types.

One node's answer to "what is going on here": its runtime and configuration, its
resources and engine build, its process tree, its runners and their flight recorder,
the placements it knows, the doctor's findings, its fabric and provider counters,
partition recoveries and authority refusals. The cluster sweeps
(:mod:`skulk_core.diagnostics.answers`) carry other members' bundles decoded into
the same :class:`NodeBundle`, so a malformed peer answer is caught at the edge.
"""

from __future__ import annotations

import msgspec

from skulk_core.cluster.remote_access import TailscaleStatus
from skulk_core.diagnostics.findings import DoctorFinding


class Runtime(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    master_node_id: str | None
    is_master: bool
    term: int
    skulk_version: str
    skulk_commit: str | None
    pid: int
    started_at: str
    uptime_seconds: float
    python: str
    platform: str
    now: str


class ConfigFacts(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    api_host: str
    api_port: int
    fabric_port: int | None
    operator_api_port: int | None
    data_dir: str
    models_dir: str
    participation: str
    mdns: bool
    configured_peers: int
    api_keys_configured: bool
    memory_reserve_gb: float
    memory_limit_gb: float | None


class EngineFacts(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    importable: bool
    system_info: str
    supports_rpc: bool


class Resources(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    ram_total: int | None
    ram_available: int | None
    swap_total: int | None
    swap_free: int | None
    cpu_count: int | None
    load_average: list[float] | None
    models_dir: str
    models_disk_total: int | None
    models_disk_free: int | None
    engine: EngineFacts


class ProcessEntry(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One process of this daemon's tree; ``runnerId`` only on a runner's process."""

    pid: int
    ppid: int
    role: str
    name: str
    status: str
    rss_bytes: int
    cpu_percent: float
    cpu_seconds: float
    threads: int
    runner_id: str | None = None


class RunnerView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One runner as this node's supervisor sees it."""

    runner_id: str
    instance_id: str
    model_id: str
    status_kind: str | None
    phase: str
    seconds_in_phase: float
    phase_budget_seconds: float | None
    supervisor_phase: str
    device_rank: int
    world_size: int
    rpc_donor: bool
    active_tasks: int
    task_ids: list[str]
    pid: int | None
    failure: str | None


class FlightRecord(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """One flight-recorder entry; ``detail`` and ``taskId`` only when there are any."""

    at: str
    runner_id: str
    event: str
    phase: str
    detail: str = ""
    task_id: str | None = None


class PlacementRunner(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    runner_id: str
    node_id: str
    device_rank: int
    status_kind: str | None


class PlacementView(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    instance_id: str
    model_id: str
    kind: str
    nodes: list[str]
    serving_node_id: str | None
    master_node_id: str | None
    master_in_placement: bool
    runners: list[PlacementRunner]


class FabricPeer(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    node_id: str
    address: str
    skulk_version: str | None
    transport: str
    last_idx: int
    heard_seconds_ago: float | None


class FabricFrames(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    in_: int = msgspec.field(name="in")
    out: int
    dropped_out: int
    received: dict[str, int]
    dropped: dict[str, int]


class RefusedPeerEntry(msgspec.Struct, frozen=True, kw_only=True):
    address: str
    reason: str
    at: str


class DataPlaneStats(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    delivered: int
    unknown_stream: int
    gaps: int
    overflows: int
    foreign_sender: int


class FabricDiagnostics(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """The fabric agent's counters: its role, its peers, frames and refused dials."""

    node_id: str
    role: str
    master: str | None
    term: int
    fabric_port: int
    data_transport: str
    peers: list[FabricPeer]
    frames: FabricFrames
    refused_peers: list[RefusedPeerEntry]
    data_plane: DataPlaneStats


class SlotUse(msgspec.Struct, frozen=True, kw_only=True):
    active: int
    limit: int


class StreamUse(msgspec.Struct, frozen=True, kw_only=True):
    active: int
    limit: int
    serving: int
    calling: int


class ProviderCounters(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Capability providers' counters: no call ids, inputs or outputs."""

    providers: list[str]
    unary_calls: SlotUse
    streams: StreamUse


class RecoveryOutcome(
    msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True
):
    """A change made on the losing side of a partition, resubmitted when it healed:
    ``outcome`` applied, or refused with its ``reason``."""

    at: str
    change: str
    command: str
    lost_idx: int
    outcome: str
    reason: str | None = None


class NodeBundle(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /v1/diagnostics/node``: everything an operator asks first."""

    node_id: str
    skulk_version: str
    last_event_applied_idx: int
    runtime: Runtime
    config: ConfigFacts
    resources: Resources
    processes: list[ProcessEntry]
    supervisor_runners: list[RunnerView]
    flight_recorder: list[FlightRecord]
    placements: list[PlacementView]
    doctor: list[DoctorFinding]
    cluster: FabricDiagnostics | None
    data_plane: DataPlaneStats | None
    providers: ProviderCounters | None
    partition_recoveries: list[RecoveryOutcome]
    authority_refusals: dict[str, int]
    """Requests the authority policy refused since start, by reason."""
    tailscale: TailscaleStatus | None = None
    """This node's own tailnet identity (running, tailnet IP, hostname, MagicDNS name),
    probed on the node the bundle describes: ``running: false`` without a working
    tailscale CLI, null only when the probe failed unexpectedly."""
