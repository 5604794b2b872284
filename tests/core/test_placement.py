"""The placement planner: who hosts a model, how much context fits, and why not."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import msgspec
import pytest

from skulk_core.cluster.telemetry import (
    Accelerator,
    HealthReason,
    NodeIdentityInfo,
    NodeMemory,
    NodeResources,
    NodeSystem,
    NodeTelemetry,
    Participation,
)
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, NodeInstallId, RunnerId
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.placement import (
    HEADROOM_BYTES,
    NO_VALID_PLACEMENT,
    PLACEMENT_INFO_PENDING,
    ClusterFacts,
    Placement,
    PlacementRefusal,
    PlacementRequest,
    PreviewQuery,
    cluster_facts,
    place,
    preview_placements,
)
from skulk_core.placement.fit import RUNTIME_OVERHEAD_FACTOR
from skulk_core.placement.ordering import admit_command
from skulk_core.placement.rings import candidate_rings
from skulk_core.placement.rpc_pool import RPC_PORT_BASE
from skulk_core.state.commands import CreateInstance
from skulk_core.state.shards import (
    InstanceMeta,
    LlamaRpcInstance,
    MlxJacclInstance,
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerIdle,
    RunnerReady,
    Sharding,
    TensorShardMetadata,
)
from skulk_core.state.state import Connection, State, Topology

GIB = 1024**3
MIB = 1024**2
DEMO_BYTES = 253_113_024
# 2 (K and V) x 18 layers x 1 KV head x 256 head dim x 2 bytes (f16).
DEMO_KV_PER_TOKEN = 2 * 18 * 1 * 256 * 2
# A llama.cpp text runner serves 4 slots, each a whole window of cells: what one token
# of a placement's window reserves.
DEMO_KV_PER_WINDOW_TOKEN = DEMO_KV_PER_TOKEN * 4


class CountingIds:
    """Deterministic ids: i1, r2, r3, ... in the order the planner asks."""

    def __init__(self) -> None:
        self.count = 0

    def instance_id(self) -> InstanceId:
        self.count += 1
        return InstanceId(f"instance-{self.count}")

    def runner_id(self) -> RunnerId:
        self.count += 1
        return RunnerId(f"runner-{self.count}")


def gguf_card(**changes: object) -> ModelCard:
    """The demo model's card: Gemma 3 270M, Q4_K_M, 18 layers, one 256-wide KV head."""
    card = ModelCard(
        model_id=ModelId("local/gemma-3-270m-q4_k_m"),
        storage_size=Memory(in_bytes=DEMO_BYTES),
        n_layers=18,
        gguf_file="gemma-3-270m-q4_k_m.gguf",
        context_length=32768,
        num_key_value_heads=1,
        head_dim=256,
        compatible_backends=("llama_cpp",),
    )
    return msgspec.structs.replace(card, **changes)


def whole_shard(card: ModelCard) -> PipelineShardMetadata:
    """The one shard of ``card`` placed whole on one node."""
    return PipelineShardMetadata(
        model_id=card.model_id,
        device_rank=0,
        world_size=1,
        start_layer=0,
        end_layer=card.n_layers,
        n_layers=card.n_layers,
    )


def mlx_card(**changes: object) -> ModelCard:
    card = ModelCard(
        model_id=ModelId("mlx-community/Test-8B-4bit"),
        storage_size=Memory(in_bytes=4 * GIB),
        n_layers=32,
        context_length=131072,
        num_key_value_heads=8,
        head_dim=128,
        supports_tensor=True,
        compatible_backends=("mlx",),
    )
    return msgspec.structs.replace(card, **changes)


def telemetry(
    node: str,
    ram: int,
    *,
    backends: tuple[str, ...] = ("llama_cpp", "mlx"),
    participation: Participation = Participation.FULL,
    accelerator: Accelerator | None = None,
    conflicts: tuple[HealthReason, ...] = (),
) -> NodeTelemetry:
    return NodeTelemetry(
        node_id=NodeId(node),
        identity=NodeIdentityInfo(
            friendly_name=f"host-{node}",
            node_install_id=NodeInstallId(f"install-{node}"),
            skulk_version="0.1.0",
        ),
        memory=NodeMemory(ram_total=Memory(in_bytes=2 * ram), ram_available=Memory(in_bytes=ram)),
        system=NodeSystem(
            os="Linux",
            os_version="6.8",
            machine="x86_64",
            cpu_model="test cpu",
            cpu_count=8,
            hostname=f"host-{node}",
            python_version="3.11",
            accelerator=accelerator,
        ),
        resources=NodeResources(
            backends=backends,
            participation=participation,
            api_available=True,
            data_transport="zmq",
            capability_conflicts=conflicts,
        ),
        observed_at=datetime(2026, 1, 1, tzinfo=UTC),
    )


