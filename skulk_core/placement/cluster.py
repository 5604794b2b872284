"""The facts a placement is planned against: topology, telemetry, committed memory."""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import ModelId, NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.models.context_window import judged_window, kv_window
from skulk_core.placement.backends import (
    card_backends,
    kv_reservation,
    reserves_context_at_load,
    usable_backends,
)
from skulk_core.placement.fit import consumption_bytes
from skulk_core.placement.rpc_pool import ports_in_use
from skulk_core.placement.shapes import instance_shares
from skulk_core.state.shards import Instance, RunnerReady, RunnerRunning, serving_node
from skulk_core.state.state import Connection, State


class ClusterFacts(msgspec.Struct, frozen=True, kw_only=True):
    """A consistent read of everything placement depends on, as values.

    ``committed_bytes`` is memory planned for instances whose runners have not yet
    reached ready: telemetry does not show it used, but it soon will be.
    """

    topology_nodes: tuple[NodeId, ...]
    connections: tuple[Connection, ...] = ()
    telemetry: dict[NodeId, NodeTelemetry] = {}
    committed_bytes: dict[NodeId, int] = {}
    # Per host, the llama.cpp RPC ports pools hold or donors found taken.
    rpc_ports_in_use: dict[str, frozenset[int]] = {}

    def node_label(self, node_id: NodeId) -> str:
        reading = self.telemetry.get(node_id)
        if reading is None or not reading.identity.friendly_name:
            return str(node_id)
        return f"{node_id} ({reading.identity.friendly_name})"


def cluster_facts(
    state: State,
    telemetry: Mapping[NodeId, NodeTelemetry],
    cards: Mapping[ModelId, ModelCard],
) -> ClusterFacts:
    """Facts for planning against ``state``; ``cards`` sizes the instances already placed."""
    return ClusterFacts(
        topology_nodes=state.topology.nodes,
        connections=state.topology.connections,
        telemetry=dict(telemetry),
        committed_bytes=committed_bytes(state, telemetry, cards),
        rpc_ports_in_use=ports_in_use(state.instances.values(), state.instance_failures),
    )


def committed_bytes(
    state: State,
    telemetry: Mapping[NodeId, NodeTelemetry],
    cards: Mapping[ModelId, ModelCard],
) -> dict[NodeId, int]:
    """Per node, the memory its placed shards are planned to take that its telemetry
    does not show in use yet.

    On a CPU node that reports its runners' resident memory, that is every placed
    shard's plan less what the runners hold now: a ready runner has not touched all it
    reserved (llama.cpp's KV cache fills as contexts grow), so its plan still counts.
    Elsewhere (GPU memory is taken at load; an older node reports no runner memory), a
    ready runner's memory shows in telemetry and only shards not ready yet count. An
    instance whose card is no longer in ``cards`` cannot be sized and is skipped.
    """
    committed: dict[NodeId, int] = {}
    resident_known: set[NodeId] = set()
    for node_id, reading in telemetry.items():
        if reading.memory.runners_rss is not None and reading.system.accelerator is None:
            resident_known.add(node_id)
    for instance in state.instances.values():
        card = cards.get(instance.shard_assignments.model_id)
        if card is None:
            continue
        for node_id, planned in _planned_bytes(instance, card, telemetry).items():
            runner = instance.shard_assignments.node_to_runner[node_id]
            ready = isinstance(state.runners.get(runner), RunnerReady | RunnerRunning)
            if ready and node_id not in resident_known:
                continue
            committed[node_id] = committed.get(node_id, 0) + planned
    for node_id in resident_known & set(committed):
        rss = telemetry[node_id].memory.runners_rss
        held = rss.in_bytes if rss is not None else 0
        committed[node_id] = max(0, committed[node_id] - held)
    return committed


def _planned_bytes(
    instance: Instance, card: ModelCard, telemetry: Mapping[NodeId, NodeTelemetry]
) -> dict[NodeId, int]:
    serving = serving_node(instance)
    reading = None if serving is None else telemetry.get(serving)
    shares = instance_shares(card, instance, kv_reservation(card, _backend(card, reading), reading))
    if isinstance(shares, str):
        return {}
    planned: dict[NodeId, int] = {}
    for share in shares:
        backend = _backend(card, telemetry.get(share.node_id))
        tokens = instance.context_token_limit
        if tokens is None:
            # An unstamped instance is sized at the window a default launch judges.
            tokens = judged_window(card)
        window = kv_window(tokens, reserves=reserves_context_at_load(backend))
        planned[share.node_id] = consumption_bytes(share, window)
    return planned


def _backend(card: ModelCard, reading: NodeTelemetry | None) -> str:
    """The engine a node would serve ``card`` with (the card's first, unknown node)."""
    offered = usable_backends(card, reading.resources.backends) if reading else ()
    return (offered or card_backends(card))[0]
