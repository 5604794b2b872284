"""Properties every placement keeps, whatever the cluster and the card."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from skulk_core.ids import ModelId
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.placement import (
    HEADROOM_BYTES,
    ClusterFacts,
    Placement,
    PlacementRefusal,
    PlacementRequest,
    place,
    split_layers,
)
from skulk_core.placement.eligibility import screen_nodes
from skulk_core.state.shards import (
    InstanceMeta,
    PipelineShardMetadata,
    Sharding,
    TensorShardMetadata,
)
from tests.core.test_placement import MIB, CountingIds, facts, mlx_card, telemetry

MAX_NODES = 4

cards = st.builds(
    lambda layers, size_mib, kv_heads, head_dim, context, tensor: mlx_card(
        model_id=ModelId("org/prop"),
        n_layers=layers,
        storage_size=Memory(in_bytes=size_mib * MIB),
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        context_length=context,
        supports_tensor=tensor,
    ),
    st.integers(1, 96),
    st.integers(1, 24 * 1024),
    st.sampled_from([1, 2, 4, 8]),
    st.sampled_from([64, 128, 256]),
    st.integers(256, 262_144),
    st.booleans(),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ModelCard, list[int], PlacementRequest]:
    """A card, each node's free RAM, and a request whose min_nodes is near the node count."""
    card = draw(cards)
    # Mostly nodes with room to spare, sometimes one with nothing free.
    ram_mib = st.one_of(st.just(0), st.integers(256, 16 * 1024))
    rams = [mib * MIB for mib in draw(st.lists(ram_mib, min_size=1, max_size=MAX_NODES))]
    request = PlacementRequest(
        sharding=draw(st.sampled_from(list(Sharding))),
        instance_meta=draw(st.sampled_from([InstanceMeta.MLX_RING, InstanceMeta.MLX_JACCL])),
        min_nodes=draw(st.integers(1, len(rams) + 1)),
    )
    return card, rams, request


def _place(
    rams: list[int], card: ModelCard, request: PlacementRequest
) -> tuple[ClusterFacts, Placement | PlacementRefusal]:
    # Every node connects to every other, so any subset forms a ring.
    readings = [telemetry(f"n{i}", ram, backends=("mlx",)) for i, ram in enumerate(rams)]
    cluster = facts(*readings, connected=True)
    return cluster, place(card, cluster, request, CountingIds())


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_a_placement_never_exceeds_any_nodes_available_memory(
    scenario: tuple[ModelCard, list[int], PlacementRequest],
) -> None:
    card, rams, request = scenario
    _cluster, result = _place(rams, card, request)
    if not isinstance(result, Placement):
        assert isinstance(result, PlacementRefusal)
        return
    available = {f"n{i}": ram for i, ram in enumerate(rams)}
    for node, delta in result.memory_delta_by_node.items():
        assert delta + HEADROOM_BYTES < available[node]
    assert len(result.node_ids) >= request.min_nodes


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_pipeline_layers_cover_the_model_exactly_once(
    scenario: tuple[ModelCard, list[int], PlacementRequest],
) -> None:
    card, rams, request = scenario
    _, result = _place(rams, card, request)
    if not isinstance(result, Placement):
        return
    shards = list(result.instance.shard_assignments.runner_to_shard.values())
    if result.sharding == Sharding.TENSOR:
        assert all(isinstance(s, TensorShardMetadata) for s in shards)
        return
    ordered = sorted(
        (s for s in shards if isinstance(s, PipelineShardMetadata)), key=lambda s: s.device_rank
    )
    assert len(ordered) == len(shards)
    assert ordered[0].start_layer == 0
    for left, right in itertools.pairwise(ordered):
        assert left.end_layer == right.start_layer
    assert ordered[-1].end_layer == ordered[-1].n_layers == card.n_layers
    assert all(s.start_layer < s.end_layer for s in ordered)


@settings(max_examples=300, deadline=None)
@given(scenarios())
def test_min_nodes_above_the_eligible_nodes_always_refuses(
    scenario: tuple[ModelCard, list[int], PlacementRequest],
) -> None:
    card, rams, request = scenario
    cluster, result = _place(rams, card, request)
    eligible, _ = screen_nodes(card, cluster, frozenset())
    if request.min_nodes > len(eligible):
        assert isinstance(result, PlacementRefusal)


@given(st.integers(1, 200), st.lists(st.integers(0, 10**12), min_size=1, max_size=16))
def test_split_layers_covers_every_layer_once(n_layers: int, capacities: list[int]) -> None:
    if n_layers < len(capacities):
        return
    ranges = split_layers(n_layers, capacities)
    assert len(ranges) == len(capacities)
    assert ranges[0][0] == 0 and ranges[-1][1] == n_layers
    assert all(start < end for start, end in ranges)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
