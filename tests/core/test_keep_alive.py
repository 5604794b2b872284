"""Load on demand and keep-alive, the pure halves: durations, idle clocks, which
instances unload, which preview a request places and how far its load has come."""

from __future__ import annotations

import msgspec
import pytest

from skulk_core.config import ConfigError, parse_config
from skulk_core.ids import CommandId, InstanceId, ModelId, RunnerId, TaskId
from skulk_core.placement.keep_alive import (
    MAX_KEEP_ALIVE_SECONDS,
    KeepAliveError,
    expiries,
    idle_unloads,
    note_events,
    parse_keep_alive,
    refresh,
)
from skulk_core.placement.on_demand import (
    LoadFailed,
    Loading,
    Ready,
    first_valid,
    load_progress,
    no_placement_reason,
    request_of,
)
from skulk_core.placement.previews import PlacementPreview
from skulk_core.state.commands import CreateInstance, SetKeepAlive
from skulk_core.state.decide import Refused, decide
from skulk_core.state.events import (
    InstanceCreated,
    KeepAliveSet,
    RunnerStatusUpdated,
    TaskCreated,
    TaskDeleted,
)
from skulk_core.state.shards import (
    InstanceMeta,
    RunnerFailed,
    RunnerLoading,
    RunnerReady,
    Sharding,
)
from skulk_core.state.state import PlacementIntent, State, Task, TaskStatus
from tests.core.test_apply import _instance, _run

ON_DEMAND = PlacementIntent(on_demand=True, keep_alive_seconds=60.0)
EXPLICIT = PlacementIntent()


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("5m", 300.0),
        ("30s", 30.0),
        ("1h30m", 5400.0),
        ("300ms", 0.3),
        ("0", 0.0),
        (0, 0.0),
        (90, 90.0),
        ("90", 90.0),
        (2.5, 2.5),
        (-1, None),
        ("-1", None),
        ("-5m", None),
    ],
)
def test_keep_alive_reads_ollamas_forms(value: str | float, seconds: float | None) -> None:
    assert parse_keep_alive(value) == seconds


@pytest.mark.parametrize("value", ["soon", "5 minutes", "m5", "", "5d"])
def test_keep_alive_refuses_what_is_not_a_duration(value: str) -> None:
    with pytest.raises(KeepAliveError, match="not a duration"):
        parse_keep_alive(value)


def test_keep_alive_is_bounded() -> None:
    assert parse_keep_alive(MAX_KEEP_ALIVE_SECONDS) == MAX_KEEP_ALIVE_SECONDS
    with pytest.raises(KeepAliveError, match="at most"):
        parse_keep_alive(MAX_KEEP_ALIVE_SECONDS + 1)


def test_config_takes_a_duration_and_names_a_bad_one() -> None:
    config = parse_config({"inference": {"load_on_demand": True, "keep_alive": "2s"}})
    assert config.inference.load_on_demand
    assert parse_keep_alive(config.inference.keep_alive) == 2.0
    assert not parse_config({}).inference.load_on_demand
    with pytest.raises(ConfigError, match="keep_alive"):
        parse_config({"inference": {"keep_alive": "a while"}})


def _placed(intent: PlacementIntent, *, ready: bool = True) -> State:
    instance = _instance()
    status = RunnerReady() if ready else RunnerLoading()
    return _run(
        State(),
        InstanceCreated(instance=instance, intent=intent),
        RunnerStatusUpdated(
            runner_id=next(iter(instance.shard_assignments.runner_to_shard)), status=status
        ),
    )


I1 = InstanceId("i1")


def test_an_idle_on_demand_instance_unloads_after_its_keep_alive() -> None:
    state = _placed(ON_DEMAND)
    clocks = refresh(state, {}, now=100.0)
    assert clocks == {I1: 100.0}
    assert idle_unloads(state, refresh(state, clocks, 159.0), 159.0) == ()
    assert idle_unloads(state, refresh(state, clocks, 160.0), 160.0) == (I1,)


def test_explicit_placements_never_unload() -> None:
    state = _placed(EXPLICIT)
    assert refresh(state, {}, 0.0) == {}
    assert idle_unloads(state, {I1: 0.0}, 1e9) == ()


def test_forever_and_loading_instances_stay() -> None:
    forever = _placed(msgspec.structs.replace(ON_DEMAND, keep_alive_seconds=None))
    assert idle_unloads(forever, {I1: 0.0}, 1e9) == ()
    loading = _placed(ON_DEMAND, ready=False)
    # Loading time is not idle time: the clock restarts until the runner serves.
    assert refresh(loading, {I1: 0.0}, 500.0) == {I1: 500.0}
    assert idle_unloads(loading, {I1: 0.0}, 500.0) == ()


