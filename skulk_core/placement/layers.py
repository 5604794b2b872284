"""How a model's layers and bytes are divided among the nodes of a placement."""

from __future__ import annotations

import math
from collections.abc import Sequence

from skulk_core.ids import NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.models.kv_cache import KvCacheBackend
from skulk_core.models.memory_estimate import kv_bytes_per_token, kv_geometry
from skulk_core.placement.backends import F16_ONE, KvReservation
from skulk_core.placement.fit import Share


def split_layers(n_layers: int, capacities: Sequence[int]) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` layer ranges, one per node, in the given order.

    Every node gets at least one layer; the rest are shared in proportion to
    ``capacities`` (largest remainder), or evenly when no node has any capacity.
    The ranges cover ``[0, n_layers)`` exactly. Requires ``n_layers >= len(capacities)``.
    """
    count = len(capacities)
    if count < 1 or n_layers < count:
        raise ValueError(f"cannot split {n_layers} layers over {count} nodes")
    weights = [max(0, c) for c in capacities]
    total = sum(weights)
    if total == 0:
        weights, total = [1] * count, count
    spare = n_layers - count
    exact = [spare * w / total for w in weights]
    counts = [1 + math.floor(e) for e in exact]
    leftover = n_layers - sum(counts)
    # Largest remainder first; ties go to the earlier node so the split is deterministic.
    by_remainder = sorted(range(count), key=lambda i: (-(exact[i] - math.floor(exact[i])), i))
    for i in by_remainder[:leftover]:
        counts[i] += 1
    ranges: list[tuple[int, int]] = []
    start = 0
    for layers in counts:
        ranges.append((start, start + layers))
        start += layers
    return ranges


def _per_layer_kv(card: ModelCard, kv_cache: KvCacheBackend) -> int | None:
    geometry = kv_geometry(card)
    if geometry is None:
        return None
    # Every layer of the geometry holds the same heads, so one layer costs 1/n of the total.
    return kv_bytes_per_token(geometry, kv_cache=kv_cache) // geometry.n_layers


def layer_share(
    card: ModelCard, node_id: NodeId, start: int, end: int, kv: KvReservation = F16_ONE
) -> Share:
    """The share of a node holding layers ``[start, end)`` of ``card``, its KV
    reserved as ``kv`` says."""
    layers = end - start
    per_layer = _per_layer_kv(card, kv.cells)
    return Share(
        node_id=node_id,
        # Rounded up: a node never plans for fewer bytes than it will load.
        weights_bytes=-(-card.storage_size.in_bytes * layers // card.n_layers),
        kv_bytes_per_token=None if per_layer is None else per_layer * layers,
        start_layer=start,
        end_layer=end,
        kv_sequences=kv.sequences,
    )


def tensor_share(
    card: ModelCard, node_id: NodeId, world_size: int, kv: KvReservation = F16_ONE
) -> Share:
    """An even 1/``world_size`` of every layer's weights and KV heads."""
    per_layer = _per_layer_kv(card, kv.cells)
    return Share(
        node_id=node_id,
        weights_bytes=-(-card.storage_size.in_bytes // world_size),
        kv_bytes_per_token=None
        if per_layer is None
        else -(-per_layer * card.n_layers // world_size),
        start_layer=0,
        end_layer=card.n_layers,
        kv_sequences=kv.sequences,
    )


def pipeline_shares(
    card: ModelCard,
    ring: Sequence[NodeId],
    capacities: Sequence[int],
    kv: KvReservation = F16_ONE,
) -> list[Share]:
    ranges = split_layers(card.n_layers, capacities)
    return [
        layer_share(card, node, start, end, kv)
        for node, (start, end) in zip(ring, ranges, strict=True)
    ]


def tensor_shares(
    card: ModelCard, ring: Sequence[NodeId], kv: KvReservation = F16_ONE
) -> list[Share]:
    return [tensor_share(card, node, len(ring), kv) for node in ring]
