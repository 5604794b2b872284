"""What the steward's read tools return, computed from State and telemetry alone.

Every view names nodes by their friendly names (a node without identity telemetry gets
a safe fallback, ``node-1`` ...), never by node id; the daemon serialises a view and
cuts it with :func:`~skulk_core.steward.tools.bounded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

import msgspec

from skulk_core.cluster.telemetry import NodeHealth, NodeTelemetry
from skulk_core.extensions.capability_nodes import STALE_AFTER_SECONDS
from skulk_core.ids import NodeId
from skulk_core.state.shards import Instance
from skulk_core.state.state import State
from skulk_core.steward.lifecycle import ACTIVE_DOWNLOAD_STATUSES, is_steward

Telemetry = Mapping[NodeId, NodeTelemetry]
_MISSING = {"", "unknown", "none", "null"}


_Unset = msgspec.UnsetType
UNSET = msgspec.UNSET


class _View(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A tool result's part; fields left ``UNSET`` are not in the JSON the brain reads."""


class InstanceView(_View, frozen=True, kw_only=True, omit_defaults=True):
    model: str
    status: str
    nodes: list[str]
    role: str | _Unset = UNSET


class DownloadView(_View, frozen=True, kw_only=True, omit_defaults=True):
    node: str
    model: str
    status: str
    downloaded_bytes: int | _Unset = UNSET
    total_bytes: int | _Unset = UNSET


class DownloadInventory(_View, frozen=True, kw_only=True, omit_defaults=True):
    queued: int
    transferring: int
    retained_terminal: int
    active: list[DownloadView]
    recent_terminal: list[DownloadView]