def test_a_busy_instance_stays_and_each_task_restarts_its_clock() -> None:
    state = _placed(ON_DEMAND)
    task = Task(
        task_id=TaskId("t1"),
        command_id=CommandId("c1"),
        instance_id=I1,
        kind="TextGeneration",
        task_status=TaskStatus.RUNNING,
    )
    busy = _run(state, TaskCreated(task=task))
    assert idle_unloads(busy, {I1: 0.0}, 1000.0) == ()
    # A request shorter than a tick: started and finished between two passes.
    clocks = note_events({I1: 0.0}, state, [TaskCreated(task=task)], 10.0)
    clocks = note_events(clocks, busy, [TaskDeleted(task_id=task.task_id)], 20.0)
    assert clocks == {I1: 20.0}
    done = _run(busy, TaskDeleted(task_id=task.task_id))
    assert idle_unloads(done, refresh(done, clocks, 79.0), 79.0) == ()
    assert idle_unloads(done, refresh(done, clocks, 80.0), 80.0) == (I1,)


def test_expiry_is_the_last_use_plus_the_keep_alive_and_never_for_explicit_ones() -> None:
    # What Ollama's /api/ps shows as expires_at.
    idle = _placed(ON_DEMAND)
    assert expiries(idle, {I1: 100.0}, now=130.0) == {I1: 160.0}
    assert expiries(idle, {}, now=130.0) == {I1: 190.0}  # no clock yet: used now
    assert expiries(_placed(ON_DEMAND, ready=False), {I1: 100.0}, now=130.0) == {I1: 190.0}
    assert expiries(_placed(EXPLICIT), {I1: 100.0}, now=130.0) == {I1: None}
    forever = _placed(msgspec.structs.replace(ON_DEMAND, keep_alive_seconds=None))
    assert expiries(forever, {I1: 100.0}, now=130.0) == {I1: None}


def test_set_keep_alive_changes_only_on_demand_instances() -> None:
    on_demand = _placed(ON_DEMAND)
    command = SetKeepAlive(command_id=CommandId("c"), instance_id=I1, keep_alive_seconds=0.0)
    events = decide(on_demand, command)
    assert events == [KeepAliveSet(instance_id=I1, keep_alive_seconds=0.0)]
    after = _run(on_demand, *events)
    assert after.placement_intents[I1].keep_alive_seconds == 0.0
    assert idle_unloads(after, {I1: 5.0}, 5.0) == (I1,)
    # An explicit placement stays whatever a request asks.
    assert decide(_placed(EXPLICIT), command) == []
    assert isinstance(decide(State(), command), Refused)


def test_a_created_instance_keeps_its_on_demand_intent() -> None:
    command = CreateInstance(command_id=CommandId("c"), instance=_instance(), intent=ON_DEMAND)
    events = decide(State(), command)
    assert not isinstance(events, Refused)
    assert _run(State(), *events).placement_intents[I1] == ON_DEMAND


def _preview(*, error: str | None = None, alternative: bool = False) -> PlacementPreview:
    return PlacementPreview(
        model_id=ModelId("local/m"),
        sharding=Sharding.PIPELINE,
        instance_meta=InstanceMeta.MLX_RING,
        node_count=1,
        instance=None if error else _instance(),
        error=error,
        alternative=alternative,
    )


def test_a_request_places_the_first_valid_preview_that_is_not_an_alternative() -> None:
    full = _preview(error="node vm has 0.1 GB free, needs 0.4 GB")
    alternative = _preview(alternative=True)
    best = _preview()
    assert first_valid([full, alternative, best]) is best
    assert first_valid([full, alternative]) is None
    assert no_placement_reason([full, full]) == "node vm has 0.1 GB free, needs 0.4 GB"
    assert request_of(best).instance_meta is InstanceMeta.MLX_RING


def test_load_progress_follows_the_runners_and_names_a_failure() -> None:
    assert load_progress(State(), I1, seen=False) == Loading()
    assert isinstance(load_progress(State(), I1, seen=True), LoadFailed)
    assert load_progress(_placed(ON_DEMAND, ready=False), I1, seen=True) == Loading()
    assert load_progress(_placed(ON_DEMAND), I1, seen=True) == Ready()
    failed = _run(
        _placed(ON_DEMAND, ready=False),
        RunnerStatusUpdated(runner_id=RunnerId("r1"), status=RunnerFailed(error_message="oom")),
    )
    assert load_progress(failed, I1, seen=True) == LoadFailed(message="a runner failed: oom")
