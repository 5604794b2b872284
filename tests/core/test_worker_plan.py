import msgspec

from skulk_core.cluster.routing import select_instance
from skulk_core.cluster.worker_plan import LocalRunnerPhase, StartRunner, StopRunner, plan
from skulk_core.ids import CommandId, InstanceId, ModelId, NodeId, RunnerId, TaskId
from skulk_core.state.shards import (
    MlxRingInstance,
    PipelineShardMetadata,
    RunnerFailed,
    RunnerLoading,
    RunnerReady,
    RunnerShuttingDown,
    RunnerStatus,
    ShardAssignments,
)
from skulk_core.state.state import State, Task, TaskStatus

HERE = NodeId("12D3KooWhere")
THERE = NodeId("12D3KooWthere")
MODEL = ModelId("local/m")


def _instance(instance_id: str, runner: str, node: NodeId = HERE) -> MlxRingInstance:
    return MlxRingInstance(
        instance_id=InstanceId(instance_id),
        shard_assignments=ShardAssignments(
            model_id=MODEL,
            node_to_runner={node: RunnerId(runner)},
            runner_to_shard={
                RunnerId(runner): PipelineShardMetadata(
                    model_id=MODEL,
                    device_rank=0,
                    world_size=1,
                    start_layer=0,
                    end_layer=18,
                    n_layers=18,
                )
            },
        ),
    )


def _state(*pairs: tuple[MlxRingInstance, RunnerStatus | None]) -> State:
    runners = {}
    for instance, status in pairs:
        if status is not None:
            runners.update(dict.fromkeys(instance.shard_assignments.runner_to_shard, status))
    return State(instances={i.instance_id: i for i, _ in pairs}, runners=runners)


def test_starts_assigned_runners_only_here() -> None:
    state = _state((_instance("a", "ra"), None), (_instance("b", "rb", THERE), None))
    actions = plan(state, HERE, {})
    assert [type(a) for a in actions] == [StartRunner]
    assert isinstance(actions[0], StartRunner)
    assert actions[0].runner_id == RunnerId("ra")


def test_is_idempotent_once_the_runner_exists() -> None:
    state = _state((_instance("a", "ra"), None))
    assert plan(state, HERE, {RunnerId("ra"): LocalRunnerPhase.STARTING}) == []


def test_stops_runners_no_longer_assigned() -> None:
    actions = plan(State(), HERE, {RunnerId("old"): LocalRunnerPhase.SERVING})
    assert actions == [StopRunner(runner_id=RunnerId("old"))]
    assert plan(State(), HERE, {RunnerId("old"): LocalRunnerPhase.STOPPING}) == []


def test_never_restarts_a_failed_runner() -> None:
    state = _state((_instance("a", "ra"), RunnerFailed(error_message="x")))
    assert plan(state, HERE, {}) == []


def test_routing_prefers_ready_then_least_loaded() -> None:
    loading = _instance("a-loading", "r1")
    ready_busy = _instance("b-busy", "r2")
    ready_idle = _instance("c-idle", "r3")
    state = _state(
        (loading, RunnerLoading()), (ready_busy, RunnerReady()), (ready_idle, RunnerReady())
    )
    busy_task = Task(
        task_id=TaskId("t"),
        command_id=CommandId("c"),
        instance_id=ready_busy.instance_id,
        kind="TextGeneration",
        task_status=TaskStatus.RUNNING,
    )
    state = msgspec.structs.replace(state, tasks={busy_task.task_id: busy_task})
    chosen = select_instance(state, MODEL)
    assert chosen is not None and chosen.instance_id == ready_idle.instance_id


def test_routing_skips_unavailable_placements() -> None:
    no_status = _instance("a", "r1")
    shutting = _instance("b", "r2")
    failed = _instance("c", "r3")
    state = _state(
        (no_status, None),
        (shutting, RunnerShuttingDown()),
        (failed, RunnerFailed(error_message="x")),
    )
    assert select_instance(state, MODEL) is None
    loading_only = _state((_instance("d", "r4"), RunnerLoading()))
    chosen = select_instance(loading_only, MODEL)
    assert chosen is not None and chosen.instance_id == InstanceId("d")
    assert select_instance(loading_only, ModelId("other/model")) is None
