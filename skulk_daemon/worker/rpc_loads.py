"""What a runner in a llama.cpp RPC pool is told to load, read from State.

A donor's :class:`Load` names the port the placement assigned and the address the
driver reaches it at; a driver's names its donors in layer order. A driver loads
only once every donor serves, because llama.cpp copies the donors' layers to them
while it loads.
"""

from __future__ import annotations

from typing import Final

from skulk_core.ids import NodeId
from skulk_core.placement.rpc_pool import split_endpoint
from skulk_core.state.shards import (
    LlamaRpcInstance,
    RpcDonorShardMetadata,
    RunnerFailed,
    RunnerReady,
    RunnerRunning,
)
from skulk_core.state.state import State
from skulk_daemon.runner.protocol import Load, RpcDonorRoute, RpcPool, RpcServe

DONOR_READY_TIMEOUT_SECONDS: Final = 120.0
"""How long a driver waits for its donors' RPC servers before failing the pool."""


def donor_load(
    instance: LlamaRpcInstance,
    shard: RpcDonorShardMetadata,
    node_id: NodeId,
    gate_key: bytes,
    n_threads: int | None,
) -> Load | str:
    """The donor runner's Load, or why this node cannot serve its share."""
    parts = split_endpoint(instance.rpc_endpoints.get(node_id, ""))
    if parts is None or parts[1] != shard.rpc_port:
        return f"the pool names no RPC endpoint for donor node {node_id}"
    return Load(
        model_path="",
        context_tokens=1,
        n_threads=n_threads,
        mode="rpc_donor",
        serve=RpcServe(
            instance_id=str(instance.instance_id),
            gate_key=gate_key,
            host=parts[0],
            port=parts[1],
        ),
    )


def driver_pool(instance: LlamaRpcInstance, gate_key: bytes) -> RpcPool:
    """The driver's donors, in layer order."""
    assignments = instance.shard_assignments
    donors: list[tuple[int, RpcDonorRoute]] = []
    for node_id, runner_id in assignments.node_to_runner.items():
        shard = assignments.runner_to_shard.get(runner_id)
        if not isinstance(shard, RpcDonorShardMetadata):
            continue
        route = RpcDonorRoute(
            node_id=str(node_id),
            endpoint=instance.rpc_endpoints[node_id],
            layers=shard.end_layer - shard.start_layer,
        )
        donors.append((shard.start_layer, route))
    donors.sort(key=lambda item: item[0])
    return RpcPool(
        instance_id=str(instance.instance_id),
        gate_key=gate_key,
        donors=tuple(route for _, route in donors),
    )


def donors_status(state: State, instance: LlamaRpcInstance) -> bool | NodeId:
    """True once every donor serves, False while any is coming up, or the first
    donor node whose runner failed (or vanished from State)."""
    assignments = instance.shard_assignments
    ready = True
    for node_id, runner_id in assignments.node_to_runner.items():
        if not isinstance(assignments.runner_to_shard.get(runner_id), RpcDonorShardMetadata):
            continue
        status = state.runners.get(runner_id)
        if status is None or isinstance(status, RunnerFailed):
            return node_id
        if not isinstance(status, RunnerReady | RunnerRunning):
            ready = False
    return ready