def facts(
    *readings: NodeTelemetry, connected: bool = False, state: State | None = None
) -> ClusterFacts:
    nodes = tuple(r.node_id for r in readings)
    connections: tuple[Connection, ...] = ()
    if connected:
        connections = tuple(
            Connection(
                local_node_id=a,
                send_back_node_id=b,
                sink_multiaddr=f"/ip4/10.0.0.{nodes.index(b) + 1}/tcp/52416",
            )
            for a in nodes
            for b in nodes
            if a != b
        )
    base = state or State()
    base = msgspec.structs.replace(base, topology=Topology(nodes=nodes, connections=connections))
    return cluster_facts(
        base, {r.node_id: r for r in readings}, {gguf_card().model_id: gguf_card()}
    )


def placed(result: Placement | PlacementRefusal) -> Placement:
    assert isinstance(result, Placement), result
    return result


def refused(result: Placement | PlacementRefusal) -> PlacementRefusal:
    assert isinstance(result, PlacementRefusal), result
    return result


def loaded(weights: int) -> int:
    return math.ceil(weights * RUNTIME_OVERHEAD_FACTOR)


def test_the_demo_model_fits_one_node_as_a_single_ring_shard() -> None:
    result = placed(
        place(gguf_card(), facts(telemetry("a", 4 * GIB)), PlacementRequest(), CountingIds())
    )
    instance = result.instance
    assert isinstance(instance, MlxRingInstance)
    assert instance.instance_id == "instance-1"
    assert instance.shard_assignments.node_to_runner == {"a": "runner-2"}
    assert instance.shard_assignments.runner_to_shard == {
        "runner-2": PipelineShardMetadata(
            model_id=gguf_card().model_id,
            device_rank=0,
            world_size=1,
            start_layer=0,
            end_layer=18,
            n_layers=18,
        )
    }
    assert instance.context_token_limit == 8192
    assert result.backend == "llama_cpp"
    assert result.max_context_tokens == 32768
    assert result.default_context_tokens == 8192
    assert result.reserves_context_at_load is True
    assert result.kv_bytes_per_token == DEMO_KV_PER_TOKEN == 18432
    assert result.memory_delta_by_node == {
        "a": loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 8192
    }


def test_a_node_too_small_is_refused_with_the_arithmetic() -> None:
    result = refused(
        place(gguf_card(), facts(telemetry("a", 200 * MIB)), PlacementRequest(), CountingIds())
    )
    assert result.code == NO_VALID_PLACEMENT
    assert result.message == (
        "cannot place local/gemma-3-270m-q4_k_m: needs 1.32 GB (weights 0.24 GB × 1.10 "  # noqa: RUF001
        "+ KV 0.56 GB for 8192 tokens × 4 sequences + headroom 0.50 GB) but node a (host-a) "  # noqa: RUF001
        "has 0.20 GB of RAM available"
    )


def test_memory_exactly_equal_to_the_need_is_refused_one_byte_more_fits() -> None:
    card = gguf_card()
    # The smallest window worth placing is 256 tokens.
    need = loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 256 + HEADROOM_BYTES
    refused(place(card, facts(telemetry("a", need)), PlacementRequest(), CountingIds()))
    result = placed(place(card, facts(telemetry("a", need + 1)), PlacementRequest(), CountingIds()))
    assert result.max_context_tokens == 256
    assert result.memory_delta_by_node[NodeId("a")] + HEADROOM_BYTES == need


def test_the_context_limit_comes_from_the_kv_geometry() -> None:
    card = mlx_card()
    per_token = 2 * 32 * 8 * 128 * 2
    available = 10 * GIB
    result = placed(
        place(
            card,
            facts(telemetry("a", available, backends=("mlx",))),
            PlacementRequest(),
            CountingIds(),
        )
    )
    fixed = loaded(card.storage_size.in_bytes) + HEADROOM_BYTES
    assert result.kv_bytes_per_token == per_token
    assert result.max_context_tokens == (available - fixed - 1) // per_token
    # MLX grows its cache per request: a launch stamps the maximum.
    assert result.reserves_context_at_load is False
    assert result.default_context_tokens == result.max_context_tokens
    assert result.instance.context_token_limit == result.max_context_tokens


