"""What a node's fabric is told at start: where it listens, whom it dials, its timings."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FabricSettings:
    bind_host: str = "0.0.0.0"
    port: int = 52416
    peers: tuple[str, ...] = ()
    force_master: bool = False
    beat_seconds: float = 0.5
    """How often a node beats to every peer; the election's master timeout
    (skulk_core.cluster.election.DEFAULT_MASTER_TIMEOUT_SECONDS) is two beats and a
    margin, which is what bounds failover."""
    node_timeout_seconds: float = 10.0
    """Unseen this long, a node is removed from the cluster (by the master)."""
    settle_seconds: float = 5.0
    """After an election, how long the new master waits before removing anyone."""
    discovery_grace_seconds: float = 2.0
    """How long a node listens for a sitting master before it campaigns (0 when it
    has no way to find peers: no explicit peers and no mDNS)."""
