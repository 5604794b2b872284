"""Instances, shard metadata and runner statuses: the placement vocabulary in State.

Every union here is tagged by class name. In ``/state`` JSON each value is rendered
externally tagged (``{"MlxRingInstance": {...}}``), see :mod:`skulk_core.wire`.
"""

from __future__ import annotations

from enum import StrEnum

import msgspec

from skulk_core.ids import InstanceId, ModelId, NodeId, RunnerId


class Sharding(StrEnum):
    PIPELINE = "Pipeline"
    TENSOR = "Tensor"


class InstanceMeta(StrEnum):
    MLX_RING = "MlxRing"
    MLX_JACCL = "MlxJaccl"
    LLAMA_RPC = "LlamaRpc"


class _Tagged(msgspec.Struct, frozen=True, kw_only=True, rename="camel", tag=True):
    pass


class PipelineShardMetadata(_Tagged, frozen=True, kw_only=True):
    model_id: ModelId
    device_rank: int
    world_size: int
    start_layer: int
    end_layer: int
    n_layers: int


class TensorShardMetadata(_Tagged, frozen=True, kw_only=True):
    model_id: ModelId
    device_rank: int
    world_size: int
    start_layer: int
    end_layer: int
    n_layers: int


class RpcDonorShardMetadata(_Tagged, frozen=True, kw_only=True):
    """A node that lends memory to a llama.cpp RPC pool: it runs llama.cpp's RPC
    server on ``rpc_port`` and holds layers ``[start_layer, end_layer)``, which the
    driver node (rank 0) offloads to it and computes there over the network."""

    model_id: ModelId
    device_rank: int
    world_size: int
    rpc_port: int
    start_layer: int
    end_layer: int
    n_layers: int


ShardMetadata = PipelineShardMetadata | TensorShardMetadata | RpcDonorShardMetadata


class ShardAssignments(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    model_id: ModelId
    node_to_runner: dict[NodeId, RunnerId]
    runner_to_shard: dict[RunnerId, ShardMetadata]


class MlxRingInstance(_Tagged, frozen=True, kw_only=True):
    """An MLX model on one node, or Pipeline-sharded over several joined by MLX's
    ring backend (TCP). Across nodes every rank's gate is at ``ring_endpoints``
    (``host:port`` as its neighbour reaches it over the fabric); rank 0 serves."""

    instance_id: InstanceId
    shard_assignments: ShardAssignments
    context_token_limit: int | None = None
    ring_endpoints: dict[NodeId, str] = {}


class MlxJacclInstance(_Tagged, frozen=True, kw_only=True):
    instance_id: InstanceId
    shard_assignments: ShardAssignments
    context_token_limit: int | None = None


class LlamaRpcInstance(_Tagged, frozen=True, kw_only=True):
    """A GGUF model pooled over llama.cpp RPC: the driver node loads the model and
    generates; each donor lends memory through an RPC server at ``rpc_endpoints``
    (``host:port`` as the driver reaches it over the fabric)."""

    instance_id: InstanceId
    shard_assignments: ShardAssignments
    context_token_limit: int | None = None
    driver_node_id: NodeId
    rpc_endpoints: dict[NodeId, str] = {}


Instance = MlxRingInstance | MlxJacclInstance | LlamaRpcInstance


def serving_node(instance: Instance) -> NodeId | None:
    """The node whose runner generates for ``instance``: the driver of an RPC pool,
    otherwise the node holding rank 0 (the first shard of the ring)."""
    if isinstance(instance, LlamaRpcInstance):
        return instance.driver_node_id
    assignments = instance.shard_assignments
    for node_id, runner_id in assignments.node_to_runner.items():
        shard = assignments.runner_to_shard.get(runner_id)
        if shard is not None and shard.device_rank == 0:
            return node_id
    return None


class RunnerIdle(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerLoading(_Tagged, frozen=True, kw_only=True):
    progress: float | None = None


class RunnerLoaded(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerWarmingUp(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerReady(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerRunning(_Tagged, frozen=True, kw_only=True):
    active_tasks: int = 1


class RunnerShuttingDown(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerShutdown(_Tagged, frozen=True, kw_only=True):
    pass


class RunnerFailed(_Tagged, frozen=True, kw_only=True):
    error_message: str


RunnerStatus = (
    RunnerIdle
    | RunnerLoading
    | RunnerLoaded
    | RunnerWarmingUp
    | RunnerReady
    | RunnerRunning
    | RunnerShuttingDown
    | RunnerShutdown
    | RunnerFailed
)
