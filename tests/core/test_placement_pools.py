"""LlamaRpc pools, the master's cluster-wide admission, the repair rule and a node's
own fit check: the pure halves of serving one model across machines."""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec
import pytest

from skulk_core.ids import CommandId, InstanceId, NodeId
from skulk_core.placement import (
    HEADROOM_BYTES,
    NO_VALID_PLACEMENT,
    Placement,
    PlacementRefusal,
    PlacementRequest,
    PreviewQuery,
    admit_instance,
    place,
    preview_placements,
)
from skulk_core.placement.local_fit import local_shortfall
from skulk_core.placement.ordering import admit_command
from skulk_core.placement.repair import (
    MAX_REPAIR_ATTEMPTS,
    after_peer_left,
    intent_of,
    repair_request,
    waits_for_peer,
)
from skulk_core.placement.rpc_pool import (
    RPC_PORT_BASE,
    RPC_PORT_SPAN,
    assign_endpoints,
    multiaddr_host,
    ports_in_use,
    split_endpoint,
)
from skulk_core.placement.shapes import instance_shares
from skulk_core.state.commands import CreateInstance
from skulk_core.state.decide import Refused
from skulk_core.state.shards import (
    InstanceMeta,
    LlamaRpcInstance,
    PipelineShardMetadata,
    RpcDonorShardMetadata,
    ShardAssignments,
    Sharding,
)
from skulk_core.state.state import Connection, InstanceFailure, PlacementIntent, State, Topology
from tests.core.test_placement import (
    GIB,
    CountingIds,
    facts,
    gguf_card,
    telemetry,
    whole_shard,
)

A, B, C = NodeId("a"), NodeId("b"), NodeId("c")


def three_nodes(ram: int = 8 * GIB) -> State:
    return State(topology=Topology(nodes=(A, B, C)))


def pooled(result: Placement | PlacementRefusal) -> LlamaRpcInstance:
    assert isinstance(result, Placement), result
    assert isinstance(result.instance, LlamaRpcInstance)
    return result.instance


def test_endpoints_follow_the_drivers_fabric_edges_and_skip_taken_ports() -> None:
    edges = (
        Connection(local_node_id=A, send_back_node_id=B, sink_multiaddr="/ip4/10.0.0.2/tcp/52416"),
        Connection(local_node_id=C, send_back_node_id=B, sink_multiaddr="/ip4/192.168.1.2/tcp/1"),
        Connection(local_node_id=A, send_back_node_id=C, sink_multiaddr="/ip6/fd00::3/tcp/52416"),
    )
    in_use = {"10.0.0.2": frozenset({RPC_PORT_BASE, RPC_PORT_BASE + 1})}
    endpoints = assign_endpoints((A, B, C), edges, in_use)
    assert endpoints == {B: f"10.0.0.2:{RPC_PORT_BASE + 2}", C: f"[fd00::3]:{RPC_PORT_BASE}"}
    assert split_endpoint(f"[fd00::3]:{RPC_PORT_BASE}") == ("fd00::3", RPC_PORT_BASE)
    assert multiaddr_host("tcp://nonsense") is None
    assert "no fabric address is known for donor node c" in str(
        assign_endpoints((A, C), edges[:2], {})
    )


def test_two_donors_on_one_host_get_different_ports() -> None:
    edges = tuple(
        Connection(local_node_id=A, send_back_node_id=n, sink_multiaddr="/ip4/127.0.0.1/tcp/9")
        for n in (B, C)
    )
    endpoints = assign_endpoints((A, B, C), edges, {})
    assert isinstance(endpoints, dict)
    assert sorted(endpoints.values()) == [
        f"127.0.0.1:{RPC_PORT_BASE}",
        f"127.0.0.1:{RPC_PORT_BASE + 1}",
    ]


