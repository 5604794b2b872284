"""The ``GET /state`` document: replicated State plus the telemetry rendered beside it."""

from __future__ import annotations

from collections.abc import Mapping

from skulk_core.ids import NodeId
from skulk_core.state import State
from skulk_core.telemetry import NodeHealth, NodeTelemetry
from skulk_core.wire import JsonValue, to_wire


def render_state(
    state: State,
    telemetry: Mapping[NodeId, NodeTelemetry],
    health: Mapping[NodeId, NodeHealth],
) -> dict[str, JsonValue]:
    body = to_wire(state)
    assert isinstance(body, dict)
    nodes = sorted(telemetry)
    body["nodeIdentities"] = {n: to_wire(telemetry[n].identity) for n in nodes}
    body["nodeMemory"] = {n: to_wire(telemetry[n].memory) for n in nodes}
    body["nodeSystem"] = {n: to_wire(telemetry[n].system) for n in nodes}
    body["nodeResources"] = {n: to_wire(telemetry[n].resources) for n in nodes}
    body["nodeHealth"] = {n: to_wire(health[n]) for n in sorted(health)}
    # Filled by the extension capability fabric; present so clients can rely on the keys.
    body["nodeCapabilities"] = {}
    body["capabilityNodes"] = {}
    return body