def test_a_squeezed_node_gets_a_smaller_default_window() -> None:
    need_at_default = loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 8192 + HEADROOM_BYTES
    result = placed(
        place(
            gguf_card(), facts(telemetry("a", need_at_default)), PlacementRequest(), CountingIds()
        )
    )
    assert result.max_context_tokens == result.default_context_tokens == 8191


def test_unknown_geometry_falls_back_to_the_card_limit() -> None:
    card = gguf_card(head_dim=None, num_key_value_heads=None)
    result = placed(place(card, facts(telemetry("a", 4 * GIB)), PlacementRequest(), CountingIds()))
    assert result.kv_bytes_per_token is None
    assert result.max_context_tokens == 32768
    assert result.memory_delta_by_node == {"a": loaded(DEMO_BYTES)}


def test_context_tokens_is_honoured_exactly() -> None:
    result = placed(
        place(
            gguf_card(),
            facts(telemetry("a", 4 * GIB)),
            PlacementRequest(context_tokens=1024),
            CountingIds(),
        )
    )
    assert result.instance.context_token_limit == 1024
    assert result.memory_delta_by_node == {
        "a": loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 1024
    }


def test_context_tokens_above_the_card_limit_names_the_maximum() -> None:
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB)),
            PlacementRequest(context_tokens=40000),
            CountingIds(),
        )
    )
    assert "context_tokens 40000 exceeds the largest window this placement holds: 32768" in (
        result.message
    )


def test_context_tokens_above_what_memory_holds_names_that_maximum() -> None:
    available = loaded(DEMO_BYTES) + HEADROOM_BYTES + DEMO_KV_PER_WINDOW_TOKEN * 10000
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", available)),
            PlacementRequest(context_tokens=20000),
            CountingIds(),
        )
    )
    assert "holds: 9999 tokens (what fits beside the weights on node a (host-a))" in result.message


@pytest.mark.parametrize("tokens", [255, 1_048_577])
def test_context_tokens_outside_the_spec_range_is_refused(tokens: int) -> None:
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 4 * GIB)),
            PlacementRequest(context_tokens=tokens),
            CountingIds(),
        )
    )
    assert "between 256 and 1048576" in result.message


def test_exclusions_remove_candidates() -> None:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 4 * GIB))
    result = placed(
        place(
            gguf_card(),
            cluster,
            PlacementRequest(excluded_node_ids=frozenset({NodeId("a")})),
            CountingIds(),
        )
    )
    assert result.node_ids == ("b",)
    everything = frozenset({NodeId("a"), NodeId("b")})
    refusal = refused(
        place(gguf_card(), cluster, PlacementRequest(excluded_node_ids=everything), CountingIds())
    )
    assert refusal.message.endswith("the exclusions removed every candidate (2 node(s) excluded)")


def test_api_only_nodes_never_host_and_worker_only_nodes_do() -> None:
    api_only = telemetry("a", 64 * GIB, participation=Participation.API_ONLY)
    result = refused(place(gguf_card(), facts(api_only), PlacementRequest(), CountingIds()))
    assert "node a (host-a) serves the API only (participation api_only)" in result.message
    worker = telemetry("b", 4 * GIB, participation=Participation.WORKER_ONLY)
    assert placed(
        place(gguf_card(), facts(api_only, worker), PlacementRequest(), CountingIds())
    ).node_ids == ("b",)


def test_a_node_without_the_cards_engine_is_refused() -> None:
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB, backends=("mlx",))),
            PlacementRequest(),
            CountingIds(),
        )
    )
    assert "offers engines [mlx] but local/gemma-3-270m-q4_k_m needs one of [llama_cpp]" in (
        result.message
    )


def test_a_gguf_card_without_declared_backends_is_served_by_llama_cpp() -> None:
    card = gguf_card(compatible_backends=())
    refused(
        place(
            card,
            facts(telemetry("a", 64 * GIB, backends=("mlx",))),
            PlacementRequest(),
            CountingIds(),
        )
    )
    placed(
        place(
            card,
            facts(telemetry("a", 64 * GIB, backends=("llama_cpp",))),
            PlacementRequest(),
            CountingIds(),
        )
    )


def test_tensor_sharding_is_refused_when_the_card_does_not_support_it() -> None:
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB)),
            PlacementRequest(sharding=Sharding.TENSOR),
            CountingIds(),
        )
    )
    assert "does not support Tensor sharding" in result.message


