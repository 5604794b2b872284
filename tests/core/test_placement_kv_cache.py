"""Placement sizes a llama.cpp model's KV window as its runner reserves it: a whole
window for each of the runner's slots, in the cell type of the node that serves it
(``inference.kv_cache_backend``, advertised in telemetry), so a quantized cache holds
a longer context in the same memory. MLX placements, and readings from nodes that
predate the field, stay at one window of F16."""

from __future__ import annotations

import msgspec

from skulk_core.cluster.telemetry import NodeTelemetry
from skulk_core.ids import NodeId
from skulk_core.models.cards import ModelTask
from skulk_core.models.kv_cache import KvCacheBackend
from skulk_core.models.memory_estimate import KvGeometry, kv_bytes_per_token
from skulk_core.placement import HEADROOM_BYTES, PlacementRefusal, PlacementRequest, place
from skulk_core.placement.backends import F16_ONE, KvReservation, kv_reservation
from skulk_core.placement.exact import admit_instance
from skulk_core.placement.local_fit import local_shortfall
from skulk_core.state.shards import PipelineShardMetadata, RpcDonorShardMetadata, RunnerIdle
from skulk_core.state.state import State
from tests.core.test_placement import (
    DEMO_BYTES,
    DEMO_KV_PER_TOKEN,
    DEMO_KV_PER_WINDOW_TOKEN,
    GIB,
    CountingIds,
    facts,
    gguf_card,
    loaded,
    mlx_card,
    placed,
    refused,
    telemetry,
    whole_shard,
)

DEMO = KvGeometry(n_layers=18, kv_heads=1, head_dim=256)
# 2 (K and V) x 18 layers x one 256-value row: 8 blocks of 32, 34 bytes each in Q8_0.
Q8_PER_TOKEN = 2 * 18 * 8 * 34
SLOTS = 4


def reading(node: str, ram: int, kv_cache: KvCacheBackend, slots: int = SLOTS) -> NodeTelemetry:
    base = telemetry(node, ram)
    resources = msgspec.structs.replace(base.resources, kv_cache=kv_cache, llama_cpp_slots=slots)
    return msgspec.structs.replace(base, resources=resources)


def test_a_row_costs_what_ggml_stores() -> None:
    assert kv_bytes_per_token(DEMO) == DEMO_KV_PER_TOKEN
    assert kv_bytes_per_token(DEMO, kv_cache=KvCacheBackend.F16) == DEMO_KV_PER_TOKEN
    assert kv_bytes_per_token(DEMO, kv_cache=KvCacheBackend.Q8_0) == Q8_PER_TOKEN
    assert kv_bytes_per_token(DEMO, kv_cache=KvCacheBackend.Q4_0) == 2 * 18 * 8 * 18
    # A row that is not whole blocks is padded to them (40 values: two Q8_0 blocks).
    odd = KvGeometry(n_layers=1, kv_heads=1, head_dim=40)
    assert kv_bytes_per_token(odd, kv_cache=KvCacheBackend.Q8_0) == 2 * 2 * 34


def test_a_node_with_a_quantized_cache_holds_a_context_f16_cannot() -> None:
    available = loaded(DEMO_BYTES) + HEADROOM_BYTES + DEMO_KV_PER_WINDOW_TOKEN * 10_000
    request = PlacementRequest(context_tokens=18_000)
    at_f16 = refused(place(gguf_card(), facts(telemetry("a", available)), request, CountingIds()))
    assert "holds: 9999 tokens" in at_f16.message
    quantized = facts(reading("a", available, KvCacheBackend.Q8_0))
    result = placed(place(gguf_card(), quantized, request, CountingIds()))
    assert result.instance.context_token_limit == 18_000
    delta = result.memory_delta_by_node[NodeId("a")]
    assert delta == loaded(DEMO_BYTES) + Q8_PER_TOKEN * SLOTS * 18_000
    # The master's re-check of the ordered instance sizes it the same way, and keeps
    # the window it was promised.
    admitted = admit_instance(
        result.instance, gguf_card(), quantized, State(), lower_to_ceiling=False
    )
    assert admitted == result.instance
    assert isinstance(
        admit_instance(
            result.instance,
            gguf_card(),
            facts(telemetry("a", available)),
            State(),
            lower_to_ceiling=False,
        ),
        PlacementRefusal,
    )
    # The ceiling the placement reports is the longer window its cells allow.
    assert result.max_context_tokens is not None
    assert result.max_context_tokens == (DEMO_KV_PER_WINDOW_TOKEN * 10_000 - 1) // (
        Q8_PER_TOKEN * SLOTS
    )


def test_a_node_with_fewer_slots_offers_a_longer_window() -> None:
    available = loaded(DEMO_BYTES) + HEADROOM_BYTES + DEMO_KV_PER_WINDOW_TOKEN * 10_000
    four = placed(
        place(gguf_card(), facts(telemetry("a", available)), PlacementRequest(), CountingIds())
    )
    one = placed(
        place(
            gguf_card(),
            facts(reading("a", available, KvCacheBackend.DEFAULT, slots=1)),
            PlacementRequest(context_tokens=32_768),
            CountingIds(),
        )
    )
    assert four.max_context_tokens == 9999
    assert one.max_context_tokens == 32_768  # the card's own limit; 39,999 would fit
    assert one.memory_delta_by_node[NodeId("a")] == loaded(DEMO_BYTES) + DEMO_KV_PER_TOKEN * 32_768


