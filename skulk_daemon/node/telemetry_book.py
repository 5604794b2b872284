"""The latest telemetry reading of every node this one hears of (its own included):
last write wins, per node, by when it was observed."""

from __future__ import annotations

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import NodeId


class TelemetryBook:
    def __init__(self) -> None:
        self._readings: dict[NodeId, NodeTelemetry] = {}

    def get(self, node_id: NodeId) -> NodeTelemetry | None:
        return self._readings.get(node_id)

    def readings(self) -> dict[NodeId, NodeTelemetry]:
        """A copy: every node's latest reading."""
        return dict(self._readings)

    def record(self, reading: NodeTelemetry) -> None:
        """Last write wins, per node."""
        current = self._readings.get(reading.node_id)
        if current is None or reading.observed_at >= current.observed_at:
            self._readings[reading.node_id] = reading

    def forget(self, node_id: NodeId) -> None:
        self._readings.pop(node_id, None)