def test_a_pool_splits_layers_by_memory_and_names_every_donor() -> None:
    cluster = facts(
        telemetry("a", 8 * GIB), telemetry("b", 4 * GIB), telemetry("c", 4 * GIB), connected=True
    )
    card = gguf_card()
    result = place(card, cluster, PlacementRequest(min_nodes=3), CountingIds())
    instance = pooled(result)
    assert isinstance(result, Placement)
    driver = instance.shard_assignments.runner_to_shard[
        instance.shard_assignments.node_to_runner[instance.driver_node_id]
    ]
    assert isinstance(driver, PipelineShardMetadata) and driver.start_layer == 0
    donors = [
        s
        for s in instance.shard_assignments.runner_to_shard.values()
        if isinstance(s, RpcDonorShardMetadata)
    ]
    assert len(donors) == 2 and set(instance.rpc_endpoints) == set(result.node_ids[1:])
    assert sorted(d.end_layer - d.start_layer for d in donors) == sorted(
        d.end_layer - d.start_layer for d in donors
    )
    # Every node gets a memory delta and the shares add up to the whole model.
    assert set(result.memory_delta_by_node) == {A, B, C}
    shares = instance_shares(card, instance)
    assert not isinstance(shares, str)
    assert sum(s.end_layer - s.start_layer for s in shares) == card.n_layers


def test_a_placed_pool_holds_its_ports_for_the_next_pool() -> None:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    first = pooled(place(gguf_card(), cluster, PlacementRequest(min_nodes=2), CountingIds()))
    state = State(
        topology=Topology(nodes=(A, B), connections=cluster.connections),
        instances={first.instance_id: first},
    )
    again = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True, state=state)
    second = pooled(place(gguf_card(), again, PlacementRequest(min_nodes=2), CountingIds()))
    assert set(first.rpc_endpoints.values()).isdisjoint(second.rpc_endpoints.values())


