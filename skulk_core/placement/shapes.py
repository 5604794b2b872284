"""Instance shapes: what placement mints for an engine and node count, and reading
the shares back out of an instance someone else built."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from skulk_core.ids import ModelId, NodeId, RunnerId
from skulk_core.models.cards import ModelCard
from skulk_core.placement.backends import BACKEND_LLAMA_CPP, F16_ONE, KvReservation
from skulk_core.placement.fit import Share
from skulk_core.placement.id_factory import IdFactory
from skulk_core.placement.layers import layer_share, tensor_share
from skulk_core.placement.rpc_pool import split_endpoint
from skulk_core.state.shards import (
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
    backend: str,
    requested: InstanceMeta,
    node_count: int,
    sharding: Sharding = Sharding.PIPELINE,
) -> InstanceMeta | Unsupported:
    """The instance kind placement mints, which may differ from the one asked about.

    One node has no interconnect to choose: it is always a single-runner
    ``MlxRingInstance``, whatever the engine. Across nodes, llama.cpp pools a GGUF
    model over RPC (``LlamaRpc``: a driver plus memory donors, split by layers)
    whichever meta was asked about; MLX rings use the requested ``MlxRing`` or
    ``MlxJaccl``.
    """
    if node_count == 1:
        return InstanceMeta.MLX_RING
    if backend == BACKEND_LLAMA_CPP:
        if sharding == Sharding.TENSOR:
            return Unsupported(
                reason="llama.cpp pools a GGUF model across nodes by layers (LlamaRpc, "
                "Pipeline); Tensor sharding across nodes is not supported"
            )
        return InstanceMeta.LLAMA_RPC
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
    rpc_endpoints: Mapping[NodeId, str] | None = None,
) -> Instance:
    """The instance for ``shares`` (in ring order): one fresh runner per node.

    A ``LlamaRpc`` instance is driven from ``shares[0]``; every other node is a
    donor serving its layers at ``rpc_endpoints[node]``. An ``MlxRing`` across nodes
    takes the same map as its ring's gates (every node, ``shares[0]`` serving).
    """
    instance_id = ids.instance_id()
    node_to_runner: dict[NodeId, RunnerId] = {}
    runner_to_shard: dict[RunnerId, ShardMetadata] = {}
    endpoints = dict(rpc_endpoints or {})
    shard_type = PipelineShardMetadata if sharding == Sharding.PIPELINE else TensorShardMetadata
    for rank, share in enumerate(shares):
        runner = ids.runner_id()
        node_to_runner[share.node_id] = runner
        if meta == InstanceMeta.LLAMA_RPC and rank > 0:
            parts = split_endpoint(endpoints[share.node_id])
            assert parts is not None, "assign_endpoints makes host:port endpoints"
            runner_to_shard[runner] = RpcDonorShardMetadata(
                model_id=model_id,
                device_rank=rank,
                world_size=len(shares),
                rpc_port=parts[1],
                start_layer=share.start_layer,
                end_layer=share.end_layer,
                n_layers=n_layers,
            )
            continue
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
    match meta:
        case InstanceMeta.LLAMA_RPC:
            return LlamaRpcInstance(
                instance_id=instance_id,
                shard_assignments=assignments,
                context_token_limit=context_tokens,
                driver_node_id=shares[0].node_id,
                rpc_endpoints=endpoints,
            )
        case InstanceMeta.MLX_JACCL:
            return MlxJacclInstance(
                instance_id=instance_id,
                shard_assignments=assignments,
                context_token_limit=context_tokens,
            )
        case InstanceMeta.MLX_RING:
            return MlxRingInstance(
                instance_id=instance_id,
                shard_assignments=assignments,
                context_token_limit=context_tokens,
                ring_endpoints=endpoints,
            )


def sharding_of(instance: Instance) -> Sharding | None:
    """How the instance splits its model; an RPC pool splits by layers (Pipeline)."""
    shards = list(instance.shard_assignments.runner_to_shard.values())
    if isinstance(instance, LlamaRpcInstance):
        layered = [s for s in shards if not isinstance(s, RpcDonorShardMetadata)]
        return (
            Sharding.PIPELINE
            if all(isinstance(s, PipelineShardMetadata) for s in layered)
            else None
        )
    if shards and all(isinstance(s, TensorShardMetadata) for s in shards):
        return Sharding.TENSOR
    if shards and all(isinstance(s, PipelineShardMetadata) for s in shards):
        return Sharding.PIPELINE
    return None


def instance_shares(
    card: ModelCard, instance: Instance, kv: KvReservation = F16_ONE
) -> list[Share] | str:
    """The instance's shares in device-rank order, their KV reserved as ``kv`` says,
    or why its shards do not add up."""
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
    pool_problem = _rpc_pool_problem(instance, shards, [node for _, node in by_rank])
    if pool_problem is not None:
        return pool_problem
    sharding = sharding_of(instance)
    if sharding is None:
        return "the instance mixes Pipeline and Tensor shards"
    world = len(shards)
    if [s.device_rank for s in shards] != list(range(world)):
        return f"device ranks must be 0..{world - 1}, one per node"
    for shard in shards:
        if shard.world_size != world:
            return f"a shard says world size {shard.world_size} but the instance has {world} nodes"
        if shard.n_layers != card.n_layers:
            return f"a shard says {shard.n_layers} layers but {card.model_id} has {card.n_layers}"
    nodes = [node for _, node in by_rank]
    if sharding == Sharding.TENSOR:
        if any((s.start_layer, s.end_layer) != (0, card.n_layers) for s in shards):
            return f"every Tensor shard holds layers [0, {card.n_layers})"
        return [tensor_share(card, node, world, kv) for node in nodes]
    expected_start = 0
    for shard in shards:
        if shard.start_layer != expected_start or shard.end_layer <= shard.start_layer:
            return f"Pipeline shards must cover layers [0, {card.n_layers}) in order, without gaps"
        expected_start = shard.end_layer
    if expected_start != card.n_layers:
        return f"Pipeline shards must cover layers [0, {card.n_layers}) in order, without gaps"
    return [
        layer_share(card, node, shard.start_layer, shard.end_layer, kv)
        for shard, node in zip(shards, nodes, strict=True)
    ]


def _rpc_pool_problem(
    instance: Instance, shards: Sequence[ShardMetadata], nodes: Sequence[NodeId]
) -> str | None:
    """Why an instance's donors do not form an RPC pool, if they do not."""
    donors = [s for s in shards if isinstance(s, RpcDonorShardMetadata)]
    if not isinstance(instance, LlamaRpcInstance):
        return "RPC donor shards belong only to a LlamaRpcInstance" if donors else None
    if not nodes or instance.driver_node_id != nodes[0]:
        return "a LlamaRpcInstance's driver must hold device rank 0"
    if isinstance(shards[0], RpcDonorShardMetadata) or len(donors) != len(shards) - 1:
        return "a LlamaRpcInstance has one driver shard (rank 0) and RPC donor shards after it"
    for shard, node in zip(shards[1:], nodes[1:], strict=True):
        assert isinstance(shard, RpcDonorShardMetadata)
        parts = split_endpoint(instance.rpc_endpoints.get(node, ""))
        if parts is None or parts[1] != shard.rpc_port:
            return f"donor node {node} needs an rpcEndpoints entry host:{shard.rpc_port}"
    return None
