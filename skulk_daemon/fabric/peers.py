"""Who is out there: fabric addresses, learned node ids, and what each last said."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from skulk_core.cluster.election import Rank
from skulk_core.ids import NodeId


def fabric_address(host: str, port: int) -> str:
    """``host:port`` as ZeroMQ's tcp endpoints want it (IPv6 in brackets)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def parse_peer(text: str) -> str:
    """Validate an operator-given ``host:port`` peer; raises ``ValueError``."""
    host, sep, port = text.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"peer {text!r} must be host:port")
    return fabric_address(host.strip("[]"), int(port))


@dataclass(slots=True)
class Peer:
    node_id: NodeId
    address: str
    rank: Rank
    skulk_version: str
    transport: str
    last_idx: int = -1
    heard_at: float = 0.0


@dataclass(slots=True)
class PeerBook:
    """Addresses to dial (explicit, discovered or learned) and the nodes behind them."""

    own_id: NodeId
    dial: set[str] = field(default_factory=set)
    own_addresses: set[str] = field(default_factory=set)
    """Addresses that turned out to be this node (an explicit peer list naming itself)."""
    by_node: dict[NodeId, Peer] = field(default_factory=dict)
    reply_to: dict[NodeId, str] = field(default_factory=dict)
    """Where to answer nodes heard from but not yet beaten (from the frame's source
    address and its header's reply port)."""

    def want(self, address: str) -> bool:
        """Add an address to dial; False when it is known to be this node."""
        if address in self.own_addresses:
            return False
        self.dial.add(address)
        return True

    def learned(self, peer: Peer) -> str | None:
        """Record ``peer``; returns a previous address it moved from, if any."""
        previous = self.by_node.get(peer.node_id)
        self.by_node[peer.node_id] = peer
        self.reply_to.pop(peer.node_id, None)
        self.dial.add(peer.address)
        if previous is not None and previous.address != peer.address:
            return previous.address
        return None

    def address_of(self, node_id: NodeId) -> str | None:
        peer = self.by_node.get(node_id)
        return self.reply_to.get(node_id) if peer is None else peer.address

    def live(self, now: float, timeout: float) -> list[Peer]:
        return [p for p in self.by_node.values() if now - p.heard_at <= timeout]


MAX_PENDING_DIALS: Final = 32
"""Discovered addresses dialed and not yet heard from as a member, at most. Each dial
is a socket and a file descriptor: a flood of fake mDNS services must not exhaust them."""
DIAL_GRACE_SECONDS: Final = 30.0
"""A discovered address that sends no beat in this long is hung up on and forgotten."""


@dataclass(slots=True)
class PendingDials:
    """Discovered addresses dialed that have not answered as a member yet."""

    limit: int = MAX_PENDING_DIALS
    grace: float = DIAL_GRACE_SECONDS
    since: dict[str, float] = field(default_factory=dict)
    refused: int = 0
    """Discovered addresses not dialed because ``limit`` were pending."""

    def admit(self, address: str, now: float) -> bool:
        """Whether to dial ``address``; counts a refusal when the limit is reached."""
        if address in self.since:
            return True
        if len(self.since) >= self.limit:
            self.refused += 1
            return False
        self.since[address] = now
        return True

    def answered(self, address: str) -> None:
        self.since.pop(address, None)

    def expired(self, now: float) -> list[str]:
        """Addresses past their grace, removed from the pending set."""
        gone = [address for address, at in self.since.items() if now - at > self.grace]
        for address in gone:
            del self.since[address]
        return gone
