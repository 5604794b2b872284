"""Membership: who belongs to the cluster, as the master sees it.

The master removes a node it has not heard from (by any frame) for
``node_timeout_seconds``, once ``settle_seconds`` have passed since its election:
the node's instances are recorded as failed, naming it, and it leaves the
topology. A node heard again re-registers. Every node reports its live fabric
connections as topology edges, and forgets the telemetry of nodes that are
neither members nor live.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from skulk_core.ids import NodeId, new_command_id
from skulk_core.state.commands import RemoveNode, ReportConnections
from skulk_core.state.state import Connection
from skulk_daemon.fabric.peers import Peer, PeerBook
from skulk_daemon.node.node import Node

if TYPE_CHECKING:
    from skulk_daemon.fabric.settings import FabricSettings

log = logging.getLogger(__name__)


def multiaddr(address: str) -> str:
    """``host:port`` as the libp2p-style address ``/state`` shows on an edge."""
    host, _, port = address.rpartition(":")
    if host.startswith("["):
        return f"/ip6/{host.strip('[]')}/tcp/{port}"
    return f"/ip4/{host}/tcp/{port}"


class Membership:
    def __init__(self, node: Node, peers: PeerBook, settings: FabricSettings) -> None:
        self._node = node
        self._peers = peers
        self._settings = settings
        self._heard: dict[NodeId, float] = {}
        self._removing: set[NodeId] = set()
        self._became_master_at = 0.0
        self._reported: tuple[Connection, ...] | None = None

    def heard(self, node_id: NodeId, now: float) -> None:
        """Any frame from ``node_id`` is a sign of life."""
        self._heard[node_id] = now

    def became_master(self, now: float) -> None:
        self._became_master_at = now
        self._removing.clear()

    def rejoined(self, node_id: NodeId) -> None:
        self._removing.discard(node_id)

    def remove_unseen(self, now: float) -> None:
        """The master's sweep: report every member silent past the timeout."""
        settings = self._settings
        if now - self._became_master_at < settings.settle_seconds:
            return
        node = self._node
        for node_id in node.state.topology.nodes:
            if node_id == node.node_id or node_id in self._removing:
                continue
            heard = max(self._heard.get(node_id, 0.0), self._became_master_at)
            if now - heard > settings.node_timeout_seconds:
                self._removing.add(node_id)
                log.warning("node %s unseen for %.0f s: removing it", node_id, now - heard)
                node.report(
                    RemoveNode(
                        command_id=new_command_id(),
                        node_id=node_id,
                        reason=f"unseen for {settings.node_timeout_seconds:g} s",
                        observed_at=datetime.now(UTC),
                    )
                )

    def report_connections(self, live: Sequence[Peer]) -> None:
        """Report this node's live connections to members, when they changed."""
        node = self._node
        members = set(node.state.topology.nodes)
        connections = tuple(
            sorted(
                (
                    Connection(
                        local_node_id=node.node_id,
                        send_back_node_id=peer.node_id,
                        sink_multiaddr=multiaddr(peer.address),
                        session=True,
                    )
                    for peer in live
                    if peer.node_id in members
                ),
                key=lambda c: c.send_back_node_id,
            )
        )
        if connections == self._reported:
            return
        self._reported = connections
        node.report(
            ReportConnections(
                command_id=new_command_id(), node_id=node.node_id, connections=connections
            )
        )

    def forget_departed(self, live: Sequence[Peer]) -> None:
        node = self._node
        members = set(node.state.topology.nodes)
        alive = {peer.node_id for peer in live}
        for node_id in list(node.view().telemetry):
            if node_id != node.node_id and node_id not in members and node_id not in alive:
                node.forget_telemetry(node_id)
