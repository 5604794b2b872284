"""What a runner in an MLX ring across nodes is told: its rank, its layers, and
every rank's node and gate, read from the placed instance."""

from __future__ import annotations

from skulk_core.ids import NodeId
from skulk_core.placement.rpc_pool import split_endpoint
from skulk_core.state.shards import (
    Instance,
    MlxJacclInstance,
    MlxRingInstance,
    PipelineShardMetadata,
    ShardMetadata,
)
from skulk_daemon.runner.protocol import MlxRingLeg, RunnerEngine


def ring_leg(
    instance: Instance,
    shard: ShardMetadata,
    node_id: NodeId,
    engine: RunnerEngine,
    gate_key: bytes,
) -> MlxRingLeg | str:
    """This node's leg of a multi-node MLX instance, or why it cannot take one."""
    model_id = instance.shard_assignments.model_id
    if engine != "mlx":
        return f"{model_id} is not an MLX model: across nodes it is pooled over llama.cpp RPC"
    if isinstance(instance, MlxJacclInstance):
        return (
            "MlxJaccl needs RDMA over Thunderbolt 5 between Macs (macOS 26.2 or later, "
            "RDMA enabled), which this node does not offer; place the model as MlxRing (TCP)"
        )
    if not isinstance(instance, MlxRingInstance):
        return f"{model_id} cannot be split over nodes by this instance kind"
    if not gate_key:
        return "an MLX ring across nodes needs the cluster fabric (its gates' key)"
    if not isinstance(shard, PipelineShardMetadata):
        return (
            "an MLX ring across nodes splits the model by layers (Pipeline); Tensor "
            "sharding of MLX models across nodes is not supported"
        )
    assignments = instance.shard_assignments
    by_rank = sorted(
        (
            (assignments.runner_to_shard[runner].device_rank, node)
            for node, runner in assignments.node_to_runner.items()
        ),
    )
    nodes = tuple(node for _, node in by_rank)
    endpoints = tuple(instance.ring_endpoints.get(node, "") for node in nodes)
    missing = [
        node
        for node, endpoint in zip(nodes, endpoints, strict=True)
        if not split_endpoint(endpoint)
    ]
    if missing:
        return f"the ring names no gate endpoint for node {missing[0]}"
    if node_id not in nodes:
        return f"node {node_id} is not in this ring"
    return MlxRingLeg(
        instance_id=str(instance.instance_id),
        gate_key=gate_key,
        rank=shard.device_rank,
        nodes=tuple(str(node) for node in nodes),
        endpoints=endpoints,
        start_layer=shard.start_layer,
        end_layer=shard.end_layer,
    )