def test_a_node_that_has_not_reported_makes_the_refusal_pending() -> None:
    state = State(topology=Topology(nodes=(NodeId("a"),)))
    cluster = cluster_facts(state, {}, {})
    result = refused(place(gguf_card(), cluster, PlacementRequest(), CountingIds()))
    assert result.code == PLACEMENT_INFO_PENDING
    assert "has not reported its memory and engines yet" in result.message
    assert refused(
        place(gguf_card(), cluster_facts(State(), {}, {}), PlacementRequest(), CountingIds())
    ).code == (PLACEMENT_INFO_PENDING)


def test_min_nodes_above_the_eligible_nodes_is_refused() -> None:
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB)),
            PlacementRequest(min_nodes=2),
            CountingIds(),
        )
    )
    assert result.code == NO_VALID_PLACEMENT
    assert "needs a connected cycle of 2 nodes but only 1 node(s) are eligible" in result.message


def _committed_state(runner_status: object) -> State:
    first = placed(
        place(gguf_card(), facts(telemetry("a", 2 * GIB)), PlacementRequest(), CountingIds())
    )
    instance = first.instance
    [runner] = instance.shard_assignments.node_to_runner.values()
    return State(instances={instance.instance_id: instance}, runners={runner: runner_status})  # type: ignore[dict-item]


def test_instances_still_loading_commit_their_memory() -> None:
    reading = telemetry("a", 2000 * MIB)
    free = facts(reading)
    committed = facts(reading, state=_committed_state(RunnerIdle()))
    assert committed.committed_bytes == {"a": loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 8192}
    first = placed(place(gguf_card(), free, PlacementRequest(), CountingIds()))
    second = place(gguf_card(), committed, PlacementRequest(), CountingIds())
    # Two quick placements cannot both count the same free bytes.
    available = 2000 * MIB - committed.committed_bytes[NodeId("a")]
    assert isinstance(second, Placement)
    assert second.max_context_tokens is not None and first.max_context_tokens is not None
    assert second.max_context_tokens < first.max_context_tokens
    assert second.memory_delta_by_node[NodeId("a")] + HEADROOM_BYTES < available


def test_committed_memory_is_named_in_the_refusal() -> None:
    reading = telemetry("a", 1000 * MIB)
    # Alone the node would hold the model ...
    placed(place(gguf_card(), facts(reading), PlacementRequest(), CountingIds()))
    # ... but not beside an instance that is still loading there.
    result = refused(
        place(
            gguf_card(),
            facts(reading, state=_committed_state(RunnerIdle())),
            PlacementRequest(),
            CountingIds(),
        )
    )
    assert "committed to instances placed here" in result.message


def test_ready_runners_no_longer_count_as_committed() -> None:
    cluster = facts(telemetry("a", 2 * GIB), state=_committed_state(RunnerReady()))
    assert cluster.committed_bytes == {}


def test_a_ready_runner_commits_what_it_has_not_touched_yet() -> None:
    """On a CPU node that reports its runners' resident memory, a ready runner's plan
    counts less what it holds: llama.cpp's KV cache is taken as contexts grow, so a
    second placement must not count those bytes as free."""
    plan = loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 8192
    base = telemetry("a", 2 * GIB)
    for resident in (0, 100 * MIB, plan + GIB):
        memory = msgspec.structs.replace(base.memory, runners_rss=Memory(in_bytes=resident))
        reading = msgspec.structs.replace(base, memory=memory)
        cluster = facts(reading, state=_committed_state(RunnerReady()))
        assert cluster.committed_bytes.get(NodeId("a"), 0) == max(0, plan - resident)


def test_vram_is_the_pool_for_llama_cpp_on_an_nvidia_node() -> None:
    gpu = Accelerator(
        vendor="nvidia",
        name="NVIDIA H200",
        vram_total=Memory(in_bytes=140 * GIB),
        vram_available=Memory(in_bytes=100 * MIB),
    )
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB, accelerator=gpu)),
            PlacementRequest(),
            CountingIds(),
        )
    )
    assert "0.10 GB of GPU memory available" in result.message
    # A llama.cpp build without CUDA runs the model from RAM.
    no_cuda = HealthReason(code="gpu_serving_disabled", message="m", remediation="r")
    placed(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB, accelerator=gpu, conflicts=(no_cuda,))),
            PlacementRequest(),
            CountingIds(),
        )
    )


