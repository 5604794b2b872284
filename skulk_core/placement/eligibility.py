"""Which nodes may host a card at all, before any memory is divided up."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from skulk_core.cluster.telemetry import NodeTelemetry, Participation
from skulk_core.ids import NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.placement.backends import card_backends, usable_backends
from skulk_core.placement.capacity import MemoryPool, PoolUnknown, memory_pool
from skulk_core.placement.cluster import ClusterFacts


class Candidate(msgspec.Struct, frozen=True, kw_only=True):
    """A node that may host the card: it reported in, hosts models, offers an engine."""

    node_id: NodeId
    label: str
    # The card's engines this node offers, most preferred first (never empty).
    backends: tuple[str, ...]
    telemetry: NodeTelemetry
    committed_bytes: int
    # Available memory in the preferred engine's pool; the node's rank.
    available_bytes: int

    def pool(self, backend: str) -> MemoryPool | PoolUnknown:
        return memory_pool(self.telemetry, backend, self.committed_bytes)


class Ineligible(msgspec.Struct, frozen=True, kw_only=True):
    node_id: NodeId
    label: str
    reason: str
    # The node has not reported telemetry yet: its answer may change in seconds.
    pending: bool = False
    excluded: bool = False


def _names(backends: Iterable[str]) -> str:
    listed = ", ".join(backends)
    return listed or "none"


def screen_node(
    card: ModelCard, facts: ClusterFacts, node_id: NodeId, excluded: frozenset[NodeId]
) -> Candidate | Ineligible:
    label = facts.node_label(node_id)
    if node_id in excluded:
        return Ineligible(node_id=node_id, label=label, reason="is excluded", excluded=True)
    reading = facts.telemetry.get(node_id)
    if reading is None:
        return Ineligible(
            node_id=node_id,
            label=label,
            reason="has not reported its memory and engines yet",
            pending=True,
        )
    if reading.resources.participation == Participation.API_ONLY:
        return Ineligible(
            node_id=node_id,
            label=label,
            reason="serves the API only (participation api_only) and never hosts models",
        )
    backends = usable_backends(card, reading.resources.backends)
    if not backends:
        return Ineligible(
            node_id=node_id,
            label=label,
            reason=f"offers engines [{_names(reading.resources.backends)}] but "
            f"{card.model_id} needs one of [{_names(card_backends(card))}]",
        )
    committed = facts.committed_bytes.get(node_id, 0)
    pool = memory_pool(reading, backends[0], committed)
    if isinstance(pool, PoolUnknown):
        return Ineligible(node_id=node_id, label=label, reason=pool.reason)
    return Candidate(
        node_id=node_id,
        label=label,
        backends=backends,
        telemetry=reading,
        committed_bytes=committed,
        available_bytes=pool.available_bytes,
    )


def screen_nodes(
    card: ModelCard, facts: ClusterFacts, excluded: frozenset[NodeId]
) -> tuple[list[Candidate], list[Ineligible]]:
    """Split the topology into candidates (best first: most available memory) and the rest."""
    candidates: list[Candidate] = []
    ineligible: list[Ineligible] = []
    for node_id in facts.topology_nodes:
        screened = screen_node(card, facts, node_id, excluded)
        if isinstance(screened, Candidate):
            candidates.append(screened)
        else:
            ineligible.append(screened)
    candidates.sort(key=lambda c: (-c.available_bytes, c.node_id))
    return candidates, ineligible
