"""Exact instances (``POST /instance``): decoding the /state form and admitting it."""

from __future__ import annotations

import msgspec
import pytest

from skulk_core.ids import InstanceId, ModelId, NodeId, RunnerId
from skulk_core.placement import (
    MODEL_CARD_IDENTITY_MISMATCH,
    NO_VALID_PLACEMENT,
    ClusterFacts,
    InstanceWireError,
    PlacementRefusal,
    PlacementRequest,
    admit_instance,
    instance_from_wire,
    place,
)
from skulk_core.state.shards import (
    Instance,
    LlamaRpcInstance,
    MlxJacclInstance,
    MlxRingInstance,
    PipelineShardMetadata,
    ShardAssignments,
)
from skulk_core.state.state import State
from skulk_core.wire import to_wire
from tests.core.test_placement import (
    GIB,
    MIB,
    CountingIds,
    facts,
    gguf_card,
    placed,
    telemetry,
)

CARD = gguf_card()


def single(
    *,
    node: str = "a",
    start: int = 0,
    end: int = 18,
    limit: int | None = None,
    model: str = CARD.model_id,
    shard_model: str | None = None,
) -> MlxRingInstance:
    runner = RunnerId("runner-x")
    return MlxRingInstance(
        instance_id=InstanceId("exact-1"),
        shard_assignments=ShardAssignments(
            model_id=ModelId(model),
            node_to_runner={NodeId(node): runner},
            runner_to_shard={
                runner: PipelineShardMetadata(
                    model_id=ModelId(shard_model or model),
                    device_rank=0,
                    world_size=1,
                    start_layer=start,
                    end_layer=end,
                    n_layers=18,
                )
            },
        ),
        context_token_limit=limit,
    )


def cluster() -> ClusterFacts:
    return facts(telemetry("a", 4 * GIB))


def admitted(instance: Instance, state: State | None = None) -> Instance:
    result = admit_instance(instance, CARD, cluster(), state or State())
    assert not isinstance(result, PlacementRefusal), result
    return result


def refusal(instance: Instance, facts_: ClusterFacts | None = None) -> PlacementRefusal:
    result = admit_instance(instance, CARD, facts_ or cluster(), State())
    assert isinstance(result, PlacementRefusal), result
    return result


def test_the_state_rendering_decodes_back_to_the_same_instance() -> None:
    instance = placed(place(CARD, cluster(), PlacementRequest(), CountingIds())).instance
    assert instance_from_wire(to_wire(instance)) == instance


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ([], "one key"),
        ({"MlxRingInstance": {}, "MlxJacclInstance": {}}, "one key"),
        ({"NotAnInstance": {}}, "unknown kind 'NotAnInstance'"),
        ({"MlxRingInstance": []}, "must be an object"),
        ({"MlxRingInstance": {"instanceId": "x"}}, "invalid instance"),
        (
            {
                "MlxRingInstance": {
                    "instanceId": "x",
                    "shardAssignments": {
                        "modelId": "m",
                        "nodeToRunner": {"a": "r"},
                        "runnerToShard": {"r": {"BogusShard": {}}},
                    },
                }
            },
            "runnerToShard['r'] has unknown kind 'BogusShard'",
        ),
    ],
)
def test_malformed_instances_are_refused_with_where(document: object, complaint: str) -> None:
    with pytest.raises(InstanceWireError, match=complaint.replace("[", r"\[")):
        instance_from_wire(document)


def test_a_preview_instance_keeps_its_stamped_maximum() -> None:
    assert admitted(single(limit=32768)).context_token_limit == 32768
    assert admitted(single(limit=1000)).context_token_limit == 1000


def test_an_inflated_window_is_lowered_to_the_ceiling() -> None:
    tight = facts(telemetry("a", 1000 * MIB))
    result = admit_instance(single(limit=32768), CARD, tight, State())
    assert isinstance(result, MlxRingInstance)
    assert result.context_token_limit is not None
    assert 256 <= result.context_token_limit < 32768


def test_an_omitted_window_is_backfilled_with_the_launch_default() -> None:
    assert admitted(single()).context_token_limit == 8192


def test_a_nonpositive_window_is_refused() -> None:
    assert "contextTokenLimit must be positive" in refusal(single(limit=0)).message


def test_shards_naming_another_model_are_an_identity_mismatch() -> None:
    result = refusal(single(shard_model="someone/else"))
    assert result.code == MODEL_CARD_IDENTITY_MISMATCH


def test_nodes_outside_the_cluster_are_refused() -> None:
    assert "node zz is not in the cluster" in refusal(single(node="zz")).message


@pytest.mark.parametrize(("start", "end"), [(0, 17), (1, 18), (0, 19)])
def test_layer_ranges_must_cover_the_model(start: int, end: int) -> None:
    assert "cover layers [0, 18)" in refusal(single(start=start, end=end)).message


def test_memory_is_checked_with_the_arithmetic() -> None:
    result = refusal(single(), facts(telemetry("a", 200 * MIB)))
    assert result.code == NO_VALID_PLACEMENT
    assert "but node a (host-a) has 0.20 GB of RAM available" in result.message


def test_runner_ids_already_in_use_are_refused() -> None:
    other = msgspec.structs.replace(single(), instance_id=InstanceId("other"))
    state = State(instances={other.instance_id: other})
    result = admit_instance(single(), CARD, cluster(), state)
    assert isinstance(result, PlacementRefusal)
    assert "runner runner-x already belongs to instance other" in result.message


def test_shapes_this_node_cannot_run_are_refused() -> None:
    plain = single()
    jaccl = MlxJacclInstance(
        instance_id=plain.instance_id, shard_assignments=plain.shard_assignments
    )
    assert "is a MlxRingInstance, not MlxJacclInstance" in refusal(jaccl).message
    rpc = LlamaRpcInstance(
        instance_id=plain.instance_id,
        shard_assignments=plain.shard_assignments,
        driver_node_id=NodeId("a"),
    )
    assert "LlamaRpc" in refusal(rpc).message