def test_a_gpu_without_a_vram_reading_is_not_sized_from_ram() -> None:
    gpu = Accelerator(vendor="nvidia", name="NVIDIA A100 MIG")
    result = refused(
        place(
            gguf_card(),
            facts(telemetry("a", 64 * GIB, accelerator=gpu)),
            PlacementRequest(),
            CountingIds(),
        )
    )
    assert "no free-VRAM reading" in result.message


def test_previews_rank_hosts_and_list_the_others_as_alternatives() -> None:
    cluster = facts(
        telemetry("a", 4 * GIB),
        telemetry("b", 16 * GIB),
        telemetry("c", 8 * GIB),
        telemetry("d", 100 * MIB),
    )
    query = PreviewQuery(
        sharding=Sharding.PIPELINE, instance_meta=InstanceMeta.MLX_RING, min_nodes=1
    )
    previews = preview_placements(gguf_card(), cluster, query, CountingIds())
    valid = [p for p in previews if p.instance is not None]
    assert [(p.node_ids, p.alternative) for p in valid] == [
        (("b",), False),
        (("c",), True),
        (("a",), True),
    ]
    assert all(p.card_digest for p in valid)
    constrained = preview_placements(
        gguf_card(),
        cluster,
        msgspec.structs.replace(query, node_ids=frozenset({NodeId("c")})),
        CountingIds(),
    )
    assert [(p.node_ids, p.alternative) for p in constrained if p.instance] == [(("c",), False)]


def test_previews_of_the_demo_model_on_one_node() -> None:
    previews = preview_placements(
        gguf_card(), facts(telemetry("a", 4 * GIB)), PreviewQuery(), CountingIds()
    )
    [valid] = [p for p in previews if p.instance is not None]
    # Every enumerated instance kind mints the same one-node MlxRing placement.
    assert (valid.sharding, valid.instance_meta, valid.node_ids) == (
        Sharding.PIPELINE,
        InstanceMeta.MLX_RING,
        ("a",),
    )
    # The embedded instance carries the largest window; a launch commits the default.
    assert valid.instance is not None and valid.instance.context_token_limit == 32768
    assert valid.max_context_tokens == 32768 and valid.default_context_tokens == 8192
    assert valid.memory_delta_by_node == {"a": loaded(DEMO_BYTES) + DEMO_KV_PER_WINDOW_TOKEN * 8192}
    [tensor] = [p for p in previews if p.sharding == Sharding.TENSOR]
    assert tensor.instance is None and tensor.card_digest is None
    assert tensor.error_code == NO_VALID_PLACEMENT
    assert tensor.error is not None and "does not support Tensor sharding" in tensor.error
    excluded = preview_placements(
        gguf_card(),
        facts(telemetry("a", 4 * GIB)),
        PreviewQuery(excluded_node_ids=frozenset({NodeId("a")})),
        CountingIds(),
    )
    assert excluded and all(p.instance is None for p in excluded)


def test_mlx_spreads_layers_over_a_connected_ring_by_memory() -> None:
    card = mlx_card()
    cluster = facts(
        telemetry("a", 4 * GIB + HEADROOM_BYTES, backends=("mlx",)),
        telemetry("b", 12 * GIB + HEADROOM_BYTES, backends=("mlx",)),
        connected=True,
    )
    result = placed(
        place(
            card,
            cluster,
            PlacementRequest(min_nodes=2, instance_meta=InstanceMeta.MLX_JACCL),
            CountingIds(),
        )
    )
    assert isinstance(result.instance, MlxJacclInstance)
    shards = result.instance.shard_assignments.runner_to_shard.values()
    ranges = sorted(
        (s.start_layer, s.end_layer) for s in shards if isinstance(s, PipelineShardMetadata)
    )
    # b has three times a's memory, so three times its layers.
    assert ranges == [(0, 24), (24, 32)]
    by_node = {
        node: result.instance.shard_assignments.runner_to_shard[runner]
        for node, runner in result.instance.shard_assignments.node_to_runner.items()
    }
    assert (by_node[NodeId("b")].device_rank, by_node[NodeId("a")].device_rank) == (0, 1)


