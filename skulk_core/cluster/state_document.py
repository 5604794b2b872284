"""The ``GET /state`` document: replicated State plus the telemetry rendered beside it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from skulk_core.cluster.telemetry import NodeHealth, NodeTelemetry
from skulk_core.extensions.capability_nodes import STALE_AFTER_SECONDS, CapabilityNodeSummary
from skulk_core.ids import NodeId
from skulk_core.models.card_digest import card_digest
from skulk_core.state.state import State
from skulk_core.wire import JsonValue, to_wire


def render_state(
    state: State,
    telemetry: Mapping[NodeId, NodeTelemetry],
    health: Mapping[NodeId, NodeHealth],
    now: datetime | None = None,
) -> dict[str, JsonValue]:
    """The document; ``now`` ages out capability nodes whose host went quiet (omit it
    to keep every reading)."""
    body = to_wire(state)
    assert isinstance(body, dict)
    # Pinned cards are long (chat templates); /state names each by its digest.
    body.pop("instanceCards", None)
    body["instanceCardDigests"] = {
        instance_id: card_digest(card) for instance_id, card in sorted(state.instance_cards.items())
    }
    nodes = sorted(telemetry)
    body["nodeIdentities"] = {n: to_wire(telemetry[n].identity) for n in nodes}
    body["nodeMemory"] = {n: to_wire(telemetry[n].memory) for n in nodes}
    body["nodeSystem"] = {n: to_wire(telemetry[n].system) for n in nodes}
    body["nodeResources"] = {n: to_wire(telemetry[n].resources) for n in nodes}
    body["nodeHealth"] = {n: to_wire(health[n]) for n in sorted(health)}
    body["nodeCapabilities"] = {
        n: list(telemetry[n].capabilities) for n in nodes if telemetry[n].capabilities
    }
    body["capabilityNodes"] = {
        n: [_capability_node(s, telemetry[n].observed_at) for s in telemetry[n].capability_nodes]
        for n in nodes
        if telemetry[n].capability_nodes
        and (now is None or (now - telemetry[n].observed_at).total_seconds() <= STALE_AFTER_SECONDS)
    }
    return body


def _capability_node(summary: CapabilityNodeSummary, observed_at: datetime) -> JsonValue:
    rendered = to_wire(summary)
    assert isinstance(rendered, dict)
    rendered["observedAt"] = to_wire(observed_at)
    return rendered