def test_mlx_placements_stay_at_f16_whatever_the_node_says() -> None:
    card = mlx_card()
    plain = placed(place(card, facts(telemetry("a", 16 * GIB)), PlacementRequest(), CountingIds()))
    said = facts(reading("a", 16 * GIB, KvCacheBackend.Q4_0))
    quantized = placed(place(card, said, PlacementRequest(), CountingIds()))
    assert quantized.memory_delta_by_node == plain.memory_delta_by_node
    assert quantized.max_context_tokens == plain.max_context_tokens


def test_an_rpc_pool_sizes_every_share_at_the_drivers_cells() -> None:
    """The driver's context holds every layer's cells, the donors' layers included."""
    readings = [
        reading("a", 8 * GIB, KvCacheBackend.Q8_0),
        reading("b", 4 * GIB, KvCacheBackend.DEFAULT),
    ]
    request = PlacementRequest(min_nodes=2, context_tokens=4096)
    result = placed(place(gguf_card(), facts(*readings, connected=True), request, CountingIds()))
    assignments = result.instance.shard_assignments
    for node_id, runner in assignments.node_to_runner.items():
        shard = assignments.runner_to_shard[runner]
        assert isinstance(shard, PipelineShardMetadata | RpcDonorShardMetadata)
        layers = shard.end_layer - shard.start_layer
        weights = loaded(-(-DEMO_BYTES * layers // 18))
        kv = Q8_PER_TOKEN // 18 * layers * 4096 * SLOTS
        assert result.memory_delta_by_node[node_id] == weights + kv, node_id


def test_committed_memory_counts_a_placed_instance_at_its_servers_cells() -> None:
    first = placed(
        place(
            gguf_card(),
            facts(reading("a", 2 * GIB, KvCacheBackend.Q8_0)),
            PlacementRequest(context_tokens=8192),
            CountingIds(),
        )
    )
    instance = first.instance
    [runner] = instance.shard_assignments.node_to_runner.values()
    state = State(instances={instance.instance_id: instance}, runners={runner: RunnerIdle()})
    cluster = facts(reading("a", 2 * GIB, KvCacheBackend.Q8_0), state=state)
    assert cluster.committed_bytes == {"a": loaded(DEMO_BYTES) + Q8_PER_TOKEN * SLOTS * 8192}


def test_a_node_checks_its_own_share_at_the_cells_its_runner_will_use() -> None:
    card = gguf_card()
    shard = whole_shard(card)
    room = loaded(DEMO_BYTES) + HEADROOM_BYTES + DEMO_KV_PER_WINDOW_TOKEN * 10_000
    node = telemetry("a", room)

    def shortfall(kv_cache: KvCacheBackend, sequences: int = SLOTS) -> str | None:
        return local_shortfall(
            card,
            shard,
            node_id=NodeId("a"),
            context_tokens=18_000,
            reading=node,
            backend="llama_cpp",
            kv=KvReservation(cells=kv_cache, sequences=sequences),
        )

    assert shortfall(KvCacheBackend.Q8_0) is None
    why = shortfall(KvCacheBackend.DEFAULT)
    assert why is not None and "for 18000 tokens × 4 sequences" in why  # noqa: RUF001
    # A runner of one sequence (an embedding runner) reserves one window.
    assert shortfall(KvCacheBackend.DEFAULT, sequences=1) is None


def test_what_each_engine_reserves() -> None:
    card = gguf_card()
    q8 = reading("a", GIB, KvCacheBackend.Q8_0)
    assert kv_reservation(card, "llama_cpp", q8) == KvReservation(
        cells=KvCacheBackend.Q8_0, sequences=SLOTS
    )
    assert kv_reservation(card, "llama_cpp", None) == KvReservation(sequences=SLOTS)
    two = reading("a", GIB, KvCacheBackend.DEFAULT, slots=2)
    assert kv_reservation(card, "llama_cpp", two) == KvReservation(sequences=2)
    embedder = msgspec.structs.replace(card, tasks=(ModelTask.TEXT_EMBEDDING,))
    assert kv_reservation(embedder, "llama_cpp", q8) == KvReservation(cells=KvCacheBackend.Q8_0)
    assert kv_reservation(mlx_card(), "mlx", q8) == F16_ONE


def test_a_reading_from_a_node_that_predates_the_fields_is_four_slots_of_f16() -> None:
    encoded = msgspec.json.encode(telemetry("a", GIB))
    document = msgspec.json.decode(encoded)
    assert document["resources"]["kvCache"] == "default"
    assert document["resources"]["llamaCppSlots"] == SLOTS
    del document["resources"]["kvCache"], document["resources"]["llamaCppSlots"]
    old = msgspec.convert(document, NodeTelemetry)
    assert old.resources.kv_cache is KvCacheBackend.DEFAULT
    assert old.resources.llama_cpp_slots == SLOTS