class NodeView(_View, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    health: str
    master: bool


class FailureView(_View, frozen=True, kw_only=True, omit_defaults=True):
    model: str
    error: str
    message: str


class ClusterStateView(_View, frozen=True, kw_only=True, omit_defaults=True):
    node_count: int
    nodes: list[NodeView]
    instances: list[InstanceView]
    downloads: DownloadInventory
    recent_failures: list[FailureView]


class NodeResources(_View, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    telemetry: str | _Unset = UNSET
    """``"missing"`` when the node has sent none; the rest is then absent."""
    ram_total_gb: float | _Unset = UNSET
    ram_available_gb: float | _Unset = UNSET
    cpu: str | _Unset = UNSET
    cpu_count: int | _Unset = UNSET
    accelerator: str | _Unset | None = UNSET
    backends: list[str] | _Unset = UNSET
    participation: str | _Unset = UNSET


class NodeTelemetryView(_View, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    health: str | _Unset = UNSET
    reasons: list[str] | _Unset = UNSET
    telemetry_age_seconds: float | _Unset = UNSET
    data_transport: object = UNSET
    api_available: bool | _Unset = UNSET


class NodeVersion(_View, frozen=True, kw_only=True, omit_defaults=True):
    name: str
    version: str | None
    commit: str | None


class VersionStatus(_View, frozen=True, kw_only=True, omit_defaults=True):
    nodes: list[NodeVersion]
    distinct_builds: int
    nodes_with_unknown_build: int
    coverage: str
    note: str


class CapabilityNodeView(_View, frozen=True, kw_only=True, omit_defaults=True):
    plugin: str
    node: str
    bundle: str | None
    version: str | None
    status: str
    owner_available: bool


class CapabilityHost(_View, frozen=True, kw_only=True, omit_defaults=True):
    host: str
    capability_nodes: list[CapabilityNodeView]


class CapabilityNodes(_View, frozen=True, kw_only=True, omit_defaults=True):
    hosts: list[CapabilityHost]
    note: str


class Nodes(_View, frozen=True, kw_only=True, omit_defaults=True):
    nodes: list[NodeResources] | list[NodeTelemetryView]


def node_names(state: State, telemetry: Telemetry) -> dict[NodeId, str]:
    """Friendly names of the topology's nodes (fallbacks ``node-N`` where telemetry has
    none), in topology order."""
    names: dict[NodeId, str] = {}
    fallback = 0
    for node in state.topology.nodes:
        reading = telemetry.get(node)
        name = reading.identity.friendly_name.strip() if reading is not None else ""
        if not name:
            fallback += 1
            name = f"node-{fallback}"
        names[node] = name
    return names


class Unresolved(msgspec.Struct, frozen=True, kw_only=True):
    """Why no node can be chosen for a friendly name (safe to show: names, no ids)."""

    reason: str


def resolve_node(name: str, names: Mapping[NodeId, str]) -> NodeId | Unresolved:
    """The node with exactly this friendly name, or why none can be chosen.

    (``NodeId`` is a ``str``: callers tell the two apart with ``Unresolved``.)"""
    matches = [node for node, friendly in names.items() if friendly == name]
    if not matches:
        known = ", ".join(sorted(names.values())) or "none"
        return Unresolved(reason=f"no live node is named {name!r} (live nodes: {known})")
    if len(matches) > 1:
        return Unresolved(
            reason=f"{len(matches)} live nodes are named {name!r}; the name is ambiguous"
        )
    return matches[0]


def _status(state: State, instance: Instance) -> str:
    statuses = [state.runners.get(r) for r in instance.shard_assignments.node_to_runner.values()]
    tags = sorted(
        {type(s).__name__.removeprefix("Runner") if s else "Unreported" for s in statuses}
    )
    return "/".join(tags)


def _instances(state: State, names: Mapping[NodeId, str], internal: bool) -> list[InstanceView]:
    out: list[InstanceView] = []
    for instance_id, instance in state.instances.items():
        steward = is_steward(state, instance_id)
        if steward and not internal:
            continue
        assignments = instance.shard_assignments
        out.append(
            InstanceView(
                model=str(assignments.model_id),
                status=_status(state, instance),
                nodes=[names.get(n, "unknown") for n in assignments.node_to_runner],
                role="steward" if steward else UNSET,
            )
        )
    return out


def download_inventory(state: State, names: Mapping[NodeId, str]) -> DownloadInventory:
    """Download records: queued, transferring and retained terminal ones kept apart,
    active first (the exact counts survive any cut of the detail)."""
    queued = transferring = terminal = 0
    active: list[DownloadView] = []
    finished: list[DownloadView] = []
    for node, records in state.downloads.items():
        for record in records:
            item = DownloadView(
                node=names.get(node, "unknown"), model=str(record.model_id), status=record.status
            )
            if record.status == "pending":
                queued += 1
                active.append(item)
            elif record.status == "in_progress":
                transferring += 1
                active.append(
                    msgspec.structs.replace(
                        item,
                        downloaded_bytes=record.downloaded_bytes,
                        total_bytes=record.total_bytes,
                    )
                )
            else:
                terminal += 1
                finished.append(item)
    return DownloadInventory(
        queued=queued,
        transferring=transferring,
        retained_terminal=terminal,
        active=active[:16],
        recent_terminal=finished[:8],
    )


def cluster_state(
    state: State, telemetry: Telemetry, health: Mapping[NodeId, NodeHealth], *, internal: bool
) -> ClusterStateView:
    """``get_cluster_state``: nodes, instances (the steward only when ``internal``),
    downloads and the master. Counts are topology transport peers, not hosts."""
    names = node_names(state, telemetry)
    nodes = [
        NodeView(
            name=name,
            health=health[node].level.value if node in health else "unknown",
            master=node == state.master_node_id,
        )
        for node, name in names.items()
    ]
    return ClusterStateView(
        node_count=len(nodes),
        nodes=nodes,
        instances=_instances(state, names, internal),
        downloads=download_inventory(state, names),
        recent_failures=[
            FailureView(model=str(f.model_id), error=f.error_code, message=f.error_message[:200])
            for f in state.instance_failures[-4:]
        ],
    )


def node_resources(state: State, telemetry: Telemetry) -> Nodes:
    names = node_names(state, telemetry)
    out: list[NodeResources] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        if reading is None:
            out.append(NodeResources(name=name, telemetry="missing"))
            continue
        accelerator = reading.system.accelerator
        out.append(
            NodeResources(
                name=name,
                ram_total_gb=round(reading.memory.ram_total.in_gb, 2),
                ram_available_gb=round(reading.memory.ram_available.in_gb, 2),
                cpu=reading.system.cpu_model,
                cpu_count=reading.system.cpu_count,
                accelerator=accelerator.name if accelerator is not None else None,
                backends=list(reading.resources.backends),
                participation=reading.resources.participation.value,
            )
        )
    return Nodes(nodes=out)


def telemetry_view(
    state: State, telemetry: Telemetry, health: Mapping[NodeId, NodeHealth], now: datetime
) -> Nodes:
    names = node_names(state, telemetry)
    out: list[NodeTelemetryView] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        item = NodeTelemetryView(name=name)
        if node in health:
            reasons = [r.message for r in health[node].reasons][:4]
            item = msgspec.structs.replace(item, health=health[node].level.value, reasons=reasons)
        if reading is not None:
            item = msgspec.structs.replace(
                item,
                telemetry_age_seconds=round((now - reading.observed_at).total_seconds(), 1),
                data_transport=reading.resources.data_transport,
                api_available=reading.resources.api_available,
            )
        out.append(item)
    return Nodes(nodes=out)


def _build(value: str | None) -> str | None:
    return None if value is None or value.strip().lower() in _MISSING else value


def version_status(state: State, telemetry: Telemetry) -> VersionStatus:
    """Actual per-node versions and commits; a missing build is reported as unknown,
    and matching builds say nothing about release currency."""
    names = node_names(state, telemetry)
    nodes: list[NodeVersion] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        version = _build(reading.identity.skulk_version) if reading is not None else None
        commit = _build(reading.identity.skulk_commit) if reading is not None else None
        nodes.append(NodeVersion(name=name, version=version, commit=commit))
    known = {(n.version, n.commit) for n in nodes if n.version is not None}
    unknown = sum(1 for n in nodes if n.version is None)
    return VersionStatus(
        nodes=nodes,
        distinct_builds=len(known),
        nodes_with_unknown_build=unknown,
        coverage="complete" if unknown == 0 else "partial",
        note="matching builds do not establish that this is the latest release",
    )


def capability_nodes(state: State, telemetry: Telemetry, now: datetime) -> CapabilityNodes:
    """The current ``/state.capabilityNodes`` advertisements per host (in host-id order,
    a host whose last reading is older than :data:`STALE_AFTER_SECONDS` dropped, as
    there), apart from hardware and with no surface URL or action payload; hosts
    outside the topology get safe fallback names and do not count as topology nodes."""
    names = node_names(state, telemetry)
    hosts: list[CapabilityHost] = []
    extra = 0
    for node in sorted(telemetry):
        reading = telemetry[node]
        if not reading.capability_nodes:
            continue
        if (now - reading.observed_at).total_seconds() > STALE_AFTER_SECONDS:
            continue
        name = names.get(node)
        if name is None:
            extra += 1
            name = f"capability-host-{extra}"
        hosts.append(
            CapabilityHost(
                host=name,
                capability_nodes=[
                    CapabilityNodeView(
                        plugin=c.plugin_id,
                        node=c.node_id,
                        bundle=c.bundle_id,
                        version=c.version,
                        status=c.status,
                        owner_available=c.owner_available,
                    )
                    for c in reading.capability_nodes
                ],
            )
        )
    return CapabilityNodes(
        hosts=hosts,
        note="no advertisement does not prove nothing is installed; discovery grants "
        "no execution authority",
    )


def is_active_download(status: str) -> bool:
    return status in ACTIVE_DOWNLOAD_STATUSES
