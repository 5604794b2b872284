from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId
from skulk_core.models.cards import Memory, ModelCard
from skulk_core.state.apply import OutOfOrderEvent, apply
from skulk_core.state.commands import (
    AddCustomCard,
    CreateInstance,
    DeleteInstance,
    RegisterNode,
    RemoveCustomCard,
    ReportRunnerStatus,
)
from skulk_core.state.decide import Refused, decide
from skulk_core.state.events import (
    Event,
    IndexedEvent,
    InstanceCreated,
    InstanceFailed,
    NodeJoined,
    NodeLeft,
    RunnerStatusUpdated,
)
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerFailed,
    RunnerIdle,
    RunnerReady,
    ShardAssignments,
)
from skulk_core.state.state import MAX_INSTANCE_FAILURES, InstanceFailure, State

NODE = NodeId("12D3KooWnode")
NOW = datetime(2026, 11, 30, tzinfo=UTC)


def _indexed(state: State, event: Event, origin: NodeId = NODE) -> IndexedEvent:
    return IndexedEvent(
        idx=state.last_event_applied_idx + 1, event=event, origin=origin, recorded_at=NOW
    )


def _instance(instance_id: str = "i1", runner: str = "r1") -> MlxRingInstance:
    return MlxRingInstance(
        instance_id=InstanceId(instance_id),
        shard_assignments=ShardAssignments(
            model_id=ModelId("local/m"),
            node_to_runner={NODE: RunnerId(runner)},
            runner_to_shard={
                RunnerId(runner): PipelineShardMetadata(
                    model_id=ModelId("local/m"),
                    device_rank=0,
                    world_size=1,
                    start_layer=0,
                    end_layer=18,
                    n_layers=18,
                )
            },
        ),
        context_token_limit=4096,
    )


def _run(state: State, *events: Event) -> State:
    for event in events:
        state = apply(state, _indexed(state, event))
    return state


def test_apply_refuses_gaps_and_repeats() -> None:
    state = _run(State(), NodeJoined(node_id=NODE))
    with pytest.raises(OutOfOrderEvent):
        apply(
            state, IndexedEvent(idx=2, event=NodeLeft(node_id=NODE), origin=NODE, recorded_at=NOW)
        )
    with pytest.raises(OutOfOrderEvent):
        apply(
            state, IndexedEvent(idx=0, event=NodeLeft(node_id=NODE), origin=NODE, recorded_at=NOW)
        )


def test_apply_records_last_seen_and_index() -> None:
    state = _run(State(), NodeJoined(node_id=NODE))
    assert state.last_event_applied_idx == 0
    assert state.last_seen == {NODE: NOW}
    assert state.topology.nodes == (NODE,)


def test_instance_lifecycle_removes_its_runners() -> None:
    instance = _instance()
    state = _run(
        State(),
        InstanceCreated(instance=instance),
        RunnerStatusUpdated(runner_id=RunnerId("r1"), status=RunnerReady()),
    )
    assert isinstance(state.runners[RunnerId("r1")], RunnerReady)
    events = decide(state, DeleteInstance(command_id=CommandId("c"), instance_id=InstanceId("i1")))
    assert not isinstance(events, Refused)
    state = _run(state, *events)
    assert state.instances == {}
    assert state.runners == {}


def test_failure_is_recorded_before_the_instance_goes_and_history_is_bounded() -> None:
    state = State()
    for n in range(MAX_INSTANCE_FAILURES + 3):
        instance = _instance(f"i{n}", f"r{n}")
        failure = InstanceFailure(
            instance_id=instance.instance_id,
            model_id=ModelId("local/m"),
            error_code="runner_crashed",
            error_message="runner exited with status 1",
            affected_node_ids=(NODE,),
            recorded_at=NOW,
        )
        state = _run(state, InstanceCreated(instance=instance), InstanceFailed(failure=failure))
    assert state.instances == {}
    assert len(state.instance_failures) == MAX_INSTANCE_FAILURES
    # newest first
    assert state.instance_failures[0].instance_id == InstanceId(f"i{MAX_INSTANCE_FAILURES + 2}")


def test_decide_refuses_unknown_instance_and_duplicate() -> None:
    assert isinstance(
        decide(State(), DeleteInstance(command_id=CommandId("c"), instance_id=InstanceId("x"))),
        Refused,
    )
    state = _run(State(), InstanceCreated(instance=_instance()))
    refused = decide(state, CreateInstance(command_id=CommandId("c"), instance=_instance()))
    assert isinstance(refused, Refused)
    assert refused.code == "instance_exists"


def test_create_instance_starts_runners_idle() -> None:
    events = decide(State(), CreateInstance(command_id=CommandId("c"), instance=_instance()))
    assert not isinstance(events, Refused)
    state = _run(State(), *events)
    assert isinstance(state.runners[RunnerId("r1")], RunnerIdle)


def test_late_runner_report_for_a_deleted_instance_is_dropped() -> None:
    report = ReportRunnerStatus(
        command_id=CommandId("c"),
        runner_id=RunnerId("gone"),
        status=RunnerFailed(error_message="x"),
    )
    assert decide(State(), report) == []


def test_custom_cards_add_and_remove() -> None:
    card = ModelCard(model_id=ModelId("org/m"), storage_size=Memory(in_bytes=1), n_layers=2)
    events = decide(State(), AddCustomCard(command_id=CommandId("c"), card=card))
    assert not isinstance(events, Refused)
    state = _run(State(), *events)
    assert state.custom_model_cards[ModelId("org/m")] == card
    removal = decide(state, RemoveCustomCard(command_id=CommandId("d"), model_id=ModelId("org/m")))
    assert not isinstance(removal, Refused)
    assert _run(state, *removal).custom_model_cards == {}
    assert isinstance(
        decide(State(), RemoveCustomCard(command_id=CommandId("d"), model_id=ModelId("org/m"))),
        Refused,
    )


@given(st.lists(st.sampled_from(["join-a", "join-b", "leave-a", "leave-b"]), max_size=30))
def test_replaying_any_join_leave_history_is_deterministic(ops: list[str]) -> None:
    def event(op: str) -> Event:
        kind, name = op.split("-")
        node = NodeId(f"12D3KooW{name}")
        return NodeJoined(node_id=node) if kind == "join" else NodeLeft(node_id=node)

    def replay() -> State:
        state = State()
        for op in ops:
            state = apply(state, _indexed(state, event(op), origin=NODE))
        return state

    first, second = replay(), replay()
    assert first == second
    assert first.last_event_applied_idx == len(ops) - 1
    assert len(set(first.topology.nodes)) == len(first.topology.nodes)
    joined = {op.split("-")[1] for op in ops if op.startswith("join")}
    for node in first.topology.nodes:
        assert node.removeprefix("12D3KooW") in joined


def test_register_node_joins_topology() -> None:
    events = decide(State(), RegisterNode(command_id=CommandId("c"), node_id=NODE))
    assert not isinstance(events, Refused)
    assert _run(State(), *events).topology.nodes == (NODE,)