def test_tensor_sharding_splits_evenly() -> None:
    cluster = facts(
        telemetry("a", 8 * GIB, backends=("mlx",)),
        telemetry("b", 8 * GIB, backends=("mlx",)),
        connected=True,
    )
    result = placed(
        place(
            mlx_card(),
            cluster,
            PlacementRequest(min_nodes=2, sharding=Sharding.TENSOR),
            CountingIds(),
        )
    )
    shards = list(result.instance.shard_assignments.runner_to_shard.values())
    assert all(
        isinstance(s, TensorShardMetadata) and (s.start_layer, s.end_layer) == (0, 32)
        for s in shards
    )
    assert set(result.memory_delta_by_node.values()) == {
        loaded(2 * GIB) + (2 * 32 * 8 * 128 * 2 // 2) * 8192
    }


def test_unconnected_nodes_form_no_ring() -> None:
    cluster = facts(
        telemetry("a", 8 * GIB, backends=("mlx",)), telemetry("b", 8 * GIB, backends=("mlx",))
    )
    result = refused(place(mlx_card(), cluster, PlacementRequest(min_nodes=2), CountingIds()))
    assert "no connected cycle of 2 nodes among the 2 eligible" in result.message


def test_gguf_across_nodes_is_pooled_over_llama_cpp_rpc() -> None:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    result = placed(place(gguf_card(), cluster, PlacementRequest(min_nodes=2), CountingIds()))
    assert result.instance_meta == InstanceMeta.LLAMA_RPC
    instance = result.instance
    assert isinstance(instance, LlamaRpcInstance)
    driver, donor = result.node_ids
    assert instance.driver_node_id == driver
    # The donor listens where the driver reaches it over the fabric.
    host = "10.0.0.1" if donor == "a" else "10.0.0.2"
    assert instance.rpc_endpoints == {donor: f"{host}:{RPC_PORT_BASE}"}


def test_gguf_tensor_sharding_across_nodes_is_refused_with_the_reason() -> None:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    request = PlacementRequest(min_nodes=2, sharding=Sharding.TENSOR)
    card = msgspec.structs.replace(gguf_card(), supports_tensor=True)
    result = refused(place(card, cluster, request, CountingIds()))
    assert "Tensor sharding across nodes is not supported" in result.message


def test_the_smallest_ring_that_fits_wins() -> None:
    # Neither node holds the model alone; together they do.
    card = mlx_card()
    cluster = facts(
        telemetry("a", 3 * GIB, backends=("mlx",)),
        telemetry("b", 3 * GIB, backends=("mlx",)),
        connected=True,
    )
    result = placed(place(card, cluster, PlacementRequest(), CountingIds()))
    assert sorted(result.node_ids) == ["a", "b"]


def test_rings_need_every_consecutive_pair_connected() -> None:
    def edge(a: str, b: str) -> Connection:
        return Connection(local_node_id=NodeId(a), send_back_node_id=NodeId(b), sink_multiaddr="x")

    chain = (edge("a", "b"), edge("c", "b"))
    nodes = [NodeId("a"), NodeId("b"), NodeId("c")]
    assert list(candidate_rings(nodes, chain, 3)) == []
    assert list(candidate_rings(nodes, chain, 2)) == [("a", "b"), ("b", "c")]
    closed = (*chain, edge("a", "c"))
    assert list(candidate_rings(nodes, closed, 3)) == [("a", "b", "c")]
    assert list(candidate_rings(nodes, closed, 2, frozenset({NodeId("c")}))) == [
        ("a", "c"),
        ("b", "c"),
    ]


def test_the_master_refuses_a_window_that_no_longer_fits_rather_than_shrinking_it() -> None:
    """Two API nodes both planned the full window against the same free bytes; the
    master orders the first, and the second is refused, never admitted at a smaller
    window than its caller was promised."""
    reading = telemetry("a", 2000 * MIB)
    request = PlacementRequest(context_tokens=8192)
    ids = CountingIds()
    first = placed(place(gguf_card(), facts(reading), request, ids))
    second = placed(place(gguf_card(), facts(reading), request, ids))
    [runner] = first.instance.shard_assignments.node_to_runner.values()
    ordered = State(
        instances={first.instance.instance_id: first.instance},
        runners={runner: RunnerIdle()},
        topology=Topology(nodes=(NodeId("a"),)),
    )
    command = CreateInstance(command_id=CommandId("c2"), instance=second.instance, card=gguf_card())
    cards = {gguf_card().model_id: gguf_card()}
    refusal = admit_command(ordered, command, {NodeId("a"): reading}, cards)
    assert refusal is not None and refusal.code == "no_valid_placement"
    assert "context_tokens 8192 exceeds" in refusal.message
    assert "committed to instances placed" in refusal.message
    # Alone, the same command is admitted as it is.
    alone = msgspec.structs.replace(ordered, instances={}, runners={})
    assert admit_command(alone, command, {NodeId("a"): reading}, cards) is None
