"""Counters of this node's telemetry transport: its readings ride every ``Beat``.

Aggregates only (``GET /v1/diagnostics/telemetry``): never a reading, a node map or
a model name. ``noPeerPublishes`` growing on a node that should be connected means
its beats reach nobody, so it will not appear in membership.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Final

NETWORK_QUEUE_CAPACITY: Final = 1
"""Readings waiting for the next beat: one (the newest replaces an unsent one)."""


@dataclass(slots=True)
class TelemetryStats:
    beat_seconds: float
    offered: int = 0
    coalesced: int = 0
    publishes: int = 0
    publish_failures: int = 0
    publish_bytes: int = 0
    no_peer_publishes: int = 0
    pending_since: float | None = None
    last_publish_at: float | None = None

    def reading_offered(self, now: float) -> None:
        """A fresh reading was recorded; an unsent one before it is coalesced."""
        self.offered += 1
        if self.pending_since is None:
            self.pending_since = now
        else:
            self.coalesced += 1

    def beat(self, now: float, sent: int, failed: int, size: int, has_reading: bool) -> None:
        if sent + failed == 0:
            self.no_peer_publishes += 1
        self.publishes += sent
        self.publish_failures += failed
        self.publish_bytes += size * sent
        if sent:
            self.last_publish_at = now
            if has_reading:
                self.pending_since = None

    def report(self, now: float | None = None) -> dict[str, object]:
        now = time.monotonic() if now is None else now
        return {
            "beatSeconds": self.beat_seconds,
            "admissionCapacity": NETWORK_QUEUE_CAPACITY,
            "networkQueueCapacity": NETWORK_QUEUE_CAPACITY,
            "currentDepth": 0 if self.pending_since is None else 1,
            "maxDepth": NETWORK_QUEUE_CAPACITY,
            "offered": self.offered,
            "coalesced": self.coalesced,
            "dropped": 0,
            "publishes": self.publishes,
            "publishFailures": self.publish_failures,
            "publishBytes": self.publish_bytes,
            "noPeerPublishes": self.no_peer_publishes,
            "oldestPendingAgeSeconds": None
            if self.pending_since is None
            else round(now - self.pending_since, 3),
            "lastSuccessfulPublishAgeSeconds": None
            if self.last_publish_at is None
            else round(now - self.last_publish_at, 3),
        }
