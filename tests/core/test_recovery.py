"""What a healed partition's losing side submits again, and what it must refuse."""

from __future__ import annotations

from datetime import UTC, datetime

from skulk_core.ids import InstanceId, ModelId, NodeId, RunnerId
from skulk_core.models.cards import Memory, ModelCard, ModelTask
from skulk_core.state.apply import apply
from skulk_core.state.commands import AddCustomCard, CreateInstance
from skulk_core.state.events import (
    CustomModelCardAdded,
    Event,
    IndexedEvent,
    InstanceCreated,
    InstanceDeleted,
    MasterElected,
    NodeJoined,
    RunnerStatusUpdated,
)
from skulk_core.state.recovery import lost_changes, replay
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerReady,
    ShardAssignments,
)
from skulk_core.state.state import MAX_REIGNS, State

A, B, C = NodeId("node-a"), NodeId("node-b"), NodeId("node-c")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def _indexed(idx: int, event: Event, *, origin: NodeId, term: int, master: NodeId) -> IndexedEvent:
    return IndexedEvent(
        idx=idx, event=event, origin=origin, recorded_at=NOW, term=term, indexed_by=master
    )


def _card(model: str) -> ModelCard:
    return ModelCard(
        model_id=ModelId(model),
        storage_size=Memory(in_bytes=1000),
        n_layers=2,
        hidden_size=8,
        supports_tensor=False,
        tasks=(ModelTask.TEXT_GENERATION,),
    )


def _instance(instance_id: str, node: NodeId) -> MlxRingInstance:
    runner = RunnerId(f"runner-{instance_id}")
    return MlxRingInstance(
        instance_id=InstanceId(instance_id),
        shard_assignments=ShardAssignments(
            model_id=ModelId("m"),
            node_to_runner={node: runner},
            runner_to_shard={
                runner: PipelineShardMetadata(
                    model_id=ModelId("m"),
                    device_rank=0,
                    world_size=1,
                    start_layer=0,
                    end_layer=2,
                    n_layers=2,
                )
            },
        ),
    )


def _history(*events: IndexedEvent) -> State:
    state = State()
    for event in events:
        state = apply(state, event)
    return state


SHARED = [
    _indexed(0, MasterElected(master_node_id=A, term=1), origin=A, term=1, master=A),
    _indexed(1, NodeJoined(node_id=A), origin=A, term=1, master=A),
    _indexed(2, NodeJoined(node_id=B), origin=B, term=1, master=A),
    _indexed(3, NodeJoined(node_id=C), origin=C, term=1, master=A),
    _indexed(4, CustomModelCardAdded(card=_card("shared")), origin=A, term=1, master=A),
]


def test_only_what_this_node_asked_for_after_the_split_is_lost() -> None:
    # A (the old master) was cut off and went on in term 1; B and C elected B in term 2.
    losing = [
        *SHARED,
        _indexed(5, CustomModelCardAdded(card=_card("lone")), origin=A, term=1, master=A),
        _indexed(6, InstanceCreated(instance=_instance("i-a", A)), origin=A, term=1, master=A),
        _indexed(
            7,
            RunnerStatusUpdated(runner_id=RunnerId("r"), status=RunnerReady()),
            origin=A,
            term=1,
            master=A,
        ),
        _indexed(8, InstanceCreated(instance=_instance("i-tmp", A)), origin=A, term=1, master=A),
        _indexed(9, InstanceDeleted(instance_id=InstanceId("i-tmp")), origin=A, term=1, master=A),
    ]
    winner = _history(
        *SHARED,
        _indexed(5, MasterElected(master_node_id=B, term=2), origin=B, term=2, master=B),
        _indexed(6, CustomModelCardAdded(card=_card("majority")), origin=C, term=2, master=B),
    )
    lost = lost_changes(losing, winner, A)
    # The shared card stays shared; runner phases are re-reported, not replayed; an
    # instance placed and deleted again while partitioned is no change at all.
    assert [type(c.command) for c in lost] == [AddCustomCard, CreateInstance]
    assert [c.what for c in lost] == ["custom card for lone", "placement of instance i-a"]
    # B and C have nothing to resubmit: their changes are the winner's history.
    assert lost_changes(losing, winner, B) == []
    replays = replay(lost, winner)
    assert [r.refused for r in replays] == [None, None]


def test_what_no_longer_makes_sense_is_refused_with_the_reason() -> None:
    winner = _history(
        *SHARED[:3],
        _indexed(3, MasterElected(master_node_id=B, term=2), origin=B, term=2, master=B),
    )
    losing = [
        *SHARED[:3],
        _indexed(3, InstanceCreated(instance=_instance("i-c", C)), origin=A, term=1, master=A),
        _indexed(4, InstanceDeleted(instance_id=InstanceId("gone")), origin=A, term=1, master=A),
    ]
    refused = [r.refused for r in replay(lost_changes(losing, winner, A), winner)]
    assert refused == [
        "its nodes are not members of the healed cluster: ['node-c']",
        "the healed cluster has no such instance",
    ]


def test_reigns_are_kept_bounded_and_a_history_without_them_replays_nothing() -> None:
    events = [
        _indexed(i, MasterElected(master_node_id=A, term=i + 1), origin=A, term=i + 1, master=A)
        for i in range(MAX_REIGNS + 5)
    ]
    state = _history(*events)
    assert len(state.reigns) == MAX_REIGNS
    assert state.reigns[-1].term == MAX_REIGNS + 5
    lone = [_indexed(0, CustomModelCardAdded(card=_card("x")), origin=A, term=9, master=A)]
    assert lost_changes(lone, State(), A) == []
