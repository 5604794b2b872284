"""Instance shapes: what placement mints for an engine and node count, and reading
the shares back out of an instance someone else built."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from skulk_core.cards import ModelCard
from skulk_core.ids import ModelId, NodeId, RunnerId
from skulk_core.placement.backends import BACKEND_LLAMA_CPP
from skulk_core.placement.fit import Share
from skulk_core.placement.id_factory import IdFactory
from skulk_core.placement.layers import layer_share, tensor_share
from skulk_core.shards import (
    Instance,
    InstanceMeta,
    LlamaRpcInstance,
    MlxJacclInstance,
    MlxRingInstance,
    PipelineShardMetadata,
    RpcDonorShardMetadata,
    ShardAssignments,
    Sharding,
    ShardMetadata,
    TensorShardMetadata,
)


class Unsupported(msgspec.Struct, frozen=True, kw_only=True):
    """A shape this node cannot run. (Not a bare ``str``: ``InstanceMeta`` is one.)"""

    reason: str


def minted_meta(
    backend: str, requested: InstanceMeta, node_count: int
) -> InstanceMeta | Unsupported:
    """The instance kind placement mints, which may differ from the one asked about.

    One node has no interconnect to choose: it is always a single-runner
    ``MlxRingInstance``, whatever the engine. Across nodes, llama.cpp pools GGUF
    models over RPC (``LlamaRpc``), which this node cannot run yet; MLX rings use
    the requested ``MlxRing`` or ``MlxJaccl``.
    """
    if node_count == 1:
        return InstanceMeta.MLX_RING
    if backend == BACKEND_LLAMA_CPP:
        return Unsupported(
            reason="multi-node GGUF pooling (LlamaRpc: one driver node plus memory donors) "
            "is not available on this build yet; llama.cpp places a model on one node"
        )
    if requested == InstanceMeta.LLAMA_RPC:
        return Unsupported(
            reason=f"LlamaRpc pools GGUF models over llama.cpp; this model is served by {backend}"
        )
    return requested


def instance_meta_of(instance: Instance) -> InstanceMeta:
    match instance:
        case MlxRingInstance():
            return InstanceMeta.MLX_RING
        case MlxJacclInstance():
            return InstanceMeta.MLX_JACCL
        case LlamaRpcInstance():
            return InstanceMeta.LLAMA_RPC


def mint_instance(
    model_id: ModelId,
    *,
    n_layers: int,
    meta: InstanceMeta,
    sharding: Sharding,
    shares: Sequence[Share],
    context_tokens: int | None,
    ids: IdFactory,
) -> Instance:
    """The instance for ``shares`` (in ring order): one fresh runner per node."""
    instance_id = ids.instance_id()
    node_to_runner: dict[NodeId, RunnerId] = {}
    runner_to_shard: dict[RunnerId, ShardMetadata] = {}
    shard_type = PipelineShardMetadata if sharding == Sharding.PIPELINE else TensorShardMetadata
    for rank, share in enumerate(shares):
        runner = ids.runner_id()
        node_to_runner[share.node_id] = runner
        runner_to_shard[runner] = shard_type(
            model_id=model_id,
            device_rank=rank,
            world_size=len(shares),
            start_layer=share.start_layer,
            end_layer=share.end_layer,
            n_layers=n_layers,
        )
    assignments = ShardAssignments(
        model_id=model_id,
        node_to_runner=node_to_runner,
        runner_to_shard=runner_to_shard,
    )
    kind = MlxJacclInstance if meta == InstanceMeta.MLX_JACCL else MlxRingInstance
    return kind(
        instance_id=instance_id, shard_assignments=assignments, context_token_limit=context_tokens
    )


def sharding_of(instance: Instance) -> Sharding | None:
    shards = list(instance.shard_assignments.runner_to_shard.values())
    if shards and all(isinstance(s, TensorShardMetadata) for s in shards):
        return Sharding.TENSOR
    if shards and all(isinstance(s, PipelineShardMetadata) for s in shards):
        return Sharding.PIPELINE
    return None


def instance_shares(card: ModelCard, instance: Instance) -> list[Share] | str:
    """The instance's shares in device-rank order, or why its shards do not add up."""
    assignments = instance.shard_assignments
    runners = list(assignments.node_to_runner.values())
    if not runners:
        return "the instance assigns no nodes"
    if len(set(runners)) != len(runners):
        return "the instance assigns one runner to two nodes"
    if set(runners) != set(assignments.runner_to_shard):
        return "nodeToRunner and runnerToShard name different runners"
    by_rank = sorted(
        ((assignments.runner_to_shard[r], node) for node, r in assignments.node_to_runner.items()),
        key=lambda item: item[0].device_rank,
    )
    shards = [shard for shard, _ in by_rank]
    if any(isinstance(s, RpcDonorShardMetadata) for s in shards):
        return "RPC donor shards (LlamaRpc pooling) are not available on this build yet"
    sharding = sharding_of(instance)
    if sharding is None:
        return "the instance mixes Pipeline and Tensor shards"
    world = len(shards)
    if [s.device_rank for s in shards] != list(range(world)):
        return f"device ranks must be 0..{world - 1}, one per node"
    layered = [s for s in shards if isinstance(s, PipelineShardMetadata | TensorShardMetadata)]
    for shard in layered:
        if shard.world_size != world:
            return f"a shard says world size {shard.world_size} but the instance has {world} nodes"
        if shard.n_layers != card.n_layers:
            return f"a shard says {shard.n_layers} layers but {card.model_id} has {card.n_layers}"
    nodes = [node for _, node in by_rank]
    if sharding == Sharding.TENSOR:
        if any((s.start_layer, s.end_layer) != (0, card.n_layers) for s in layered):
            return f"every Tensor shard holds layers [0, {card.n_layers})"
        return [tensor_share(card, node, world) for node in nodes]
    expected_start = 0
    for shard in layered:
        if shard.start_layer != expected_start or shard.end_layer <= shard.start_layer:
            return f"Pipeline shards must cover layers [0, {card.n_layers}) in order, without gaps"
        expected_start = shard.end_layer
    if expected_start != card.n_layers:
        return f"Pipeline shards must cover layers [0, {card.n_layers}) in order, without gaps"
    return [
        layer_share(card, node, shard.start_layer, shard.end_layer)
        for shard, node in zip(layered, nodes, strict=True)
    ]
