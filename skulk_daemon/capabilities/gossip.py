"""What this node advertises on the telemetry plane: capability tags and the
capability nodes it hosts.

Both ride the node's own telemetry reading (``NodeTelemetry.capabilities`` and
``capability_nodes``), which every beat carries to every peer, so a node that joins
later learns them too. A change is written into the current reading at once (the
next beat carries it, within ~1.5 s) and every later reading includes it; an
empty set is itself a reading, which is how peers clear a withdrawn entry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final

import msgspec

from skulk_core.extensions.capability_nodes import (
    MAX_NODES_PER_HOST,
    CapabilityNodeSummary,
    CapabilityNodeSurface,
)

if TYPE_CHECKING:
    from skulk_daemon.node.node import Node

log = logging.getLogger(__name__)

TEST_NODE_ENV: Final = "SKULK_TEST_CAPABILITY_NODE"
MAX_TAGS: Final = 256
MAX_TAG_LENGTH: Final = 256

Snapshot = tuple[tuple[str, ...], tuple[CapabilityNodeSummary, ...]]


class Gossip:
    def __init__(self, on_change: Callable[[Snapshot], None]) -> None:
        self._tags: set[str] = set()
        self._nodes: dict[tuple[str, str], CapabilityNodeSummary] = {}
        self._on_change = on_change
        # NOTE: the telemetry publisher reads the snapshot from a worker thread.
        self._lock = threading.Lock()
        self._snapshot: Snapshot = ((), ())

    def snapshot(self) -> Snapshot:
        with self._lock:
            return self._snapshot

    def tags(self) -> frozenset[str]:
        return frozenset(self._tags)

    def advertise(self, tag: str) -> None:
        """Additive and idempotent. Raises ``ValueError`` for a non-string, an empty or
        over-long tag, or one tag too many."""
        if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH:
            raise ValueError(f"a capability tag is a string of 1 to {MAX_TAG_LENGTH} characters")
        if tag in self._tags:
            return
        if len(self._tags) >= MAX_TAGS:
            raise ValueError(f"a node advertises at most {MAX_TAGS} capability tags")
        self._tags.add(tag)
        self._changed()

    def withdraw(self, tag: str) -> None:
        if tag in self._tags:
            self._tags.discard(tag)
            self._changed()

    def publish_node(self, summary: CapabilityNodeSummary) -> bool:
        """Add or replace (same ``plugin_id`` and ``node_id``) a summary; a seventeenth
        distinct one is refused with a warning."""
        if not isinstance(summary, CapabilityNodeSummary):
            raise TypeError("publish a CapabilityNodeSummary")
        if summary.key not in self._nodes and len(self._nodes) >= MAX_NODES_PER_HOST:
            log.warning(
                "capability node %s/%s refused: a host publishes at most %d",
                summary.plugin_id,
                summary.node_id,
                MAX_NODES_PER_HOST,
            )
            return False
        self._nodes[summary.key] = summary
        self._changed()
        return True

    def withdraw_node(self, plugin_id: str, node_id: str) -> bool:
        if self._nodes.pop((plugin_id, node_id), None) is None:
            return False
        self._changed()
        return True

    def _changed(self) -> None:
        snapshot = (
            tuple(sorted(self._tags)),
            tuple(self._nodes[k] for k in sorted(self._nodes)),
        )
        with self._lock:
            self._snapshot = snapshot
        self._on_change(snapshot)


def publish(node: Node, snapshot: Snapshot) -> None:
    """Write ``snapshot`` into ``node``'s own telemetry reading (the next beat carries
    it); before the first reading there is nothing to write into, and it carries it."""
    own = node.own_telemetry()
    if own is None:
        return
    tags, nodes = snapshot
    node.record_telemetry(
        msgspec.structs.replace(
            own, capabilities=tags, capability_nodes=nodes, observed_at=datetime.now(UTC)
        )
    )


def stand_in_node(url: str | None) -> CapabilityNodeSummary | None:
    """The capability node tests publish through :data:`TEST_NODE_ENV` (its surface at
    ``url``); None when unset or invalid (logged)."""
    if not url:
        return None
    try:
        return CapabilityNodeSummary(
            plugin_id="skulk.test",
            node_id="stand-in",
            bundle_id="skulk.test",
            version="0.0.0",
            title="Test capability node",
            status="ready",
            owner_available=True,
            surfaces=(CapabilityNodeSurface(surface_id="main", title="Open", url=url),),
        )
    except ValueError as exc:
        log.error("%s ignored: %s", TEST_NODE_ENV, exc)
        return None
