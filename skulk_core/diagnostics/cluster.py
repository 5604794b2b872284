"""Cluster-wide diagnostics, merged from each node's bundle (pure).

The daemon fans out to every topology member's API; what came back (or the reason
nothing did) is folded here: the version verdicts of ``GET /v1/diagnostics/cluster``
and the cross-rank timeline of ``GET /v1/diagnostics/cluster/timeline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any, Final

# Entries kept in one merged timeline (newest kept): 16 nodes of full recorders.
MAX_TIMELINE_ENTRIES: Final = 4096


class ClusterVersionStatus(StrEnum):
    CONSISTENT = "consistent"
    MIXED = "mixed"
    UNKNOWN = "unknown"


class NodeVersionStatus(StrEnum):
    CURRENT = "current"
    VERSION_MISMATCH = "version_mismatch"
    UNKNOWN = "unknown"


def node_version_status(local: str, version: str | None) -> NodeVersionStatus:
    if not version or version.strip().lower() in ("unknown", "none", "null"):
        return NodeVersionStatus.UNKNOWN
    return NodeVersionStatus.CURRENT if version == local else NodeVersionStatus.VERSION_MISMATCH


def cluster_version_status(statuses: Sequence[NodeVersionStatus]) -> ClusterVersionStatus:
    """Mixed as soon as one node differs; consistent only when every node is known."""
    if NodeVersionStatus.VERSION_MISMATCH in statuses:
        return ClusterVersionStatus.MIXED
    if statuses and all(s is NodeVersionStatus.CURRENT for s in statuses):
        return ClusterVersionStatus.CONSISTENT
    return ClusterVersionStatus.UNKNOWN


def merge_timeline(
    bundles: Mapping[str, Mapping[str, Any]], unreachable: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """One chronological view of every reachable node's runner supervisor.

    ``bundles`` maps node id to that node's bundle (``GET /v1/diagnostics/node``);
    a bundle from an older or newer build may lack blocks, which count as empty.
    """
    runners: list[dict[str, Any]] = []
    entries: list[dict[str, Any]] = []
    for node_id, bundle in bundles.items():
        for runner in _list(bundle.get("supervisorRunners")):
            runners.append({"nodeId": node_id, **runner})
        for entry in _list(bundle.get("flightRecorder")):
            entries.append({"nodeId": node_id, **entry})
    runners.sort(
        key=lambda r: (str(r.get("modelId", "")), _rank(r.get("deviceRank")), str(r["nodeId"]))
    )
    entries.sort(key=lambda e: (str(e.get("at", "")), str(e["nodeId"])))
    return {
        "runners": runners,
        "entries": entries[-MAX_TIMELINE_ENTRIES:],
        "unreachableNodes": list(unreachable),
    }


def _list(value: object) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        return []
    return [item for item in value if isinstance(item, dict)]


def _rank(value: object) -> int:
    return value if isinstance(value, int) else 1 << 30