def test_a_port_a_donor_found_taken_is_not_assigned_again() -> None:
    failure = InstanceFailure(
        instance_id=InstanceId("old"),
        model_id=gguf_card().model_id,
        error_code=f"rpc_port_in_use:10.0.0.2:{RPC_PORT_BASE}",
        error_message="taken",
        affected_node_ids=(A, B),
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert ports_in_use((), (failure,)) == {"10.0.0.2": frozenset({RPC_PORT_BASE})}


def test_previews_report_the_pool_shape_for_gguf_across_nodes() -> None:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    previews = preview_placements(gguf_card(), cluster, PreviewQuery(min_nodes=2), CountingIds())
    valid = [p for p in previews if p.error is None]
    assert valid and all(p.instance_meta == InstanceMeta.LLAMA_RPC for p in valid)
    assert all(len(p.memory_delta_by_node) == 2 for p in valid)


def test_an_exact_pool_is_checked_like_a_planned_one() -> None:
    card = gguf_card()
    assignments = ShardAssignments(
        model_id=card.model_id,
        node_to_runner={A: "r1", B: "r2"},  # type: ignore[dict-item]
        runner_to_shard={
            "r1": PipelineShardMetadata(  # type: ignore[dict-item]
                model_id=card.model_id,
                device_rank=0,
                world_size=2,
                start_layer=0,
                end_layer=10,
                n_layers=card.n_layers,
            ),
            "r2": RpcDonorShardMetadata(  # type: ignore[dict-item]
                model_id=card.model_id,
                device_rank=1,
                world_size=2,
                rpc_port=RPC_PORT_BASE,
                start_layer=10,
                end_layer=card.n_layers,
                n_layers=card.n_layers,
            ),
        },
    )
    missing = LlamaRpcInstance(
        instance_id=InstanceId("i"), shard_assignments=assignments, driver_node_id=A
    )
    assert "needs an rpcEndpoints entry" in str(instance_shares(card, missing))
    wrong_driver = msgspec.structs.replace(
        missing, driver_node_id=B, rpc_endpoints={B: f"h:{RPC_PORT_BASE}"}
    )
    assert "driver must hold device rank 0" in str(instance_shares(card, wrong_driver))


def _a_planned_pool() -> tuple[LlamaRpcInstance, NodeId]:
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    instance = pooled(place(gguf_card(), cluster, PlacementRequest(min_nodes=2), CountingIds()))
    (donor,) = instance.rpc_endpoints
    return instance, donor


@pytest.mark.parametrize(
    ("endpoints", "why"),
    [
        ({"donor": f"203.0.113.9:{RPC_PORT_BASE}"}, "is not an address the fabric knows"),
        ({"donor": f"[::1]:{RPC_PORT_BASE}"}, "is not an address the fabric knows"),
        ({"donor": f"donor.example:{RPC_PORT_BASE}"}, "is not an address the fabric knows"),
        ({"donor": "HOST:22"}, "is outside the RPC ports"),
        ({"donor": f"HOST:{RPC_PORT_BASE + RPC_PORT_SPAN}"}, "is outside the RPC ports"),
        ({"donor": f"HOST:{RPC_PORT_BASE}", "driver": "HOST:1"}, "which is not a donor"),
    ],
)
def test_an_exact_pool_naming_a_host_other_than_its_donors_is_refused(
    endpoints: dict[str, str], why: str
) -> None:
    instance, donor = _a_planned_pool()
    host = instance.rpc_endpoints[donor].rsplit(":", 1)[0]
    named = {
        (donor if node == "donor" else instance.driver_node_id): endpoint.replace("HOST", host)
        for node, endpoint in endpoints.items()
    }
    # The shard names the same port, so only the endpoint rule can refuse it.
    port = int(named[donor].rsplit(":", 1)[1])
    runner = instance.shard_assignments.node_to_runner[donor]
    shard = instance.shard_assignments.runner_to_shard[runner]
    assert isinstance(shard, RpcDonorShardMetadata)
    assignments = msgspec.structs.replace(
        instance.shard_assignments,
        runner_to_shard={
            **instance.shard_assignments.runner_to_shard,
            runner: msgspec.structs.replace(shard, rpc_port=port),
        },
    )
    forged = msgspec.structs.replace(instance, shard_assignments=assignments, rpc_endpoints=named)
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    refusal = admit_instance(forged, gguf_card(), cluster, State())
    assert isinstance(refusal, PlacementRefusal), refusal
    assert refusal.code == NO_VALID_PLACEMENT
    assert why in refusal.message
    if "not a donor" not in why:
        assert f"donor node {donor}" in refusal.message
    # The master refuses it too, even when it cannot size the model to judge the rest.
    state = State(topology=Topology(nodes=(A, B), connections=cluster.connections))
    ordered = admit_command(
        state, CreateInstance(command_id=CommandId("c"), instance=forged), {}, {}
    )
    assert isinstance(ordered, Refused) and why in ordered.message


def test_an_exact_pool_at_its_donors_fabric_address_is_admitted() -> None:
    instance, donor = _a_planned_pool()
    cluster = facts(telemetry("a", 8 * GIB), telemetry("b", 8 * GIB), connected=True)
    admitted = admit_instance(instance, gguf_card(), cluster, State())
    assert isinstance(admitted, LlamaRpcInstance), admitted
    assert admitted.rpc_endpoints == instance.rpc_endpoints
    host = instance.rpc_endpoints[donor].rsplit(":", 1)[0]
    assert host == ("10.0.0.1" if donor == A else "10.0.0.2")


def _create(result: Placement | PlacementRefusal, command: str) -> CreateInstance:
    assert isinstance(result, Placement), result
    return CreateInstance(command_id=CommandId(command), instance=result.instance)


def test_the_master_refuses_a_second_placement_that_would_oversubscribe_a_node() -> None:
    # Each placement fits node a alone (planned by two API nodes against the same
    # State); together they do not. The master orders them one at a time.
    card = gguf_card()
    request = PlacementRequest(context_tokens=2048)
    sized = place(card, facts(telemetry("a", 64 * GIB)), request, CountingIds())
    assert isinstance(sized, Placement)
    ram = int(sized.memory_delta_by_node[A] * 1.6) + HEADROOM_BYTES
    readings = {A: telemetry("a", ram)}
    cluster = facts(telemetry("a", ram))
    first = _create(place(card, cluster, request, CountingIds()), "c1")
    other_ids = CountingIds()
    other_ids.count = 100  # the second API node mints its own ids
    second = _create(place(card, cluster, request, other_ids), "c2")
    state = msgspec.structs.replace(State(), topology=Topology(nodes=(A,)))
    cards = {card.model_id: card}
    assert admit_command(state, first, readings, cards) is None
    ordered = msgspec.structs.replace(state, instances={first.instance.instance_id: first.instance})
    refused = admit_command(ordered, second, readings, cards)
    assert isinstance(refused, Refused) and refused.code == NO_VALID_PLACEMENT
    assert "committed to instances placed here" in refused.message
    # A master that cannot size the model lets the API node's check stand.
    assert admit_command(ordered, second, readings, {}) is None


@pytest.mark.parametrize(
    ("code", "excluded", "min_nodes"),
    [
        ("placement_refused:b", {A, B}, 2),
        ("model_not_installed:b", {A, B}, 2),
        ("download_failed:b", {A, B}, 2),
        ("rpc_donor_lost:b", {A}, 2),
        ("rpc_port_in_use:10.0.0.2:52500", {A}, 2),
        ("mlx_ring_peer_lost:b", {A}, 2),
        # A node that left took its share: the survivors take the model, however few.
        ("node_lost:b", {A}, 1),
    ],
)
def test_a_repair_keeps_the_request_and_excludes_the_refusing_node(
    code: str, excluded: set[NodeId], min_nodes: int
) -> None:
    request = PlacementRequest(min_nodes=2, excluded_node_ids=frozenset({A}), context_tokens=4096)
    again = repair_request(intent_of(request), code, None)
    assert again is not None
    assert again.excluded_node_ids == excluded
    assert (again.min_nodes, again.context_tokens, again.sharding) == (
        min_nodes,
        4096,
        Sharding.PIPELINE,
    )


@pytest.mark.parametrize("code", ["rpc_donor_lost:b", "mlx_ring_peer_lost:b"])
def test_a_pool_whose_peer_then_leaves_goes_back_on_the_nodes_that_remain(code: str) -> None:
    # The peer's runner failed first; membership drops its silent node seconds later.
    request = PlacementRequest(min_nodes=2, excluded_node_ids=frozenset({A}), context_tokens=4096)
    assert waits_for_peer(code)
    assert after_peer_left(request, code, [A, B, NodeId("c")]) is None  # still a member
    again = after_peer_left(request, code, [A, NodeId("c")])
    assert again is not None
    assert (again.min_nodes, again.excluded_node_ids, again.context_tokens) == (1, {A, B}, 4096)


def test_other_failures_do_not_wait_for_a_peer() -> None:
    request = PlacementRequest(min_nodes=2)
    for code in ("node_lost:b", "placement_refused:b", "rpc_donor_lost", "runner_crashed"):
        assert not waits_for_peer(code)
        assert after_peer_left(request, code, [A]) is None


def test_repairs_stop_after_the_budget_and_for_failures_placement_cannot_avoid() -> None:
    spent = PlacementIntent(repair_attempt=MAX_REPAIR_ATTEMPTS)
    assert repair_request(spent, "rpc_donor_lost:b", None) is None
    assert repair_request(PlacementIntent(), "runner_crashed", None) is None


def test_a_node_refuses_a_share_that_no_longer_fits_with_the_arithmetic() -> None:
    card = gguf_card()
    shard = whole_shard(card)
    roomy = telemetry("a", 64 * GIB)
    tight = telemetry("a", card.storage_size.in_bytes)
    kwargs = {"node_id": A, "context_tokens": 4096, "backend": "llama_cpp"}
    assert local_shortfall(card, shard, reading=roomy, **kwargs) is None  # type: ignore[arg-type]
    why = local_shortfall(card, shard, reading=tight, **kwargs)  # type: ignore[arg-type]
    assert why is not None and "needs" in why and "but node a has" in why
