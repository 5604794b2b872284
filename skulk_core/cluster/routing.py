"""Which placed instance serves a request for a model (pure)."""

from __future__ import annotations

from collections import Counter

from skulk_core.ids import InstanceId, ModelId
from skulk_core.state.shards import (
    Instance,
    RunnerLoaded,
    RunnerLoading,
    RunnerReady,
    RunnerRunning,
    RunnerStatus,
    RunnerWarmingUp,
)
from skulk_core.state.state import State, TaskStatus

_SERVING = (RunnerReady, RunnerRunning)
_COMING_UP = (RunnerLoading, RunnerLoaded, RunnerWarmingUp)


def _readiness(statuses: list[RunnerStatus | None]) -> int | None:
    """0 when every rank serves, 1 while any is still coming up, None when unavailable.

    A placement with any failed, shutting-down or status-less rank is unavailable.
    """
    if any(s is None for s in statuses):
        return None
    if all(isinstance(s, _SERVING) for s in statuses):
        return 0
    if all(isinstance(s, _SERVING + _COMING_UP) for s in statuses):
        return 1
    return None


def select_instance(state: State, model_id: ModelId) -> Instance | None:
    """Ready or running before loading; then the fewest active text tasks; then id order."""
    active: Counter[InstanceId] = Counter(
        task.instance_id
        for task in state.tasks.values()
        if task.task_status in (TaskStatus.PENDING, TaskStatus.RUNNING)
    )
    best: tuple[int, int, str] | None = None
    chosen: Instance | None = None
    for instance in state.instances.values():
        if instance.shard_assignments.model_id != model_id:
            continue
        statuses = [state.runners.get(r) for r in instance.shard_assignments.runner_to_shard]
        readiness = _readiness(statuses)
        if readiness is None:
            continue
        key = (readiness, active[instance.instance_id], instance.instance_id)
        if best is None or key < best:
            best, chosen = key, instance
    return chosen
