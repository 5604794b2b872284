"""This node's performance envelopes: every local generation's concurrency, time to
first token and decode rate, by hardware, model, backend and quantization; and the
cluster's, asked of every member."""

from __future__ import annotations

from skulk_core.chat.generation import EngineChunk, FinishChunk
from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.diagnostics.answers import ClusterEnvelopes, MemberEnvelopes, NodeEnvelopes
from skulk_core.diagnostics.envelopes import EnvelopeKey, Envelopes, Sample
from skulk_core.ids import ModelId, NodeId
from skulk_core.models.catalog import CatalogEntry
from skulk_daemon.diagnostics.views import decoded
from skulk_daemon.node import fanout
from skulk_daemon.node.node import Node


def envelope_key(
    model_id: ModelId, reading: NodeTelemetry | None, entry: CatalogEntry | None
) -> EnvelopeKey:
    """Where a generation of ``model_id`` on this node counts: its hardware (the
    accelerator, else the CPU), backend and quantization as far as they are known."""
    hardware, backend = "unknown", "cpu"
    if reading is not None:
        accelerator = reading.system.accelerator
        hardware = (
            f"{accelerator.vendor} {accelerator.name} x{accelerator.count}"
            if accelerator is not None
            else f"cpu {reading.system.cpu_model} x{reading.system.cpu_count}"
        )
        backend = reading.resources.backends[0] if reading.resources.backends else backend
    quantization = (entry.card.quantization if entry is not None else None) or "unknown"
    return EnvelopeKey(hardware, model_id, f"llama.cpp/{backend}", quantization)


class PerformanceEnvelopes:
    def __init__(self, node: Node) -> None:
        self._node = node
        self.envelopes = Envelopes()

    def observe(self, model_id: ModelId, chunk: EngineChunk, served: str) -> None:
        """A generation ended (the supervisor's listener): count it if served here."""
        if served != "local" or not isinstance(chunk, FinishChunk):
            return
        stats = chunk.stats
        key = envelope_key(model_id, self._node.own_telemetry(), self._node.catalog().get(model_id))
        self.envelopes.add(
            key,
            Sample(
                concurrency=stats.in_flight_at_admission,
                ttft_ms=stats.time_to_first_token_ms,
                decode_tps=stats.generation_tps,
            ),
        )

    def report(self) -> NodeEnvelopes:
        """``GET /v1/diagnostics/performance-envelopes``: this node's curves."""
        return NodeEnvelopes(node_id=self._node.node_id, envelopes=self.envelopes.report())

    async def cluster_report(self, members: list[NodeId]) -> ClusterEnvelopes:
        """Every member's envelopes; unreachable members (or a malformed answer) as
        explicit failures."""
        others = [n for n in members if n != self._node.node_id]
        path = "/v1/diagnostics/performance-envelopes"
        answers = await fanout.ask_all(self._node, others, "GET", path)
        own = self.report()
        nodes = [MemberEnvelopes(node_id=own.node_id, ok=True, envelopes=own.envelopes)]
        for answer in answers:
            got = decoded(answer, NodeEnvelopes)
            if isinstance(got, NodeEnvelopes):
                nodes.append(
                    MemberEnvelopes(node_id=answer.node_id, ok=True, envelopes=got.envelopes)
                )
            else:
                nodes.append(MemberEnvelopes(node_id=answer.node_id, ok=False, error=got))
        return ClusterEnvelopes(nodes=nodes)
