"""A node's own check before it loads its share: does it still fit here, now?

Placement planned against telemetry that was seconds old; by the time a runner
starts, something else on the machine may have taken the memory. A node that
finds its share no longer fits refuses it (``placement_refused:<node>``) instead
of swapping or being killed mid-load, and the repair loop places the model again
without it.
"""

from __future__ import annotations

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import NodeId
from skulk_core.models.cards import ModelCard
from skulk_core.models.context_window import kv_window
from skulk_core.placement.backends import F16_ONE, KvReservation, reserves_context_at_load
from skulk_core.placement.capacity import PoolUnknown, memory_pool
from skulk_core.placement.fit import Site, fits, shortfall_message
from skulk_core.placement.layers import layer_share, tensor_share
from skulk_core.state.shards import ShardMetadata, TensorShardMetadata


def local_shortfall(
    card: ModelCard,
    shard: ShardMetadata,
    *,
    node_id: NodeId,
    context_tokens: int,
    reading: NodeTelemetry,
    backend: str,
    kv: KvReservation = F16_ONE,
) -> str | None:
    """Why ``shard`` does not fit on this node right now (the arithmetic), or None;
    its KV reserved as ``kv`` says (what this node's runner will reserve)."""
    if isinstance(shard, TensorShardMetadata):
        share = tensor_share(card, node_id, shard.world_size, kv)
    else:
        share = layer_share(card, node_id, shard.start_layer, shard.end_layer, kv)
    pool = memory_pool(reading, backend)
    if isinstance(pool, PoolUnknown):
        return None  # placement already judged it; nothing better to go on here
    tokens = kv_window(context_tokens, reserves=reserves_context_at_load(backend))
    site = Site(share=share, pool=pool, label=str(node_id))
    return None if fits(site, tokens) else shortfall_message(site, tokens)
