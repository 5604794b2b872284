"""Cluster-wide diagnostics, merged from each node's bundle (pure).

The daemon fans out to every topology member's API; what came back (or the reason
nothing did) is folded here: the version verdicts of ``GET /v1/diagnostics/cluster``
and the cross-rank timeline of ``GET /v1/diagnostics/cluster/timeline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Final

import msgspec

from skulk_core.diagnostics.answers import (
    Timeline,
    TimelineEntry,
    TimelineRunner,
    TimelineSource,
    Unreachable,
)

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
    node_id: str, sources: Mapping[str, TimelineSource], unreachable: Sequence[Unreachable]
) -> Timeline:
    """One chronological view of every reachable node's runner supervisor.

    ``sources`` maps node id to what that node's bundle (``GET /v1/diagnostics/node``)
    says of its runners; ``node_id`` is the node that merged them.
    """
    runners = [
        TimelineRunner(node_id=source_id, **msgspec.structs.asdict(runner))
        for source_id, source in sources.items()
        for runner in source.supervisor_runners
    ]
    entries = [
        TimelineEntry(node_id=source_id, **msgspec.structs.asdict(entry))
        for source_id, source in sources.items()
        for entry in source.flight_recorder
    ]
    runners.sort(key=lambda r: (r.model_id, r.device_rank, r.node_id))
    entries.sort(key=lambda e: (e.at, e.node_id))
    return Timeline(
        node_id=node_id,
        runners=runners,
        entries=entries[-MAX_TIMELINE_ENTRIES:],
        unreachable_nodes=list(unreachable),
    )
