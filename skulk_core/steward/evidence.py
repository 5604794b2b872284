"""What the steward's read tools return, computed from State and telemetry alone.

Every view names nodes by their friendly names (a node without identity telemetry gets
a safe fallback, ``node-1`` ...), never by node id; the daemon serialises a view and
cuts it with :func:`~skulk_core.steward.tools.bounded`.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from skulk_core.cluster.telemetry import NodeHealth, NodeTelemetry
from skulk_core.ids import NodeId
from skulk_core.state.shards import Instance
from skulk_core.state.state import State
from skulk_core.steward.lifecycle import ACTIVE_DOWNLOAD_STATUSES, is_steward

Telemetry = Mapping[NodeId, NodeTelemetry]
_MISSING = {"", "unknown", "none", "null"}


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


def resolve_node(name: str, names: Mapping[NodeId, str]) -> NodeId | str:
    """The node with exactly this friendly name, or why none can be chosen."""
    matches = [node for node, friendly in names.items() if friendly == name]
    if not matches:
        known = ", ".join(sorted(names.values())) or "none"
        return f"no live node is named {name!r} (live nodes: {known})"
    if len(matches) > 1:
        return f"{len(matches)} live nodes are named {name!r}; the name is ambiguous"
    return matches[0]


def _status(state: State, instance: Instance) -> str:
    statuses = [state.runners.get(r) for r in instance.shard_assignments.node_to_runner.values()]
    tags = sorted(
        {type(s).__name__.removeprefix("Runner") if s else "Unreported" for s in statuses}
    )
    return "/".join(tags)


def _instances(state: State, names: Mapping[NodeId, str], internal: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for instance_id, instance in state.instances.items():
        steward = is_steward(state, instance_id)
        if steward and not internal:
            continue
        item: dict[str, Any] = {
            "model": str(instance.shard_assignments.model_id),
            "status": _status(state, instance),
            "nodes": [names.get(n, "unknown") for n in instance.shard_assignments.node_to_runner],
        }
        if steward:
            item["role"] = "steward"
        out.append(item)
    return out


def download_inventory(state: State, names: Mapping[NodeId, str]) -> dict[str, Any]:
    """Download records: queued, transferring and retained terminal ones kept apart,
    active first (the exact counts survive any cut of the detail)."""
    queued = transferring = terminal = 0
    active: list[dict[str, Any]] = []
    finished: list[dict[str, Any]] = []
    for node, records in state.downloads.items():
        for record in records:
            item: dict[str, Any] = {
                "node": names.get(node, "unknown"),
                "model": str(record.model_id),
                "status": record.status,
            }
            if record.status == "pending":
                queued += 1
                active.append(item)
            elif record.status == "in_progress":
                transferring += 1
                item["downloaded_bytes"] = record.downloaded_bytes
                item["total_bytes"] = record.total_bytes
                active.append(item)
            else:
                terminal += 1
                finished.append(item)
    return {
        "queued": queued,
        "transferring": transferring,
        "retained_terminal": terminal,
        "active": active[:16],
        "recent_terminal": finished[:8],
    }


def cluster_state(
    state: State, telemetry: Telemetry, health: Mapping[NodeId, NodeHealth], *, internal: bool
) -> dict[str, Any]:
    """``get_cluster_state``: nodes, instances (the steward only when ``internal``),
    downloads and the master. Counts are topology transport peers, not hosts."""
    names = node_names(state, telemetry)
    nodes = [
        {
            "name": name,
            "health": health[node].level.value if node in health else "unknown",
            "master": node == state.master_node_id,
        }
        for node, name in names.items()
    ]
    return {
        "node_count": len(nodes),
        "nodes": nodes,
        "instances": _instances(state, names, internal),
        "downloads": download_inventory(state, names),
        "recent_failures": [
            {"model": str(f.model_id), "error": f.error_code, "message": f.error_message[:200]}
            for f in state.instance_failures[-4:]
        ],
    }


def node_resources(state: State, telemetry: Telemetry) -> dict[str, Any]:
    names = node_names(state, telemetry)
    out: list[dict[str, Any]] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        if reading is None:
            out.append({"name": name, "telemetry": "missing"})
            continue
        accelerator = reading.system.accelerator
        out.append(
            {
                "name": name,
                "ram_total_gb": round(reading.memory.ram_total.in_gb, 2),
                "ram_available_gb": round(reading.memory.ram_available.in_gb, 2),
                "cpu": reading.system.cpu_model,
                "cpu_count": reading.system.cpu_count,
                "accelerator": accelerator.name if accelerator is not None else None,
                "backends": list(reading.resources.backends),
                "participation": reading.resources.participation.value,
            }
        )
    return {"nodes": out}


def telemetry_view(
    state: State, telemetry: Telemetry, health: Mapping[NodeId, NodeHealth], now: datetime
) -> dict[str, Any]:
    names = node_names(state, telemetry)
    out: list[dict[str, Any]] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        item: dict[str, Any] = {"name": name}
        if node in health:
            item["health"] = health[node].level.value
            item["reasons"] = [r.message for r in health[node].reasons][:4]
        if reading is not None:
            item["telemetry_age_seconds"] = round((now - reading.observed_at).total_seconds(), 1)
            item["data_transport"] = reading.resources.data_transport
            item["api_available"] = reading.resources.api_available
        out.append(item)
    return {"nodes": out}


def _build(value: str | None) -> str | None:
    return None if value is None or value.strip().lower() in _MISSING else value


def version_status(state: State, telemetry: Telemetry) -> dict[str, Any]:
    """Actual per-node versions and commits; a missing build is reported as unknown,
    and matching builds say nothing about release currency."""
    names = node_names(state, telemetry)
    nodes: list[dict[str, Any]] = []
    for node, name in names.items():
        reading = telemetry.get(node)
        version = _build(reading.identity.skulk_version) if reading is not None else None
        commit = _build(reading.identity.skulk_commit) if reading is not None else None
        nodes.append({"name": name, "version": version, "commit": commit})
    known = {(n["version"], n["commit"]) for n in nodes if n["version"] is not None}
    unknown = sum(1 for n in nodes if n["version"] is None)
    return {
        "nodes": nodes,
        "distinct_builds": len(known),
        "nodes_with_unknown_build": unknown,
        "coverage": "complete" if unknown == 0 else "partial",
        "note": "matching builds do not establish that this is the latest release",
    }


def capability_nodes(state: State, telemetry: Telemetry) -> dict[str, Any]:
    """Capability advertisements per host, apart from hardware; hosts without identity
    telemetry get safe fallback names and do not count as topology nodes."""
    names = node_names(state, telemetry)
    hosts: list[dict[str, Any]] = []
    extra = 0
    for node, reading in telemetry.items():
        if not reading.capability_nodes:
            continue
        name = names.get(node)
        if name is None:
            extra += 1
            name = f"capability-host-{extra}"
        hosts.append(
            {
                "host": name,
                "capability_nodes": [
                    {
                        "plugin": c.plugin_id,
                        "node": c.node_id,
                        "bundle": c.bundle_id,
                        "version": c.version,
                        "status": c.status,
                        "owner_available": c.owner_available,
                    }
                    for c in reading.capability_nodes
                ],
            }
        )
    return {
        "hosts": hosts,
        "note": "no advertisement does not prove nothing is installed; discovery grants "
        "no execution authority",
    }


def is_active_download(status: str) -> bool:
    return status in ACTIVE_DOWNLOAD_STATUSES
