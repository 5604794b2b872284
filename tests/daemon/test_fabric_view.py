"""The fabric's diagnostics document, from the facts the agent gathers."""

from __future__ import annotations

from datetime import UTC, datetime

from skulk_core.cluster.election import Rank
from skulk_core.ids import NodeId
from skulk_daemon.fabric.cluster_view import FabricFacts, fabric_view
from skulk_daemon.fabric.data_plane import DataStats
from skulk_daemon.fabric.link import LinkCounters
from skulk_daemon.fabric.peers import Peer
from skulk_daemon.fabric.transport import RefusedPeer, TransportStats


def _peer(node: str, heard_at: float) -> Peer:
    return Peer(
        node_id=NodeId(node),
        address=f"{node}.lan:52416",
        rank=Rank(node_id=NodeId(node)),
        skulk_version="1.0",
        transport="zmq",
        last_idx=7,
        heard_at=heard_at,
    )


def test_the_view_names_peers_in_node_order_and_counts_frames() -> None:
    counters = LinkCounters()
    counters.dropped["stale_session"] += 2
    counters.received["control"] += 5
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    view = fabric_view(
        FabricFacts(
            now=10.0,
            node_id=NodeId("a"),
            role="master",
            master=NodeId("a"),
            term=3,
            port=52416,
            transport="zmq",
            peers=(_peer("c", 9.5), _peer("b", 8.0)),
            stats=TransportStats(
                frames_in=4,
                frames_out=6,
                dropped_out=1,
                refused=(RefusedPeer(address="10.0.0.9", reason="zap", at=at),),
                connected=(),
                handler_errors=0,
            ),
            counters=counters,
            data=DataStats(delivered=3, gaps=1),
        )
    )
    assert [p["nodeId"] for p in view["peers"]] == ["b", "c"]
    assert view["peers"][0]["heardSecondsAgo"] == 2.0
    assert view["frames"] == {
        "in": 4,
        "out": 6,
        "droppedOut": 1,
        "received": {"control": 5},
        "dropped": {"stale_session": 2},
    }
    assert view["refusedPeers"] == [{"address": "10.0.0.9", "reason": "zap", "at": at.isoformat()}]
    assert view["dataPlane"]["delivered"] == 3
    assert view["dataPlane"]["gaps"] == 1
    assert (view["role"], view["master"], view["term"]) == ("master", "a", 3)
