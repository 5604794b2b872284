"""What ``/v1/diagnostics`` shows of this node's fabric link: a pure view of its facts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from skulk_core.diagnostics.fabric_document import FabricView
from skulk_core.ids import NodeId
from skulk_daemon.fabric.data_plane import DataStats
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.peers import Peer
from skulk_daemon.fabric.transport import TransportStats


@dataclass(frozen=True, slots=True)
class FabricFacts:
    now: float
    node_id: NodeId
    role: str
    master: NodeId | None
    term: int
    port: int
    transport: str
    peers: Sequence[Peer]
    stats: TransportStats
    counters: LinkCounters
    data: DataStats


def fabric_view(facts: FabricFacts) -> FabricView:
    """The fabric's diagnostics document (camelCase keys; peers by node id)."""
    return {
        "nodeId": facts.node_id,
        "role": facts.role,
        "master": facts.master,
        "term": facts.term,
        "fabricPort": facts.port,
        "dataTransport": facts.transport,
        "peers": [
            {
                "nodeId": peer.node_id,
                "address": peer.address,
                "skulkVersion": peer.skulk_version,
                "transport": peer.transport,
                "lastIdx": peer.last_idx,
                "heardSecondsAgo": round(facts.now - peer.heard_at, 3),
            }
            for peer in sorted(facts.peers, key=lambda p: p.node_id)
        ],
        "frames": {
            "in": facts.stats.frames_in,
            "out": facts.stats.frames_out,
            "droppedOut": facts.stats.dropped_out,
            "received": dict(facts.counters.received),
            "dropped": dict(facts.counters.dropped),
        },
        "refusedPeers": [
            {"address": r.address, "reason": r.reason, "at": r.at.isoformat()}
            for r in facts.stats.refused
        ],
        "dataPlane": {
            "delivered": facts.data.delivered,
            "unknownStream": facts.data.unknown_stream,
            "gaps": facts.data.gaps,
            "overflows": facts.data.overflows,
            "foreignSender": facts.data.foreign,
        },
    }
